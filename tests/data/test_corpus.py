import os
from pathlib import Path

import pytest

from plm.cache import cache_dir
from plm.data.corpus import Corpus, Document, default_corpus, read_corpus, read_text
from plm.errors import PLMError
from plm.storage.atomic_files import atomic_open


@pytest.fixture(scope="module")
def default_cache(tmp_path_factory) -> Path:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PLM_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield cache_dir()


@pytest.fixture(scope="module")
def corpus(default_cache) -> Corpus:
    return default_corpus()


def test_the_default_corpus_is_python_documentation(corpus):
    names = [doc.name for doc in corpus.train + corpus.validation]
    assert len(names) == len(set(names)) > 500
    assert sum(name.startswith("topic:") for name in names) == 79
    assert {"module:json", "module:xml.etree.ElementTree", "module:email.mime.text"} <= set(names)
    assert not [name for name in names if ".test" in name or "idle_test" in name or name == "module:test"]
    json = next(doc for doc in corpus.train + corpus.validation if doc.name == "module:json")
    assert json.text.startswith("JSON (JavaScript Object Notation) <https://json.org> is a subset")
    assert "\n\nSerialize ``obj`` to a JSON formatted ``str``." in json.text
    assert sum(len(doc.text) for doc in corpus.train) > 1_500_000  # the running Python's: 1.8M under 3.12


def test_the_default_corpus_holds_out_about_five_percent_of_its_documents(corpus):
    count = len(corpus.train) + len(corpus.validation)
    assert round(0.05 * count) == len(corpus.validation)
    assert not {doc.name for doc in corpus.train} & {doc.name for doc in corpus.validation}


def test_the_default_corpus_is_cached_and_rebuilt_identically(corpus, default_cache):
    (cached,) = default_cache.glob("default-corpus-*.jsonl")
    assert default_corpus() == corpus
    cached.unlink()
    assert default_corpus() == corpus
    assert cached.exists()


def test_read_text_names_the_file_and_what_is_wrong(tmp_path):
    (tmp_path / "ok.txt").write_bytes(b"\xef\xbb\xbfline one\r\nline two\r\n")
    assert read_text(tmp_path / "ok.txt") == "line one\nline two\n"
    (tmp_path / "bad.txt").write_bytes("na\u00efve\n".encode() + b"caf\xff\n")
    with pytest.raises(PLMError, match=r"^.*bad.txt: not valid UTF-8 at byte 10 \(0xff\)$"):
        read_text(tmp_path / "bad.txt")
    (tmp_path / "blank.txt").write_text(" \n\n\t\n")
    with pytest.raises(PLMError, match="blank.txt: the file is empty"):
        read_text(tmp_path / "blank.txt")
    with pytest.raises(PLMError, match="missing.txt: no such file"):
        read_text(tmp_path / "missing.txt")
    with pytest.raises(PLMError, match="is a directory"):
        read_text(tmp_path)


def test_text_with_some_control_characters_is_still_text(tmp_path):
    # Form feeds between sections (Python sources, RFCs), tabs, a coloured log line, accents.
    text = "Section 1\tIntro\n\x0c\nSection 2\n\x1b[31mERROR\x1b[0m caf\u00e9 \u00fcber\n" * 50
    (tmp_path / "log.txt").write_text(text, encoding="utf-8")
    assert read_text(tmp_path / "log.txt") == text
    (tmp_path / "data.bin").write_bytes(b"text, then a NUL\x00 and more text\n")
    with pytest.raises(PLMError, match=r"data.bin: looks like a binary file \(it has NUL bytes at byte 16\), not text"):
        read_text(tmp_path / "data.bin")


