"""What every command does alike: its parser, the groups of flags it takes (declared in `plm.cli.flags`),
loading its model and writing its outputs."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch

from plm.cli import flags
from plm.cli.flags import RENAMED_GIVEN
from plm.cli.flags import positive_float as positive_float  # the value types, where commands have found them
from plm.cli.flags import positive_int as positive_int
from plm.data.corpus import read_text
from plm.device import resolve_device
from plm.errors import PLMError, with_article
from plm.loading import inference_weights, load_pretrained
from plm.models import CausalLM, Encoder, PretrainedModel
from plm.storage.atomic_files import make_directory, staging_directory
from plm.storage.checkpoint import swap_in
from plm.tokenization.tokenizer import Tokenizer
from plm.training.parallel import Parallelism
from plm.training.run_directory import LOCK_FILE, run_lock
from plm.training.trainer import TrainingConfig


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line and exit code 2, named by the (sub)command they belong to.

    A subcommand's parser refuses flags it does not know itself, so that the error names it and
    its ``--help`` (argparse would leave them to the top-level parser: "plm: error: ... see plm
    --help"), and suggests the nearest it knows ("did you mean --steps?"); the deepest one also
    records its name as ``command_name`` and its flag for each library field as ``flag_of``, for the
    errors of the run. A flag has its one spelling:
    no abbreviation of it is taken. An old spelling of a renamed flag says so, once.
    """

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.field_flags: dict[str, str] = {}

    def name_fields(self, **flag_of_field: str) -> None:
        """Say which of this command's flags sets each library field named otherwise (``num_beams="--beam"``).

        A library error names fields (`FIELD`); the command line prints the flag in place
        of each (`in_flags`). A flag whose destination is the field's name needs no entry.
        """
        self.field_flags.update(flag_of_field)

    def flag_of(self) -> dict[str, str]:
        """This command's flag for each field: its own flags by destination and field, the fields it names
        otherwise, and for a field that none of its flags sets, the vocabulary's flag (another command's)."""
        own = {}
        for action in self._actions:
            long = [option for option in action.option_strings if option.startswith("--")]
            if long:
                own[action.dest] = own[getattr(action, "field", None) or action.dest] = long[0]
        return {**flags.vocabulary_flags(), **own, **self.field_flags}

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if self._subparsers is None:
            if extras:
                self.error(f"unrecognized arguments: {' '.join(extras)}" + self.suggestion(extras))
            for old, new in dict.fromkeys(vars(namespace).pop(RENAMED_GIVEN, [])):
                print(f"{self.prog}: warning: {old} is now {new}", file=sys.stderr)
            namespace.command_name = self.prog
            namespace.given_flags = self.given_flags(args)
            namespace.flag_of = self.flag_of()
            namespace.flag_actions = {action.dest: action for action in self._actions}
        return namespace, extras

    def suggestion(self, words: list[str]) -> str:
        """"; did you mean --steps?" for the first unknown flag among ``words`` that is near one of this parser's."""
        known = [option for action in self._actions if action.help != argparse.SUPPRESS
                 for option in action.option_strings if option.startswith("--")]
        for word in words:
            if word.startswith("--"):
                near = difflib.get_close_matches(word.split("=")[0], known, n=1)
                if near:
                    return f"; did you mean {near[0]}?"
        return ""

    def given_flags(self, args: list[str] | None) -> set[str]:
        """The destinations of the options ``args`` gives, not left to their defaults (``--resume`` tells them apart).

        ``args`` is parsed again with every default suppressed: what is set then was given.
        """
        actions = [action for action in self._actions if action.default is not argparse.SUPPRESS]
        saved = [(action.default, action.required) for action in actions]
        try:
            for action in actions:
                action.default, action.required = argparse.SUPPRESS, False
            given, _ = super().parse_known_args(args, argparse.Namespace())
        finally:
            for action, (default, required) in zip(actions, saved):
                action.default, action.required = default, required
        return set(vars(given)) & {action.dest for action in actions}

    def error(self, message: str) -> None:  # type: ignore[override]
        wrong = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)  # a command, a choice's value
        if wrong:
            near = difflib.get_close_matches(wrong.group(1), re.findall(r"'([^']*)'", wrong.group(2)), n=1)
            message += f"; did you mean {near[0]}?" if near else ""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows defaults and keeps the examples in descriptions as written.

    A default is shown only when it says something: not when the help text already
    explains it, and not for None, an empty list or an off switch.
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        unhelpful = action.default is None or action.default == [] or isinstance(action, argparse._StoreTrueAction)
        if unhelpful or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def add_device(parser: argparse._ActionsContainer, note: str = "") -> None:
    flags.DEVICE.add(parser, note=note)


