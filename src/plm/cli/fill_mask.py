"""plm fill-mask: what a masked language model guesses for a missing word."""

from __future__ import annotations

import argparse

from plm.apps.text_pipelines import fill_mask
from plm.cli.common import (
    HelpFormatter,
    add_device,
    add_model,
    add_no_progress,
    add_weights,
    load_encoder,
    positive_int,
)
from plm.progress import progress_bar

EXAMPLES = """examples:
  plm fill-mask --model runs/bert "The capital of France is [MASK]."
  plm fill-mask --model runs/albert "Return the [MASK] of the list." --guesses 10
  plm fill-mask --model runs/bert "Paris is the [MASK] of France." "The [MASK] sat on the mat."
"""


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "fill-mask",
        help="top predictions of a masked LM for each [MASK]",
        description="Run a masked language model (BERT, ALBERT, DeBERTa with an MLM head) on texts with one or "
        "more mask tokens each and print the most likely tokens for each mask, with their probabilities. With "
        "several texts, each text's lines follow it.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_model(parser, "model directory (plm or Hugging Face) or training run")
    parser.add_argument("texts", nargs="+", metavar="text", help="texts with the tokenizer's mask token, e.g. [MASK]")
    parser.add_argument("--guesses", type=positive_int, default=5, metavar="K", help="the K likeliest tokens per mask")
    add_no_progress(parser)
    add_device(parser)
    add_weights(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> None:
    model, tokenizer = load_encoder(args)
    filled = []
    # The bar is gone once done or failed (leave=False): an error stays the one line on stderr.
    with progress_bar(total=len(args.texts), desc="fill-mask", unit=" texts", disable=args.no_progress,
                      leave=False) as bar:
        for text in args.texts:
            filled.append(fill_mask(model, tokenizer, text, args.guesses))
            bar.update()
    for text, masks in zip(args.texts, filled):
        if len(args.texts) > 1:
            print(text)
        for number, guesses in enumerate(masks, start=1):
            # three significant digits: a guess of 0.0004 reads as such, not as 0.000
            print(f"mask {number}: " + "  ".join(f"{token} ({probability:.3g})" for token, probability in guesses))
