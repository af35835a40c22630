"""Checkpoint averaging: the mean of the last N checkpoints' weights (Vaswani et al. 2017, section 6.1).

The Transformer's base models were evaluated with the average of the last 5
checkpoints, written at 10-minute intervals; averaging smooths the noise of the last
updates and usually gains a little BLEU for free.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import torch

from plm.cpu.int8 import check_trainable
from plm.data.sentence_pairs import Seq2SeqTokenizers
from plm.errors import PLMError
from plm.models import PretrainedModel
from plm.storage.atomic_files import make_directory, staging_directory
from plm.storage.checkpoint import SNAPSHOTS_DIR, load_model, model_directory, save_model, snapshots, swap_in


def average_state_dicts(states: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The element-wise mean of state dicts with the same keys and shapes (accumulated in float64).

    A tensor that is not floating point (a counter) is taken from the last state dict.

    Args:
        states: the state dicts.

    Returns:
        The averaged state dict, each tensor in its own dtype.

    Raises:
        PLMError: no state dict, or state dicts of different keys or shapes.
    """
    if not states:
        raise PLMError("nothing to average: give at least one checkpoint")
    keys = list(states[0])
    for index, state in enumerate(states[1:], 2):
        if list(state) != keys or any(state[k].shape != states[0][k].shape for k in keys):
            raise PLMError(
                f"checkpoint {index} does not have the weights of checkpoint 1; only one model's can be averaged"
            )
    averaged = {}
    for key in keys:
        first = states[0][key]
        if not first.is_floating_point():  # counters and the like: take the last checkpoint's
            averaged[key] = states[-1][key].clone()
            continue
        total = sum((state[key].to(torch.float64) for state in states[1:]), states[0][key].to(torch.float64))
        averaged[key] = (total / len(states)).to(first.dtype)
    return averaged


def average_checkpoints(paths: Sequence[str | os.PathLike[str]]) -> PretrainedModel:
    """A model whose weights are the mean of the models saved in ``paths`` (same family and config).

    Args:
        paths: the model directories.

    Returns:
        The first model, holding the mean weights.

    Raises:
        PLMError: a model that cannot be loaded, an int8 one, or one of another config than the first.
    """
    seen: dict[Path, str | os.PathLike[str]] = {}
    for path in paths:
        earlier = seen.setdefault(Path(path).resolve(), path)
        if earlier is not path:  # it would weigh twice in the mean
            raise PLMError(f"{path}: given twice (as {earlier} too); average each checkpoint once")
    models = [load_model(path) for path in paths]
    for path, model in zip(paths, models):
        check_trainable(model, str(path))
    for path, model in zip(paths[1:], models[1:]):
        if model.config != models[0].config:
            raise PLMError(f"{path}: a model of another config than {paths[0]}; only one model's checkpoints average")
    models[0].load_state_dict(average_state_dicts([model.state_dict() for model in models]))
    return models[0]


def average_run(
    run: str | os.PathLike[str],
    out: str | os.PathLike[str],
    last: int | None = None,
    checkpoints: Sequence[str | os.PathLike[str]] = (),
    overwrite: bool = False,
) -> list[Path]:
    """Average a run's last snapshots, or the models in ``checkpoints``, into the model directory ``out``.

    The result is written with the run's tokenizer(s). ``out`` is written atomically and replaced only with
    ``overwrite``; it may not hold what it averages.

    Args:
        run: the run directory.
        out: the model directory to write.
        last: average the run's last ``last`` snapshots (None: every one it kept).
        checkpoints: the model directories to average instead of the run's snapshots.
        overwrite: replace ``out`` if it exists.

    Returns:
        The paths averaged, oldest snapshot first.

    Raises:
        PLMError: both ``last`` and ``checkpoints``, too few snapshots, an ``out`` that cannot be written or would
            replace what it averages, or models that cannot be averaged.
    """
    run, out = Path(run), Path(out)
    if checkpoints and last is not None:
        raise PLMError("give `last` N or checkpoint directories, not both")
    paths = [Path(path) for path in checkpoints] or last_snapshots(run, last)
    check_output(out, [run, *paths], overwrite)
    tokenizers = Seq2SeqTokenizers.load(model_directory(run))
    model = average_checkpoints(paths)
    parent = make_directory(out.parent)
    staging = staging_directory(parent, f".{out.name}-")
    save_model(model, staging, tokenizers)
    swap_in(staging, parent, out.name)
    return paths


def last_snapshots(run: Path, count: int | None) -> list[Path]:
    """The run's last ``count`` snapshots (all of them: None), oldest first.

    Args:
        run: the run directory.
        count: how many, or None for all.

    Returns:
        The snapshots' directories.

    Raises:
        PLMError: no such run directory, no snapshots, or fewer than ``count``.
    """
    if not run.is_dir():
        raise PLMError(f"{run}: no such run directory")
    kept = snapshots(run)
    if not kept:
        raise PLMError(f"{run}: no snapshots in {run / SNAPSHOTS_DIR}; train with `keep_last` N to keep the last N")
    if count is not None and len(kept) < count:
        raise PLMError(f"{run}: {len(kept)} snapshots in {run / SNAPSHOTS_DIR} ({', '.join(p.name for p in kept)}), "
                       f"fewer than `last` {count}")
    return kept[-count:] if count else kept


def check_output(out: Path, sources: Sequence[Path], overwrite: bool) -> None:
    """Check, before any work, that ``out`` can become the averaged model's directory without loss.

    Args:
        out: the model directory to write.
        sources: the run and the directories the average reads.
        overwrite: ``out`` may be replaced.

    Raises:
        PLMError: ``out`` is a file, exists without ``overwrite``, or is (or holds) one of ``sources``.
    """
    if out.exists() and not out.is_dir():
        raise PLMError(f"`out` {out}: is a file, not a directory")
    if out.exists() and not overwrite:
        raise PLMError(f"`out` {out} exists; pass `overwrite` to replace it")
    target = out.resolve()
    for source in sources:
        if target == source.resolve() or target in source.resolve().parents:
            raise PLMError(f"`out` {out} would replace {source}, which the average reads")
