"""Pre-training examples from documents: BERT's NSP pairs, ALBERT's SOP pairs, single segments.

As in BERT's ``create_pretraining_data.py`` (ALBERT's differs only in SOP): every
document is cut into segments (:func:`split_segments`); consecutive segments are
gathered into a chunk until it reaches the target length, the room beside the
special tokens or, with probability ``short_seq_prob``, a random shorter length
(fine-tuning inputs are often short); the chunk is split at a random segment
boundary into A and B, and labelled:

- :func:`nsp_pairs` (BERT): half the time B is the rest of the chunk (label 0,
  IsNext); otherwise B is taken from a random other document (label 1, NotNext) and
  the chunk's unused segments start the next chunk.
- :func:`sentence_order_pairs` (ALBERT): A then B (label 0) or, half the time,
  swapped (label 1); both from the same document, always.
- :func:`single_segments` (MLM alone): the whole chunk as one segment.

The longer of A and B then loses tokens, at its front or its back at random, until
``[CLS] A [SEP] B [SEP]`` fits ``max_length``. The labels follow Hugging Face's
``BertForPreTraining`` (``next_sentence_label``) and ``AlbertForPreTraining``
(``sentence_order_label``).

Where BERT's code breaks a promise of the papers, this module keeps it:

- the target length is drawn for every example, not once per document, so about
  ``short_seq_prob`` of the examples are short;
- a chunk of one segment is split inside the segment at a random word boundary
  (BERT turns it into a NotNext pair, which unbalances the labels; ALBERT's code
  does so even for SOP, which then crosses documents);
- a segment longer than the room is cut into pieces that fit;
- a single segment gives its last segment back to the next chunk rather than
  losing the tokens that overflow.

Everything random is drawn from ``random.Random(seed)``: the same documents,
tokenizer and seed always give the same examples.
"""

from __future__ import annotations

import bisect
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from plm.data.corpus import Document
from plm.errors import PLMError

if TYPE_CHECKING:
    from plm.tokenization.tokenizer import Tokenizer

PAIR_TASKS = ("none", "nsp", "sop")
IS_NEXT, NOT_NEXT = 0, 1  # BertForPreTraining's next_sentence_label
IN_ORDER, SWAPPED = 0, 1  # AlbertForPreTraining's sentence_order_label
NO_LABEL = -1

# A sentence ends at . ! or ? (perhaps followed by a closing quote or bracket) before a space.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"')\]])\s+")


def split_segments(text: str) -> list[str]:
    """The segments of a document: its lines, each cut after every sentence end.

    A simple splitter is enough: segments only mark where A may end and B begin
    (BERT's "sentences" are any span of contiguous text), so an abbreviation cut as
    a sentence end or a wrapped line cut mid-sentence does no harm.

    Args:
        text: the document's text.

    Returns:
        The non-empty segments, in order.
    """
    return [piece for line in text.split("\n") for piece in _SENTENCE_END.split(line.strip()) if piece]


