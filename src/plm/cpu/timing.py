"""Timing a call where the faster of two routes depends on the machine (`plm.cpu.linear`, `plm.cpu.int8`)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch

STREAM_BYTES = 64 << 20  # more than the last-level cache of the machines plm is benchmarked on (32 MB)


def best_seconds(call: Callable[[], object], repeats: int = 3) -> float:
    """The fastest of ``repeats`` calls, after one to warm up."""
    call()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def streamed_seconds(product: Callable[[torch.Tensor], object], weight: torch.Tensor, repeats: int = 3) -> float:
    """Seconds ``product(weight)`` takes when the weight comes from memory, as in a decoding step.

    Decoding a token reads every weight matrix of a model once, so none is in the cache
    when its turn comes. Timed on one matrix called again and again, a matrix that fits the
    cache favours MKL's matrix-vector product, which can lose inside a decoding step, where
    the weight comes from memory. So a matrix smaller than
    ``STREAM_BYTES`` is timed over that many bytes of copies of itself, one call each,
    and the time per call returned (once per shape: some 50 ms).
    """
    copies = -(-STREAM_BYTES // (weight.numel() * weight.element_size()))
    stack = weight.expand(copies, *weight.shape).clone() if copies > 1 else weight[None]  # (copies, out, in)

    def sweep() -> None:
        for matrix in stack:
            product(matrix)

    return best_seconds(sweep, repeats) / copies
