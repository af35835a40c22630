"""Examples as an encoder reads them, and predictions back as words.

- sentences and pairs: ``[CLS] A [SEP] B [SEP]`` with segment ids 0 for A, 1 for B;
- tagging: each word's label on its first sub-word, every other piece (and every
  special token) labelled ``IGNORE`` so the loss skips it; a prediction per word is
  read back from that first piece; a sentence read in its document has the document's
  pieces around it, as many as fit, read as context and labelled ``IGNORE``;
- multiple choice: one ``[CLS] context [SEP] prefix ending [SEP]`` per choice.

Features are plain dicts of int lists; [`collate`][plm.tasks.encoding.collate] pads a list of them into a batch.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

import torch

from plm.errors import PLMError
from plm.tasks.readers import ChoiceExample, TaggedSentence, TextExample
from plm.tokenization.characters import pad_character_tables
from plm.tokenization.tokenizer import Tokenizer

IGNORE = -100  # cross_entropy's ignore_index: a position without a label

Feature = dict[str, Any]


def encode_text(tokenizer: Tokenizer, example: TextExample, max_length: int) -> Feature:
    """A sentence (or pair) as ``[CLS] A [SEP] B [SEP]``, truncated to ``max_length`` tokens.

    Args:
        tokenizer: the model's tokenizer.
        example: the sentence and its pair, if any.
        max_length: the most tokens, special ones included (the longer of A and B loses tokens first).

    Returns:
        The feature: ``input_ids`` and ``token_type_ids`` (0 for A, 1 for B), (time,) lists.
    """
    encoding = tokenizer.encode_pair(example.text, example.text_pair, max_length=max_length)
    return {"input_ids": list(encoding.ids), "token_type_ids": list(encoding.type_ids)}


def encode_words(
    tokenizer: Tokenizer,
    words: Sequence[str],
    max_length: int,
    context: tuple[Sequence[str], Sequence[str]] = ((), ()),
) -> tuple[list[int], list[int | None]]:
    """Ids of pre-split ``words`` with the special tokens, and each token's word index (None for specials).

    A sentence too long for ``max_length`` loses its last pieces; its last words then
    have no token ([`word_predictions`][plm.tasks.encoding.word_predictions] fills them in).
    The ``context`` words before and after the sentence (its document's) fill the room the sentence leaves,
    centred on it: half before and half after, or more on one side where the other runs out. The context is
    cut by pieces, not words, and its tokens have no word index, as special tokens have none: nothing is
    read from them but what the encoder makes of them.

    Args:
        tokenizer: the model's tokenizer.
        words: the sentence's words.
        max_length: the most tokens, special ones included.
        context: the words before the sentence and after it.

    Returns:
        The token ids and, per token, the index of its word in ``words`` (None for a special or context token).

    Raises:
        PLMError: a ``max_length`` that leaves no room beside the special tokens.
    """
    budget = max_length - tokenizer.backend.num_special_tokens_to_add(is_pair=False)
    if budget < 1:
        raise PLMError(f"max_length {max_length} leaves no room for the words beside the special tokens")
    before, after = list(context[0][-budget:]), list(context[1][:budget])  # a word has a piece at least
    pieces = tokenizer.backend.encode([*before, *words, *after], is_pretokenized=True, add_special_tokens=False)
    first, last = len(before), len(before) + len(words)  # the sentence's words among them
    piece_words = [word for word in pieces.word_ids if word is not None]  # every piece has a word: no specials yet
    start, stop = (bisect.bisect_left(piece_words, word) for word in (first, last))  # its pieces: [start, stop)
    kept = min(stop - start, budget)
    room = budget - kept
    left = min(start, max(room // 2, room - (len(pieces) - stop)))  # the pieces of context before it
    end = start + kept + min(len(pieces) - stop, room - left)
    pieces.truncate(end)
    pieces.truncate(end - start + left, direction="left")
    joined = tokenizer.backend.post_process(pieces, None, add_special_tokens=True)
    word_ids = [None if special or word is None or not first <= word < last else word - first
                for word, special in zip(joined.word_ids, joined.special_tokens_mask)]
    return list(joined.ids), word_ids


def first_pieces(word_ids: Sequence[int | None]) -> list[bool]:
    """Which tokens start a word: the one position per word that carries its label.

    Args:
        word_ids: each token's word index, None for special tokens (see
            [`encode_words`][plm.tasks.encoding.encode_words]).

    Returns:
        One flag per token: True at the first piece of each word.
    """
    return [word is not None and (i == 0 or word_ids[i - 1] != word) for i, word in enumerate(word_ids)]


def encode_tagged(tokenizer: Tokenizer, sentence: TaggedSentence, tag_ids: dict[str, int], max_length: int) -> Feature:
    """A tagged sentence as token ids, each word's tag id on its first piece and ``IGNORE`` everywhere else.

    A sentence with a document is read within it: the document's words around it fill the rest of ``max_length``
    (see [`encode_words`][plm.tasks.encoding.encode_words]), labelled ``IGNORE``.

    Args:
        tokenizer: the model's tokenizer.
        sentence: the words and their tags (no tags: every label is ``IGNORE``).
        tag_ids: each tag's label id.
        max_length: the most tokens, special ones included; the last words may be cut off.

    Returns:
        The feature: ``input_ids``, ``labels`` and ``word_ids`` (see [`encode_words`][plm.tasks.encoding.encode_words]),
            (time,) lists.

    Raises:
        PLMError: as [`encode_words`][plm.tasks.encoding.encode_words].
    """
    ids, word_ids = encode_words(tokenizer, sentence.words, max_length, sentence.context)
    labels = [
        tag_ids[sentence.tags[word]] if first and word is not None and sentence.tags else IGNORE
        for word, first in zip(word_ids, first_pieces(word_ids))
    ]
    return {"input_ids": ids, "labels": labels, "word_ids": word_ids}


def kept_words(sentence: TaggedSentence, word_ids: Sequence[int | None]) -> list[str]:
    """The words that kept a first piece (truncation cuts the last ones), in order.

    That is what a word-level model beside the encoder (ELMo) must read so that its word k is the encoder's
    word k.

    Args:
        sentence: the sentence.
        word_ids: its tokens' word indices (see [`encode_words`][plm.tasks.encoding.encode_words]).

    Returns:
        The words.
    """
    return [
        sentence.words[word] for word, first in zip(word_ids, first_pieces(word_ids)) if first and word is not None
    ]


def word_predictions(
    token_predictions: Sequence[int], word_ids: Sequence[int | None], words: int, default: int
) -> list[int]:
    """One prediction per word, read at its first piece; ``default`` for a word cut off by truncation.

    Args:
        token_predictions: a prediction per token.
        word_ids: each token's word index, None for special tokens.
        words: the number of words in the sentence.
        default: the prediction for a word without a token.

    Returns:
        The ``words`` predictions.
    """
    predictions = [default] * words
    for prediction, word, first in zip(token_predictions, word_ids, first_pieces(word_ids)):
        if first and word is not None:  # a first piece has a word
            predictions[word] = int(prediction)
    return predictions


def encode_choice(tokenizer: Tokenizer, example: ChoiceExample, max_length: int) -> Feature:
    """A multiple-choice example as (choices, time) lists: the context as A, the shared prefix and each ending as B.

    Args:
        tokenizer: the model's tokenizer.
        example: the context, the prefix and the endings.
        max_length: the most tokens per choice, special ones included.

    Returns:
        The feature: ``input_ids`` and ``token_type_ids``, one list per ending.
    """
    encodings = [
        tokenizer.encode_pair(example.context, f"{example.prefix} {ending}".strip(), max_length=max_length)
        for ending in example.endings
    ]
    return {"input_ids": [list(e.ids) for e in encodings], "token_type_ids": [list(e.type_ids) for e in encodings]}


def collate(features: Sequence[Feature], pad_id: int) -> dict[str, torch.Tensor]:
    """A batch of features, padded on the right.

    ``input_ids`` are padded with ``pad_id``, ``token_type_ids`` with 0, token ``labels`` with ``IGNORE``,
    ``word_starts`` and ``word_ends`` with 0; the words' ``char_ids`` become (batch, most words, MAX_CHARACTERS),
    padded with PADDING. Ids may be (time,) or (choices, time) per feature; every other key is stacked as it is
    (a class id, a score, a start position). ``word_ids`` stay with the examples and are not batched.

    Args:
        features: the features, all with the same keys.
        pad_id: the tokenizer's padding id.

    Returns:
        The batch's int64 tensors (float32 for float values), (batch, time) or (batch, choices, time) for the
        ids, with ``attention_mask`` added (1 = token, 0 = padding).
    """
    width = max(width_of(f) for f in features)
    batch: dict[str, torch.Tensor] = {}
    for key in features[0]:
        if key == "word_ids":
            continue
        values = [f[key] for f in features]
        if key == "char_ids":
            batch[key] = pad_character_tables(values)[0]
        elif key in ("input_ids", "token_type_ids", "word_starts", "word_ends") or (
                key == "labels" and isinstance(values[0], list)):
            fill = {"input_ids": pad_id, "token_type_ids": 0, "labels": IGNORE, "word_starts": 0, "word_ends": 0}[key]
            batch[key] = torch.tensor([_pad(v, width, fill) for v in values], dtype=torch.long)
        else:
            batch[key] = torch.tensor(values, dtype=torch.float32 if isinstance(values[0], float) else torch.long)
    batch["attention_mask"] = torch.tensor([_pad(_ones(f["input_ids"]), width, 0) for f in features], dtype=torch.long)
    return batch


def width_of(feature: Feature) -> int:
    """The tokens a feature pads to: its length, or its longest choice's.

    Args:
        feature: the feature.

    Returns:
        The length of its longest row of ``input_ids``.
    """
    return max(len(row) for row in _rows(feature["input_ids"]))


def _rows(ids: list) -> list[list[int]]:
    return ids if ids and isinstance(ids[0], list) else [ids]


def _ones(ids: list) -> list:
    return [[1] * len(row) for row in ids] if ids and isinstance(ids[0], list) else [1] * len(ids)


def _pad(values: list, width: int, fill: int) -> list:
    if values and isinstance(values[0], list):
        return [row + [fill] * (width - len(row)) for row in values]
    return values + [fill] * (width - len(values))
