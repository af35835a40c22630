"""Train/test overlap as in GPT-2 §4: the share of a test set's 8-grams that occur in the training text.

Text is normalised as the paper does: lower-cased alphanumeric words separated by
single spaces, so "The  cat's." and "the cat s" are the same words. The training
text's 8-grams go into a Bloom filter, which answers "seen?" with no false negatives
and false positives at a rate chosen up front; its size follows from that rate and
an estimate of how many 8-grams there are (a first counting pass, or the caller's
number). Text is read in chunks of lines, so the training text never has to fit in
memory; only the filter (about 1.44 * log2(1 / rate) bits per 8-gram) and the
hashes of the distinct words do.

Each 8-gram becomes a 64-bit key: a polynomial hash of its words' 64-bit hashes
(BLAKE2b, computed once per distinct word), vectorised with NumPy; the filter's k
bit positions come from two mixes of that key (Kirsch and Mitzenmacher's double
hashing). A training file is one stream of words (8-grams run across its lines); a
test file is cut into documents, and no 8-gram crosses a document boundary.
"""

from __future__ import annotations

import hashlib
import io
import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence, cast

import numpy as np

from plm.errors import PLMError, reading
from plm.progress import progress_bar

NGRAM = 8
CHUNK_CHARS = 1 << 20  # text read per step when streaming a training file
_WORD = re.compile(r"[^\W_]+")  # alphanumeric runs, in any script
_ASCII_WORD = re.compile(rb"[a-z0-9]+")
_PRIME = np.uint64(0x100000001B3)  # the polynomial's base (FNV's 64-bit prime)
_POPCOUNT = np.array([bin(byte).count("1") for byte in range(256)], dtype=np.uint8)


def normalized_words(text: str) -> list[bytes]:
    """The paper's normalisation: lower-cased alphanumeric words, as UTF-8.

    Args:
        text: the text.

    Returns:
        Its words, in order.
    """
    text = text.lower()
    if text.isascii():  # the common case, and twice as fast on bytes
        return _ASCII_WORD.findall(text.encode("ascii"))
    return [word.encode("utf-8") for word in _WORD.findall(text)]


