"""plm generate: continue prompts with a trained causal language model."""

from __future__ import annotations

import argparse
import sys

from plm.apps.text_pipelines import DEFAULT_NEW_TOKENS, Continuation, continue_prompts, room_for_new_tokens
from plm.cli import flags
from plm.cli.common import (
    HelpFormatter,
    add_device,
    add_model,
    add_no_progress,
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
        "--top-k, --top-p turns sampling on. One prompt's text is written as it is decoded. Prompts of similar "
        "lengths are decoded together, --batch-size at a time, with left padding and a KV cache; the output keeps "
        "the prompts' order.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_model(parser, "model directory or training run")
    parser.add_argument("prompts", nargs="*", help="prompts (an empty string starts from nothing)")
    parser.add_argument("--prompt-file", help="a UTF-8 file with one prompt per line")
    parser.add_argument("--batch-size", type=positive_int, default=8,
                        help="prompts decoded together (memory holds one batch's KV cache)")
    flags.MAX_NEW_TOKENS.add(parser, default=None, note=f"default {DEFAULT_NEW_TOKENS}, fewer when the context has "
                             "less room left")
    flags.TEMPERATURE.add(parser)
    flags.TOP_K.add(parser, default=0)
    flags.TOP_P.add(parser)
    parser.add_argument(
        "--repetition-penalty", type=float, default=1.0, help="divide logits of tokens already present (CTRL)"
    )
    flags.SAMPLE.add(parser)
    parser.add_argument(
        "--stop", action="append", default=[], help="stop a prompt's continuation at this string (repeatable)"
    )
    flags.IGNORE_EOS.add(parser)
    parser.name_fields(keep_last="--max-prompt-tokens")
    parser.add_argument("--max-prompt-tokens", type=positive_int, metavar="N",
                        help="cut a prompt longer than N tokens to its last N, to leave the context room for new ones")
    parser.add_argument(
        "--no-cache", action="store_true", help="recompute the whole sequence each step (slow; for checking)"
    )
    flags.COMPILE.add(parser, note="tens of seconds to compile; it pays off for small models (see "
                      "benchmarks/README.md)")
    parser.add_argument(
        "--cuda-graph", action="store_true",
        help="on a GPU, replay each one-token step as a CUDA graph over a static KV cache (4x faster steps for "
        "GPT-2 124M at batch 1 on an H200; the same tokens); see docs/gpu.md",
    )
    add_seed(parser, note="sampling draws the same tokens for the same seed; each prompt draws from its own "
             "generator, seeded by --seed and its position, so its continuation does not depend on --batch-size or "
             "on the other prompts")
    add_no_progress(parser)
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
    max_new_tokens = args.max_new_tokens or default_new_tokens(model, tokenizer, prompts, args.max_prompt_tokens)
    alone = len(prompts) == 1  # its text is written as it comes: the prompt, then each settled piece
    stream = StreamedText(prompts[0])
    continuations = continue_prompts(
        model,
        tokenizer,
        prompts,
        max_new_tokens,
        stop=args.stop,
        batch_size=args.batch_size,
        progress=not (args.no_progress or alone),
        stream=stream.write if alone else None,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        repetition_penalty=args.repetition_penalty,
        do_sample=True if args.sample else None,
        seed=args.seed,
        ignore_eos=args.ignore_eos,
        keep_last=args.max_prompt_tokens,
        use_cache=not args.no_cache,
        compile=args.compile,
        cuda_graph=args.cuda_graph,
    )
    if alone:
        stream.write("")
        sys.stdout.write("\n")
    else:
        for prompt, continuation in zip(prompts, continuations):
            sys.stdout.write(f"{prompt}{continuation.text}\n{'-' * 40}\n")
    if max_new_tokens < DEFAULT_NEW_TOKENS and args.max_new_tokens is None:
        print(f"plm generate: note: generated at most {max_new_tokens} new tokens, the room the model's context of "
              f"{model.context_length()} leaves after the prompt (--max-new-tokens to choose)", file=sys.stderr)
    ended = end_of_text_note(continuations, max_new_tokens)
    if ended:
        print(f"plm generate: note: {ended} (--ignore-eos goes on to --max-new-tokens)", file=sys.stderr)


class StreamedText:
    """One prompt's text on stdout as it is decoded: the prompt with the first piece (so that a prompt refused
    before decoding writes nothing), then each piece at once (stdout may be a pipe, which holds text back)."""

    def __init__(self, prompt: str) -> None:
        self.prompt: str | None = prompt

    def write(self, piece: str) -> None:
        if self.prompt is not None:
            piece, self.prompt = self.prompt + piece, None
        if piece:
            sys.stdout.write(piece)
            sys.stdout.flush()


def end_of_text_note(continuations: list[Continuation], max_new_tokens: int) -> str:
    """Which continuations the model ended with its end-of-text token, and after how many tokens; '' for none."""
    ended = [(number, c.ended_after) for number, c in enumerate(continuations, 1) if c.ended_after is not None]
    if not ended:
        return ""
    if len(continuations) == 1:
        return f"the model ended the text with its end-of-text token after {ended[0][1]} of {max_new_tokens} tokens"
    numbers, tokens = (", ".join(str(pair[k]) for pair in ended) for k in (0, 1))
    s = "s" * (len(ended) > 1)
    return (f"the model ended the text{s} of prompt{s} {numbers} with its end-of-text token, after {tokens} of "
            f"{max_new_tokens} tokens")


def default_new_tokens(model: CausalLM, tokenizer: Tokenizer, prompts: list[str], keep_last: int | None) -> int:
    """DEFAULT_NEW_TOKENS, or fewer where the context has less room left after the prompt."""
    room = room_for_new_tokens(model, tokenizer, prompts, keep_last)
    return room if 0 < room < DEFAULT_NEW_TOKENS else DEFAULT_NEW_TOKENS  # no room: generate says why
