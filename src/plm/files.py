"""Files written atomically and read with clear errors: JSON, safetensors, caches.

Everything plm writes goes to a temporary file in the same directory that replaces
the target with one rename, so a killed process leaves the old file or the new
one, never half of one.
"""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save

from plm.errors import PLMError


def cache_dir() -> Path:
    """Where plm keeps what it can rebuild: ``$PLM_CACHE``, else ``~/.cache/plm``."""
    return Path(os.environ.get("PLM_CACHE") or Path.home() / ".cache" / "plm")


@contextmanager
def atomic_open(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Open ``path`` for writing so that readers see the old file or the whole new one.

    The data goes to a temporary file in the same directory that replaces ``path``
    only when the ``with`` block ends without an error.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            yield file
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def write_json(path: str | os.PathLike[str], value: Any) -> None:
    with atomic_open(path) as file:
        file.write(json.dumps(value, indent=2).encode("utf-8"))


def read_json(path: str | os.PathLike[str]) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PLMError(f"{path}: file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise PLMError(f"{path}: not valid JSON ({error})") from None


def write_tensors(
    path: str | os.PathLike[str], tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None
) -> None:
    data = save({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, metadata=metadata)
    with atomic_open(path) as file:
        file.write(data)


def read_tensors(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    if not Path(path).is_file():
        raise PLMError(f"{path}: file not found")
    try:
        return load_file(str(path), device="cpu")
    except (SafetensorError, OSError) as error:
        raise PLMError(f"{path}: not a readable safetensors file, perhaps truncated ({error})") from None
