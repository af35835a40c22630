"""Train/test 8-gram overlap (GPT-2 §4) through a Bloom filter: the shares it reports, within its error.

A Bloom filter never misses an 8-gram it holds, and says "seen" for one it does not
hold with probability at most its false-positive rate. The tests build text with a
known overlap and check both halves of that promise, the second one statistically:
the count of false positives among n novel 8-grams is Binomial(n, p), so it lies
within mean + 5 standard deviations except with probability below 1e-6.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

import plm.apps.overlap
from plm.apps.overlap import BloomFilter, WordHashes, build_filter, measure_overlap, ngram_keys, normalized_words
from plm.cli.main import main


def binomial_bound(n: int, p: float, sigmas: float = 5.0) -> float:
    return n * p + sigmas * math.sqrt(n * p * (1 - p)) + 1


def random_document(rng: random.Random, words: int) -> list[str]:
    """Words from a vocabulary of 10^6: two documents share an 8-gram with probability about 0."""
    return [f"w{rng.randrange(10**6)}" for _ in range(words)]


def test_the_papers_normalisation_keeps_lower_cased_alphanumeric_words() -> None:
    assert normalized_words("The  cat's\tBOOK--sold 1,000 copies!") == [
        b"the", b"cat", b"s", b"book", b"sold", b"1", b"000", b"copies"
    ]
    assert normalized_words("Ünïcode snake_case") == ["ünïcode".encode(), b"snake", b"case"]


def test_ngram_keys_are_equal_exactly_when_the_8_grams_are() -> None:
    words = normalized_words("a b c d e f g h a b c d e f g h i")
    keys = ngram_keys(WordHashes()(words))
    grams = [tuple(words[i : i + 8]) for i in range(len(words) - 7)]
    assert len(keys) == len(grams) == 10
    for i in range(len(grams)):
        for j in range(len(grams)):
            assert (keys[i] == keys[j]) == (grams[i] == grams[j])
    assert len(ngram_keys(WordHashes()(words[:7]))) == 0


@pytest.mark.parametrize("target", [0.05, 0.01, 0.001])
def test_the_measured_false_positive_rate_is_the_target_within_a_binomial_bound(target: float) -> None:
    rng = np.random.default_rng(0)
    inserted = rng.integers(0, 2**64, 50_000, dtype=np.uint64, endpoint=False)
    bloom = BloomFilter.for_capacity(len(inserted), target)
    bloom.add(inserted)
    assert bloom.contains(inserted).all()  # no false negatives
    novel = 400_000
    positives = int(bloom.contains(rng.integers(0, 2**64, novel, dtype=np.uint64, endpoint=False)).sum())
    # Sized for exactly these keys, the filter's rate is the target, from below and from above.
    assert novel * target - 5 * math.sqrt(novel * target) - 1 <= positives <= binomial_bound(novel, target)
    assert bloom.false_positive_rate() == pytest.approx(target, rel=0.15)  # fill^k, as the CLI reports it


def test_test_documents_copied_from_training_are_found_and_new_ones_are_not(tmp_path: Path) -> None:
    rng = random.Random(1)
    train_docs = [random_document(rng, rng.randint(20, 60)) for _ in range(300)]
    (tmp_path / "train.txt").write_text("\n\n".join(" ".join(doc) for doc in train_docs) + "\n", encoding="utf-8")
    copied = train_docs[:40]
    new = [random_document(rng, rng.randint(20, 60)) for _ in range(60)]
    # Copies differ in case, punctuation and line breaks only: the normalisation makes them equal.
    test_docs = [" ".join(doc).upper().replace(" ", ", ", 3).replace(" ", "\n", 1) for doc in copied]
    test_docs += [" ".join(doc) for doc in new] + ["too short to have one"]
    rng.shuffle(test_docs)
    (tmp_path / "test.txt").write_text("\n\n".join(test_docs) + "\n", encoding="utf-8")
    fpr = 0.01
    bloom, built = build_filter([tmp_path / "train.txt"], fpr)
    report = measure_overlap(bloom, tmp_path / "test.txt", threshold=0.5)
    copied_ngrams = sum(len(doc) - 7 for doc in copied)
    new_ngrams = sum(len(doc) - 7 for doc in new)
    assert built.ngrams == sum(len(doc) for doc in train_docs) - 7  # one stream of words: 8-grams cross documents
    assert (report.ngrams, report.documents, report.short_documents) == (copied_ngrams + new_ngrams, 100, 1)
    assert copied_ngrams <= report.found <= copied_ngrams + binomial_bound(new_ngrams, fpr)
    # every copy, and no new document (it would need half its 8-grams to be false positives)
    assert report.flagged == 40
    assert built.fpr <= fpr


def test_a_training_file_streams_in_chunks_without_losing_8_grams_at_their_edges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(2)
    lines = [" ".join(random_document(rng, rng.randint(1, 12))) for _ in range(400)]
    path = tmp_path / "train.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setattr(plm.apps.overlap, "CHUNK_CHARS", 50)  # a chunk every few lines
    bloom, built = build_filter([path], 1e-6)
    words = normalized_words(path.read_text(encoding="utf-8"))
    assert built.ngrams == len(words) - 7
    assert bloom.contains(ngram_keys(WordHashes()(words))).all()


def test_the_progress_bar_counts_every_byte_of_each_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from tqdm import tqdm

    bars: list[tqdm] = []

    def recording_bar(**options) -> tqdm:
        bars.append(tqdm(file=io.StringIO(), **{**options, "disable": False}))
        return bars[-1]

    rng = random.Random(3)
    paths = [tmp_path / "a.txt", tmp_path / "b.txt"]
    for path in paths:
        path.write_text("\n".join(" ".join(random_document(rng, 9)) + " été" for _ in range(300)) + "\n",
                        encoding="utf-8")
    monkeypatch.setattr(plm.apps.overlap, "CHUNK_CHARS", 500)
    monkeypatch.setattr(plm.apps.overlap, "progress_bar", recording_bar)
    size = sum(path.stat().st_size for path in paths)
    build_filter(paths, 1e-6, progress=True)  # counted, then inserted: every byte twice
    build_filter(paths, 1e-6, expected_ngrams=10_000, progress=True)
    assert [(bar.n, bar.total) for bar in bars] == [(2 * size, 2 * size), (size, size)]


def test_documents_are_lines_or_runs_of_lines_between_blank_lines(tmp_path: Path) -> None:
    seen = " ".join(f"s{i}" for i in range(10))
    unseen = " ".join(f"u{i}" for i in range(10))
    (tmp_path / "train.txt").write_text(seen + "\n", encoding="utf-8")
    (tmp_path / "test.txt").write_text(f"{seen}\n{unseen}\n  \n{unseen}\n", encoding="utf-8")
    bloom, _ = build_filter([tmp_path / "train.txt"], 1e-9)
    by_line = measure_overlap(bloom, tmp_path / "test.txt", threshold=0.9, split="lines")
    by_block = measure_overlap(bloom, tmp_path / "test.txt", threshold=0.2, split="blank-lines")
    assert (by_line.documents, by_line.flagged, by_line.ngrams, by_line.found) == (3, 1, 9, 3)
    # The first block reads 20 words as one document: 3 seen 8-grams of its 13 (3 / 13 >= 0.2).
    assert (by_block.documents, by_block.flagged, by_block.ngrams, by_block.found) == (2, 1, 16, 3)


def test_plm_overlap_prints_and_writes_the_shares(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    seen = " ".join(f"s{i}" for i in range(12))
    (tmp_path / "train.txt").write_text(seen + "\n", encoding="utf-8")
    (tmp_path / "test.txt").write_text(f"{seen}\n\n" + " ".join(f"u{i}" for i in range(12)) + "\n", encoding="utf-8")
    out = tmp_path / "overlap.json"
    code = main(["overlap", "--train", str(tmp_path / "train.txt"), "--test", str(tmp_path / "test.txt"),
                 "--fpr", "1e-9", "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0 and "50.00%" in printed and "target 1e-09" in printed
    numbers = json.loads(out.read_text())
    assert numbers["test"][0] | {"file": None} == {
        "file": None, "ngrams": 10, "found": 5, "documents": 2, "short_documents": 0, "flagged": 1,
        "threshold": 0.5, "share": 0.5, "flagged_share": 0.5,
    }
    assert numbers["training"]["ngrams"] == 5 and numbers["training"]["target_fpr"] == 1e-9


@pytest.mark.parametrize(("flag", "message"), [(["--fpr", "1"], "--fpr: must be between 0 and 1"),
                                               (["--threshold", "2"], "--threshold: must be between 0 and 1")])
def test_an_out_of_range_flag_is_one_line_and_exit_code_2(
    tmp_path: Path, capsys: pytest.CaptureFixture, flag, message
) -> None:
    (tmp_path / "a.txt").write_text("a b c d e f g h\n", encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        main(["overlap", "--train", str(tmp_path / "a.txt"), "--test", str(tmp_path / "a.txt"), *flag])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_a_missing_training_file_is_a_plm_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code = main(["overlap", "--train", str(tmp_path / "none.txt"), "--test", str(tmp_path / "none.txt")])
    assert code == 2 and "none.txt: no such file" in capsys.readouterr().err


@pytest.mark.parametrize(("threshold", "flagged"), [(0.5, 1), (0.5 + 1e-9, 0)])
def test_a_document_with_exactly_the_threshold_share_in_training_is_flagged(
    tmp_path: Path, threshold: float, flagged: int
) -> None:
    """"At least ``threshold`` of its 8-grams": a share equal to the threshold flags the document. Guards against
    flagging only shares above it. The counts are a brute-force set of 8-gram tuples (the filter's rate, 1e-9, makes a
    false positive all but impossible)."""
    train = [f"s{i}" for i in range(11)]
    test = train + [f"u{i}" for i in range(4)]  # 15 words, 8 8-grams, the first 4 of them in training
    (tmp_path / "train.txt").write_text(" ".join(train) + "\n", encoding="utf-8")
    (tmp_path / "test.txt").write_text(" ".join(test) + "\n", encoding="utf-8")
    seen = {tuple(train[i : i + 8]) for i in range(len(train) - 7)}
    grams = [tuple(test[i : i + 8]) for i in range(len(test) - 7)]
    assert sum(gram in seen for gram in grams) / len(grams) == 0.5
    bloom, _ = build_filter([tmp_path / "train.txt"], 1e-9)
    report = measure_overlap(bloom, tmp_path / "test.txt", threshold=threshold)
    assert (report.ngrams, report.found, report.flagged) == (len(grams), sum(gram in seen for gram in grams), flagged)
