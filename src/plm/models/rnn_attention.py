"""Attention of an RNN decoder over the encoder's states: Bahdanau's and Luong's scores.

Every variant is one score function ``score(query, keys) -> (B, Q, S)`` and shares
[`SourceAttention.forward`][plm.models.rnn_attention.SourceAttention.forward]: one masked softmax over the (padded)
source, then the context vector as the weighted sum of the encoder states. What a score reads of the encoder states
alone (Bahdanau's U h_j, Luong's W h_j) is ``project``-ed once per source sentence, not at every target step: the
decoder keeps it in its state. Queries are decoder states (B, Q, query_dim) (Q = 1 when decoding step by step); keys are
the encoder states (B, S, key_dim); ``mask`` (B, S) is True at real source tokens.

- Bahdanau et al. (2015), additive: e = v^T tanh(W s + U h), a learned one-hidden-layer score.
- Luong et al. (2015): dot s^T h, general s^T W h, concat v^T tanh(W [s; h]); global over the whole source, or
  local ([`LocalAttention`][plm.models.rnn_attention.LocalAttention]) over a window of 2D + 1 source words around an
  aligned position p_t.
"""

from __future__ import annotations

import torch
from torch import nn


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax of ``scores`` (B, Q, S) over the source positions where ``mask`` (B, S), or (B, Q, S), is True.

    Padding gets exactly 0, and a row whose every position is padding gets all zeros
    rather than NaN (softmax of a row of -inf is 0/0): the scores of pads are pushed to
    the dtype's lowest value instead of -inf, and the result is multiplied by the mask.

    Args:
        scores: (B, Q, S).
        mask: (B, S) bool, True at real source tokens; or (B, Q, S), a window of them per query.

    Returns:
        (B, Q, S) weights.
    """
    keep = mask[:, None, :] if mask.dim() == 2 else mask  # (B, 1, S) broadcasts over the queries
    lowest = torch.finfo(scores.dtype).min
    return scores.masked_fill(~keep, lowest).softmax(-1) * keep


class SourceAttention(nn.Module):
    """Base class: a score function over the source, the shared masked softmax and context."""

    def project(self, keys: torch.Tensor) -> torch.Tensor:
        """What ``score`` reads of the encoder states (B, S, Dk); the states themselves unless a score projects them.

        Args:
            keys: (B, S, Dk) the encoder states.

        Returns:
            The keys as the score reads them.
        """
        return keys

    def score(self, query: torch.Tensor, projected: torch.Tensor) -> torch.Tensor:
        """The score of every query against every source position; each variant implements it.

        Args:
            query: (B, Q, Dq) decoder states.
            projected: what [`project`][plm.models.rnn_attention.SourceAttention.project] made of the encoder states.

        Returns:
            (B, Q, S) scores.
        """
        raise NotImplementedError

    def forward(
        self, query: torch.Tensor, keys: torch.Tensor, mask: torch.Tensor, projected: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The context of each query: a masked softmax of the scores, then the weighted sum of the encoder states.

        Args:
            query: (B, Q, Dq) decoder states.
            keys: (B, S, Dk) encoder states.
            mask: (B, S) bool, True at real source tokens.
            projected: ``project(keys)``, when the caller computed it once for many queries; None computes it.
            positions: (Q,) the target position of each query; global attention does not read it.

        Returns:
            The context vectors (B, Q, Dk) and the attention weights (B, Q, S).
        """
        projected = self.project(keys) if projected is None else projected
        weights = masked_softmax(self.score(query, projected), mask)
        return weights @ keys, weights


