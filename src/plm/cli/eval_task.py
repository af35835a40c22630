"""plm eval task: a fine-tuned model's task metrics on a labelled file."""

from __future__ import annotations

import argparse

from plm.cli import flags
from plm.cli.common import (
    HelpFormatter,
    add_device,
    add_inference_precision,
    add_model,
    add_no_progress,
    add_task_input,
    positive_int,
    with_weights,
)
from plm.cli.eval_common import add_json, check_outputs, report
from plm.errors import PLMError
from plm.tasks.fine_tuned import load_task_model
from plm.tasks.metrics import confusion_matrix, entity_scores
from plm.tasks.readers import read_examples
from plm.tasks.task_objective import Classification, run

EXAMPLES = """examples:
  plm eval task --model runs/sst2 sst-2/dev.tsv       # accuracy, F1, Matthews; a confusion matrix
  plm eval task --model runs/ner eng.testa            # entity P/R/F1, one line per entity type
  plm eval task --model runs/squad dev-v1.1.json      # exact match and F1
  plm eval task --model runs/sst2 sst-2/dev.tsv --json sst2-dev.json   # the scores as JSON too
"""


def register(metrics: argparse._SubParsersAction) -> None:
    parser = metrics.add_parser(
        "task",
        help="task metrics of a fine-tuned model",
        description="Score a model fine-tuned with `plm finetune` on a labelled file of its task's format: "
        "accuracy, F1 and Matthews correlation with a confusion matrix (classification), Pearson and Spearman "
        "(regression), entity-level precision, recall and F1 per type (tagging), EM and F1 (QA), accuracy (choice).",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_model(parser, "fine-tuned model directory or run (plm finetune --out)")
    parser.add_argument("file", help="labelled examples in the model's task format")
    add_task_input(parser)
    flags.DOCUMENT_CONTEXT.add(parser, note="as the model was fine-tuned")
    parser.add_argument("--batch-size", type=positive_int, default=32, help="examples per forward pass")
    add_json(parser)
    add_no_progress(parser)
    add_device(parser)
    add_inference_precision(parser)
    parser.set_defaults(run=run_eval_task)


def run_eval_task(args: argparse.Namespace) -> None:
    check_outputs(args, "json")
    model, task = load_task_model(args.model, args.device, args.max_length, revision=args.revision, stride=args.stride)
    model = with_weights(model, args)
    examples = read_examples(task.name, args.file, args.tag_column, document_context=args.document_context)
    if isinstance(task, Classification):
        check_labels(task, examples, args.file)
    predictions, scores = run(model, task, examples, args.batch_size, progress=not args.no_progress)
    if scores is None:
        raise PLMError(f"{args.file}: some examples have no label; `plm predict` reads unlabelled files")
    report(f"{args.file}: {len(examples)} examples", {**scores, "examples": len(examples)}, args.json)
    if isinstance(task, Classification) and task.name == "classify":  # not a regression
        print(format_confusion(predictions, [task.class_of(e.label) for e in examples], task.labels))
    elif task.name == "tag":
        print(format_entities(entity_scores([e.tags for e in examples], predictions)))


def check_labels(task: Classification, examples: list, path: str) -> None:
    """Refuse, with its file and line, the first example whose label is none of the model's classes."""
    for example in examples:
        if example.label is not None:
            try:
                task.class_of(example.label)
            except PLMError as error:
                raise PLMError(f"{path}:{example.line}: {error}" if example.line else f"{path}: {error}") from None


def format_confusion(predictions, labels, classes) -> str:
    """Rows: gold classes; columns: predicted."""
    header = "gold \\ predicted"
    first = max(len(header), *(len(c) for c in classes)) + 2
    width = max(8, *(len(c) + 2 for c in classes))
    lines = [header.ljust(first) + "".join(c.rjust(width) for c in classes)]
    for name, row in zip(classes, confusion_matrix(predictions, labels, classes)):
        lines.append(name.ljust(first) + "".join(str(n).rjust(width) for n in row))
    return "\n".join(lines)


def format_entities(report) -> str:
    lines = [f"{'entity':12}{'precision':>10}{'recall':>10}{'f1':>10}{'support':>10}"]
    for name, row in report.items():
        lines.append(f"{name:12}{row['precision']:10.4f}{row['recall']:10.4f}{row['f1']:10.4f}{row['support']:10d}")
    return "\n".join(lines)
