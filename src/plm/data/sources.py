"""The documents of a user's corpus, streamed from the formats corpora are kept in.

A corpus is given as files, glob patterns and directories ([`corpus_files`][plm.data.sources.corpus_files]); each input
is read one document at a time ([`iter_documents`][plm.data.sources.iter_documents]), so that memory does not grow with
its size:

- plain text (``.txt``, ``.text``, ``.md`` or any other name): paragraphs separated by blank lines,
  the convention of BERT's pre-training data, each named ``file:line``;
- JSON lines (``.jsonl``, ``.ndjson``): one object per line, the text in one of its fields;
- Parquet (``.parquet``): the text in one of its columns, read a batch of rows at a time;
- a Hugging Face ``datasets`` directory written by ``save_to_disk``: its Arrow files, read with
  pyarrow alone, a record batch at a time.

Files of one sentence a line (parallel text: [`plm.data.sentence_pairs`][plm.data.sentence_pairs]) are read a line at
a time
([`iter_lines`][plm.data.sources.iter_lines]). Text and JSON lines may be compressed with gzip (``.gz``) or Zstandard
(``.zst``). Parquet, datasets directories and ``.zst`` need the ``data`` extra (pyarrow, zstandard), imported only when
used.
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import itertools
import json
import os
import zlib
from collections.abc import Generator, Iterable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import IO, Any

from plm.config import json_type
from plm.data.corpus import _BINARY_FRACTION, _BINARY_SAMPLE, _CONTROL_CHARACTERS, Document, json_object
from plm.errors import PLMError, reading

_TEXT_SUFFIXES = (".txt", ".text", ".md")
_JSONL_SUFFIXES = (".jsonl", ".ndjson")
_COMPRESSIONS = (".gz", ".zst")
_CORPUS_SUFFIXES = (
    *(base + compression for base in _TEXT_SUFFIXES + _JSONL_SUFFIXES for compression in ("", *_COMPRESSIONS)),
    ".parquet",
)
_GLOB_CHARACTERS = frozenset("*?[")
_CHUNK = 1 << 18  # bytes read (after decompression) at a time
_ROWS = 1024  # rows of a Parquet or Arrow batch turned into Python strings at a time
_BOM = b"\xef\xbb\xbf"
_DATA_EXTRA = "pip install 'plm[data]'"


def corpus_files(inputs: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The corpus files that files, glob patterns and directories name, in a fixed order and each once.

    A file is taken as it is. A directory gives its corpus files, searched recursively in sorted order:
    those whose name ends with a corpus suffix (``.txt``, ``.text``, ``.md``, ``.jsonl``, ``.ndjson``,
    each also with ``.gz`` or ``.zst``, and ``.parquet``), and each Hugging Face ``datasets`` directory
    under it, as one input. A glob pattern (with ``*``, ``?`` or ``[``; ``**`` crosses directories)
    gives its matches in sorted order, a directory among them giving its corpus files. A ``datasets``
    directory given by name or matched is one input. An input that comes up again (through another
    pattern or directory) is kept where it came first.

    Args:
        inputs: files, glob patterns and directories.

    Returns:
        The files and ``datasets`` directories to read, in order.

    Raises:
        PLMError: no input, a path that does not exist, a pattern that matches nothing, or a directory
            without a corpus file.
    """
    if not inputs:
        raise PLMError("no input files given")
    files: list[Path] = []
    seen: set[Path] = set()
    for given in inputs:
        for path in _expand(given):
            if (resolved := path.resolve()) not in seen:
                seen.add(resolved)
                files.append(path)
    return files


def _expand(given: str | os.PathLike[str]) -> list[Path]:
    """One input's files: itself, a pattern's matches, or a directory's corpus files."""
    path = Path(given)
    if path.is_dir() and not _is_datasets_directory(path):
        files = _directory_files(path)
        if not files:
            raise PLMError(f"{given}: no corpus file in this directory (the suffixes read are "
                           f"{', '.join(_CORPUS_SUFFIXES)}, or a Hugging Face datasets directory)")
        return files
    if path.exists():
        return [path]
    if not _GLOB_CHARACTERS & set(os.fspath(given)):
        raise PLMError(f"{given}: no such file or directory")
    files = []
    for match in map(Path, sorted(glob.glob(os.fspath(given), recursive=True))):
        is_directory = match.is_dir() and not _is_datasets_directory(match)
        files += _directory_files(match) if is_directory else [match]
    if not files:
        raise PLMError(f"{given}: no file matches this pattern")
    return files


