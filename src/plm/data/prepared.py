"""A prepared corpus: token ids, word starts and sentence and document boundaries, memory-mapped.

A corpus is tokenized once ([`plm.data.prepare`][plm.data.prepare]) into a directory that every
objective and every process of a run maps, so that nothing grows with the corpus but
the files. Its layout::

    DATA/
      manifest.json          written last: what the directory holds (see plm.data.prepare)
      tokenizer/             the tokenizer the ids are of
      train/00000.tokens     uint16 ids (uint32 when the vocabulary needs it), each document
                             followed by the separator (eos) when the tokenizer has one
      train/00000.words      one bit a token, packed: the token begins a word
      train/00000.sentences  int64: the token offset of each sentence's first token
      train/00000.documents  int64 (documents + 1, 2): each document's first sentence and first
                             token; the last row is (sentences, tokens)
      train/00000.unknown    int64 (unknown words, 2), for a word vocabulary (ELMo's): the token offset
                             of each word the vocabulary maps to <UNK>, and the end of its spelling in
      train/00000.spellings  their UTF-8 spellings, one after the other (the biLM reads every word's
                             characters); both empty for any other tokenizer
      validation/...         the same, for the held-out documents

A word vocabulary's documents also open with its ``<S>``, as ELMo's biLM reads them.

A split may have several parts (``00000``, ``00001`` ...): one per machine that
prepared a share of the corpus. Causal LMs read the tokens of all parts as one stream
([`TokenStream`][plm.data.prepared.TokenStream]); the encoders' pair examples read documents and their sentences
([`PreparedSplit`][plm.data.prepared.PreparedSplit]).

Parallel text for sequence to sequence (``kind`` ``parallel`` in the manifest) is the same
format twice over: each split holds a ``source`` and a ``target`` side of one part each, whose
"documents" are the pairs' sentences, the i-th of one side translated by the i-th of the other::

    DATA/
      manifest.json                 kind "parallel"; the pairs and tokens of each split and side
      tokenizer/                    the seq2seq tokenizers (a joint one, or target/ beside; seq2seq.json)
      validation.jsonl              the first 1,000 validation pairs' text, {"source": ..., "target": ...}
                                    a line, for the metrics that translate them
      train/00000.source.tokens     each source as the tokenizers encode it, x_1 .. x_n </s> (reversed
                                    when they reverse sources); no separator
      train/00000.source.documents  int64 (pairs + 1, 2): each source's first sentence and token
      train/00000.source.words      (each token marked as a word start: seq2seq reads no word starts)
      train/00000.source.sentences  (each source one sentence)
      train/00000.target.*          the same for each target, <s> y_1 .. y_m </s>
      validation/...                the same, for the held-out pairs

[`PreparedPairs`][plm.data.prepared.PreparedPairs] opens it; batches read its pairs' lengths and ids
([`PreparedPairSplit`][plm.data.prepared.PreparedPairSplit]).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tokenizers import models

from plm.data.encoded import EncodedDocuments, encode_texts, encoded_sentences, token_dtype
from plm.data.sentence_pairs import SentencePair, Seq2SeqTokenizers
from plm.errors import PLMError
from plm.tokenization.protocol import TokenizerLike
from plm.tokenization.released import ReleasedTokenizer
from plm.tokenization.tokenizer import Tokenizer

if TYPE_CHECKING:

    from plm.data.corpus import Document

FORMAT = "plm-prepared"
FORMAT_VERSION = 2  # 2: the unknown words' spellings
MANIFEST = "manifest.json"
TOKENIZER_DIR = "tokenizer"
SPLITS = ("train", "validation")
DOCUMENTS, PARALLEL = "documents", "parallel"  # the kinds of prepared corpora: for pre-training, for seq2seq
SIDES = ("source", "target")  # the parts of a split of parallel text
VALIDATION_TEXT = "validation.jsonl"  # parallel text: the first validation pairs' text
VALIDATION_TEXT_PAIRS = 1000  # ... so many of them


def document_encoding(tokenizer: Tokenizer) -> dict[str, Any]:
    """How ``tokenizer``'s documents are written: the arguments of `encode_texts` besides the texts.

    Every document is followed by the eos token when the tokenizer has one, as GPT-2 trained. A word
    vocabulary with a begin token of its own (ELMo's ``<S>``) also opens each document with it and keeps the
    spelling of each word it maps to ``<UNK>``, since the biLM reads every word's characters. Only a tokenizer
    with a mask token (an encoder's, whose masked LM and pairs read words and sentences) has its word starts
    and sentences found.

    Args:
        tokenizer: the tokenizer.

    Returns:
        ``backend``, ``separator_id``, ``opener_id``, ``unknown_id``, ``dtype`` and ``boundaries``.
    """
    words = isinstance(tokenizer.backend.model, models.WordLevel) and tokenizer.bos_id not in (None, tokenizer.eos_id)
    return {"backend": tokenizer.backend, "separator_id": tokenizer.eos_id,
            "opener_id": tokenizer.bos_id if words else None, "unknown_id": tokenizer.id_of("unk") if words else None,
            "dtype": token_dtype(tokenizer.vocab_size), "boundaries": tokenizer.mask_id is not None}


def encode_pairs(pairs: Sequence[SentencePair], tokenizers: Seq2SeqTokenizers,
                 dtype: np.dtype) -> tuple[EncodedDocuments, EncodedDocuments]:
    """Sentence pairs as the ids of their sources and of their targets, each side its own documents.

    Args:
        pairs: the pairs.
        tokenizers: the seq2seq tokenizers; the ids are exactly those of
            [`encode_sources`][plm.data.sentence_pairs.Seq2SeqTokenizers.encode_sources] and
            [`encode_targets`][plm.data.sentence_pairs.Seq2SeqTokenizers.encode_targets].
        dtype: the ids' dtype.

    Returns:
        The sources and the targets, in memory.
    """
    sources = tokenizers.encode_sources([pair.source for pair in pairs])
    targets = tokenizers.encode_targets([pair.target for pair in pairs])
    return encoded_sentences(sources, dtype), encoded_sentences(targets, dtype)


class TokenStream:
    """The token ids of a split's parts as one array, for a causal LM's random blocks.

    Supports ``len`` and indexing with an integer array (a block that crosses two parts
    reads from both), which is what [`BlockSampler`][plm.data.tokens.BlockSampler] asks of an array.

    Args:
        parts: the token arrays, in order.
    """

    def __init__(self, parts: Sequence[np.ndarray]) -> None:
        self.parts = [part for part in parts if len(part)]
        self.starts = np.cumsum([0] + [len(part) for part in self.parts])  # (parts + 1,)
        self.dtype = self.parts[0].dtype if self.parts else np.dtype(np.uint16)

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, index: np.ndarray) -> np.ndarray:
        index = np.asarray(index)
        if len(self.parts) == 1:
            return self.parts[0][index]
        which = np.searchsorted(self.starts, index, side="right") - 1
        out = np.empty(index.shape, self.dtype)
        for number in np.unique(which):
            chosen = which == number
            out[chosen] = self.parts[number][index[chosen] - self.starts[number]]
        return out


class PreparedSplit:
    """One split of a corpus: its documents, each with its tokens, word starts and sentences.

    Documents are numbered over all parts, in order; a document's tokens exclude its separator.

    Args:
        parts: the parts, in order.
        separator: the tokens after each document (1 with an eos, else 0).
    """

    def __init__(self, parts: Sequence[EncodedDocuments], separator: int) -> None:
        self.parts = list(parts)
        self.separator = separator
        self.document_starts = np.cumsum([0] + [part.document_count for part in self.parts])  # (parts + 1,)
        self.sentence_starts = np.cumsum([0] + [len(part.sentences) for part in self.parts])
        self.tokens = TokenStream([part.tokens for part in self.parts])

    @classmethod
    def from_documents(cls, documents: Sequence[Document], tokenizer: Tokenizer) -> PreparedSplit:
        """The split of ``documents`` encoded in memory, with eos after each when the tokenizer has one.

        For text that fits in memory (a test, a file to score); a corpus goes through
        [`prepare_corpus`][plm.data.prepare.prepare_corpus].

        Args:
            documents: the documents.
            tokenizer: the tokenizer.

        Returns:
            The split.
        """
        # Word starts and sentences whatever the tokenizer: in memory, finding them costs little.
        encoded = encode_texts([doc.text for doc in documents], **{**document_encoding(tokenizer), "boundaries": True})
        return cls([encoded], int(tokenizer.eos_id is not None))

    def __len__(self) -> int:
        return int(self.document_starts[-1])

    @property
    def sentence_count(self) -> int:
        """The sentences of all documents."""
        return int(self.sentence_starts[-1])

    @property
    def token_count(self) -> int:
        """The tokens of all documents, separators not counted."""
        return len(self.tokens) - self.separator * len(self)

    def _locate(self, document: int) -> tuple[EncodedDocuments, int]:
        number = int(np.searchsorted(self.document_starts, document, side="right")) - 1
        return self.parts[number], document - int(self.document_starts[number])

    def _token_range(self, document: int) -> tuple[EncodedDocuments, int, int]:
        part, local = self._locate(document)
        start, stop = int(part.documents[local, 1]), int(part.documents[local + 1, 1]) - self.separator
        return part, start, stop

    def document_lengths(self) -> np.ndarray:
        """The tokens of each document, its separator not counted.

        Returns:
            (documents,) int64.
        """
        lengths = [np.diff(part.documents[:, 1]) for part in self.parts]
        return (np.concatenate(lengths) if lengths else np.zeros(0, np.int64)) - self.separator

    def document_tokens(self, document: int) -> np.ndarray:
        """The token ids of ``document``, without its separator.

        Args:
            document: the document's number.

        Returns:
            The ids (a view of the mapped file).
        """
        part, start, stop = self._token_range(document)
        return part.tokens[start:stop]

    def document_word_starts(self, document: int) -> np.ndarray:
        """Whether each token of ``document`` begins a word.

        Args:
            document: the document's number.

        Returns:
            (its tokens,) bool.
        """
        part, start, stop = self._token_range(document)
        return part.word_starts(start, stop)

    def sentence_bounds(self, document: int) -> np.ndarray:
        """The offset of each sentence of ``document`` in its tokens and, last, its length.

        Args:
            document: the document's number.

        Returns:
            (its sentences + 1,) int64.
        """
        part, local = self._locate(document)
        first, start = part.documents[local]
        last, stop = part.documents[local + 1]
        return np.append(part.sentences[first:last], stop - self.separator) - start

    def document_of_sentence(self, sentence: int) -> tuple[int, int]:
        """The document that holds sentence ``sentence`` (numbered over the split), and its place there.

        Args:
            sentence: the sentence's number.

        Returns:
            The document's number and the sentence's index among its sentences.
        """
        number = int(np.searchsorted(self.sentence_starts, sentence, side="right")) - 1
        part, local_sentence = self.parts[number], sentence - int(self.sentence_starts[number])
        local = int(np.searchsorted(part.documents[:, 0], local_sentence, side="right")) - 1
        return int(self.document_starts[number]) + local, local_sentence - int(part.documents[local, 0])


def tokenizer_fingerprint(tokenizer: Tokenizer) -> dict[str, object]:
    """What identifies a tokenizer's ids: a SHA-256 of its vocabulary and special-token roles, and its size.

    The vocabulary (each token and its id), not the whole definition: a Unigram model's scores, for one, are
    written with other digits once saved and loaded, and mean the same ids.

    Args:
        tokenizer: the tokenizer.

    Returns:
        ``sha256`` and ``vocab_size``.
    """
    return _fingerprint(tokenizer.backend.get_vocab(with_added_tokens=True), tokenizer.special_tokens,
                        tokenizer.vocab_size)


def _fingerprint(vocabulary: dict[str, int], special_tokens: dict[str, str], size: int) -> dict[str, object]:
    ordered = sorted(vocabulary.items(), key=lambda item: item[1])
    definition = json.dumps([ordered, sorted(special_tokens.items())])
    return {"sha256": hashlib.sha256(definition.encode()).hexdigest(), "vocab_size": size}


def seq2seq_fingerprint(tokenizers: Seq2SeqTokenizers) -> dict[str, object]:
    """What identifies the ids of seq2seq tokenizers: each side's fingerprint and the order of the sources.

    Args:
        tokenizers: the tokenizers.

    Returns:
        ``source`` and ``target`` (see [`tokenizer_fingerprint`][plm.data.prepared.tokenizer_fingerprint]; a released
        model's side by its vocabulary and special tokens) and ``reverse_source``.
    """
    def side(tokenizer: TokenizerLike) -> dict[str, object]:
        if isinstance(tokenizer, ReleasedTokenizer):
            return _fingerprint(tokenizer.vocab, tokenizer.special_tokens, len(tokenizer))
        assert isinstance(tokenizer, Tokenizer)  # the two kinds of side
        return tokenizer_fingerprint(tokenizer)

    return {"source": side(tokenizers.source), "target": side(tokenizers.target),
            "reverse_source": tokenizers.reverse_source}


def read_manifest(path: Path, kind: str) -> dict:
    """The manifest of the prepared corpus ``path``, which must be of ``kind``.

    Args:
        path: the directory.
        kind: ``documents`` (for pre-training) or ``parallel`` (sentence pairs, for seq2seq).

    Returns:
        The manifest.

    Raises:
        PLMError: no such directory, an unfinished prepare, a directory that is not a prepared corpus, one of
            another format version, or of the other kind.
    """
    if not path.is_dir():
        raise PLMError(f"{path}: no such directory (prepare a corpus into it first)")
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        if (path.parent / f".{path.name}.preparing").exists():
            raise PLMError(f"{path}: its prepare has not finished (run it again to finish it)")
        raise PLMError(f"{path}: not a prepared corpus (it has no {MANIFEST})")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise PLMError(f"{manifest_path}: unreadable ({error})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise PLMError(f"{manifest_path}: not the manifest of a prepared corpus")
    if manifest.get("version") != FORMAT_VERSION:
        raise PLMError(f"{path}: prepared with format version {manifest.get('version')}; this plm reads "
                       f"version {FORMAT_VERSION}: prepare the corpus again")
    if manifest.get("kind", DOCUMENTS) != kind:
        what = {DOCUMENTS: "documents, for pre-training", PARALLEL: "sentence pairs, for sequence to sequence"}
        raise PLMError(f"{path}: a corpus of {what[manifest.get('kind', DOCUMENTS)]}; this reads one of {what[kind]}")
    return manifest


def open_parts(path: Path, manifest: dict, split: str, side: str | None = None) -> list[EncodedDocuments]:
    """The parts of a split of the prepared directory ``path`` (of one side, for parallel text), memory-mapped.

    Args:
        path: the directory.
        manifest: its manifest.
        split: train or validation.
        side: source or target, for parallel text; None for documents.

    Returns:
        The parts, in order.

    Raises:
        PLMError: a missing or inconsistent file.
    """
    dtype = np.dtype(manifest["dtype"])
    names = [part if side is None else f"{part}.{side}" for part in manifest["splits"][split]["parts"]]
    return [EncodedDocuments.open(path / split, name, dtype) for name in names]


class PreparedCorpus:
    """A prepared directory, opened: its manifest, its tokenizer and its two splits, memory-mapped.

    Args:
        path: the directory.
        manifest: its manifest.
        train: the training split.
        validation: the validation split.
    """

    def __init__(self, path: Path, manifest: dict, train: PreparedSplit, validation: PreparedSplit) -> None:
        self.path, self.manifest, self.train, self.validation = path, manifest, train, validation

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> PreparedCorpus:
        """Map the prepared corpus in ``path``.

        Args:
            path: the directory [`prepare_corpus`][plm.data.prepare.prepare_corpus] wrote.

        Returns:
            The corpus.

        Raises:
            PLMError: no such directory, an unfinished prepare, a directory that is not a prepared corpus, one of
                another format version, of parallel text, or missing or inconsistent files.
        """
        path = Path(path)
        manifest = read_manifest(path, DOCUMENTS)
        separator = int(manifest.get("separator_id") is not None)
        splits = {split: PreparedSplit(open_parts(path, manifest, split), separator) for split in SPLITS}
        return cls(path, manifest, splits["train"], splits["validation"])

    def tokenizer(self) -> Tokenizer:
        """The tokenizer the corpus was prepared with.

        Returns:
            The tokenizer.
        """
        return Tokenizer.load(self.path / TOKENIZER_DIR)

    def check_tokenizer(self, tokenizer: Tokenizer) -> None:
        """Refuse a tokenizer other than the corpus' own: its ids would mean other tokens.

        Args:
            tokenizer: the tokenizer a run would use.

        Raises:
            PLMError: another vocabulary or definition.
        """
        if tokenizer_fingerprint(tokenizer) != self.manifest.get("tokenizer"):
            raise PLMError(f"{self.path}: prepared with another tokenizer (its {TOKENIZER_DIR}/, of "
                           f"{self.manifest['tokenizer'].get('vocab_size')} tokens), whose ids mean other tokens; "
                           f"use that tokenizer, or prepare the corpus again with this one")


class PreparedPairSplit:
    """One split of prepared parallel text: each pair's source and target ids, memory-mapped.

    A [`PairRows`][plm.data.sentence_pairs.PairRows]: batches read its lengths and its pairs by index.

    Args:
        source: the sources, one sentence a document.
        target: their translations, in the same order.

    Raises:
        PLMError: sides of different lengths.
    """

    def __init__(self, source: PreparedSplit, target: PreparedSplit) -> None:
        if len(source) != len(target):
            raise PLMError(f"{len(source)} sources but {len(target)} targets: a torn prepared corpus")
        self.source, self.target = source, target
        # int32: the lengths of millions of pairs cost 4 bytes a side each, the only memory that grows with them.
        self.source_lengths = source.document_lengths().astype(np.int32)  # (pairs,)
        self.target_lengths = target.document_lengths().astype(np.int32)  # (pairs,)

    def __len__(self) -> int:
        return len(self.source)

    def pair(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """The source and target ids of pair ``index``.

        Args:
            index: the pair.

        Returns:
            Its source ids and its target ids (views of the mapped files).
        """
        return self.source.document_tokens(index), self.target.document_tokens(index)


class PreparedPairs:
    """A prepared directory of parallel text, opened: its manifest, its tokenizers and its two splits, memory-mapped.

    Args:
        path: the directory.
        manifest: its manifest.
        train: the training pairs.
        validation: the validation pairs.
    """

    def __init__(self, path: Path, manifest: dict, train: PreparedPairSplit, validation: PreparedPairSplit) -> None:
        self.path, self.manifest, self.train, self.validation = path, manifest, train, validation

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> PreparedPairs:
        """Map the prepared parallel text in ``path``.

        Args:
            path: the directory [`prepare_pairs`][plm.data.prepare.prepare_pairs] wrote.

        Returns:
            The corpus.

        Raises:
            PLMError: no such directory, an unfinished prepare, a directory that is not a prepared corpus, one of
                another format version, of documents, or missing or inconsistent files.
        """
        path = Path(path)
        manifest = read_manifest(path, PARALLEL)
        splits = {}
        for split in SPLITS:
            sides = [PreparedSplit(open_parts(path, manifest, split, side), separator=0) for side in SIDES]
            try:
                splits[split] = PreparedPairSplit(*sides)
            except PLMError as error:
                raise PLMError(f"{path / split}: {error}") from None
        return cls(path, manifest, splits["train"], splits["validation"])

    def tokenizers(self) -> Seq2SeqTokenizers:
        """The tokenizers the pairs were prepared with.

        Returns:
            The tokenizers.
        """
        return Seq2SeqTokenizers.load(self.path / TOKENIZER_DIR)

    def check_tokenizers(self, tokenizers: Seq2SeqTokenizers) -> None:
        """Refuse tokenizers other than the corpus' own: their ids would mean other tokens.

        Args:
            tokenizers: the tokenizers a run would use.

        Raises:
            PLMError: another vocabulary on either side, or another order of the sources.
        """
        own = self.manifest.get("tokenizer", {})
        given = seq2seq_fingerprint(tokenizers)
        if given["reverse_source"] != own.get("reverse_source"):
            order = "reversed" if own.get("reverse_source") else "in order"
            raise PLMError(f"{self.path}: prepared with its sources {order}; read them as they were prepared, or "
                           f"prepare the pairs again")
        if given != own:
            raise PLMError(f"{self.path}: prepared with other tokenizers (its {TOKENIZER_DIR}/, of "
                           f"{own['source']['vocab_size']} source and {own['target']['vocab_size']} target tokens), "
                           "whose ids mean other tokens; use those, or prepare the pairs again with these")

    def validation_text(self) -> list[SentencePair]:
        """The text of the first validation pairs (up to 1,000), for the metrics that translate them.

        Returns:
            The pairs, in the order of the validation split.

        Raises:
            PLMError: an unreadable file.
        """
        path = self.path / VALIDATION_TEXT
        try:
            lines = path.read_text(encoding="utf-8").split("\n")[:-1]  # JSON escapes every line end it holds
            return [SentencePair(**json.loads(line)) for line in lines]
        except (OSError, ValueError, TypeError) as error:
            raise PLMError(f"{path}: unreadable ({error}); prepare the pairs again") from None
