"""plm tokenizer train: learn a byte-level BPE vocabulary."""

from __future__ import annotations

import argparse

from plm.cli.common import HelpFormatter, positive_int
from plm.data.corpus import default_corpus, read_corpus
from plm.tokenizer import Tokenizer

EXAMPLES = """examples:
  plm tokenizer train --out tok                     # on the embedded corpus
  plm tokenizer train my.txt more.txt --out tok --vocab-size 16000
"""


def register(commands: argparse._SubParsersAction) -> None:
    tokenizer = commands.add_parser("tokenizer", help="train tokenizers", description="Train tokenizers.")
    actions = tokenizer.add_subparsers(dest="action", required=True, metavar="ACTION")
    train = actions.add_parser(
        "train",
        help="train a byte-level BPE tokenizer (GPT-2 style)",
        description="Train a byte-level BPE tokenizer like GPT-2's: every byte is in the alphabet, so any text "
        "round-trips, and merges never cross letters, digits, punctuation and spaces. Writes tokenizer.json "
        "and tokenizer_config.json (special-token roles) into --out.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    train.add_argument("files", nargs="*", help="UTF-8 text files (default: the embedded corpus)")
    train.add_argument("--out", required=True, help="directory to write the tokenizer into")
    train.add_argument("--vocab-size", type=positive_int, default=8192, help="size of the vocabulary")
    train.add_argument("--min-frequency", type=positive_int, default=2, help="least count of a pair to merge")
    train.set_defaults(run=run_train)


def run_train(args: argparse.Namespace) -> None:
    corpus = read_corpus(args.files, validation_fraction=0.05) if args.files else default_corpus()
    texts = (document.text for document in (*corpus.train, *corpus.validation))
    tokenizer = Tokenizer.train_bpe(texts, args.vocab_size, args.min_frequency, show_progress=True)
    tokenizer.save(args.out)
    print(f"wrote a {len(tokenizer):,}-token byte-level BPE tokenizer to {args.out}")
