"""y = x W^T + b, with a faster route for the one-token-per-row products of decoding on the CPU.

Decoding with a KV cache multiplies a handful of rows (one token per sequence) by
every weight matrix. For such a product MKL takes a matrix-vector kernel that runs
on one thread and reads nn.Linear's (out, in) layout slowly; the same product as a
batched matmul over ``BLOCKS`` row blocks of W goes through MKL's batched GEMM,
which streams the weight at memory speed and spreads the blocks over threads. On
the 2-core benchmark machine (AMD EPYC, MKL) a GPT-2 (124M) layer is 1.5-3x faster
that way (see benchmarks/bench_gpt2.py); with more rows, small weights or on a GPU
the plain F.linear is as fast or faster, so it is used there.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

BLOCKS = 4
MAX_ROWS = 4
MIN_WEIGHT_NUMEL = 1 << 18


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``: x (..., in), weight (out, in) -> (..., out)."""
    out_features, in_features = weight.shape
    rows = x.numel() // max(in_features, 1)
    if (
        rows > MAX_ROWS
        or weight.numel() < MIN_WEIGHT_NUMEL
        or x.device.type != "cpu"
        or weight.dtype != torch.float32
        or x.dtype != torch.float32
        or not weight.is_contiguous()
    ):
        return F.linear(x, weight, bias)
    blocked = out_features - out_features % BLOCKS
    columns = x.reshape(rows, in_features).t()  # (in, rows)
    blocks = weight[:blocked].view(BLOCKS, blocked // BLOCKS, in_features)  # (BLOCKS, out/BLOCKS, in)
    y = torch.bmm(blocks, columns.expand(BLOCKS, in_features, rows)).view(blocked, rows).t()  # (rows, blocked)
    if blocked < out_features:  # a vocabulary like GPT-2's 50,257 leaves a few rows over
        y = torch.cat([y, F.linear(columns.t(), weight[blocked:])], dim=-1)
    if bias is not None:
        y = y + bias
    return y.reshape(*x.shape[:-1], out_features)


class Linear(nn.Linear):
    """nn.Linear (same parameters and state dict) whose product is :func:`linear`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
