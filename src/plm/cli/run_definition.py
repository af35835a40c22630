"""A training command's flags, saved with its run, so that ``--resume`` with nothing but ``--out`` continues it.

Every training command (``pretrain``, ``seq2seq train``, ``finetune``) saves its flags and the
SHA-256 of each data file in ``OUT/run.json`` before its first step. On ``--resume`` the flags not
given take the saved values; a flag given with another value is refused, naming it, except those
that may change on a resume (:data:`CHANGEABLE`): ``--steps`` to extend a run, ``--device``, and
progress, logging and saving. A data file whose contents changed is refused too, unless
``--allow-data-change``.
"""

from __future__ import annotations

import argparse
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plm.errors import PLMError, PLMWarning
from plm.training.run_directory import DEFINITION_FILE, file_digest, read_definition

# Flags that may differ on --resume: how long the run goes on, where it runs, how it reports and saves.
CHANGEABLE = ("steps", "minutes", "device", "no_progress", "log_every", "save_every", "keep_last", "compile",
              "offload", "checkpoint_activations")
# What says how to start, not what the run is (and argparse's own entries).
NOT_SAVED = ("out", "resume", "overwrite", "allow_data_change", "run", "command", "command_name", "action",
             "given_flags")


@dataclass(frozen=True)
class RunFlags:
    """A training command's name, which of its flags name data files (their contents define the run), and
    which it requires (but for a --resume, which has them from the run)."""

    command: str
    data: tuple[str, ...] = ()
    required: tuple[str, ...] = ()


def run_definition(args: argparse.Namespace, flags: RunFlags) -> dict[str, Any]:
    """What defines the run ``args`` describe, to save in ``OUT/run.json``.

    On ``--resume``, ``args`` is first completed from the run's saved definition (see the module's doc).
    """
    if args.resume:
        restore(args, flags)
    missing = [flag_name(dest) for dest in flags.required if getattr(args, dest) is None]
    if missing:
        raise PLMError(f"the following arguments are required: {', '.join(missing)}")
    # A file that is not there is the reader's to name, with the flag's other checks.
    return {"command": flags.command, "flags": saved_flags(args, flags),
            "data": {dest: {path: file_digest(path) for path in paths(getattr(args, dest)) if os.path.isfile(path)}
                     for dest in flags.data if getattr(args, dest)}}


def restore(args: argparse.Namespace, flags: RunFlags) -> None:
    """Complete ``args`` from the run's saved flags; refuse a contradicting flag or changed data."""
    out = Path(args.out)
    saved = read_definition(out)
    if saved is None:
        if out.is_dir():
            warnings.warn(f"{out} has no {DEFINITION_FILE} (a run of an older plm): it resumes with the flags given "
                          "here, the defaults for the others", PLMWarning, stacklevel=2)
        return  # no run there: the trainer says so
    if saved.get("command") != flags.command:
        raise PLMError(f"{out}: a run of plm {saved.get('command')}, not of plm {flags.command}; resume it with "
                       f"plm {saved.get('command')} --out {out} --resume")
    current = saved_flags(args, flags)
    for dest, value in saved["flags"].items():
        if dest not in current:
            continue  # a flag this plm no longer has
        if dest not in args.given_flags:
            setattr(args, dest, value)
        elif dest not in CHANGEABLE and current[dest] != value:
            flag = flag_name(dest)
            started = f"with {flag} {shown(value)}" if value not in (None, [], False) else f"without {flag}"
            raise PLMError(f"{flag} {shown(current[dest])}: the run in {out} was started {started}; --resume "
                           f"continues a run as it was started (drop {flag}), or start a new run in another --out")
    for dest, files in saved.get("data", {}).items():
        for path, digest in files.items():
            if not os.path.isfile(path):
                raise PLMError(f"{flag_name(dest)} {path}: the run's data file is gone")
            if not args.allow_data_change and file_digest(path) != digest:
                raise PLMError(f"{flag_name(dest)} {path}: the file changed since the run started (its SHA-256 is not "
                               f"the one in {out / DEFINITION_FILE}); pass --allow-data-change to go on with its new "
                               "contents")


def saved_flags(args: argparse.Namespace, flags: RunFlags) -> dict[str, Any]:
    """The flags to save, as JSON values; data files by their absolute paths (a resume may start elsewhere)."""
    values = {dest: value for dest, value in vars(args).items() if dest not in NOT_SAVED}
    for dest in flags.data:
        if values.get(dest):
            absolute = [os.path.abspath(path) for path in paths(values[dest])]
            values[dest] = absolute if isinstance(values[dest], (list, tuple)) else absolute[0]
    return json.loads(json.dumps(values, default=str))


def paths(value: str | list[str] | tuple[str, ...] | None) -> list[str]:
    if not value:
        return []
    return [value] if isinstance(value, str) else list(value)


def flag_name(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def shown(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(map(str, value)) or "(none)"
    if isinstance(value, bool):
        return "on" if value else "off"
    return "(none)" if value is None else str(value)
