"""Text to train on: the default corpus every Python install carries, and the user's files.

The default corpus is English prose that needs no download: the topics of Python's
interactive help (``pydoc_data``) and the docstrings of the standard library, read
with `ast` so that no module is imported. It is built once per Python version and
cached as JSON lines, so every run on the same Python trains on the same text.
"""

from __future__ import annotations

import ast
import gc
import json
import os
import platform
import sysconfig
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plm.cache import cache_dir
from plm.config import checked_value, json_type
from plm.errors import PLMError, reading
from plm.storage.atomic_files import atomic_open

# Bump when the way the default corpus is built changes, so old caches are not reused.
CORPUS_FORMAT = 1
_SKIPPED_DIRS = {"test", "tests", "idle_test", "__pycache__"}
# A text whose first characters are more than this fraction of control characters (other
# than tab, line breaks and form feed) is taken for a binary file.
_BINARY_SAMPLE = 1 << 16
_BINARY_FRACTION = 0.3
_CONTROL_CHARACTERS = dict.fromkeys([*range(0x00, 0x09), *range(0x0E, 0x20), 0x7F])


@dataclass(frozen=True)
class Document:
    """One unit of text: a help topic, a module's docstrings, a paragraph of a file.

    Token streams put a separator (``eos``) between documents, as GPT-2 did.

    Attributes:
        name: where it comes from ("topic:...", "module:...", or a file and the line it starts at).
        text: its text.
    """

    name: str
    text: str


@dataclass(frozen=True)
class Corpus:
    """Documents split into train and validation; no document is in both.

    Attributes:
        train: the documents to train on.
        validation: the held-out documents.
    """

    train: tuple[Document, ...]
    validation: tuple[Document, ...]


def default_corpus() -> Corpus:
    """The built-in corpus (several MB of English), from the cache when it is there.

    The first call on a Python version builds it and writes the cache; about 5% of the documents are
    held out for validation.

    Returns:
        The corpus.
    """
    version = f"{platform.python_implementation()}-{platform.python_version()}".lower()
    path = cache_dir() / f"default-corpus-{version}-v{CORPUS_FORMAT}.jsonl"
    if path.exists():
        return _read_jsonl(path)
    documents = _default_documents()
    corpus = _hold_out(documents, round(0.05 * len(documents)))
    with atomic_open(path) as file:
        for split, docs in (("train", corpus.train), ("validation", corpus.validation)):
            for doc in docs:
                record = {"split": split, "name": doc.name, "text": doc.text}
                file.write(json.dumps(record, ensure_ascii=False).encode() + b"\n")
    return corpus


def _read_jsonl(path: Path) -> Corpus:
    splits: dict[str, list[Document]] = {"train": [], "validation": []}
    with path.open(encoding="utf-8") as file:
        for record in map(json.loads, file):
            splits[record["split"]].append(Document(record["name"], record["text"]))
    return Corpus(tuple(splits["train"]), tuple(splits["validation"]))


def _default_documents() -> list[Document]:
    from pydoc_data.topics import topics

    documents = [Document(f"topic:{key}", topics[key]) for key in sorted(topics)]
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    collecting = gc.isenabled()
    gc.disable()  # syntax trees are many objects and no cycles: collecting them doubles the time
    try:
        for path in _stdlib_sources(stdlib):
            parts = path.relative_to(stdlib).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            text = _docstrings(path)
            if text:
                documents.append(Document(f"module:{name}", text))
    finally:
        if collecting:
            gc.enable()
    return documents


def _stdlib_sources(stdlib: Path) -> Iterator[Path]:
    """The standard library's ``.py`` files in sorted order, without tests.

    Only directories named like packages are entered, which leaves out
    ``site-packages``, ``lib-dynload`` and ``config-3.x-...``.
    """
    for root, dirs, files in os.walk(stdlib):
        dirs[:] = sorted(d for d in dirs if d.isidentifier() and d not in _SKIPPED_DIRS)
        for file in sorted(files):
            if file.endswith(".py") and file[:-3].isidentifier():
                yield Path(root, file)


def _docstrings(path: Path) -> str:
    """The module docstring, then those of its classes and functions, in source order."""
    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError, UnicodeDecodeError, OSError):
        return ""
    docs = (ast.get_docstring(node, clean=True) for node in [tree, *_definitions(tree)])
    return "\n\n".join(doc.strip() for doc in docs if doc and doc.strip())


