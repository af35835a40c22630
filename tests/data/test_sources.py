import gzip
import hashlib
import json
import sys
import time
import tracemalloc
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from plm.data.corpus import _paragraphs
from plm.data.sources import corpus_files, input_fingerprint, iter_documents
from plm.errors import PLMError

TEXT = "\ufeffThe first paragraph,\r\non two lines.\r\n\r\n\r\nThe second one.\r\n  \r\nThe third,\nand last."


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def jsonl(*rows: object) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def save_to_disk(directory: Path, texts: list, stream: bool = True, column: str = "text") -> Path:
    """A directory laid out as ``Dataset.save_to_disk`` writes it: state.json, dataset_info.json, Arrow files."""
    directory.mkdir(parents=True)
    table = pa.table({column: texts, "id": list(range(len(texts)))})
    files = []
    for part, rows in enumerate([table.slice(0, 3), table.slice(3)]):
        name = f"data-{part:05d}-of-00002.arrow"
        new = pa.ipc.new_stream if stream else pa.ipc.new_file
        with pa.OSFile(str(directory / name), "wb") as sink, new(sink, table.schema) as writer:
            writer.write_table(rows, max_chunksize=2)
        files.append({"filename": name})
    write(directory / "state.json", json.dumps({"_data_files": files, "_split": None}))
    write(directory / "dataset_info.json", "{}")
    return directory


def documents(path: Path | str, text_field: str = "text") -> list[tuple[str, str]]:
    return [(doc.name, doc.text) for doc in iter_documents(path, text_field)]


def refusal(path: Path | str, text_field: str = "text") -> str:
    with pytest.raises(PLMError) as error:
        for _ in iter_documents(path, text_field):
            pass
    return str(error.value)


def test_plain_text_gives_its_paragraphs_named_by_their_first_line(tmp_path):
    path = write(tmp_path / "book.txt", TEXT)
    assert documents(path) == [
        (f"{path}:1", "The first paragraph,\non two lines."),
        (f"{path}:5", "The second one."),
        (f"{path}:7", "The third,\nand last."),
    ]
    assert list(iter_documents(path)) == list(_paragraphs(path))  # as read_corpus reads a text file
    assert documents(write(tmp_path / "notes", "no suffix\n\nat all")) == [
        (f"{tmp_path / 'notes'}:1", "no suffix"), (f"{tmp_path / 'notes'}:3", "at all")]


def test_compressed_text_reads_as_the_plain_file(tmp_path):
    zstd = zstandard.ZstdCompressor()
    data = TEXT.encode()
    for path in [write(tmp_path / "book.txt.gz", gzip.compress(data)),
                 write(tmp_path / "book.txt.zst", zstd.compress(data)),
                 write(tmp_path / "frames.txt.zst", zstd.compress(data[:40]) + zstd.compress(data[40:]))]:
        assert [doc.text for doc in iter_documents(path)] == [
            "The first paragraph,\non two lines.", "The second one.", "The third,\nand last."]
        assert next(iter_documents(path)).name == f"{path}:1"


def test_jsonl_gives_a_field_of_each_line_plain_or_compressed(tmp_path):
    text = jsonl({"body": "first", "id": 1}, {"body": "  ", "id": 2}) + "\n" + jsonl({"body": "third\nline"})
    for path in [write(tmp_path / "rows.jsonl", "\ufeff" + text.replace("\n", "\r\n")),
                 write(tmp_path / "rows.jsonl.gz", gzip.compress(text.encode())),
                 write(tmp_path / "rows.ndjson.zst", zstandard.ZstdCompressor().compress(text.encode()))]:
        assert documents(path, text_field="body") == [(f"{path}:1", "first"), (f"{path}:4", "third\nline")]


def test_parquet_gives_a_column_batch_by_batch_and_skips_empty_rows(tmp_path):
    texts = [f"row {i}" if i % 1000 else None for i in range(1, 2501)]
    texts[1] = " "
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"id": range(2500), "content": texts}), path, row_group_size=700)
    read = documents(path, text_field="content")
    assert len(read) == 2500 - 3 and read[0] == (f"{path}:row 1", "row 1")
    assert read[-1] == (f"{path}:row 2500", "row 2500") and (f"{path}:row 1001", "row 1001") in read


