"""The command line's vocabulary: every flag that more than one command takes, declared once.

A `Flag` has one name, one type, one unit and one help text; a command adds it with
``STEPS.add(parser)``, and may add a note after the help (what the flag does in that command) but not
change its meaning. A flag keeps the one default declared here, unless it is declared
``per_command_default``: how many steps a demo takes is not how many a pre-training takes, and the
help says each. A flag renamed keeps its old spelling as a hidden alias (``formerly``) that says once
that it was renamed. The few names that each command gives its own object (``--model``, ``--out``:
what it reads and writes) are `OWN_NAMES`.

``tests/cli/test_flag_vocabulary.py`` walks the whole parser and holds every command to this, and
docs/cli.md lists the vocabulary.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from plm.config import HELP
from plm.cpu.int8 import QUANTIZATIONS
from plm.device import DEVICES, PRECISIONS
from plm.errors import FIELD
from plm.models.recipe import HYPERPARAMETER_SETS, OPTIMIZERS, SCHEDULES
from plm.tasks.finetune import FinetuneData
from plm.training.parallel import STRATEGIES
from plm.training.tensorboard import REPORTERS
from plm.training.trainer import TrainingConfig

DECLARED: Any = object()  # Flag.add's default: the declared one


def in_flags(message: str, flag_of: Mapping[str, str]) -> str:
    """A library message as the command line says it: each field it names, the flag that sets it.

    The library names a config field as `` `steps` `` (`FIELD`); a command prints
    its flag for the field in its place (``--steps``), and the field's bare name where no flag sets it.

    Args:
        message: the library's message.
        flag_of: the command's flag for each field (its parser's ``flag_of``).

    Returns:
        The message with flags for fields.
    """
    return FIELD.sub(lambda named: flag_of.get(named.group(1), named.group(1)), message)


def positive_float(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a number above 0, got {text}")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def learning_rate(text: str) -> float:
    """--lr: one number (the trainer checks its range); a comma-separated list is --lr-grid's."""
    try:
        return float(text)
    except ValueError:
        grid = " (several: plm finetune --lr-grid)" if "," in text else ""
        raise argparse.ArgumentTypeError(f"expected one learning rate, got {text!r}{grid}") from None


@dataclass(frozen=True)
class Flag:
    """One flag of the command line, as every command that takes it takes it.

    Attributes:
        name: the option string, ``--steps``.
        help: what it means, in its unit; a command may add a note after it.
        type: what parses its value (None: the text itself; unused by a switch).
        default: its value when not given.
        choices: the values it takes, if a closed set.
        metavar: the value's name in the help.
        nargs: argparse's nargs (``--betas`` takes two).
        switch: a flag without a value, on when given (its default is False).
        per_command_default: each command sets its own default (and says it in its note).
        field: the library field (config field or parameter) it sets, where its name is not the flag's
            (``--beam`` sets ``num_beams``): a library error that names the field is printed with the flag.
    """

    name: str
    help: str
    type: Callable[[str], Any] | None = None
    default: Any = None
    choices: tuple[str, ...] | None = None
    metavar: str | tuple[str, ...] | None = None
    nargs: int | None = None
    switch: bool = False
    per_command_default: bool = False
    field: str | None = None

    def __post_init__(self) -> None:
        if self.switch:
            object.__setattr__(self, "default", False)  # a switch is off until given

    @classmethod
    def of(cls, config: Any, field: str, name: str | None = None, **declared: Any) -> Flag:
        """The flag of a config field declared with [`knob`][plm.config.knob]: its help, type and default are the
        field's, declared once, in the library.

        Args:
            config: the config dataclass.
            field: the field.
            name: the option string, where it is not the field's name with dashes (``--beam`` for ``num_beams``).
            **declared: what the command line adds: a parser of its own (``type=positive_int``), ``choices``,
                ``metavar``, ``nargs``, ``per_command_default``, the default as it writes it (``"0.8,0.1,0.1"``).

        Returns:
            The flag.
        """
        spec = next(f for f in dataclasses.fields(config) if f.name == field)
        annotation = typing.get_type_hints(config)[field]
        options = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        value_type = options[0] if typing.get_origin(annotation) in (types.UnionType, typing.Union) else annotation
        name = name or "--" + field.replace("_", "-")
        parse = declared.pop("type", value_type if value_type in (int, float) else None)
        if spec.default is dataclasses.MISSING or declared.get("per_command_default"):
            declared["default"] = None
        declared.setdefault("default", spec.default)  # or the field's default as the command line writes it
        # The fields the help names are flags of the same names (`save_every`: --save-every).
        help = FIELD.sub(lambda named: "--" + named.group(1).replace("_", "-"), spec.metadata[HELP])
        return cls(name, help, type=parse, switch=value_type is bool,
                   field=None if name == "--" + field.replace("_", "-") else field, **declared)

    def add(self, parser: argparse._ActionsContainer, *, default: Any = DECLARED, note: str = "",
            required: bool = False, formerly: tuple[str, ...] = ()) -> argparse.Action:
        """Add the flag to ``parser`` (a parser or one of its groups).

        Args:
            parser: where to add it.
            default: this command's default, for a flag declared ``per_command_default`` only.
            note: what the flag does in this command, after its help.
            required: the command cannot run without it.
            formerly: old spellings, hidden, that still work and say that the flag was renamed.

        Returns:
            The argparse action.
        """
        if default is not DECLARED and not self.per_command_default:
            raise ValueError(f"{self.name} has one default, {self.default!r}; it is not declared per command")
        help = f"{self.help}; {note}" if note else self.help
        if self.switch:
            action = parser.add_argument(self.name, action="store_true", help=help)
            action.field = self.field  # type: ignore[attr-defined]
            return action
        parsed: dict[str, Any] = {} if self.type is None else {"type": self.type}
        action = parser.add_argument(
            self.name, default=self.default if default is DECLARED else default, choices=self.choices,
            metavar=self.metavar, nargs=self.nargs, required=required, help=help, **parsed,
        )
        action.field = self.field  # type: ignore[attr-defined]  # read by the parser's flag_of
        for old in formerly:
            parser.add_argument(old, dest=action.dest, action=Formerly, renamed_to=self.name, nargs=self.nargs,
                                default=argparse.SUPPRESS, help=argparse.SUPPRESS, **parsed)
        return action


