"""Model directories and training checkpoints, written atomically.

A model directory holds ``config.json`` (family + config), ``model.safetensors``
and, when there is one, the tokenizer. A training run directory keeps its latest
checkpoint in ``checkpoint/``: the model directory plus the optimizer, the RNG
states of every process and the step. A new checkpoint is written to a temporary
directory and swapped in with renames, so a run killed at any moment leaves the
previous checkpoint or the new one, never half of one.
With ``keep_last``, ``checkpoints/step-NNNNNN/`` also keeps the model directories of
the last saves, for checkpoint averaging.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from plm.config import config_from_dict, config_to_dict
from plm.cpu.int8 import QUANTIZATIONS, check_device, quantization_of, quantize
from plm.errors import PLMError, with_article
from plm.models import FAMILIES, PretrainedModel
from plm.storage.atomic_files import (
    flatten_optimizer,
    make_directory,
    read_json,
    read_tensors,
    staging_directory,
    unflatten_optimizer,
    write_json,
    write_tensors,
)
from plm.storage.sharded_checkpoint import is_sharded_checkpoint, load_shards, read_model_shards

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
CHECKPOINT_DIR = "checkpoint"
PREVIOUS_CHECKPOINT_DIR = ".checkpoint-previous"
BEST_DIR = "best"  # the model a task objective's validation metric chose
SNAPSHOTS_DIR = "checkpoints"  # the models of the last saves, kept to be averaged: step-000500/ ...
STATE_FILE = "trainer_state.json"
TRAINING_CONFIG_FILE = "training_config.json"  # the first file a training run writes
OPTIMIZER_FILE = "optimizer.safetensors"
RNG_FILE = "rng.safetensors"


class Saveable(Protocol):
    """What a model directory keeps beside the model: anything that writes its own files into a directory.

    A [`Tokenizer`][plm.tokenization.tokenizer.Tokenizer], a released model's tokenizer (any
    [`TokenizerLike`][plm.tokenization.protocol.TokenizerLike]), or an encoder-decoder's two
    ([`Seq2SeqTokenizers`][plm.data.sentence_pairs.Seq2SeqTokenizers]). Declared here, where they are saved, since this
    layer imports no tokenizer.
    """

    def save(self, directory: str | os.PathLike[str]) -> None:
        """Write the files into ``directory``, which exists.

        Args:
            directory: where to write them.
        """
        ...


def model_directory(path: str | os.PathLike[str]) -> Path:
    """The model directory of ``path``: itself, or a training run's best model, else its latest checkpoint.

    Args:
        path: a model directory or a training run's directory.

    Returns:
        The directory that holds the model's ``config.json``.

    Raises:
        PLMError: no such directory, a training run that saved no model yet, or a directory without a
            ``config.json``.
    """
    path = Path(path)
    if (path / CONFIG_FILE).is_file():
        return path
    recover_checkpoint(path)
    recover_checkpoint(path, BEST_DIR)
    if (path / BEST_DIR / CONFIG_FILE).is_file():
        return path / BEST_DIR
    if (path / CHECKPOINT_DIR / CONFIG_FILE).is_file():
        return path / CHECKPOINT_DIR
    if not path.exists():
        raise PLMError(f"{path}: no such model directory")
    if is_training_run(path):
        raise PLMError(f"{path}: a training run that saved no model yet (it stopped before its first checkpoint); "
                       "continue it with `resume` or train it again")
    raise PLMError(f"{path}: not a plm model directory (no {CONFIG_FILE})")


def is_training_run(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a training run's directory (with or without a model saved yet).

    Args:
        path: a directory.

    Returns:
        True when it holds a training run's ``training_config.json``.
    """
    return (Path(path) / TRAINING_CONFIG_FILE).is_file()


