"""plm eval qa: open-domain questions answered by prompting, exact match overall and when most confident (§3.8)."""

from __future__ import annotations

import argparse

from plm.apps.zeroshot.open_qa import evaluate_open_qa
from plm.cli import flags
from plm.cli.common import HelpFormatter, add_model
from plm.cli.eval_common import add_prompted_answers, check_outputs, report_answers, zero_shot_options

EXAMPLES = """examples:
  plm eval qa --model runs/pretrain NQ-open.dev.jsonl --limit 500
  plm eval qa --model gpt2-hf NQ-open.dev.jsonl --shots 8 --json nq.json --predictions answers.json
"""


def register(metrics: argparse._SubParsersAction) -> None:
    parser = metrics.add_parser(
        "qa",
        help="open-domain QA (Natural Questions): exact match, and on the most confident answers",
        description="Zero-shot open-domain question answering as in GPT-2.\n\n"
        'FILE is JSONL, one question a line, as NQ-open: {"question": "...", "answer": ["...", ...]}. The '
        "model reads --shots example pairs ('Q: question' and 'A: answer' lines), then 'Q: question' and "
        "'A:', and answers greedily until a new line. The examples are the first lines of --examples, or of "
        "FILE itself, whose first --shots questions are then not scored. An answer is right when it equals "
        "one of the answers after SQuAD's normalisation. Prints the exact match (a fraction), and the exact match on "
        "the --confident-fraction of answers the model gave the highest probability (the product of the "
        "probabilities of its tokens).",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_model(parser, "model directory or training run (plm or Hugging Face)")
    parser.add_argument("file", help="JSONL file of questions and answers")
    flags.SHOTS.add(parser)
    parser.add_argument("--examples", metavar="FILE", help="take the example pairs from this JSONL file instead")
    flags.LIMIT.add(parser, note="here questions, after the examples")
    parser.add_argument("--confident-fraction", type=float, default=0.01,
                        help="the share of the most confident answers scored apart")
    add_prompted_answers(parser, "an answer", 32,
                         'the answers ([{"question", "answer", "probability", "correct"}])')
    parser.set_defaults(run=run_qa)


def run_qa(args: argparse.Namespace) -> None:
    check_outputs(args, "json", "predictions")
    result = evaluate_open_qa(zero_shot_options(args), args.file, args.shots, args.examples, args.confident_fraction,
                              args.max_new_tokens)
    report_answers(args, f"open-domain QA (exact match, a fraction): {args.file}", result.as_dict(),
                   result.predictions)
