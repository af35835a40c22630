"""ELMo's task-weighted scalar mix of a stack of layers, for any model's per-layer features.

ELMo_k = gamma * sum_j softmax(s)_j h_{k,j} (Peters et al., 2018, eq. 1): one weight
per layer, softmax-normalised, and one scale gamma, both learnt by the task. Each
layer may first be normalised (their activations differ in scale), dropout applies
to the mix, and ``penalty()`` is the L2 term lambda * ||s||^2 that pulls the weights
toward the plain average (lambda = 1 about averages; lambda = 0.001 lets them vary).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ScalarMix(nn.Module):
    """Mix ``layers`` stacked layers (batch, layers, time, dim) into one (batch, time, dim)."""

    def __init__(self, layers: int, layer_norm: bool = False, dropout: float = 0.0, l2: float = 0.0) -> None:
        super().__init__()
        self.scalars = nn.Parameter(torch.zeros(layers))  # s: the plain average to begin with
        self.gamma = nn.Parameter(torch.ones(()))
        self.layer_norm = layer_norm
        self.dropout = nn.Dropout(dropout)
        self.l2 = l2

    @property
    def weights(self) -> torch.Tensor:
        """softmax(s): the share of each layer."""
        return self.scalars.softmax(0)

    def forward(self, layers: torch.Tensor) -> torch.Tensor:
        if layers.shape[1] != self.scalars.numel():
            raise ValueError(f"ScalarMix of {self.scalars.numel()} layers got {layers.shape[1]}")
        if self.layer_norm:  # per position, without gain or bias; a zero (padding) vector stays zero
            layers = F.layer_norm(layers, layers.shape[-1:])
        mixed = torch.einsum("l,bltd->btd", self.weights, layers)
        return self.dropout(self.gamma * mixed)

    def penalty(self) -> torch.Tensor:
        """lambda * ||s||^2, to add to the task's loss."""
        return self.l2 * self.scalars.square().sum()
