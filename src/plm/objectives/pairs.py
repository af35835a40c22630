"""Pre-training examples from a prepared split: BERT's NSP pairs, ALBERT's SOP pairs, single segments.

As in BERT's ``create_pretraining_data.py`` (ALBERT's differs only in SOP): a document's
sentences ([`plm.data.segments`][plm.data.segments]) are its segments; consecutive segments are gathered
into a chunk until it reaches the target length, the room beside the special tokens or,
with probability ``short_seq_prob``, a random shorter length (fine-tuning inputs are
often short); the chunk is split at a random segment boundary into A and B, and labelled:

- NSP (BERT): half the time B is the rest of the chunk (label 0, IsNext); otherwise B is
  taken from a random other document (label 1, NotNext) and the chunk's unused segments
  start the next chunk.
- SOP (ALBERT): A then B (label 0) or, half the time, swapped (label 1); both from the
  same document, always.
- none (MLM alone): the whole chunk as one segment.

The longer of A and B then loses tokens, at its front or its back at random, until
``[CLS] A [SEP] B [SEP]`` fits ``max_length``. The labels follow Hugging Face's
``BertForPreTraining`` (``next_sentence_label``) and ``AlbertForPreTraining``
(``sentence_order_label``).

Two ways through the documents, one cutting rule:

- [`PairExamples.in_order`][plm.objectives.pairs.PairExamples.in_order] walks the documents from the first, chunk after
  chunk, as BERT's script does: validation and ``plm eval pairs`` score these, the same every time.
- [`PairExamples.at_random`][plm.objectives.pairs.PairExamples.at_random] draws each training example afresh: a sentence
  uniformly over the corpus, the chunk from it on (and back before it, where its document ends first). Nothing is built
  up front, so a corpus of any size costs no memory, and a batch is a pure function of its seed.

Where BERT's code breaks a promise of the papers, this module keeps it:

- the target length is drawn for every example, not once per document, so about
  ``short_seq_prob`` of the examples are short;
- a chunk of one segment is split inside the segment at a random word boundary
  (BERT turns it into a NotNext pair, which unbalances the labels; ALBERT's code
  does so even for SOP, which then crosses documents);
- a segment longer than the room is cut into pieces that fit;
- a single segment gives its last segment back to the next chunk rather than
  losing the tokens that overflow.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from plm.data.prepared import PreparedSplit
from plm.errors import PLMError

if TYPE_CHECKING:
    from plm.tokenization.tokenizer import Tokenizer

PAIR_TASKS = ("none", "nsp", "sop")
IS_NEXT, NOT_NEXT = 0, 1  # BertForPreTraining's next_sentence_label
IN_ORDER, SWAPPED = 0, 1  # AlbertForPreTraining's sentence_order_label
NO_LABEL = -1


@dataclass(frozen=True)
class SegmentSpan:
    """Tokens ``start`` to ``stop`` (exclusive) of document ``document``.

    Attributes:
        document: the document's number in its split.
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