class Formerly(argparse.Action):
    """The old spelling of a renamed flag: sets the new one's value, and notes the rename for the parser to say."""

    def __init__(self, option_strings: list[str], dest: str, renamed_to: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.renamed_to = renamed_to

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        renamed = getattr(namespace, RENAMED_GIVEN, [])
        setattr(namespace, RENAMED_GIVEN, [*renamed, (option_string, self.renamed_to)])


Config = typing.TypeVar("Config")


def config_from_args(config: type[Config], args: argparse.Namespace, **values: Any) -> Config:
    """``config`` with each field that a flag of the command set: the flags are built from the fields, and back.

    A field takes the flag of its name (``whole_word`` from ``--whole-word``), or the flag of the vocabulary that
    declares it sets the field (``num_beams`` from ``--beam``); a list becomes a tuple. Fields that no flag sets
    keep their defaults.

    Args:
        config: the config dataclass.
        args: the parsed flags.
        **values: the fields the command computes from its flags (``progress`` from ``--no-progress``).

    Returns:
        The config.
    """
    given = vars(args)
    dest_of = {flag.field: flag.name.removeprefix("--").replace("-", "_") for flag in FLAGS.values() if flag.field}
    for field in dataclasses.fields(config):  # type: ignore[arg-type]  # a dataclass, as its callers pass
        dest = field.name if field.name in given else dest_of.get(field.name)
        if field.name not in values and dest in given:
            value = given[dest]
            values[field.name] = tuple(value) if isinstance(value, list) else value
    return config(**values)


def vocabulary_flags() -> dict[str, str]:
    """The flag of each field that a flag of the vocabulary sets: how a command names a flag of another command.

    Returns:
        Each field's flag (``keep_last`` -> ``--keep-last``, ``num_beams`` -> ``--beam``).
    """
    return {flag.field or flag.name.removeprefix("--").replace("-", "_"): flag.name for flag in FLAGS.values()}


RENAMED_GIVEN = "renamed_flags_given"  # the namespace's list of (old, new) spellings given, said once after parsing

# Names whose object each command has its own: it reads or writes its own files, in its own format, in its own
# units of work. Their type is still one (the vocabulary test checks it); their help is the command's.
OWN_NAMES = (
    "--model",  # what the command reads, or trains from
    "--out",  # what it writes: a file or a directory
    "--overwrite",  # replace what its --out holds
    "--train", "--validation", "--test",  # its data, in its own format
    "--batch-size",  # its items (sequences, examples, windows, prompts) through the model at once
)

# Where to run, and how to hold the weights --------------------------------------------------------------------------

DEVICE = Flag("--device", "where to run: auto picks CUDA when present", default="auto", choices=DEVICES)
SEED = Flag.of(TrainingConfig, "seed")
PRECISION = Flag(
    "--precision",
    "the floating-point format of the arithmetic: fp32, bf16 or fp16; auto is bf16 where the hardware multiplies it "
    "(GPUs that have it, CPUs with AVX512-BF16 or AMX), else fp16 on a GPU and fp32 on a CPU",
    choices=PRECISIONS, per_command_default=True,
)
QUANTIZE = Flag(
    "--quantize",
    "int8: the linear layers and token embeddings with int8 weights, on the CPU (a quarter of the bytes read per "
    "token; see docs/huggingface.md, int8 weights)",
    choices=QUANTIZATIONS, per_command_default=True,
    field="quantization",
)
COMPILE = Flag.of(TrainingConfig, "compile")
NO_PROGRESS = Flag("--no-progress", "no progress bar (logs and results are unchanged)", switch=True)
REVISION = Flag("--revision", "when --model is a Hub id: the branch, tag or commit to fetch (default: the "
                "repository's main branch)")
JSON = Flag("--json", "also write the numbers to this JSON file (rates and accuracies as fractions in [0, 1]; BLEU "
            "and chrF on sacreBLEU's 0-100)", metavar="FILE")
PREDICTIONS = Flag("--predictions", "also write the model's output for each example to this JSON file", metavar="FILE")

# How long and how a training run optimizes ---------------------------------------------------------------------------

STEPS = Flag.of(TrainingConfig, "steps", type=positive_int, metavar="N", per_command_default=True)
EPOCHS = Flag.of(TrainingConfig, "epochs", type=positive_float, per_command_default=True)
MINUTES = Flag.of(TrainingConfig, "minutes", type=positive_float, metavar="M")
LR = Flag.of(TrainingConfig, "lr", type=learning_rate)
MIN_LR = Flag.of(TrainingConfig, "min_lr")
WARMUP = Flag.of(TrainingConfig, "warmup")
SCHEDULE = Flag.of(TrainingConfig, "schedule", choices=SCHEDULES)
OPTIMIZER = Flag.of(TrainingConfig, "optimizer", choices=OPTIMIZERS)
BETAS = Flag.of(TrainingConfig, "betas", type=float, nargs=2, metavar=("BETA1", "BETA2"))
EPS = Flag.of(TrainingConfig, "eps")
WEIGHT_DECAY = Flag.of(TrainingConfig, "weight_decay")
CLIP = Flag.of(TrainingConfig, "clip")
GRAD_ACCUM = Flag.of(TrainingConfig, "grad_accum", type=positive_int)
HYPERPARAMETERS = Flag("--hyperparameters", "the recipe's values to start from: plm's CPU-scale ones or the paper's",
                       default="cpu", choices=HYPERPARAMETER_SETS)
DROPOUT = Flag("--dropout", "one dropout rate in [0, 1) for the whole model: embeddings, attention, residuals and "
               "heads (default: the preset's)", type=float)
EVAL_EVERY = Flag.of(TrainingConfig, "eval_every", type=positive_int)
SAVE_EVERY = Flag.of(TrainingConfig, "save_every", type=positive_int)
LOG_EVERY = Flag.of(TrainingConfig, "log_every", type=positive_int)
KEEP_LAST = Flag.of(TrainingConfig, "keep_last", metavar="N")
REPORT_TO = Flag(
    "--report-to",
    "tensorboard: also write the logged metrics, the learning rate and the throughput to OUT/tensorboard/ "
    "(tensorboard --logdir OUT; needs pip install 'plm[tensorboard]'); the default is the environment's "
    "PLM_REPORT_TO, or none",
    default=os.environ.get("PLM_REPORT_TO", "none"), choices=REPORTERS,
)
DRY_RUN = Flag("--dry-run", "build the run (model, data, optimizer), time a few steps and print the time per step, "
               "tokens/s, the whole run's projected time and the peak memory, in about a minute at any scale; write "
               "nothing", switch=True)
RESUME = Flag("--resume", "continue the run in --out where it stopped, with the flags it was started with (saved in "
              "OUT/run.json): give nothing else, but --steps to extend it", switch=True)
ALLOW_DATA_CHANGE = Flag("--allow-data-change", "with --resume: go on although a data file changed since the run "
                         "started (its SHA-256 is saved in OUT/run.json); without it, such a resume is refused",
                         switch=True)
STRATEGY = Flag(
    "--strategy",
    "under torchrun: ddp keeps a whole copy of the model and optimizer on every process; fsdp shards parameters, "
    "gradients and optimizer state over the processes (each Transformer block gathered only while it runs) and "
    "saves sharded checkpoints that resume on any number of processes and that plm convert consolidates. On one "
    "process fsdp trains as ddp does, with the sharded checkpoint",
    default="ddp", choices=STRATEGIES,
)
OFFLOAD = Flag("--offload", "fsdp on a GPU: keep the parameter and optimizer shards in CPU memory", switch=True)
CHECKPOINT_ACTIVATIONS = Flag(
    "--checkpoint-activations",
    "keep only each Transformer block's input for backward and run the block again there: far less activation "
    "memory for about a third more compute",
    switch=True,
)

# What a command reads --------------------------------------------------------------------------------------------

DATA = Flag("--data", "a directory that plm data prepare wrote: token ids mapped from disk, so a corpus of any size "
            "fits; its tokenizer(s) are the run's", metavar="DIR")
TOKENIZER = Flag("--tokenizer", "a directory with the tokenizer(s) (a tokenizer.json; a model's or a run's directory "
                 "holds its own)")
VOCAB_SIZE = Flag("--vocab-size", "the vocabulary of the tokenizer trained", type=positive_int,
                  per_command_default=True)
TOKENIZER_SAMPLE = Flag(
    "--tokenizer-sample",
    "the characters a tokenizer is trained on: about this many, from documents spread over all of the text "
    "(default: all of it)",
    type=positive_int, metavar="CHARS",
)
TEXT_FIELD = Flag("--text-field", "the field of a JSONL record, or the column of a Parquet file or dataset, that "
                  "holds the text", default="text")
DOCUMENT_CONTEXT = Flag.of(FinetuneData, "document_context")
TAG_COLUMN = Flag("--tag-column", "the CoNLL column of the tags, 1 being the word", type=positive_int,
                  per_command_default=True)
SRC = Flag("--src", "source sentences, one per line", field="source")
TGT = Flag("--tgt", "their translations, line by line (with --src)", field="target")
TSV = Flag("--tsv", "source<TAB>target pairs, instead of --src/--tgt")
VALIDATION_SRC = Flag("--validation-src", "validation sources, one per line (with --validation-tgt; default: 5%% of "
                      "the pairs held out)", field="validation_source")
VALIDATION_TGT = Flag("--validation-tgt", "their translations, line by line", field="validation_target")
VALIDATION_TSV = Flag("--validation-tsv", "validation pairs as source<TAB>target, instead of --validation-src/-tgt")
REF = Flag("--ref", "reference translations, aligned with --src")
LIMIT = Flag("--limit", "read only the first N items of the file", type=positive_int, metavar="N",
             per_command_default=True)
SHOTS = Flag("--shots", "example pairs in each prompt", type=int, default=5)

# Sequences and batches -----------------------------------------------------------------------------------------

BLOCK_SIZE = Flag("--block-size", "tokens per training sequence", type=positive_int, per_command_default=True)
MAX_LENGTH = Flag("--max-length", "tokens per example, longer ones cut", type=positive_int)
STRIDE = Flag("--stride", "tokens between the starts of overlapping windows", type=positive_int,
              per_command_default=True)
MAX_TOKENS = Flag("--max-tokens", "the token budget of a batch", type=positive_int, per_command_default=True)

# Decoding ---------------------------------------------------------------------------------------------------------

MAX_NEW_TOKENS = Flag("--max-new-tokens", "the most tokens generated for each prompt", type=positive_int,
                      per_command_default=True)
TOP_K = Flag("--top-k", "sample among the k most likely tokens (0: all)", type=int, per_command_default=True)
TOP_P = Flag("--top-p", "sample among the fewest tokens whose probability reaches p (1: all)", type=float,
             default=1.0)
TEMPERATURE = Flag("--temperature", "divide the logits by this before sampling (1: the model's own distribution)",
                   type=float, default=1.0)
SAMPLE = Flag("--sample", "sample even with the default --temperature, --top-k and --top-p", switch=True)
IGNORE_EOS = Flag("--ignore-eos", "go on past the end-of-text token to --max-new-tokens (without it a continuation "
                  "ends where the model writes that token, and a note on stderr says so)", switch=True)
BEAM = Flag("--beam", "beam size (1: greedy search)", type=positive_int, field="num_beams")
MAX_LEN_A = Flag("--max-len-a", "a translation has at most a * source tokens + b tokens", type=float)
MAX_LEN_B = Flag("--max-len-b", "see --max-len-a", type=int, field="max_new_tokens")
LENGTH_PENALTY = Flag("--length-penalty", "GNMT's alpha for beam search (0: none)", type=float)

FLAGS = {flag.name: flag for flag in globals().values() if isinstance(flag, Flag)}
