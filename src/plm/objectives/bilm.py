"""The biLM objective (ELMo): sum_k log p(t_k | t_1..t_{k-1}) + log p(t_k | t_{k+1}..t_N).

Text becomes one stream of words, each document between ``<S>`` and ``</S>``. A
batch is random contiguous blocks of T + 2 words: the middle T are read (as
characters), the forward LM at position k predicts the word after it and the
backward LM the word before it, so both directions have T targets. The two
log-likelihoods are two loss terms, ``forward`` and ``backward``, which the trainer
logs apiece; validation reports the perplexity of each.

Words are stored once as ids of their distinct spellings (types); a batch looks up
each type's character ids and vocabulary id, so a word is never split twice.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from plm.data.corpus import Document
from plm.data.tokens import BlockSampler, validation_blocks
from plm.errors import PLMError
from plm.tokenization.characters import SENTENCE_END, SENTENCE_START, UNKNOWN, character_table, split_words

TERMS = ("forward", "backward")


@dataclass(frozen=True)
class WordStreams:
    """Training and validation text as type ids, and per type its characters and its vocabulary id.

    Attributes:
        train: (train words,) int32 type ids.
        validation: (validation words,) int32 type ids.
        characters: (types, MAX_CHARACTERS) int16, each type's character ids.
        word_ids: (types,) int64, the softmax's id of each type, ``<UNK>``'s for a rare one.
    """

    train: np.ndarray  # (train words,) int32 type ids
    validation: np.ndarray
    characters: np.ndarray  # (types, MAX_CHARACTERS) int16
    word_ids: np.ndarray  # (types,) int64: the softmax's id of each type, UNKNOWN's for a rare one


def word_streams(train: Sequence[Document], validation: Sequence[Document], vocabulary: dict[str, int]) -> WordStreams:
    """Split the documents into words once; ``vocabulary`` maps the kept words to ids (the rest: ``<UNK>``).

    Each document becomes ``<S>``, its words, ``</S>``.

    Args:
        train: the training documents.
        validation: the validation documents.
        vocabulary: the word vocabulary, with ``<S>``, ``</S>`` and ``<UNK>``.

    Returns:
        The streams.

    Raises:
        PLMError: a vocabulary without ``<S>``, ``</S>`` or ``<UNK>``.
    """
    if UNKNOWN not in vocabulary or SENTENCE_START not in vocabulary or SENTENCE_END not in vocabulary:
        raise PLMError(f"the biLM predicts words: its tokenizer must be a word vocabulary with {SENTENCE_START}, "
                       f"{SENTENCE_END} and {UNKNOWN} (train one with `plm tokenizer train --kind words`)")
    types: dict[str, int] = {}

    def stream(documents: Sequence[Document]) -> np.ndarray:
        ids: list[int] = []
        for document in documents:
            for word in (SENTENCE_START, *split_words(document.text), SENTENCE_END):
                ids.append(types.setdefault(word, len(types)))
        return np.asarray(ids, dtype=np.int32)

    train_ids, validation_ids = stream(train), stream(validation)
    spellings = list(types)
    unknown = vocabulary[UNKNOWN]
    word_ids = np.array([vocabulary.get(word, unknown) for word in spellings], dtype=np.int64)
    return WordStreams(train_ids, validation_ids, character_table(spellings), word_ids)


class BiLMObjective:
    """Forward and backward language modelling over blocks of words, read as characters.

    Args:
        streams: the words (see :func:`word_streams`).
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

    def examples(self, blocks: torch.Tensor) -> dict[str, torch.Tensor]:
        """Type ids (B, T + 2) -> chars of the middle T words (B, T, chars) and both directions' targets (B, T).

        Args:
            blocks: (B, T + 2) type ids.

        Returns:
            ``chars`` (B, T, MAX_CHARACTERS), ``next_words`` and ``previous_words`` (B, T), all int64.
        """
        types = blocks.numpy()
        return {
            "chars": torch.from_numpy(self.streams.characters[types[:, 1:-1]].astype(np.int64)),
            "next_words": torch.from_numpy(self.streams.word_ids[types[:, 2:]]),
            "previous_words": torch.from_numpy(self.streams.word_ids[types[:, :-2]]),
        }

    def batch(self, step: int, micro: int) -> dict[str, torch.Tensor]:
        """Random blocks for micro-batch ``micro`` of step ``step`` (the same on every call).

        Args:
            step: the optimizer step.
            micro: the micro-batch within the step.

        Returns:
            The batch (see :meth:`examples`).
        """
        return self.examples(self.sampler.batch(step, micro))

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
            Batches of up to ``batch_size`` blocks (see :meth:`examples`).
        """
        for start in range(0, len(self.validation), self.batch_size):
            yield self.examples(self.validation[start : start + self.batch_size])
