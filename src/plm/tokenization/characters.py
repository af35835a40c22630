"""ELMo's inputs: words, the character ids its char-CNN reads, and the word vocabulary of its softmax.

The biLM reads characters, so its input needs no vocabulary: a word is its UTF-8
bytes (ids 0-255) between a begin-of-word and an end-of-word mark, cut to
`MAX_CHARACTERS` and padded, as in AllenNLP's ``ELMoCharacterMapper``, which
numbers the five marks otherwise ([`allennlp_character_id`][plm.tokenization.characters.allennlp_character_id]). Any
word, one never seen included, gets its own ids and so its own vector. Only the softmax predicts from a vocabulary: the
most frequent words of the training text, every other word mapped to ``<UNK>``; ``<S>`` and ``</S>`` open and close each
document. The vocabulary is a word-level ``tokenizers`` model, so it saves, loads and travels with a run like every
other plm tokenizer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
import tokenizers
import torch
from tokenizers import models, pre_tokenizers

from plm.errors import PLMError

MAX_CHARACTERS = 50  # a longer word keeps its first 48 bytes
BEGIN_OF_WORD, END_OF_WORD, BEGIN_OF_SENTENCE, END_OF_SENTENCE, PADDING = 256, 257, 258, 259, 260
CHARACTERS = 261  # the char-CNN's embedding rows: 256 bytes and the five marks above
# AllenNLP's ELMoCharacterMapper (bilm-tf's numbering, which its released weights were trained with) gives the same
# marks other ids, and its batch_to_ids adds 1 to every id so that 0 pads its tensors.
ALLENNLP_MARKS = {BEGIN_OF_SENTENCE: 256, END_OF_SENTENCE: 257, BEGIN_OF_WORD: 258, END_OF_WORD: 259, PADDING: 260}

SENTENCE_START, SENTENCE_END, UNKNOWN = "<S>", "</S>", "<UNK>"
WORD_ROLES = {"bos": SENTENCE_START, "eos": SENTENCE_END, "unk": UNKNOWN}

_SPLITTER = pre_tokenizers.Whitespace()  # runs of word characters, and runs of punctuation: \w+|[^\w\s]+


def split_words(text: str) -> list[str]:
    """The words of ``text``: what the vocabulary counts and the biLM reads (``don't`` -> ``don ' t``).

    Args:
        text: the text.

    Returns:
        Its runs of word characters and of punctuation, in order.
    """
    return [word for word, _ in _SPLITTER.pre_tokenize_str(text)]


def character_ids(word: str) -> list[int]:
    """The `MAX_CHARACTERS` character ids of ``word``; ``<S>`` and ``</S>`` get marks of their own.

    Args:
        word: the word.

    Returns:
        Begin-of-word, its UTF-8 bytes (at most ``MAX_CHARACTERS - 2``), end-of-word, then padding.
    """
    if word == SENTENCE_START:
        inner = [BEGIN_OF_SENTENCE]
    elif word == SENTENCE_END:
        inner = [END_OF_SENTENCE]
    else:
        inner = list(word.encode("utf-8")[: MAX_CHARACTERS - 2])
    ids = [BEGIN_OF_WORD, *inner, END_OF_WORD]
    return ids + [PADDING] * (MAX_CHARACTERS - len(ids))


def allennlp_character_id(character: int) -> int:
    """AllenNLP's id of the character plm numbers ``character``, before its +1: the row of its ``char_embed``.

    Bytes keep their ids; the marks are renumbered (`ALLENNLP_MARKS`). Reading AllenNLP's character
    embeddings through this map lets a converted model read plm's ids.

    Args:
        character: a plm character id, 0 to ``CHARACTERS - 1``.

    Returns:
        AllenNLP's id of the same character, 0 to 260; its ``batch_to_ids`` holds that id plus 1.
    """
    return ALLENNLP_MARKS.get(character, character)


def character_table(words: Sequence[str]) -> np.ndarray:
    """(len(words), MAX_CHARACTERS) int16: [`character_ids`][plm.tokenization.characters.character_ids] of each word.

    Args:
        words: the words of a sentence.

    Returns:
        The table, one row per word.
    """
    table = np.full((len(words), MAX_CHARACTERS), PADDING, dtype=np.int16)
    for row, word in enumerate(words):
        table[row] = character_ids(word)
    return table


def batch_to_ids(sentences: Sequence[Sequence[str]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Sentences (lists of words) as char ids (batch, max_words, MAX_CHARACTERS) and a mask (batch, max_words).

    The mask is 1 at words, 0 at padding; padding words are all padding characters.

    Args:
        sentences: the sentences, each a list of words.

    Returns:
        The int64 character ids and mask.

    Raises:
        PLMError: ``sentences`` is not a list of lists of non-empty strings.
    """
    check_sentences(sentences)
    return pad_character_tables([character_table(sentence) for sentence in sentences])


