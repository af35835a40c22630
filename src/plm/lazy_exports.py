"""A package's names imported at their first use (PEP 562), so that importing one small module is cheap.

``import plm``, or a process that needs one module of it (a prepare's worker, which encodes
text with numpy and the tokenizers library), then does not import PyTorch until it needs it.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from typing import Any


def lazy_getattr(namespace: dict[str, Any], exports: dict[str, str],
                 renamed: dict[str, str] | None = None) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports each exported name, or a subpackage, at its first use.

    Args:
        namespace: the package's ``globals()``, where each name is kept once imported.
        exports: each exported name -> the module that defines it.
        renamed: exported name -> its name in that module, where the two differ.

    Returns:
        The ``__getattr__`` to assign in the package.
    """
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        if name in exports:
            value = getattr(importlib.import_module(exports[name]), (renamed or {}).get(name, name))
        elif importlib.util.find_spec(f"{package}.{name}") is not None:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    return __getattr__
