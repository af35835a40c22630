"""Parallel text prepared once for seq2seq: the ids it maps, its validation pairs, its bad inputs, and the batches
that lengths alone make."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

import plm.data.workers as workers_module
from plm.cli.main import main
from plm.data.dates import date_pairs
from plm.data.prepare import PrepareOptions, held_out, prepare_pairs
from plm.data.prepared import PreparedPairs
from plm.data.sentence_pairs import EncodedPairs, ParallelText, SentencePair, Seq2SeqTokenizers, token_budget_batches
from plm.errors import PLMError

QUIET = PrepareOptions(progress=False)
PAIRS = date_pairs(120, seed=0)


@pytest.fixture(scope="module")
def tokenizers() -> Seq2SeqTokenizers:
    """One tokenizer per side, sources reversed: the ids of both sides differ, and the reversal is in them."""
    return Seq2SeqTokenizers.train(PAIRS, vocab_size=300, joint=False, reverse_source=True)


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def aligned(directory: Path, pairs: list[SentencePair]) -> ParallelText:
    return ParallelText(source=write_lines(directory / "train.src", [p.source for p in pairs]),
                        target=write_lines(directory / "train.tgt", [p.target for p in pairs]))


def pairs_of(split) -> list[tuple[list[int], list[int]]]:
    """Each pair of a prepared split, as lists of ids."""
    return [(split.pair(i)[0].tolist(), split.pair(i)[1].tolist()) for i in range(len(split))]


def pairs_of_text(pairs: list[SentencePair], tokenizers: Seq2SeqTokenizers) -> list[tuple[list[int], list[int]]]:
    """The oracle: each pair encoded in memory, as lists of ids."""
    encoded = EncodedPairs.of(pairs, tokenizers)
    return list(zip(encoded.sources, encoded.targets))


def test_aligned_files_a_tsv_and_translation_records_prepare_the_ids_the_tokenizers_give(tmp_path, tokenizers):
    records = [json.dumps({"translation": {"en": p.source, "fr": "?", "iso": p.target}}) for p in PAIRS]
    with gzip.open(tmp_path / "train.jsonl.gz", "wt", encoding="utf-8") as file:  # WMT's records come compressed
        file.write("\n".join(records) + "\n")
    forms = {
        "aligned": aligned(tmp_path, PAIRS),
        "tsv": ParallelText(tsv=write_lines(tmp_path / "train.tsv", [f"{p.source}\t{p.target}" for p in PAIRS])),
        "translations": ParallelText(translations=(tmp_path / "train.jsonl.gz",), languages=("en", "iso")),
    }
    # The oracle: the CRC-32 rule on each pair's text, and the pairs encoded in memory.
    train = [p for p in PAIRS if not held_out(f"{p.source}\t{p.target}", 0.05)]
    validation = [p for p in PAIRS if held_out(f"{p.source}\t{p.target}", 0.05)]
    assert 0 < len(validation) < len(PAIRS) // 4
    for form, text in forms.items():
        corpus = prepare_pairs(text, tokenizers, tmp_path / form, options=QUIET)
        for split, expected in ((corpus.train, train), (corpus.validation, validation)):
            assert pairs_of(split) == pairs_of_text(expected, tokenizers), form
            encoded = EncodedPairs.of(expected, tokenizers)
            assert split.source_lengths.tolist() == encoded.source_lengths.tolist()
            assert split.target_lengths.tolist() == encoded.target_lengths.tolist()
        assert corpus.validation_text() == validation
        assert corpus.manifest["kind"] == "parallel" and corpus.manifest["form"] == form
        assert corpus.manifest["splits"]["train"]["pairs"] == len(train)
        assert corpus.tokenizers().reverse_source and not corpus.tokenizers().joint
        corpus.check_tokenizers(tokenizers)
    with pytest.raises(PLMError, match="prepared with its sources reversed"):
        corpus.check_tokenizers(tokenizers.in_source_order(False))
    with pytest.raises(PLMError, match="prepared with other tokenizers"):
        corpus.check_tokenizers(Seq2SeqTokenizers.train(PAIRS[:40], vocab_size=280, reverse_source=True))


def test_validation_files_are_the_validation_pairs_and_a_corpus_without_held_out_pairs_gives_its_last(
        tmp_path, tokenizers):
    given = prepare_pairs(aligned(tmp_path, PAIRS), tokenizers, tmp_path / "given",
                          validation=ParallelText(tsv=write_lines(tmp_path / "v.tsv", ["a\tb", "c\td"])), options=QUIET)
    assert len(given.train) == len(PAIRS)
    assert given.validation_text() == [SentencePair("a", "b"), SentencePair("c", "d")]
    assert pairs_of(given.validation) == pairs_of_text(given.validation_text(), tokenizers)

    few = [p for p in PAIRS if not held_out(f"{p.source}\t{p.target}", 0.05)][:10]  # none of them held out
    corpus = prepare_pairs(aligned(tmp_path, few), tokenizers, tmp_path / "few", options=QUIET)
    assert corpus.validation_text() == few[-1:] and pairs_of(corpus.train) == pairs_of_text(few[:-1], tokenizers)
    assert pairs_of(corpus.validation) == pairs_of_text(few[-1:], tokenizers)

    # All held out: they are the training pairs, and the last of them (all but one) the validation pairs.
    options = PrepareOptions(validation_fraction=0.99, progress=False)
    four = [p for p in PAIRS if held_out(f"{p.source}\t{p.target}", 0.99)][:4]
    corpus = prepare_pairs(aligned(tmp_path, four), tokenizers, tmp_path / "all", options=options)
    assert pairs_of(corpus.train) == pairs_of_text(four[:1], tokenizers) and corpus.validation_text() == four[1:]
    assert pairs_of(corpus.validation) == pairs_of_text(four[1:], tokenizers)


def test_worker_processes_write_the_same_files_as_one_process(tmp_path, tokenizers, monkeypatch):
    text = aligned(tmp_path, PAIRS)
    prepare_pairs(text, tokenizers, tmp_path / "one", options=QUIET)
    monkeypatch.setattr(workers_module, "PARALLEL_FROM_CHARACTERS", 0)
    monkeypatch.setattr(workers_module, "BATCH_CHARACTERS", 500)  # many batches, in input order
    prepare_pairs(text, tokenizers, tmp_path / "workers", options=PrepareOptions(workers=2, progress=False))
    files = sorted(path.relative_to(tmp_path / "one") for path in (tmp_path / "one").rglob("*") if path.is_file())
    assert len([path for path in files if path.suffix == ".tokens"]) == 4  # source and target of each split
    for file in files:
        assert (tmp_path / "one" / file).read_bytes() == (tmp_path / "workers" / file).read_bytes(), file


@pytest.mark.parametrize("case", ["misaligned", "empty line", "no language", "no translation", "empty target"])
def test_bad_pairs_are_one_error_naming_file_and_line_and_nothing_is_written(case, tmp_path, tokenizers):
    lines = ["ein hund", "zwei katzen", "ein buch", "eine frau"]
    source, target = tmp_path / "de.txt", tmp_path / "en.txt"
    records = tmp_path / "wmt.jsonl"
    texts = {  # each written when its case runs
        "misaligned": (lambda: aligned_files(source, target, lines, lines[:3]),
                       rf"{source} has 4 lines but {target} has 3: the files are not aligned \({source}:4 has no "),
        "empty line": (lambda: aligned_files(source, target, lines, ["a dog", " ", "a book", "a woman"]),
                       rf"{target}:2: empty line; every line must hold one sentence"),
        "no language": (lambda: translations(records, [{"translation": {"de": "ein hund", "en": "a dog"}},
                                                       {"translation": {"en": "two cats"}}]),
                        rf"{records}:2: the translation has no 'de' \(its languages are en\)"),
        "no translation": (lambda: translations(records, [{"de": "ein hund", "en": "a dog"}]),
                           rf"{records}:1: expected a record {{\"translation\": .*\(the fields are de, en\)"),
        "empty target": (lambda: ParallelText(tsv=write_lines(tmp_path / "p.tsv", ["a\tb", "zwei katzen\t"])),
                         r"p.tsv:2: empty target sentence"),
    }
    written, message = texts[case]
    text = written()
    with pytest.raises(PLMError, match=message):
        prepare_pairs(text, tokenizers, tmp_path / "out", options=QUIET)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


def aligned_files(source: Path, target: Path, sources: list[str], targets: list[str]) -> ParallelText:
    return ParallelText(source=write_lines(source, sources), target=write_lines(target, targets))


def translations(path: Path, records: list[dict]) -> ParallelText:
    write_lines(path, [json.dumps(record) for record in records])
    return ParallelText(translations=(path,), languages=("de", "en"))


def test_plm_data_prepare_takes_pairs_in_three_forms_and_refuses_half_of_one(tmp_path, tokenizers, capsys):
    tokenizers.save(tmp_path / "tok")
    text = aligned(tmp_path, PAIRS)
    command = ["data", "prepare", "--tokenizer", str(tmp_path / "tok"), "--no-progress"]
    assert main([*command, "--src", str(text.source), "--tgt", str(text.target), "--out", str(tmp_path / "a")]) == 0
    printed = capsys.readouterr().out
    train = PreparedPairs.open(tmp_path / "a").manifest["splits"]["train"]
    assert printed.startswith(f"train: {train['pairs']} pairs, {train['source_tokens']:,} source and ")
    write_lines(tmp_path / "r.jsonl", [json.dumps({"translation": {"x": p.source, "y": p.target}}) for p in PAIRS])
    assert main([*command, str(tmp_path / "r.jsonl"), "--src-lang", "x", "--tgt-lang", "y",
                 "--out", str(tmp_path / "b")]) == 0
    assert pairs_of(PreparedPairs.open(tmp_path / "b").train) == pairs_of(PreparedPairs.open(tmp_path / "a").train)
    capsys.readouterr()
    assert main([*command, str(tmp_path / "r.jsonl"), "--src-lang", "x", "--out", str(tmp_path / "c")]) == 2
    assert "--src-lang and --tgt-lang go together" in capsys.readouterr().err
    assert main([*command, "--src", str(text.source), "--out", str(tmp_path / "c")]) == 2
    assert "--src and --tgt go together" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def budget_batches_as_before(lengths: list[tuple[int, int]], max_tokens: int) -> list[list[int]]:
    """The oracle: plm's batching before it read length arrays, a list of lists over the pairs' lengths."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    longest_source = longest_target = 0
    for index in order:
        source, target = lengths[index]
        widths = max(longest_source, source) + max(longest_target, target)
        if current and widths * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest_source, longest_target = [], 0, 0
        current.append(index)
        longest_source, longest_target = max(longest_source, source), max(longest_target, target)
    if current:
        batches.append(current)
    return batches


@pytest.mark.parametrize("max_tokens", [64, 256, 4096])
def test_budget_batches_of_length_arrays_are_the_list_batches_of_before(max_tokens):
    rng = np.random.default_rng(max_tokens)
    sources = rng.integers(1, 30, 20_000).astype(np.int32)  # many ties: the order within them matters
    targets = rng.integers(2, 30, 20_000).astype(np.int32)
    batches = token_budget_batches(sources, targets, max_tokens)
    expected = budget_batches_as_before(list(zip(sources.tolist(), targets.tolist())), max_tokens)
    assert [batch.tolist() for batch in batches] == expected
    among = np.flatnonzero(rng.random(20_000) < 0.3)  # the pairs that fit a model's context, say
    kept = token_budget_batches(sources, targets, max_tokens, among=among)
    lengths = list(zip(sources[among].tolist(), targets[among].tolist()))
    assert [batch.tolist() for batch in kept] == [among[b].tolist() for b in budget_batches_as_before(lengths,
                                                                                                      max_tokens)]
