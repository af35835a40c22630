"""Files written atomically and read with clear errors: JSON, safetensors, caches.

Everything plm writes goes to a temporary file in the same directory that replaces
the target with one rename, so a killed process leaves the old file or the new
one, never half of one. A write that fails (no such directory, no permission, a
full disk) is a PLMError naming the file, and leaves no temporary file behind.

The safetensors files plm writes carry the SHA-256 of their tensor data in the
header's metadata; reading checks it, so weights damaged or edited after saving
are an error instead of a model that silently computes something else.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save

from plm.errors import PLMError

CHECKSUM_KEY = "sha256"  # in a safetensors header's __metadata__: the SHA-256 of the data after the header


def cannot_write(path: str | os.PathLike[str], error: OSError) -> PLMError:
    """The PLMError that says ``path`` cannot be written, and why.

    Args:
        path: the file.
        error: the operating system's error.

    Returns:
        The error, to raise.
    """
    return PLMError(f"{path}: cannot write ({error.strerror or error})")


def make_directory(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` and its parents if missing; a PLMError if that is impossible.

    Args:
        path: the directory.

    Returns:
        The directory.

    Raises:
        PLMError: the directory cannot be created (a file of that name is in the way, no permission, ...).
    """
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        reason = "a file of that name is in the way" if isinstance(error, FileExistsError) else error.strerror
        raise PLMError(f"{path}: cannot create the directory ({reason})") from None
    return path


def default_mode(directory: bool = False) -> int:
    """The mode a plain ``open``/``mkdir`` would give under the process's umask (0o644 and 0o755 under 0o022).

    ``tempfile`` creates files 0o600 and directories 0o700, which would make every run
    directory and checkpoint private to its owner once renamed into place.

    Args:
        directory: the mode of a directory rather than a file.

    Returns:
        The mode.
    """
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if directory else 0o666) & ~umask


def staging_directory(parent: str | os.PathLike[str], prefix: str) -> Path:
    """A new hidden directory in ``parent`` to write into before renaming it into place, with the default mode.

    Args:
        parent: the directory it is created in.
        prefix: the start of its name.

    Returns:
        The new directory.
    """
    staging = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    os.chmod(staging, default_mode(directory=True))
    return staging


@contextmanager
def temporary_beside(path: str | os.PathLike[str]) -> Iterator[tuple[int, str]]:
    """A temporary file in ``path``'s directory that replaces ``path`` when the block ends without an error.

    Otherwise it is removed, and ``path`` is as it was. A write that fails names ``path``.

    Args:
        path: the file to write; its directory is created if missing.

    Yields:
        The temporary file's descriptor, open for writing, and its name.

    Raises:
        PLMError: the directory cannot be created, or the file cannot be written, closed or renamed into place.
    """
    path = Path(path)
    make_directory(path.parent)
    try:
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as error:
        raise cannot_write(path, error) from None
    try:
        os.chmod(temporary, default_mode())
        yield fd, temporary
        os.replace(temporary, path)
    except BaseException as error:
        os.unlink(temporary)
        # A failed write or close names no file, a failed rename the temporary one: both are this file's.
        if isinstance(error, OSError) and error.filename in (None, temporary):
            raise cannot_write(path, error) from None
        raise


