"""Attention of an RNN decoder over the encoder's states: Bahdanau's and Luong's scores.

Every variant is one score function ``score(query, keys) -> (B, Q, S)`` and shares
:meth:`SourceAttention.forward`: one masked softmax over the (padded) source, then the
context vector as the weighted sum of the encoder states. What a score reads of the
encoder states alone (Bahdanau's U h_j, Luong's W h_j) is ``project``-ed once per source
sentence, not at every target step: the decoder keeps it in its state. Queries are decoder states
(B, Q, query_dim) (Q = 1 when decoding step by step); keys are the encoder states
(B, S, key_dim); ``mask`` (B, S) is True at real source tokens.

- Bahdanau et al. (2015), additive: e = v^T tanh(W s + U h), a learned one-hidden-layer score.
- Luong et al. (2015): dot s^T h, general s^T W h, concat v^T tanh(W [s; h]).
"""

from __future__ import annotations

import torch
from torch import nn


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax of ``scores`` (B, Q, S) over the source positions where ``mask`` (B, S) is True.

    Padding gets exactly 0, and a row whose every position is padding gets all zeros
    rather than NaN (softmax of a row of -inf is 0/0): the scores of pads are pushed to
    the dtype's lowest value instead of -inf, and the result is multiplied by the mask.
    """
    keep = mask[:, None, :]  # (B, 1, S), broadcast over the queries
    lowest = torch.finfo(scores.dtype).min
    return scores.masked_fill(~keep, lowest).softmax(-1) * keep


class SourceAttention(nn.Module):
    """Base class: a score function over the source, the shared masked softmax and context."""

    def project(self, keys: torch.Tensor) -> torch.Tensor:
        """What ``score`` reads of the encoder states (B, S, Dk); the states themselves unless a score projects them."""
        return keys

    def score(self, query: torch.Tensor, projected: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(
        self, query: torch.Tensor, keys: torch.Tensor, mask: torch.Tensor, projected: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """query (B, Q, Dq), keys (B, S, Dk), mask (B, S) -> context (B, Q, Dk), weights (B, Q, S).

        ``projected``: ``project(keys)``, when the caller computed it once for many queries.
        """
        projected = self.project(keys) if projected is None else projected
        weights = masked_softmax(self.score(query, projected), mask)
        return weights @ keys, weights


class BahdanauAttention(SourceAttention):
    """Additive: e_ij = v^T tanh(W s_i + U h_j), one hidden layer of ``dim`` units."""

    def __init__(self, query_dim: int, key_dim: int, dim: int) -> None:
        super().__init__()
        self.query_proj = nn.Linear(query_dim, dim, bias=False)  # W
        self.key_proj = nn.Linear(key_dim, dim)  # U (its bias is the hidden layer's)
        self.v = nn.Linear(dim, 1, bias=False)

    def project(self, keys: torch.Tensor) -> torch.Tensor:
        return self.key_proj(keys)  # U h_j: (B, S, dim)

    def score(self, query: torch.Tensor, projected: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(self.query_proj(query)[:, :, None] + projected[:, None])  # (B, Q, S, dim)
        return self.v(hidden).squeeze(-1)


class DotAttention(SourceAttention):
    """Luong's dot: e_ij = s_i^T h_j (the decoder and encoder states must be equally wide)."""

    def score(self, query: torch.Tensor, projected: torch.Tensor) -> torch.Tensor:
        return query @ projected.transpose(1, 2)


class GeneralAttention(SourceAttention):
    """Luong's general: e_ij = s_i^T W h_j."""

    def __init__(self, query_dim: int, key_dim: int) -> None:
        super().__init__()
        self.weight = nn.Linear(key_dim, query_dim, bias=False)  # W h_j

    def project(self, keys: torch.Tensor) -> torch.Tensor:
        return self.weight(keys)  # W h_j: (B, S, Dq)

    def score(self, query: torch.Tensor, projected: torch.Tensor) -> torch.Tensor:
        return query @ projected.transpose(1, 2)


class ConcatAttention(SourceAttention):
    """Luong's concat: e_ij = v^T tanh(W [s_i; h_j]), one matrix over the concatenation."""

    def __init__(self, query_dim: int, key_dim: int, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(query_dim + key_dim, dim, bias=False)
        self.v = nn.Linear(dim, 1, bias=False)

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:  # keys: not projected
        queries, sources = query.shape[1], keys.shape[1]
        pairs = torch.cat(  # (B, Q, S, Dq + Dk): every query beside every source state
            [query[:, :, None].expand(-1, -1, sources, -1), keys[:, None].expand(-1, queries, -1, -1)], dim=-1
        )
        return self.v(torch.tanh(self.proj(pairs))).squeeze(-1)


SCORES = ("bahdanau", "dot", "general", "concat")


def build_attention(score: str, query_dim: int, key_dim: int, dim: int) -> SourceAttention:
    """The attention of score function ``score`` (one of :data:`SCORES`)."""
    if score == "bahdanau":
        return BahdanauAttention(query_dim, key_dim, dim)
    if score == "dot":
        if query_dim != key_dim:
            raise ValueError(f"dot attention needs equally wide states, got {query_dim} and {key_dim}")
        return DotAttention()
    if score == "general":
        return GeneralAttention(query_dim, key_dim)
    if score == "concat":
        return ConcatAttention(query_dim, key_dim, dim)
    raise ValueError(f"unknown attention score {score!r}; choose one of {', '.join(SCORES)}")
