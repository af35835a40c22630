"""plm demo: the whole GPT-2 pipeline on the embedded corpus in a few CPU minutes."""

from __future__ import annotations

import argparse

from plm.apps.text_pipelines import generate_text
from plm.cli.common import HelpFormatter, add_device, add_seed, positive_int
from plm.models import CausalLM
from plm.training.pretrain import PretrainSetup, prepare
from plm.training.trainer import TrainingConfig

PROMPTS = ("The list", "Return the", "This module provides", "If the")


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "demo",
        help="train a tokenizer and a small GPT-2 on the embedded corpus, then generate",
        description="The quickstart: build the embedded corpus (Python's own documentation), train a byte-level "
        "BPE tokenizer, pre-train a small GPT-2 for a few minutes, print validation perplexity before and after, "
        "and print a few generated samples. Needs no download and no flag.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--model", default="gpt2-mini", help="preset to train")
    parser.add_argument(
        "--steps", type=positive_int, default=500, help="optimizer steps (about 4 minutes on 2 CPU cores)"
    )
    parser.add_argument("--batch-size", type=positive_int, default=16, help="sequences per step")
    parser.add_argument("--block-size", type=positive_int, default=128, help="tokens per sequence")
    parser.add_argument("--vocab-size", type=positive_int, default=4096, help="tokenizer vocabulary")
    parser.add_argument("--out", default="runs/demo", help="run directory")
    add_seed(parser)
    add_device(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> None:
    print("1/4 building the corpus and training the tokenizer ...", flush=True)
    setup = PretrainSetup(
        model=args.model, vocab_size=args.vocab_size, block_size=args.block_size, batch_size=args.batch_size,
        dropout=0.0,
    )
    training = TrainingConfig(
        steps=args.steps,
        lr=1e-3,
        min_lr=1e-4,
        warmup=min(30, args.steps // 10 + 1),
        eval_every=max(1, args.steps // 3),
        save_every=args.steps,
        seed=args.seed,
        device=args.device,
    )
    trainer, tokenizer = prepare(setup, training, args.out, overwrite=True)  # the demo's own run, made anew
    model = trainer.model
    assert isinstance(model, CausalLM)  # a GPT preset
    print(f"    {len(tokenizer):,}-token BPE; {args.model}: {model.num_parameters():,} parameters")
    before = trainer.evaluate()
    print(f"2/4 validation perplexity before training: {before['val_perplexity']:,.1f}", flush=True)
    print(f"3/4 pre-training for {args.steps} steps of {args.batch_size} x {args.block_size} tokens ...", flush=True)
    after = trainer.train(overwrite=True)
    print(f"    validation perplexity after training: {after['val_perplexity']:,.1f} "
          f"(was {before['val_perplexity']:,.1f})")
    print("4/4 samples (greedy, then top-p 0.9 at temperature 0.8):")
    greedy = generate_text(model, tokenizer, PROMPTS, 40, repetition_penalty=1.2)
    sampled = generate_text(model, tokenizer, PROMPTS, 40, temperature=0.8, top_p=0.9, seed=args.seed)
    for prompt, first, second in zip(PROMPTS, greedy, sampled):
        print(f"  greedy  | {one_line(prompt + first)}\n  sampled | {one_line(prompt + second)}")
    print(f"model, tokenizer and metrics are in {args.out}; try: plm generate --model {args.out} \"The dictionary\"")


def one_line(text: str) -> str:
    """Samples on one line each: runs of white space (new lines too) become one space."""
    return " ".join(text.split())
