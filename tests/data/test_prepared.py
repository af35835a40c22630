"""A prepared corpus: the ids, boundaries and word starts it holds, its manifest, and the promises of its writing."""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

import numpy as np
import pytest
import tokenizers
from tokenizers import models, pre_tokenizers

import plm.data.workers as workers_module
from plm.data.corpus import Document
from plm.data.prepare import PrepareOptions, cached_corpus, corpus_texts, held_out, join_prepared, prepare_corpus
from plm.data.prepared import MANIFEST, PreparedCorpus, PreparedSplit
from plm.data.sources import document_start, iter_documents, shard_inputs
from plm.data.tokens import validation_blocks
from plm.errors import PLMError
from plm.objectives.bilm import SpelledWords
from plm.tokenization.characters import split_words
from plm.tokenization.tokenizer import Tokenizer, train_words
from tests.conftest import synthetic_text

QUIET = PrepareOptions(progress=False)
DOCUMENTS = ["The first document is about tokens.", "The second one is about blocks of tokens. It has two."]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.train_bpe(DOCUMENTS * 10, vocab_size=300)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_documents_become_one_memory_mapped_stream_each_followed_by_eos(tmp_path, tokenizer):
    train = write(tmp_path / "train.txt", "\n\n".join(DOCUMENTS))
    corpus = prepare_corpus([train], tokenizer, tmp_path / "data", [train], QUIET)
    first, second = (tokenizer.encode(text) for text in DOCUMENTS)
    stream = corpus.train.tokens
    assert isinstance(stream.parts[0], np.memmap) and stream.dtype == np.uint16
    assert stream[np.arange(len(stream))].tolist() == first + [tokenizer.eos_id] + second + [tokenizer.eos_id]
    assert [corpus.train.document_tokens(d).tolist() for d in range(2)] == [first, second]
    assert corpus.train.token_count == len(first) + len(second)
    # A causal LM's tokenizer (no mask token) records no sentences: each document is one.
    assert corpus.manifest["splits"]["train"] == {"parts": ["00000"], "documents": 2, "sentences": 2,
                                                  "tokens": len(first) + len(second) + 2}
    assert corpus.manifest["boundaries"] is False and corpus.train.document_word_starts(1).all()


def test_sentences_begin_at_the_tokens_of_their_first_characters_and_words_at_each_pre_token(tokenizer):
    split = PreparedSplit.from_documents([Document("d", "One two. Three four!\nFive")], tokenizer)
    ids, bounds = split.document_tokens(0).tolist(), split.sentence_bounds(0).tolist()
    assert [tokenizer.decode(ids[a:b]).strip() for a, b in zip(bounds, bounds[1:])] == ["One two.", "Three four!",
                                                                                        "Five"]
    encoding = tokenizer.backend.encode("One two. Three four!\nFive", add_special_tokens=False)
    starts = [i == 0 or encoding.word_ids[i] != encoding.word_ids[i - 1] for i in range(len(ids))]
    assert split.document_word_starts(0).tolist() == starts


def test_a_vocabulary_beyond_uint16_is_stored_as_uint32_and_ids_up_to_65535_round_trip(tmp_path):
    for size, dtype, written in ((70_000, np.uint32, [1, 69_999]), (2**16, np.uint16, [32_767, 40_000, 65_535, 7])):
        words = {f"w{i}": i for i in range(size)}
        backend = tokenizers.Tokenizer(models.WordLevel(words, unk_token="w0"))
        backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        text = write(tmp_path / "ids.txt", " ".join(f"w{i}" for i in written))
        corpus = prepare_corpus([text], Tokenizer(backend, {}), tmp_path / f"data{size}", [text], QUIET)
        assert corpus.train.tokens.dtype == dtype and corpus.train.document_tokens(0).tolist() == written
        assert validation_blocks(corpus.train.tokens, block_size=len(written) - 1)[0].tolist() == written


def test_validation_is_held_out_by_document_the_same_whatever_the_order(tmp_path, tokenizer):
    paragraphs = [p for p in synthetic_text(400).split("\n\n") if p.strip()]
    text = write(tmp_path / "a.txt", "\n\n".join(paragraphs))
    corpus = prepare_corpus([text], tokenizer, tmp_path / "a", options=QUIET)
    reordered = prepare_corpus([write(tmp_path / "b.txt", "\n\n".join(paragraphs[::-1]))], tokenizer, tmp_path / "b",
                               options=QUIET)
    expected = sum(zlib.crc32(p.encode()) < 0.05 * 2**32 for p in paragraphs)
    assert 0 < len(corpus.validation) == expected == len(reordered.validation)
    held = {tokenizer.decode(corpus.validation.document_tokens(d).tolist()) for d in range(len(corpus.validation))}
    assert held == {tokenizer.decode(reordered.validation.document_tokens(d).tolist())
                    for d in range(len(reordered.validation))}
    assert all(held_out(p, 0.05) for p in paragraphs if p in held)