def _directory_files(directory: Path) -> list[Path]:
    """The corpus files and ``datasets`` directories under ``directory``, sorted."""
    found: list[Path] = []
    for root, dirs, names in os.walk(directory):
        datasets = [name for name in dirs if _is_datasets_directory(Path(root, name))]
        found += [Path(root, name) for name in datasets]
        dirs[:] = sorted(name for name in dirs if name not in datasets)
        found += [Path(root, name) for name in names if name.lower().endswith(_CORPUS_SUFFIXES)]
    return sorted(found)


def _is_datasets_directory(path: Path) -> bool:
    """A directory written by ``Dataset.save_to_disk`` or ``DatasetDict.save_to_disk``."""
    dataset = (path / "state.json").is_file() and (path / "dataset_info.json").is_file()
    return dataset or (path / "dataset_dict.json").is_file()


def iter_documents(
    path: str | os.PathLike[str], text_field: str = "text", byte_range: tuple[int, int] | None = None
) -> Iterator[Document]:
    """The documents of one input, read as they are needed, so that memory does not grow with the input.

    Plain text gives its paragraphs (blocks of lines separated by blank lines), each named
    ``file:first line``; a UTF-8 BOM and Windows line ends are removed. JSON lines give the field
    ``text_field`` of each line's object, named ``file:line``. Parquet files and ``datasets`` directories
    give the column ``text_field`` of each row, named ``file:row n`` (rows counted from 1); of a
    ``DatasetDict`` the ``train`` split is read when there is one, else every split, each named by its
    directory. Blank texts (and empty rows) are skipped.

    Args:
        path: a file or a Hugging Face ``datasets`` directory, as [`corpus_files`][plm.data.sources.corpus_files] gives
            them.
        text_field: the JSON field or the column that holds the text.
        byte_range: only the documents that start in these bytes of an uncompressed text or JSON lines file,
            whose bounds are document starts (see [`shard_inputs`][plm.data.sources.shard_inputs]); None: the whole
            input.

    Yields:
        The documents, in the input's order.

    Raises:
        PLMError: an input that is missing or unreadable, binary, not UTF-8, a truncated or corrupt gzip or
            Zstandard file, a line that is not a JSON object, a field or column that is missing or does not
            hold strings, an input without text, or a format whose package (the ``data`` extra) is missing.
    """
    name = Path(path).name.lower()
    if byte_range is not None and not splittable(Path(path)):
        raise PLMError(f"{path}: only an uncompressed text or JSON lines file is read by byte range")
    if Path(path).is_dir():
        if not _is_datasets_directory(Path(path)):
            raise PLMError(f"{path}: is a directory, not a corpus file or a Hugging Face datasets directory "
                           "(which holds state.json or dataset_dict.json)")
        yield from _datasets_documents(path, text_field)
    elif name.endswith(".parquet"):
        yield from _parquet_documents(path, text_field)
    elif name.removesuffix(".gz").removesuffix(".zst").endswith(_JSONL_SUFFIXES):
        yield from _jsonl_documents(path, text_field, byte_range)
    else:
        yield from _paragraphs(path, byte_range)


def iter_lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, str]]:
    r"""The lines of a text file (also ``.gz``, ``.zst``) with their numbers, read as they are needed.

    A UTF-8 BOM, the line ends and a final ``\r`` are removed; a final line end makes no empty last line.

    Args:
        path: the file.

    Yields:
        Each line's number (from 1) and text.

    Raises:
        PLMError: a file that is missing or unreadable, binary, not UTF-8, a truncated or corrupt gzip or
            Zstandard file, or an empty file.
    """
    found = False
    for number, line in _text_lines(path, _checked_text(path, _chunks(path))):
        found = True
        yield number, line
    if not found:
        raise PLMError(f"{path}: the file is empty")


def splittable(path: Path) -> bool:
    """Whether ``path`` can be read from a byte offset: an uncompressed text or JSON lines file.

    Args:
        path: a corpus input.

    Returns:
        True for a plain text or JSON lines file.
    """
    name = path.name.lower()
    return path.is_file() and not name.endswith((*_COMPRESSIONS, ".parquet"))


