"""plm plan: the memory each training process needs, per kind, and whether it fits."""

from __future__ import annotations

import argparse

from plm.cli import flags
from plm.cli.common import HelpFormatter, add_device, add_parallelism, check_output_file, positive_int
from plm.cli.flags import in_flags
from plm.models import recipe_of
from plm.storage.atomic_files import write_json
from plm.training.paper_scale import paper_run
from plm.training.plan import Memory, PlanSetup, parse_bytes, plan, report
from plm.training.starting_model import check_model_name, model_config

EXAMPLES = """examples:
  plm plan --model gpt2-xl --processes 8 --strategy fsdp --device cuda --memory 80GB
  plm plan --model bert-large --batch-size 32 --block-size 512 --checkpoint-activations
  plm plan --model gpt2 --strategy fsdp --processes 4 --offload --json plan.json
  plm plan --model albert-base --hyperparameters paper --batch-size 32   # ALBERT's 4,096 x 512, 32 at a time
"""


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "plan",
        help="the memory a training run needs per process, and whether it fits",
        description="Count the bytes each training process holds for a preset: parameters (counted exactly, "
        "shared ones once), gradients, optimizer state, DDP's gradient buckets or FSDP's shards and its "
        "one-block working set, and one step's activations (with and without activation checkpointing), all "
        "fp32; then say whether the total fits the memory (the exit status is 1 when it does not). The "
        "activations are an analytic count of what each Transformer block keeps for backward, checked against "
        "torch.profiler on small presets.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--model", required=True, help="a preset (gpt2-xl, bert-large, albert-base, ...)")
    parser.add_argument("--processes", type=positive_int, default=1, help="training processes (one GPU each)")
    parser.add_argument("--batch-size", type=positive_int, default=8,
                        help="sequences per micro-batch per process, as plm pretrain's --batch-size (whose default is "
                        "16)")
    flags.BLOCK_SIZE.add(parser, default=None, note="default: the recipe's, at most the context")
    add_parallelism(parser, note="the planned run's, as plm pretrain takes them")
    flags.OPTIMIZER.add(parser, note="its state per parameter")
    flags.HYPERPARAMETERS.add(parser, note="paper: plan the micro-batch of plm pretrain --hyperparameters paper (the "
                              "paper's batch accumulated in micro-batches of at most --batch-size, at the paper's "
                              "sequence length) with the paper's optimizer, and print the global batch")
    add_device(parser, note="here where the planned run trains (the CPU keeps attention scores)")
    parser.add_argument("--memory", default="auto", help="bytes per process, like 16GB or 80GiB; auto: this GPU's "
                        "free memory, or the available RAM shared by the processes")
    flags.JSON.add(parser)
    parser.name_fields(batch="--batch-size", block="--block-size")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.json:
        check_output_file(args.json, "--json")
    memory = None if args.memory == "auto" else Memory(parse_bytes(args.memory), "given")
    if args.hyperparameters == "paper":
        set_paper_scale(args)
    setup = PlanSetup(args.model, args.processes, args.batch_size, args.block_size, args.strategy, args.offload,
                      args.checkpoint_activations, args.optimizer, args.device)
    result = plan(setup, memory)
    print(report(result))
    if args.json:
        write_json(args.json, result.as_dict())
    return 0 if result.fits else 1  # as a check: a script can stop on a plan that does not fit


def set_paper_scale(args: argparse.Namespace) -> None:
    """--hyperparameters paper: the micro-batch and sequence length of pretrain's run at the paper's scale, and the
    paper's optimizer, for those flags not given; prints the run's global batch."""
    given = {"block_size": args.block_size} if "block_size" in args.given_flags else {}
    scaled = paper_run(args.model, args.batch_size, args.processes, given)
    args.batch_size = scaled.settings.get("batch_size", args.batch_size)
    args.block_size = scaled.settings.get("block_size", args.block_size)
    if "optimizer" not in args.given_flags:
        args.optimizer = recipe_of(model_config(check_model_name(args.model))).paper.optimizer  # its size's
    print(in_flags(scaled.describe(), args.flag_of))
