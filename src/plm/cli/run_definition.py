"""A training command's flags, saved with its run, so that ``--resume`` with nothing but ``--out`` continues it.

Every training command (``pretrain``, ``seq2seq train``, ``finetune``) saves its flags and the
SHA-256 of each data file in ``OUT/run.json`` before its first step. On ``--resume`` the flags not
given take the saved values; a flag given with another value is refused, naming it, except those
that may change on a resume (`CHANGEABLE`): ``--steps`` to extend a run, ``--device``, and
progress, logging and saving. A data file whose contents changed is refused too, unless
``--allow-data-change``. Data files, and the files and directories other flags name, are saved by their
absolute paths, so that a resume may start in another working directory.
"""

from __future__ import annotations

import argparse
import json
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from plm.data.prepared import MANIFEST
from plm.errors import PLMError, PLMWarning
from plm.models import PRESETS, RECIPES
from plm.training.run_directory import DEFINITION_FILE, check_not_in_use, file_digest, holds_run, read_definition

# Flags that may differ on --resume: how long the run goes on, where it runs, how it reports and saves.
CHANGEABLE = ("steps", "minutes", "device", "no_progress", "log_every", "save_every", "keep_last", "compile",
              "offload", "checkpoint_activations")
# What says how to start, not what the run is (and argparse's own entries).
NOT_SAVED = ("out", "resume", "overwrite", "allow_data_change", "run", "command", "command_name", "action",
             "given_flags", "flag_of", "flag_actions")
# Which command started the run, when another than the definition's own (plm demo's run is a plm pretrain run).
STARTED_BY = "started_by"


@dataclass(frozen=True)
class RunFlags:
    """A training command's name, which of its flags name data files (their contents define the run), which
    name other files or directories (a model, a tokenizer: saved by their absolute paths, but for the names
    of plm's presets and families and Hub ids), which it requires (but for a --resume, which has them from
    the run), and which it renamed (old -> new name, as saved), so that a run saved under an old name
    resumes under the new one."""

    command: str
    data: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    required: tuple[str, ...] = ()
    renamed: Mapping[str, str] = field(default_factory=dict)


def run_definition(args: argparse.Namespace, flags: RunFlags) -> dict[str, Any]:
    """What defines the run ``args`` describe, to save in ``OUT/run.json``.

    On ``--resume``, ``args`` is first completed from the run's saved definition (see the module's doc).
    """
    started_by = restore(args, flags).get(STARTED_BY) if args.resume else None
    missing = [flag_name(dest) for dest in flags.required if getattr(args, dest) is None]
    if missing:
        raise PLMError(f"the following arguments are required: {', '.join(missing)}")
    # A file that is not there is the reader's to name, with the flag's other checks.
    definition = {"command": flags.command, "flags": saved_flags(args, flags),
                  "data": {dest: {os.path.abspath(path): file_digest(path) for path in data_files(getattr(args, dest))
                                  if os.path.isfile(path)}
                           for dest in flags.data if getattr(args, dest)}}
    return definition | ({STARTED_BY: started_by} if started_by else {})


def restore(args: argparse.Namespace, flags: RunFlags) -> dict[str, Any]:
    """Complete ``args`` from the run's saved flags; refuse a contradicting flag or changed data, or no run.

    Returns:
        The run's saved definition (empty for a run of a plm before definitions).
    """
    out = Path(args.out)
    saved = read_definition(out)
    if saved is None:
        check_not_in_use(out)  # a run still starting has written nothing yet
        if not holds_run(out):
            raise PLMError(f"{out}: no run there, so no checkpoint to resume from (drop --resume to start a new run)")
        warnings.warn(f"{out} has no {DEFINITION_FILE} (a run of an older plm): it resumes with the flags given "
                      "here, the defaults for the others", PLMWarning, stacklevel=2)
        return {}
    current = saved_flags(args, flags)
    check_definition(saved, out, getattr(args, "flag_actions", {}), current)
    if saved.get("command") != flags.command:
        raise PLMError(f"{out}: a run of plm {saved.get('command')}, not of plm {flags.command}; resume it with "
                       f"plm {saved.get('command')} --out {out} --resume")
    for dest, value in renamed(saved["flags"], flags.renamed).items():
        if dest not in current:
            continue  # a flag this plm no longer has
        if dest not in args.given_flags:
            setattr(args, dest, value)
        elif dest not in CHANGEABLE and current[dest] != value:
            flag = flag_name(dest)
            started = f"with {flag} {shown(value)}" if value not in (None, [], False) else f"without {flag}"
            extend = "; --steps N extends it" if dest == "epochs" and "steps" in current else ""
            raise PLMError(f"{flag} {shown(current[dest])}: the run in {out} was started {started}; --resume "
                           f"continues a run as it was started (drop {flag}{extend}), or start a new run in another "
                           "--out")
    for dest, files in renamed(saved.get("data", {}), flags.renamed).items():
        for path, digest in files.items():
            if not os.path.isfile(path):
                raise PLMError(f"{flag_name(dest)} {path}: the run's data file is gone")
            if not args.allow_data_change and file_digest(path) != digest:
                raise PLMError(f"{flag_name(dest)} {path}: the file changed since the run started (its SHA-256 is not "
                               f"the one in {out / DEFINITION_FILE}); pass --allow-data-change to go on with its new "
                               "contents")
    return saved