def document_start(path: Path, offset: int) -> int:
    """The byte offset of a document that starts at or after ``offset`` in a text or JSON lines file.

    In JSON lines, the first line that starts there; in plain text, the first paragraph that starts after
    a blank line from there. Every reader of the file finds the same one, so that cuts at these offsets
    give each document to exactly one byte range.

    Args:
        path: an uncompressed text or JSON lines file.
        offset: where to look from.

    Returns:
        The offset, or the file's size when no document starts after ``offset``.
    """
    if offset <= 0:
        return 0
    jsonl = path.name.lower().endswith(_JSONL_SUFFIXES)
    with reading(path), open(path, "rb") as file:
        file.seek(offset - 1)
        file.readline()  # the rest of the line that holds byte offset - 1
        position, blank = file.tell(), False
        while line := file.readline():
            if jsonl or (blank and line.strip()):
                return position
            blank = blank or not line.strip()
            position += len(line)
        return position


def shard_inputs(files: Sequence[Path], index: int, count: int) -> list[tuple[Path, tuple[int, int] | None]]:
    """The share ``index`` (from 0) of ``count`` disjoint shares of the inputs, about equal in bytes.

    The inputs are laid end to end and cut into ``count`` equal byte ranges. An uncompressed text or JSON
    lines file is cut at the document starts nearest after the cuts
    ([`document_start`][plm.data.sources.document_start]), so that one large file is prepared by several machines; any
    other input goes whole to the share its first byte falls in. Each document is in exactly one share.

    Args:
        files: the inputs, as [`corpus_files`][plm.data.sources.corpus_files] gives them.
        index: the share, from 0 to ``count`` - 1.
        count: the number of shares.

    Returns:
        Each input of the share, with the byte range to read (None: all of it).

    Raises:
        PLMError: an index outside 0 to ``count`` - 1.
    """
    if not 0 <= index < count:
        raise PLMError(f"shard {index} of {count}: the shard must be from 0 to {count - 1}")
    sizes = [input_size(path) for path in files]
    total = max(1, sum(sizes))
    share: list[tuple[Path, tuple[int, int] | None]] = []
    begin, end = index * total // count, (index + 1) * total // count
    start = 0
    for path, size in zip(files, sizes):
        if splittable(path):
            first = document_start(path, min(max(begin - start, 0), size))
            last = size if index == count - 1 else document_start(path, min(max(end - start, 0), size))
            if first < last:
                share.append((path, None if (first, last) == (0, size) else (first, last)))
        elif begin <= start < end or (index == count - 1 and start >= end):
            share.append((path, None))
        start += size
    return share


def input_size(path: Path) -> int:
    """The bytes of an input: a file's size, or the sum of a directory's files.

    Args:
        path: a file or a ``datasets`` directory.

    Returns:
        The size.
    """
    if path.is_dir():
        return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())
    return path.stat().st_size


def _paragraphs(path: str | os.PathLike[str], byte_range: tuple[int, int] | None = None) -> Iterator[Document]:
    """The blank-line-separated blocks of a text file, each named ``file:first line number``."""
    lines: list[str] = []
    number = found = 0
    first_line, chunks = _range_chunks(path, byte_range)
    for number, line in _text_lines(path, _checked_text(path, chunks), first_line, (byte_range or (0, 0))[0]):
        if line.strip():
            lines.append(line)
        elif lines:
            found += 1
            yield Document(f"{path}:{number - len(lines)}", "\n".join(lines))
            lines = []
    if lines:
        found += 1
        yield Document(f"{path}:{number + 1 - len(lines)}", "\n".join(lines))
    if not found and byte_range is None:
        raise PLMError(f"{path}: the file is empty")


def _range_chunks(path: str | os.PathLike[str], byte_range: tuple[int, int] | None) -> tuple[int, Iterator[bytes]]:
    """The number of the first line of ``byte_range`` and its bytes (the whole file's for None)."""
    if byte_range is None:
        return 1, _chunks(path)
    start, stop = byte_range
    with reading(path), open(path, "rb") as file:
        lines_before = 0
        while file.tell() < start:
            lines_before += file.read(min(_CHUNK, start - file.tell())).count(b"\n")

    def chunks() -> Iterator[bytes]:
        with reading(path), open(path, "rb") as file:
            file.seek(start)
            while file.tell() < stop and (chunk := file.read(min(_CHUNK, stop - file.tell()))):
                yield chunk

    return lines_before + 1, chunks()


