"""plm eval bleu: translate a test set and score it: BLEU, chrF (sacrebleu, detokenised) and exact match."""

from __future__ import annotations

import argparse

from plm.cli.common import HelpFormatter, add_device, add_model
from plm.cli.translate import add_decoding, decoding_options
from plm.data.parallel import read_parallel
from plm.device import resolve_device
from plm.translation import load_seq2seq, score_translations, translate

EXAMPLES = """examples:
  plm eval bleu --model runs/de-en --src test_2016_flickr.de --ref test_2016_flickr.en
  plm eval bleu --model runs/de-en --src test.de --ref test.en --beam 4
"""


def register(metrics: argparse._SubParsersAction) -> None:
    parser = metrics.add_parser(
        "bleu",
        help="BLEU, chrF and exact match of an encoder-decoder's translations",
        description="Translate --src line by line and score the translations against --ref (aligned, one "
        "reference per line) with sacrebleu's corpus BLEU and chrF on the detokenised text, and the share of "
        "exact matches.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_model(parser, "model directory or training run (plm seq2seq train)")
    parser.add_argument("--src", required=True, help="source sentences, one per line")
    parser.add_argument("--ref", required=True, help="reference translations, aligned with --src")
    add_decoding(parser)
    add_device(parser)
    parser.set_defaults(run=run_bleu)


def run_bleu(args: argparse.Namespace) -> None:
    options = decoding_options(args)
    options.validate()
    pairs = read_parallel(args.src, args.ref)
    model, tokenizers = load_seq2seq(args.model, resolve_device(args.device))
    hypotheses = translate(model, tokenizers, [p.source for p in pairs], options)
    print(f"{args.src}: {score_translations(hypotheses, [[p.target for p in pairs]])}")