def add_sentence_boundaries(chars: torch.Tensor, lengths: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``<S>`` before each sentence of a batch and ``</S>`` after its last word, as AllenNLP's biLM reads them.

    Args:
        chars: (batch, words, MAX_CHARACTERS) character ids, each sentence's words first, then padding words.
        lengths: (batch,) the words of each sentence, or None: every row is full.

    Returns:
        The ids (batch, words + 2, MAX_CHARACTERS), ``<S>`` first in every row, and the lengths (batch,), each
        2 more.
    """
    batch, words, _ = chars.shape
    if lengths is None:
        lengths = torch.full((batch,), words, device=chars.device)
    padding = chars.new_full((batch, 1, MAX_CHARACTERS), PADDING)
    bounded = torch.cat([padding, chars, padding], dim=1)  # (batch, words + 2, MAX_CHARACTERS)
    bounded[:, 0] = chars.new_tensor(character_ids(SENTENCE_START))
    bounded[torch.arange(batch, device=chars.device), lengths + 1] = chars.new_tensor(character_ids(SENTENCE_END))
    return bounded, lengths + 2


def pad_character_tables(tables: Sequence[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """Sentences' character tables (words, MAX_CHARACTERS) as one batch (batch, most words, MAX_CHARACTERS).

    Padding words are all PADDING characters.

    Args:
        tables: each sentence's [`character_table`][plm.tokenization.characters.character_table].

    Returns:
        The int64 character ids (batch, most words, MAX_CHARACTERS) and the mask (batch, most words), 1 at words.
    """
    width = max((len(table) for table in tables), default=0)
    chars = torch.full((len(tables), width, MAX_CHARACTERS), PADDING, dtype=torch.long)
    mask = torch.zeros((len(tables), width), dtype=torch.long)
    for row, table in enumerate(tables):
        chars[row, : len(table)] = torch.from_numpy(table.astype(np.int64))
        mask[row, : len(table)] = 1
    return chars, mask


def check_sentences(sentences: Sequence[Sequence[str]]) -> None:
    """Raise a PLMError unless ``sentences`` is a list of lists of non-empty strings.

    Args:
        sentences: what the caller passed as sentences.

    Raises:
        PLMError: a string or non-sequence in place of the sentences or of a sentence, or a word that is not
            a non-empty string; the message names the sentence.
    """
    if isinstance(sentences, str) or not isinstance(sentences, Sequence):
        raise PLMError(f"ELMo embeds a list of sentences, each a list of words; got {type(sentences).__name__}")
    for index, sentence in enumerate(sentences):
        if isinstance(sentence, str) or not isinstance(sentence, Sequence):
            raise PLMError(
                f"sentence {index} is a {type(sentence).__name__}, not a list of words "
                "(split it, e.g. with plm.tokenization.characters.split_words)"
            )
        for word in sentence:
            if not isinstance(word, str) or not word:
                raise PLMError(f"sentence {index} holds {word!r}; every word must be a non-empty string")


def train_word_vocabulary(texts: Iterable[str], vocab_size: int) -> tuple[tokenizers.Tokenizer, dict[str, str]]:
    """A word-level vocabulary of the ``vocab_size - 3`` most frequent words, and its special-token roles.

    Ties in frequency are broken by the word, so the same texts always give the same ids;
    ids run from the most frequent word down, the order an adaptive softmax needs.

    Args:
        texts: the training texts.
        vocab_size: the vocabulary's size, ``<S>``, ``</S>`` and ``<UNK>`` included.

    Returns:
        The ``tokenizers`` model (ids 0 to 2 the special words) and the roles bos, eos and unk.

    Raises:
        PLMError: ``vocab_size`` leaves no room for a word.
    """
    if vocab_size <= len(WORD_ROLES):
        raise PLMError(
            f"a word vocabulary needs more than {len(WORD_ROLES)} entries (its special words); got {vocab_size}"
        )
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(split_words(text))
    kept = sorted(counts, key=lambda word: (-counts[word], word))[: vocab_size - len(WORD_ROLES)]
    vocabulary = {word: index for index, word in enumerate([*WORD_ROLES.values(), *kept])}
    backend = tokenizers.Tokenizer(models.WordLevel(vocabulary, unk_token=UNKNOWN))
    backend.pre_tokenizer = _SPLITTER
    backend.add_special_tokens(list(WORD_ROLES.values()))
    return backend, dict(WORD_ROLES)
