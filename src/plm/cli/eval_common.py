"""What every `plm eval TASK` prints and writes: a two-column table, and the numbers as JSON (--json)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Mapping

from plm.apps.zeroshot.evaluation import ZeroShotOptions
from plm.cli import flags
from plm.cli.common import (
    add_device,
    add_no_progress,
    add_weights,
    check_output_file,
    load_causal_lm,
    positive_int,
)
from plm.storage.atomic_files import write_json
from plm.storage.checkpoint import whole_number
from plm.training.run_directory import read_definition


def add_json(parser: argparse.ArgumentParser) -> None:
    flags.JSON.add(parser)


def add_prompted_answers(parser: argparse.ArgumentParser, answer: str, max_new_tokens: int, predictions: str) -> None:
    """The flags of a zero-shot command that answers its prompts greedily, in batches: the length of an
    ``answer``, the batch, a file of the ``predictions`` (what it holds), --json, --no-progress, --device and the
    weights'."""
    flags.MAX_NEW_TOKENS.add(parser, default=max_new_tokens, note=f"here those of {answer}")
    parser.add_argument("--batch-size", type=positive_int, default=8, help="prompts decoded together")
    flags.PREDICTIONS.add(parser, note=predictions)
    add_json(parser)
    add_no_progress(parser)
    add_device(parser)
    add_weights(parser)


def zero_shot_options(args: argparse.Namespace) -> ZeroShotOptions:
    """What a zero-shot command evaluates, and how: --model's causal LM and tokenizer (see `load_causal_lm`),
    --batch-size, --limit where the command takes it, and a progress bar unless --no-progress."""
    model, tokenizer = load_causal_lm(args)
    return ZeroShotOptions(model, tokenizer, args.batch_size, getattr(args, "limit", None), not args.no_progress)


def report_answers(args: argparse.Namespace, title: str, numbers: Mapping[str, Any], predictions: Any) -> None:
    """`report` the scores, and write the ``predictions`` to ``--predictions`` when given."""
    report(title, numbers, args.json)
    if args.predictions:
        write_json(args.predictions, predictions)


def check_outputs(args: argparse.Namespace, *dests: str) -> None:
    """Before any work: each output file given (``json`` for --json, ...) can be written."""
    for dest in dests:
        path = getattr(args, dest)
        if path:
            check_output_file(path, "--" + dest.replace("_", "-"))


def report(title: str, numbers: Mapping[str, Any], json_path: str | None) -> None:
    """Print ``numbers`` as a table under ``title``; write them to ``json_path`` when given."""
    rows = [(name, format_number(value)) for name, value in numbers.items()]
    width = max(len(name) for name, _ in rows)
    print(title)
    for name, value in rows:
        print(f"  {name:<{width}}  {value:>12}")
    if json_path:
        write_json(json_path, dict(numbers))


def format_number(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.4f}" if abs(value) < 1e6 else f"{value:.4g}"
    if isinstance(value, int):
        return f"{value:,}"
    return "-" if value is None else str(value)

def run_block_size(model: str) -> int | None:
    """The block size of the pre-training run in directory ``model``, from its run.json; None for anything else
    (a model directory, a Hub id, a run of the model's context)."""
    definition = read_definition(model) if Path(model).is_dir() else None
    flags_given = definition.get("flags") if isinstance(definition, dict) else None
    block = flags_given.get("block_size") if isinstance(flags_given, dict) else None
    return block if whole_number(block, 1) else None
