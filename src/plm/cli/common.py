"""Flags that every command spells the same way."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch

from plm.cpu.int8 import QUANTIZATIONS
from plm.device import DEVICES, INFERENCE_PRECISIONS, PRECISIONS, resolve_device
from plm.errors import PLMError, with_article
from plm.loading import inference_weights, load_pretrained
from plm.models import CausalLM, Encoder, PretrainedModel
from plm.models.recipe import OPTIMIZERS, SCHEDULES
from plm.storage.atomic_files import make_directory, staging_directory
from plm.storage.checkpoint import swap_in
from plm.tokenization.tokenizer import Tokenizer
from plm.training.parallel import STRATEGIES, Parallelism
from plm.training.pretrain import HYPERPARAMETER_SETS
from plm.training.run_directory import LOCK_FILE, run_lock
from plm.training.tensorboard import REPORTERS
from plm.training.trainer import TrainingConfig


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line and exit code 2, named by the (sub)command they belong to.

    A subcommand's parser refuses flags it does not know itself, so that the error names it and
    its ``--help`` (argparse would leave them to the top-level parser: "plm: error: ... see plm
    --help"); the deepest one also records its name as ``command_name`` for the errors of the run.
    """

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if self._subparsers is None:
            if extras:
                self.error(f"unrecognized arguments: {' '.join(extras)}")
            namespace.command_name = self.prog
            namespace.given_flags = self.given_flags(args)
        return namespace, extras

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


