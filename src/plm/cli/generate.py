"""plm generate: continue prompts with a trained causal language model."""

from __future__ import annotations

import argparse
import sys

from plm.apps.text_pipelines import DEFAULT_NEW_TOKENS, generate_text, room_for_new_tokens
from plm.cli.common import (
    HelpFormatter,
    add_device,
    add_model,
    add_seed,
    add_weights,
    load_causal_lm,
    positive_int,
)
from plm.data.corpus import read_text
from plm.errors import PLMError
from plm.models import CausalLM
from plm.tokenization.tokenizer import Tokenizer

EXAMPLES = """examples:
  plm generate --model runs/pretrain "The list type"
  plm generate --model runs/pretrain "def" "class" --temperature 0.8 --top-p 0.9 --seed 1
  plm generate --model runs/pretrain --prompt-file prompts.txt --stop "\\n\\n" --max-new-tokens 100
"""


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "generate",
        help="generate text from prompts",
        description="Continue each prompt with a causal language model. Greedy by default; any of --temperature, "
        "--top-k, --top-p turns sampling on. Prompts are batched with left padding and decoded with a KV cache.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_model(parser, "model directory or training run")
    parser.add_argument("prompts", nargs="*", help="prompts (an empty string starts from nothing)")
    parser.add_argument("--prompt-file", help="a UTF-8 file with one prompt per line")
    parser.add_argument("--max-new-tokens", type=positive_int,
                        help=f"tokens to add to each prompt (default: {DEFAULT_NEW_TOKENS}, fewer when the context "
                        "has less room left)")
    parser.add_argument("--temperature", type=float, default=1.0, help="divide the logits by this before sampling")
    parser.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens (0: all)")
    parser.add_argument(
        "--top-p", type=float, default=1.0, help="sample among the fewest tokens whose probability reaches p"
    )
    parser.add_argument(
        "--repetition-penalty", type=float, default=1.0, help="divide logits of tokens already present (CTRL)"
    )
    parser.add_argument("--sample", action="store_true", help="sample even with the default temperature/top-k/top-p")
    parser.add_argument(
        "--stop", action="append", default=[], help="stop a prompt's continuation at this string (repeatable)"
    )
    parser.add_argument(
        "--keep-last", type=positive_int, help="cut prompts longer than the context to their last N tokens"
    )
    parser.add_argument(
        "--no-cache", action="store_true", help="recompute the whole sequence each step (slow; for checking)"
    )
    parser.add_argument(
        "--compile", action="store_true",
        help="run the model through torch.compile: tens of seconds to compile (a C++ compiler on the CPU), "
        "then faster steps for small models; see benchmarks/README.md",
    )
    parser.add_argument(
        "--cuda-graph", action="store_true",
        help="on a GPU, replay each one-token step as a CUDA graph over a static KV cache (4x faster steps for "
        "GPT-2 124M at batch 1 on an H200; the same tokens); see docs/gpu.md",
    )
    add_seed(parser, default=None)
    add_device(parser)
    add_weights(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> None:
    prompts = list(args.prompts)
    if args.prompt_file:
        prompts += read_text(args.prompt_file).splitlines()
    if not prompts:
        raise PLMError("give at least one prompt (or --prompt-file)")
    model, tokenizer = load_causal_lm(args)
    max_new_tokens = args.max_new_tokens or default_new_tokens(model, tokenizer, prompts, args.keep_last)
    texts = generate_text(
        model,
        tokenizer,
        prompts,
        max_new_tokens,
        stop=args.stop,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        repetition_penalty=args.repetition_penalty,
        do_sample=True if args.sample else None,
        seed=args.seed,
        keep_last=args.keep_last,
        use_cache=not args.no_cache,
        compile=args.compile,
        cuda_graph=args.cuda_graph,
    )
    for prompt, text in zip(prompts, texts):
        sys.stdout.write(f"{prompt}{text}\n")
        if len(prompts) > 1:
            sys.stdout.write("-" * 40 + "\n")
    if max_new_tokens < DEFAULT_NEW_TOKENS and args.max_new_tokens is None:
        print(f"plm generate: note: generated at most {max_new_tokens} new tokens, the room the model's context of "
              f"{model.context_length()} leaves after the prompt (--max-new-tokens to choose)", file=sys.stderr)


def default_new_tokens(model: CausalLM, tokenizer: Tokenizer, prompts: list[str], keep_last: int | None) -> int:
    """DEFAULT_NEW_TOKENS, or fewer where the context has less room left after the prompt."""
    room = room_for_new_tokens(model, tokenizer, prompts, keep_last)
    return room if 0 < room < DEFAULT_NEW_TOKENS else DEFAULT_NEW_TOKENS  # no room: generate says why
