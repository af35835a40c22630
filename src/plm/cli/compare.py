"""plm compare: rerun a paper's ablation at CPU scale, runs side by side on an equal budget."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from plm.apps.compare import Budget, CompareSpec, compare, plot_curves, read_spec, results_table
from plm.cli import flags
from plm.cli.common import (
    HelpFormatter,
    add_device,
    add_no_progress,
    add_seed,
    add_training_precision,
    check_output_directory,
)
from plm.storage.atomic_files import atomic_open, write_json

EXAMPLES = """a spec (TOML): a [budget] every run gets alike, a [base] every run starts from, and [[run]] tables:

  title = "Pre-LN (GPT-2) vs post-LN (GPT-1)"
  metric = "val_loss"            # the validation metric to plot and rank by
  [budget]
  steps = 300                    # or: tokens = 2_000_000, or: minutes = 5
  [base]
  model = "gpt"                  # the family's small preset (gpt2-mini); pretrain's options by name:
  block_size = 128               #   objective, whole_word, batch_size, lr, ...
  [[run]]
  name = "pre-LN"
  [[run]]
  name = "post-LN"
  config = { norm_first = false, final_norm = false, scaled_residual_init = false }   # preset fields

examples:
  plm compare examples/compare/pre-ln-vs-post-ln.toml
  plm compare examples/compare/nsp-vs-sop.toml --out runs/nsp-vs-sop
  plm compare my-spec.toml --device cuda        # run it again after a stop: finished runs are kept
  plm compare examples/compare/nsp-vs-sop.toml --steps 20 --seed 1   # a quick look, kept apart from the full runs
"""


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "compare",
        help="run an ablation: several pre-training runs on an equal budget",
        description="Run the runs of a comparison spec one after another, each in its own run directory under "
        "--out, on the same budget of steps, tokens or minutes. A finished run is kept and an interrupted one "
        "resumes, so running the command again finishes the comparison. Prints a table of final metrics and "
        "writes results.md, results.json and curves.png (the validation curves against steps and against "
        "wall-clock time, on shared axes). Specs for the papers' ablations are in examples/compare/.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("spec", help="comparison spec (TOML)")
    parser.add_argument("--out", help="output directory (default: runs/compare/SPEC-NAME, and the --steps, --seed "
                        "and --precision given, as in SPEC-NAME-steps-20-seed-1: the spec's own runs are kept)")
    overrides = parser.add_argument_group("overrides", "each one given replaces the spec's value, in every run")
    flags.STEPS.add(overrides, default=None, note="every run's budget, instead of the spec's")
    add_seed(overrides)
    add_training_precision(overrides)
    add_no_progress(overrides)
    add_device(overrides)
    parser.set_defaults(run=run)


TRAINING_OVERRIDES = ("seed", "precision")  # the TrainingConfig fields that a flag given sets in every run


def run(args: argparse.Namespace) -> None:
    spec = read_spec(args.spec, None if args.steps is None else Budget("steps", args.steps))
    changes = {name: getattr(args, name) for name in TRAINING_OVERRIDES if name in args.given_flags}
    changes |= {"device": args.device} | ({"progress": False} if args.no_progress else {})
    spec = CompareSpec(spec.title, spec.metric, spec.budget, tuple(
        dataclasses.replace(run, training=dataclasses.replace(run.training, **changes)) for run in spec.runs
    ))
    # What changes a run's result names its directory, so that the spec's own runs are kept.
    given = "".join(f"-{name}-{getattr(args, name)}" for name in ("steps", *TRAINING_OVERRIDES)
                    if name in args.given_flags)
    out = check_output_directory(args.out or Path("runs/compare") / (Path(args.spec).stem + given))
    results = compare(spec, out, where=args.spec)
    table = results_table(spec, results)
    print(f"\n{spec.title} ({spec.budget.describe()} each)\n\n{table}")
    out.mkdir(parents=True, exist_ok=True)
    with atomic_open(out / "results.md") as file:
        file.write(f"# {spec.title}\n\n{table}\n".encode())
    write_json(out / "results.json", {result.name: result.final for result in results})
    print(f"\nwrote {out / 'results.md'}, {out / 'results.json'} and {plot_curves(spec, results, out / 'curves.png')}")
