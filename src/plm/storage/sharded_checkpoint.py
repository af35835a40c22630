"""Sharded training checkpoints: every process writes its own shards, in safetensors.

An FSDP run (``--strategy fsdp``) never holds its whole model or optimizer state in
one process, so it saves with ``torch.distributed.checkpoint``: each process writes
the shards it holds to a safetensors file of its own (the offsets of each shard in
the file's header, never a pickle), under ``model-shards/`` and ``optimizer-shards/``
of the checkpoint directory, beside the ordinary ``config.json``, tokenizer, RNG
states and trainer state. The optimizer's non-tensor state (its parameter groups)
goes into the trainer state as JSON. Loading reads each process's part from whatever
files hold it, so a run resumes on another number of processes, and one process
reads the whole model back ([`read_model_shards`][plm.storage.sharded_checkpoint.read_model_shards]) to consolidate it.

The SHA-256 of every shard file is kept in the trainer state and checked before
reading, as plm's other safetensors files check theirs.
"""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from safetensors import SafetensorError
from torch import nn

from plm.errors import PLMError
from plm.storage.atomic_files import flatten_optimizer, unflatten_optimizer

if TYPE_CHECKING:
    from torch.distributed.checkpoint import HuggingFaceStorageWriter

# torch.distributed.checkpoint is imported by the functions that use it: it takes about a second,
# which every plm command would pay at start-up, and only FSDP runs write or read shards.

MODEL_SHARDS = "model-shards"
OPTIMIZER_SHARDS = "optimizer-shards"


def is_sharded_checkpoint(directory: str | Path) -> bool:
    """Whether the checkpoint in ``directory`` was saved as shards (it has ``model-shards/``).

    Args:
        directory: the checkpoint directory.

    Returns:
        True for a sharded checkpoint.
    """
    return (Path(directory) / MODEL_SHARDS).is_dir()


def save_shards(directory: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Write this process's shards of ``model`` and ``optimizer`` into ``directory``; every process calls it.

    Args:
        directory: the checkpoint directory.
        model: the FSDP-sharded model.
        optimizer: its optimizer.

    Returns:
        What the trainer state keeps: the optimizer's parameter groups and scalars (``optimizer``), and, on
        the first process, the SHA-256 of each shard file (``shards``, once every process has written its own).
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    tensors, structure = flatten_optimizer(get_optimizer_state_dict(model, optimizer))
    dcp.save(get_model_state_dict(model), storage_writer=writer(directory / MODEL_SHARDS))
    dcp.save(tensors, storage_writer=writer(directory / OPTIMIZER_SHARDS))
    dist.barrier()
    return {"optimizer": structure, "shards": shard_digests(directory) if dist.get_rank() == 0 else {}}


def load_shards(directory: Path, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Fill this process's shards of ``model`` and ``optimizer`` from a checkpoint written by `save_shards`.

    The processes that wrote it may have been more or fewer: each reads the slices it holds now.

    Args:
        directory: the checkpoint directory.
        model: the FSDP-sharded model, filled in place.
        optimizer: its optimizer, filled in place.
        state: the trainer state saved with the checkpoint (the optimizer's structure, the shards' digests).

    Raises:
        PLMError: a shard file missing or changed, or shards that do not hold this model's tensors.
    """
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    check_digests(directory, state)
    weights = get_model_state_dict(model)
    read(weights, directory / MODEL_SHARDS)
    set_model_state_dict(model, weights)
    # The optimizer's state is made (zeros) to give the loader its shapes and shards, then read.
    tensors, _ = flatten_optimizer(get_optimizer_state_dict(model, optimizer))
    read(tensors, directory / OPTIMIZER_SHARDS)
    set_optimizer_state_dict(model, optimizer, unflatten_optimizer(tensors, state["optimizer"], key=str))


def read_model_shards(directory: Path, weights: dict[str, torch.Tensor], state: dict[str, Any]) -> None:
    """Fill the whole tensors ``weights`` (name -> tensor) in place from the shards of all processes, in one process.

    Args:
        directory: the checkpoint directory.
        weights: name -> a tensor of the whole parameter's shape, filled in place.
        state: the trainer state saved with the checkpoint.

    Raises:
        PLMError: a shard file missing or changed, or shards that do not hold these tensors.
    """
    check_digests(directory, state)
    read(weights, directory / MODEL_SHARDS, no_dist=True)


def writer(path: Path) -> HuggingFaceStorageWriter:
    """The storage writer of ``torch.distributed.checkpoint`` that writes safetensors shards into ``path``.

    Args:
        path: the shards' directory.

    Returns:
        The writer.
    """
    from torch.distributed.checkpoint import HuggingFaceStorageWriter

    return HuggingFaceStorageWriter(str(path), save_distributed=True)


def read(tensors: dict[str, Any], path: Path, no_dist: bool = False) -> None:
    """Fill ``tensors`` in place from the safetensors shards in ``path``.

    Args:
        tensors: name -> tensor (or shard) to fill; their shapes say what to read.
        path: the shards' directory.
        no_dist: read in one process, without the process group.

    Raises:
        PLMError: the shards do not hold these tensors, or cannot be read.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageReader
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        with warnings.catch_warnings():  # reading in one process is what no_dist asks for; no need to warn of it
            warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
            dcp.load(tensors, storage_reader=HuggingFaceStorageReader(str(path)), no_dist=no_dist)
    except (CheckpointException, SafetensorError, OSError, RuntimeError, ValueError, AssertionError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise PLMError(f"{path}: the shards do not hold this model's tensors ({reason})") from None


def shard_files(directory: Path) -> list[Path]:
    """The shard files of a checkpoint, model's and optimizer's, in sorted order.

    Args:
        directory: the checkpoint directory.

    Returns:
        Their paths.
    """
    return sorted(
        path for part in (MODEL_SHARDS, OPTIMIZER_SHARDS) for path in (directory / part).glob("*.safetensors")
    )


def shard_digests(directory: Path) -> dict[str, str]:
    """The SHA-256 of every shard file of a checkpoint.

    Args:
        directory: the checkpoint directory.

    Returns:
        Path relative to ``directory`` -> hex digest.
    """
    return {str(path.relative_to(directory)): digest(path) for path in shard_files(directory)}


def digest(path: Path) -> str:
    """The SHA-256 of a file.

    Args:
        path: the file.

    Returns:
        The hex digest.
    """
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def check_digests(directory: Path, state: dict[str, Any]) -> None:
    """Check that every shard file the checkpoint lists is there, whole and unchanged.

    Args:
        directory: the checkpoint directory.
        state: the trainer state, whose ``shards`` lists the files and their digests.

    Raises:
        PLMError: a listed shard file is missing or does not match its digest.
    """
    for name, expected in state.get("shards", {}).items():
        path = directory / name
        if not path.is_file():
            raise PLMError(f"{path}: shard file missing from the checkpoint")
        if digest(path) != expected:
            raise PLMError(f"{path}: the shard does not match the checksum saved with the checkpoint; "
                           "it was truncated or changed after it was written")
