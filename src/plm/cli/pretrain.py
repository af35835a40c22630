"""plm pretrain: train a model from scratch (or continue one) with its paper's objective."""

from __future__ import annotations

import argparse
import os

from plm.cli.common import HelpFormatter, add_device, add_seed, positive_int
from plm.device import PRECISIONS
from plm.models import PRESETS
from plm.training.optim import OPTIMIZERS
from plm.training.pretrain import OBJECTIVES, PretrainSetup, pretrain
from plm.training.trainer import TrainingConfig

EXAMPLES = """examples:
  plm pretrain                                   # gpt2-mini on the embedded corpus
  plm pretrain --model bert                      # bert-mini, MLM + NSP, WordPiece trained on the corpus
  plm pretrain --model albert --objective mlm+sop   # albert-mini, n-gram masking, LAMB, Unigram
  plm pretrain --model deberta --objective mlm   # deberta-mini with the enhanced mask decoder
  plm pretrain --model gpt2 --train a.txt b.txt --validation v.txt --out runs/gpt2
  plm pretrain --out runs/gpt2 --resume          # continue a run that was stopped
  torchrun --nproc_per_node=2 -m plm.cli.main pretrain --out runs/ddp   # data-parallel
"""


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "pretrain",
        help="pre-train a language model on text",
        description="Pre-train a model with its paper's objective: GPT next-token prediction (clm); BERT masked LM "
        "+ next-sentence prediction; ALBERT masked LM with n-gram masking + sentence-order prediction, LAMB; "
        "DeBERTa masked LM. Without --train it uses the embedded corpus; without --tokenizer it trains the "
        "paper's kind (byte-level BPE, WordPiece, Unigram) on the training text. "
        "The run directory gets checkpoint/ (model, tokenizer, optimizer and RNG state, replaced atomically), tokenizer/ (when one was trained), "
        "metrics.jsonl and training_config.json.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "--model",
        default="gpt2-mini",
        help=f"a family (gpt, bert, albert, deberta: its small preset), a preset ({', '.join(PRESETS)}) "
        "or a plm model directory to continue",
    )
    parser.add_argument("--objective", default="auto", choices=OBJECTIVES, help="auto: the family's own (gpt clm, bert mlm+nsp, albert mlm+sop, deberta mlm)")
    parser.add_argument("--whole-word", action="store_true", help="mask whole words, not sub-word tokens")
    parser.add_argument("--max-ngram", type=positive_int, help="mask spans of up to n words, p(n) ~ 1/n (default: 3 for ALBERT, else 1)")
    parser.add_argument("--optimizer", default="auto", choices=OPTIMIZERS, help="auto: LAMB for ALBERT, AdamW otherwise")
    parser.add_argument("--train", nargs="+", default=[], metavar="FILE", help="UTF-8 training text; documents are separated by blank lines")
    parser.add_argument("--validation", nargs="+", default=[], metavar="FILE", help="validation text (default: 5%% of the documents held out)")
    parser.add_argument("--tokenizer", help="directory with a tokenizer.json to use instead of training one")
    parser.add_argument("--vocab-size", type=positive_int, default=8192, help="vocabulary of the tokenizer trained when none is given")
    parser.add_argument("--out", default="runs/pretrain", help="run directory")
    parser.add_argument("--resume", action="store_true", help="continue from the run directory's checkpoint")
    parser.add_argument("--steps", type=positive_int, default=1000, help="optimizer steps")
    parser.add_argument("--batch-size", type=positive_int, default=16, help="sequences per micro-batch per process")
    parser.add_argument("--block-size", type=positive_int, help="tokens per sequence (default: the context for GPT, 128 for encoders)")
    parser.add_argument("--grad-accum", type=positive_int, default=1, help="micro-batches per optimizer step")
    parser.add_argument("--lr", type=float, default=6e-4, help="peak learning rate")
    parser.add_argument("--min-lr", type=float, default=6e-5, help="learning rate at the end of the cosine decay")
    parser.add_argument("--warmup", type=int, default=100, help="steps of linear warmup")
    parser.add_argument("--weight-decay", type=float, default=0.01, help="AdamW decay of weight matrices (not biases, norms, embeddings)")
    parser.add_argument("--dropout", type=float, help="one dropout rate for embeddings, attention and residuals (default: the preset's)")
    parser.add_argument("--clip", type=float, default=1.0, help="gradient-norm clipping (0: off)")
    parser.add_argument("--eval-every", type=positive_int, default=200, help="steps between validation runs")
    parser.add_argument("--save-every", type=positive_int, default=500, help="steps between checkpoints")
    parser.add_argument("--log-every", type=positive_int, default=10, help="steps between lines in metrics.jsonl")
    parser.add_argument("--precision", default="auto", choices=PRECISIONS, help="autocast precision (auto: bf16/fp16 on GPU, fp32 on CPU)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_seed(parser)
    add_device(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> None:
    setup = PretrainSetup(
        model=args.model,
        train_files=tuple(args.train),
        validation_files=tuple(args.validation),
        tokenizer=args.tokenizer,
        vocab_size=args.vocab_size,
        objective=args.objective,
        whole_word=args.whole_word,
        max_ngram=args.max_ngram,
        block_size=args.block_size,
        batch_size=args.batch_size,
        dropout=args.dropout,
    )
    training = TrainingConfig(
        steps=args.steps,
        lr=args.lr,
        min_lr=args.min_lr,
        warmup=args.warmup,
        weight_decay=args.weight_decay,
        optimizer=args.optimizer,
        grad_accum=args.grad_accum,
        clip=args.clip,
        eval_every=args.eval_every,
        save_every=args.save_every,
        log_every=args.log_every,
        seed=args.seed,
        device=args.device,
        precision=args.precision,
        progress=not args.no_progress,
    )
    _, _, metrics = pretrain(setup, training, args.out, resume=args.resume)
    if os.environ.get("RANK", "0") != "0":
        return
    if "val_perplexity" in metrics:
        print(f"step {metrics['step']}: validation loss {metrics['val_loss']:.4f}, perplexity {metrics['val_perplexity']:.2f}")
    print(f"saved to {args.out}/checkpoint")
