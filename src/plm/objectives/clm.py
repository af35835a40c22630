"""Causal language modelling: L1(U) = sum_i log P(u_i | u_{i-k}, ..., u_{i-1}) (GPT-1, GPT-2)."""

from __future__ import annotations

from typing import Iterator

import torch
from torch import nn

from plm.data.tokens import BlockSampler, TokenIds, validation_blocks


class CausalLMObjective:
    """Random contiguous blocks of the training ids; every next token is a target.

    Args:
        train_ids: the training text's token ids.
        validation_ids: the validation text's token ids.
        block_size: the tokens a model reads per sequence (blocks are one longer, for the targets).
        batch_size: blocks per micro-batch.
        seed: the seed of the blocks' draw.
        validation_blocks_max: the most validation blocks, or None for all.

    Raises:
        PLMError: a text too short for one block.
    """

    def __init__(
        self,
        train_ids: TokenIds,
        validation_ids: TokenIds,
        block_size: int,
        batch_size: int,
        seed: int = 0,
        validation_blocks_max: int | None = 64,
    ) -> None:
        self.sampler = BlockSampler(train_ids, block_size, batch_size, seed)
        self.validation = validation_blocks(validation_ids, block_size, validation_blocks_max)
        self.batch_size = batch_size
        self.train_tokens = len(train_ids)

    def batch(self, step: int, micro: int) -> dict[str, torch.Tensor]:
        """Random blocks for micro-batch ``micro`` of step ``step`` (the same on every call).

        Args:
            step: the optimizer step.
            micro: the micro-batch within the step.

        Returns:
            ``tokens``: (batch_size, block_size + 1) int64 ids.
        """
        return {"tokens": self.sampler.batch(step, micro)}

    def size(self, batch: dict[str, torch.Tensor]) -> int:
        """The targets of a batch, which are its tokens read.

        Args:
            batch: a batch of this objective.

        Returns:
            batch x block_size.
        """
        tokens = batch["tokens"]
        return tokens.shape[0] * (tokens.shape[1] - 1)

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        """The targets the ``lm`` loss is summed over.

        Args:
            batch: a batch of this objective.

        Returns:
            ``lm``: every next token.
        """
        return {"lm": self.size(batch)}

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The summed next-token cross-entropy: the model reads ``tokens[:, :-1]`` and predicts ``tokens[:, 1:]``.

        The model takes the loss itself, from ``targets`` (as :class:`plm.models.GPT` does with
        :func:`plm.core.linear_cross_entropy`), so that FSDP's whole output weight is at hand and
        no (batch, time, vocab) logits are kept.

        Args:
            model: the causal LM (or its DDP or FSDP wrapper); ``model(ids, targets=...)`` returns an output
                whose ``loss`` is the summed next-token cross-entropy.
            batch: a batch of this objective.

        Returns:
            ``lm``, the summed loss.
        """
        tokens = batch["tokens"]  # (B, T + 1): inputs are [:, :-1], targets [:, 1:]
        return {"lm": model(tokens[:, :-1], targets=tokens[:, 1:]).loss}

    def validation_batches(self) -> Iterator[dict[str, torch.Tensor]]:
        """The validation blocks, in order and the same every time.

        Yields:
            Batches of up to ``batch_size`` blocks, as ``tokens``.
        """
        for start in range(0, len(self.validation), self.batch_size):
            yield {"tokens": self.validation[start : start + self.batch_size]}