def _definitions(node: ast.AST) -> Iterator[ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef]:
    """Classes and functions under ``node``; expressions are skipped, as none holds one."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            yield child
        if not isinstance(child, ast.expr):
            yield from _definitions(child)


def read_text(path: str | os.PathLike[str]) -> str:
    r"""The UTF-8 text of a user's file, with a BOM removed and Windows line ends made ``\n``.

    A PLMError says which file is unusable and why: missing, a directory, empty,
    binary (NUL bytes, or mostly control characters: nothing to train a tokenizer on
    or to score), or not UTF-8 (with the offset of the first bad byte, to find it in
    a hex editor).

    Args:
        path: the file.

    Returns:
        Its text.

    Raises:
        PLMError: the file is missing, unreadable, empty, binary or not UTF-8.
    """
    with reading(path):
        data = Path(path).read_bytes()
    if b"\0" in data:
        raise PLMError(f"{path}: looks like a binary file (it has NUL bytes at byte {data.index(0)}), not text")
    try:
        text = data.decode("utf-8").removeprefix("\ufeff").replace("\r\n", "\n")
    except UnicodeDecodeError as error:
        bad = data[error.start]
        raise PLMError(f"{path}: not valid UTF-8 at byte {error.start} (0x{bad:02x})") from None
    if not text.strip():
        raise PLMError(f"{path}: the file is empty")
    sample = text[:_BINARY_SAMPLE]
    control = (len(sample) - len(sample.translate(_CONTROL_CHARACTERS))) / len(sample)
    if control > _BINARY_FRACTION:
        raise PLMError(f"{path}: looks like a binary file ({control:.0%} control characters), not text")
    return text


def read_corpus(
    train_paths: Sequence[str | os.PathLike[str]],
    validation_paths: Sequence[str | os.PathLike[str]] | None = None,
    validation_fraction: float = 0.05,
) -> Corpus:
    """Read text files as documents: paragraphs separated by one or more blank lines.

    That is the plain-text convention BERT's pre-training data uses. Without
    validation files, about ``validation_fraction`` of the documents are held out;
    when there are too few documents for that, the last ``validation_fraction`` of the
    characters is, cut at a line break when there is one.

    Args:
        train_paths: the files to train on.
        validation_paths: the files to validate on (default: hold out part of the training files).
        validation_fraction: the part of the training text held out when there are no validation files.

    Returns:
        The corpus.

    Raises:
        PLMError: no training files, a file [`read_text`][plm.data.corpus.read_text] refuses, a fraction not strictly
            between 0 and 1, or too little text to hold out.
    """
    if not train_paths:
        raise PLMError("no training files given")
    train = [doc for path in train_paths for doc in _paragraphs(path)]
    if validation_paths:
        return Corpus(tuple(train), tuple(doc for path in validation_paths for doc in _paragraphs(path)))
    if not 0 < validation_fraction < 1:
        raise PLMError(f"validation fraction must be between 0 and 1, got {validation_fraction}")
    count = round(len(train) * validation_fraction)
    if 0 < count < len(train):
        return _hold_out(train, count)
    return _hold_out_tail(train, validation_fraction)


def _paragraphs(path: str | os.PathLike[str]) -> Iterator[Document]:
    """The file's blank-line-separated blocks, each named ``file:first line number``."""
    lines: list[str] = []
    for number, line in enumerate([*read_text(path).split("\n"), ""], start=1):
        if line.strip():
            lines.append(line)
        elif lines:
            yield Document(f"{path}:{number - len(lines)}", "\n".join(lines))
            lines = []


def _hold_out(documents: Sequence[Document], count: int) -> Corpus:
    """Hold out ``count`` whole documents for validation, the same ones on every run.

    They are the documents whose text has the smallest CRC-32: the choice does not
    depend on the order of the documents, and copies of a repeated paragraph sort
    together, so they seldom end up on both sides.
    """
    ranked = sorted(range(len(documents)), key=lambda i: (zlib.crc32(documents[i].text.encode()), i))
    held = set(ranked[:count])
    return Corpus(
        tuple(doc for i, doc in enumerate(documents) if i not in held),
        tuple(doc for i, doc in enumerate(documents) if i in held),
    )


