"""plm finetune: a pretrained model fine-tuned on a task (BERT section 4, GPT-1 section 3.2)."""

from __future__ import annotations

import argparse
import re

from plm.cli import flags
from plm.cli.common import (
    HelpFormatter,
    add_process,
    add_revision,
    add_run_directory,
    add_task_input,
    add_training_precision,
    parallelism,
    positive_int,
)
from plm.cli.flags import Flag, config_from_args
from plm.cli.run_definition import RunFlags, run_definition
from plm.tasks.bilstm import COMBINATIONS, MixOptions
from plm.tasks.finetune import FinetuneData, FinetuneHead, FinetuneOptimization, FinetuneSetup, finetune
from plm.tasks.heads import POOLINGS
from plm.tasks.task_objective import TASKS

RUN = RunFlags("finetune", data=("train", "validation"), paths=("model", "elmo"), required=("task",),
               renamed={"lr": "lr_grid", "warmup": "warmup_fraction"})
TASK_HELP = """tasks:
  classify  one sentence -> a class (GLUE TSV with a sentence column, or JSONL {"text", "label"})
  pair      a sentence pair -> a class, read as [CLS] A [SEP] B [SEP] (GLUE TSV, JSONL with "text_pair")
  regress   one sentence or a pair -> a number (STS-B's score)
  tag       a label per word (CoNLL columns, BIO or IOB1); entity-level F1
  qa        extractive QA (SQuAD v1.1/v2.0 JSON); EM and F1, tau chosen on dev for v2.0
  choice    multiple choice (SWAG CSV); accuracy
On a GPT model, classify, pair, regress and choice use GPT-1's input transforms and auxiliary LM loss
(pairs: premise $ hypothesis; with --symmetric, both orders).

"""

EXAMPLES = """examples:
  plm finetune --task classify                 # the built-in synthetic task on a fresh tiny BERT (seconds)
  plm finetune --task classify --model $MINILM --train sst-2/train.tsv --validation sst-2/dev.tsv --out runs/sst2 \
--labels negative,positive
  plm finetune --task tag --model $MINILM --train eng.train --validation eng.testa --lr-grid 2e-5,3e-5,5e-5
  plm finetune --out runs/sst2 --resume --steps 600   # a finished run extended to 600 steps
  # the feature-based tagger (BERT 5.3): a BiLSTM over the frozen model's last four layers, concatenated
  plm finetune --task tag --model $MINILM --train eng.train --validation eng.testa \
--features -4,-3,-2,-1 --combine concat
  # ... with each sentence read in its document, as BERT's NER (the words around it fill 512 tokens)
  plm finetune --task tag --model $MINILM --train eng.train --validation eng.testa \
--features -4,-3,-2,-1 --document-context --max-length 512
  # the same tagger over the static (context-free) token embeddings alone: "no ELMo"
  plm finetune --task tag --model $MINILM --train eng.train --validation eng.testa --features 0
  # [x_k; ELMo_k]: the static embeddings and a frozen plm ELMo's scalar mix of its layers
  plm finetune --task tag --model $MINILM --train eng.train --validation eng.testa --features 0 --elmo runs/elmo
  # the same for a class (BiLSTM states max- and mean-pooled), and ELMo at the BiLSTM's output too (qa)
  plm finetune --task classify --model $MINILM --train sst-2/train.tsv --validation sst-2/dev.tsv \
--features 0 --elmo runs/elmo
  plm finetune --task qa --model $MINILM --train train-v1.1.json --validation dev-v1.1.json \
--features 0 --elmo runs/elmo --elmo-output
  plm finetune --task qa --model runs/bert --train train-v2.0.json --validation dev-v2.0.json --stride 128
  plm finetune --task pair --model runs/gpt --train rte.jsonl --validation rte-dev.jsonl --lm-weight 0.5
  # GPT-1's similarity form: both orders of each pair, the two final states added (STS-B, QQP, MRPC)
  plm finetune --task regress --model runs/gpt --train sts-b.jsonl --validation sts-b-dev.jsonl --symmetric
  plm finetune --task classify --model runs/deberta --train a.jsonl --validation b.jsonl --sift --restarts 5
"""


