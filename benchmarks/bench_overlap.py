"""Throughput of `plm overlap`: MB/s of training text into the 8-gram Bloom filter.

The text is English-like: sentences of words drawn from a Zipf distribution over a
50,000-word vocabulary, written to a temporary file, so the run needs no data set
and its n-grams are mostly distinct, as in a real corpus. Reported: building the
filter in one pass (--expected-ngrams given) and in two (counting first), and the
test side (8-grams looked up per second), each the median of a few runs.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from bench_common import Report
from plm.apps.overlap import WordHashes, build_filter, count_ngrams, measure_overlap


def english_like(megabytes: float, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    vocabulary = np.array([f"w{index}" for index in range(50_000)])
    words = vocabulary[np.minimum(rng.zipf(1.1, int(megabytes * 1e6 / 6)), 50_000) - 1]
    lines = [" ".join(words[start : start + 20]) + "." for start in range(0, len(words), 20)]
    return "\n".join(lines) + "\n"


def median_seconds(call, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=float, default=20.0, help="size of the training text")
    parser.add_argument("--fpr", type=float, default=1e-4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        train = Path(directory) / "train.txt"
        train.write_text(english_like(args.megabytes), encoding="utf-8")
        test = Path(directory) / "test.txt"
        test.write_text(english_like(args.megabytes / 10, seed=1), encoding="utf-8")
        size = train.stat().st_size / 1e6
        ngrams = count_ngrams([train])
        one_pass = median_seconds(lambda: build_filter([train], args.fpr, ngrams), args.repeats)
        two_pass = median_seconds(lambda: build_filter([train], args.fpr), args.repeats)
        bloom, built = build_filter([train], args.fpr, ngrams)
        lookup = median_seconds(lambda: measure_overlap(bloom, test, hashes=WordHashes()), args.repeats)
        looked_up = measure_overlap(bloom, test).ngrams
    print(f"training text {size:.1f} MB, {ngrams:,} 8-grams; filter {built.bits / 8e6:.1f} MB, {built.hashes} hashes, "
          f"false-positive rate {built.fpr:.2g} (target {args.fpr:g})")
    report = Report("overlap", "none (plm alone)", settings=vars(args))
    config = f"{size:.0f} MB text"
    report.add(config, "build, one pass (--expected-ngrams), MB/s", size / one_pass)
    report.add(config, "build, two passes (counting first), MB/s", size / two_pass)
    report.add(config, "test lookups, 8-grams/s", looked_up / lookup)
    report.finish()


if __name__ == "__main__":
    main()