@dataclass(frozen=True)
class SegmentSpan:
    """Tokens ``start`` to ``stop`` (exclusive) of document ``document``'s token ids.

    Attributes:
        document: the document's index.
        start: the first token.
        stop: one past the last token.
    """

    document: int
    start: int
    stop: int

    def __len__(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class Example:
    """One pre-training sequence: ``[CLS] A [SEP] B [SEP]``, or ``[CLS] A [SEP]`` when ``b`` is None.

    Attributes:
        a: segment A.
        b: segment B, or None.
        label: the pair task's (NSP: 0 IsNext, 1 NotNext; SOP: 0 in order, 1 swapped; -1 without a pair task).
        target_length: the number of tokens of A and B this example aimed at.
    """

    a: SegmentSpan
    b: SegmentSpan | None
    label: int
    target_length: int


class TokenizedDocuments:
    """Each document as one array of token ids and word ids, with its segment boundaries.

    Word ids are numbered over the whole document (-1 for a token of no word), so the tokens of one word share
    a number and its neighbours have others. A segment without tokens is left out.

    Args:
        documents: the documents.
        tokenizer: the tokenizer (no special tokens are added).

    Attributes:
        names: each document's name.
        ids: each document's token ids.
        word_ids: each document's word ids, one per token.
        bounds: ``bounds[d]`` holds the start of every segment of document ``d`` and, last, its length.
    """

    def __init__(self, documents: Sequence[Document], tokenizer: Tokenizer) -> None:
        self.names = [document.name for document in documents]
        segments = [split_segments(document.text) for document in documents]
        encoded = iter(tokenizer.backend.encode_batch([s for doc in segments for s in doc], add_special_tokens=False))
        self.ids: list[np.ndarray] = []
        self.word_ids: list[np.ndarray] = []
        self.bounds: list[np.ndarray] = []
        for doc in segments:
            ids, words, bounds, words_before = [], [], [0], 0
            for encoding in (next(encoded) for _ in doc):
                if not encoding.ids:
                    continue
                numbered = [-1 if w is None else w + words_before for w in encoding.word_ids]
                words_before = max(words_before, max(numbered) + 1)
                ids += encoding.ids
                words += numbered
                bounds.append(len(ids))
            self.ids.append(np.array(ids, dtype=np.int64))
            self.word_ids.append(np.array(words, dtype=np.int64))
            self.bounds.append(np.array(bounds, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.ids)


class PretrainingExamples(Sequence[Example]):
    """The examples a builder made, and the token ids they stand for.

    Args:
        documents: the tokenized documents.
        examples: the examples, spans of those documents.
        task: the pair task: none, nsp or sop.
        tokenizer: the tokenizer, for its [CLS], [SEP] and padding ids.
    """

    def __init__(self, documents: TokenizedDocuments, examples: list[Example], task: str, tokenizer: Tokenizer) -> None:
        self.documents, self.examples, self.task = documents, examples, task
        self.cls_id, self.sep_id, self.pad_id = (
            tokenizer.required_id(role) for role in ("cls", "sep", "pad")  # _build checked that it has them
        )

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index):
        return self.examples[index]

    def tokens(self, span: SegmentSpan) -> np.ndarray:
        """The token ids of a span.

        Args:
            span: a span of one of the documents.

        Returns:
            The ids (a view of the document's array).
        """
        return self.documents.ids[span.document][span.start : span.stop]

    def encode(self, example: Example) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(ids, type_ids, word_ids)`` of ``[CLS] A [SEP] B [SEP]``; word id -1 for the specials.

        Args:
            example: the example.

        Returns:
            The token ids, the segment ids (0 for [CLS], A and its [SEP], 1 for B and its) and the word ids.
        """
        parts = [(example.a, 0)] + ([(example.b, 1)] if example.b is not None else [])
        ids: list[np.ndarray | list[int]] = [[self.cls_id]]
        types: list[list[int]] = [[0]]
        words: list[np.ndarray | list[int]] = [[-1]]
        for span, type_id in parts:
            ids += [self.tokens(span), [self.sep_id]]
            types += [[type_id] * (len(span) + 1)]
            words += [self.documents.word_ids[span.document][span.start : span.stop], [-1]]
        return np.concatenate(ids), np.concatenate(types), np.concatenate(words)

    def batch(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        """The examples at ``indices``, padded on the right to the longest.

        Args:
            indices: the examples' indices.

        Returns:
            int64 tensors (B, T): ``input_ids``, ``token_type_ids``, ``attention_mask``, ``special_tokens_mask`` (1 at
            [CLS], [SEP] and padding) and ``word_ids`` (-1 at those); and ``pair_labels`` (B,) for NSP and SOP.
        """
        rows = [self.encode(self.examples[i]) for i in indices]
        width = max(len(ids) for ids, _, _ in rows)
        batch = {
            "input_ids": torch.full((len(rows), width), self.pad_id, dtype=torch.long),
            "token_type_ids": torch.zeros((len(rows), width), dtype=torch.long),
            "attention_mask": torch.zeros((len(rows), width), dtype=torch.long),
            "word_ids": torch.full((len(rows), width), -1, dtype=torch.long),
        }
        for row, (ids, types, words) in enumerate(rows):
            batch["input_ids"][row, : len(ids)] = torch.from_numpy(ids)
            batch["token_type_ids"][row, : len(ids)] = torch.from_numpy(types)
            batch["attention_mask"][row, : len(ids)] = 1
            batch["word_ids"][row, : len(ids)] = torch.from_numpy(words)
        specials = torch.isin(batch["input_ids"], torch.tensor([self.cls_id, self.sep_id]))
        batch["special_tokens_mask"] = (specials | (batch["attention_mask"] == 0)).long()
        if self.task != "none":
            batch["pair_labels"] = torch.tensor([self.examples[i].label for i in indices], dtype=torch.long)
        return batch


def nsp_pairs(
    documents: Sequence[Document],
    tokenizer: Tokenizer,
    max_length: int = 128,
    seed: int = 0,
    short_seq_prob: float = 0.1,
) -> PretrainingExamples:
    """BERT's next sentence prediction pairs: B follows A (label 0) or comes from another document (1).

    Args:
        documents: the documents.
        tokenizer: the encoder's tokenizer, with [CLS], [SEP] and padding tokens.
        max_length: the most tokens of an example, special tokens included.
        seed: the seed of everything random.
        short_seq_prob: the probability of a random shorter target length.

    Returns:
        The examples.

    Raises:
        PLMError: a tokenizer without [CLS], [SEP] or padding, a ``max_length`` that leaves no room for text, a
            ``short_seq_prob`` outside [0, 1], fewer than two documents with text, or no example at all.
    """
    return _build(documents, tokenizer, "nsp", max_length, seed, short_seq_prob)


def sentence_order_pairs(
    documents: Sequence[Document],
    tokenizer: Tokenizer,
    max_length: int = 128,
    seed: int = 0,
    short_seq_prob: float = 0.1,
) -> PretrainingExamples:
    """ALBERT's sentence order prediction pairs: two consecutive segments in order (label 0) or swapped (1).

    Args:
        documents: the documents.
        tokenizer: the encoder's tokenizer, with [CLS], [SEP] and padding tokens.
        max_length: the most tokens of an example, special tokens included.
        seed: the seed of everything random.
        short_seq_prob: the probability of a random shorter target length.

    Returns:
        The examples.

    Raises:
        PLMError: a tokenizer without [CLS], [SEP] or padding, a ``max_length`` that leaves no room for text, a
            ``short_seq_prob`` outside [0, 1], or no example at all.
    """
    return _build(documents, tokenizer, "sop", max_length, seed, short_seq_prob)


def single_segments(
    documents: Sequence[Document],
    tokenizer: Tokenizer,
    max_length: int = 128,
    seed: int = 0,
    short_seq_prob: float = 0.1,
) -> PretrainingExamples:
    """One segment per example, as long as ``max_length`` allows: for masked language modelling alone.

    Args:
        documents: the documents.
        tokenizer: the encoder's tokenizer, with [CLS], [SEP] and padding tokens.
        max_length: the most tokens of an example, special tokens included.
        seed: the seed of everything random.
        short_seq_prob: the probability of a random shorter target length.

    Returns:
        The examples.

    Raises:
        PLMError: a tokenizer without [CLS], [SEP] or padding, a ``max_length`` that leaves no room for text, a
            ``short_seq_prob`` outside [0, 1], or no example at all.
    """
    return _build(documents, tokenizer, "none", max_length, seed, short_seq_prob)


BUILDERS = {"none": single_segments, "nsp": nsp_pairs, "sop": sentence_order_pairs}


def _build(
    documents: Sequence[Document], tokenizer: Tokenizer, task: str, max_length: int, seed: int, short_seq_prob: float
) -> PretrainingExamples:
    for role in ("cls", "sep", "pad"):
        if tokenizer.id_of(role) is None:
            raise PLMError(f"{tokenizer!r} has no {role} token; an encoder needs a WordPiece or Unigram tokenizer")
    room = max_length - (2 if task == "none" else 3)
    if room < (1 if task == "none" else 2):
        raise PLMError(f"max_length {max_length} leaves no room for text beside [CLS] and [SEP]")
    if not 0 <= short_seq_prob <= 1:
        raise PLMError(f"the probability of a short sequence must be in [0, 1], got {short_seq_prob}")
    docs = TokenizedDocuments(documents, tokenizer)
    builder = _Builder(docs, task, room, short_seq_prob, random.Random(seed))
    if task == "nsp" and len(builder.nonempty) < 2:
        raise PLMError(f"next sentence prediction needs at least 2 documents with text, got "
                       f"{len(builder.nonempty)}: separate the documents with blank lines, or train the masked LM "
                       "alone (--objective mlm)")
    examples = [example for d in builder.nonempty for example in builder.document_examples(d)]
    if not examples:
        raise PLMError(f"no {task} example can be made from {len(documents)} documents; is there any text?")
    return PretrainingExamples(docs, examples, task, tokenizer)


class _Builder:
    def __init__(self, docs: TokenizedDocuments, task: str, room: int, short_seq_prob: float, rng: random.Random):
        self.docs, self.task, self.room, self.short_seq_prob, self.rng = docs, task, room, short_seq_prob, rng
        self.bounds = [_fit(bounds, room) for bounds in docs.bounds]
        self.nonempty = [d for d in range(len(docs)) if len(self.bounds[d]) > 1]

    def document_examples(self, d: int) -> list[Example]:
        bounds, examples, first = self.bounds[d], [], 0
        while first < len(bounds) - 1:
            target = self.room
            if self.rng.random() < self.short_seq_prob:
                target = self.rng.randint(min(2, self.room), self.room)
            stop = first + 1
            while stop < len(bounds) - 1 and bounds[stop] - bounds[first] < target:
                stop += 1
            example, first = self.example(d, first, stop, target)
            if example is not None:
                examples.append(example)
        return examples

    def example(self, d: int, first: int, stop: int, target: int) -> tuple[Example | None, int]:
        """The example of the chunk of segments ``first`` to ``stop``; and where the next chunk starts."""
        bounds, rng = self.bounds[d], self.rng
        if self.task == "none":
            if bounds[stop] - bounds[first] > target and stop - first > 1:
                stop -= 1
            a = self._truncate(SegmentSpan(d, bounds[first], bounds[stop]), None, target)[0]
            return Example(a, None, NO_LABEL, target), stop
        if bounds[stop] - bounds[first] < 2:
            return None, stop
        if self.task == "nsp" and rng.random() < 0.5:
            middle = rng.randint(first + 1, stop - 1) if stop - first > 1 else stop
            a = SegmentSpan(d, bounds[first], bounds[middle])
            b = self._random_continuation(d, target - len(a))
            return Example(*self._truncate(a, b, self.room), NOT_NEXT, target), middle
        split = self._split(d, first, stop)
        a, b = SegmentSpan(d, bounds[first], split), SegmentSpan(d, split, bounds[stop])
        label = IS_NEXT if self.task == "nsp" else IN_ORDER
        if self.task == "sop" and rng.random() < 0.5:
            a, b, label = b, a, SWAPPED
        return Example(*self._truncate(a, b, self.room), label, target), stop

    def _split(self, d: int, first: int, stop: int) -> int:
        """A random segment boundary inside the chunk; inside its one segment, a random word boundary."""
        if stop - first > 1:
            return int(self.bounds[d][self.rng.randint(first + 1, stop - 1)])
        start, end = self.bounds[d][first], self.bounds[d][stop]
        words = self.docs.word_ids[d][start:end]
        word_starts = np.flatnonzero(words[1:] != words[:-1]) + start + 1
        return int(self.rng.choice(word_starts)) if len(word_starts) else self.rng.randint(start + 1, end - 1)

    def _random_continuation(self, d: int, length: int) -> SegmentSpan:
        """Segments of another document from a random one on, until ``length`` tokens (at least one segment)."""
        index = self.rng.randrange(len(self.nonempty) - 1)
        if index >= bisect.bisect_left(self.nonempty, d):  # skip d itself: the others, uniformly
            index += 1
        other = self.nonempty[index]
        bounds = self.bounds[other]
        first = self.rng.randrange(len(bounds) - 1)
        stop = first + 1
        while stop < len(bounds) - 1 and bounds[stop] - bounds[first] < length:
            stop += 1
        return SegmentSpan(other, bounds[first], bounds[stop])

    def _truncate(self, a: SegmentSpan, b: SegmentSpan | None, room: int) -> tuple[SegmentSpan, SegmentSpan | None]:
        """BERT's truncate_seq_pair: the longer (B on a tie) loses its first or last token until both fit."""
        spans = [[a.start, a.stop], [b.start, b.stop] if b is not None else [0, 0]]
        while sum(stop - start for start, stop in spans) > room:
            longer = spans[0] if spans[0][1] - spans[0][0] > spans[1][1] - spans[1][0] else spans[1]
            if self.rng.random() < 0.5:
                longer[0] += 1
            else:
                longer[1] -= 1
        a = SegmentSpan(a.document, *spans[0])
        return a, None if b is None else SegmentSpan(b.document, *spans[1])


def _fit(bounds: np.ndarray, room: int) -> list[int]:
    """Segment boundaries with every segment longer than ``room`` cut into near-equal pieces that fit."""
    fitted = [int(bounds[0])]
    for start, stop in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        pieces = -(-(stop - start) // room)
        fitted += [start + (stop - start) * (i + 1) // pieces for i in range(pieces)]
    return fitted