def check_definition(
    saved: Any, out: Path, actions: Mapping[str, argparse.Action], current: Mapping[str, Any]
) -> None:
    """Refuse a run definition that is not the object plm writes: its flags each of the kind the flag takes.

    A resume sets the flags not given to the saved values, so a value edited or damaged by hand
    (a word for --steps, one path where a list of them belongs) is refused here, naming the flag,
    before it reaches the run.

    Args:
        saved: the parsed ``run.json``.
        out: the run directory.
        actions: the command's argparse actions by destination (a saved flag the command no longer has
            is skipped, as on restoring).
        current: the flags of this command line, as they would be saved.

    Raises:
        PLMError: a definition that is not an object, without its flags, or with a flag of the wrong kind.
    """
    where = out / DEFINITION_FILE
    if not isinstance(saved, dict) or not isinstance(saved.get("flags"), dict):
        raise PLMError(f"{where}: not a run definition (an object with the run's flags); it is damaged: give the "
                       "run's flags again with a new --out, or restore the file")
    data = saved.get("data", {})
    if not isinstance(data, dict) or not all(isinstance(files, dict) for files in data.values()):
        raise PLMError(f"{where}: its data is not the files by flag that plm writes; it is damaged")
    for dest, value in saved["flags"].items():
        action = actions.get(dest)
        if action is not None and not saved_value_fits(action, value, current.get(dest)):
            raise PLMError(f"{where}: {action.option_strings[-1] if action.option_strings else dest} is saved as "
                           f"{json.dumps(value)}, which that flag does not take; the file is damaged")


def saved_value_fits(action: argparse.Action, value: Any, current: Any) -> bool:
    """Whether a saved JSON value is one that ``action`` could have parsed: its kind, type and choices.

    Args:
        action: the flag's argparse action.
        value: its saved value.
        current: the value this command line gives it, as saved: the shape of a flag whose type makes a list of
            one word (``--mask-ratios 0.8,0.1,0.1``).

    Returns:
        True for a value the flag takes (None, a flag left unset, included).
    """
    if action.nargs == 0:  # a switch: store_true, store_false, --x/--no-x, store_const
        return isinstance(value, bool) or value in (action.const, action.default)
    if value is None:
        return True
    many = isinstance(action, argparse._AppendAction) or action.nargs in ("+", "*") or isinstance(action.nargs, int)
    if not many and isinstance(current, list):  # one word parsed into a list: the same length, the same kinds
        return isinstance(value, list) and len(value) == len(current) and all(
            type(item) is type(given) or {type(item), type(given)} == {int, float}
            for item, given in zip(value, current))
    if not many and isinstance(value, list):  # one word parsed into a list, unset on this command line
        return all(isinstance(item, (int, float, str)) and not isinstance(item, bool) for item in value)
    if many != isinstance(value, list):
        return False
    for item in value if many else [value]:
        if isinstance(item, (dict, list, bool)):
            return False
        try:
            parsed = action.type(str(item)) if callable(action.type) else str(item)
        except (ValueError, TypeError, argparse.ArgumentTypeError):
            return False
        if action.choices is not None and parsed not in action.choices:
            return False
    return True


def renamed(values: dict[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """``values`` saved by a plm before ``names`` (old -> new) were renamed, under their new names; as they are
    where the new names are saved already."""
    if any(new in values for new in names.values()):
        return values
    return {names.get(dest, dest): value for dest, value in values.items()}


def saved_flags(args: argparse.Namespace, flags: RunFlags) -> dict[str, Any]:
    """The flags to save, as JSON values; files and directories by their absolute paths (a resume may start
    elsewhere).

    Data files are made absolute as given (the reader names one that is missing); the other paths only
    when they exist, and never a name of plm's (``--model gpt2-mini`` stays a preset, even beside a
    directory of that name, which plm does not read in its place) nor a Hub id.
    """
    values = {dest: value for dest, value in vars(args).items() if dest not in NOT_SAVED}
    for dest in (*flags.data, *flags.paths):
        if values.get(dest):
            absolute = [absolute_path(path, dest in flags.data) for path in listed(values[dest])]
            values[dest] = absolute if isinstance(values[dest], (list, tuple)) else absolute[0]
    return json.loads(json.dumps(values, default=str))


def absolute_path(path: str, data: bool) -> str:
    """``path`` made absolute, if a data file or an existing path that is not the name of a preset or family."""
    if data or (path not in PRESETS and path not in RECIPES and os.path.exists(path)):
        return os.path.abspath(path)
    return path


def data_files(value: str | list[str] | tuple[str, ...] | None) -> list[str]:
    """The files whose contents define a data flag's: each file given, and a prepared corpus' manifest, which
    holds the hashes of its inputs and its tokenizer."""
    return [os.path.join(path, MANIFEST) if os.path.isdir(path) else path for path in listed(value)]


def listed(value: str | list[str] | tuple[str, ...] | None) -> list[str]:
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