@pytest.mark.parametrize("text", ["One sentence. Another one. A third one here.\n" * 20, "one long line " * 200])
def test_a_single_document_holds_out_its_tail(tmp_path, tokenizer, text):
    corpus = prepare_corpus([write(tmp_path / "one.txt", text)], tokenizer, tmp_path / "data", options=QUIET)
    train, validation = corpus.train, corpus.validation
    assert len(train) == len(validation) == 1
    whole = tokenizer.encode(text.strip("\n"))
    assert train.document_tokens(0).tolist() + validation.document_tokens(0).tolist() == whole
    assert 0.03 < validation.token_count / len(whole) < 0.1
    assert train.tokens[np.arange(len(train.tokens))][-1] == tokenizer.eos_id  # the cut document ends as any does


def test_worker_processes_write_the_same_files_as_one_process(tmp_path, tokenizer, monkeypatch):
    text = write(tmp_path / "text.txt", synthetic_text(300))
    prepare_corpus([text], tokenizer, tmp_path / "alone", options=QUIET)
    monkeypatch.setattr(workers_module, "PARALLEL_FROM_CHARACTERS", 0)
    monkeypatch.setattr(workers_module, "BATCH_CHARACTERS", 5_000)  # many batches, in input order
    prepare_corpus([text], tokenizer, tmp_path / "workers", options=PrepareOptions(workers=2, progress=False))
    for split in ("train", "validation"):
        for file in sorted((tmp_path / "alone" / split).iterdir()):
            assert file.read_bytes() == (tmp_path / "workers" / split / file.name).read_bytes(), file.name


def test_a_killed_prepare_leaves_nothing_that_passes_for_a_corpus_and_the_next_one_starts_clean(tmp_path, tokenizer):
    text = write(tmp_path / "text.txt", synthetic_text(50))
    out, staging = tmp_path / "data", tmp_path / ".data.preparing"
    staging.mkdir()
    (staging / "train").mkdir()
    (staging / "train" / "00000.tokens").write_bytes(b"\1\2\3")  # what a kill halfway leaves
    out.mkdir()
    with pytest.raises(PLMError, match=r"data: its prepare has not finished \(run it again to finish it\)"):
        PreparedCorpus.open(out)
    corpus = prepare_corpus([text], tokenizer, out, options=QUIET)
    assert not staging.exists() and corpus.train.token_count > 0


def test_a_prepare_that_fails_writes_nothing(tmp_path, tokenizer):
    good, bad = write(tmp_path / "a.txt", synthetic_text(20)), tmp_path / "b.txt"
    bad.write_bytes(b"fine\n\xff\xfe broken\n")
    with pytest.raises(PLMError, match="b.txt:2: not valid UTF-8"):
        prepare_corpus([good, bad], tokenizer, tmp_path / "data", options=QUIET)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a.txt", "b.txt"]


def test_an_existing_corpus_is_kept_unless_overwritten_and_the_same_one_is_reused(tmp_path, tokenizer):
    first, second = write(tmp_path / "a.txt", synthetic_text(20)), write(tmp_path / "b.txt", synthetic_text(30))
    corpus = prepare_corpus([first], tokenizer, tmp_path / "data", options=QUIET)
    stamp = (tmp_path / "data" / MANIFEST).stat().st_mtime_ns
    assert prepare_corpus([first], tokenizer, tmp_path / "data", options=QUIET).manifest == corpus.manifest
    assert (tmp_path / "data" / MANIFEST).stat().st_mtime_ns == stamp  # nothing written again
    with pytest.raises(PLMError, match="holds a prepared corpus of other inputs or another tokenizer; choose another"):
        prepare_corpus([second], tokenizer, tmp_path / "data", options=QUIET)
    replaced = prepare_corpus([second], tokenizer, tmp_path / "data", options=QUIET, overwrite=True)
    assert replaced.manifest["inputs"][0]["path"] == str(second.resolve())
    with pytest.raises(PLMError, match="holds other files"):
        prepare_corpus([first], tokenizer, tmp_path, options=QUIET)