def add_weights(parser: argparse.ArgumentParser, quantize: bool = True) -> None:
    """How an inference command holds the weights: fp32, --precision bf16 (or another) or --quantize int8."""
    group = parser.add_argument_group("weights", "fp32 unless one of these says otherwise (one at most)")
    choice = group.add_mutually_exclusive_group()
    add_inference_precision(choice)
    if quantize:
        flags.QUANTIZE.add(choice)


def add_inference_precision(parser: argparse._ActionsContainer) -> None:
    flags.PRECISION.add(parser, default="fp32", note="inference casts the weights to it: bf16 halves the bytes read "
                        "per token, fast where the hardware multiplies bf16 (see docs/speed.md); fp16 is for GPUs")


def inference_device(args: argparse.Namespace) -> torch.device:
    """--device, except that --quantize runs on the CPU (its int8 kernel is the CPU's) when the device is auto."""
    return resolve_device("cpu" if getattr(args, "quantize", None) and args.device == "auto" else args.device)


ModelT = TypeVar("ModelT", bound=PretrainedModel)


def with_weights(model: ModelT, args: argparse.Namespace) -> ModelT:
    """``model`` with the weights --quantize or --precision ask for (a model saved quantized already is int8)."""
    return inference_weights(model, getattr(args, "precision", "fp32"), getattr(args, "quantize", None))


def add_seed(parser: argparse._ActionsContainer, note: str = "") -> None:
    flags.SEED.add(parser, note=note)


def add_model(parser: argparse.ArgumentParser, help: str, hub: bool = True) -> None:
    """--model, and with ``hub`` the Hub ids it also takes and --revision to pin one."""
    if not hub:
        parser.add_argument("--model", required=True, help=help)
        return
    parser.add_argument("--model", required=True, help=f"{help}; or a Hugging Face Hub id (owner/name), fetched "
                        "into the Hugging Face cache (a local path of the same spelling wins)")
    add_revision(parser)


def add_revision(parser: argparse._ActionsContainer) -> None:
    flags.REVISION.add(parser)


def load_causal_lm(args: argparse.Namespace) -> tuple[CausalLM, Tokenizer]:
    """--model's causal model (plm or Hugging Face directory, or a training run) on --device, with its weights
    as the weights flags ask, and its tokenizer."""
    model, tokenizer = load_pretrained(args.model, inference_device(args), args.revision)
    if not isinstance(model, CausalLM):
        raise PLMError(f"{args.model}: {with_article(model.family)} model does not generate text")
    return with_weights(model, args), tokenizer


def load_encoder(args: argparse.Namespace) -> tuple[Encoder, Tokenizer]:
    """--model's encoder (BERT, ALBERT, DeBERTa; plm or Hugging Face directory) on --device, with its weights
    as the weights flags ask, and its tokenizer."""
    model, tokenizer = load_pretrained(args.model, inference_device(args), args.revision)
    if not isinstance(model, Encoder):
        raise PLMError(f"{args.model}: {with_article(model.family)} model is not an encoder (BERT, ALBERT or "
                       "DeBERTa)")
    return with_weights(model, args), tokenizer