class BahdanauAttention(SourceAttention):
    """Additive: e_ij = v^T tanh(W s_i + U h_j), one hidden layer of ``dim`` units.

    Args:
        query_dim: Dq, the decoder states' width.
        key_dim: Dk, the encoder states' width.
        dim: the hidden layer's units.
    """

    def __init__(self, query_dim: int, key_dim: int, dim: int) -> None:
        super().__init__()
        self.query_proj = nn.Linear(query_dim, dim, bias=False)  # W
        self.key_proj = nn.Linear(key_dim, dim)  # U (its bias is the hidden layer's)
        self.v = nn.Linear(dim, 1, bias=False)

    def project(self, keys: torch.Tensor) -> torch.Tensor:
        """U h_j, the encoder states' part of the hidden layer (its bias included).

        Args:
            keys: (B, S, Dk) the encoder states.

        Returns:
            (B, S, dim).
        """
        return self.key_proj(keys)  # U h_j: (B, S, dim)

    def score(self, query: torch.Tensor, projected: torch.Tensor) -> torch.Tensor:
        """e_ij = v^T tanh(W s_i + U h_j).

        Args:
            query: (B, Q, Dq) decoder states.
            projected: (B, S, dim), U h_j.

        Returns:
            (B, Q, S) scores.
        """
        hidden = torch.tanh(self.query_proj(query)[:, :, None] + projected[:, None])  # (B, Q, S, dim)
        return self.v(hidden).squeeze(-1)


class DotAttention(SourceAttention):
    """Luong's dot: e_ij = s_i^T h_j (the decoder and encoder states must be equally wide)."""

    def score(self, query: torch.Tensor, projected: torch.Tensor) -> torch.Tensor:
        """e_ij = s_i^T h_j, with h_j as `project` gives it (general attention's W h_j).

        Args:
            query: (B, Q, D) decoder states.
            projected: (B, S, D) the encoder states as projected.

        Returns:
            (B, Q, S) scores.
        """
        return query @ projected.transpose(1, 2)


class GeneralAttention(DotAttention):
    """Luong's general: e_ij = s_i^T W h_j, dot attention over the keys projected by W.

    Args:
        query_dim: Dq, the decoder states' width.
        key_dim: Dk, the encoder states' width.
    """

    def __init__(self, query_dim: int, key_dim: int) -> None:
        super().__init__()
        self.weight = nn.Linear(key_dim, query_dim, bias=False)  # W h_j

    def project(self, keys: torch.Tensor) -> torch.Tensor:
        """W h_j, computed once per source.

        Args:
            keys: (B, S, Dk) the encoder states.

        Returns:
            (B, S, Dq).
        """
        return self.weight(keys)  # W h_j: (B, S, Dq)


