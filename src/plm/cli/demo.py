"""plm demo: the whole GPT-2 pipeline on the embedded corpus in a few CPU minutes.

The demo's run is a ``plm pretrain`` run with the flags `pretrain_arguments` gives: its
``run.json`` says so (and that plm demo started it), so that ``plm pretrain --out OUT --resume``
continues it, and a second ``plm demo`` continues it too, or finds it complete. Any other run in
``--out`` is kept, unless ``--overwrite``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from plm.apps.text_pipelines import continue_prompts
from plm.cli import flags
from plm.cli import pretrain as pretrain_command
from plm.cli.common import HelpFormatter, Parser, add_device, add_no_progress, add_seed, positive_int, training_config
from plm.cli.generate import end_of_text_note
from plm.cli.run_definition import STARTED_BY, run_definition
from plm.errors import PLMError
from plm.models import CausalLM
from plm.storage.checkpoint import has_checkpoint
from plm.training.pretrain import PretrainSetup, prepare
from plm.training.run_directory import holds_run, read_definition

PROMPTS = ("The list", "Return the", "This module provides", "If the")
SAMPLE_TOKENS = 40  # the new tokens of each sample
DEMO = "plm demo"  # what the run.json of a run the demo started says under started_by
# The demo's flags that are plm pretrain's too, under the same names.
PRETRAIN_FLAGS = ("model", "steps", "batch_size", "block_size", "vocab_size", "seed", "device")


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "demo",
        help="train a tokenizer and a small GPT-2 on the embedded corpus, then generate",
        description="The quickstart: build the embedded corpus (Python's own documentation), train a byte-level "
        "BPE tokenizer, pre-train a small GPT-2 for a few minutes, print validation perplexity before and after, "
        "and print a few generated samples. Needs no download and no flag. The run in --out is a plm pretrain run "
        "(plm pretrain --out OUT --resume continues it); a demo run already there is continued (to --steps), "
        "and any other run or file there is kept unless --overwrite.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--model", default="gpt2-mini", help="preset to train")
    flags.STEPS.add(parser, default=500, note="about 4 minutes on 2 CPU cores")
    parser.add_argument("--batch-size", type=positive_int, default=16, help="sequences per step")
    flags.BLOCK_SIZE.add(parser, default=128)
    flags.VOCAB_SIZE.add(parser, default=4096)
    parser.add_argument("--out", default="runs/demo", help="run directory")
    parser.add_argument("--overwrite", action="store_true",
                        help="start a new demo run in an --out that holds another run (its files are deleted), a "
                        "demo run, or other files")
    add_seed(parser)
    add_no_progress(parser)
    add_device(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> None:
    out = Path(args.out)
    own = not args.overwrite and started_by_demo(out)
    if not (own or args.overwrite) and holds_run(out):
        raise PLMError(f"{out} holds a run that plm demo did not start; choose another --out, or pass --overwrite "
                       "to replace it")
    continuing = own and has_checkpoint(out)  # the demo's run stopped before its first checkpoint starts again
    pretrain_args = pretrain_arguments(args, continuing)
    definition = run_definition(pretrain_args, pretrain_command.RUN) | {STARTED_BY: DEMO}
    setup = PretrainSetup(
        model=pretrain_args.model, vocab_size=pretrain_args.vocab_size, block_size=pretrain_args.block_size,
        batch_size=pretrain_args.batch_size, dropout=pretrain_args.dropout,
    )
    overwrite = args.overwrite or (own and not continuing)
    print("1/4 building the corpus" + (", reading the run's tokenizer ..." if continuing else
                                       " and training the tokenizer ..."), flush=True)
    trainer, tokenizer = prepare(setup, training_config(pretrain_args), out, continuing, overwrite)
    model = trainer.model
    assert isinstance(model, CausalLM)  # a GPT preset
    print(f"    {len(tokenizer):,}-token BPE; {setup.model}: {model.num_parameters():,} parameters")
    steps = trainer.config.steps
    shape = f"{pretrain_args.batch_size} x {pretrain_args.block_size} tokens"
    if continuing:
        print(f"2/4 continuing the demo's run in {out} from its checkpoint", flush=True)
        print(f"3/4 pre-training on to step {steps}, {shape} a step ...", flush=True)
        after = trainer.train(resume=True, definition=definition)
        if "val_perplexity" in after:
            print(f"    validation perplexity after training: {after['val_perplexity']:,.1f}")
    else:
        before = trainer.evaluate()
        print(f"2/4 validation perplexity before training: {before['val_perplexity']:,.1f}", flush=True)
        print(f"3/4 pre-training for {steps} steps of {shape} ...", flush=True)
        after = trainer.train(overwrite=overwrite, definition=definition)
        print(f"    validation perplexity after training: {after['val_perplexity']:,.1f} "
              f"(was {before['val_perplexity']:,.1f})")
    print("4/4 samples (greedy, then top-p 0.9 at temperature 0.8):")
    greedy = continue_prompts(model, tokenizer, PROMPTS, SAMPLE_TOKENS, repetition_penalty=1.2)
    sampled = continue_prompts(model, tokenizer, PROMPTS, SAMPLE_TOKENS, temperature=0.8, top_p=0.9,
                               seed=pretrain_args.seed)
    for prompt, first, second in zip(PROMPTS, greedy, sampled):
        print(f"  greedy  | {one_line(prompt + first.text)}\n  sampled | {one_line(prompt + second.text)}")
    for search, continuations in (("greedy", greedy), ("sampled", sampled)):
        ended = end_of_text_note(continuations, SAMPLE_TOKENS)
        if ended:
            print(f"plm demo: note: {search}, {ended} (plm generate --ignore-eos goes on)", file=sys.stderr)
    print(f"model, tokenizer and metrics are in {out}; try: plm generate --model {out} \"The dictionary\"; "
          f"plm demo --steps {2 * steps} --out {out} trains it further")


def started_by_demo(out: Path) -> bool:
    """Whether ``out`` holds a run that plm demo started (its run.json says so)."""
    definition = read_definition(out) if out.is_dir() else None
    return definition is not None and definition.get(STARTED_BY) == DEMO


def pretrain_arguments(args: argparse.Namespace, continuing: bool) -> argparse.Namespace:
    """The ``plm pretrain`` arguments of the demo's run, as that command parses them.

    A new run gives every flag that makes it the demo's; a run continued gives only the demo's flags
    given here, and ``--resume``, so that the run's own values fill in the rest (and a flag that
    contradicts them is refused).
    """
    progress = ["--no-progress"] if args.no_progress else []  # how the run shows, which a resume may change
    if continuing:
        given = [f"--{dest.replace('_', '-')}={getattr(args, dest)}" for dest in PRETRAIN_FLAGS
                 if dest in args.given_flags]
        argv = ["--out", args.out, "--resume", *given, *progress]
    else:
        argv = [*(f"--{dest.replace('_', '-')}={getattr(args, dest)}" for dest in PRETRAIN_FLAGS), *progress,
                "--out", args.out, "--dropout=0", "--lr=1e-3", "--min-lr=1e-4",
                f"--warmup={min(30, args.steps // 10 + 1)}", f"--eval-every={max(1, args.steps // 3)}",
                f"--save-every={args.steps}"]
    parser = Parser(prog="plm")
    pretrain_command.register(parser.add_subparsers(parser_class=Parser))
    parsed = parser.parse_args(["pretrain", *argv])
    del parsed.dry_run  # how to start, not what the run is: plm pretrain does not save it either
    return parsed


def one_line(text: str) -> str:
    """Samples on one line each: runs of white space (new lines too) become one space."""
    return " ".join(text.split())
