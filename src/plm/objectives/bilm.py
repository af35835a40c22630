"""The biLM objective (ELMo): sum_k log p(t_k | t_1..t_{k-1}) + log p(t_k | t_{k+1}..t_N).

The text is a prepared corpus of a word vocabulary ([`plm.data.prepared`][plm.data.prepared]): one stream
of words, each document between ``<S>`` and ``</S>``. A batch is random contiguous blocks
of T + 2 words: the middle T are read (as characters), the forward LM at position k
predicts the word after it and the backward LM the word before it, so both directions
have T targets. The two log-likelihoods are two loss terms, ``forward`` and ``backward``,
which the trainer logs apiece; validation reports the perplexity of each.

The softmax predicts the vocabulary's ids, ``<UNK>`` for a rare word; the char-CNN reads
every word as spelled, a rare one too, whose spelling the prepared corpus keeps.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from plm.data.prepared import PreparedCorpus, PreparedSplit
from plm.data.tokens import BlockSampler, validation_blocks
from plm.errors import PLMError
from plm.tokenization.characters import PADDING, SENTENCE_END, SENTENCE_START, UNKNOWN, character_ids, character_table
from plm.tokenization.tokenizer import Tokenizer

TERMS = ("forward", "backward")


class SpelledWords:
    """A split's words as the biLM's blocks are read from them: a known word by its id, a rare one by its place.

    Indexed with an array of positions, it gives (the same shape) each word's vocabulary id, or
    ``-1 - position`` for a word the vocabulary maps to ``<UNK>``, whose spelling
    [`spelling`][plm.objectives.bilm.SpelledWords.spelling] then finds (see [`TokenIds`][plm.data.tokens.TokenIds]).

    Args:
        split: the prepared split.
        unknown_id: the vocabulary's ``<UNK>``.
    """

    def __init__(self, split: PreparedSplit, unknown_id: int) -> None:
        self.split, self.unknown_id = split, unknown_id
        self.part_starts = np.cumsum([0] + [len(part.tokens) for part in split.parts])  # (parts + 1,)

    def __len__(self) -> int:
        return len(self.split.tokens)

    def __getitem__(self, index: np.ndarray) -> np.ndarray:
        index = np.asarray(index)
        ids = self.split.tokens[index].astype(np.int64)
        unknown = ids == self.unknown_id
        ids[unknown] = -1 - index[unknown]
        return ids

    def spelling(self, position: int) -> str:
        """The spelling of the rare word at ``position``.

        Args:
            position: its place in the split's stream.

        Returns:
            The word as the text spelled it.
        """
        # side="right": past the empty parts that start where the next one does
        number = int(np.searchsorted(self.part_starts, position, side="right")) - 1
        return self.split.parts[number].spelling(position - int(self.part_starts[number]))


@dataclass(frozen=True)
class WordStreams:
    """Training and validation words, and each vocabulary word's characters.

    Attributes:
        train: the training words.
        validation: the validation words.
        characters: (vocabulary, MAX_CHARACTERS) int16, the character ids of each vocabulary word.
        unknown_id: the vocabulary's ``<UNK>``.
    """

    train: SpelledWords
    validation: SpelledWords
    characters: np.ndarray  # (vocabulary, MAX_CHARACTERS) int16
    unknown_id: int


def word_streams(corpus: PreparedCorpus, tokenizer: Tokenizer) -> WordStreams:
    """The words of a corpus prepared with a word vocabulary (``plm tokenizer train --kind words``).

    Args:
        corpus: the prepared corpus.
        tokenizer: its word vocabulary, with ``<S>``, ``</S>`` and ``<UNK>``.

    Returns:
        The streams.

    Raises:
        PLMError: a corpus prepared with another kind of tokenizer.
    """
    unknown_id = corpus.manifest.get("unknown_id")
    if unknown_id is None:
        raise PLMError(f"the biLM predicts words: its tokenizer must be a word vocabulary with {SENTENCE_START}, "
                       f"{SENTENCE_END} and {UNKNOWN} (a tokenizer of kind words), and "
                       f"its corpus prepared with it; {corpus.path} was prepared with a subword tokenizer")
    spellings = [""] * tokenizer.vocab_size
    for word, index in tokenizer.backend.get_vocab().items():
        spellings[index] = word
    characters = character_table(spellings)
    characters[[index for index, word in enumerate(spellings) if not word]] = PADDING  # ids no word has
    return WordStreams(SpelledWords(corpus.train, unknown_id), SpelledWords(corpus.validation, unknown_id),
                       characters, unknown_id)


class BiLMObjective:
    """Forward and backward language modelling over blocks of words, read as characters.

    Args:
        streams: the words (see [`word_streams`][plm.objectives.bilm.word_streams]).
        block_size: T, the words a model reads per sequence (blocks are T + 2, for the targets).
        batch_size: blocks per micro-batch.
        seed: the seed of the blocks' draw.
        validation_blocks_max: the most validation blocks, or None for all.

    Raises:
        PLMError: a text too short for one block.
    """

    def __init__(
        self,
        streams: WordStreams,
        block_size: int,
        batch_size: int,
        seed: int = 0,
        validation_blocks_max: int | None = 64,
    ) -> None:
        self.streams = streams
        # Blocks of block_size + 2 words: one more on each side of the block_size words read.
        self.sampler = BlockSampler(streams.train, block_size + 1, batch_size, seed)
        self.validation = validation_blocks(streams.validation, block_size + 1, validation_blocks_max)
        self.batch_size = batch_size
        self.train_tokens = len(streams.train)

    def examples(self, blocks: torch.Tensor, words: SpelledWords) -> dict[str, torch.Tensor]:
        """Words (B, T + 2) -> chars of the middle T words (B, T, chars) and both directions' targets (B, T).

        Args:
            blocks: (B, T + 2) words of ``words``, as it gives them: ids, and ``-1 - position`` for a rare word.
            words: the split they were read from.

        Returns:
            ``chars`` (B, T, MAX_CHARACTERS), ``next_words`` and ``previous_words`` (B, T), all int64.
        """
        codes = blocks.numpy()
        ids = np.where(codes >= 0, codes, self.streams.unknown_id)  # (B, T + 2)
        chars = self.streams.characters[ids[:, 1:-1]].astype(np.int64)  # (B, T, MAX_CHARACTERS)
        for row, column in zip(*np.nonzero(codes[:, 1:-1] < 0)):  # a rare word is read as spelled
            chars[row, column] = character_ids(words.spelling(-1 - int(codes[row, column + 1])))
        return {
            "chars": torch.from_numpy(chars),
            "next_words": torch.from_numpy(np.ascontiguousarray(ids[:, 2:])),
            "previous_words": torch.from_numpy(np.ascontiguousarray(ids[:, :-2])),
        }

    def batch(self, step: int, micro: int) -> dict[str, torch.Tensor]:
        """Random blocks for micro-batch ``micro`` of step ``step`` (the same on every call).

        Args:
            step: the optimizer step.
            micro: the micro-batch within the step.

        Returns:
            The batch (see [`examples`][plm.objectives.bilm.BiLMObjective.examples]).
        """
        return self.examples(self.sampler.batch(step, micro), self.streams.train)

    def size(self, batch: dict[str, torch.Tensor]) -> int:
        """The words a batch reads.

        Args:
            batch: a batch of this objective.

        Returns:
            B x T.
        """
        return batch["next_words"].numel()

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        """The targets each direction's loss is summed over: one per word read.

        Args:
            batch: a batch of this objective.

        Returns:
            ``forward`` and ``backward``, each B x T.
        """
        return {term: self.size(batch) for term in TERMS}

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The two directions' summed negative log-likelihoods.

        Args:
            model: the ELMo (or its DDP wrapper).
            batch: a batch of this objective.

        Returns:
            ``forward`` and ``backward``.
        """
        output = model(batch["chars"], next_words=batch["next_words"], previous_words=batch["previous_words"])
        return {"forward": output.forward_loss, "backward": output.backward_loss}

    def validation_batches(self) -> Iterator[dict[str, torch.Tensor]]:
        """The validation blocks, in order and the same every time.

        Yields:
            Batches of up to ``batch_size`` blocks (see [`examples`][plm.objectives.bilm.BiLMObjective.examples]).
        """
        for start in range(0, len(self.validation), self.batch_size):
            yield self.examples(self.validation[start : start + self.batch_size], self.streams.validation)
