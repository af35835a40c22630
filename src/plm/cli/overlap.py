"""plm overlap: how many of a test set's 8-grams occur in the training text (GPT-2 §4)."""

from __future__ import annotations

import argparse
import time

from plm.apps.overlap import WordHashes, build_filter, measure_overlap
from plm.cli.common import HelpFormatter, add_no_progress, positive_int
from plm.cli.eval_common import add_json, check_outputs, format_number
from plm.storage.atomic_files import write_json

EXAMPLES = """examples:
  plm overlap --train train.txt --test test.txt
  plm overlap --train shard-*.txt --test wikitext-2/test.txt lambada.txt --fpr 1e-6 --json overlap.json
  plm overlap --train huge.txt --expected-ngrams 2000000000 --test test.txt   # one pass over huge.txt
"""


def probability(text: str) -> float:
    value = float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def share(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "overlap",
        help="share of test 8-grams found in training text (Bloom filter)",
        description="Train/test overlap as in GPT-2 §4. Text is normalised to lower-cased alphanumeric words; "
        "the training files' 8-grams go into a Bloom filter with the false-positive rate --fpr, sized from "
        "a first pass that counts them (or from --expected-ngrams, which saves that pass). The training text "
        "is streamed in chunks and never held in memory; each training file is one stream of words.\n\n"
        "For each test file it prints the share of its 8-grams found in training, and the share of its "
        "documents with at least --threshold of their 8-grams found. A document is a run of lines between "
        "blank lines (--split blank-lines, the default) or one line (--split lines); documents of fewer "
        "than 8 words have no 8-grams and are only counted. A found 8-gram is a false positive with "
        "probability at most the reported rate, so a share is too high by at most about that rate.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--train", nargs="+", required=True, metavar="FILE", help="training text files (UTF-8)")
    parser.add_argument("--test", nargs="+", required=True, metavar="FILE", help="test text files (UTF-8)")
    parser.add_argument("--fpr", type=probability, default=1e-4, help="the Bloom filter's false-positive rate")
    parser.add_argument(
        "--expected-ngrams", type=positive_int, help="size the filter for this many 8-grams instead of counting"
    )
    parser.add_argument("--threshold", type=share, default=0.5, help="flag a document with at least this share found")
    parser.add_argument(
        "--split", choices=("blank-lines", "lines"), default="blank-lines", help="what a test document is"
    )
    add_no_progress(parser)
    add_json(parser)
    parser.set_defaults(run=run_overlap)


def run_overlap(args: argparse.Namespace) -> None:
    check_outputs(args, "json")
    start = time.perf_counter()
    bloom, built = build_filter(args.train, args.fpr, args.expected_ngrams, progress=not args.no_progress)
    seconds = time.perf_counter() - start
    print(
        f"training: {built.ngrams:,} 8-grams from {built.bytes_read / 1e6:,.1f} MB in {seconds:.1f} s "
        f"({built.bytes_read / 1e6 / seconds:,.2f} MB/s); Bloom filter of {built.bits / 8e6:,.1f} MB, "
        f"{built.hashes} hashes, false-positive rate {built.fpr:.2g} (target {built.target_fpr:.2g})"
    )
    hashes = WordHashes()
    reports = [measure_overlap(bloom, path, args.threshold, args.split, hashes) for path in args.test]
    width = max(len(report.file) for report in reports)
    print(f"{'test file':<{width}}  {'8-grams':>12}  {'found':>8}  {'documents':>10}  {'flagged':>8}")
    for report in reports:
        print(
            f"{report.file:<{width}}  {format_number(report.ngrams):>12}  {report.share:>8.2%}  "
            f"{format_number(report.documents):>10}  {report.flagged_share:>8.2%}"
        )
    if args.json:
        write_json(args.json, {"training": vars(built) | {"seconds": seconds}, "test": [r.as_dict() for r in reports]})
