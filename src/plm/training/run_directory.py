"""A training run's directory: one process at a time, what defines the run, and no leftovers.

- **The lock.** A process that trains in a run directory holds an OS lock on its ``.lock``
  file ([`run_lock`][plm.training.run_directory.run_lock]); a second process that would write there is refused, and told
  which process holds it. The OS drops the lock with the process, so a run killed by SIGKILL or a power loss does not
  block the next one.
- **The definition.** ``run.json`` keeps what defines the run
  ([`write_definition`][plm.training.run_directory.write_definition]): the command's options and a SHA-256 of each data
  file, so that ``--resume`` alone continues the same run, and a data file that changed since is noticed
  ([`file_digest`][plm.training.run_directory.file_digest]).
- **Leftovers.** A save killed halfway leaves its staging directory or temporary file behind;
  the run's next start deletes them, unread ([`remove_leftovers`][plm.training.run_directory.remove_leftovers]).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from plm.errors import PLMError, reading
from plm.storage.atomic_files import default_mode, make_directory, read_json, write_json
from plm.storage.checkpoint import (
    BEST_DIR,
    CHECKPOINT_DIR,
    PREVIOUS_CHECKPOINT_DIR,
    SNAPSHOTS_DIR,
    TRAINING_CONFIG_FILE,
    has_checkpoint,
    recover_checkpoint,
)

LOCK_FILE = ".lock"
DEFINITION_FILE = "run.json"  # what defines the run: the command, its options, its data's SHA-256
METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"  # --report-to tensorboard: the logged metrics as TensorBoard event files
TOKENIZER_DIR = "tokenizer"  # a tokenizer trained for the run
RESULT_FILE = "result.json"  # a finished fine-tuning run's lr, seed, steps and dev metrics
SUMMARY_FILE = "summary.json"  # a fine-tuning sweep's runs
SWEEP_DIR = "runs"  # a fine-tuning sweep's runs, one directory each
RUN_FILES = (CHECKPOINT_DIR, PREVIOUS_CHECKPOINT_DIR, SNAPSHOTS_DIR, BEST_DIR, METRICS_FILE, TRAINING_CONFIG_FILE,
             TOKENIZER_DIR, DEFINITION_FILE, RESULT_FILE, SUMMARY_FILE, SWEEP_DIR, TENSORBOARD_DIR)
# What an interrupted save leaves: the staging directories of checkpoint/, best/ and checkpoints/step-N/
# (plm.storage.atomic_files.staging_directory), the half-deleted directories of
# plm.storage.checkpoint.remove_directory, and the temporary files of plm.storage.atomic_files.atomic_open.
LEFTOVER = re.compile(r"\.(checkpoint|best|step|deleted)-.*|\..*\.tmp")

_held: dict[Path, list[int]] = {}  # this process's locks: resolved directory -> [file descriptor, depth]


@contextmanager
def run_lock(directory: str | Path, enabled: bool = True) -> Iterator[Path]:
    """Hold ``directory``'s lock (creating the directory) for the ``with`` block.

    The lock is re-entrant within a process (a fine-tuning sweep locks its directory, and each
    of its runs again). Another process holding it is a PLMError that names that process.
    ``enabled`` False (the processes of a torchrun job after the first) takes no lock.

    Args:
        directory: the run directory, created if missing.
        enabled: take the lock; False takes none.

    Yields:
        The run directory, locked until the ``with`` block ends.

    Raises:
        PLMError: the directory cannot be created, its lock file cannot be opened, or another
            process holds the lock.
    """
    directory = Path(directory)
    if not enabled:
        yield directory
        return
    created = not directory.exists()
    key = make_directory(directory).resolve()
    if key in _held:
        _held[key][1] += 1
        try:
            yield directory
        finally:
            _held[key][1] -= 1
        return
    path = directory / LOCK_FILE
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, default_mode())
    except OSError as error:
        raise PLMError(f"{path}: cannot open the run's lock file ({error.strerror})") from None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(descriptor, 4096).decode("utf-8", "replace")
        os.close(descriptor)
        raise in_use(directory, holder) from None
    # Who holds it, for the message of the process refused (the file is never deleted: a process could
    # open the old file just before, and lock it while another locks a new one).
    os.ftruncate(descriptor, 0)
    os.write(descriptor, json.dumps({"pid": os.getpid(), "command": command_line()}).encode())
    _held[key] = [descriptor, 1]
    try:
        yield directory
    finally:
        del _held[key]
        if created and [path.name for path in directory.iterdir()] == [LOCK_FILE]:  # refused before writing
            path.unlink()
            directory.rmdir()
        os.close(descriptor)  # releases the lock


@contextmanager
def claimed(out: str | Path, check: Callable[[], None], enabled: bool = True) -> Iterator[Path]:
    """``out`` checked by ``check`` and locked for the ``with`` block (``enabled``: see `run_lock`).

    The check runs before the lock, so that a refused run creates nothing, and again once locked,
    in case another process started a run there meanwhile. Within a claim of the same directory (the
    trainer that [`train_run`][plm.training.trainer.train_run] prepared, a fine-tuning run in its own
    directory), the directory was checked already: the claim only nests the lock.

    Args:
        out: the run directory.
        check: raises (a PLMError) when ``out`` cannot take the run.
        enabled: check and lock; False (the processes of a torchrun job after the first) does neither.

    Yields:
        The run directory, locked until the ``with`` block ends.

    Raises:
        PLMError: ``check`` refused the directory, or it could not be locked (see
            [`run_lock`][plm.training.run_directory.run_lock]).
    """
    checks = enabled and not holds_lock(out)
    if checks:
        check()
    with run_lock(out, enabled) as directory:
        if checks:
            check()
        yield directory


def holds_lock(directory: str | Path) -> bool:
    """Whether this process holds ``directory``'s lock (see [`run_lock`][plm.training.run_directory.run_lock]).

    Args:
        directory: a run directory.

    Returns:
        True inside a ``run_lock`` of it.
    """
    return Path(directory).exists() and Path(directory).resolve() in _held


def check_not_in_use(directory: str | Path) -> None:
    """Refuse a run directory whose lock another process holds, naming that process (as `run_lock` does).

    For the checks that would otherwise blame the directory's contents: a run that is still
    starting, or still training towards its first checkpoint, has none yet.

    Args:
        directory: the run directory; one without a lock file is not in use.

    Raises:
        PLMError: another process holds the lock.
    """
    path = Path(directory) / LOCK_FILE
    if not path.is_file() or path.parent.resolve() in _held:  # this process's own lock is no obstacle
        return
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return  # unreadable: run_lock says so when it is taken
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)  # only a test: released at once
    except BlockingIOError:
        raise in_use(Path(directory), os.read(descriptor, 4096).decode("utf-8", "replace")) from None
    finally:
        os.close(descriptor)


def in_use(directory: Path, holder: str) -> PLMError:
    """The error of a run directory locked by another process; ``holder`` is its lock file's contents."""
    return PLMError(f"{directory}: in use by {describe_holder(holder)}; wait until it ends or stop it "
                    "(a stopped run resumes with `resume`)")


