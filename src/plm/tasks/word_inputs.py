"""What a model over words reads beside the token ids: where each word starts (and ends), and its characters.

The feature-based model ([`plm.tasks.feature_based`][plm.tasks.feature_based]) reads one vector per word,
taken at the word's first sub-word; a word is what the tokenizer's pre-tokenizer splits
(BERT's words and punctuation), numbered in ``word_ids`` as [`Encoding`][plm.tokenization.tokenizer.Encoding]
numbers them. A frozen ELMo beside the encoder reads the same words' characters; their
text is read back from the pieces' character offsets, so ELMo sees each word as written
(its case included) even when the encoder's tokenizer lowercases. A sentence pair's words
are A's then B's, one sequence, in the order of ``[CLS] A [SEP] B [SEP]``; a QA window's
are the question's then the window's context words.
"""

from __future__ import annotations

from collections.abc import Sequence

from plm.tasks.encoding import Feature, first_pieces
from plm.tasks.readers import QAExample, TextExample
from plm.tokenization.characters import character_table
from plm.tokenization.tokenizer import Tokenizer

TokenSpan = tuple[str, int, int]  # the text a token comes from, and the token's characters in it: [start, end)


def last_pieces(word_ids: Sequence[int | None]) -> list[bool]:
    """Which tokens end a word: where a span that ends with the word ends.

    Args:
        word_ids: each token's word index, None for special tokens.

    Returns:
        One flag per token: True at the last piece of each word.
    """
    return [word is not None and (i + 1 == len(word_ids) or word_ids[i + 1] != word) for i, word in enumerate(word_ids)]


def word_texts(word_ids: Sequence[int | None], spans: Sequence[TokenSpan | None]) -> list[str]:
    """Each word's text: from its first piece's first character to its last piece's last.

    Args:
        word_ids: each token's word index, None for special tokens.
        spans: each token's text and characters (None for a special token).

    Returns:
        The words, in order.
    """
    words, start = [], 0
    for first, last, span in zip(first_pieces(word_ids), last_pieces(word_ids), spans):
        if first:
            assert span is not None  # a piece of a word comes from a text
            start = span[1]
        if last:
            assert span is not None
            words.append(span[0][start:span[2]])
    return words


def word_inputs(word_ids: Sequence[int | None], words: Sequence[str] | None = None, ends: bool = False) -> Feature:
    """The word inputs of one sequence: ``word_starts``, with ``ends`` ``word_ends``, with ``words`` ``char_ids``.

    Args:
        word_ids: each token's word index, None for special tokens.
        words: the words' texts, for ELMo; None: no ``char_ids``.
        ends: mark each word's last piece too (a span ends there).

    Returns:
        ``word_starts`` (time,) 1 at each word's first piece; ``word_ends`` (time,) 1 at its last;
        ``char_ids`` (words, MAX_CHARACTERS).
    """
    feature: Feature = {"word_starts": [int(first) for first in first_pieces(word_ids)]}
    if ends:
        feature["word_ends"] = [int(last) for last in last_pieces(word_ids)]
    if words is not None:
        feature["char_ids"] = character_table(words)
    return feature


def encode_text_words(tokenizer: Tokenizer, example: TextExample, max_length: int, characters: bool) -> Feature:
    """A sentence or pair as ``[CLS] A [SEP] B [SEP]`` (see `encode_text`), with its words.

    Args:
        tokenizer: the encoder's tokenizer.
        example: the sentence and its pair, if any.
        max_length: the most tokens, special ones included (the longer text loses tokens first).
        characters: add the ELMo ``char_ids`` of the words that kept a piece.

    Returns:
        The feature: ``input_ids``, ``token_type_ids``, ``word_ids`` and
            [`word_inputs`][plm.tasks.word_inputs.word_inputs]' (time,) lists.
    """
    encoding = tokenizer.encode_pair(example.text, example.text_pair, max_length=max_length)
    texts = (example.text, example.text_pair or "")  # by segment: A's tokens have type 0, B's 1
    spans = [(texts[segment], *offset) for segment, offset in zip(encoding.type_ids, encoding.offsets)]
    words = word_texts(encoding.word_ids, spans) if characters else None
    feature = {"input_ids": list(encoding.ids), "token_type_ids": list(encoding.type_ids),
               "word_ids": list(encoding.word_ids)}
    return feature | word_inputs(encoding.word_ids, words)


def window_words(tokenizer: Tokenizer, example: QAExample, window: Feature, characters: bool) -> Feature:
    """A QA window's word inputs, and its answer widened to whole words.

    A model over words scores a word as a span's start at its first piece and as its end at its last, so an
    answer that starts or ends inside a word (SQuAD's "1990" of "1990s") trains on the whole word.

    Args:
        tokenizer: the encoder's tokenizer, as [`encode_windows`][plm.tasks.qa.encode_windows] read the question with
            it.
        example: the question and its context.
        window: one of its windows (see [`encode_windows`][plm.tasks.qa.encode_windows]).
        characters: add the ELMo ``char_ids`` of the window's words.

    Returns:
        [`word_inputs`][plm.tasks.word_inputs.word_inputs] with ``word_ends``, and the widened ``start_positions`` and
        ``end_positions`` when the window has an answer.
    """
    word_ids = window["word_ids"]
    words = None
    if characters:  # the window keeps no offsets for the question, no answer's place: read them again
        question = iter(tokenizer.backend.encode(example.question, add_special_tokens=False).offsets)
        spans = [None if word is None else (example.question, *next(question)) if offset is None
                 else (example.context, *offset) for word, offset in zip(word_ids, window["offsets"])]
        words = word_texts(word_ids, spans)
    feature = word_inputs(word_ids, words, ends=True)
    start, end = window.get("start_positions", 0), window.get("end_positions", 0)
    if start or end:  # 0 is the null answer, at [CLS]
        starts, ends = feature["word_starts"], feature["word_ends"]
        feature["start_positions"] = max(i for i in range(start + 1) if starts[i])
        feature["end_positions"] = min(i for i in range(end, len(ends)) if ends[i])
    return feature