def _jsonl_documents(path: str | os.PathLike[str], field: str,
                     byte_range: tuple[int, int] | None = None) -> Iterator[Document]:
    """The text field of each line's object, named ``file:line``; blank lines are skipped."""
    rows = texts = 0
    first_line, chunks = _range_chunks(path, byte_range)
    for number, line in _text_lines(path, chunks, first_line, (byte_range or (0, 0))[0]):
        if not line.strip():
            continue
        row = json_object(line, path, number)
        rows += 1
        if field not in row:
            fields = ", ".join(row) if row else "the object has none"
            raise PLMError(f"{path}:{number}: no field {field!r} (the fields are {fields}); choose another text field")
        text = row[field]
        if not isinstance(text, str):
            raise PLMError(f"{path}:{number}: field {field!r} holds {json_type(text)}, not a string")
        if text.strip():
            texts += 1
            yield Document(f"{path}:{number}", text)
    if byte_range is None:
        _check_found(path, rows, texts, f"field {field!r}")


def _check_found(path: str | os.PathLike[str], rows: int, texts: int, where: str, what: str = "the file") -> None:
    """Refuse an input without rows, or whose rows hold no text."""
    if not rows:
        raise PLMError(f"{path}: {what} is empty")
    if not texts:
        raise PLMError(f"{path}: has no text in {where} ({rows} rows, all blank)")


def _chunks(path: str | os.PathLike[str]) -> Iterator[bytes]:
    """The bytes of a file, decompressed when its name ends with ``.gz`` or ``.zst``, a chunk at a time."""
    name = Path(path).name.lower()
    with reading(path), open(path, "rb") as file:
        if name.endswith(".gz"):
            yield from _gzip_chunks(path, file)
        elif name.endswith(".zst"):
            yield from _zstd_chunks(path, file)
        else:
            while chunk := file.read(_CHUNK):
                yield chunk


def _gzip_chunks(path: str | os.PathLike[str], file: IO[bytes]) -> Iterator[bytes]:
    with gzip.GzipFile(fileobj=file) as stream:
        try:
            while chunk := stream.read(_CHUNK):
                yield chunk
        except (EOFError, gzip.BadGzipFile, zlib.error) as error:
            raise PLMError(f"{path}: truncated or corrupt gzip file ({error})") from None


def _zstd_chunks(path: str | os.PathLike[str], file: IO[bytes]) -> Iterator[bytes]:
    try:
        import zstandard
    except ImportError:
        raise PLMError(f"{path}: reading .zst files needs zstandard: {_DATA_EXTRA}") from None
    if _zstd_cut_short(file):
        raise PLMError(f"{path}: truncated or corrupt zstd file (it ends inside a frame)")
    file.seek(0)
    try:
        with zstandard.ZstdDecompressor().stream_reader(file, read_across_frames=True) as stream:
            while chunk := stream.read(_CHUNK):
                yield chunk
    except zstandard.ZstdError as error:
        raise PLMError(f"{path}: truncated or corrupt zstd file ({error})") from None


def _zstd_cut_short(file: IO[bytes]) -> bool:
    """Whether a Zstandard file ends inside a frame, which zstandard's readers pass over in silence.

    The frames are walked by their headers and their blocks' headers alone (RFC 8878, section 3.1):
    a frame whose last block or checksum runs past the end of the file was cut short.
    """
    end = os.fstat(file.fileno()).st_size
    position = 0
    while position < end:
        file.seek(position)
        head = file.read(8)
        magic = int.from_bytes(head[:4], "little")
        if len(head) < 4 or magic & 0xFFFFFFF0 == 0x184D2A50 and len(head) < 8:
            return True
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # a skippable frame: its size, then its bytes
            position += 8 + int.from_bytes(head[4:8], "little")
            continue
        if magic != 0xFD2FB528:
            return False  # not a frame: the decompressor says what is wrong
        if len(head) < 5:
            return True
        descriptor = head[4]
        single_segment, dictionary, content_size = descriptor >> 5 & 1, descriptor & 3, descriptor >> 6
        position += 5 + (1 - single_segment) + (0, 1, 2, 4)[dictionary] + (single_segment, 2, 4, 8)[content_size]
        last = False
        while not last:
            if position + 3 > end:
                return True
            file.seek(position)
            block = int.from_bytes(file.read(3), "little")
            last, kind, size = bool(block & 1), block >> 1 & 3, block >> 3
            position += 3 + (1 if kind == 1 else size)  # an RLE block holds one byte
        position += 4 * (descriptor >> 2 & 1)  # the checksum
    return position > end