class PairExamples:
    """The examples of a pair task over a prepared split, and the batches they make.

    Args:
        split: the documents.
        tokenizer: the encoder's tokenizer, with [CLS], [SEP] and padding tokens.
        task: the pair task: none, nsp or sop.
        max_length: the most tokens of an example, special tokens included.
        short_seq_prob: the probability of a random shorter target length.

    Raises:
        PLMError: an unknown task, a tokenizer without [CLS], [SEP] or padding, a ``max_length`` that leaves no room
            for text, a ``short_seq_prob`` outside [0, 1], no document, or (NSP) fewer than two.
    """

    def __init__(self, split: PreparedSplit, tokenizer: Tokenizer, task: str, max_length: int = 128,
                 short_seq_prob: float = 0.1) -> None:
        if task not in PAIR_TASKS:
            raise PLMError(f"unknown pair task {task!r}; choose one of {', '.join(PAIR_TASKS)}")
        for role in ("cls", "sep", "pad"):
            if tokenizer.id_of(role) is None:
                raise PLMError(f"{tokenizer!r} has no {role} token; an encoder needs a WordPiece or Unigram tokenizer")
        self.room = max_length - (2 if task == "none" else 3)
        if self.room < (1 if task == "none" else 2):
            raise PLMError(f"max_length {max_length} leaves no room for text beside [CLS] and [SEP]")
        if not 0 <= short_seq_prob <= 1:
            raise PLMError(f"the probability of a short sequence must be in [0, 1], got {short_seq_prob}")
        if len(split) == 0:
            raise PLMError(f"no {task} example can be made: the text has no tokens")
        if task == "nsp" and len(split) < 2:
            raise PLMError(f"next sentence prediction needs at least 2 documents with text, got {len(split)}: "
                           "separate the documents with blank lines, or train the masked LM alone (objective mlm)")
        self.split, self.task, self.short_seq_prob = split, task, short_seq_prob
        self.cls_id, self.sep_id, self.pad_id = (tokenizer.required_id(role) for role in ("cls", "sep", "pad"))

    def in_order(self, seed: int, count: int | None = None) -> Iterator[Example]:
        """The examples of the documents from the first on, chunk after chunk, as BERT's script makes them.

        Args:
            seed: the seed of everything random.
            count: stop after this many (None: at the end of the split).

        Yields:
            The examples; the same ones for the same seed.
        """
        rng, made = random.Random(seed), 0
        for document in range(len(self.split)):
            bounds, first = self.bounds(document), 0
            while first < len(bounds) - 1:
                target = self._target(rng)
                stop = first + 1
                while stop < len(bounds) - 1 and bounds[stop] - bounds[first] < target:
                    stop += 1
                example, first = self._example(document, bounds, first, stop, target, rng)
                if example is not None:
                    yield example
                    made += 1
                    if made == count:
                        return

    def at_random(self, rng: random.Random) -> Example:
        """One example from a chunk that starts at a random sentence of the split.

        The chunk grows forward from the sentence until it holds its target length, and back
        before it where its document ends first; a chunk too short for a pair is drawn again.

        Args:
            rng: the generator of every choice.

        Returns:
            The example.
        """
        while True:
            document, sentence = self.split.document_of_sentence(rng.randrange(self.split.sentence_count))
            bounds = self.bounds(document)
            first = bisect.bisect_left(bounds, int(self.split.sentence_bounds(document)[sentence]))
            first = min(first, len(bounds) - 2)
            target = self._target(rng)
            stop = first + 1
            while stop < len(bounds) - 1 and bounds[stop] - bounds[first] < target:
                stop += 1
            while first > 0 and bounds[stop] - bounds[first] < target:
                first -= 1
            example, _ = self._example(document, bounds, first, stop, target, rng)
            if example is not None:
                return example

    def bounds(self, document: int) -> list[int]:
        """The segment boundaries of ``document``, every segment longer than the room cut into near-equal pieces.

        Args:
            document: the document's number.

        Returns:
            The offset of each segment's first token and, last, the document's length.
        """
        raw = self.split.sentence_bounds(document).tolist()
        fitted = [raw[0]]
        for start, stop in zip(raw[:-1], raw[1:]):
            pieces = -(-(stop - start) // self.room)
            fitted += [start + (stop - start) * (i + 1) // pieces for i in range(pieces)]
        return fitted

    def _target(self, rng: random.Random) -> int:
        if rng.random() < self.short_seq_prob:
            return rng.randint(min(2, self.room), self.room)
        return self.room

    def _example(self, d: int, bounds: list[int], first: int, stop: int, target: int,
                 rng: random.Random) -> tuple[Example | None, int]:
        """The example of the chunk of segments ``first`` to ``stop``; and where the next chunk starts."""
        if self.task == "none":
            if bounds[stop] - bounds[first] > target and stop - first > 1:
                stop -= 1
            a = self._truncate(SegmentSpan(d, bounds[first], bounds[stop]), None, target, rng)[0]
            return Example(a, None, NO_LABEL, target), stop
        if bounds[stop] - bounds[first] < 2:
            return None, stop
        if self.task == "nsp" and rng.random() < 0.5:
            middle = rng.randint(first + 1, stop - 1) if stop - first > 1 else stop
            a = SegmentSpan(d, bounds[first], bounds[middle])
            b = self._random_continuation(d, target - len(a), rng)
            return Example(*self._truncate(a, b, self.room, rng), NOT_NEXT, target), middle
        split = self._split(d, bounds, first, stop, rng)
        a, b = SegmentSpan(d, bounds[first], split), SegmentSpan(d, split, bounds[stop])
        label = IS_NEXT if self.task == "nsp" else IN_ORDER
        if self.task == "sop" and rng.random() < 0.5:
            a, b, label = b, a, SWAPPED
        return Example(*self._truncate(a, b, self.room, rng), label, target), stop

    def _split(self, d: int, bounds: list[int], first: int, stop: int, rng: random.Random) -> int:
        """A random segment boundary inside the chunk; inside its one segment, a random word boundary."""
        if stop - first > 1:
            return bounds[rng.randint(first + 1, stop - 1)]
        start, end = bounds[first], bounds[stop]
        word_starts = np.flatnonzero(self.split.document_word_starts(d)[start + 1 : end]) + start + 1
        return int(rng.choice(word_starts)) if len(word_starts) else rng.randint(start + 1, end - 1)

    def _random_continuation(self, d: int, length: int, rng: random.Random) -> SegmentSpan:
        """Segments of another document from a random one on, until ``length`` tokens (at least one segment)."""
        other = rng.randrange(len(self.split) - 1)
        other += other >= d  # skip d itself: the others, uniformly
        bounds = self.bounds(other)
        first = rng.randrange(len(bounds) - 1)
        stop = first + 1
        while stop < len(bounds) - 1 and bounds[stop] - bounds[first] < length:
            stop += 1
        return SegmentSpan(other, bounds[first], bounds[stop])

    @staticmethod
    def _truncate(a: SegmentSpan, b: SegmentSpan | None, room: int,
                  rng: random.Random) -> tuple[SegmentSpan, SegmentSpan | None]:
        """BERT's truncate_seq_pair: the longer (B on a tie) loses its first or last token until both fit."""
        spans = [[a.start, a.stop], [b.start, b.stop] if b is not None else [0, 0]]
        while sum(stop - start for start, stop in spans) > room:
            longer = spans[0] if spans[0][1] - spans[0][0] > spans[1][1] - spans[1][0] else spans[1]
            if rng.random() < 0.5:
                longer[0] += 1
            else:
                longer[1] -= 1
        a = SegmentSpan(a.document, *spans[0])
        return a, None if b is None else SegmentSpan(b.document, *spans[1])

    def tokens(self, span: SegmentSpan) -> np.ndarray:
        """The token ids of a span.

        Args:
            span: a span of one of the documents.

        Returns:
            The ids.
        """
        return np.asarray(self.split.document_tokens(span.document)[span.start : span.stop], np.int64)

    def encode(self, example: Example) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(ids, type_ids, word_ids)`` of ``[CLS] A [SEP] B [SEP]``; word id -1 for the specials.

        Args:
            example: the example.

        Returns:
            The token ids, the segment ids (0 for [CLS], A and its [SEP], 1 for B and its) and the word ids (those
            of a word share a number, and its neighbours have others).
        """
        parts = [(example.a, 0)] + ([(example.b, 1)] if example.b is not None else [])
        ids: list[np.ndarray | list[int]] = [[self.cls_id]]
        types: list[list[int]] = [[0]]
        words: list[np.ndarray | list[int]] = [[-1]]
        numbered = 0
        for span, type_id in parts:
            begins = self.split.document_word_starts(span.document)[span.start : span.stop]
            ids += [self.tokens(span), [self.sep_id]]
            types += [[type_id] * (len(span) + 1)]
            words += [np.cumsum(begins) + numbered, [-1]]
            numbered += int(begins.sum()) + 1
        return np.concatenate(ids), np.concatenate(types), np.concatenate(words)

    def batch(self, examples: Sequence[Example]) -> dict[str, torch.Tensor]:
        """The ``examples``, padded on the right to the longest.

        Args:
            examples: the examples.

        Returns:
            int64 tensors (B, T): ``input_ids``, ``token_type_ids``, ``attention_mask``, ``special_tokens_mask`` (1 at
            [CLS], [SEP] and padding) and ``word_ids`` (-1 at those); and ``pair_labels`` (B,) for NSP and SOP.
        """
        rows = [self.encode(example) for example in examples]
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
        batch["special_tokens_mask"] = (batch["word_ids"] < 0).long()
        if self.task != "none":
            batch["pair_labels"] = torch.tensor([example.label for example in examples], dtype=torch.long)
        return batch
