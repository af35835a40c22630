"""plm eval coqa: conversational question answering by prompting, scored with CoQA's F1 (GPT-2 §3.5)."""

from __future__ import annotations

import argparse

from plm.apps.zeroshot.coqa import evaluate_coqa
from plm.cli import flags
from plm.cli.common import HelpFormatter, add_model
from plm.cli.eval_common import add_prompted_answers, check_outputs, report_answers, zero_shot_options

EXAMPLES = """examples:
  plm eval coqa --model runs/pretrain coqa-dev-v1.0.json --limit 500
  plm eval coqa --model gpt2-hf coqa-dev-v1.0.json --json coqa.json --predictions answers.json
"""


def register(metrics: argparse._SubParsersAction) -> None:
    parser = metrics.add_parser(
        "coqa",
        help="CoQA: answer a conversation's questions about a story, scored with CoQA's F1",
        description="Zero-shot CoQA as in GPT-2.\n\n"
        "FILE is CoQA's official JSON (coqa-dev-v1.0.json): stories with their questions, answers and "
        "additional answers. For each question the model reads the story, the conversation so far (the "
        "dataset's questions and answers, 'Q: ...' and 'A: ...' lines) and 'Q: question' with a final 'A:', "
        "and answers greedily until a new line. Prints the official script's F1 and exact match, as "
        "fractions in [0, 1] (the script prints them x 100): "
        "SQuAD's normalisation, and with several references the mean of the best match against all but one. "
        "A prompt too long for the model's context loses the beginning of the story.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_model(parser, "model directory or training run (plm or Hugging Face)")
    parser.add_argument("file", help="CoQA JSON file")
    flags.LIMIT.add(parser, note="here questions")
    add_prompted_answers(parser, "an answer", 32, 'the answers ([{"id", "turn_id", "answer"}], the official '
                         "script's format)")
    parser.set_defaults(run=run_coqa)


def run_coqa(args: argparse.Namespace) -> None:
    check_outputs(args, "json", "predictions")
    result = evaluate_coqa(zero_shot_options(args), args.file, args.max_new_tokens)
    report_answers(args, f"CoQA (F1 and exact match, fractions): {args.file}", result.as_dict(), result.predictions)