def _checked_text(path: str | os.PathLike[str], chunks: Iterator[bytes]) -> Iterator[bytes]:
    """``chunks``, once their first 64 KiB are seen to be text rather than a binary file."""
    head: list[bytes] = []
    size = 0
    for chunk in chunks:
        head.append(chunk)
        size += len(chunk)
        if size >= _BINARY_SAMPLE:
            break
    sample = b"".join(head)[:_BINARY_SAMPLE]
    if b"\0" in sample:
        line = sample.count(b"\n", 0, sample.index(b"\0")) + 1
        raise PLMError(f"{path}:{line}: looks like a binary file (it has NUL bytes), not text")
    text = sample.decode("utf-8", errors="replace")
    control = (len(text) - len(text.translate(_CONTROL_CHARACTERS))) / max(len(text), 1)
    if control > _BINARY_FRACTION:
        raise PLMError(f"{path}: looks like a binary file ({control:.0%} control characters), not text")
    return itertools.chain(head, chunks)


def _text_lines(
    path: str | os.PathLike[str], chunks: Iterable[bytes], first_line: int = 1, first_byte: int = 0
) -> Iterator[tuple[int, str]]:
    r"""The lines of a UTF-8 file with their numbers, without the BOM, ``\n`` and a final ``\r``.

    Each line is decoded on its own: a ``\n`` byte is never part of a longer UTF-8 sequence, so this
    is an incremental decode that knows the line of a bad byte. ``chunks`` start at line ``first_line``,
    byte ``first_byte`` of the file.
    """
    start = first_byte  # the offset of the line's first byte in the file
    for number, raw in enumerate(_byte_lines(chunks), start=first_line):
        line = raw.removeprefix(_BOM) if number == 1 else raw
        if b"\0" in line:
            raise PLMError(f"{path}:{number}: looks like a binary file (it has NUL bytes), not text")
        try:
            yield number, line.removesuffix(b"\r").decode("utf-8")
        except UnicodeDecodeError as error:
            at = start + len(raw) - len(line) + error.start
            raise PLMError(f"{path}:{number}: not valid UTF-8 at byte {at} (0x{line[error.start]:02x})") from None
        start += len(raw) + 1


def _byte_lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    r"""The ``\n``-separated lines of a stream of chunks; a line is joined once, however many chunks it spans."""
    pending: list[bytes] = []
    for chunk in chunks:
        lines = chunk.split(b"\n")
        if len(lines) > 1:
            yield b"".join([*pending, lines[0]])
            yield from lines[1:-1]
            pending = []
        pending.append(lines[-1])
    if last := b"".join(pending):
        yield last


def _pyarrow(path: str | os.PathLike[str], what: str) -> ModuleType:
    """The ``pyarrow`` module, with its Parquet and IPC modules, or a PLMError that names the extra to install."""
    try:
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError:
        raise PLMError(f"{path}: reading {what} needs pyarrow: {_DATA_EXTRA}") from None
    return pyarrow


def _parquet_documents(path: str | os.PathLike[str], column: str) -> Iterator[Document]:
    pa = _pyarrow(path, "Parquet")
    with reading(path, "a Parquet file"), open(path, "rb") as file:
        try:
            parquet = pa.parquet.ParquetFile(file)
        except pa.ArrowException as error:
            raise PLMError(f"{path}: not a Parquet file, or a corrupt one ({error})") from None
        _check_column(pa, path, parquet.schema_arrow, column)
        try:
            rows, texts = yield from _rows(path, parquet.iter_batches(columns=[column], batch_size=_ROWS), column)
        except pa.ArrowException as error:
            raise PLMError(f"{path}: corrupt Parquet file ({error})") from None
    _check_found(path, rows, texts, f"column {column!r}")


def _datasets_documents(path: str | os.PathLike[str], column: str) -> Iterator[Document]:
    """The rows of a ``save_to_disk`` directory; of a ``DatasetDict``, its train split or else all its splits."""
    pa = _pyarrow(path, "a Hugging Face datasets directory")
    directory = Path(path)
    datasets: list[str | os.PathLike[str]] = [path]
    if (directory / "dataset_dict.json").is_file():
        splits = _json_file(directory / "dataset_dict.json").get("splits")
        if not isinstance(splits, list) or not all(isinstance(split, str) for split in splits):
            raise PLMError(f"{directory / 'dataset_dict.json'}: expected a list of split names in 'splits'")
        datasets = [directory / split for split in (["train"] if "train" in splits else splits)]
    rows = texts = 0
    for dataset in datasets:
        state = Path(dataset, "state.json")
        files = _json_file(state).get("_data_files")
        if not isinstance(files, list) or not all(isinstance(file, dict) and "filename" in file for file in files):
            raise PLMError(f"{state}: expected a list of {{'filename': ...}} in '_data_files'")
        arrow_files = [Path(dataset, file["filename"]) for file in files]
        batches = (batch for file in arrow_files for batch in _arrow_batches(pa, dataset, file, column))
        dataset_rows, dataset_texts = yield from _rows(dataset, batches, column)
        rows, texts = rows + dataset_rows, texts + dataset_texts
    _check_found(path, rows, texts, f"column {column!r}", "the dataset")


