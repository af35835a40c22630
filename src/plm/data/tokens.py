"""Language-model batches: random contiguous blocks of a corpus' token ids.

A corpus is tokenized once ([`plm.data.prepare`][plm.data.prepare]) into one memory-mapped stream with
a separator (the ``eos`` token) after each document, as GPT-2 trained; batches are then
random contiguous blocks of that stream. Sampling is a pure function of the step, so a
resumed run sees exactly the batches it would have seen without the interruption.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

from plm.errors import PLMError


class TokenIds(Protocol):
    """What blocks are read from: a token array, or a prepared split's stream (`TokenStream`).

    Its length, and its ids at an integer array of positions (an array of the same shape).
    """

    def __len__(self) -> int: ...

    def __getitem__(self, index: np.ndarray) -> np.ndarray: ...


class BlockSampler:
    """Random contiguous blocks of ``block_size + 1`` ids: inputs and next-token targets.

    Nothing is stateful: the offsets of a batch come from a generator seeded with
    (seed, step, micro-batch, rank), so resuming at step ``s`` needs no saved position,
    and each rank of a distributed run draws its own blocks.
    """

    def __init__(self, ids: TokenIds, block_size: int, batch_size: int, seed: int, rank: int = 0) -> None:
        if len(ids) < block_size + 1:
            raise PLMError(
                f"the training text has {len(ids)} tokens, too few for one block of "
                f"{block_size} + 1; use a smaller block size or more text"
            )
        self.ids, self.block_size, self.batch_size = ids, block_size, batch_size
        self.seed, self.rank = seed, rank

    def batch(self, step: int, micro: int = 0) -> torch.Tensor:
        """The (batch_size, block_size + 1) int64 blocks for ``step`` and micro-batch ``micro``."""
        entropy = np.random.SeedSequence([self.seed, step, micro, self.rank]).generate_state(1, np.uint64)
        generator = torch.Generator().manual_seed(int(entropy[0]))
        starts = torch.randint(len(self.ids) - self.block_size, (self.batch_size,), generator=generator)
        return _gather(self.ids, starts.numpy(), self.block_size)


def validation_blocks(ids: TokenIds, block_size: int, max_blocks: int | None = None) -> torch.Tensor:
    """Consecutive blocks (n, block_size + 1) from the start of ``ids``, the same every time.

    Block ``i`` starts at ``i * block_size``; its extra last id is the next block's
    first, so every position of the text is predicted exactly once.
    """
    count = (len(ids) - 1) // block_size
    if max_blocks is not None:
        count = min(count, max_blocks)
    if count < 1:
        raise PLMError(
            f"the validation text has {len(ids)} tokens, too few for one block of "
            f"{block_size} + 1; use a smaller block size or more validation text"
        )
    return _gather(ids, np.arange(count) * block_size, block_size)


def windows(length: int, window: int, stride: int) -> list[tuple[int, int, int]]:
    """(begin, end, first_target) of each window over ``length`` tokens: a sliding window that scores each once.

    The first window scores tokens 1..window-1; each later one scores the next ``stride`` tokens, reading
    the ``window - stride`` tokens before them as context. Every window reads ``min(window, length)`` tokens.
    This is what a validation perplexity means in plm, in training
    ([`CausalLMObjective`][plm.objectives.clm.CausalLMObjective]) and in ``plm eval perplexity``
    ([`perplexity`][plm.apps.perplexity.perplexity]) alike.

    Args:
        length: the number of tokens.
        window: the tokens a window reads.
        stride: the tokens each later window scores.

    Returns:
        (begin, end, first_target) of each window.
    """
    spans = [(0, min(window, length), 1)]
    while spans[-1][1] < length:
        first = spans[-1][1]
        end = min(first + stride, length)
        spans.append((max(0, end - window), end, first))
    return spans


def _gather(ids: TokenIds, starts: np.ndarray, block_size: int) -> torch.Tensor:
    index = starts[:, None] + np.arange(block_size + 1)  # (n, block_size + 1)
    return torch.from_numpy(ids[index].astype(np.int64))