def add_tag_column(parser: argparse._ActionsContainer) -> None:
    """--tag-column as the task commands take it: by default the last column."""
    flags.TAG_COLUMN.add(parser, note="tag: default the last, for files of 2 columns or CoNLL-2003's 4; others must "
                         "say")


def add_task_input(parser: argparse._ActionsContainer) -> None:
    """How the task commands (finetune, predict, eval task) read their examples: --max-length, and --stride for qa's
    windows and --tag-column for tag's files."""
    flags.MAX_LENGTH.add(parser, note="128, or for qa 384 per window as BERT's SQuAD (the default)")
    flags.STRIDE.add(parser, default=128, note="qa: the windows of a long context")
    add_tag_column(parser)


def line_items(path: str | None, what: str) -> list[str]:
    """Every line of ``path`` (standard input when None), each of which must hold ``what``.

    A command whose output row n answers input line n refuses an empty line rather than skip it,
    which would shift every row after it.
    """
    text = read_text(path) if path else sys.stdin.read()
    lines = text.removesuffix("\n").split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            raise PLMError(f"{path or 'stdin'}:{number}: empty line; every line must hold {what}")
    return lines


def add_no_progress(parser: argparse._ActionsContainer) -> None:
    flags.NO_PROGRESS.add(parser)


def add_time_budget(parser: argparse._ActionsContainer) -> None:
    """``--minutes``: a wall-clock budget for a training run, as in plm compare's ``minutes`` budget."""
    flags.MINUTES.add(
        parser,
        note="resumes added up, or at --steps, whichever comes first. The learning-rate schedule is still laid out "
        "over --steps: a cosine or linear decay is cut where the time runs out, not squeezed into it (warmup, "
        "inverse-sqrt and constant do not depend on --steps); for a full decay within the budget give about the "
        "steps that fit, else a --steps the run will not reach",
    )


def add_run_directory(parser: argparse.ArgumentParser, default: str, resume_help: str = "") -> None:
    """``--out``, ``--resume``, ``--allow-data-change`` and ``--overwrite``: where a training command trains."""
    group = parser.add_argument_group("run directory (see docs/runs.md)")
    group.add_argument("--out", default=default, help="run directory")
    flags.RESUME.add(group, note=resume_help)
    flags.ALLOW_DATA_CHANGE.add(group)
    group.add_argument("--overwrite", action="store_true",
                       help="start a new run in an --out that holds a run (its files are deleted) or other files")


def add_schedule(parser: argparse.ArgumentParser) -> None:
    """How long and how a training command optimizes: steps, batches, the optimizer, its schedule, what it logs.

    The optimizer's flags left out take the family recipe's values; `training_config` reads them all.
    """
    flags.STEPS.add(parser, default=1000)
    add_time_budget(parser)
    flags.GRAD_ACCUM.add(parser)
    group = parser.add_argument_group("optimizer (each defaults to the family's recipe)")
    flags.HYPERPARAMETERS.add(group)
    for flag in (flags.OPTIMIZER, flags.LR, flags.MIN_LR, flags.WARMUP, flags.SCHEDULE, flags.BETAS, flags.EPS,
                 flags.WEIGHT_DECAY, flags.CLIP):
        flag.add(group)
    for flag in (flags.EVAL_EVERY, flags.SAVE_EVERY, flags.KEEP_LAST, flags.LOG_EVERY):
        flag.add(parser)
    add_training_precision(parser)
    flags.COMPILE.add(parser, note="here the training step")


def add_process(parser: argparse.ArgumentParser) -> None:
    """What every training command takes about its processes: --strategy and memory, progress, reporting,
    --seed, --device."""
    add_parallelism(parser)
    add_no_progress(parser)
    flags.REPORT_TO.add(parser)
    add_seed(parser)
    add_device(parser)


