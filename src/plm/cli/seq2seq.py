"""plm seq2seq train: train an encoder-decoder (RNN with or without attention, the Transformer) on sentence pairs;
plm seq2seq average: average a run's last checkpoints."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from plm.apps.attention_map import pair_attention, plot
from plm.apps.translation import load_seq2seq
from plm.cli import flags
from plm.cli.common import (
    HelpFormatter,
    add_model,
    add_process,
    add_run_directory,
    add_schedule,
    positive_int,
    training_config,
)
from plm.cli.flags import Flag, config_from_args, in_flags
from plm.cli.run_definition import RunFlags, run_definition
from plm.data.sentence_pairs import Seq2SeqTokenizers
from plm.loading import is_plm_directory
from plm.models import PRESETS, RECIPES, Seq2SeqModel
from plm.objectives.teacher_forcing import Seq2SeqObjective
from plm.storage.checkpoint import is_training_run, save_model
from plm.training.averaging import average_run
from plm.training.distributed import is_first_process
from plm.training.paper_scale import translation_run
from plm.training.parallel import unsharded
from plm.training.train_seq2seq import DEFAULT_MODEL, SELECTABLE, Seq2SeqSetup, prepare_seq2seq, seq2seq_dry_run
from plm.training.trainer import Trainer, TrainingConfig, train_run

HEATMAP = "attention.png"
VALIDATION_RENAMED = {"valid_src": "validation_src", "valid_tgt": "validation_tgt", "valid_tsv": "validation_tsv"}
RUN = RunFlags("seq2seq train",
               data=("src", "tgt", "tsv", "validation_src", "validation_tgt", "validation_tsv", "data"),
               paths=("model", "tokenizer", "data"), renamed=VALIDATION_RENAMED)
EXAMPLES = """examples:
  plm seq2seq train --out runs/dates         # transformer-small on the dates task, no files needed
  plm seq2seq train --model rnn-bahdanau --out runs/dates-rnn
  plm seq2seq train --model rnn-luong --src train.de --tgt train.en --validation-src val.de --validation-tgt val.en
  plm seq2seq train --model rnn --tsv pairs.tsv --separate-vocabularies --out runs/rnn
  plm data prepare wmt14.jsonl.gz --src-lang de --tgt-lang en --tokenizer tok --out data/wmt14-de-en
  plm seq2seq train --model transformer --data data/wmt14-de-en --out runs/wmt   # millions of pairs, mapped
  plm seq2seq train --model rnn --reverse-source --out runs/dates-reversed   # Sutskever et al.'s reversed source
  plm seq2seq train --model Helsinki-NLP/opus-mt-de-en --src train.de --tgt train.en --out runs/opus-de-en
  plm translate --model runs/dates <<< "the fifth of May, nineteen ninety-nine"
"""
AVERAGE_EXAMPLES = """examples:
  plm seq2seq train --model transformer-small --save-every 500 --keep-last 5 --out runs/t
  plm seq2seq average --model runs/t --last 5 --out runs/t-avg5
  plm seq2seq average --model runs/t runs/t/checkpoints/step-002000 runs/t/checkpoints/step-002500 --out runs/t-avg2
  plm eval bleu --model runs/t-avg5 --src test.de --ref test.en --beam 4