@pytest.mark.parametrize("stream", [True, False], ids=["ipc-stream", "ipc-file"])
def test_a_datasets_directory_is_read_with_pyarrow_alone(tmp_path, stream):
    directory = save_to_disk(tmp_path / "wiki", ["a", "b", None, "", "e", "f"], stream=stream)
    assert documents(directory) == [(f"{directory}:row 1", "a"), (f"{directory}:row 2", "b"),
                                    (f"{directory}:row 5", "e"), (f"{directory}:row 6", "f")]


def test_a_dataset_dict_gives_its_train_split_or_else_every_split(tmp_path):
    both = tmp_path / "both"
    save_to_disk(both / "train", ["t1", "t2", "t3", "t4"])
    save_to_disk(both / "test", ["held out", "x", "y", "z"])
    write(both / "dataset_dict.json", json.dumps({"splits": ["test", "train"]}))
    assert [doc.text for doc in iter_documents(both)] == ["t1", "t2", "t3", "t4"]
    assert next(iter_documents(both)).name == f"{both / 'train'}:row 1"
    other = tmp_path / "other"
    save_to_disk(other / "b", ["b1", "b2", "b3", "b4"])
    save_to_disk(other / "a", ["a1", "a2", "a3", "a4"])
    write(other / "dataset_dict.json", json.dumps({"splits": ["b", "a"]}))
    read = documents(other)
    assert [text for _, text in read] == ["b1", "b2", "b3", "b4", "a1", "a2", "a3", "a4"]
    assert read[4][0] == f"{other / 'a'}:row 1"


def test_corpus_files_expands_globs_and_directories_in_order_and_once(tmp_path):
    for name in ["b.txt", "a.txt", "deep/c.jsonl.gz", "deep/d.parquet", "deep/skip.json", "deep/e.md", "f.csv"]:
        write(tmp_path / "corpus" / name, "x")
    dataset = save_to_disk(tmp_path / "corpus" / "deep" / "hf", ["a", "b", "c", "d"])
    corpus = tmp_path / "corpus"
    assert corpus_files([corpus]) == [corpus / "a.txt", corpus / "b.txt", corpus / "deep/c.jsonl.gz",
                                      corpus / "deep/d.parquet", corpus / "deep/e.md", dataset]
    assert corpus_files([f"{corpus}/b.txt", f"{corpus}/*.txt", f"{corpus}/**/*.md", corpus / "f.csv", dataset]) == [
        corpus / "b.txt", corpus / "a.txt", corpus / "deep/e.md", corpus / "f.csv", dataset]
    parts = [write(tmp_path / "parts" / f"part-{i:02d}.txt", "x") for i in range(30)]
    assert corpus_files([f"{tmp_path}/parts/part-*.txt"]) == corpus_files([tmp_path / "parts"]) == parts
    (tmp_path / "parts" / "part-logs").mkdir()
    assert corpus_files([f"{tmp_path}/parts/part-*"]) == parts  # a directory among the matches gives its files


def test_corpus_files_refuses_what_names_no_file(tmp_path):
    write(tmp_path / "empty" / "notes.csv", "x")
    cases = [([], "no input files given"),
             ([tmp_path / "missing.txt"], f"{tmp_path / 'missing.txt'}: no such file or directory"),
             ([f"{tmp_path}/*.jsonl"], f"{tmp_path}/*.jsonl: no file matches this pattern"),
             ([tmp_path / "empty"], f"{tmp_path / 'empty'}: no corpus file in this directory")]
    for inputs, message in cases:
        with pytest.raises(PLMError, match="^" + message.replace("*", r"\*").replace(".", r"\.")):
            corpus_files(inputs)


def gzip_cut_short(path: Path) -> Path:
    return write(path, gzip.compress(("line of text\n" * 1000).encode())[:-20])


def zstd_cut_short(path: Path) -> Path:
    data = ("".join(f"line {i} of text\n" for i in range(20000))).encode()
    return write(path, zstandard.ZstdCompressor().compress(data)[:-20])


