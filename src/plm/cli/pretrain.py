"""plm pretrain: train a model from scratch (or continue one) with its paper's objective."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from plm.cli import flags
from plm.cli.common import (
    HelpFormatter,
    add_process,
    add_run_directory,
    add_schedule,
    positive_int,
    training_config,
)
from plm.cli.flags import Flag, config_from_args, in_flags
from plm.cli.run_definition import RunFlags, run_definition
from plm.models import PRESETS, RECIPES, model_class
from plm.models.recipe import PretrainingRecipe
from plm.storage.hub import LEGACY_IDS
from plm.training.paper_scale import PAPER_SETTINGS, paper_run
from plm.training.pretrain import OBJECTIVES, PretrainSetup, pretrain, pretrain_dry_run

RUN = RunFlags("pretrain", data=("train", "validation", "data"), paths=("model", "tokenizer", "data"))
EXAMPLES = """examples:
  plm pretrain                                   # gpt2-mini on the embedded corpus
  plm pretrain --model bert                      # bert-mini, MLM + NSP, WordPiece trained on the corpus
  plm pretrain --model gpt2 --data data/web      # a corpus prepared by plm data prepare, of any size
  plm pretrain --model albert --objective mlm+sop   # albert-mini, n-gram masking, LAMB, Unigram
  plm pretrain --model deberta --objective mlm   # deberta-mini with the enhanced mask decoder
  plm pretrain --model elmo                      # elmo-mini, char-CNN biLM, forward + backward LM over words
  plm pretrain --model gpt2 --train a.txt b.txt --validation v.txt --out runs/gpt2
  plm pretrain --model bert-base --hyperparameters paper --train wiki.txt   # BERT's Adam, batch 256, 1M steps
  plm pretrain --model albert-base --hyperparameters paper --dry-run   # the time and memory it would take
  plm pretrain --out runs/gpt2 --resume          # continue a run that was stopped
  torchrun --nproc_per_node=2 -m plm.cli.main pretrain --out runs/ddp   # data-parallel
  torchrun --nproc_per_node=8 -m plm.cli.main pretrain --model gpt2-xl --strategy fsdp --out runs/xl   # sharded
  plm convert --model runs/xl --out xl           # its shards consolidated into one model directory
"""


def recipe_table() -> str:
    """One line per family: what `--model FAMILY` trains, with plm's CPU-scale values; below it the paper's values
    and run (--hyperparameters paper), once for the family or once per group of its presets that share them."""
    lines = ["recipes (--model FAMILY; optimizer flags left out take these CPU-scale values, and with "
             "--hyperparameters paper the paper's, of the preset's size):"]
    for family, recipe in RECIPES.items():
        cpu = recipe.hyperparameters
        lines.append(
            f"  {family:8} {recipe.preset}, {recipe.tokenizer}, {recipe.objective}: {cpu.optimizer} lr {cpu.lr:g}, "
            f"{cpu.schedule}, warmup {cpu.warmup}, betas {cpu.betas[0]:g} {cpu.betas[1]:g}, eps {cpu.eps:g}"
        )
        presets: dict[str, list[str]] = {}  # the paper's values -> the family's presets that take them
        for name, config in PRESETS.items():
            if model_class(config).family == family:
                presets.setdefault(paper_values(recipe.for_model(config)), []).append(name)
        for values, names in presets.items():
            lines.append(f"    paper{'' if len(presets) == 1 else ' of ' + ', '.join(names)}: {values}")
    return "\n".join(lines) + "\n\n"


def paper_values(recipe: PretrainingRecipe) -> str:
    """A recipe's paper optimizer, peak learning rate, schedule and run, in one line of the recipe table."""
    paper, scale, tokens = recipe.paper, recipe.paper_scale, recipe.translation_scale
    text = f"{paper.optimizer} lr {paper.lr:.3g}, {paper.schedule}, warmup {paper.warmup:,}"
    if scale is not None:
        length = f"{scale.steps:,} steps" if scale.steps else f"{scale.epochs:g} epochs"
        text += f", batch {scale.batch_size:,} x {scale.block_size:,}, {length}"  # sequences x their length
    if tokens is not None:
        text += f", batches of {tokens.batch_tokens:,} tokens, {tokens.steps:,} steps"
    return text


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "pretrain",
        help="pre-train a language model on text",
        description="Pre-train a model with its paper's recipe: GPT next-token prediction (clm); BERT masked LM "
        "+ next-sentence prediction; ALBERT masked LM with n-gram masking + sentence-order prediction, LAMB; "
        "DeBERTa masked LM; ELMo's biLM, forward and backward LM over words read as characters. "
        "Without --train it uses the embedded corpus; without --tokenizer it trains the "
        "paper's kind (byte-level BPE, WordPiece, Unigram, a word vocabulary) on the training text. "
        "The run directory gets checkpoint/ (model, tokenizer, optimizer and RNG state, replaced atomically), "
        "tokenizer/, metrics.jsonl, training_config.json and run.json (the flags and data hashes that --resume "
        "takes back). Every argument is checked before anything is written, a run directory is never replaced "
        "without --overwrite, and SIGTERM or Ctrl-C saves the step reached before exiting.",
        epilog=recipe_table() + EXAMPLES,
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "--model",
        default="gpt2-mini",
        help=f"a family ({', '.join(RECIPES)}: its small preset), a preset ({', '.join(PRESETS)}) "
        "or a plm model directory to continue",
    )
    # The objective's knobs, declared with their meaning in PretrainSetup.
    Flag.of(PretrainSetup, "objective", choices=OBJECTIVES).add(parser)
    Flag.of(PretrainSetup, "whole_word").add(parser)
    Flag.of(PretrainSetup, "max_ngram", type=positive_int).add(parser)
    Flag.of(PretrainSetup, "mask_ratios", type=mask_ratios, default="0.8,0.1,0.1",
            metavar="MASK,RANDOM,SAME").add(parser)
    flags.DATA.add(parser)
    parser.name_fields(train_files="--train", validation_files="--validation")
    parser.add_argument("--train", nargs="+", default=[], metavar="FILE",
                        help="training text: plain text (documents separated by blank lines), JSONL, Parquet, "
                        ".gz/.zst; prepared into plm's cache on first use, as plm data prepare would")
    parser.add_argument("--validation", nargs="+", default=[], metavar="FILE",
                        help="validation text (default: 5%% of the documents held out). A GPT's validation "
                        "perplexity scores every token of it, as plm eval perplexity does: its documents, each "
                        "followed by the end-of-text token, after one start token, in windows of --block-size "
                        "tokens that move by half a window; text of more than 262,144 tokens is sampled at the "
                        "evaluations before the last (logged as val_loss_sample), and the last scores all of it")
    flags.TEXT_FIELD.add(parser, note="here the text of --train")
    flags.TOKENIZER.add(parser, note="one given is used instead of training one")
    flags.TOKENIZER_SAMPLE.add(parser, note="here of --train, for the tokenizer trained when no --tokenizer is given")
    flags.VOCAB_SIZE.add(parser, default=8192, note="when no --tokenizer is given")
    add_run_directory(parser, "runs/pretrain")
    parser.add_argument("--batch-size", type=positive_int, default=16, help="sequences per micro-batch per process")
    flags.BLOCK_SIZE.add(parser, default=None, note="default: the context for GPT, 128 for encoders")
    Flag.of(PretrainSetup, "short_block_size", type=positive_int, metavar="N").add(parser)
    Flag.of(PretrainSetup, "short_steps", metavar="S").add(parser)
    flags.EPOCHS.add(parser, default=None, note="instead of --steps (a --steps given wins, so that --resume --steps "
                     "extends such a run)")
    flags.DRY_RUN.add(parser)
    flags.DROPOUT.add(parser)
    add_schedule(parser)
    add_process(parser)
    parser.set_defaults(run=run)


