"""plm eval cloze: multiple choice by filling each candidate into a blank (CBT, Winograd; GPT-2 §3.2, §3.4)."""

from __future__ import annotations

import argparse

from plm.apps.zeroshot.cloze import SCORINGS, evaluate_cloze
from plm.cli.common import HelpFormatter, add_device, add_model, add_no_progress, add_weights, positive_int
from plm.cli.eval_common import add_json, check_outputs, report, zero_shot_options

EXAMPLES = """examples:
  plm eval cloze --model runs/pretrain cbt_ne.jsonl
  plm eval cloze --model gpt2-hf winograd.jsonl --scoring partial --blank _ --json wsc.json
"""


def register(metrics: argparse._SubParsersAction) -> None:
    parser = metrics.add_parser(
        "cloze",
        help="multiple choice: fill each option into a blank, keep the likeliest",
        description="Cloze / multiple-choice accuracy of a causal LM.\n\n"
        'FILE is JSONL, one item per line: {"context": "...", "query": "... XXXXX ...", "options": ["a", "b"], '
        '"answer": "a"}. "context" is optional (the text scored is context + " " + query); the query holds '
        "the --blank marker once; the answer is one of the options or its index. Each option is put in the "
        "blank and scored; the highest total log-probability wins. --scoring full (CBT) scores the option "
        "and the rest of the text after the text before the blank; --scoring partial (Winograd) scores only "
        "the text after the option.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_model(parser, "model directory or training run (plm or Hugging Face)")
    parser.add_argument("file", help="JSONL file of cloze items")
    parser.add_argument("--scoring", choices=SCORINGS, default="full", help="what to score after the blank is filled")
    parser.add_argument("--blank", default="XXXXX", help="the marker of the blank in each query")
    parser.add_argument("--batch-size", type=positive_int, default=16, help="candidates per forward pass")
    add_json(parser)
    add_no_progress(parser)
    add_device(parser)
    add_weights(parser)
    parser.set_defaults(run=run_cloze)


def run_cloze(args: argparse.Namespace) -> None:
    check_outputs(args, "json")
    result = evaluate_cloze(zero_shot_options(args), args.file, args.scoring, args.blank)
    report(f"cloze ({args.scoring} scoring): {args.file}", result.as_dict(), args.json)
