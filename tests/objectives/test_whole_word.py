"""Whole-word and n-gram masking work with every kind of tokenizer: BPE, WordPiece and Unigram.

A word's pieces are masked all together or not at all (in transformers whole-word
masking knows only WordPiece's ``##``). :class:`MaskedLMObjective` makes real batches
from Shakespeare here, and the words are found again without the word starts the
objective uses: the tokenizer's pre-tokenizer cuts each document into words, and its
model cuts each word alone into pieces.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from plm.data.corpus import Document
from plm.objectives import MaskedLMObjective
from plm.objectives.masking import IGNORE_INDEX
from plm.tokenization.tokenizer import Tokenizer
from tests.conftest import SHARED_DATA

SHAKESPEARE = SHARED_DATA / "tinyshakespeare" / "input.txt"
VOCAB_SIZE = 400  # small, so that many words have several pieces
ENCODER_SPECIALS = {"pad": "[PAD]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}

pytestmark = pytest.mark.skipif(not SHAKESPEARE.is_file(), reason=f"{SHAKESPEARE} is not here")

TRAINERS = {
    # GPT-2's byte-level BPE with the specials an encoder needs.
    "bpe": lambda texts: Tokenizer.train_bpe(texts, VOCAB_SIZE, special_tokens=ENCODER_SPECIALS),
    "wordpiece": lambda texts: Tokenizer.train_wordpiece(texts, VOCAB_SIZE),
    "unigram": lambda texts: Tokenizer.train_unigram(texts, VOCAB_SIZE),
}


@pytest.fixture(scope="module")
def speeches() -> list[Document]:
    text = SHAKESPEARE.read_text(encoding="utf-8")[:40_000]
    return [Document(f"speech {i}", speech) for i, speech in enumerate(text.split("\n\n")) if speech.strip()]


@pytest.fixture(scope="module", params=list(TRAINERS))
def tokenizer(request: pytest.FixtureRequest, speeches: list[Document]) -> Tokenizer:
    return TRAINERS[request.param]([speech.text for speech in speeches])


def words(tokenizer: Tokenizer, text: str) -> list[list[int]]:
    """The ids of each word of ``text``: the pre-tokenizer's words, each cut into pieces alone."""
    backend = tokenizer.backend
    normalized = backend.normalizer.normalize_str(text) if backend.normalizer else text
    split = backend.pre_tokenizer.pre_tokenize_str(normalized)
    return [[token.id for token in backend.model.tokenize(word)] for word, _ in split]


@dataclass
class Word:
    pieces: int  # in the row: a word cut by truncation counts only the pieces left
    masked: int  # how many of those are targets


def masked_words(tokenizer: Tokenizer, speeches: list[Document], **options) -> list[list[Word]]:
    """The words of every validation row of a MaskedLMObjective, in order, with how many pieces are targets.

    The validation batches hold the validation examples in order, so row ``i`` is
    example ``i``: ``[CLS] A [SEP] B [SEP]`` with A and B spans of a document's tokens.
    """
    mlm = MaskedLMObjective(
        speeches[:8], speeches, tokenizer, max_length=64, batch_size=32, validation_batches_max=None, seed=1, **options
    )
    word_of = []  # document -> the number of the word of each of its tokens
    for d, speech in enumerate(speeches):
        found = words(tokenizer, speech.text)
        # The oracle cuts the text as the objective did, piece for piece.
        assert [i for w in found for i in w] == mlm.validation.split.document_tokens(d).tolist()
        word_of.append([number for number, w in enumerate(found) for _ in w])
    rows = [row for batch in mlm.validation_batches() for row in zip(batch["input_ids"], batch["labels"])]
    assert len(rows) == len(mlm.validation_examples)
    found_rows = []
    for example, (input_ids, labels) in zip(mlm.validation_examples, rows):
        original = torch.where(labels != IGNORE_INDEX, labels, input_ids)
        row, position = [], 1  # after [CLS]
        for span in (example.a, example.b):
            if span is None:
                continue
            assert original[position : position + len(span)].tolist() == mlm.validation.tokens(span).tolist()
            numbers = word_of[span.document][span.start : span.stop]
            targets = (labels[position : position + len(span)] != IGNORE_INDEX).tolist()
            for number in dict.fromkeys(numbers):
                chosen = [t for n, t in zip(numbers, targets) if n == number]
                row.append(Word(len(chosen), sum(chosen)))
            position += len(span) + 1  # and its [SEP]
        found_rows.append(row)
    return found_rows


def assert_whole_words(rows: list[list[Word]], at_least: int) -> None:
    """No word of several pieces is partly masked, and at least ``at_least`` are fully masked."""
    multi_piece = [w for row in rows for w in row if w.pieces > 1]
    partly = [w for w in multi_piece if 0 < w.masked < w.pieces]
    assert not partly, f"{len(partly)} of {len(multi_piece)} words of several pieces are partly masked"
    assert sum(w.masked == w.pieces for w in multi_piece) >= at_least


def test_whole_word_masking_takes_all_the_pieces_of_a_word_or_none(tokenizer, speeches):
    rows = masked_words(tokenizer, speeches, pair_task="none", whole_word=True)
    assert_whole_words(rows, at_least=100)


def test_ngram_masking_takes_runs_of_whole_words(tokenizer, speeches):
    """ALBERT's setting: SOP pairs, spans of up to 3 words with p(n) = 6/11, 3/11, 2/11."""
    rows = masked_words(tokenizer, speeches, pair_task="sop", max_ngram=3)
    assert_whole_words(rows, at_least=100)
    # Spans of 2 or 3 words (p = 3/11 + 2/11) hold 2/3 of the masked words, less what the
    # budget and [SEP] cut; masking lone words puts fewer than 0.3 beside another masked word.
    masked = [[w.masked > 0 for w in row] for row in rows]
    beside = sum(m and ((i > 0 and row[i - 1]) or (i + 1 < len(row) and row[i + 1]))
                 for row in masked for i, m in enumerate(row))
    assert beside / sum(map(sum, masked)) > 0.45
