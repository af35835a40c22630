"""plm translate: translate sentences with an encoder-decoder, one per line, greedy or beam search as its family's
recipe decodes unless flags say otherwise, or sampled."""

from __future__ import annotations

import argparse
import re

from plm.apps.translation import load_seq2seq
from plm.cli import flags
from plm.cli.common import (
    HelpFormatter,
    add_device,
    add_model,
    add_no_progress,
    add_seed,
    add_weights,
    inference_device,
    line_items,
    with_weights,
)
from plm.decoding import GenerationConfig
from plm.models import RECIPES
from plm.objectives.translation import check_search, recipe_decoding, translate

EXAMPLES = """examples:
  plm translate --model runs/dates <<< "Friday, the fifteenth of March twenty twenty-four"
  plm translate --model runs/de-en test.de > test.hyp       # a Transformer: beam 4, alpha 0.6, + 50 tokens
  plm translate --model runs/de-en test.de --beam 1 > test.greedy
  plm translate --model Helsinki-NLP/opus-mt-de-en test.de    # a released Marian model, by Hub id
  plm translate --model runs/en-de mono.en --sample --seed 1 > back.de   # sampled, for back-translation
"""


def family_defaults() -> str:
    """Each encoder-decoder family's decoding defaults as flags, one family a line, for the help text."""
    return "".join(
        f"\n  {family}: --beam {r.decoding.num_beams} --length-penalty {r.decoding.length_penalty:g} "
        f"--max-len-a {r.decoding.max_len_a:g} --max-len-b {r.decoding.max_new_tokens}"
        for family, r in RECIPES.items() if "seq2seq" in r.objectives
    )


def add_decoding(parser: argparse.ArgumentParser) -> None:
    """The search flags; each one not given is the model family's default (its recipe's ``decoding``)."""
    search = parser.add_argument_group("search", "each flag not given is the model family's:" + family_defaults())
    for flag in (flags.BEAM, flags.MAX_LEN_A, flags.MAX_LEN_B, flags.LENGTH_PENALTY):
        flag.add(search)
    flags.MAX_TOKENS.add(parser, default=4096, note="here source tokens with a beam of 1; a beam of k takes a k-th "
                         "of them, so memory does not grow with --beam")


def add_sampling(parser: argparse.ArgumentParser) -> None:
    """The sampling flags, which replace the search by one draw a sentence."""
    sampling = parser.add_argument_group(
        "sampling", "any of --sample, --temperature, --top-k, --top-p draws one translation a sentence in place of "
        "the search (back-translation's sampling); each sentence draws from its own generator, seeded by --seed and "
        "its line number, so that its translation does not depend on the other lines")
    flags.SAMPLE.add(sampling)
    flags.TEMPERATURE.add(sampling)
    flags.TOP_K.add(sampling, default=0)
    flags.TOP_P.add(sampling)
    add_seed(sampling, note="the same seed draws the same translations")


SEARCH_FLAGS = {"beam": "num_beams", "length_penalty": "length_penalty", "max_len_a": "max_len_a",
                "max_len_b": "max_new_tokens"}  # each search flag's GenerationConfig field


def decoding_config(args: argparse.Namespace, family: str) -> GenerationConfig:
    """The search flags given, and the family's recipe for those not given, checked with ``--max-tokens``.

    Sampling flags, where the command has them, replace the search by one draw a sentence: one beam unless
    ``--beam`` says otherwise (which the check refuses).
    """
    given = {field: getattr(args, flag) for flag, field in SEARCH_FLAGS.items() if getattr(args, flag) is not None}
    if getattr(args, "sample", None) is not None:
        sampled = {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p,
                   "do_sample": True if args.sample else None, "seed": args.seed}
        if GenerationConfig(**sampled).sampling:
            given = {"num_beams": 1, **given, **sampled}
    config = recipe_decoding(family, **given)
    check_search(config, args.max_tokens)
    return config


def search_json(config: GenerationConfig) -> dict[str, float]:
    """The search as its flags name it, for the scores' JSON.

    Args:
        config: the search.

    Returns:
        Each search flag's value, by the flag's name.
    """
    return {flag: getattr(config, field) for flag, field in SEARCH_FLAGS.items()}


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "translate",
        help="translate sentences, one per line",
        description="Translate each line of FILE (or of stdin) with an encoder-decoder; one translation per line "
        "on stdout, in input order (a line break the model writes becomes a space). Sentences are decoded in "
        "batches of similar lengths; beam search decodes all beams of a batch in one forward pass per step.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_model(parser, "model directory or training run (plm seq2seq train), or a Hugging Face Marian or FSMT "
              "directory")
    parser.add_argument("file", nargs="?", help="UTF-8 file, one source sentence per line (default: stdin)")
    add_decoding(parser)
    add_sampling(parser)
    add_no_progress(parser)
    add_device(parser)
    add_weights(parser)
    parser.set_defaults(run=run)


LINE_BREAKS = re.compile("[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]+")  # what str.splitlines splits at


def one_line(translation: str) -> str:
    """``translation`` with each run of line breaks a space, so that output line n is input line n's translation."""
    return LINE_BREAKS.sub(" ", translation)


def run(args: argparse.Namespace) -> None:
    model, tokenizers = load_seq2seq(args.model, inference_device(args), args.revision)
    model = with_weights(model, args)
    config = decoding_config(args, model.family)
    lines = line_items(args.file, "one sentence")
    for line in translate(model, tokenizers, lines, config, max_tokens=args.max_tokens, progress=not args.no_progress):
        print(one_line(line))
