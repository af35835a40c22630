"""plm eval lambada: last-word accuracy and perplexity on LAMBADA (GPT-2 §3.3)."""

from __future__ import annotations

import argparse

from plm.apps.zeroshot.lambada import evaluate_lambada
from plm.cli.common import HelpFormatter, add_device, add_model, add_no_progress, add_weights, positive_int
from plm.cli.eval_common import add_json, check_outputs, report, zero_shot_options

EXAMPLES = """examples:
  plm eval lambada --model runs/pretrain lambada_test.jsonl
  plm eval lambada --model gpt2-hf lambada_test.jsonl --stop-word-filter --json lambada.json
"""


def register(metrics: argparse._SubParsersAction) -> None:
    parser = metrics.add_parser(
        "lambada",
        help="LAMBADA: predict the last word of a passage",
        description="LAMBADA accuracy and last-word perplexity of a causal LM.\n\n"
        'FILE is JSONL, one passage per line, as OpenAI released it: {"text": "... the passage ... word"}. '
        "The target is the last whitespace-separated word. A passage is correct when greedy decoding after the "
        "rest of the passage gives every sub-word token of the target; perplexity is per target word, "
        "exp(mean -log p(word | passage)). --stop-word-filter never lets the first token of the answer be a "
        "stop word ('the', 'and', 'he', ...), the filter the paper mentions. Passages longer than the model's "
        "context lose their beginning.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_model(parser, "model directory or training run (plm or Hugging Face)")
    parser.add_argument("file", help='JSONL file of {"text": ...} passages')
    parser.add_argument("--stop-word-filter", action="store_true", help="never answer with a stop word")
    parser.add_argument("--batch-size", type=positive_int, default=16, help="passages per forward pass")
    add_json(parser)
    add_no_progress(parser)
    add_device(parser)
    add_weights(parser)
    parser.set_defaults(run=run_lambada)


def run_lambada(args: argparse.Namespace) -> None:
    check_outputs(args, "json")
    result = evaluate_lambada(zero_shot_options(args), args.file, args.stop_word_filter)
    report(f"LAMBADA: {args.file}", result.as_dict(), args.json)
