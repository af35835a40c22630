"""plm eval bleu: translate a test set and score it: BLEU, chrF (sacrebleu, detokenised) and exact match."""

from __future__ import annotations

import argparse

from plm.apps.translation import load_seq2seq
from plm.cli import flags
from plm.cli.common import (
    HelpFormatter,
    add_device,
    add_model,
    add_no_progress,
    add_weights,
    inference_device,
    with_weights,
)
from plm.cli.eval_common import add_json, check_outputs, report
from plm.cli.translate import add_decoding, decoding_config, search_json
from plm.data.sentence_pairs import read_parallel
from plm.objectives.translation import score_translations, translate

EXAMPLES = """examples:
  plm eval bleu --model runs/de-en --src test_2016_flickr.de --ref test_2016_flickr.en
  plm eval bleu --model runs/de-en --src test.de --ref test.en --beam 1 --json greedy.json
  plm eval bleu --model facebook/wmt19-de-en --src test.de --ref test.en    # a released FSMT model
"""


def register(metrics: argparse._SubParsersAction) -> None:
    parser = metrics.add_parser(
        "bleu",
        help="BLEU, chrF and exact match of an encoder-decoder's translations",
        description="Translate --src line by line and score the translations against --ref (aligned, one "
        "reference per line) with sacrebleu's corpus BLEU and chrF on the detokenised text (0-100), and the "
        "fraction of exact matches (in [0, 1] in the table and --json, a percentage in the first line). The "
        "search is the model family's own unless flags say otherwise (the Transformer's is "
        "the paper's: beam 4, length penalty 0.6, at most source length + 50 tokens); it is printed, and "
        "written to --json, with the scores.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_model(parser, "model directory or training run (plm seq2seq train), or a Hugging Face Marian or FSMT "
              "directory")
    flags.SRC.add(parser, required=True)
    flags.REF.add(parser, required=True)
    add_decoding(parser)
    add_json(parser)
    add_no_progress(parser)
    add_device(parser)
    add_weights(parser)
    parser.set_defaults(run=run_bleu)


def run_bleu(args: argparse.Namespace) -> None:
    check_outputs(args, "json")
    pairs = read_parallel(args.src, args.ref)
    model, tokenizers = load_seq2seq(args.model, inference_device(args), args.revision)
    model = with_weights(model, args)
    config = decoding_config(args, model.family)
    hypotheses = translate(model, tokenizers, [p.source for p in pairs], config, max_tokens=args.max_tokens,
                           progress=not args.no_progress)
    scores = score_translations(hypotheses, [[p.target for p in pairs]])
    report(f"{args.src}: {scores}", scores.as_dict() | {"sentences": scores.sentences} | search_json(config),
           args.json)
