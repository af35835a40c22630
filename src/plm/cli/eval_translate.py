"""plm eval translate: translation by prompting a causal LM with example pairs, scored with BLEU (GPT-2 §3.7)."""

from __future__ import annotations

import argparse

from plm.apps.zeroshot.translation_prompt import evaluate_translation_prompt
from plm.cli import flags
from plm.cli.common import HelpFormatter, add_model
from plm.cli.eval_common import add_prompted_answers, check_outputs, report_answers, zero_shot_options

EXAMPLES = """examples:
  plm eval translate --model runs/pretrain --src test_2016_flickr.en --ref test_2016_flickr.fr
  plm eval translate --model gpt2-hf --src test.fr --ref test.en --examples-src val.fr --examples-ref val.en
"""


def register(metrics: argparse._SubParsersAction) -> None:
    parser = metrics.add_parser(
        "translate",
        help="translation by prompting a causal LM with 'source = target' pairs, scored with BLEU",
        description="Zero-shot translation as in GPT-2.\n\n"
        "--src and --ref are aligned files, one sentence a line; the direction is theirs (English --src and "
        "French --ref for en->fr). The model reads --shots example lines 'source = target', then 'source =', "
        "and writes greedily until a new line; the first sentence of that line is its translation. The "
        "examples are the first lines of --examples-src and --examples-ref, or of --src and --ref themselves, "
        "whose first --shots lines are then not scored. Prints sacrebleu's corpus BLEU and chrF.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_model(parser, "model directory or training run (plm or Hugging Face)")
    flags.SRC.add(parser, required=True, note="to translate")
    flags.REF.add(parser, required=True)
    flags.SHOTS.add(parser)
    parser.add_argument("--examples-src", metavar="FILE", help="take the example sentences from this file instead")
    parser.add_argument("--examples-ref", metavar="FILE", help="their translations, aligned with --examples-src")
    flags.LIMIT.add(parser, note="here sentences, after the examples")
    add_prompted_answers(parser, "a translation", 64, "the translations")
    parser.set_defaults(run=run_translate)


def run_translate(args: argparse.Namespace) -> None:
    check_outputs(args, "json", "predictions")
    result = evaluate_translation_prompt(zero_shot_options(args), args.src, args.ref, args.shots, args.examples_src,
                                         args.examples_ref, args.max_new_tokens)
    report_answers(args, f"translation by prompting: {args.src} -> {args.ref}", result.as_dict(), result.translations)