def test_a_corpus_refuses_another_tokenizer(tmp_path, tokenizer):
    corpus = prepare_corpus([write(tmp_path / "a.txt", synthetic_text(20))], tokenizer, tmp_path / "data",
                            options=QUIET)
    corpus.check_tokenizer(Tokenizer.load(tmp_path / "data" / "tokenizer"))
    other = Tokenizer.train_bpe(DOCUMENTS * 10, vocab_size=290)
    with pytest.raises(PLMError, match=r"data: prepared with another tokenizer \(its tokenizer/, of 300 tokens\)"):
        corpus.check_tokenizer(other)


def test_cached_corpora_are_reused_until_the_text_or_the_tokenizer_changes(tmp_path, tokenizer):
    text = write(tmp_path / "a.txt", synthetic_text(20))
    first = cached_corpus([text], tokenizer, options=QUIET)
    assert cached_corpus([text], tokenizer, options=QUIET).path == first.path
    assert cached_corpus([text], Tokenizer.train_bpe(DOCUMENTS * 10, vocab_size=290), options=QUIET).path != first.path
    write(text, synthetic_text(21))
    assert cached_corpus([text], tokenizer, options=QUIET).path != first.path


def test_a_manifest_of_another_version_or_a_torn_part_is_refused(tmp_path, tokenizer):
    prepare_corpus([write(tmp_path / "a.txt", synthetic_text(20))], tokenizer, tmp_path / "data", options=QUIET)
    manifest = json.loads((tmp_path / "data" / MANIFEST).read_text())
    (tmp_path / "data" / MANIFEST).write_text(json.dumps({**manifest, "version": 99}))
    with pytest.raises(PLMError, match="prepared with format version 99"):
        PreparedCorpus.open(tmp_path / "data")
    (tmp_path / "data" / MANIFEST).write_text(json.dumps(manifest))
    documents = tmp_path / "data" / "train" / "00000.documents"
    documents.write_bytes(documents.read_bytes()[:-16])
    with pytest.raises(PLMError, match="its files do not agree"):
        PreparedCorpus.open(tmp_path / "data")


def documents_of(corpus: PreparedCorpus, split: str) -> list[tuple[int, ...]]:
    part = getattr(corpus, split)
    return [tuple(part.document_tokens(d).tolist()) for d in range(len(part))]


@pytest.mark.parametrize("count", [1, 3, 7])
def test_shards_joined_hold_each_document_once_as_one_prepare_does(tmp_path, tokenizer, count):
    """A large text file and a JSONL file cut into shards at document breaks, a compressed file whole."""
    import gzip

    big = write(tmp_path / "big.txt", synthetic_text(300, seed=1))
    rows = write(tmp_path / "rows.jsonl", "".join(json.dumps({"text": p}) + "\n"
                                                  for p in synthetic_text(80, seed=2).split("\n\n") if p.strip()))
    packed = tmp_path / "packed.txt.gz"
    packed.write_bytes(gzip.compress(synthetic_text(40, seed=3).encode()))
    inputs = [big, rows, packed]
    whole = prepare_corpus(inputs, tokenizer, tmp_path / "whole", options=QUIET)
    shards = [prepare_corpus(inputs, tokenizer, tmp_path / f"shard-{i}", options=PrepareOptions(
        progress=False, shard=(i, count))) for i in range(count)]
    joined = join_prepared([shard.path for shard in reversed(shards)], tmp_path / "joined")  # in shard order
    for split in ("train", "validation"):
        assert documents_of(joined, split) == documents_of(whole, split)
    stream, expected = joined.train.tokens, whole.train.tokens  # a causal LM's blocks cross the parts
    assert stream[np.arange(len(stream))].tolist() == expected[np.arange(len(expected))].tolist()
    blocks = np.arange(len(stream) - 40, step=7)[:, None] + np.arange(40)  # (n, 40), some across two parts
    assert np.array_equal(stream[blocks], expected[blocks])
    assert joined.manifest["splits"]["train"]["parts"] == [f"{i:05d}" for i in range(count)]
    assert os.stat(tmp_path / "joined" / "train" / "00000.tokens").st_ino == os.stat(
        tmp_path / "shard-0" / "train" / "00000.tokens").st_ino  # linked, not copied
    sizes = [shard.manifest["splits"]["train"]["tokens"] for shard in shards]
    assert max(sizes) < 2.5 * sum(sizes) / count  # shares of about equal size


