"""plm eval summarize: summaries by prompting with "TL;DR:", scored with ROUGE (GPT-2 §3.6)."""

from __future__ import annotations

import argparse

from plm.apps.zeroshot.summarize import evaluate_summaries
from plm.cli import flags
from plm.cli.common import (
    HelpFormatter,
    add_device,
    add_model,
    add_no_progress,
    add_seed,
    add_weights,
    positive_int,
)
from plm.cli.eval_common import add_json, check_outputs, report, zero_shot_options
from plm.storage.atomic_files import write_json

EXAMPLES = """examples:
  plm eval summarize --model runs/pretrain cnn_dm_test.jsonl
  plm eval summarize --model gpt2-hf cnn_dm_test.jsonl --max-new-tokens 100 --json rouge.json --predictions out.json
"""


def register(metrics: argparse._SubParsersAction) -> None:
    parser = metrics.add_parser(
        "summarize",
        help="summaries by prompting with TL;DR:, scored with ROUGE",
        description="Zero-shot summarisation as in GPT-2.\n\n"
        'FILE is JSONL, one article per line: {"article": "...", "summary": "the reference"}. The model '
        "reads the article followed by a new line and 'TL;DR:', samples --max-new-tokens tokens with top-k "
        "--top-k, and the first --sentences sentences of what it wrote are its summary. Prints the mean "
        "ROUGE-1, ROUGE-2 and ROUGE-L F1 (fractions in [0, 1], rouge-score with stemming). An article too long for the "
        "context loses its beginning.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_model(parser, "model directory or training run (plm or Hugging Face)")
    parser.add_argument("file", help="JSONL file of articles with reference summaries")
    flags.MAX_NEW_TOKENS.add(parser, default=100, note="here the tokens sampled per article")
    flags.TOP_K.add(parser, default=2, note="GPT-2's 2 for its TL;DR: summaries")
    parser.add_argument("--sentences", type=positive_int, default=3, help="sentences kept as the summary")
    parser.add_argument("--batch-size", type=positive_int, default=8, help="articles per batch")
    flags.PREDICTIONS.add(parser, note="the generated summaries", formerly=("--summaries",))
    add_seed(parser)
    add_json(parser)
    add_no_progress(parser)
    add_device(parser)
    add_weights(parser)
    parser.set_defaults(run=run_summarize)


def run_summarize(args: argparse.Namespace) -> None:
    check_outputs(args, "json", "predictions")
    result = evaluate_summaries(zero_shot_options(args), args.file, args.max_new_tokens, args.top_k, args.sentences,
                                args.seed)
    report(f"summaries (ROUGE F1, fractions): {args.file}", result.as_dict(), args.json)
    if args.predictions:
        write_json(args.predictions, result.summaries)
