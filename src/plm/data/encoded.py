"""Documents as token ids, with their word starts and their sentence and document boundaries.

[`EncodedDocuments`][plm.data.encoded.EncodedDocuments] holds the arrays of one part of a prepared split (see
[`plm.data.prepared`][plm.data.prepared] for the directory), and [`encode_texts`][plm.data.encoded.encode_texts] makes
them from text. This module imports only numpy and the tokenizers library: the worker processes of a prepare
([`plm.data.prepare`][plm.data.prepare]) import it alone, not PyTorch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from plm.data.segments import segment_starts
from plm.errors import PLMError

if TYPE_CHECKING:
    import tokenizers

SUFFIXES = ("tokens", "words", "sentences", "documents", "unknown", "spellings")  # the files of a part


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (GPT-2's 50,257 do), else uint32.

    Args:
        vocab_size: the tokenizer's vocabulary size.

    Returns:
        The dtype the ids are stored in.
    """
    return np.dtype(np.uint16 if vocab_size <= 2**16 else np.uint32)


@dataclass(frozen=True)
class EncodedDocuments:
    """Documents as token ids with their word starts and sentence and document boundaries.

    The arrays of one part of a prepared split, memory-mapped, or of a batch of documents
    just encoded, in memory.

    Attributes:
        tokens: (tokens,) the ids; each document is followed by the separator when there is one.
        words: (ceil(tokens / 8),) uint8, a bit a token (little-endian bit order): it begins a word.
        sentences: (sentences,) int64, the offset of each sentence's first token.
        documents: (documents + 1, 2) int64, each document's first sentence and first token; the last row
            is (sentences, tokens).
        unknown: (unknown words, 2) int64, for a word vocabulary: the token offset of each word it maps to
            its unknown token, and the end of that word's spelling in ``spellings``; else empty.
        spellings: uint8, the unknown words' UTF-8 spellings, one after the other.
    """

    tokens: np.ndarray
    words: np.ndarray
    sentences: np.ndarray
    documents: np.ndarray
    unknown: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    spellings: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))

    @property
    def document_count(self) -> int:
        """The documents."""
        return len(self.documents) - 1

    def word_starts(self, start: int, stop: int) -> np.ndarray:
        """Whether each token from ``start`` to ``stop`` (exclusive) begins a word.

        Args:
            start: the first token.
            stop: one past the last token.

        Returns:
            (stop - start,) bool.
        """
        first = start // 8
        bits = np.unpackbits(self.words[first : (stop + 7) // 8], bitorder="little")
        return bits[start - 8 * first : stop - 8 * first].astype(bool)

    def spelling(self, position: int) -> str:
        """The spelling of the unknown word at token offset ``position``.

        Args:
            position: the offset of a token that `unknown` lists.

        Returns:
            The word as the text spelled it.
        """
        row = int(np.searchsorted(self.unknown[:, 0], position))
        start = int(self.unknown[row - 1, 1]) if row else 0
        return bytes(self.spellings[start : int(self.unknown[row, 1])]).decode("utf-8")

    def unknown_from(self, token: int) -> tuple[int, np.ndarray, np.ndarray]:
        """Where the unknown words from token ``token`` on begin, and their index and spellings as of there.

        Args:
            token: a token offset.

        Returns:
            The unknown words before ``token``, and the rest's `unknown` rows (offsets counted from
            ``token``) and `spellings`.
        """
        row = int(np.searchsorted(self.unknown[:, 0], token))
        start = int(self.unknown[row - 1, 1]) if row else 0
        return row, np.asarray(self.unknown[row:]) - [token, start], np.asarray(self.spellings[start:])

    @classmethod
    def open(cls, directory: Path, part: str, dtype: np.dtype) -> EncodedDocuments:
        """The arrays of part ``part`` of the split in ``directory``, memory-mapped.

        Args:
            directory: the split's directory.
            part: the part's name.
            dtype: the dtype of its ids.

        Returns:
            The part.

        Raises:
            PLMError: a file that is missing or of the wrong size.
        """
        arrays = {}
        kinds = [dtype, *map(np.dtype, (np.uint8, np.int64, np.int64, np.int64, np.uint8))]
        for suffix, kind in zip(SUFFIXES, kinds):
            path = directory / f"{part}.{suffix}"
            if not path.is_file():
                raise PLMError(f"{path}: missing; the prepared corpus is incomplete")
            arrays[suffix] = _mapped(path, kind)
        documents, unknown = arrays["documents"].reshape(-1, 2), arrays["unknown"].reshape(-1, 2)
        spelled = int(unknown[-1, 1]) if len(unknown) else 0
        if (len(documents) == 0 or tuple(documents[-1]) != (len(arrays["sentences"]), len(arrays["tokens"]))
                or spelled != len(arrays["spellings"])):
            raise PLMError(f"{directory / part}: its files do not agree (a truncated or mixed-up prepared corpus)")
        return cls(arrays["tokens"], arrays["words"], arrays["sentences"], documents, unknown, arrays["spellings"])


def _mapped(path: Path, dtype: np.dtype) -> np.ndarray:
    if path.stat().st_size == 0:  # numpy cannot map an empty file
        return np.zeros(0, dtype)
    return np.memmap(path, dtype=dtype, mode="r")


def encode_texts(
    texts: Sequence[str], backend: tokenizers.Tokenizer, separator_id: int | None, dtype: np.dtype,
    boundaries: bool = True, opener_id: int | None = None, unknown_id: int | None = None,
) -> EncodedDocuments:
    """Tokenize ``texts`` in one batch (on every core) into ids, word starts and boundaries.

    Each text is encoded whole, as a causal LM reads it; its sentences (see
    [`plm.data.segments`][plm.data.segments]) begin at the tokens that hold their first characters. A text
    without tokens is left out.

    Args:
        texts: the documents' texts.
        backend: the Hugging Face tokenizer; no special tokens are added.
        separator_id: the id written after each document, or None for none.
        dtype: the ids' dtype (see [`token_dtype`][plm.data.encoded.token_dtype]).
        boundaries: find the word starts and sentences (which only the masked LMs' pairs and masks read); False
            makes each document one sentence of one-token words, in less time.
        opener_id: the id written before each document, or None for none.
        unknown_id: keep the spelling of each token of this id (a word vocabulary's ``<UNK>``), or None.

    Returns:
        The documents, in memory.
    """
    tokens: list[np.ndarray] = []
    words: list[np.ndarray] = []
    sentences: list[np.ndarray] = []
    documents: list[tuple[int, int]] = []
    unknown: list[tuple[int, int]] = []
    spellings: list[bytes] = []
    token_count = sentence_count = spelled = 0
    opener = [] if opener_id is None else [opener_id]
    separator = [] if separator_id is None else [separator_id]
    for text, encoding in zip(texts, backend.encode_batch(list(texts), add_special_tokens=False)):
        if not encoding.ids:
            continue
        ids = np.array(opener + encoding.ids + separator, dtype)
        begins = np.ones(len(ids), bool)
        firsts = [0]
        if boundaries:
            # A word begins where the word id changes; a token of no word (nan, unequal to all) is its own.
            word_ids = np.array([None] * len(opener) + encoding.word_ids + [None] * len(separator), np.float64)
            begins[1:] = word_ids[1:] != word_ids[:-1]
            firsts = sorted({0, *(_first_tokens(encoding, segment_starts(text)) + len(opener)).tolist()})
        if unknown_id is not None:
            for index in np.flatnonzero(np.asarray(encoding.ids) == unknown_id):
                start, end = encoding.offsets[index]
                spellings.append(text[start:end].encode("utf-8"))
                spelled += len(spellings[-1])
                unknown.append((token_count + len(opener) + int(index), spelled))
        documents.append((sentence_count, token_count))
        tokens.append(ids)
        words.append(begins)
        sentences.append(np.array(firsts, np.int64) + token_count)
        token_count += len(ids)
        sentence_count += len(firsts)
    documents.append((sentence_count, token_count))
    return EncodedDocuments(
        np.concatenate(tokens) if tokens else np.zeros(0, dtype),
        np.packbits(np.concatenate(words) if words else np.zeros(0, bool), bitorder="little"),
        np.concatenate(sentences) if sentences else np.zeros(0, np.int64),
        np.array(documents, np.int64).reshape(-1, 2),
        np.array(unknown, np.int64).reshape(-1, 2),
        np.frombuffer(b"".join(spellings), np.uint8),
    )


def _first_tokens(encoding: tokenizers.Encoding, offsets: list[int]) -> np.ndarray:
    """The token holding each character offset, or the first token after it (one past none is dropped).

    A token holds the characters up to its end offset; a character that no token holds (a space, one a
    normalizer dropped) begins the sentence at the next token. (``Encoding.char_to_token`` would find the
    same token, in time that grows with the text: it is searched once per call.)
    """
    ends = np.fromiter(chain.from_iterable(encoding.offsets), np.int64)[1::2]  # (tokens,), non-decreasing
    tokens = np.searchsorted(ends, np.asarray(offsets, np.int64), side="right")
    return tokens[tokens < len(ends)]


def encoded_sentences(rows: Sequence[Sequence[int]], dtype: np.dtype) -> EncodedDocuments:
    """Rows of ids as documents of one sentence each, with no separator, for one side of parallel text.

    Every token is marked as a word start: the ids of a released model's tokenizer come without words, and
    nothing that reads parallel text asks for them.

    Args:
        rows: the ids of each sentence.
        dtype: the ids' dtype (see [`token_dtype`][plm.data.encoded.token_dtype]).

    Returns:
        The sentences, in memory.
    """
    lengths = np.fromiter(map(len, rows), np.int64, len(rows))
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)  # (rows + 1,)
    tokens = np.fromiter((token for row in rows for token in row), dtype, int(starts[-1]))
    words = np.packbits(np.ones(len(tokens), bool), bitorder="little")
    return EncodedDocuments(tokens, words, starts[:-1], np.stack([np.arange(len(rows) + 1), starts], axis=1))