def save_model(
    model: PretrainedModel, directory: str | Path, tokenizer: Saveable | None = None,
    weights: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write config, weights (and tokenizer) of ``model`` into ``directory``.

    Args:
        model: the model to save.
        directory: where to write it (created if needed).
        tokenizer: saved beside the model when given.
        weights: replaces ``model.state_dict()``: the whole tensors of a sharded model.

    Returns:
        The model directory.
    """
    directory = make_directory(directory)
    weights = model.state_dict() if weights is None else weights
    write_tensors(directory / WEIGHTS_FILE, weights, metadata={"format": "pt", "family": model.family})
    save_description(model, directory, tokenizer)
    return directory


def save_description(model: PretrainedModel, directory: Path, tokenizer: Saveable | None = None) -> None:
    """Write ``config.json`` (and the tokenizer): a model directory but for its weights.

    Args:
        model: the model whose family, config and quantization are written.
        directory: the directory to write into.
        tokenizer: saved beside the description when given.
    """
    description: dict[str, Any] = {"family": model.family, "config": config_to_dict(model.config)}
    if quantization_of(model) is not None:
        description["quantization"] = quantization_of(model)
    write_json(directory / CONFIG_FILE, description)
    if tokenizer is not None:
        tokenizer.save(directory)


def load_model(path: str | os.PathLike[str], device: str | torch.device = "cpu") -> PretrainedModel:
    """Load a model saved by `save_model` (or a run's latest checkpoint), in eval mode.

    A sharded checkpoint (an FSDP run's) is read whole from the shards of all its processes.
    Under ``torch.device("meta")`` only its shapes are made
    ([`reads_no_weights`][plm.storage.checkpoint.reads_no_weights]).

    Args:
        path: a model directory or a training run (see [`model_directory`][plm.storage.checkpoint.model_directory]).
        device: where the weights go.

    Returns:
        The model.

    Raises:
        PLMError: no model at ``path``, an unknown family or quantization, or weights that do not fit
            the config.
    """
    directory = model_directory(path)
    model_cls, config, description = read_description(directory)
    with torch.device("meta"):
        model = model_cls(config)
    quantization = description.get("quantization")
    if quantization is not None:  # the int8 layers, to be filled with the saved values and scales
        if quantization not in QUANTIZATIONS:
            raise PLMError(f"{directory / CONFIG_FILE}: unknown quantization {quantization!r}; plm knows "
                           f"{', '.join(QUANTIZATIONS)}")
        check_device(device)
        quantize(model, quantization)
    if reads_no_weights():
        return model.eval()
    if is_sharded_checkpoint(directory):
        weights = {name: torch.empty(t.shape, dtype=t.dtype) for name, t in model.state_dict().items()}
        read_model_shards(directory, weights, read_json(directory / STATE_FILE))
        load_weights(model, weights, str(directory))
    else:
        load_weights(model, read_tensors(directory / WEIGHTS_FILE), str(directory / WEIGHTS_FILE))
    return model.to(device).eval()


def reads_no_weights() -> bool:
    """Whether models are being built on the meta device, for their shapes alone: then no weights are read.

    FSDP's processes after the first build their model so
    ([`built_on_first_process`][plm.training.parallel.built_on_first_process]): the first reads the weights and sends
    each process its shards, so the others need not hold them whole.

    Returns:
        True when the default device is the meta device.
    """
    return torch.get_default_device().type == "meta"


def read_description(directory: Path) -> tuple[type[PretrainedModel], Any, dict[str, Any]]:
    """The model class, its config and the whole description of ``directory/config.json``, checked.

    Args:
        directory: a model directory.

    Returns:
        The model class, its config and the description as read.

    Raises:
        PLMError: an unknown family, no ``"config"``, or a config that is not the family's.
    """
    description = read_json(directory / CONFIG_FILE)
    family = description.get("family") if isinstance(description, dict) else None
    if family not in FAMILIES:
        raise PLMError(f"{directory / CONFIG_FILE}: unknown model family {family!r}; plm knows {', '.join(FAMILIES)}")
    model_cls = FAMILIES[family]
    if "config" not in description:
        raise PLMError(f"{directory / CONFIG_FILE}: no \"config\" (the {family} model's fields)")
    config = config_from_dict(
        model_cls.config_class, description["config"], str(directory / CONFIG_FILE), complete=True
    )
    return model_cls, config, description


def load_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor], source: str) -> None:
    """Load ``weights`` into ``model`` (possibly on the meta device); any mismatch is a PLMError.

    Args:
        model: the model to fill.
        weights: the tensors by name.
        source: where they came from, for the message.

    Raises:
        PLMError: missing, unexpected or wrongly shaped weights.
    """
    expected = model.state_dict()
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(set(weights) - set(expected))
    wrong_shape = sorted(k for k in set(expected) & set(weights) if expected[k].shape != weights[k].shape)
    if missing or unexpected or wrong_shape:
        parts = [
            f"{label} {', '.join(keys[:3])}{' ...' if len(keys) > 3 else ''}"
            for label, keys in (("missing", missing), ("unexpected", unexpected), ("wrong shape", wrong_shape))
            if keys
        ]
        raise PLMError(f"{source}: weights do not fit a {type(model).__name__} of this config: {'; '.join(parts)}")
    model.load_state_dict(weights, assign=True)


# Training checkpoints -------------------------------------------------------------


def save_checkpoint(
    run_directory: str | Path,
    model: PretrainedModel,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    tokenizer: Saveable | None = None,
    rng: Sequence[dict[str, torch.Tensor]] | None = None,
    shards: Path | None = None,
) -> Path:
    """Atomically replace ``run_directory/checkpoint`` with the current training state.

    ``rng`` holds the [`rng_states`][plm.storage.checkpoint.rng_states] of every process in rank order (default: this
    process's), since each process of a data-parallel run draws its own dropout masks.
    ``shards`` is the staging directory into which every process of a sharded run wrote
    its part of the model and optimizer ([`save_shards`][plm.storage.sharded_checkpoint.save_shards],
    whose result ``state`` holds); it is completed and swapped in.

    Args:
        run_directory: the training run's directory.
        model: the model being trained.
        optimizer: its optimizer.
        state: the trainer's state (step, ...), saved as JSON.
        tokenizer: saved with the model when given.
        rng: the RNG states of every process, in rank order.
        shards: the staging directory of a sharded run's parts.

    Returns:
        The new checkpoint directory.
    """
    run_directory = make_directory(run_directory)
    if shards is None:
        staging = staging_directory(run_directory, ".checkpoint-")
        save_model(model, staging, tokenizer)
        tensors, structure = flatten_optimizer(optimizer.state_dict())
        write_tensors(staging / OPTIMIZER_FILE, tensors)
        state = {**state, "optimizer": structure}
    else:
        staging = shards
        save_description(model, staging, tokenizer)
    rng = rng or [rng_states()]
    write_tensors(
        staging / RNG_FILE, {f"{rank}.{key}": t for rank, states in enumerate(rng) for key, t in states.items()}
    )
    write_json(staging / STATE_FILE, state)
    return swap_in(staging, run_directory, CHECKPOINT_DIR)


def save_best(
    run_directory: str | Path, model: PretrainedModel, tokenizer: Saveable | None = None,
    weights: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Atomically replace ``run_directory/best`` with ``model`` (a plain model directory).

    Args:
        run_directory: the training run's directory.
        model: the model to save.
        tokenizer: saved with the model when given.
        weights: see [`save_model`][plm.storage.checkpoint.save_model].

    Returns:
        The ``best`` directory.
    """
    run_directory = make_directory(run_directory)
    staging = staging_directory(run_directory, f".{BEST_DIR}-")
    save_model(model, staging, tokenizer, weights)
    return swap_in(staging, run_directory, BEST_DIR)


def swap_in(staging: Path, run_directory: Path, name: str) -> Path:
    """Move the finished ``staging`` directory to ``run_directory/name``, replacing what was there.

    Two renames: a kill between them leaves ``.name-previous``, which
    [`recover_checkpoint`][plm.storage.checkpoint.recover_checkpoint] moves back, so a complete directory always
    survives.

    Args:
        staging: the finished directory.
        run_directory: the directory to move it into.
        name: its name there.

    Returns:
        ``run_directory/name``.
    """
    final, previous = run_directory / name, run_directory / f".{name}-previous"
    if final.exists():
        shutil.rmtree(previous, ignore_errors=True)
        os.replace(final, previous)
    os.replace(staging, final)
    shutil.rmtree(previous, ignore_errors=True)
    return final


def save_snapshot(
    run_directory: str | Path, model: PretrainedModel, step: int, keep: int, tokenizer: Saveable | None = None,
    weights: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Atomically write ``model`` to ``run_directory/checkpoints/step-NNNNNN`` and delete all but the last ``keep``.

    The snapshot is staged under a dot name, so a run killed while writing it leaves
    nothing that [`snapshots`][plm.storage.checkpoint.snapshots] lists.

    Args:
        run_directory: the training run's directory.
        model: the model to save.
        step: the optimizer step, which names the snapshot.
        keep: how many snapshots to keep.
        tokenizer: saved with the model when given.
        weights: see [`save_model`][plm.storage.checkpoint.save_model].

    Returns:
        The snapshot's directory.
    """
    directory = make_directory(Path(run_directory) / SNAPSHOTS_DIR)
    staging = staging_directory(directory, ".step-")
    save_model(model, staging, tokenizer, weights)
    path = swap_in(staging, directory, f"step-{step:06d}")
    for old in snapshots(run_directory)[:-keep]:
        remove_directory(old)
    return path


def snapshots(run_directory: str | Path) -> list[Path]:
    """The run's kept snapshots ([`save_snapshot`][plm.storage.checkpoint.save_snapshot]), oldest first.

    Args:
        run_directory: the training run's directory.

    Returns:
        The snapshot directories.
    """
    directory = Path(run_directory) / SNAPSHOTS_DIR
    if not directory.is_dir():
        return []
    found = [path for path in directory.iterdir() if re.fullmatch(r"step-\d+", path.name) and path.is_dir()]
    return sorted(found, key=snapshot_step)


def snapshot_step(path: Path) -> int:
    """The step of a snapshot directory.

    Args:
        path: a ``step-NNNNNN`` directory.

    Returns:
        NNNNNN as a number.
    """
    return int(path.name.removeprefix("step-"))


def drop_snapshots(run_directory: str | Path, after: int) -> None:
    """Delete the snapshots of steps after ``after``: a resumed run writes them again, a new run (0) has none.

    Args:
        run_directory: the training run's directory.
        after: the last step whose snapshot stays.
    """
    for path in snapshots(run_directory):
        if snapshot_step(path) > after:
            remove_directory(path)


def remove_directory(path: Path) -> None:
    """Rename ``path`` to a dot name, then delete it: a kill halfway leaves no half directory under its name.

    Args:
        path: the directory to delete.
    """
    trash = staging_directory(path.parent, ".deleted-")
    os.replace(path, trash / path.name)
    shutil.rmtree(trash)


def has_checkpoint(run_directory: str | Path) -> bool:
    """Whether a run has a checkpoint to resume from (or the previous one of an interrupted swap).

    Args:
        run_directory: the training run's directory.

    Returns:
        True when ``checkpoint/`` or ``.checkpoint-previous/`` is there.
    """
    run_directory = Path(run_directory)
    return (run_directory / CHECKPOINT_DIR).is_dir() or (run_directory / PREVIOUS_CHECKPOINT_DIR).is_dir()


def recover_checkpoint(run_directory: Path, name: str = CHECKPOINT_DIR) -> None:
    """Finish a swap ([`swap_in`][plm.storage.checkpoint.swap_in]) that a kill interrupted between its two renames.

    Args:
        run_directory: the directory the swap was in.
        name: the swapped directory's name.
    """
    final, previous = run_directory / name, run_directory / f".{name}-previous"
    if not final.exists() and previous.is_dir():
        os.replace(previous, final)


def load_checkpoint(
    run_directory: str | Path, model: PretrainedModel, optimizer: torch.optim.Optimizer, rank: int = 0,
    processes: int = 1, sharded: bool = False,
) -> dict[str, Any]:
    """Restore model, optimizer and process ``rank``'s RNG states in place; return the saved trainer state.

    A replicated run resumes on the number of ``processes`` that wrote the checkpoint (one RNG
    state each): the global batch, and which process draws which examples and dropout masks,
    depend on it. A ``sharded`` run (FSDP) may resume on another number: each process reads the
    shards it now holds, takes its own RNG state if the run had that process (else keeps its
    seed), and the trainer keeps the global batch (see ``micro_batches`` in the state).

    Args:
        run_directory: the training run's directory.
        model: the model to restore, of the checkpoint's config.
        optimizer: its optimizer.
        rank: this process's rank.
        processes: the number of processes of the resumed run.
        sharded: whether the run is sharded (FSDP).

    Returns:
        The saved trainer state.

    Raises:
        PLMError: no checkpoint, another strategy or (unsharded) another number of processes than the
            run's, a model of another config, or no RNG state for this process.
    """
    run_directory = Path(run_directory)
    recover_checkpoint(run_directory)
    directory = run_directory / CHECKPOINT_DIR
    if not (directory / STATE_FILE).is_file():
        raise PLMError(f"{run_directory}: no checkpoint to resume from")
    if is_sharded_checkpoint(directory) != sharded:
        saved, asked = ("fsdp", "ddp") if not sharded else ("ddp", "fsdp")
        raise PLMError(f"{run_directory}: the run was trained with `strategy` {saved} and is resumed with `strategy` "
                       f"{asked}; resume it with `strategy` {saved}")
    rng = read_tensors(directory / RNG_FILE)
    saved_processes = len({key.split(".", 1)[0] for key in rng})
    if saved_processes != processes and not sharded:
        raise PLMError(f"{run_directory}: the run was trained on {saved_processes} process(es) and is resumed on "
                       f"{processes}; resume it on {saved_processes} processes, "
                       "since the global batch and each process's random stream depend on it")
    _, config, description = read_description(directory)
    if config != model.config:
        raise PLMError(f"{directory}: checkpoint is {with_article(description['family'])} model of another config "
                       "than this run's; resume with the model and options the run was started with (the CLI takes "
                       "them from the run's run.json when they are left out)")
    state = read_json(directory / STATE_FILE)
    check_trainer_state(state, directory / STATE_FILE, sharded)
    if sharded:
        load_shards(directory, model, optimizer, state)
    else:
        model.load_state_dict(load_model(directory).state_dict())
        try:
            optimizer.load_state_dict(unflatten_optimizer(read_tensors(directory / OPTIMIZER_FILE), state["optimizer"]))
        except ValueError as error:  # torch's check that the parameter groups match
            raise PLMError(f"{directory}: the optimizer state does not fit this plm's optimizer ({error}); the run "
                           "was saved by another version of plm: finish it with that version, or start a new run "
                           "from its model (`model`)") from None
        except (KeyError, TypeError, IndexError) as error:  # a structure that is not the one plm writes
            raise PLMError(f"{directory / STATE_FILE}: the optimizer's structure is damaged ({error!r}); the "
                           "checkpoint cannot be resumed") from None
    state.pop("optimizer")
    state.pop("shards", None)
    prefix = f"{rank}."
    states = {k.removeprefix(prefix): t for k, t in rng.items() if k.startswith(prefix)}
    if states:
        restore_rng_states(states)
    elif not sharded:
        raise PLMError(
            f"{directory}: no RNG state of process {rank}; resume with the processes of the run that wrote it"
        )
    return state


def whole_number(value: Any, least: int) -> bool:
    """Whether ``value`` is an int (not a bool) of at least ``least``: what a count or a step must be."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def real_number(value: Any) -> bool:
    """Whether ``value`` is an int or a float (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# Each field of a trainer state: whether a value of it is well formed (None where the field may be null).
TRAINER_STATE_FIELDS: dict[str, tuple[str, Any]] = {
    "step": ("a whole number >= 0", lambda value: whole_number(value, 0)),
    "steps": ("a whole number >= 1", lambda value: whole_number(value, 1)),
    "micro_batches": ("a whole number >= 1", lambda value: whole_number(value, 1)),
    "elapsed": ("a number of seconds >= 0", lambda value: real_number(value) and value >= 0),
    "best": ("a number or null", lambda value: value is None or real_number(value)),
    "decay_start": ("null or [step, learning rate]", lambda value: value is None or (
        isinstance(value, list) and len(value) == 2 and whole_number(value[0], 0) and real_number(value[1]))),
    "scaler": ("null or an object", lambda value: value is None or isinstance(value, dict)),
}


def check_trainer_state(state: Any, path: Path, sharded: bool) -> None:
    """Refuse a checkpoint's trainer state that a resumed run could not continue from.

    A resumed run acts on these numbers before it trains (it cuts its log back to ``step``), so a
    state edited or damaged by hand must be refused before anything is read from it or written.

    Args:
        state: the parsed JSON of ``path``.
        path: the checkpoint's trainer state file, for the message.
        sharded: the run is sharded (its optimizer state lies in the shards).

    Raises:
        PLMError: a state that is not an object, a required field missing, or a field of the wrong kind.
    """
    if not isinstance(state, dict):
        raise PLMError(f"{path}: not a trainer state (a JSON object); the checkpoint is damaged")
    required = ("step",) if sharded else ("step", "optimizer")
    missing = [name for name in required if name not in state]
    if missing:
        raise PLMError(f"{path}: no {', '.join(missing)}; the checkpoint is damaged")
    for name, (kind, well_formed) in TRAINER_STATE_FIELDS.items():
        if name in state and not well_formed(state[name]):
            raise PLMError(f"{path}: {name} must be {kind}, got {json.dumps(state[name])}; the checkpoint is damaged")
    if not sharded and not isinstance(state["optimizer"], dict):
        raise PLMError(f"{path}: optimizer must be an object, got {json.dumps(state['optimizer'])}; the checkpoint "
                       "is damaged")


def rng_states() -> dict[str, torch.Tensor]:
    """This process's RNG states as tensors: torch's (CPU and each GPU), NumPy's and Python's.

    Returns:
        The states by name: ``cpu``, ``numpy``, ``python``, ``cuda0`` ...
    """
    states = {
        "cpu": torch.get_rng_state(),
        "numpy": json_tensor(np_state_to_json()),
        "python": json_tensor(python_rng_state()),
    }
    if torch.cuda.is_available():
        for index, cuda_state in enumerate(torch.cuda.get_rng_state_all()):
            states[f"cuda{index}"] = cuda_state
    return states


def restore_rng_states(states: dict[str, torch.Tensor]) -> None:
    """Set this process's RNG states to those [`rng_states`][plm.storage.checkpoint.rng_states] returned.

    Args:
        states: the states by name.
    """
    torch.set_rng_state(states["cpu"])
    restore_np_state(tensor_json(states["numpy"]))
    restore_python_rng(tensor_json(states["python"]))
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            if f"cuda{index}" in states:
                torch.cuda.set_rng_state(states[f"cuda{index}"], index)


def json_tensor(value: Any) -> torch.Tensor:
    """``value`` as the UTF-8 bytes of its JSON, so that safetensors can hold it.

    Args:
        value: anything JSON can write.

    Returns:
        A uint8 tensor.
    """
    return torch.frombuffer(bytearray(json.dumps(value).encode()), dtype=torch.uint8)


def tensor_json(tensor: torch.Tensor) -> Any:
    """The value a [`json_tensor`][plm.storage.checkpoint.json_tensor] holds.

    Args:
        tensor: the uint8 tensor.

    Returns:
        The value read back from its JSON.
    """
    return json.loads(tensor.numpy().tobytes().decode())


def np_state_to_json() -> list[Any]:
    """NumPy's global RNG state as JSON-ready values.

    Returns:
        The state's parts, the key array as a list.
    """
    state = np.random.get_state()
    assert isinstance(state, tuple)  # the legacy form, which numpy's global MT19937 generator gives
    name, keys, position, has_gauss, cached = state
    return [name, keys.tolist(), position, has_gauss, cached]


def restore_np_state(state: list[Any]) -> None:
    """Set NumPy's global RNG state.

    Args:
        state: as [`np_state_to_json`][plm.storage.checkpoint.np_state_to_json] returned it.
    """
    name, keys, position, has_gauss, cached = state
    np.random.set_state((name, np.array(keys, dtype=np.uint32), position, has_gauss, cached))


def python_rng_state() -> list[Any]:
    """Python's ``random`` state as JSON-ready values.

    Returns:
        The version, the internal state as a list and the cached gauss value.
    """
    version, internal, gauss = random.getstate()
    return [version, list(internal), gauss]


def restore_python_rng(state: list[Any]) -> None:
    """Set Python's ``random`` state.

    Args:
        state: as [`python_rng_state`][plm.storage.checkpoint.python_rng_state] returned it.
    """
    version, internal, gauss = state
    random.setstate((version, tuple(internal), gauss))