def _hold_out_tail(documents: Sequence[Document], fraction: float) -> Corpus:
    """Hold out the last ``fraction`` of the characters, for text with few documents."""
    total = sum(len(doc.text) for doc in documents)
    keep = total - max(1, round(total * fraction))
    if keep <= 0:
        raise PLMError(f"{documents[0].name}: too little text ({total} characters) to hold out validation")
    train: list[Document] = []
    validation: list[Document] = []
    for doc in documents:
        if 0 < keep < len(doc.text):
            cut = doc.text.find("\n", keep) + 1 or keep
            if cut == len(doc.text):
                cut = keep
            train.append(Document(doc.name, doc.text[:cut]))
            validation.append(Document(f"{doc.name} from character {cut}", doc.text[cut:]))
        else:
            (train if keep > 0 else validation).append(doc)
        keep -= len(doc.text)
    return Corpus(tuple(train), tuple(validation))


def json_object(line: str, path: str | os.PathLike[str], number: int) -> dict:
    """Line ``number`` of a user's JSONL file, which must hold one JSON object.

    Args:
        line: the line's text.
        path: the file, for the message.
        number: the line's number, from 1.

    Returns:
        The object.

    Raises:
        PLMError: a line that is not valid JSON, or not an object.
    """
    try:
        row = json.loads(line)
    except json.JSONDecodeError as error:
        raise PLMError(f"{path}:{number}: not valid JSON ({error.msg} at column {error.colno})") from None
    if not isinstance(row, dict):
        raise PLMError(f"{path}:{number}: expected a JSON object {{...}}, got {json_type(row)}")
    return row


def json_rows(
    path: str | os.PathLike[str], required: Mapping[str, Any], optional: Mapping[str, Any] | None = None
) -> list[tuple[int, dict[str, Any]]]:
    """The JSON object of each non-blank line of a user's JSONL file, each with the fields asked for.

    Args:
        path: the JSONL file.
        required: field -> the type annotation its value must fit (``str``, ``list``, ``str | int`` ...).
        optional: fields a row may lack, and the annotations their values fit when present.

    Returns:
        The line numbers (from 1) and the rows, as [`check_fields`][plm.data.corpus.check_fields] returns them.

    Raises:
        PLMError: a file [`read_text`][plm.data.corpus.read_text] refuses, or a line that is not a JSON object
            with the fields and types asked for, naming the file and the line.
    """
    rows = []
    for number, line in enumerate(read_text(path).split("\n"), start=1):
        if line.strip():
            rows.append((number, check_fields(json_object(line, path, number), required, optional,
                                              f"{path}:{number}")))
    return rows


def json_document(path: str | os.PathLike[str]) -> Any:
    """The JSON document in a user's file (CoQA's, SQuAD's).

    Args:
        path: the JSON file.

    Returns:
        The document.

    Raises:
        PLMError: a file [`read_text`][plm.data.corpus.read_text] refuses, or one that is not valid JSON, naming the
            line and column.
    """
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as error:
        raise PLMError(f"{path}:{error.lineno}: not valid JSON ({error.msg} at column {error.colno})") from None


def check_fields(
    value: Any, required: Mapping[str, Any], optional: Mapping[str, Any] | None, where: str
) -> dict[str, Any]:
    """``value`` when it is a JSON object with the ``required`` fields and types (and ``optional`` ones, if any).

    Each field is checked as a config's is ([`checked_value`][plm.config.checked_value]): booleans are no numbers.

    Args:
        value: a JSON value.
        required: field -> the type annotation its value must fit.
        optional: fields the object may lack, and the annotations their values fit when present.
        where: how a message names the object ("file.jsonl:3", "file.json: data[0]").

    Returns:
        The object, its checked fields as [`convert`][plm.config.convert] gives them (an integer as a float where a
        number is asked for).

    Raises:
        PLMError: not an object, a missing field, or a field of another type.
    """
    if not isinstance(value, dict):
        raise PLMError(f"{where}: expected a JSON object {{...}}, got {json_type(value)}")
    missing = next((name for name in required if name not in value), None)
    if missing is not None:
        raise PLMError(f"{where}: missing field {missing!r}")
    fields = {**required, **(optional or {})}
    return value | {name: checked_value(value[name], kind, f"{where}: field {name!r}")
                    for name, kind in fields.items() if name in value}
