"""plm eval pairs: an encoder's pre-training heads scored on NSP or SOP examples (ALBERT's Table 5)."""

from __future__ import annotations

import argparse

from plm.apps.head_accuracy import PAIR_TASKS, head_accuracies
from plm.cli import flags
from plm.cli.common import HelpFormatter, add_device, add_model, add_no_progress, add_seed, load_encoder, positive_int
from plm.cli.eval_common import add_json, check_outputs, report, run_block_size

EXAMPLES = """examples:
  plm eval pairs --model runs/albert held-out.txt --pairs sop
  plm eval pairs --model runs/bert-nsp held-out.txt --pairs sop --json sop.json   # an NSP head on SOP pairs
"""


def register(metrics: argparse._SubParsersAction) -> None:
    parser = metrics.add_parser(
        "pairs",
        help="accuracy of an encoder's masked-LM and NSP/SOP heads on a text",
        description="Build pre-training examples from FILE as training builds them (documents separated by blank "
        "lines, 15% of the tokens masked, --pairs for the pair head) and print the accuracy of the masked-LM head over "
        "the masked positions and of the pair head over the pairs. A head trained for one pair task is scored on the "
        "other's pairs as ALBERT's Table 5 does (an NSP head scores about 52% on SOP pairs, an SOP head about 79% "
        "on NSP pairs); a model without a pair head says so.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_model(parser, "encoder directory or training run (plm or Hugging Face)")
    parser.add_argument("file", help="UTF-8 text, documents separated by blank lines")
    parser.add_argument("--pairs", choices=PAIR_TASKS, required=True,
                        help="the sentence pairs to build: nsp (the next sentence or a random one) or sop (two "
                        "sentences in order or swapped)")
    flags.MAX_LENGTH.add(parser, note="default: a pre-training run's block size, as its validation builds them; else "
                         "128, the recipes', or the model's context if shorter")
    parser.add_argument("--batch-size", type=positive_int, default=32, help="examples per forward pass")
    add_seed(parser)
    add_json(parser)
    add_no_progress(parser)
    add_device(parser)
    parser.set_defaults(run=run_pairs)


def run_pairs(args: argparse.Namespace) -> None:
    check_outputs(args, "json")
    model, tokenizer = load_encoder(args)
    result = head_accuracies(model, tokenizer, args.file, args.pairs, args.max_length or run_block_size(args.model),
                             args.batch_size, args.seed, progress=not args.no_progress)
    report(f"{args.file}: {result}", result.as_dict(), args.json)
