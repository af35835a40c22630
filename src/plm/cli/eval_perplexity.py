"""plm eval perplexity: sliding-window perplexity of a causal LM on a text file."""

from __future__ import annotations

import argparse

from plm.apps.text_pipelines import file_perplexity
from plm.apps.zeroshot.detokenize import DETOKENIZERS
from plm.cli import flags
from plm.cli.common import (
    HelpFormatter,
    add_device,
    add_model,
    add_no_progress,
    add_weights,
    load_causal_lm,
    positive_int,
)
from plm.cli.eval_common import add_json, check_outputs, report, run_block_size

EXAMPLES = """examples:
  plm eval perplexity --model runs/pretrain test.txt
  plm eval perplexity --model runs/pretrain test.txt --window 256 --stride 128
  plm eval perplexity --model gpt2-hf wikitext-2/test.txt --detokenize wikitext --json wt2.json
"""


def register(metrics: argparse._SubParsersAction) -> None:
    parser = metrics.add_parser(
        "perplexity",
        help="perplexity of a text file with a sliding window",
        description="Perplexity of a causal LM on a text file, every token of it scored once. The file is read "
        "as pre-training reads --train and --validation: its documents (paragraphs separated by blank lines, or a "
        "JSONL file's \"text\"), each followed by the end-of-text token, after one start token so that the first "
        "token is scored too; --one-text reads the file as one text instead, blank lines and all. The tokens are "
        "cut into windows of --window tokens that move by --stride; each token is scored exactly once, reading "
        "the (window - stride) tokens before it as context. A pre-training run's final validation perplexity is "
        "this number for its validation file: given a run, --window defaults to the run's block size (for a run "
        "trained under bf16 autocast, --precision auto, the two differ in about the fifth digit: its validation "
        "computed in bf16 on fp32 weights). Prints perplexity per token, per word and per byte (the same total "
        "loss divided by the tokens scored, by the text's whitespace-separated words, and by the UTF-8 bytes the "
        "model read), so that models with different tokenizers compare, with the window and stride.\n\n"
        "--detokenize undoes a benchmark's tokenisation before scoring, as GPT-2 did: 'wikitext' joins "
        "'@-@', '@,@', '@.@', punctuation, quotes, contractions and '= = heading = =' back; 'ptb' joins "
        "contractions. Words are counted before detokenising, as the benchmark counts them.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_model(parser, "model directory or training run")
    parser.add_argument("file", help="UTF-8 text (documents separated by blank lines), or what --train takes: "
                        "JSONL, Parquet, .gz/.zst")
    parser.add_argument("--window", type=positive_int,
                        help="tokens per window (default: a pre-training run's block size, else the model's context)")
    flags.STRIDE.add(parser, default=None, note="default: half the window")
    parser.add_argument("--batch-size", type=positive_int, default=8, help="windows per forward pass")
    parser.add_argument(
        "--detokenize", choices=tuple(DETOKENIZERS), default="none", help="undo a benchmark's tokenisation"
    )
    parser.add_argument("--one-text", action="store_true",
                        help="score the file as one text, blank lines included, not document by document (how "
                        "GPT-2 scored WikiText and the PTB)")
    add_json(parser)
    add_no_progress(parser)
    add_device(parser)
    add_weights(parser)
    parser.set_defaults(run=run_perplexity)


def run_perplexity(args: argparse.Namespace) -> None:
    check_outputs(args, "json")
    model, tokenizer = load_causal_lm(args)
    window = args.window or run_block_size(args.model)
    result = file_perplexity(
        model, tokenizer, args.file, window, args.stride, args.batch_size,
        progress=not args.no_progress, detokenize=args.detokenize, one_text=args.one_text,
    )
    report(f"{args.file}: {result}", result.as_dict(), args.json)

