"""Causal language modelling: L1(U) = sum_i log P(u_i | u_{i-k}, ..., u_{i-1}) (GPT-1, GPT-2).

Validation scores every token of the validation text once, as ``plm eval perplexity`` does: the text is
its documents, each followed by the end-of-document token (as [`plm.data.prepare`][plm.data.prepare] wrote them),
after a start token (the tokenizer's beginning-of-text, else its end-of-text) so that the first token
is scored too; windows of ``block_size`` tokens move on by half a window
([`windows`][plm.data.tokens.windows]), each token read with the context of its window.
"""

from __future__ import annotations

import math
from typing import Iterator

import numpy as np
import torch
from torch import nn

from plm.data.tokens import BlockSampler, TokenIds, windows
from plm.errors import PLMError

IGNORED = -100  # a target that is not scored: the context of a validation window


class CausalLMObjective:
    """Random contiguous blocks of the training ids; every next token is a target.

    Args:
        train_ids: the training text's token ids.
        validation_ids: the validation text's token ids.
        block_size: the tokens a model reads per sequence (blocks are one longer, for the targets).
        batch_size: blocks (and validation windows) per micro-batch.
        seed: the seed of the blocks' draw.
        start_id: the token read before the validation text, so that its first token is scored (None: none,
            the first token is context only).
        sample_tokens: the evaluations before a run's last score only the windows of about the first this many
            validation tokens (whole batches of them), when the text has more; None: all of it every time.

    Raises:
        PLMError: a training text too short for one block, or a validation text of fewer than 2 tokens.
    """

    def __init__(
        self,
        train_ids: TokenIds,
        validation_ids: TokenIds,
        block_size: int,
        batch_size: int,
        seed: int = 0,
        start_id: int | None = None,
        sample_tokens: int | None = None,
    ) -> None:
        self.sampler = BlockSampler(train_ids, block_size, batch_size, seed)
        self.validation_ids, self.start_id = validation_ids, start_id
        length = len(validation_ids) + (start_id is not None)
        if length < 2:
            raise PLMError(f"the validation text has {len(validation_ids)} tokens, too few to score one; give more "
                           "validation text")
        window = max(2, block_size)
        self.windows = windows(length, window, max(1, window // 2))
        self.batch_size = batch_size
        self.train_tokens = len(train_ids)
        # The batches of the windows that score the first sample_tokens tokens; None: every evaluation reads all.
        self.validation_sample_batches: int | None = None
        if sample_tokens is not None:
            count = sum(first <= sample_tokens for _, _, first in self.windows)
            batches = math.ceil(count / batch_size)
            if batches < math.ceil(len(self.windows) / batch_size):
                self.validation_sample_batches = max(1, batches)

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
            ``lm``: every next token; in a validation window, those it scores.
        """
        if "targets" in batch:
            return {"lm": int((batch["targets"] != IGNORED).sum())}
        return {"lm": self.size(batch)}

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The summed next-token cross-entropy: the model reads ``tokens[:, :-1]`` and predicts ``tokens[:, 1:]``.

        The model takes the loss itself, from ``targets`` (as [`GPT`][plm.models.gpt.GPT] does with
        `linear_cross_entropy`), so that FSDP's whole output weight is at hand and
        no (batch, time, vocab) logits are kept.

        Args:
            model: the causal LM (or its DDP or FSDP wrapper); ``model(ids, targets=...)`` returns an output
                whose ``loss`` is the summed next-token cross-entropy.
            batch: a batch of this objective; a validation batch's ``targets`` mark its windows' context -100.

        Returns:
            ``lm``, the summed loss.
        """
        tokens = batch["tokens"]  # (B, T + 1): inputs are [:, :-1], targets [:, 1:]
        return {"lm": model(tokens[:, :-1], targets=batch.get("targets", tokens[:, 1:])).loss}

    def validation_batches(self) -> Iterator[dict[str, torch.Tensor]]:
        """The validation windows, in order and the same every time: every token of the text scored once.

        Yields:
            Batches of up to ``batch_size`` windows: ``tokens`` (B, window) and ``targets`` (B, window - 1),
            the next token where the window scores it, else -100.
        """
        for start in range(0, len(self.windows), self.batch_size):
            spans = self.windows[start : start + self.batch_size]
            width = spans[0][1] - spans[0][0]  # every window reads as many tokens
            index = np.array([begin for begin, _, _ in spans])[:, None] + np.arange(width)  # (B, window)
            tokens = torch.from_numpy(self.validation_token(index).astype(np.int64))
            targets = tokens[:, 1:].clone()
            for row, (begin, _, first) in enumerate(spans):
                targets[row, : first - begin - 1] = IGNORED  # the logit at p predicts position begin + p + 1
            yield {"tokens": tokens, "targets": targets}

    def validation_token(self, index: np.ndarray) -> np.ndarray:
        """The ids at positions ``index`` of the validation text after its start token (position 0, if any)."""
        if self.start_id is None:
            return self.validation_ids[index]
        ids = self.validation_ids[np.maximum(index - 1, 0)]
        return np.where(index == 0, self.start_id, ids)