def test_documents_are_paragraphs_named_by_file_and_line(tmp_path):
    (tmp_path / "a.txt").write_text("First document,\nline two.\n\n\n  Second document.\n \nThird.")
    (tmp_path / "b.txt").write_text("Held out.\n")
    corpus = read_corpus([tmp_path / "a.txt"], validation_paths=[tmp_path / "b.txt"])
    assert corpus.train == (
        Document(f"{tmp_path / 'a.txt'}:1", "First document,\nline two."),
        Document(f"{tmp_path / 'a.txt'}:5", "  Second document."),
        Document(f"{tmp_path / 'a.txt'}:7", "Third."),
    )
    assert corpus.validation == (Document(f"{tmp_path / 'b.txt'}:1", "Held out."),)


def test_without_validation_files_whole_documents_are_held_out(tmp_path):
    path = tmp_path / "many.txt"
    path.write_text("\n\n".join(f"Paragraph number {i}." for i in range(100)))
    corpus = read_corpus([path], validation_fraction=0.1)
    assert len(corpus.validation) == 10 and len(corpus.train) == 90
    assert read_corpus([path], validation_fraction=0.1) == corpus


def test_a_text_with_few_documents_holds_out_its_last_lines(tmp_path):
    path = tmp_path / "one.txt"
    path.write_text("".join(f"line {i:02}\n" for i in range(40)))
    corpus = read_corpus([path], validation_fraction=0.05)
    (train,), (validation,) = corpus.train, corpus.validation
    assert train.text.endswith("line 37\n")
    assert validation.text == "line 38\nline 39"


def test_read_corpus_rejects_what_it_cannot_use(tmp_path):
    with pytest.raises(PLMError, match="no training files"):
        read_corpus([])
    (tmp_path / "a.txt").write_text("text")
    with pytest.raises(PLMError, match="between 0 and 1, got 1.5"):
        read_corpus([tmp_path / "a.txt"], validation_fraction=1.5)
    with pytest.raises(PLMError, match="too little text"):
        read_corpus([tmp_path / "a.txt"], validation_fraction=0.9)


def test_atomic_open_keeps_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_open(path) as file:
        file.write(b"half")
        raise RuntimeError("interrupted")
    assert path.read_bytes() == b"old"
    with atomic_open(path) as file:
        file.write(b"new")
    assert path.read_bytes() == b"new"
    assert os.listdir(tmp_path) == ["data.bin"]


def test_atomic_files_and_checkpoints_get_the_modes_plain_open_and_mkdir_give(tmp_path):
    from plm.models import from_preset
    from plm.storage.checkpoint import save_best

    previous = os.umask(0o027)
    try:
        with open(tmp_path / "plain.txt", "w"):
            pass
        os.mkdir(tmp_path / "plain-dir")
        with atomic_open(tmp_path / "atomic.txt") as file:
            file.write(b"x")
        save_best(tmp_path / "run", from_preset("gpt2-micro"))
    finally:
        os.umask(previous)
    def mode(path):
        return path.stat().st_mode & 0o777

    assert mode(tmp_path / "atomic.txt") == mode(tmp_path / "plain.txt") == 0o640
    assert mode(tmp_path / "run" / "best") == mode(tmp_path / "plain-dir") == 0o750
    assert mode(tmp_path / "run" / "best" / "model.safetensors") == 0o640


def test_the_held_out_documents_are_those_of_smallest_crc32_in_any_order(tmp_path):
    """Whole documents are held out by a hash of their text, not by their place: the first 10% of a file is often
    one topic, and reordering the files must not move documents between train and validation."""
    import random
    import zlib

    paragraphs = [f"Paragraph {i} says {'something ' * (i % 7)}here." for i in range(100)]
    smallest = sorted(paragraphs, key=lambda text: zlib.crc32(text.encode()))[:10]
    shuffled = paragraphs[:]
    random.Random(0).shuffle(shuffled)
    for order in (paragraphs, shuffled):
        path = tmp_path / "many.txt"
        path.write_text("\n\n".join(order))
        corpus = read_corpus([path], validation_fraction=0.1)
        assert sorted(doc.text for doc in corpus.validation) == sorted(smallest)
        assert not {doc.text for doc in corpus.validation} & {doc.text for doc in corpus.train}
