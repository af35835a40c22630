"""plm eval: evaluate a model with the standard metrics, one subcommand per task."""

from __future__ import annotations

import argparse

from plm.cli import (
    eval_bleu,
    eval_cloze,
    eval_coqa,
    eval_lambada,
    eval_pairs,
    eval_perplexity,
    eval_qa,
    eval_summarize,
    eval_task,
    eval_translate,
)

# Each module adds one `plm eval NAME` subcommand through its register(metrics).
EVALUATIONS = (
    eval_perplexity, eval_lambada, eval_cloze, eval_coqa, eval_summarize, eval_translate, eval_qa, eval_bleu, eval_task,
    eval_pairs,
)


def register(commands: argparse._SubParsersAction) -> None:
    evaluate = commands.add_parser("eval", help="evaluate a model", description="Evaluate a model.")
    metrics = evaluate.add_subparsers(dest="metric", required=True, metavar="METRIC")
    for evaluation in EVALUATIONS:
        evaluation.register(metrics)