"""


def seq2seq_families() -> list[str]:
    return [family for family, recipe in RECIPES.items() if "seq2seq" in recipe.objectives]


def register(commands: argparse._SubParsersAction) -> None:
    group = commands.add_parser("seq2seq", help="train a sequence-to-sequence model",
                                description="Sequence to sequence: encoder-decoders trained on sentence pairs.")
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    register_train(actions)
    register_average(actions)


def register_train(actions: argparse._SubParsersAction) -> None:
    families = seq2seq_families()
    presets = [name for name, config in PRESETS.items() if any(name.startswith(f) for f in families)]
    parser = actions.add_parser(
        "train",
        help="train on sentence pairs (default: the dates task)",
        description="Train an encoder-decoder with label-smoothed cross entropy under teacher forcing, in batches "
        "of similar lengths under a token budget, with its family's optimizer recipe. Without files it trains the "
        "dates task (a date in one of ten styles -> ISO 8601), generated on the fly. The label-smoothed loss is "
        "trained and logged as loss_label_smoothed, the plain negative log-likelihood beside it as loss_nll (weight "
        "0), and val_perplexity is the exp of the latter. At every evaluation the "
        "held-out sources are translated greedily and scored (exact match, BLEU, chrF on detokenised text); at "
        f"the end the scores are printed and the attention of one held-out sentence is drawn in OUT/{HEATMAP}. "
        "The run directory is a training run like plm pretrain's: checkpoint/, tokenizer/, metrics.jsonl.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help=f"a family ({', '.join(families)}), a preset ({', '.join(presets)}), a model directory, "
                        "or a released Marian or FSMT model to fine-tune (a Hugging Face directory or Hub id, with its "
                        "tokenizers); with no arguments it learns the dates task (over 95%% exact match by step 300)")
    flags.DATA.add(parser, note="sentence pairs (plm data prepare --src/--tgt, --tsv or --src-lang/--tgt-lang)")
    add_sentence_pairs(parser)
    flags.TOKENIZER.add(parser, note="one given is used instead of training new ones")
    flags.VOCAB_SIZE.add(parser, default=None, note="BPE, default 8000; 400 for the dates task")
    parser.add_argument(
        "--separate-vocabularies", action="store_true", help="one tokenizer per side instead of a joint one"
    )
    # The knobs of the run, declared with their meaning in Seq2SeqSetup.
    Flag.of(Seq2SeqSetup, "reverse_source").add(parser)
    flags.MAX_TOKENS.add(parser, default=2048, note="source + target, padding included")
    Flag.of(Seq2SeqSetup, "label_smoothing").add(parser)
    Flag.of(Seq2SeqSetup, "metric_examples").add(parser)
    Flag.of(Seq2SeqSetup, "select_by", choices=SELECTABLE).add(parser)
    flags.DROPOUT.add(parser)
    flags.EPOCHS.add(parser, default=None, note="instead of --steps (a --steps given wins, so that --resume --steps "
                     "extends such a run)")
    flags.DRY_RUN.add(parser)
    add_run_directory(parser, "runs/seq2seq")
    add_schedule(parser)
    add_process(parser)
    parser.set_defaults(run=run_train)


def add_sentence_pairs(parser: argparse._ActionsContainer) -> None:
    """--src/--tgt or --tsv, and their validation pairs: what plm seq2seq train and plm data prepare read."""
    for flag in (flags.SRC, flags.TGT, flags.TSV):
        flag.add(parser)
    for flag in (flags.VALIDATION_SRC, flags.VALIDATION_TGT, flags.VALIDATION_TSV):
        flag.add(parser, formerly=("--valid-" + flag.name.removeprefix("--validation-"),))


def register_average(actions: argparse._SubParsersAction) -> None:
    parser = actions.add_parser(
        "average",
        help="average the last checkpoints of a run",
        description="Average the weights of a run's last N snapshots (plm seq2seq train --keep-last N keeps them "
        "in RUN/checkpoints/), or of the model directories given, as the Transformer paper averages its last 5 "
        "checkpoints. OUT is a model directory with the run's tokenizer(s), for plm translate and plm eval bleu.",
        epilog=AVERAGE_EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_model(parser, "the training run; its tokenizer(s) go with the average")
    parser.add_argument("checkpoints", nargs="*", metavar="CHECKPOINT",
                        help="model directories to average instead of the run's snapshots")
    parser.add_argument(
        "--last", type=positive_int, metavar="N", help="the run's last N snapshots (default: all it kept)"
    )
    parser.add_argument("--out", required=True, help="model directory to write")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    parser.set_defaults(run=run_average)


@contextmanager
def starting_model(name: str) -> Iterator[str]:
    """--model as the recipe reads it: a family, a preset or a plm model directory as it is; a released model
    (a Hugging Face directory that is not plm's, or a Hub id owner/name) converted with its tokenizers into a
    temporary plm model directory, kept while the run lasts."""
    local = Path(name)
    if local.is_dir():
        released = not (is_plm_directory(local) or is_training_run(local))
    else:
        released = not local.exists() and "/" in name  # a Hub id; a preset or a mistyped name is said as before
    if not released:
        yield name
        return
    model, tokenizers = load_seq2seq(name)
    with tempfile.TemporaryDirectory(prefix="plm-released-") as directory:
        save_model(model, directory, tokenizers)
        yield directory


def run_train(args: argparse.Namespace) -> None:
    dry = vars(args).pop("dry_run")  # how to start, not what the run is: not saved in OUT/run.json
    definition = run_definition(args, RUN)
    with starting_model(args.model) as model:
        if args.hyperparameters == "paper" and not args.resume:  # a resumed run has the values in its run.json
            set_translation_scale(args, model)
            definition = run_definition(args, RUN)
        training = training_config(args)
        setup = config_from_args(Seq2SeqSetup, args, model=model, joint_vocabulary=not args.separate_vocabularies)
        if dry:
            measured = seq2seq_dry_run(setup, training, args.out, resume=args.resume, overwrite=args.overwrite)
            if is_first_process():
                print(measured.report())
            return
        train_run(args.out, args.resume, args.overwrite, definition,
                  partial(prepared, setup, training, args), partial(report, Path(args.out)))


def set_translation_scale(args: argparse.Namespace, model: str) -> None:
    """--hyperparameters paper: the paper's tokens per batch (micro-batches of --max-tokens accumulated) and steps,
    for each of --grad-accum and --steps not given; says what it set."""
    given = {name: getattr(args, name) for name in ("grad_accum", "steps") if name in args.given_flags}
    settings, line = translation_run(model, args.max_tokens, int(os.environ.get("WORLD_SIZE", "1")), given)
    for name, value in settings.items():
        setattr(args, name, value)
    if is_first_process():
        print(in_flags(line, args.flag_of), file=sys.stderr)


def prepared(setup: Seq2SeqSetup, training: TrainingConfig, args: argparse.Namespace
             ) -> tuple[Trainer, Seq2SeqTokenizers]:
    """The run's trainer and tokenizers, saying which pairs were left out as too long for the model."""
    trainer, tokenizers = prepare_seq2seq(setup, training, args.out, resume=args.resume, overwrite=args.overwrite)
    objective, model = trainer.objective, trainer.model
    assert isinstance(objective, Seq2SeqObjective) and isinstance(model, Seq2SeqModel)  # what prepare_seq2seq builds
    dropped = objective.dropped
    if any(dropped.values()) and trainer.distributed.is_main:  # under torchrun, the first process reports
        print(f"left out {dropped['train']} training and {dropped['validation']} validation pairs longer than the "
              f"model's context of {model.context_length()} tokens", file=sys.stderr)
    return trainer, tokenizers


def report(out: Path, trainer: Trainer, tokenizers: Seq2SeqTokenizers, metrics: dict[str, float]) -> None:
    """After training (the processes still together): the held-out scores, and the attention of a held-out pair."""
    objective, model = trainer.objective, trainer.model
    assert isinstance(objective, Seq2SeqObjective) and isinstance(model, Seq2SeqModel)  # what prepare_seq2seq builds
    main = trainer.distributed.is_main
    if "val_bleu" in metrics and main:
        print(f"step {metrics['step']}: held-out exact match {metrics['val_exact_match']:.2%}, "
              f"BLEU {metrics['val_bleu']:.2f}, chrF {metrics['val_chrf']:.2f}")
    model, held_out = model.eval(), objective.metric_pairs
    if held_out and getattr(model.config, "attention", None) != "none":
        heatmap = out / HEATMAP
        with unsharded(model):  # an FSDP run's processes gather the whole model together
            attention = pair_attention(model, tokenizers, held_out[0].source)
        if main:
            plot(attention, heatmap)
            print(f"attention of {held_out[0].source!r}: {heatmap}")
    if main:
        print(f"saved to {out}/checkpoint")


def run_average(args: argparse.Namespace) -> None:
    paths = average_run(args.model, args.out, last=args.last, checkpoints=args.checkpoints, overwrite=args.overwrite)
    print(f"averaged {len(paths)} checkpoints ({', '.join(str(path) for path in paths)}) into {args.out}")
