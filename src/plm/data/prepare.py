"""Tokenize a corpus once, in parallel and in bounded memory, into a prepared directory.

Documents stream from the inputs ([`plm.data.sources`][plm.data.sources]) in batches of about a
megabyte of text; worker processes, one per core, each encode a batch
([`encode_texts`][plm.data.encoded.encode_texts]) and the batches are appended, each split's in input order, to
the files of their split ([`plm.data.prepared`][plm.data.prepared] gives the layout). Nothing but a few
batches is ever in memory, whatever the corpus' size.

Validation is held out by document: a document goes to validation when the CRC-32 of its
text falls in the lowest ``validation_fraction`` of the range, which needs no second pass,
does not depend on the order of the documents, and keeps the copies of a repeated
paragraph on one side. A corpus with too few documents for that holds out the last
``validation_fraction`` of its tokens instead.

Sentence pairs for seq2seq ([`prepare_pairs`][plm.data.prepare.prepare_pairs]) take the same path: they stream from
their files ([`ParallelText`][plm.data.sentence_pairs.ParallelText]), the workers encode them with the seq2seq
tokenizers
([`encode_pairs`][plm.data.prepared.encode_pairs]), and each split gets a source and a target part. A pair is held out
by the CRC-32 of its source and target.

Everything is written into a hidden staging directory beside ``out``, which becomes
``out`` once its manifest is written: a prepare that is killed leaves nothing that passes
for a finished corpus, and the next run of the same prepare starts it again cleanly.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import warnings
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from tqdm import tqdm

from plm.cache import cache_dir
from plm.data.corpus import Document
from plm.data.encoded import SUFFIXES, EncodedDocuments, encode_texts, token_dtype
from plm.data.prepared import (
    DOCUMENTS,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    PARALLEL,
    SIDES,
    SPLITS,
    TOKENIZER_DIR,
    VALIDATION_TEXT,
    VALIDATION_TEXT_PAIRS,
    PreparedCorpus,
    PreparedPairs,
    document_encoding,
    encode_pairs,
    seq2seq_fingerprint,
    tokenizer_fingerprint,
)
from plm.data.sentence_pairs import ParallelText, SentencePair, Seq2SeqTokenizers
from plm.data.sources import corpus_files, input_fingerprint, input_size, iter_documents, shard_inputs
from plm.data.workers import batches, encoded_batches
from plm.errors import PLMError, PLMWarning
from plm.progress import progress_bar
from plm.storage.atomic_files import make_directory, write_json
from plm.tokenization.tokenizer import Tokenizer

PART = "00000"  # the one part a prepare writes
_PROGRESS_FROM_BYTES = 10 << 20  # a smaller corpus is prepared in a few seconds: no bar
_SAMPLE_HASH = 0x5A3B1E  # the CRC-32's start value for a tokenizer's sample: another hash than validation's


@dataclass(frozen=True)
class PrepareOptions:
    """How a corpus is read and split.

    Attributes:
        text_field: the field of a JSONL record, or the column of a Parquet file or Hugging Face dataset, that
            holds the text.
        validation_fraction: the share of the documents held out when no validation inputs are given.
        workers: the processes that tokenize (None: one per core).
        progress: show a progress bar.
        shard: ``(index, count)``: prepare only share ``index`` (from 0) of ``count`` disjoint shares of the inputs
            (see [`shard_inputs`][plm.data.sources.shard_inputs]), to join with the others
            ([`join_prepared`][plm.data.prepare.join_prepared]); None: all.
    """

    text_field: str = "text"
    validation_fraction: float = 0.05
    workers: int | None = None
    progress: bool = True
    shard: tuple[int, int] | None = None


def prepare_corpus(
    inputs: Sequence[str | os.PathLike[str]],
    tokenizer: Tokenizer,
    out: str | os.PathLike[str],
    validation: Sequence[str | os.PathLike[str]] = (),
    options: PrepareOptions = PrepareOptions(),
    overwrite: bool = False,
) -> PreparedCorpus:
    """Tokenize the documents of ``inputs`` into the prepared corpus ``out``.

    Args:
        inputs: text files, JSONL (also .gz, .zst), Parquet files, Hugging Face dataset directories, globs of
            them, or directories holding them.
        tokenizer: the tokenizer; a copy is saved in ``out``.
        out: the directory to write.
        validation: the inputs to validate on (default: hold out ``options.validation_fraction`` of the documents).
        options: how the inputs are read and split.
        overwrite: replace a prepared corpus of other inputs, or other files, in ``out``.

    Returns:
        The prepared corpus. When ``out`` already holds this very corpus (the same inputs, tokenizer and options),
        it is returned as it is.

    Raises:
        PLMError: an input that cannot be read (see [`plm.data.sources`][plm.data.sources]), no text at all, or an
            ``out`` that holds something else and ``overwrite`` is False.
    """
    if not 0 < options.validation_fraction < 1:
        raise PLMError(f"validation_fraction must be between 0 and 1, got {options.validation_fraction}")
    pieces, validation_pieces = (_share(corpus_files(given), options.shard) if given else []
                                 for given in (inputs, validation))
    fingerprints = [input_fingerprint(path, byte_range) for path, byte_range in pieces]
    validation_fingerprints = [input_fingerprint(path, byte_range) for path, byte_range in validation_pieces]
    description: dict[str, Any] = {
        "inputs": fingerprints,
        "validation_inputs": validation_fingerprints,
        "text_field": options.text_field,
        "validation_fraction": None if validation else options.validation_fraction,
        "shard": None if options.shard is None else list(options.shard),
    }
    total = sum(entry["bytes"] for entry in fingerprints + validation_fingerprints)

    def documents() -> Iterator[tuple[str, Document]]:
        for path, byte_range in pieces:
            for document in iter_documents(path, options.text_field, byte_range):
                held = not validation and held_out(document.text, options.validation_fraction)
                yield ("validation" if held else "train"), document
        for path, byte_range in validation_pieces:
            for document in iter_documents(path, options.text_field, byte_range):
                yield "validation", document

    return write_prepared(documents(), tokenizer, Path(out), description, total, options, overwrite)


def _share(files: list[Path], shard: tuple[int, int] | None) -> list[tuple[Path, tuple[int, int] | None]]:
    return [(path, None) for path in files] if shard is None else shard_inputs(files, *shard)


def corpus_texts(
    inputs: Sequence[str | os.PathLike[str]],
    text_field: str = "text",
    sample_characters: int | None = None,
    held_out_fraction: float | None = None,
) -> Iterator[str]:
    """The texts of the documents of ``inputs``, streamed, to train a tokenizer on in bounded memory.

    Args:
        inputs: files, globs and directories (see [`corpus_files`][plm.data.sources.corpus_files]).
        text_field: the field or column that holds the text.
        sample_characters: about this many characters, from documents spread over the whole corpus (chosen by a
            hash of their text, the same ones every time); None: every document.
        held_out_fraction: leave out the documents [`held_out`][plm.data.prepare.held_out] gives to validation at this
            fraction.

    Yields:
        The texts.

    Raises:
        PLMError: an input that cannot be read (see [`plm.data.sources`][plm.data.sources]).
    """
    files = corpus_files(inputs)
    rate = 1.0 if sample_characters is None else sample_characters / max(1, sum(map(input_size, files)))
    for path in files:
        for document in iter_documents(path, text_field):
            if held_out_fraction is not None and held_out(document.text, held_out_fraction):
                continue
            if rate >= 1 or zlib.crc32(document.text.encode("utf-8"), _SAMPLE_HASH) < rate * 2**32:
                yield document.text


def held_out(text: str, fraction: float) -> bool:
    """Whether a document of ``text`` is held out for validation: its CRC-32 is in the lowest ``fraction``.

    Args:
        text: the document's text.
        fraction: the share of documents held out.

    Returns:
        True for a validation document.
    """
    return zlib.crc32(text.encode("utf-8")) < fraction * 2**32


def cached_corpus(
    inputs: Sequence[str | os.PathLike[str]],
    tokenizer: Tokenizer,
    validation: Sequence[str | os.PathLike[str]] = (),
    options: PrepareOptions = PrepareOptions(),
) -> PreparedCorpus:
    """`prepare_corpus` into plm's cache, reused while the inputs and the tokenizer are the same.

    Args:
        inputs: the training inputs.
        tokenizer: the tokenizer.
        validation: the validation inputs (default: held out).
        options: how the inputs are read and split.

    Returns:
        The prepared corpus.

    Raises:
        PLMError: see [`prepare_corpus`][plm.data.prepare.prepare_corpus].
    """
    files, validation_files = corpus_files(inputs), corpus_files(validation) if validation else []
    key = _key(tokenizer, [input_fingerprint(path) for path in files + validation_files],
               [str(path.resolve()) for path in validation_files], options.text_field, options.validation_fraction)
    return prepare_corpus(files, tokenizer, cache_dir() / "prepared" / key, validation_files, options, overwrite=True)


def cached_documents(
    train: Sequence[Document], validation: Sequence[Document], tokenizer: Tokenizer, progress: bool = True
) -> PreparedCorpus:
    """Documents already in memory (the embedded corpus), prepared into plm's cache once per text and tokenizer.

    Args:
        train: the training documents.
        validation: the validation documents.
        tokenizer: the tokenizer.
        progress: show a progress bar.

    Returns:
        The prepared corpus.
    """
    digest = hashlib.sha256()
    for split, documents in (("train", train), ("validation", validation)):
        for document in documents:
            digest.update(json.dumps([split, document.name, document.text]).encode())
    key = _key(tokenizer, digest.hexdigest())
    out = cache_dir() / "prepared" / key
    if (out / MANIFEST).is_file():
        return PreparedCorpus.open(out)
    stream = [*(("train", doc) for doc in train), *(("validation", doc) for doc in validation)]
    total = sum(len(document.text) for _, document in stream)
    options = PrepareOptions(progress=progress)
    return write_prepared(iter(stream), tokenizer, out, {"inputs": "embedded"}, total, options, overwrite=True)


def _key(tokenizer: Tokenizer, *parts: Any) -> str:
    text = json.dumps([FORMAT_VERSION, tokenizer_fingerprint(tokenizer), *parts], default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def write_prepared(
    documents: Iterator[tuple[str, Document]],
    tokenizer: Tokenizer,
    out: Path,
    description: dict[str, Any],
    total_bytes: int,
    options: PrepareOptions,
    overwrite: bool,
) -> PreparedCorpus:
    """Encode ``(split, document)`` pairs into the prepared corpus ``out``, atomically.

    Args:
        documents: each document with its split (train or validation), in order.
        tokenizer: the tokenizer.
        out: the directory to write.
        description: what the corpus was made from, kept in its manifest.
        total_bytes: the size of the text, for the progress bar.
        options: the workers and the progress bar.
        overwrite: replace what is in ``out``.

    Returns:
        The prepared corpus.

    Raises:
        PLMError: no text, or an ``out`` that holds something else and ``overwrite`` is False.
    """
    encoding = document_encoding(tokenizer)
    dtype, separator = encoding["dtype"], encoding["separator_id"]

    def fill(staging: Path) -> dict[str, Any]:
        tokenizer.save(staging / TOKENIZER_DIR)
        writers = {split: _SplitWriter(staging / split, PART, dtype) for split in SPLITS}
        encode = partial(encode_texts, **encoding)
        texts = ((split, document.text) for split, document in documents)
        with _progress(out, total_bytes, options) as progress:
            encoded_texts = encoded_batches(batches(texts, len), encode, total_bytes, options.workers)
            for split, encoded, characters in encoded_texts:
                writers[split].write(encoded)
                progress.update(characters)
        for writer in writers.values():
            writer.close()
        fraction = description.get("validation_fraction") or 0.05
        counts = _balance(staging, dtype, separator is not None, fraction, sharded=bool(description.get("shard")))
        return {"kind": DOCUMENTS, "dtype": dtype.name, "separator_id": separator,
                "opener_id": encoding["opener_id"], "unknown_id": encoding["unknown_id"],
                "boundaries": encoding["boundaries"],
                "splits": counts}

    _written(out, tokenizer_fingerprint(tokenizer), description, overwrite, fill)
    return PreparedCorpus.open(out)


def prepare_pairs(
    text: ParallelText,
    tokenizers: Seq2SeqTokenizers,
    out: str | os.PathLike[str],
    validation: ParallelText | None = None,
    options: PrepareOptions = PrepareOptions(),
    overwrite: bool = False,
) -> PreparedPairs:
    """Tokenize the sentence pairs of ``text`` into the prepared parallel corpus ``out``, for seq2seq training.

    The pairs stream from the files (read line by line, the two files of aligned text in lockstep) and
    are encoded in batches, in worker processes for a large corpus, exactly as
    [`encode_sources`][plm.data.sentence_pairs.Seq2SeqTokenizers.encode_sources] and
    [`encode_targets`][plm.data.sentence_pairs.Seq2SeqTokenizers.encode_targets] encode them. Without ``validation``,
    a pair
    is held out when the CRC-32 of its source, a tab and its target falls in the lowest ``options.validation_fraction``
    ([`held_out`][plm.data.prepare.held_out]); when none is, the last pairs are (that share of them, at most 1,000). The
    text of the first 1,000 validation pairs is kept for the metrics that translate them.

    Args:
        text: the training pairs' files.
        tokenizers: the seq2seq tokenizers; a copy is saved in ``out``.
        out: the directory to write.
        validation: the validation pairs' files (default: hold out ``options.validation_fraction`` of the pairs).
        options: the validation fraction, the workers and the progress bar (``text_field`` is not read).
        overwrite: replace a prepared corpus of other inputs, or other files, in ``out``.

    Returns:
        The prepared pairs. When ``out`` already holds these very pairs (the same files, tokenizers and
        options), they are returned as they are.

    Raises:
        PLMError: a file the readers of [`ParallelText`][plm.data.sentence_pairs.ParallelText] refuse, no pair, too
            few pairs
            to hold out validation, ``options.shard`` (parallel text is prepared whole), or an ``out`` that holds
            something else and ``overwrite`` is False.
    """
    if not 0 < options.validation_fraction < 1:
        raise PLMError(f"validation_fraction must be between 0 and 1, got {options.validation_fraction}")
    if options.shard is not None:
        raise PLMError("parallel text is prepared whole: it takes no shard")
    fingerprints = [input_fingerprint(path) for path in text.files()]
    validation_fingerprints = [input_fingerprint(path) for path in validation.files()] if validation else []
    description: dict[str, Any] = {
        "inputs": fingerprints,
        "validation_inputs": validation_fingerprints,
        "form": text.form,
        "languages": list(text.languages) if text.languages else None,
        "validation_fraction": None if validation else options.validation_fraction,
    }
    total = sum(entry["bytes"] for entry in fingerprints + validation_fingerprints)

    def pairs() -> Iterator[tuple[str, SentencePair]]:
        for pair in text.pairs():
            held = validation is None and held_out(f"{pair.source}\t{pair.target}", options.validation_fraction)
            yield ("validation" if held else "train"), pair
        if validation is not None:
            for pair in validation.pairs():
                yield "validation", pair

    return write_prepared_pairs(pairs(), tokenizers, Path(out), description, total, options, overwrite)


def write_prepared_pairs(
    pairs: Iterator[tuple[str, SentencePair]],
    tokenizers: Seq2SeqTokenizers,
    out: Path,
    description: dict[str, Any],
    total_bytes: int,
    options: PrepareOptions,
    overwrite: bool,
) -> PreparedPairs:
    """Encode ``(split, pair)`` items into the prepared parallel corpus ``out``, atomically.

    Args:
        pairs: each sentence pair with its split (train or validation), in order.
        tokenizers: the seq2seq tokenizers.
        out: the directory to write.
        description: what the pairs were read from, kept in the manifest.
        total_bytes: the size of the text, for the progress bar.
        options: the workers and the progress bar.
        overwrite: replace what is in ``out``.

    Returns:
        The prepared pairs.

    Raises:
        PLMError: no pair, too few to hold out validation, or an ``out`` that holds something else and
            ``overwrite`` is False.
    """
    dtype = token_dtype(max(len(tokenizers.source), len(tokenizers.target)))

    def fill(staging: Path) -> dict[str, Any]:
        tokenizers.save(staging / TOKENIZER_DIR)
        writers = {(split, side): _SplitWriter(staging / split, f"{PART}.{side}", dtype)
                   for split in SPLITS for side in SIDES}
        # The text the metrics translate: the first validation pairs, and the last ones of each split, which
        # become validation pairs when none were held out.
        first_validation: list[SentencePair] = []
        last: dict[str, deque[SentencePair]] = {split: deque(maxlen=VALIDATION_TEXT_PAIRS) for split in SPLITS}

        def kept(items: Iterator[tuple[str, SentencePair]]) -> Iterator[tuple[str, SentencePair]]:
            for split, pair in items:
                if split == "validation" and len(first_validation) < VALIDATION_TEXT_PAIRS:
                    first_validation.append(pair)
                last[split].append(pair)
                yield split, pair

        encode = partial(encode_pairs, tokenizers=tokenizers, dtype=dtype)
        pair_batches = batches(kept(pairs), lambda pair: len(pair.source) + len(pair.target))
        with _progress(out, total_bytes, options) as progress:
            encoded_pairs = encoded_batches(pair_batches, encode, total_bytes, options.workers)
            for split, (sources, targets), characters in encoded_pairs:
                writers[split, "source"].write(sources)
                writers[split, "target"].write(targets)
                progress.update(characters)
        for writer in writers.values():
            writer.close()
        held, counts = _balance_pairs(staging, dtype, description.get("validation_fraction") or 0.05)
        text = first_validation if held is None else list(last[held])[-counts["validation"]["pairs"]:]
        with open(staging / VALIDATION_TEXT, "w", encoding="utf-8") as file:
            file.writelines(json.dumps({"source": pair.source, "target": pair.target}, ensure_ascii=False) + "\n"
                            for pair in text[:VALIDATION_TEXT_PAIRS])
        return {"kind": PARALLEL, "dtype": dtype.name, "splits": counts}

    _written(out, seq2seq_fingerprint(tokenizers), description, overwrite, fill)
    return PreparedPairs.open(out)


def _written(out: Path, fingerprint: dict[str, Any], description: dict[str, Any], overwrite: bool,
             fill: Callable[[Path], dict[str, Any]]) -> None:
    """Write the prepared corpus ``out`` atomically, unless it holds this very corpus already.

    ``fill`` writes the splits and the tokenizer into the staging directory it is given, and returns the
    manifest's fields besides the format, the tokenizer's ``fingerprint`` and the ``description``.
    """
    def done() -> bool:  # this very corpus is there
        existing = _existing_manifest(out)
        return existing is not None and existing.get("tokenizer") == fingerprint and _same(existing, description)

    if done():
        return
    if not overwrite and out.exists() and any(out.iterdir()):
        what = "a prepared corpus of other inputs or another tokenizer" if _existing_manifest(out) else "other files"
        raise PLMError(f"{out}: holds {what}; choose another directory, or overwrite it")
    make_directory(out.parent)
    staging = out.parent / f".{out.name}.preparing"
    with _locked(staging):
        if done():  # another process prepared it while this one waited
            return
        for split in SPLITS:
            make_directory(staging / split)
        make_directory(staging / TOKENIZER_DIR)
        fields = fill(staging)
        write_json(staging / MANIFEST, {"format": FORMAT, "version": FORMAT_VERSION, "tokenizer": fingerprint,
                                        **description, **fields})
        _replace(staging, out)


def _progress(out: Path, total_bytes: int, options: PrepareOptions) -> tqdm:
    return progress_bar(total=total_bytes, unit="B", unit_scale=True, desc=f"preparing {out.name}",
                        disable=not options.progress or total_bytes < _PROGRESS_FROM_BYTES)


def _existing_manifest(out: Path) -> dict[str, Any] | None:
    try:
        manifest = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and manifest.get("format") == FORMAT else None


def _same(manifest: dict[str, Any], description: dict[str, Any]) -> bool:
    return manifest.get("version") == FORMAT_VERSION and all(manifest.get(k) == v for k, v in description.items())


class _locked:
    """A staging directory that one process at a time writes into, emptied when taken.

    A second process waits for the first (two runs of one corpus, each preparing it into plm's cache), then
    finds the corpus written.
    """

    def __init__(self, staging: Path) -> None:
        self.staging = staging
        self.lock = staging.parent / f"{staging.name}.lock"

    def __enter__(self) -> Path:
        while True:
            self.descriptor = os.open(self.lock, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(self.descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                warnings.warn(f"{self.staging.parent}: another process is preparing this corpus; waiting for it",
                              PLMWarning, stacklevel=2)
                fcntl.flock(self.descriptor, fcntl.LOCK_EX)
            # The holder before us deletes the lock file as it leaves: a lock on that file locks nothing.
            if os.path.exists(self.lock) and os.stat(self.lock).st_ino == os.fstat(self.descriptor).st_ino:
                break
            os.close(self.descriptor)
        shutil.rmtree(self.staging, ignore_errors=True)  # what a killed prepare left: it starts again
        make_directory(self.staging)
        return self.staging

    def __exit__(self, *error: object) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)
        self.lock.unlink(missing_ok=True)
        os.close(self.descriptor)


def _replace(staging: Path, out: Path) -> None:
    """Move the finished ``staging`` to ``out``; an old ``out`` is renamed away first, then deleted."""
    if out.exists():
        trash = out.parent / f".{out.name}.deleted"
        shutil.rmtree(trash, ignore_errors=True)
        os.replace(out, trash)
        os.replace(staging, out)
        shutil.rmtree(trash)
    else:
        os.replace(staging, out)


class _SplitWriter:
    """Appends encoded batches to the files of part ``name`` of a split."""

    def __init__(self, directory: Path, name: str, dtype: np.dtype) -> None:
        self.files: dict[str, BinaryIO] = {
            suffix: open(directory / f"{name}.{suffix}", "wb") for suffix in SUFFIXES  # noqa: SIM115
        }
        self.dtype = dtype
        self.tokens = self.sentences = self.spelled = 0
        self.pending_bits = np.zeros(0, bool)  # word-start bits short of a whole byte

    def write(self, encoded: EncodedDocuments) -> None:
        encoded.tokens.astype(self.dtype, copy=False).tofile(self.files["tokens"])
        bits = np.unpackbits(encoded.words, bitorder="little")[: len(encoded.tokens)].astype(bool)
        bits = np.concatenate([self.pending_bits, bits])
        whole = len(bits) // 8 * 8
        np.packbits(bits[:whole], bitorder="little").tofile(self.files["words"])
        self.pending_bits = bits[whole:]
        (encoded.sentences + self.tokens).tofile(self.files["sentences"])
        (encoded.documents[:-1] + [self.sentences, self.tokens]).tofile(self.files["documents"])
        (encoded.unknown + [self.tokens, self.spelled]).astype(np.int64).tofile(self.files["unknown"])
        encoded.spellings.tofile(self.files["spellings"])
        self.tokens += len(encoded.tokens)
        self.sentences += len(encoded.sentences)
        self.spelled += len(encoded.spellings)

    def close(self) -> None:
        np.packbits(self.pending_bits, bitorder="little").tofile(self.files["words"])
        np.array([self.sentences, self.tokens], np.int64).tofile(self.files["documents"])
        for file in self.files.values():
            file.close()


def _balance(staging: Path, dtype: np.dtype, separated: bool, fraction: float,
             sharded: bool) -> dict[str, dict[str, Any]]:
    """Give an empty split the last ``fraction`` of the other's tokens; return each split's counts.

    A corpus of few documents may have none held out (or all): the cut is then at a document
    boundary when there are several documents, else at a sentence boundary, else inside the sentence.
    A shard is left as it is: its documents are held out as in the whole corpus, which the join makes.
    """
    parts = {split: EncodedDocuments.open(staging / split, PART, dtype) for split in SPLITS}
    if not len(parts["train"].tokens) and not len(parts["validation"].tokens):
        raise PLMError("the inputs hold no text to train on" + (" in this shard" if sharded else ""))
    if not sharded and not len(parts["train"].tokens):  # everything was held out: it is the training text
        _swap_splits(staging)
        parts = {split: EncodedDocuments.open(staging / split, PART, dtype) for split in SPLITS}
    if not sharded and not len(parts["validation"].tokens):
        _move_tail(staging, parts["train"], fraction, int(separated))
        parts = {split: EncodedDocuments.open(staging / split, PART, dtype) for split in SPLITS}
    return {split: {"parts": [PART], "documents": part.document_count, "sentences": len(part.sentences),
                    "tokens": len(part.tokens)} for split, part in parts.items()}


def _balance_pairs(staging: Path, dtype: np.dtype, fraction: float) -> tuple[str | None, dict[str, dict[str, Any]]]:
    """Give an empty validation split the last ``fraction`` of the pairs (1,000 at most, one kept); return the counts.

    Returns:
        The split whose last pairs became the validation pairs (None: none moved), and the counts.
    """

    def opened() -> dict[str, dict[str, EncodedDocuments]]:
        return {split: {side: EncodedDocuments.open(staging / split, f"{PART}.{side}", dtype) for side in SIDES}
                for split in SPLITS}

    parts = opened()
    count = {split: parts[split]["source"].document_count for split in SPLITS}
    if not count["train"] and not count["validation"]:
        raise PLMError("the inputs hold no sentence pair")
    moved_from = None
    if not count["train"]:  # everything was held out: it is the training text
        _swap_splits(staging)
        parts, moved_from = opened(), "validation"
    if not parts["validation"]["source"].document_count:
        pairs = parts["train"]["source"].document_count
        if pairs < 2:
            raise PLMError("1 sentence pair is too few to hold out validation pairs; give validation pairs")
        first = pairs - min(max(1, round(pairs * fraction)), pairs - 1, VALIDATION_TEXT_PAIRS)
        for side in SIDES:
            _move_documents(staging, f"{PART}.{side}", parts["train"][side], first)
        parts, moved_from = opened(), moved_from or "train"
    return moved_from, {split: {"parts": [PART], "pairs": sides["source"].document_count,
                                **{f"{side}_tokens": len(sides[side].tokens) for side in SIDES}}
                        for split, sides in parts.items()}


def _swap_splits(staging: Path) -> None:
    """Make the training split the validation split and the other way round."""
    for split in SPLITS:
        os.replace(staging / split, staging / f"{split}.swap")
    os.replace(staging / "validation.swap", staging / "train")
    os.replace(staging / "train.swap", staging / "validation")


def _move_tail(staging: Path, train: EncodedDocuments, fraction: float, separator: int) -> None:
    """Move the last ``fraction`` of the training tokens to the (empty) validation split.

    The training files are cut short in place; only the tail, at most ``fraction`` of the text, is copied.
    """
    documents, total = train.documents, len(train.tokens)
    keep = total - max(1, round(total * fraction))
    if train.document_count > 1:  # from the document the cut falls in (the second at the earliest)
        _move_documents(staging, PART, train, max(1, int(np.searchsorted(documents[:-1, 1], keep, side="right")) - 1))
        return
    # One document: cut at a sentence start, else inside its one sentence.
    length = total - separator
    if length < 2:
        raise PLMError(f"too little text ({length} token) to hold out validation")
    starts = np.asarray(train.sentences)
    sentence = min(max(1, int(np.searchsorted(starts, keep, side="right")) - 1), len(starts))
    cut = int(starts[sentence]) if sentence < len(starts) else min(max(1, keep), length - 1)
    tail_sentences = np.concatenate([[0], starts[sentence:] - cut]).astype(np.int64)
    if sentence < len(starts):
        tail_sentences = tail_sentences[1:]  # the cut is a sentence start already
    tail_documents = np.array([[0, 0], [len(tail_sentences), total - cut]])
    unknown_kept, tail_unknown, tail_spellings = train.unknown_from(cut)
    tail = EncodedDocuments(np.asarray(train.tokens[cut:]), np.packbits(train.word_starts(cut, total),
                            bitorder="little"), tail_sentences, tail_documents, tail_unknown, tail_spellings)
    _write_part(staging / "validation", PART, tail)
    head_documents = np.array([[0, 0], [sentence, cut + separator]])
    head_separator = int(train.tokens[-1]) if separator else None
    _truncate(staging / "train", PART, train, cut, sentence, head_documents, unknown_kept, head_separator)


def _move_documents(staging: Path, name: str, train: EncodedDocuments, document: int) -> None:
    """Move the training documents of part ``name`` from ``document`` on to the (empty) validation split.

    The training files are cut short in place; only the moved documents are copied.
    """
    documents, total = train.documents, len(train.tokens)
    sentence, cut = (int(value) for value in documents[document])
    unknown_kept, tail_unknown, tail_spellings = train.unknown_from(cut)
    tail = EncodedDocuments(np.asarray(train.tokens[cut:]), np.packbits(train.word_starts(cut, total),
                            bitorder="little"), np.asarray(train.sentences[sentence:]) - cut,
                            np.asarray(documents[document:]) - [sentence, cut], tail_unknown, tail_spellings)
    _write_part(staging / "validation", name, tail)
    head_documents = np.vstack([documents[:document], [[sentence, cut]]])
    _truncate(staging / "train", name, train, cut, sentence, head_documents, unknown_kept, None)


def _write_part(directory: Path, name: str, encoded: EncodedDocuments) -> None:
    """Write ``encoded`` as part ``name`` of the split in ``directory``, in place of what it held."""
    writer = _SplitWriter(directory, name, encoded.tokens.dtype)
    writer.write(encoded)
    writer.close()


def _truncate(directory: Path, name: str, part: EncodedDocuments, tokens: int, sentences: int, documents: np.ndarray,
              unknown: int, separator: int | None) -> None:
    """Cut the files of ``part`` (part ``name``) to its first ``tokens``, ``sentences`` and ``unknown`` words.

    ``documents`` becomes its index. Then ``separator`` is appended (a word of its own) when it is not None.
    """
    paths = {suffix: directory / f"{name}.{suffix}" for suffix in SUFFIXES}
    dtype = part.tokens.dtype
    os.truncate(paths["tokens"], tokens * dtype.itemsize)
    os.truncate(paths["sentences"], sentences * 8)
    os.truncate(paths["spellings"], int(part.unknown[unknown - 1, 1]) if unknown else 0)
    os.truncate(paths["unknown"], unknown * 16)
    documents.astype(np.int64).tofile(paths["documents"])
    bits = np.unpackbits(np.fromfile(paths["words"], np.uint8, offset=tokens // 8), bitorder="little")
    bits = np.append(bits[: tokens % 8], [1] if separator is not None else []).astype(bool)
    os.truncate(paths["words"], tokens // 8)
    with open(paths["words"], "ab") as file:
        np.packbits(bits, bitorder="little").tofile(file)
    if separator is not None:
        with open(paths["tokens"], "ab") as file:
            np.array([separator], dtype).tofile(file)


# What the corpora joined into one must share: the ids and how documents are written with them.
_JOINED_ALIKE = ("tokenizer", "dtype", "separator_id", "opener_id", "unknown_id", "boundaries")


def join_prepared(
    parts: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], overwrite: bool = False
) -> PreparedCorpus:
    """Join prepared corpora (the shards of one corpus, or any of one tokenizer) into one, without copying tokens.

    The parts' files are hard-linked into ``out`` (symbolically linked where the file system cannot), as
    parts ``00000``, ``00001`` ... of each split, in the order of their shards (else as given); the manifest
    lists every part's inputs and sums their counts.

    Args:
        parts: the prepared corpora.
        out: the directory to write.
        overwrite: replace what is in ``out``.

    Returns:
        The joined corpus.

    Raises:
        PLMError: no part, a part that is not a finished prepared corpus, one given twice, parts of other
            tokenizers, or shards of one prepare missing or twice.
    """
    if not parts:
        raise PLMError("no prepared corpus to join")
    corpora = [PreparedCorpus.open(part) for part in parts]
    seen: dict[Path, Path] = {}
    for corpus in corpora:
        earlier = seen.setdefault(corpus.path.resolve(), corpus.path)
        if earlier is not corpus.path:  # its tokens would count twice, in training and validation
            raise PLMError(f"{corpus.path}: given twice (as {earlier} too); join each corpus once")
    first = corpora[0].manifest
    for corpus in corpora[1:]:
        for field in _JOINED_ALIKE:
            if corpus.manifest.get(field) != first.get(field):
                raise PLMError(f"{corpus.path}: prepared with another {field.replace('_', ' ')} than {corpora[0].path}")
    shards = [corpus.manifest.get("shard") for corpus in corpora]
    if any(shards):
        counts = {shard[1] for shard in shards if shard}
        indices = sorted(shard[0] for shard in shards if shard)
        if None in shards or len(counts) > 1 or indices != list(range(next(iter(counts)))):
            have = ", ".join(f"{shard[0]}/{shard[1]}" if shard else f"{corpus.path} (no shard)"
                             for shard, corpus in zip(shards, corpora))
            raise PLMError(f"the shards of one prepare are joined all together, each once; got {have}")
        corpora = sorted(corpora, key=lambda corpus: corpus.manifest["shard"][0])
    out = Path(out)
    if not overwrite and out.exists() and any(out.iterdir()):
        raise PLMError(f"{out}: holds files already; choose another directory, or overwrite it")
    make_directory(out.parent)
    staging = out.parent / f".{out.name}.preparing"
    with _locked(staging):
        shutil.copytree(corpora[0].path / TOKENIZER_DIR, staging / TOKENIZER_DIR)
        splits: dict[str, dict[str, Any]] = {}
        for split in SPLITS:
            make_directory(staging / split)
            names: list[str] = []
            for corpus in corpora:
                for part in corpus.manifest["splits"][split]["parts"]:
                    name = f"{len(names):05d}"
                    for suffix in SUFFIXES:
                        _link(corpus.path / split / f"{part}.{suffix}", staging / split / f"{name}.{suffix}")
                    names.append(name)
            totals = {count: sum(corpus.manifest["splits"][split][count] for corpus in corpora)
                      for count in ("documents", "sentences", "tokens")}
            splits[split] = {"parts": names, **totals}
        write_json(staging / MANIFEST, {
            **{field: first.get(field) for field in ("format", "version", "kind", *_JOINED_ALIKE, "text_field",
                                                     "validation_fraction")},
            "inputs": [entry for corpus in corpora for entry in corpus.manifest["inputs"]],
            "validation_inputs": [entry for corpus in corpora for entry in corpus.manifest["validation_inputs"]],
            "joined": [str(corpus.path.resolve()) for corpus in corpora],
            "splits": splits,
        })
        _replace(staging, out)
    return PreparedCorpus.open(out)


def _link(source: Path, target: Path) -> None:
    """``target`` as a hard link to ``source``, or a symbolic one across file systems."""
    try:
        os.link(source, target)
    except OSError:
        os.symlink(source.resolve(), target)