def test_a_document_start_is_found_after_any_offset_and_shards_name_their_lines(tmp_path, tokenizer):
    text = "one\ntwo\n\nthree\n\n\nfour\nfive\n\nsix\n"
    path = write(tmp_path / "t.txt", text)
    starts = {text.index(word) for word in ("one", "three", "four", "six")} | {len(text)}
    assert all(document_start(path, offset) in starts and document_start(path, offset) >= offset
               for offset in range(len(text) + 1))
    names = [doc.name for i in range(4) for path_, byte_range in shard_inputs([path], i, 4)
             for doc in iter_documents(path_, byte_range=byte_range)]
    assert names == [doc.name for doc in iter_documents(path)] == [f"{path}:{n}" for n in (1, 4, 7, 10)]


def test_only_all_shards_of_one_tokenizer_join(tmp_path, tokenizer):
    text = write(tmp_path / "a.txt", synthetic_text(60))
    first, second = (prepare_corpus([text], tokenizer, tmp_path / f"s{i}", options=PrepareOptions(
        progress=False, shard=(i, 3))) for i in range(2))
    with pytest.raises(PLMError, match="each once; got 0/3, 1/3"):
        join_prepared([first.path, second.path], tmp_path / "joined")
    other = prepare_corpus([text], Tokenizer.train_bpe(DOCUMENTS * 10, vocab_size=290), tmp_path / "other",
                           options=QUIET)
    with pytest.raises(PLMError, match="other: prepared with another tokenizer than"):
        join_prepared([first.path, other.path], tmp_path / "joined")
    # Joined twice, a corpus's tokens would count twice in training and in validation.
    with pytest.raises(PLMError, match=r"other: given twice \(as .*other too\); join each corpus once"):
        join_prepared([other.path, f"{other.path}/"], tmp_path / "joined")
    assert not (tmp_path / "joined").exists()