def command_line() -> str:
    """This process's command as a user would type it (``plm pretrain ...``, ``python script.py ...``)."""
    program = sys.argv[0] if sys.argv and sys.argv[0] else "python"
    if program.endswith(os.path.join("plm", "cli", "main.py")):  # python -m plm.cli.main, as torchrun starts it
        return shlex.join(["python", "-m", "plm.cli.main", *sys.argv[1:]])
    if program == "-c":
        return " ".join(["python -c ...", shlex.join(sys.argv[1:])])
    return shlex.join([Path(program).name, *sys.argv[1:]])


def describe_holder(text: str) -> str:
    """"process 1234 (plm pretrain --out runs/x)" from a lock file's contents (written by `run_lock`)."""
    try:
        holder = json.loads(text)
        return f"process {holder['pid']} ({holder['command']})"
    except (json.JSONDecodeError, KeyError, TypeError):
        return "another process"  # it has locked the file but not yet said who it is


def remove_leftovers(directory: str | Path) -> list[Path]:
    """Delete what interrupted saves left in a run directory (and its snapshots); return what was deleted.

    An interrupted swap of ``checkpoint/`` or ``best/`` is finished first (its previous copy is the
    complete one), and a previous copy beside a complete new one is deleted.

    Args:
        directory: the run directory; one that does not exist has nothing to delete.

    Returns:
        The paths deleted.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return []
    removed = []
    for name in (CHECKPOINT_DIR, BEST_DIR):
        recover_checkpoint(directory, name)
        previous = directory / f".{name}-previous"
        if (directory / name).is_dir() and previous.exists():
            shutil.rmtree(previous)
            removed.append(previous)
    for folder in (directory, directory / SNAPSHOTS_DIR):
        if not folder.is_dir():
            continue
        for path in folder.iterdir():
            if LEFTOVER.fullmatch(path.name) and not path.name.endswith("-previous"):
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink()
                removed.append(path)
    return removed


def holds_run(directory: str | Path) -> bool:
    """Whether ``directory`` holds a training run's files (a run started, with or without a checkpoint yet).

    Args:
        directory: the run directory.

    Returns:
        True when any of `RUN_FILES` is there.
    """
    return any((Path(directory) / name).exists() for name in RUN_FILES)


def remove_run(directory: str | Path) -> None:
    """Delete the files of a run (``--overwrite``), so that nothing of it can be resumed; others stay.

    Args:
        directory: the run directory.
    """
    directory = Path(directory)
    for name in RUN_FILES:
        path = directory / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    remove_leftovers(directory)


def check_run_directory(out: Path, resume: bool, overwrite: bool) -> None:
    """Refuse an ``--out`` that cannot take this run, before anything is written.

    It must be a directory or not exist yet, sit under a directory (not a file), and
    hold nothing (but its lock), unless ``resume`` (it must then hold a checkpoint) or ``overwrite``.

    Args:
        out: the run directory (``--out``).
        resume: the run continues the one in ``out``.
        overwrite: the run may replace the run (or other files) in ``out``.

    Raises:
        PLMError: both ``resume`` and ``overwrite``; ``out`` or a parent is a file; the nearest existing
            parent is not writable; nothing to resume from (or, before its first checkpoint, a run that
            another process is training there); or ``out`` holds a run or other files.
    """
    if resume and overwrite:
        raise PLMError("`resume` continues the run in `out` and `overwrite` replaces it: give one of them")
    if out.exists() and not out.is_dir():
        raise PLMError(f"`out` {out}: is a file, not a directory")
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                raise PLMError(f"`out` {out}: {parent} is a file, not a directory")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise PLMError(f"`out` {out}: {parent} is not writable")
            break
    if resume:
        if not has_checkpoint(out):
            check_not_in_use(out)  # a run still training towards its first checkpoint
            raise PLMError(f"{out}: no checkpoint to resume from (drop `resume` to start a new run)")
        return
    if overwrite or not out.exists() or not any(path.name != LOCK_FILE for path in out.iterdir()):
        return
    if holds_run(out):
        raise PLMError(
            f"{out} holds a training run already; pass `resume` to continue it or `overwrite` to start again"
        )
    raise PLMError(f"{out} is not empty and holds no plm run; choose another `out` or pass `overwrite`")


def write_definition(directory: str | Path, definition: dict[str, Any]) -> None:
    """Write what defines the run to its ``run.json``.

    Args:
        directory: the run directory.
        definition: the command, its options and its data's SHA-256.
    """
    write_json(Path(directory) / DEFINITION_FILE, definition)


def read_definition(directory: str | Path) -> dict[str, Any] | None:
    """The run's saved definition; None for a run that has none (started by a plm before definitions).

    Args:
        directory: the run directory.

    Returns:
        The contents of its ``run.json``, or None when there is no such file.

    Raises:
        PLMError: a ``run.json`` that is not valid JSON.
    """
    path = Path(directory) / DEFINITION_FILE
    return read_json(path) if path.is_file() else None


def file_digest(path: str | Path) -> str:
    """The SHA-256 of a data file's contents.

    Args:
        path: the data file.

    Returns:
        The digest, as hexadecimal.

    Raises:
        PLMError: no such file, or a directory.
    """
    digest = hashlib.sha256()
    with reading(path, "a file"), open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def changed_fields(saved: Any, current: Any, prefix: str = "") -> list[str]:
    """The dotted names of the leaves that differ between two definitions.

    Args:
        saved: the saved definition (or a part of it).
        current: the current definition (or the same part of it).
        prefix: prepended to every name (the dotted path of the parts compared).

    Returns:
        The names, sorted by key at each level; empty when nothing differs.
    """
    if not (isinstance(saved, dict) and isinstance(current, dict)):
        return [] if saved == current else [prefix.rstrip(".")]
    return [name for key in sorted(set(saved) | set(current))
            for name in changed_fields(saved.get(key), current.get(key), f"{prefix}{key}.")]