def mask_ratios(text: str) -> tuple[float, float, float]:
    """--mask-ratios 0.8,0.1,0.1: three fractions, as every rate in plm (run.json holds them so too)."""
    try:
        mask, random_token, same = (float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"three comma-separated fractions (0.8,0.1,0.1), got {text!r}") from None
    if abs(mask + random_token + same - 100) < 1e-6:  # the percentages this flag once took
        raise argparse.ArgumentTypeError(f"three fractions that add up to 1 (0.8,0.1,0.1), not percentages: got "
                                         f"{text!r}")
    return mask, random_token, same


def run(args: argparse.Namespace) -> None:
    dry = vars(args).pop("dry_run")  # how to start, not what the run is: not saved in OUT/run.json
    first_process = os.environ.get("RANK", "0") == "0"
    if args.hyperparameters == "paper" and not args.resume:  # a resumed run has the values in its run.json
        set_paper_scale(args, first_process)
    definition = run_definition(args, RUN)
    if args.model in LEGACY_IDS and not Path(args.model).exists():
        print(f"--model {args.model}: plm's preset of that name, a new untrained model; the released weights are "
              f"the Hugging Face Hub's {LEGACY_IDS[args.model]}, which plm finetune, generate and the other "
              "commands that load a model take", file=sys.stderr)
    setup = config_from_args(PretrainSetup, args, train_files=tuple(args.train),
                             validation_files=tuple(args.validation))
    training = training_config(args)
    if dry:
        measured = pretrain_dry_run(setup, training, args.out, resume=args.resume, overwrite=args.overwrite)
        if first_process:
            print(measured.report())
        return
    _, _, metrics = pretrain(setup, training, args.out, resume=args.resume, overwrite=args.overwrite,
                             definition=definition)
    if not first_process:
        return
    # An objective with several language models (ELMo's two directions) reports the perplexity of each.
    each = {name.removeprefix("val_perplexity_"): value for name, value in metrics.items()
            if name.startswith("val_perplexity_")}
    if each:
        print(f"step {metrics['step']}: validation loss {metrics['val_loss']:.4f} (the terms' sum), perplexity "
              + ", ".join(f"{name} {value:.2f}" for name, value in each.items()))
    elif "val_perplexity" in metrics:
        print(f"step {metrics['step']}: validation loss {metrics['val_loss']:.4f}, "
              f"perplexity {metrics['val_perplexity']:.2f}")
    print(f"saved to {args.out}/checkpoint")


def set_paper_scale(args: argparse.Namespace, first_process: bool) -> None:
    """--hyperparameters paper: the paper's batch (accumulated), sequence length and steps or epochs, and BERT's
    short first phase, for every one of those flags not given; says what it set."""
    given = {name: getattr(args, name) for name in PAPER_SETTINGS if name in args.given_flags}
    scaled = paper_run(args.model, args.batch_size, int(os.environ.get("WORLD_SIZE", "1")), given)
    for name, value in scaled.settings.items():
        setattr(args, name, value)
    if first_process:
        print(in_flags(scaled.describe(), args.flag_of), file=sys.stderr)