BAD_INPUTS = {
    "truncated .gz": (lambda d: gzip_cut_short(d / "cut.txt.gz"), "{path}: truncated or corrupt gzip file ("),
    "not gzip": (lambda d: write(d / "fake.jsonl.gz", "plain text"), "{path}: truncated or corrupt gzip file ("),
    "corrupt .zst": (lambda d: write(d / "bad.txt.zst", b"\x28\xb5\x2f\xfd" + b"garbage" * 20),
                     "{path}: truncated or corrupt zstd file ("),
    "truncated .zst": (lambda d: zstd_cut_short(d / "cut.txt.zst"), "{path}: truncated or corrupt zstd file ("),
    ".zst cut in a frame's magic": (lambda d: write(d / "cut.txt.zst", zstandard.compress(b"text") + b"\x28\xb5"),
                                   "{path}: truncated or corrupt zstd file ("),
    "not JSON": (lambda d: write(d / "rows.jsonl", jsonl({"text": "a"}) + "{'text': 'b'}\n"),
                 "{path}:2: not valid JSON"),
    "not an object": (lambda d: write(d / "rows.jsonl", jsonl({"text": "a"}, ["b"])),
                      '{path}:2: expected a JSON object {{...}}, got the list ["b"]'),
    "no field": (lambda d: write(d / "rows.jsonl", jsonl({"text": "a"}, {"body": "b", "id": 2})),
                 "{path}:2: no field 'text' (the fields are body, id); choose another text field"),
    "field not a string": (lambda d: write(d / "rows.jsonl", jsonl({"text": 3})),
                           "{path}:1: field 'text' holds the number 3, not a string"),
    "blank texts": (lambda d: write(d / "rows.jsonl", jsonl({"text": ""}, {"text": " "})),
                    "{path}: has no text in field 'text' (2 rows, all blank)"),
    "no column": (lambda d: parquet(d / "rows.parquet", body=["a"]),
                  "{path}: no column 'text' (the columns are body); choose another text field"),
    "column not strings": (lambda d: parquet(d / "rows.parquet", text=[1, 2]),
                           "{path}: column 'text' holds int64, not strings"),
    "not Parquet": (lambda d: write(d / "rows.parquet", "text"), "{path}: not a Parquet file, or a corrupt one ("),
    "dataset without an Arrow file": (lambda d: without(save_to_disk(d / "hf", ["a"] * 4), "data-00001-of-00002.arrow"),
                                      "{path}/data-00001-of-00002.arrow: no such file"),
    "dataset without the column": (lambda d: save_to_disk(d / "hf", ["a", "b", "c", "d"], column="body"),
                                   "{path}: no column 'text' (the columns are body, id)"),
    "empty file": (lambda d: write(d / "empty.txt", ""), "{path}: the file is empty"),
    "blank file": (lambda d: write(d / "blank.txt", "\n  \r\n\n"), "{path}: the file is empty"),
    "empty .gz": (lambda d: write(d / "empty.jsonl.gz", gzip.compress(b"\n")), "{path}: the file is empty"),
    "NUL bytes": (lambda d: write(d / "image.txt", b"text\nmore\n\x89PNG\0\0\0"),
                  "{path}:3: looks like a binary file (it has NUL bytes), not text"),
    "NUL bytes after 64 KiB": (lambda d: write(d / "late.txt", b"text\n" * 20000 + b"\0"),
                               "{path}:20001: looks like a binary file (it has NUL bytes), not text"),
    "control characters": (lambda d: write(d / "data.txt", b"\x01\x02\x03abc" * 100),
                           "{path}: looks like a binary file (50% control characters), not text"),
    "not UTF-8": (lambda d: write(d / "latin1.txt", "fine\n\ncaf\xe9\n".encode("latin-1")),
                  "{path}:3: not valid UTF-8 at byte 9 (0xe9)"),
    "a directory": (lambda d: write(d / "dir" / "a.txt", "x").parent, "{path}: is a directory, not a corpus file"),
    "missing": (lambda d: d / "missing.txt", "{path}: no such file"),
}


def without(directory: Path, name: str) -> Path:
    (directory / name).unlink()
    return directory


def parquet(path: Path, **columns: list) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_a_bad_input_is_refused_with_its_name_and_line(tmp_path, case):
    make, message = BAD_INPUTS[case]
    path = make(tmp_path)
    assert refusal(path).startswith(message.format(path=path))


def test_a_file_that_is_not_utf8_among_a_globs_files_is_named(tmp_path):
    write(tmp_path / "a.txt", "fine\n")
    write(tmp_path / "b.txt", "one\n\ntwo\n\nthr\xe9e\n".encode("latin-1"))
    write(tmp_path / "c.txt", "fine\n")
    files = corpus_files([f"{tmp_path}/*.txt"])
    with pytest.raises(PLMError, match=f"^{tmp_path / 'b.txt'}:5: not valid UTF-8 at byte 13 \\(0xe9\\)$"):
        [doc for path in files for doc in iter_documents(path)]


