"""plm translate: translate sentences with an encoder-decoder, one per line, greedy or beam search."""

from __future__ import annotations

import argparse
import sys

from plm.cli.common import HelpFormatter, add_device, add_model, positive_int
from plm.data.corpus import read_text
from plm.device import resolve_device
from plm.errors import PLMError
from plm.translation import DecodingOptions, load_seq2seq, translate

EXAMPLES = """examples:
  plm translate --model runs/dates <<< "Friday, the fifteenth of March twenty twenty-four"
  plm translate --model runs/de-en test.de --beam 4 --length-penalty 0.6 > test.hyp
"""


def add_decoding(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--beam", type=positive_int, default=1, help="beam size (1: greedy search)")
    parser.add_argument("--max-len-a", type=float, default=1.5, help="a translation has at most a * source tokens + b tokens")
    parser.add_argument("--max-len-b", type=int, default=10, help="see --max-len-a")
    parser.add_argument("--length-penalty", type=float, default=0.6, help="GNMT's alpha for beam search (0: none)")
    parser.add_argument("--max-tokens", type=positive_int, default=4096, help="source tokens per batch")


def decoding_options(args: argparse.Namespace) -> DecodingOptions:
    return DecodingOptions(beam=args.beam, length_penalty=args.length_penalty, max_len_a=args.max_len_a,
                           max_len_b=args.max_len_b, max_tokens=args.max_tokens)


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "translate",
        help="translate sentences, one per line",
        description="Translate each line of FILE (or of stdin) with an encoder-decoder; one translation per line "
        "on stdout, in input order. Sentences are decoded in batches of similar lengths; beam search decodes all "
        "beams of a batch in one forward pass per step.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_model(parser, "model directory or training run (plm seq2seq train)")
    parser.add_argument("file", nargs="?", help="UTF-8 file, one source sentence per line (default: stdin)")
    add_decoding(parser)
    add_device(parser)
    parser.set_defaults(run=run)


def source_lines(path: str | None) -> list[str]:
    text = read_text(path) if path else sys.stdin.read()
    lines = text.removesuffix("\n").split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            raise PLMError(f"{path or 'stdin'}:{number}: empty line; every line must hold one sentence")
    return lines


def run(args: argparse.Namespace) -> None:
    options = decoding_options(args)
    options.validate()
    model, tokenizers = load_seq2seq(args.model, resolve_device(args.device))
    for line in translate(model, tokenizers, source_lines(args.file), options):
        print(line)
