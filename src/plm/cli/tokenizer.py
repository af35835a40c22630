"""plm tokenizer train: learn a byte-level BPE vocabulary."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from plm.cli import flags
from plm.cli.common import HelpFormatter, positive_int, write_directory
from plm.data.corpus import default_corpus
from plm.data.prepare import corpus_texts
from plm.tokenization.tokenizer import Tokenizer, train_words

EXAMPLES = """examples:
  plm tokenizer train --out tok                     # on the embedded corpus
  plm tokenizer train my.txt more.txt --out tok-16k --vocab-size 16000
  plm tokenizer train my.txt --kind wordpiece --out bert-tok      # BERT: [CLS] A [SEP] B [SEP]
  plm tokenizer train my.txt --kind unigram --out albert-tok      # ALBERT's SentencePiece-style
  plm tokenizer train my.txt --kind words --out elmo-words        # ELMo's word vocabulary (softmax)
  plm tokenizer train my.txt --out tok --overwrite                # a new tokenizer in tok's place
"""

KINDS = ("bpe", "wordpiece", "unigram", "words")


def register(commands: argparse._SubParsersAction) -> None:
    tokenizer = commands.add_parser("tokenizer", help="train tokenizers", description="Train tokenizers.")
    actions = tokenizer.add_subparsers(dest="action", required=True, metavar="ACTION")
    train = actions.add_parser(
        "train",
        help="train a tokenizer: byte-level BPE (GPT-2), WordPiece (BERT) or Unigram (ALBERT)",
        description="Train a tokenizer with the tokenizers library. bpe: GPT-2's byte-level BPE (every byte is in "
        "the alphabet, so any text round-trips; merges never cross letters, digits, punctuation and spaces). "
        "wordpiece: BERT's, with [CLS] [SEP] [MASK] [PAD] [UNK]. unigram: ALBERT's SentencePiece-style model. "
        "words: ELMo's vocabulary of the most frequent words, <UNK> for the rest. "
        "Writes tokenizer.json and tokenizer_config.json (special-token roles) into --out, a new or empty "
        "directory unless --overwrite; the tokenizer takes its place whole once trained, so a failure or a kill "
        "leaves --out as it was.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    train.add_argument("files", nargs="*", help="text files (documents separated by blank lines), JSONL, Parquet, "
                       ".gz/.zst, globs or directories, read a document at a time (default: the embedded corpus)")
    flags.TEXT_FIELD.add(train)
    flags.TOKENIZER_SAMPLE.add(train)
    train.add_argument("--out", required=True, help="directory to write the tokenizer into; new or empty unless "
                       "--overwrite")
    train.add_argument("--overwrite", action="store_true",
                       help="replace a directory that is not empty (a tokenizer, a model): the new tokenizer takes "
                       "its place whole, so no file of the old one stays")
    train.add_argument("--kind", default="bpe", choices=KINDS, help="the tokenizer model")
    train.add_argument("--lowercase", action="store_true", help="wordpiece/unigram: lower-case (and strip accents)")
    flags.VOCAB_SIZE.add(train, default=8192)
    train.add_argument("--min-frequency", type=positive_int, default=2, help="least count of a pair to merge")
    flags.NO_PROGRESS.add(train, note="the tokenizers library's bars are shown only where standard output and "
                          "error are both a terminal")
    train.set_defaults(run=run_train)


def run_train(args: argparse.Namespace) -> None:
    # The tokenizers library ends each of its bars with a blank line on standard output: where that is a file or a
    # pipe, it would hold three blank lines before the one line this command prints.
    progress = not args.no_progress and sys.stdout.isatty() and sys.stderr.isatty()

    def write(directory: Path) -> str:
        if args.files:
            texts = corpus_texts(args.files, args.text_field, args.tokenizer_sample)
        else:
            embedded = default_corpus()
            texts = (document.text for document in (*embedded.train, *embedded.validation))
        if args.kind == "bpe":
            tokenizer = Tokenizer.train_bpe(texts, args.vocab_size, args.min_frequency, show_progress=progress)
        elif args.kind == "wordpiece":
            tokenizer = Tokenizer.train_wordpiece(
                texts, args.vocab_size, args.min_frequency, lowercase=args.lowercase, show_progress=progress
            )
        elif args.kind == "words":
            tokenizer = train_words(texts, args.vocab_size)
        else:
            tokenizer = Tokenizer.train_unigram(texts, args.vocab_size, lowercase=args.lowercase,
                                                show_progress=progress)
        tokenizer.save(directory)
        return f"a {len(tokenizer):,}-token {args.kind} tokenizer"

    print(f"wrote {write_directory(Path(args.out), args.overwrite, write)} to {args.out}")