@pytest.mark.parametrize("module, name, message", [
    ("pyarrow", "rows.parquet", "{path}: reading Parquet needs pyarrow: pip install 'plm[data]'"),
    ("pyarrow", "hf", "{path}: reading a Hugging Face datasets directory needs pyarrow: pip install 'plm[data]'"),
    ("zstandard", "rows.txt.zst", "{path}: reading .zst files needs zstandard: pip install 'plm[data]'"),
])
def test_a_format_whose_extra_is_missing_names_the_extra(tmp_path, monkeypatch, module, name, message):
    path = save_to_disk(tmp_path / name, ["a"] * 4) if name == "hf" else write(tmp_path / name, "x")
    for loaded in [key for key in sys.modules if key == module or key.startswith(module + ".")]:
        monkeypatch.setitem(sys.modules, loaded, None)
    monkeypatch.setitem(sys.modules, module, None)
    assert refusal(path) == message.format(path=path)


def test_the_fingerprint_hashes_a_file_or_a_directory_by_contents(tmp_path):
    path = write(tmp_path / "book.txt", TEXT)
    assert input_fingerprint(path) == {"path": str(path.resolve()), "bytes": len(TEXT.encode()),
                                       "sha256": hashlib.sha256(TEXT.encode()).hexdigest()}
    directory = save_to_disk(tmp_path / "hf", ["a", "b", "c", "d"])
    first = input_fingerprint(directory)
    assert first["bytes"] == sum(file.stat().st_size for file in directory.iterdir())
    write(directory / "dataset_info.json", "{ }")
    assert input_fingerprint(directory)["sha256"] != first["sha256"]
    (directory / "dataset_info.json").rename(directory / "dataset_info.jsoN")
    assert input_fingerprint(directory)["sha256"] not in (first["sha256"], input_fingerprint(path)["sha256"])


def test_a_large_file_streams_in_bounded_memory(tmp_path):
    paragraph = ("word " * 199 + "word\n") * 4 + "\n"
    count = 20_000_000 // len(paragraph)
    path = tmp_path / "large.txt"
    with path.open("w") as file:
        for _ in range(count // 100):
            file.write(paragraph * 100)
    start = time.perf_counter()
    tracemalloc.start()
    try:
        read = sum(1 for _ in iter_documents(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert read == count // 100 * 100 and path.stat().st_size > 19_000_000
    assert peak < 4_000_000, f"peak {peak / 1e6:.1f} MB"
    assert time.perf_counter() - start < 3


def test_a_directorys_fingerprint_holds_its_files_names_and_sizes(tmp_path):
    """Two directories with the same bytes in the same order are other inputs when a file is renamed or a byte
    moves from one file to the next. Guards against a hash over the contents alone (the rename in the test above is
    compared with a hash taken before another change)."""
    def directory(name: str, files: dict[str, str]) -> Path:
        for file, text in files.items():
            write(tmp_path / name / file, text)
        return tmp_path / name

    first = input_fingerprint(directory("a", {"data-0.arrow": "abc", "data-1.arrow": "def"}))["sha256"]
    renamed = input_fingerprint(directory("b", {"data-0.arrow": "abc", "data-2.arrow": "def"}))["sha256"]
    moved = input_fingerprint(directory("c", {"data-0.arrow": "abcd", "data-1.arrow": "ef"}))["sha256"]
    again = input_fingerprint(directory("d", {"data-0.arrow": "abc", "data-1.arrow": "def"}))["sha256"]
    assert len({first, renamed, moved}) == 3 and again == first


def test_a_byte_ranges_fingerprint_is_the_sha256_of_all_its_bytes(tmp_path):
    """A shard's range of a file longer than one read: its hash is hashlib's over exactly those bytes. Guards against
    a range hashed up to its first read, which a change past it would not change."""
    data = bytes(range(256)) * 4_000  # 1,024,000 bytes, several reads
    path = write(tmp_path / "big.txt", data)
    start, stop = 7, len(data) - 5
    assert input_fingerprint(path, (start, stop)) == {
        "path": str(path.resolve()), "range": [start, stop], "bytes": stop - start,
        "sha256": hashlib.sha256(data[start:stop]).hexdigest()}