@contextmanager
def atomic_open(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Open ``path`` for writing so that readers see the old file or the whole new one (`temporary_beside`).

    Args:
        path: the file to write; its directory is created if missing.

    Yields:
        The temporary file, open for writing bytes.

    Raises:
        PLMError: the directory cannot be created, or the file cannot be written, closed or renamed into place.
    """
    with temporary_beside(path) as (fd, _), os.fdopen(fd, "wb") as file:
        yield file


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """The name of a temporary file for a writer that opens files itself; it becomes ``path`` when all is well.

    Args:
        path: the file to write; its directory is created if missing.

    Yields:
        The temporary file's path (the file exists, empty).

    Raises:
        PLMError: the directory cannot be created, or the file cannot be written, closed or renamed into place.
    """
    with temporary_beside(path) as (fd, temporary):
        os.close(fd)
        yield Path(temporary)


def write_png(figure: Any, path: str | os.PathLike[str], dpi: int = 110) -> None:
    """Write a matplotlib ``figure`` to ``path`` as a PNG, whole or not at all, and close it.

    Args:
        figure: the matplotlib figure (closed afterwards, written or not: pyplot keeps every open one).
        path: the PNG file.
        dpi: its resolution.

    Raises:
        PLMError: the file cannot be written.
    """
    from matplotlib import pyplot  # only the commands that draw pay for matplotlib

    try:
        with atomic_open(path) as file:
            figure.savefig(file, format="png", dpi=dpi)
    finally:
        pyplot.close(figure)


def write_json(path: str | os.PathLike[str], value: Any) -> None:
    """Write ``value`` as indented JSON to ``path``, atomically.

    Args:
        path: the file.
        value: what to write; it must be JSON-serialisable.

    Raises:
        PLMError: the file cannot be written.
    """
    with atomic_open(path) as file:
        file.write(json.dumps(value, indent=2).encode("utf-8"))


def read_json(path: str | os.PathLike[str]) -> Any:
    """The JSON value in ``path``.

    Args:
        path: the file.

    Returns:
        The value.

    Raises:
        PLMError: the file is missing, or not valid JSON in UTF-8.
    """
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PLMError(f"{path}: file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise PLMError(f"{path}: not valid JSON ({error})") from None


def write_tensors(
    path: str | os.PathLike[str], tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None
) -> None:
    """A safetensors file whose metadata holds the SHA-256 of its tensor data (see `read_tensors`).

    The tensors are written contiguous, from the CPU, atomically.

    Args:
        path: the file.
        tensors: name -> tensor.
        metadata: string metadata for the header, besides the checksum.

    Raises:
        PLMError: the file cannot be written.
    """
    data = memoryview(save({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, metadata=metadata))
    # The checksum goes into the header, which precedes the data: rewrite the header with it.
    length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(bytes(data[8 : 8 + length]))
    header.setdefault("__metadata__", {})[CHECKSUM_KEY] = hashlib.sha256(data[8 + length :]).hexdigest()
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # safetensors keeps the data 8-byte aligned
    with atomic_open(path) as file:
        file.write(struct.pack("<Q", len(encoded)))
        file.write(encoded)
        file.write(data[8 + length :])


def read_tensors(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file; its checksum is verified when it has one (plm wrote it).

    Args:
        path: the file.

    Returns:
        Name -> tensor, on the CPU.

    Raises:
        PLMError: the file is missing, not a readable safetensors file, or does not match its checksum.
    """
    if not Path(path).is_file():
        raise PLMError(f"{path}: file not found")
    try:
        tensors = load_file(str(path), device="cpu")
    except (SafetensorError, OSError) as error:
        raise PLMError(f"{path}: not a readable safetensors file, perhaps truncated ({error})") from None
    verify_checksum(path)
    return tensors


def verify_checksum(path: str | os.PathLike[str]) -> None:
    """Compare the data of a (readable) safetensors file with the SHA-256 in its header, if any.

    The file was just read, so hashing it again reads from the page cache.

    Args:
        path: the file.

    Raises:
        PLMError: the data does not match the checksum.
    """
    with open(path, "rb") as file:
        length = struct.unpack("<Q", file.read(8))[0]
        expected = json.loads(file.read(length)).get("__metadata__", {}).get(CHECKSUM_KEY)
        if expected is None:
            return  # written by another program, or by plm before it kept checksums
        actual = hashlib.file_digest(file, "sha256").hexdigest()
    if actual != expected:
        raise PLMError(
            f"{path}: the tensor data does not match the checksum saved with it; "
            "the file was damaged or changed after it was written"
        )


def flatten_optimizer(state_dict: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Split an optimizer state dict into tensors (for safetensors) and JSON (the rest).

    Its per-parameter state may be keyed by index (``Optimizer.state_dict``) or by
    parameter name (``torch.distributed.checkpoint``'s): a tensor is named "KEY.FIELD".

    Args:
        state_dict: the optimizer's state dict.

    Returns:
        The tensors by name, and the rest (``param_groups`` and each parameter's non-tensor ``scalars``).
    """
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for key, values in state_dict["state"].items():
        for field, value in values.items():
            if torch.is_tensor(value):
                tensors[f"{key}.{field}"] = value
            else:
                scalars.setdefault(str(key), {})[field] = value
    return tensors, {"param_groups": state_dict["param_groups"], "scalars": scalars}


def unflatten_optimizer(
    tensors: dict[str, torch.Tensor], structure: dict[str, Any], key: Callable[[str], Any] = int
) -> dict[str, Any]:
    """The state dict `flatten_optimizer` split; ``key`` turns "KEY" back (``int``, or ``str`` for names).

    Args:
        tensors: the tensors by name.
        structure: the rest, as [`flatten_optimizer`][plm.storage.atomic_files.flatten_optimizer] returned it.
        key: turns a parameter's key back from its string.

    Returns:
        The optimizer state dict.
    """
    state: dict[Any, dict[str, Any]] = {}
    for name, value in tensors.items():
        owner, field = name.rsplit(".", 1)
        state.setdefault(key(owner), {})[field] = value
    for owner, values in structure["scalars"].items():
        state.setdefault(key(owner), {}).update(values)
    return {"state": state, "param_groups": structure["param_groups"]}