def _json_file(path: Path) -> dict:
    """A JSON file of a ``datasets`` directory, which must hold an object."""
    with reading(path, "a JSON file"):
        text = path.read_text(encoding="utf-8")
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise PLMError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(value, dict):
        raise PLMError(f"{path}: expected a JSON object {{...}}, got {json_type(value)}")
    return value


def _arrow_batches(pa: ModuleType, dataset: str | os.PathLike[str], path: Path, column: str) -> Iterator[Any]:
    """The record batches of an Arrow file: in the IPC stream format ``datasets`` writes, or the file format."""
    with reading(path, "an Arrow file"), pa.memory_map(str(path)) as source:
        try:
            try:
                reader = pa.ipc.open_stream(source)
                batches = iter(reader)
            except pa.ArrowInvalid:
                source.seek(0)
                reader = pa.ipc.open_file(source)
                batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
        except pa.ArrowException as error:
            raise PLMError(f"{path}: not an Arrow file, or a corrupt one ({error})") from None
        _check_column(pa, dataset, reader.schema, column)
        try:
            yield from batches
        except pa.ArrowException as error:
            raise PLMError(f"{path}: corrupt Arrow file ({error})") from None


def _check_column(pa: ModuleType, path: str | os.PathLike[str], schema: Any, column: str) -> None:
    """Refuse a table without the text column, or whose column does not hold strings."""
    if column not in schema.names:
        raise PLMError(f"{path}: no column {column!r} (the columns are {', '.join(schema.names)}); "
                       "choose another text field")
    kind = schema.field(column).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise PLMError(f"{path}: column {column!r} holds {kind}, not strings")


def _rows(
    path: str | os.PathLike[str], batches: Iterable[Any], column: str
) -> Generator[Document, None, tuple[int, int]]:
    """The non-blank texts of a column, named ``path:row n``; returns the numbers of rows and of texts."""
    rows = texts = 0
    for batch in batches:
        for start in range(0, batch.num_rows, _ROWS):
            for text in batch.slice(start, _ROWS).column(column).to_pylist():
                rows += 1
                if text and text.strip():
                    texts += 1
                    yield Document(f"{path}:row {rows}", text)
    return rows, texts


def input_fingerprint(path: Path, byte_range: tuple[int, int] | None = None) -> dict[str, Any]:
    """What an input holds, in a few bytes: its absolute path, its size and a SHA-256 of its contents.

    For a directory (a Hugging Face ``datasets`` directory) the size is that of all its files and the
    hash is over each file's relative name, size and contents, in sorted order of the names. For a
    byte range of a file, they are the range's, which is then given as ``range``.

    Args:
        path: a file or a directory, as [`corpus_files`][plm.data.sources.corpus_files] gives them.
        byte_range: the bytes read of the file (see [`shard_inputs`][plm.data.sources.shard_inputs]); None: all of it.

    Returns:
        ``{"path": ..., "bytes": ..., "sha256": ...}`` (and ``range``).

    Raises:
        PLMError: the input is missing or cannot be read.
    """
    digest = hashlib.sha256()
    size = 0
    with reading(path, "a file or a directory"):
        if byte_range is not None:
            start, stop = byte_range
            with path.open("rb") as stream:
                stream.seek(start)
                remaining = stop - start
                while remaining > 0 and (chunk := stream.read(min(_CHUNK, remaining))):
                    digest.update(chunk)
                    remaining -= len(chunk)
            return {"path": str(path.resolve()), "range": [start, stop], "bytes": stop - start,
                    "sha256": digest.hexdigest()}
        if path.is_dir():
            files = sorted((file.relative_to(path).as_posix(), file) for file in path.rglob("*") if file.is_file())
            for name, file in files:
                file_size = file.stat().st_size
                digest.update(f"{name}\0{file_size}\0".encode())
                with file.open("rb") as stream:
                    while chunk := stream.read(_CHUNK):
                        digest.update(chunk)
                size += file_size
        else:
            with path.open("rb") as stream:
                digest = hashlib.file_digest(stream, "sha256")
            size = path.stat().st_size
    return {"path": str(path.resolve()), "bytes": size, "sha256": digest.hexdigest()}