def learning_rate_grid(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None


def class_names(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(","))
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected class names separated by commas, got {text!r}")
    return names


def layer_indices(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected layer indices separated by commas, got {text!r}") from None


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "finetune",
        help="fine-tune a pretrained model on a task",
        description="Fine-tune a pretrained model (plm or Hugging Face directory) on a task with the paper's "
        "recipe: batch 32 (choice on an encoder: 16 at lr 2e-5, BERT's SWAG), 3 epochs, linear warmup (10% of "
        "training; GPT-1: 0.2%) then linear decay, the best "
        "model on the dev set kept in OUT/best. An --lr-grid or --restarts train one run each under "
        "OUT/runs/ and keep the best (OUT/summary.json lists them). Without --train and --validation: a built-in "
        "synthetic task on a fresh tiny BERT.",
        epilog=TASK_HELP + EXAMPLES,
        formatter_class=HelpFormatter,
    )
    # argparse reads "-4,-3,-2,-1" as an option, not a value; a comma-separated list of negative numbers is a value.
    parser._negative_number_matcher = re.compile(r"^-\d*\.?\d+(,-?\d*\.?\d+)*$")
    parser.add_argument("--task", choices=TASKS, help="what to learn (see tasks below); required, but for --resume")
    parser.add_argument("--model", help="pretrained model directory or Hugging Face Hub id (owner/name) (default: a "
                        "fresh bert-micro, built-in task only)")
    add_revision(parser)
    # The knobs of the data, the head and the optimisation, declared with their meaning in their configs.
    Flag.of(FinetuneData, "train").add(parser)
    Flag.of(FinetuneData, "validation").add(parser)
    Flag.of(FinetuneData, "labels", type=class_names, metavar="NAME,NAME,...").add(parser)
    rates = parser.add_mutually_exclusive_group()
    flags.LR.add(rates, note="here 5e-5; choice 2e-5 (BERT's SWAG); GPT 6.25e-5; built-in task 3e-3; --features 1e-3 "
                 "(that BiLSTM learns from scratch)")
    rates.add_argument("--lr-grid", type=learning_rate_grid, metavar="LR,LR,...",
                       help="learning rates, comma-separated: one run each, the best kept")
    Flag.of(FinetuneOptimization, "restarts", type=positive_int).add(parser)
    flags.EPOCHS.add(parser, default=3.0)
    flags.STEPS.add(parser, default=None, note="of each run, instead of --epochs (a --steps given wins, so that "
                    "--resume --steps extends a finished run); the schedule is laid out over the N steps "
                    "(--warmup-fraction of them, then linear decay to 0 at the last)")
    flags.MINUTES.add(parser, note="each run stops there, then is evaluated and keeps the best model as usual. The "
                      "schedule is still laid out over the epochs (or --steps), as plm pretrain does: its decay is cut "
                      "where the time runs out; for a full decay within the budget give --steps about the steps that "
                      "fit")
    Flag.of(FinetuneOptimization, "batch_size", type=positive_int).add(parser)
    Flag.of(FinetuneOptimization, "warmup_fraction", metavar="F").add(parser)
    add_task_input(parser)
    Flag.of(FinetuneOptimization, "lm_weight").add(parser)
    Flag.of(FinetuneHead, "symmetric").add(parser)
    Flag.of(FinetuneHead, "pooling", choices=POOLINGS).add(parser)
    Flag.of(FinetuneOptimization, "sift").add(parser)
    Flag.of(FinetuneHead, "features", type=layer_indices).add(parser)
    Flag.of(FinetuneHead, "combine", choices=COMBINATIONS).add(parser)
    Flag.of(FinetuneHead, "lstm_dim", type=positive_int, metavar="N").add(parser)
    flags.DOCUMENT_CONTEXT.add(parser)
    Flag.of(FinetuneHead, "elmo", metavar="DIR").add(parser)
    Flag.of(FinetuneHead, "elmo_output").add(parser)
    parser.add_argument("--mix-layer-norm", action="store_true",
                        help="--combine mix, --elmo: normalise each layer before the scalar mix (ELMo 3.2)")
    parser.add_argument("--mix-dropout", type=float, default=0.0, metavar="P",
                        help="--combine mix, --elmo: dropout on the scalar mix's output")
    parser.add_argument("--mix-l2", type=float, default=0.0, metavar="LAMBDA",
                        help="--combine mix, --elmo: add LAMBDA * ||s||^2 of the mix weights to the loss, logged as "
                        "loss_mix_l2 (ELMo: 0.001 lets the weights vary, 1 keeps them near the average)")
    Flag.of(FinetuneData, "synthetic_size", type=positive_int).add(parser)
    add_run_directory(parser, "runs/finetune", resume_help=": the finished runs of an --lr sweep or --restarts "
                      "are kept (or extended to more --steps, the linear decay laid out over them), the interrupted "
                      "one resumes from its checkpoint")
    flags.SAVE_EVERY.add(parser, note="within an epoch (each epoch's end saves one too)")
    add_training_precision(parser)
    add_process(parser)
    parser.name_fields(lrs="--lr (or --lr-grid)", mix="--mix-layer-norm, --mix-dropout and --mix-l2")
    parser.set_defaults(run=run_finetune)


def run_finetune(args: argparse.Namespace) -> None:
    definition = run_definition(args, RUN)
    setup = FinetuneSetup(
        task=args.task, model=args.model, revision=args.revision, device=args.device, precision=args.precision,
        progress=not args.no_progress, parallelism=parallelism(args), report_to=args.report_to,
        data=config_from_args(FinetuneData, args),
        head=config_from_args(FinetuneHead, args, mix=MixOptions(args.mix_layer_norm, args.mix_dropout, args.mix_l2)),
        optimization=config_from_args(FinetuneOptimization, args,
                                      lrs=args.lr_grid or (None if args.lr is None else (args.lr,))),
    )
    result = finetune(setup, args.out, overwrite=args.overwrite, resume=args.resume, definition=definition)
    if not result.main_process:
        return
    for run in result.runs:
        scores = ", ".join(f"{k} {v:.4f}" for k, v in run.items() if k.startswith("val_") and isinstance(v, float))
        print(f"lr {run['lr']:g} seed {run['seed']}: {scores}")
    print(f"best: lr {result.best['lr']:g} seed {result.best['seed']}; model in {args.out}")
