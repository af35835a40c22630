"""plm translate: translate sentences with an encoder-decoder, one per line, greedy or beam search as its family's
recipe decodes unless flags say otherwise."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict

from plm.apps.translation import DecodingOptions, load_seq2seq, recipe_decoding, translate
from plm.cli.common import (
    HelpFormatter,
    add_device,
    add_model,
    add_no_progress,
    add_quantize,
    inference_device,
    positive_int,
    quantized,
)
from plm.data.corpus import read_text
from plm.device import resolve_device
from plm.errors import PLMError
from plm.models import RECIPES

EXAMPLES = """examples:
  plm translate --model runs/dates <<< "Friday, the fifteenth of March twenty twenty-four"
  plm translate --model runs/de-en test.de > test.hyp       # a Transformer: beam 4, alpha 0.6, + 50 tokens
  plm translate --model runs/de-en test.de --beam 1 > test.greedy
"""


def family_defaults() -> str:
    """Each encoder-decoder family's decoding defaults as flags, one family a line, for the help text."""
    return "".join(
        f"\n  {family}: --beam {r.decoding.beam} --length-penalty {r.decoding.length_penalty:g} "
        f"--max-len-a {r.decoding.max_len_a:g} --max-len-b {r.decoding.max_len_b}"
        for family, r in RECIPES.items() if "seq2seq" in r.objectives
    )


def add_decoding(parser: argparse.ArgumentParser) -> None:
    """The search flags; each one not given is the model family's default (its recipe's ``decoding``)."""
    search = parser.add_argument_group("search", "each flag not given is the model family's:" + family_defaults())
    search.add_argument("--beam", type=positive_int, help="beam size (1: greedy search)")
    search.add_argument("--max-len-a", type=float, help="a translation has at most a * source tokens + b tokens")
    search.add_argument("--max-len-b", type=int, help="see --max-len-a")
    search.add_argument("--length-penalty", type=float, help="GNMT's alpha for beam search (0: none)")
    parser.add_argument("--max-tokens", type=positive_int, default=4096,
                        help="source tokens per batch with a beam of 1; a beam of k takes a k-th of them, "
                        "so memory does not grow with --beam")


def decoding_options(args: argparse.Namespace, family: str) -> DecodingOptions:
    """The search flags given, and the family's recipe for those not given."""
    given = {name: getattr(args, name) for name in asdict(RECIPES[family].decoding) if getattr(args, name) is not None}
    return recipe_decoding(family, **given, max_tokens=args.max_tokens)


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
    add_no_progress(parser)
    add_device(parser)
    add_quantize(parser)
    parser.set_defaults(run=run)


def source_lines(path: str | None) -> list[str]:
    text = read_text(path) if path else sys.stdin.read()
    lines = text.removesuffix("\n").split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            raise PLMError(f"{path or 'stdin'}:{number}: empty line; every line must hold one sentence")
    return lines


def run(args: argparse.Namespace) -> None:
    model, tokenizers = load_seq2seq(args.model, resolve_device(inference_device(args)))
    model = quantized(model, args)
    options = decoding_options(args, model.family)
    options.validate()
    for line in translate(model, tokenizers, source_lines(args.file), options, progress=not args.no_progress):
        print(line)
