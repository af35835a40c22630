"""plm eval perplexity: sliding-window perplexity of a causal LM on a text file."""

from __future__ import annotations

import argparse

from plm.cli.common import HelpFormatter, add_device, add_model, load_causal_lm, positive_int
from plm.text import file_perplexity

EXAMPLES = """examples:
  plm eval perplexity --model runs/pretrain test.txt
  plm eval perplexity --model runs/pretrain test.txt --window 256 --stride 128
"""


def register(metrics: argparse._SubParsersAction) -> None:
    parser = metrics.add_parser(
        "perplexity",
        help="perplexity of a text file with a sliding window",
        description="Perplexity of a causal LM on a text file. The text is cut into windows of --window tokens "
        "that move by --stride; each token is scored exactly once, reading the (window - stride) tokens before "
        "it as context. Prints perplexity, mean loss, token count, window and stride.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_model(parser, "model directory or training run")
    parser.add_argument("file", help="UTF-8 text file")
    parser.add_argument("--window", type=positive_int, help="tokens per window (default: the model's context)")
    parser.add_argument("--stride", type=positive_int, help="tokens between windows (default: half the window)")
    parser.add_argument("--batch-size", type=positive_int, default=8, help="windows per forward pass")
    add_device(parser)
    parser.set_defaults(run=run_perplexity)


def run_perplexity(args: argparse.Namespace) -> None:
    model, tokenizer = load_causal_lm(args.model, args.device)
    result = file_perplexity(model, tokenizer, args.file, args.window, args.stride, args.batch_size, progress=True)
    print(f"{args.file}: {result}")
