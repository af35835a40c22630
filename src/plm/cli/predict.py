"""plm predict: a fine-tuned model's predictions for a file, one JSON line per example."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from plm.cli import flags
from plm.cli.common import (
    HelpFormatter,
    add_device,
    add_inference_precision,
    add_model,
    add_no_progress,
    add_task_input,
    check_output_file,
    positive_int,
    with_weights,
)
from plm.storage.atomic_files import atomic_open
from plm.tasks.fine_tuned import load_task_model
from plm.tasks.readers import read_examples
from plm.tasks.task_objective import encode_all, model_outputs

EXAMPLES = """examples:
  plm predict --model runs/sst2 sst-2/test.tsv --out predictions.jsonl
  plm predict --model runs/ner eng.testb            # JSON lines on stdout
  echo "a gripping, funny film" | plm predict --model runs/sst2 -     # plain text, one input a line
"""


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "predict",
        help="predictions of a fine-tuned model, as JSONL",
        description="Run a model fine-tuned with `plm finetune` on a file of its task's format (labels are not "
        "needed), or on plain text, one input a line, and write one JSON object per example: the example's fields, "
        "its \"prediction\" (a label, a score, a tag per word, an answer text, or a choice's index) and, for a "
        "classifier or a multiple choice, its \"probabilities\" (as plm serve's /classify gives them).",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_model(parser, "fine-tuned model directory or run (plm finetune --out)")
    parser.add_argument("file", help="examples: the format the model's task reads; for classify, regress and tag "
                        "also plain text (.txt, or - for stdin), one input a line")
    parser.add_argument("--out", help="JSONL file to write (default: standard output)")
    add_task_input(parser)
    flags.DOCUMENT_CONTEXT.add(parser, note="as the model was fine-tuned")
    parser.add_argument("--batch-size", type=positive_int, default=32, help="examples per forward pass")
    add_no_progress(parser)
    add_device(parser)
    add_inference_precision(parser)
    parser.set_defaults(run=run_predict)


def run_predict(args: argparse.Namespace) -> None:
    if args.out is not None:
        check_output_file(args.out)
    model, task = load_task_model(args.model, args.device, args.max_length, revision=args.revision,
                                  stride=args.stride)
    model = with_weights(model, args)
    examples = read_examples(task.name, args.file, args.tag_column, labelled=False,
                             document_context=args.document_context)
    features = encode_all(task, examples)
    outputs = model_outputs(model, task, features, args.batch_size, progress=not args.no_progress)
    predictions = task.predict(outputs, features, examples)
    probabilities = task.probabilities(outputs) or [None] * len(examples)
    lines = "".join(json.dumps({**example_fields(e), "prediction": p} | ({"probabilities": q} if q else {}),
                               ensure_ascii=False) + "\n"
                    for e, p, q in zip(examples, predictions, probabilities))
    if args.out is None:
        sys.stdout.write(lines)
        return
    with atomic_open(args.out) as file:
        file.write(lines.encode("utf-8"))
    print(f"{len(examples)} predictions written to {args.out}")


def example_fields(example: Any) -> dict[str, Any]:
    """An example's fields as the predictions show them: not the line it was read from (that is for messages), nor a
    tagged sentence's document (the context it was read in)."""
    fields = dataclasses.asdict(example)
    for name in ("line", "document", "offset"):
        fields.pop(name, None)
    return fields