class ConcatAttention(SourceAttention):
    """Luong's concat: e_ij = v^T tanh(W [s_i; h_j]), one matrix over the concatenation.

    Args:
        query_dim: Dq, the decoder states' width.
        key_dim: Dk, the encoder states' width.
        dim: the hidden layer's units.
    """

    def __init__(self, query_dim: int, key_dim: int, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(query_dim + key_dim, dim, bias=False)
        self.v = nn.Linear(dim, 1, bias=False)

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:  # keys: not projected
        """e_ij = v^T tanh(W [s_i; h_j]), over every (query, source state) pair.

        Args:
            query: (B, Q, Dq) decoder states.
            keys: (B, S, Dk) the encoder states, not projected.

        Returns:
            (B, Q, S) scores.
        """
        queries, sources = query.shape[1], keys.shape[1]
        pairs = torch.cat(  # (B, Q, S, Dq + Dk): every query beside every source state
            [query[:, :, None].expand(-1, -1, sources, -1), keys[:, None].expand(-1, queries, -1, -1)], dim=-1
        )
        return self.v(torch.tanh(self.proj(pairs))).squeeze(-1)


class LocalAttention(SourceAttention):
    """Luong's local attention: a score's softmax over the 2D + 1 source words around an aligned position p_t.

    - local-m (monotonic): p_t = t, the target position (kept within the source, so that a target longer than
      its source still reads the last window).
    - local-p (predictive): p_t = S sigmoid(v_p^T tanh(W_p h_t)), S the source's length; the window's weights
      are multiplied by a Gaussian exp(-(s - p_t)^2 / (2 sigma^2)) with sigma = D / 2, which makes p_t learnable.

    Args:
        score: the global attention whose score (dot, general or concat) is read within the window.
        query_dim: the decoder states' width (local-p's W_p).
        window: D, the words on each side of p_t.
        predictive: local-p; False: local-m.
    """

    def __init__(self, score: SourceAttention, query_dim: int, window: int, predictive: bool) -> None:
        super().__init__()
        self.inner = score
        self.window = window
        self.aligner = nn.Sequential(  # v_p^T tanh(W_p h_t): local-p's predicted position, before the sigmoid
            nn.Linear(query_dim, query_dim, bias=False), nn.Tanh(), nn.Linear(query_dim, 1, bias=False)
        ) if predictive else None

    def project(self, keys: torch.Tensor) -> torch.Tensor:
        """What the window's score reads of the encoder states.

        Args:
            keys: (B, S, Dk) the encoder states.

        Returns:
            The score's projection of them.
        """
        return self.inner.project(keys)

    def score(self, query: torch.Tensor, projected: torch.Tensor) -> torch.Tensor:
        """The inner score of every query against every source position (the window is applied after).

        Args:
            query: (B, Q, Dq) decoder states.
            projected: what [`project`][plm.models.rnn_attention.LocalAttention.project] made of the encoder states.

        Returns:
            (B, Q, S) scores.
        """
        return self.inner.score(query, projected)

    def forward(
        self, query: torch.Tensor, keys: torch.Tensor, mask: torch.Tensor, projected: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The context of each query from the window around its p_t.

        Args:
            query: (B, Q, Dq) decoder states.
            keys: (B, S, Dk) encoder states.
            mask: (B, S) bool, True at real source tokens.
            projected: ``project(keys)``, or None.
            positions: (Q,) the target position of each query (local-m's p_t).

        Returns:
            The context vectors (B, Q, Dk) and the attention weights (B, Q, S), zero outside the window.
        """
        projected = self.project(keys) if projected is None else projected
        last = (mask.sum(-1) - 1).clamp(min=0).to(query.dtype)  # (B,) the last source word's position
        if self.aligner is None:
            assert positions is not None, "local-m aligns with the target positions"
            centre = torch.minimum(positions.to(query.dtype)[None, :], last[:, None])  # (B, Q): p_t = t
        else:
            centre = (last[:, None] + 1) * torch.sigmoid(self.aligner(query).squeeze(-1))  # (B, Q): S sigmoid(.)
        distance = torch.arange(keys.shape[1], device=keys.device, dtype=query.dtype) - centre[..., None]  # (B,Q,S)
        inside = (distance.abs() <= self.window) & mask[:, None, :]
        weights = masked_softmax(self.score(query, projected), inside)
        if self.aligner is not None:  # the Gaussian of sigma = D / 2 around p_t
            weights = weights * torch.exp(-distance.square() / (2 * (self.window / 2) ** 2))
        return weights @ keys, weights


SCORES = ("bahdanau", "dot", "general", "concat")
ALIGNMENTS = ("global", "local-m", "local-p")  # Luong's: the whole source, or a window at p_t = t or predicted


def build_attention(score: str, query_dim: int, key_dim: int, dim: int, alignment: str = "global",
                    window: int = 10) -> SourceAttention:
    """The attention of score function ``score`` (one of `SCORES`), global or local (`ALIGNMENTS`).

    Args:
        score: "bahdanau", "dot", "general" or "concat".
        query_dim: Dq, the decoder states' width.
        key_dim: Dk, the encoder states' width.
        dim: the hidden layer's units (Bahdanau's and concat's).
        alignment: "global"; or Luong's local "local-m" or "local-p" (a Luong score only).
        window: D of local attention: the source words on each side of p_t.

    Returns:
        The attention module.

    Raises:
        ValueError: an unknown score or alignment, local attention with Bahdanau's score, or dot attention over
            states of different widths.
    """
    if alignment not in ALIGNMENTS:
        raise ValueError(f"unknown alignment {alignment!r}; choose one of {', '.join(ALIGNMENTS)}")
    if alignment != "global":
        if score == "bahdanau":
            raise ValueError("local attention is Luong's; give it a Luong score (dot, general or concat)")
        inner = build_attention(score, query_dim, key_dim, dim)
        return LocalAttention(inner, query_dim, window, predictive=alignment == "local-p")
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
