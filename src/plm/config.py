"""Family configurations: frozen dataclasses that print, save and load as JSON."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from plm.errors import PLMError

C = TypeVar("C")


def config_to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)


def config_from_dict(cls: type[C], values: dict[str, Any], source: str = "config") -> C:
    """Build ``cls`` from ``values``; unknown or ill-typed fields are a PLMError naming ``source``."""
    names = {field.name for field in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise PLMError(f"{source}: unknown {cls.__name__} field(s) {', '.join(unknown)}")
    try:
        return cls(**values)
    except (TypeError, ValueError) as error:
        raise PLMError(f"{source}: invalid {cls.__name__}: {error}") from None