def _mix(keys: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit moves every output bit (uint64 -> uint64)."""
    keys = (keys ^ (keys >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    keys = (keys ^ (keys >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return keys ^ (keys >> np.uint64(31))


class WordHashes:
    """64-bit hashes of words, computed once per distinct word and remembered."""

    def __init__(self) -> None:
        self.known: dict[bytes, int] = {}

    def __call__(self, words: Sequence[bytes]) -> np.ndarray:
        """The 64-bit hashes (BLAKE2b) of ``words``, new words hashed and remembered.

        Args:
            words: the words, as UTF-8.

        Returns:
            The (len(words),) uint64 hashes.
        """
        for word in set(words).difference(self.known):
            self.known[word] = int.from_bytes(hashlib.blake2b(word, digest_size=8).digest(), "little")
        return np.fromiter(map(self.known.__getitem__, words), dtype=np.uint64, count=len(words))


def ngram_keys(word_hashes: np.ndarray, n: int = NGRAM) -> np.ndarray:
    """(len - n + 1,) uint64 keys, one per n-gram of consecutive words; empty when there are fewer than n.

    Args:
        word_hashes: (words,) uint64 hashes of the words, in order.
        n: the words of an n-gram.

    Returns:
        The keys, a polynomial hash of each n-gram's word hashes.
    """
    count = len(word_hashes) - n + 1
    if count <= 0:
        return np.zeros(0, dtype=np.uint64)
    keys = np.zeros(count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for offset in range(n):  # key = sum of w[j + offset] * P^(n - 1 - offset), modulo 2^64
            keys = keys * _PRIME + word_hashes[offset : offset + count]
    return keys


class BloomFilter:
    """A bit array with ``hashes`` bit positions per key: no false negatives, false positives at a known rate.

    Args:
        bits: the bits of the array.
        hashes: the bit positions per key.

    Raises:
        PLMError: fewer than 8 bits or 1 hash.
    """

    def __init__(self, bits: int, hashes: int) -> None:
        if bits < 8 or hashes < 1:
            raise PLMError(f"a Bloom filter needs at least 8 bits and 1 hash, got {bits} and {hashes}")
        self.bits = bits
        self.hashes = hashes
        self.array = np.zeros((bits + 7) // 8, dtype=np.uint8)
        self.added = 0

    @classmethod
    def for_capacity(cls, items: int, fpr: float) -> BloomFilter:
        """The smallest filter with false-positive rate ``fpr`` once ``items`` keys are in.

        m = -n ln p / (ln 2)^2 bits and k = (m / n) ln 2 hashes (rounded), the optimum for n and p.

        Args:
            items: the keys it will hold (at least 1 is assumed).
            fpr: the false-positive rate, between 0 and 1.

        Returns:
            The empty filter.

        Raises:
            PLMError: a rate not strictly between 0 and 1.
        """
        if not 0 < fpr < 1:
            raise PLMError(f"the false-positive rate must be between 0 and 1, got {fpr}")
        items = max(items, 1)
        bits = max(8, math.ceil(-items * math.log(fpr) / math.log(2) ** 2))
        return cls(bits, max(1, round(bits / items * math.log(2))))

    def _positions(self, keys: np.ndarray) -> np.ndarray:
        """(hashes, len(keys)) bit positions: h1 + i * h2 modulo the size."""
        with np.errstate(over="ignore"):
            first = _mix(keys)
            step = _mix(keys ^ np.uint64(0x9E3779B97F4A7C15)) | np.uint64(1)
            rounds = np.arange(self.hashes, dtype=np.uint64)[:, None]
            return (first + rounds * step) % np.uint64(self.bits)

    def add(self, keys: np.ndarray) -> None:
        """Set the bits of ``keys``.

        Args:
            keys: (n,) uint64 keys.
        """
        positions = self._positions(keys).ravel()
        cells = (positions >> np.uint64(3)).astype(np.intp)
        masks = np.left_shift(np.uint8(1), (positions & np.uint64(7)).astype(np.uint8))
        # Fancy-index |= keeps one write per byte when a byte appears twice; write again what got lost
        # (a few rounds, each far smaller), which is faster than np.bitwise_or.at.
        while len(cells):
            self.array[cells] |= masks
            lost = (self.array[cells] & masks) == 0
            cells, masks = cells[lost], masks[lost]
        self.added += len(keys)

    def contains(self, keys: np.ndarray) -> np.ndarray:
        """(len(keys),) bool: True for every key added, and for others with the false-positive rate.

        Args:
            keys: (n,) uint64 keys.

        Returns:
            Whether each key may have been added.
        """
        positions = self._positions(keys)  # (hashes, keys)
        bits = (
            self.array[(positions >> np.uint64(3)).astype(np.intp)] >> (positions & np.uint64(7)).astype(np.uint8)
        ) & 1
        return cast(np.ndarray, bits.all(axis=0))  # an array (numpy's stubs allow a scalar: no axis is known)

    def fill(self) -> float:
        """The share of bits set.

        Returns:
            A fraction between 0 and 1.
        """
        return int(_POPCOUNT[self.array].sum(dtype=np.int64)) / self.bits  # the padding bits are never set

    def false_positive_rate(self) -> float:
        """The rate this filter has now: the chance that all k bits of a new key are set, fill^k.

        Returns:
            The estimated rate.
        """
        return self.fill() ** self.hashes


def _text_chunks(path: Path, read: Callable[[int], object] | None = None) -> Iterator[str]:
    """A file's text in pieces of about CHUNK_CHARS characters, cut at line ends; an empty file is an error.

    ``read`` is called with the bytes each piece took from the file (a progress bar's ``update``).
    """
    text = False
    try:
        with reading(path), path.open("rb") as raw, io.TextIOWrapper(raw, encoding="utf-8") as file:
            position = 0
            while chunk := "".join(file.readlines(CHUNK_CHARS)):
                text = text or not chunk.isspace()
                if read is not None:
                    read(raw.tell() - position)  # with the bytes read ahead: a bar's count, not an offset
                    position = raw.tell()
                yield chunk
    except UnicodeDecodeError as error:
        raise PLMError(f"{path}: not valid UTF-8 (at byte {error.start} of a chunk)") from None
    if not text:
        raise PLMError(f"{path}: the file is empty: no words to compare")


def stream_ngram_keys(
    path: str | Path, hashes: WordHashes, read: Callable[[int], object] | None = None
) -> Iterator[np.ndarray]:
    """The keys of every 8-gram of a file read as one stream of words, chunk by chunk.

    Args:
        path: the text file.
        hashes: the word hashes, shared across files.
        read: called with the bytes each chunk took from the file (a progress bar's ``update``), or None.

    Yields:
        Each chunk's keys, 8-grams across chunk boundaries included.

    Raises:
        PLMError: a missing, empty or non-UTF-8 file, or a directory.
    """
    carry = np.zeros(0, dtype=np.uint64)  # the last n - 1 words of the chunk before
    for chunk in _text_chunks(Path(path), read):
        words = np.concatenate([carry, hashes(normalized_words(chunk))])
        yield ngram_keys(words)
        carry = words[len(words) - (NGRAM - 1) :] if len(words) >= NGRAM - 1 else words


def count_ngrams(paths: Iterable[str | Path], read: Callable[[int], object] | None = None) -> int:
    """8-grams in the files (each file one stream of words): the filter's capacity when none is given.

    Args:
        paths: the text files.
        read: called with the bytes each chunk took from a file (a progress bar's ``update``), or None.

    Returns:
        The count, repeats included.

    Raises:
        PLMError: a missing, empty or non-UTF-8 file, or a directory.
    """
    total = 0
    for path in paths:
        words = sum(len(normalized_words(chunk)) for chunk in _text_chunks(Path(path), read))
        total += max(0, words - NGRAM + 1)
    return total


@dataclass(frozen=True)
class FilterReport:
    """What went into a training filter, and the false-positive rate it ended with.

    Attributes:
        ngrams: the 8-grams inserted (with repeats).
        bits: the filter's bits.
        hashes: its bit positions per key.
        target_fpr: the false-positive rate it was sized for.
        fpr: the rate estimated from the filled filter: fill ** hashes.
        bytes_read: the training files' bytes.
    """
    ngrams: int  # 8-grams inserted (with repeats)
    bits: int
    hashes: int
    target_fpr: float
    fpr: float  # estimated from the filled filter: fill ** hashes
    bytes_read: int


def build_filter(
    paths: Sequence[str | Path], fpr: float = 1e-4, expected_ngrams: int | None = None, progress: bool = False
) -> tuple[BloomFilter, FilterReport]:
    """A Bloom filter of the 8-grams of the training files, sized for ``fpr`` at ``expected_ngrams``.

    Without ``expected_ngrams`` the files are read twice: once to count, once to insert.
    Counting counts repeats too, so the filter is at least as large as it needs to be.

    Args:
        paths: the training files.
        fpr: the false-positive rate to size the filter for.
        expected_ngrams: the 8-grams the filter will hold (default: counted).
        progress: show a progress bar over the bytes read (each file twice when counting).

    Returns:
        The filter and its report.

    Raises:
        PLMError: no files, a file that cannot be read as text, or a rate not strictly between 0 and 1.
    """
    if not paths:
        raise PLMError("no training files given")
    size = sum(Path(path).stat().st_size for path in paths if Path(path).is_file())
    passes = 1 if expected_ngrams is not None else 2
    with progress_bar(total=size * passes, disable=not progress, desc="training 8-grams", unit="B", unit_scale=True,
                      leave=False) as bar:
        capacity = expected_ngrams if expected_ngrams is not None else count_ngrams(paths, bar.update)
        bloom = BloomFilter.for_capacity(capacity, fpr)
        hashes = WordHashes()
        for path in paths:
            for keys in stream_ngram_keys(path, hashes, bar.update):
                bloom.add(keys)
    return bloom, FilterReport(bloom.added, bloom.bits, bloom.hashes, fpr, bloom.false_positive_rate(), size)


def documents(path: str | Path, split: str = "blank-lines") -> Iterator[str]:
    """A test file's documents: its lines, or runs of lines between blank (or whitespace-only) lines.

    Args:
        path: the test file.
        split: "lines" or "blank-lines".

    Yields:
        The documents, in order.

    Raises:
        PLMError: an unknown split, or a file that cannot be read as text.
    """
    if split not in ("lines", "blank-lines"):
        raise PLMError(f"unknown document split {split!r}; use 'lines' or 'blank-lines'")
    lines: list[str] = []
    for chunk in _text_chunks(Path(path)):
        for line in chunk.splitlines():
            if split == "lines":
                yield line
            elif line.strip():
                lines.append(line)
            elif lines:
                yield "\n".join(lines)
                lines = []
    if lines:
        yield "\n".join(lines)


@dataclass(frozen=True)
class OverlapReport:
    """How much of a test file the training filter has seen.

    Attributes:
        file: the test file.
        ngrams: the test file's 8-grams.
        found: of them, those in the training filter.
        documents: documents with at least one 8-gram.
        short_documents: documents of fewer than 8 words: nothing to compare.
        flagged: documents with at least ``threshold`` of their 8-grams in training.
        threshold: the share of a document's 8-grams that flags it.
    """
    file: str
    ngrams: int  # the test file's 8-grams
    found: int  # of them, in the training filter
    documents: int  # documents with at least one 8-gram
    short_documents: int  # documents of fewer than 8 words: nothing to compare
    flagged: int  # documents with at least ``threshold`` of their 8-grams in training
    threshold: float

    @property
    def share(self) -> float:
        """The share of the test file's 8-grams found in training (0 without 8-grams)."""
        return self.found / self.ngrams if self.ngrams else 0.0

    @property
    def flagged_share(self) -> float:
        """The share of documents flagged (0 without documents)."""
        return self.flagged / self.documents if self.documents else 0.0

    def as_dict(self) -> dict[str, float | int | str]:
        """The report as JSON values.

        Returns:
            The fields, and ``share`` and ``flagged_share``.
        """
        return asdict(self) | {"share": self.share, "flagged_share": self.flagged_share}


def measure_overlap(
    bloom: BloomFilter,
    path: str | Path,
    threshold: float = 0.5,
    split: str = "blank-lines",
    hashes: WordHashes | None = None,
) -> OverlapReport:
    """How much of a test file's 8-grams the training filter has seen, overall and per document.

    Args:
        bloom: the training text's filter.
        path: the test file.
        threshold: the share of a document's 8-grams in training that flags it, between 0 and 1.
        split: how the test file is cut into documents: "lines" or "blank-lines".
        hashes: the word hashes to reuse (default: new ones).

    Returns:
        The report.

    Raises:
        PLMError: a threshold outside [0, 1], an unknown split, or a file that cannot be read as text.
    """
    if not 0 <= threshold <= 1:
        raise PLMError(f"the threshold is a share of a document's 8-grams, between 0 and 1; got {threshold}")
    hashes = hashes or WordHashes()
    ngrams = found = counted = short = flagged = 0
    for document in documents(path, split):
        keys = ngram_keys(hashes(normalized_words(document)))
        if not len(keys):
            short += bool(document.strip())
            continue
        seen = int(bloom.contains(keys).sum())
        ngrams, found, counted = ngrams + len(keys), found + seen, counted + 1
        flagged += seen >= threshold * len(keys)
    return OverlapReport(str(path), ngrams, found, counted, short, flagged, threshold)