def test_a_tokenizer_learns_from_a_sample_spread_over_the_corpus_without_the_validation_documents(tmp_path):
    paragraphs = [p for p in synthetic_text(2000).split("\n\n") if p.strip()]
    text = write(tmp_path / "a.txt", "\n\n".join(paragraphs))
    whole = list(corpus_texts([text]))
    sample = list(corpus_texts([text], sample_characters=len(text.read_text()) // 10))
    assert sample == list(corpus_texts([text], sample_characters=len(text.read_text()) // 10))  # the same each time
    assert 0.07 < sum(map(len, sample)) / sum(map(len, whole)) < 0.13
    positions = [whole.index(p) for p in sample]
    assert positions[0] < len(whole) / 10 and positions[-1] > 0.9 * len(whole)  # spread, not the first tenth
    training = list(corpus_texts([text], held_out_fraction=0.05))
    assert set(training) == {p for p in whole if not held_out(p, 0.05)} and len(training) < len(whole)


def test_tokenizer_train_reads_a_jsonl_field_and_a_sample(tmp_path, capsys):
    from plm.cli.main import main

    rows = write(tmp_path / "rows.jsonl", "".join(json.dumps({"body": p}) + "\n"
                                                  for p in synthetic_text(300).split("\n\n") if p.strip()))
    argv = ["tokenizer", "train", str(rows), "--text-field", "body", "--tokenizer-sample", "5000",
            "--vocab-size", "300", "--out", str(tmp_path / "tok")]
    assert main(argv) == 0
    assert len(Tokenizer.load(tmp_path / "tok")) > 200
    assert main([*argv[:3], "--text-field", "text", "--out", str(tmp_path / "other")]) == 2
    assert "rows.jsonl:1: no field 'text' (the fields are body)" in capsys.readouterr().err


def test_two_processes_preparing_one_corpus_at_once_both_get_it(tmp_path, tokenizer):
    """Two runs of one --train file prepare it into plm's cache at the same time: the second waits, then reads it."""
    import subprocess
    import sys

    text = write(tmp_path / "a.txt", synthetic_text(6000))
    tokenizer.save(tmp_path / "tok")
    script = ("import sys; from plm.data.prepare import PrepareOptions, prepare_corpus; "
              "from plm.tokenization.tokenizer import Tokenizer; "
              "corpus = prepare_corpus([sys.argv[1]], Tokenizer.load(sys.argv[2]), sys.argv[3], "
              "options=PrepareOptions(progress=False, workers=1)); print(corpus.manifest['splits']['train']['tokens'])")
    processes = [subprocess.Popen([sys.executable, "-c", script, str(text), str(tmp_path / "tok"),
                                   str(tmp_path / "data")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
    results = [process.communicate(timeout=120) for process in processes]
    assert [process.returncode for process in processes] == [0, 0], [err for _, err in results]
    assert results[0][0] == results[1][0] == f"{PreparedCorpus.open(tmp_path / 'data').train.tokens.__len__()}\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a.txt", "data", "tok"]


def spelled_documents(split: PreparedSplit, tokenizer: Tokenizer) -> list[list[str]]:
    """Each document's words: the vocabulary's, and each rare one as the corpus spelled it."""
    words = SpelledWords(split, tokenizer.id_of("unk"))
    spellings = {index: word for word, index in tokenizer.backend.get_vocab().items()}
    documents = []
    for document in range(len(split)):
        _, start, stop = split._token_range(document)
        number = int(np.searchsorted(split.document_starts, document, side="right")) - 1  # its part
        first = start + int(words.part_starts[number])  # its place in the split's stream
        codes = words[np.arange(first, first + stop - start)]
        documents.append([spellings[int(c)] if c >= 0 else words.spelling(-1 - int(c)) for c in codes])
    return documents


def test_a_word_vocabulary_opens_each_document_and_keeps_every_rare_spelling_through_cuts_and_joins(tmp_path):
    """The biLM reads every word's characters: <S> opens a document, and a word mapped to <UNK> keeps its spelling
    whether its document was held out whole, cut in two, sharded or joined."""
    texts = [p for p in synthetic_text(60, seed=4).split("\n\n") if p.strip()]
    words = train_words(texts, vocab_size=12)
    expected = sorted(["<S>", *split_words(text)] for text in texts)
    big = write(tmp_path / "big.txt", "\n\n".join(texts))
    whole = prepare_corpus([big], words, tmp_path / "whole", options=QUIET)
    shards = [prepare_corpus([big], words, tmp_path / f"shard-{i}", options=PrepareOptions(progress=False,
                                                                                              shard=(i, 3)))
              for i in range(3)]
    joined = join_prepared([shard.path for shard in shards], tmp_path / "joined")
    for corpus in (whole, joined):
        found = spelled_documents(corpus.train, words) + spelled_documents(corpus.validation, words)
        assert sorted(found) == expected
        assert corpus.manifest["opener_id"] == words.bos_id
    one = write(tmp_path / "one.txt", " ".join(texts[:5]))  # one document: its tail cut off for validation
    cut = prepare_corpus([one], words, tmp_path / "cut", options=QUIET)
    halves = spelled_documents(cut.train, words)[0] + spelled_documents(cut.validation, words)[0]
    assert halves == ["<S>", *split_words(" ".join(texts[:5]))]
    assert len(cut.train.parts[0].unknown) and len(cut.validation.parts[0].unknown)


def test_a_prepare_worker_imports_neither_pytorch_nor_the_command_that_started_it():
    """A spawned worker imports the encoding's module and the parent's main module: neither may pull in PyTorch
    (240 MB a worker)."""
    import subprocess
    import sys
    from multiprocessing import spawn

    code = "import sys, plm.data.encoded, plm.data.workers; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
    main = sys.modules["__main__"]
    before = (main.__spec__, getattr(main, "__file__", None))
    with workers_module._main_module_hidden():
        prepared_for_a_worker = spawn.get_preparation_data("worker")
    assert not {"init_main_from_name", "init_main_from_path"} & set(prepared_for_a_worker)
    assert (main.__spec__, getattr(main, "__file__", None)) == before


def test_a_vocabulary_of_65537_tokens_needs_uint32_for_its_last_id(tmp_path):
    """2**16 ids (0 to 65,535) fit uint16; one more, id 65,536, does not. Guards against an off-by-one that stores
    a vocabulary of 65,537 as uint16, where its last id wraps or overflows: the ids read back are those written."""
    size = 2**16 + 1
    words = {f"w{i}": i for i in range(size)}
    backend = tokenizers.Tokenizer(models.WordLevel(words, unk_token="w0"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    written = [65_536, 3, 65_535]
    text = write(tmp_path / "ids.txt", " ".join(f"w{i}" for i in written))
    corpus = prepare_corpus([text], Tokenizer(backend, {}), tmp_path / "data", [text], QUIET)
    assert np.iinfo(corpus.train.tokens.dtype).max >= size - 1
    assert corpus.train.document_tokens(0).tolist() == written


def test_the_tokenizer_fingerprint_tells_apart_the_same_tokens_under_other_ids():
    """A prepared corpus is reused only with the tokenizer that wrote its ids: the same tokens numbered otherwise
    write other ids. Guards against a fingerprint of the token strings alone."""
    from plm.data.prepared import tokenizer_fingerprint

    def word_level(vocabulary: dict[str, int]) -> Tokenizer:
        backend = tokenizers.Tokenizer(models.WordLevel(vocabulary, unk_token="[UNK]"))
        backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        return Tokenizer(backend, {"unk": "[UNK]"})

    first = word_level({"[UNK]": 0, "cat": 1, "dog": 2})
    swapped = word_level({"[UNK]": 0, "cat": 2, "dog": 1})
    assert first.encode("cat dog") != swapped.encode("cat dog")  # the premise: other ids for one text
    assert tokenizer_fingerprint(first) != tokenizer_fingerprint(swapped)
    assert tokenizer_fingerprint(first) == tokenizer_fingerprint(word_level({"dog": 2, "[UNK]": 0, "cat": 1}))


def test_a_corpus_of_another_tokenizer_in_out_is_refused_not_reused_and_overwrite_prepares_it_anew(tmp_path, tokenizer):
    """Guards the reuse check: the same inputs prepared with another tokenizer are not "this very corpus"."""
    text = write(tmp_path / "a.txt", synthetic_text(20))
    prepare_corpus([text], tokenizer, tmp_path / "data", options=QUIET)
    other = Tokenizer.train_bpe(DOCUMENTS * 10, vocab_size=290)
    with pytest.raises(PLMError, match="holds a prepared corpus of other inputs or another tokenizer"):
        prepare_corpus([text], other, tmp_path / "data", options=QUIET)
    replaced = prepare_corpus([text], other, tmp_path / "data", options=QUIET, overwrite=True)
    replaced.check_tokenizer(other)
    assert Tokenizer.load(tmp_path / "data" / "tokenizer").vocab_size == 290


def test_a_corpus_of_an_older_format_version_is_prepared_again_not_reused(tmp_path, tokenizer):
    """Guards the reuse check's version test: an interrupted or old-format corpus is not taken as finished."""
    text = write(tmp_path / "a.txt", synthetic_text(20))
    prepare_corpus([text], tokenizer, tmp_path / "data", options=QUIET)
    manifest = json.loads((tmp_path / "data" / MANIFEST).read_text())
    (tmp_path / "data" / MANIFEST).write_text(json.dumps({**manifest, "version": 99}))
    corpus = prepare_corpus([text], tokenizer, tmp_path / "data", options=QUIET, overwrite=True)
    assert json.loads((tmp_path / "data" / MANIFEST).read_text())["version"] == manifest["version"]
    fresh = prepare_corpus([text], tokenizer, tmp_path / "fresh", options=QUIET)
    assert documents_of(corpus, "train") == documents_of(fresh, "train")


def test_a_rare_word_that_opens_a_joined_part_is_spelled_from_its_own_part(tmp_path):
    """Guards SpelledWords' part lookup (searchsorted side="right"): with side="left" a rare word at the first
    position of a part is looked up in the part before it. Two one-document corpora, each holding out its tail,
    joined: the second validation part starts mid-document, on a word of the text that the vocabulary does not know.
    The oracle is the words of the texts themselves: each validation part is the last words of its document."""
    texts = [" ".join(f"zq{i}x{j}" for j in range(60)) for i in range(2)]  # every word rare
    words = train_words(["the cat sat on the mat"] * 3, vocab_size=12)
    corpora = [prepare_corpus([write(tmp_path / f"{i}.txt", text)], words, tmp_path / f"c{i}", options=QUIET)
               for i, text in enumerate(texts)]
    joined = join_prepared([corpus.path for corpus in corpora], tmp_path / "joined")
    expected: list[str] = []
    for corpus, text in zip(corpora, texts):
        document = ["<S>", *split_words(text), "</S>"]
        expected += document[len(document) - len(corpus.validation.tokens):]  # the held-out tail
    unknown = joined.manifest["unknown_id"]
    stream = SpelledWords(joined.validation, unknown)
    assert len(joined.validation.parts) == 2 and len(stream) == len(expected)
    assert stream[np.array([len(corpora[0].validation.tokens)])][0] < 0  # the second part opens on a rare word
    codes = stream[np.arange(len(stream))]
    assert [stream.spelling(p) for p in range(len(stream)) if codes[p] < 0] == [
        word for p, word in enumerate(expected) if codes[p] < 0]
    assert (codes < 0).sum() == len(expected) - 2  # all but the two </S>
