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
    """Mix ``layers`` stacked layers (batch, layers, time, dim) into one (batch, time, dim).

    The weights s start at 0 (the plain average) and gamma at 1.

    Args:
        layers: the layers mixed.
        layer_norm: normalise each layer first (per position, without gain or bias; a zero vector stays zero).
        dropout: the dropout on the mix.
        l2: lambda of the penalty lambda * ||s||^2 (see [`penalty`][plm.models.scalar_mix.ScalarMix.penalty]).
    """

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
        """The mix gamma * sum_j softmax(s)_j h_j, with dropout.

        Args:
            layers: (batch, layers, time, dim).

        Returns:
            (batch, time, dim).

        Raises:
            ValueError: another number of layers than the mix was built for.
        """
        if layers.shape[1] != self.scalars.numel():
            raise ValueError(f"ScalarMix of {self.scalars.numel()} layers got {layers.shape[1]}")
        if self.layer_norm:  # per position, without gain or bias; a zero (padding) vector stays zero
            layers = F.layer_norm(layers, layers.shape[-1:])
        mixed = torch.einsum("l,bltd->btd", self.weights, layers)
        return self.dropout(self.gamma * mixed)

    def penalty(self) -> torch.Tensor:
        """The L2 term lambda * ||s||^2, to add to the task's loss.

        Returns:
            The penalty, a scalar (0 when lambda is 0).
        """
        return self.l2 * self.scalars.square().sum()