def add_training_precision(parser: argparse._ActionsContainer) -> None:
    """``--precision``: the autocast precision of a training run (the weights and optimizer state stay fp32)."""
    flags.PRECISION.add(parser, default="auto", note="training runs the forward and backward passes under autocast "
                        "to it; the weights and optimizer state stay fp32")


def training_config(args: argparse.Namespace) -> TrainingConfig:
    """The `TrainingConfig` of the flags `add_schedule`, `add_parallelism`, ``--seed``,
    ``--device`` and ``--no-progress`` declare, and ``--epochs`` unless ``--steps`` is given (so that ``--resume
    --steps`` extends a run in epochs)."""
    epochs = None if "steps" in args.given_flags else getattr(args, "epochs", None)
    return flags.config_from_args(TrainingConfig, args, epochs=epochs, progress=not args.no_progress,
                                  parallelism=parallelism(args))


def add_parallelism(parser: argparse.ArgumentParser, note: str = "") -> None:
    """``--strategy``, ``--offload`` and ``--checkpoint-activations``: how a training run uses its processes' memory."""
    group = parser.add_argument_group("memory and processes" + ("" if note else " (see plm plan)"), note or None)
    for flag in (flags.STRATEGY, flags.OFFLOAD, flags.CHECKPOINT_ACTIVATIONS):
        flag.add(group)


def parallelism(args: argparse.Namespace) -> Parallelism:
    return Parallelism(args.strategy, args.offload, args.checkpoint_activations)


def check_output_file(path: str, flag: str = "--out") -> None:
    """Before any work: ``path``, given as ``flag``, names a file in an existing directory (plm does not guess where
    to create one)."""
    out = Path(path)
    if out.is_dir():
        raise PLMError(f"{out}: is a directory; {flag} names the file to write")
    if not out.parent.is_dir():
        what = "is not a directory" if out.parent.exists() else "no such directory"
        raise PLMError(f"{out.parent}: {what} (for {flag} {out})")


def check_output_directory(path: str | Path) -> Path:
    """Before any work: --out can become a directory (it is one, or its nearest existing parent is)."""
    out = Path(path)
    existing = next(parent for parent in (out, *out.parents) if parent.exists())  # "." or "/" at the latest
    if not existing.is_dir():
        raise PLMError(f"{existing}: is a file, not a directory" + (f" (for --out {out})" if existing != out else ""))
    return out


def write_model_directory(source: Path, out: Path, overwrite: bool, write: Callable[[Path], str]) -> str:
    """Have ``write(directory)`` fill a new model directory made from ``source``, which then becomes ``out``
    (see `write_directory`). Returns what ``write`` says it wrote."""
    if not source.exists():
        raise PLMError(f"{source}: no such directory")
    check_output_directory(out)
    if out.is_dir() and out.resolve() == source.resolve():
        raise PLMError(f"{out}: is the model being read; choose another --out")
    return write_directory(out, overwrite, write)


def write_directory(out: Path, overwrite: bool, write: Callable[[Path], str]) -> str:
    """Have ``write(directory)`` fill a new directory, which then becomes ``out``: new or empty unless ``overwrite``.

    It writes into a staging directory beside ``out``, swapped in whole when done: a failure or a
    kill leaves the old ``out`` as it was, and --overwrite leaves no file of the replaced one
    behind. Returns what ``write`` says it wrote.
    """
    check_output_directory(out)
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise PLMError(f"{out}: the directory is not empty; choose another --out or pass --overwrite to replace it")
    # A run directory is replaced only while no process trains in it (and none starts meanwhile).
    with run_lock(out) if (out / LOCK_FILE).exists() else contextlib.nullcontext():
        staging = staging_directory(make_directory(out.parent), f".{out.name}-")
        try:
            written = write(staging)
        except PLMError as error:  # named by the directory the user asked for, not the staging copy
            shutil.rmtree(staging, ignore_errors=True)
            raise PLMError(str(error).replace(str(staging), str(out))) from None
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        swap_in(staging, out.parent, out.name)
    return written
