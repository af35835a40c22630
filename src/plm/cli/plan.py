"""plm plan: the memory each training process needs, per kind, and whether it fits."""

from __future__ import annotations

import argparse

from plm.cli.common import HelpFormatter, check_output_file, positive_int
from plm.device import DEVICES
from plm.models import RECIPES
from plm.storage.atomic_files import write_json
from plm.training.paper_scale import paper_run
from plm.training.plan import OPTIMIZER_STATES, STRATEGIES, Memory, PlanSetup, parse_bytes, plan, report
from plm.training.pretrain import HYPERPARAMETER_SETS

EXAMPLES = """examples:
  plm plan --model gpt2-xl --processes 8 --strategy fsdp --device cuda --memory 80GB
  plm plan --model bert-large --batch 32 --block 512 --checkpoint-activations
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
    # --batch and --block: this command's first spellings, before the flags were named as pretrain names them
    parser.add_argument("--batch-size", "--batch", type=positive_int, default=8, help="sequences per process per step")
    parser.add_argument("--block-size", "--block", type=positive_int,
                        help="tokens per sequence (default: the recipe's, at most the context)")
    parser.add_argument("--strategy", choices=STRATEGIES, default="ddp",
                        help="ddp: every process holds everything; fsdp: parameters, gradients and optimizer state "
                        "sharded over the processes")
    parser.add_argument(
        "--offload", action="store_true", help="fsdp: keep the parameter and optimizer shards in CPU memory"
    )
    parser.add_argument("--checkpoint-activations", action="store_true",
                        help="keep only each block's input and recompute its activations in backward")
    parser.add_argument("--optimizer", choices=tuple(OPTIMIZER_STATES), default="adamw", help="its state per parameter")
    parser.add_argument("--hyperparameters", default="cpu", choices=HYPERPARAMETER_SETS,
                        help="paper: plan the micro-batch of plm pretrain --hyperparameters paper (the paper's batch "
                        "accumulated in micro-batches of at most --batch-size, at the paper's sequence length) with "
                        "the paper's optimizer, and print the global batch")
    parser.add_argument("--device", default="auto", choices=DEVICES,
                        help="what it trains on: auto is CUDA when this machine has it "
                        "(the CPU keeps attention scores)")
    parser.add_argument("--memory", default="auto", help="bytes per process, like 16GB or 80GiB; auto: this GPU's "
                        "free memory, or the available RAM shared by the processes")
    parser.add_argument("--json", metavar="FILE", help="also write the numbers to FILE")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.json:
        check_output_file(args.json)
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
        args.optimizer = RECIPES[scaled.family].paper.optimizer
    print(scaled.describe())