def add_device(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", choices=DEVICES, help="where to run: auto picks CUDA when present")


def add_weights(parser: argparse.ArgumentParser) -> None:
    """How an inference command holds the weights: fp32, --precision bf16 or --quantize int8."""
    group = parser.add_argument_group("weights", "fp32 unless one of these says otherwise (one at most)")
    choice = group.add_mutually_exclusive_group()
    choice.add_argument("--precision", choices=INFERENCE_PRECISIONS, default="fp32",
                        help="bf16: bf16 weights and activations, half the bytes read per token; fast where the "
                        "hardware multiplies bf16 (GPUs, CPUs with AVX512-BF16 or AMX; see docs/speed.md)")
    choice.add_argument("--quantize", choices=QUANTIZATIONS,
                        help="int8: the linear layers and token embeddings with int8 weights, on the CPU (a quarter "
                        "of the bytes read per token; see docs/huggingface.md, int8 weights)")


def inference_device(args: argparse.Namespace) -> torch.device:
    """--device, except that --quantize runs on the CPU (its int8 kernel is the CPU's) when the device is auto."""
    return resolve_device("cpu" if getattr(args, "quantize", None) and args.device == "auto" else args.device)


ModelT = TypeVar("ModelT", bound=PretrainedModel)


def with_weights(model: ModelT, args: argparse.Namespace) -> ModelT:
    """``model`` with the weights --quantize or --precision ask for (a model saved quantized already is int8)."""
    return inference_weights(model, getattr(args, "precision", "fp32"), getattr(args, "quantize", None))


def add_seed(parser: argparse.ArgumentParser, default: int | None = 0) -> None:
    parser.add_argument("--seed", type=int, default=default, help="random seed, for runs you can repeat")


def add_model(parser: argparse.ArgumentParser, help: str, hub: bool = True) -> None:
    """--model, and with ``hub`` the Hub ids it also takes and --revision to pin one."""
    if not hub:
        parser.add_argument("--model", required=True, help=help)
        return
    parser.add_argument("--model", required=True, help=f"{help}; or a Hugging Face Hub id (owner/name), fetched "
                        "into the Hugging Face cache (a local path of the same spelling wins)")
    add_revision(parser)


def add_revision(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--revision", help="when --model is a Hub id: the branch, tag or commit to fetch "
                        "(default: the repository's main branch)")


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


def add_tag_column(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tag-column", type=positive_int, help="tag: the CoNLL column of the tags, 1 being the word "
                        "(default: the last, for files of 2 columns or CoNLL-2003's 4; others must say)")


def add_no_progress(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (logs and results are unchanged)")


def add_time_budget(parser: argparse.ArgumentParser) -> None:
    """``--minutes``: a wall-clock budget for a training run, as in plm compare's ``minutes`` budget."""
    parser.add_argument(
        "--minutes", type=positive_float, metavar="M",
        help="stop after M minutes of training (evaluations and saves included, resumes added up) or at --steps, "
        "whichever comes first. The learning-rate schedule is still laid out over --steps: a cosine or linear "
        "decay is cut where the time runs out, not squeezed into it (warmup, inverse-sqrt and constant do not "
        "depend on --steps); for a full decay within the budget give about the steps that fit, else a --steps "
        "the run will not reach",
    )


def add_run_directory(parser: argparse.ArgumentParser, default: str, resume_help: str = "") -> None:
    """``--out``, ``--resume``, ``--allow-data-change`` and ``--overwrite``: where a training command trains."""
    group = parser.add_argument_group("run directory (see docs/runs.md)")
    group.add_argument("--out", default=default, help="run directory")
    group.add_argument("--resume", action="store_true", help="continue the run in --out where it stopped, with the "
                       "flags it was started with (saved in OUT/run.json): give nothing else, but --steps to extend "
                       "it" + resume_help)
    group.add_argument("--allow-data-change", action="store_true",
                       help="with --resume: go on although a data file changed since the run started (its SHA-256 "
                       "is saved in OUT/run.json); without it, such a resume is refused")
    group.add_argument("--overwrite", action="store_true",
                       help="start a new run in an --out that holds a run (its files are deleted) or other files")


def add_schedule(parser: argparse.ArgumentParser) -> None:
    """How long and how a training command optimizes: steps, batches, the optimizer, its schedule, what it logs.

    The optimizer's flags left out take the family recipe's values; :func:`training_config` reads them all.
    """
    parser.add_argument("--steps", type=positive_int, default=1000, help="optimizer steps")
    add_time_budget(parser)
    parser.add_argument("--grad-accum", type=positive_int, default=1, help="micro-batches per optimizer step")
    group = parser.add_argument_group("optimizer (each defaults to the family's recipe)")
    group.add_argument("--hyperparameters", default="cpu", choices=HYPERPARAMETER_SETS,
                       help="the recipe's values to start from: plm's CPU-scale ones or the paper's")
    group.add_argument("--optimizer", choices=OPTIMIZERS, help="AdamW, LAMB (ALBERT's) or Adagrad (ELMo's)")
    group.add_argument("--lr", type=float, help="peak learning rate")
    group.add_argument("--min-lr", type=float, help="learning rate at the end of a cosine or linear decay")
    group.add_argument("--warmup", type=int, help="steps of linear warmup from 0 to --lr (at most --steps)")
    group.add_argument(
        "--schedule", choices=SCHEDULES, help="the decay after warmup; inverse-sqrt is the Transformer's"
    )
    group.add_argument("--betas", type=float, nargs=2, metavar=("BETA1", "BETA2"), help="Adam/LAMB moment decay rates")
    group.add_argument("--eps", type=float, help="Adam/LAMB epsilon")
    group.add_argument("--weight-decay", type=float,
                       help="decoupled decay of weight matrices (not biases, norms, embeddings)")
    group.add_argument("--clip", type=float, default=1.0, help="gradient-norm clipping (0: off)")
    parser.add_argument("--eval-every", type=positive_int, default=200, help="steps between validation runs")
    parser.add_argument("--save-every", type=positive_int, default=500, help="steps between checkpoints")
    add_keep_last(parser)
    parser.add_argument("--log-every", type=positive_int, default=10, help="steps between lines in metrics.jsonl")
    add_training_precision(parser)
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile the training step (a slow first step, then faster ones on GPUs)")


def add_process(parser: argparse.ArgumentParser) -> None:
    """What every training command takes about its processes: --strategy and memory, progress, reporting,
    --seed, --device."""
    add_parallelism(parser)
    add_no_progress(parser)
    parser.add_argument("--report-to", choices=REPORTERS, default=os.environ.get("PLM_REPORT_TO", "none"),
                        help="tensorboard: also write the logged metrics, the learning rate and the throughput to "
                        "OUT/tensorboard/ (tensorboard --logdir OUT; needs pip install 'plm[tensorboard]'); the "
                        "default is the environment's PLM_REPORT_TO, or none")
    add_seed(parser)
    add_device(parser)


def add_training_precision(parser: argparse.ArgumentParser) -> None:
    """``--precision``: the autocast precision of a training run (the weights and optimizer state stay fp32)."""
    parser.add_argument("--precision", default="auto", choices=PRECISIONS,
                        help="autocast precision of the forward and backward passes; the weights and optimizer "
                        "state stay fp32 (auto: bf16 on a GPU that has it, else fp16; bf16 on a CPU with "
                        "AVX512-BF16 or AMX, else fp32)")


def training_config(args: argparse.Namespace) -> TrainingConfig:
    """The :class:`TrainingConfig` of the flags :func:`add_schedule`, :func:`add_parallelism`, ``--seed``,
    ``--device`` and ``--no-progress`` declare."""
    return TrainingConfig(
        steps=args.steps, time_limit=time_limit(args), optimizer=args.optimizer, lr=args.lr, min_lr=args.min_lr,
        warmup=args.warmup, schedule=args.schedule, betas=tuple(args.betas) if args.betas else None, eps=args.eps,
        weight_decay=args.weight_decay, grad_accum=args.grad_accum, clip=args.clip, eval_every=args.eval_every,
        save_every=args.save_every, keep_last=args.keep_last, log_every=args.log_every, seed=args.seed,
        device=args.device, precision=args.precision, progress=not args.no_progress, compile=args.compile,
        parallelism=parallelism(args), report_to=args.report_to,
    )


def add_keep_last(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--keep-last", type=int, default=0, metavar="N",
        help="besides OUT/checkpoint, keep the models of the last N saves (each --save-every and the last step) "
        "in OUT/checkpoints/step-NNNNNN/, to average them with plm seq2seq average (default 0: none)",
    )


def add_parallelism(parser: argparse.ArgumentParser) -> None:
    """``--strategy``, ``--offload`` and ``--checkpoint-activations``: how a training run uses its processes' memory."""
    group = parser.add_argument_group("memory and processes (see plm plan)")
    group.add_argument(
        "--strategy", choices=STRATEGIES, default="ddp",
        help="under torchrun: ddp keeps a whole copy of the model and optimizer on every process; fsdp shards "
        "parameters, gradients and optimizer state over the processes (each Transformer block gathered only "
        "while it runs) and saves sharded checkpoints that resume on any number of processes and that plm "
        "convert consolidates. On one process fsdp trains as ddp does, with the sharded checkpoint",
    )
    group.add_argument("--offload", action="store_true",
                       help="fsdp on a GPU: keep the parameter and optimizer shards in CPU memory")
    group.add_argument("--checkpoint-activations", action="store_true",
                       help="keep only each Transformer block's input for backward and run the block again "
                       "there: far less activation memory for about a third more compute")


def parallelism(args: argparse.Namespace) -> Parallelism:
    return Parallelism(args.strategy, args.offload, args.checkpoint_activations)


def time_limit(args: argparse.Namespace) -> float | None:
    """The trainer's time limit in seconds from ``--minutes`` (None: no limit)."""
    return None if args.minutes is None else args.minutes * 60


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


def check_output_file(path: str) -> None:
    """Before any work: ``path`` names a file in an existing directory (plm does not guess where to create one)."""
    out = Path(path)
    if out.is_dir():
        raise PLMError(f"{out}: is a directory; --out names the file to write")
    if not out.parent.is_dir():
        what = "is not a directory" if out.parent.exists() else "no such directory"
        raise PLMError(f"{out.parent}: {what} (for --out {out})")


def check_output_directory(path: str | Path) -> Path:
    """Before any work: --out can become a directory (it is one, or its nearest existing parent is)."""
    out = Path(path)
    existing = next(parent for parent in (out, *out.parents) if parent.exists())  # "." or "/" at the latest
    if not existing.is_dir():
        raise PLMError(f"{existing}: is a file, not a directory" + (f" (for --out {out})" if existing != out else ""))
    return out


def write_model_directory(source: Path, out: Path, overwrite: bool, write: Callable[[Path], str]) -> str:
    """Have ``write(directory)`` fill a new model directory made from ``source``, which then becomes ``out``
    (see :func:`write_directory`). Returns what ``write`` says it wrote."""
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
