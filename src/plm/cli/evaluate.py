"""plm eval: evaluate a model with the standard metrics, one subcommand per task."""

from __future__ import annotations

import argparse

from plm.cli import eval_bleu, eval_cloze, eval_lambada, eval_perplexity, eval_summarize, eval_task

# Each module adds one `plm eval NAME` subcommand through its register(metrics).
EVALUATIONS = (eval_perplexity, eval_lambada, eval_cloze, eval_summarize, eval_bleu, eval_task)


def register(commands: argparse._SubParsersAction) -> None:
    evaluate = commands.add_parser("eval", help="evaluate a model", description="Evaluate a model.")
    metrics = evaluate.add_subparsers(dest="metric", required=True, metavar="METRIC")
    for evaluation in EVALUATIONS:
        evaluation.register(metrics)
