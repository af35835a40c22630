"""plm eval perplexity: sliding-window perplexity of a causal LM on a text file."""

from __future__ import annotations

import argparse

from plm.apps.text_pipelines import file_perplexity
from plm.apps.zeroshot.detokenize import DETOKENIZERS
from plm.cli.common import (
    HelpFormatter,
    add_device,
    add_model,
    add_no_progress,
    add_weights,
    load_causal_lm,
    positive_int,
)
from plm.cli.eval_common import add_json, check_outputs, report

EXAMPLES = """examples:
  plm eval perplexity --model runs/pretrain test.txt
  plm eval perplexity --model runs/pretrain test.txt --window 256 --stride 128
  plm eval perplexity --model gpt2-hf wikitext-2/test.txt --detokenize wikitext --json wt2.json
"""


def register(metrics: argparse._SubParsersAction) -> None:
    parser = metrics.add_parser(
        "perplexity",
        help="perplexity of a text file with a sliding window",
        description="Perplexity of a causal LM on a text file. The text is cut into windows of --window tokens "
        "that move by --stride; each token is scored exactly once, reading the (window - stride) tokens before "
        "it as context. Prints perplexity per token, per word and per byte (the same total loss divided by "
        "the tokens scored, by the file's whitespace-separated words, and by the UTF-8 bytes the model read), "
        "so that models with different tokenizers compare, with the window and stride.\n\n"
        "--detokenize undoes a benchmark's tokenisation before scoring, as GPT-2 did: 'wikitext' joins "
        "'@-@', '@,@', '@.@', punctuation, quotes, contractions and '= = heading = =' back; 'ptb' joins "
        "contractions. Words are counted before detokenising, as the benchmark counts them.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_model(parser, "model directory or training run")
    parser.add_argument("file", help="UTF-8 text file")
    parser.add_argument("--window", type=positive_int, help="tokens per window (default: the model's context)")
    parser.add_argument("--stride", type=positive_int, help="tokens between windows (default: half the window)")
    parser.add_argument("--batch-size", type=positive_int, default=8, help="windows per forward pass")
    parser.add_argument(
        "--detokenize", choices=tuple(DETOKENIZERS), default="none", help="undo a benchmark's tokenisation"
    )
    add_json(parser)
    add_no_progress(parser)
    add_device(parser)
    add_weights(parser)
    parser.set_defaults(run=run_perplexity)


def run_perplexity(args: argparse.Namespace) -> None:
    check_outputs(args.json)
    model, tokenizer = load_causal_lm(args)
    result = file_perplexity(
        model, tokenizer, args.file, args.window, args.stride, args.batch_size,
        progress=not args.no_progress, detokenize=args.detokenize,
    )
    report(f"{args.file}: {result}", result.as_dict(), args.json)
