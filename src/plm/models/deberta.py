"""DeBERTa: BERT with disentangled attention and an enhanced mask decoder (He et al., 2020).

What the paper changes, and all this module holds:

- disentangled attention: a token is its content H_i plus its position relative to
  every other token. With relative distance delta(i, j) = clamp(i - j + k, 0, 2k - 1),
  relative position embeddings P (2k x d) shared by all layers, Q_r = P W_q,r and
  K_r = P W_k,r, the score of query i for key j is

      A_ij = Q^c_i K^c_j^T            (content-to-content)
           + Q^c_i K^r_delta(i,j)^T     (content-to-position, "c2p")
           + K^c_j Q^r_delta(j,i)^T     (position-to-content, "p2c")

  scaled by 1/sqrt(d (1 + number of position terms)), 1/sqrt(3d) with both terms;
- no absolute positions at the input (``absolute_positions=False``);
- the enhanced mask decoder (EMD): absolute positions enter only just before the
  MLM head, as the queries I = H + P_abs of n = 2 more passes through the last
  block (its weights shared) whose keys and values are the encoder output H.

The released code (microsoft/DeBERTa and Hugging Face's ``DebertaModel``, with which
every published checkpoint was trained) computes p2c with delta(i, j) instead of the
paper's delta(j, i): ``p2c_distance`` "released" (the default) matches it, "paper"
follows Eq. 4.

The 48-layer model of 1.5 billion parameters (the seed names its size; the paper's section 5.3
and its release, ``microsoft/deberta-v2-xxlarge``, its changes) is the same attention with a few
more options, each a config field whose default is the base model's:

- ``share_position_projections``: W_k,r = W_k,c and W_q,r = W_q,c in every layer, so P is
  projected by the content projections, biases included (the paper's first change);
- ``ngram_kernel``: nGiE, a convolution over the embeddings E beside the first block, whose
  output becomes LayerNorm(block_1(E) + act(conv(E))) (the paper's second change);
- from the release: ``key_bias`` (the content keys, and W_k,r, have a bias like the queries and
  values), ``position_buckets`` b (distances beyond b/2 share log-spaced buckets up to k, and P
  has 2b rows) and ``relative_embedding_norm`` (a LayerNorm on P before every use).

Sizes (vocabulary 50,265, k = 512): base L=12 H=768 (139M), large L=24 H=1024 (405M); the 1.5B
model (vocabulary 128,100, b = 256) L=48 H=1536, 1,564.5M, which the paper prints as 1.5B. Counted
as Hugging Face's ``DebertaModel`` and ``DebertaV2Model`` (no pooler, no heads).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from plm.core import LearnedPositions, Linear, MultiHeadAttention, Packing, linear, run_blocks
from plm.core.block import ACTIVATIONS
from plm.core.embeddings import check_context
from plm.errors import PLMError
from plm.models.base import ExtraActivations
from plm.models.encoder import Encoder, EncoderConfig, EncoderPass
from plm.models.recipe import Hyperparameters, PretrainingRecipe

POSITION_TERMS = ("c2p", "p2c")
P2C_DISTANCES = ("released", "paper")
MASK_DECODER_STEPS = 2  # n in the paper: passes through the shared last block


@dataclass(frozen=True)
class DebertaConfig(EncoderConfig):
    """DeBERTa-base by default; see `EncoderConfig` for the fields it shares with BERT.

    DeBERTa's defaults differ from BERT's in the vocabulary (50,265), no segments, no absolute positions at
    the input (``absolute_positions`` is Hugging Face's ``position_biased_input``), LayerNorm eps 1e-7 and no
    pooler. An unknown position term, ``p2c_distance`` or ``ngram_activation``, a ``max_relative_positions``
    below 1, ``position_buckets`` other than 0 or from 2 to 2k - 3, an ``ngram_kernel`` that is negative or
    even, or an ``embedding_dim`` other than None are a PLMError.

    Attributes:
        ADDED_FIELDS: fields added since models were first saved, with the value a model saved before them had.
        max_relative_positions: k: distances are clipped to [-k, k) (with buckets: bucketed up to k).
        position_terms: which of "c2p" and "p2c" the attention adds to content-to-content; none gives plain
            attention.
        p2c_distance: "released" or "paper" (see the module docstring).
        enhanced_mask_decoder: feed the MLM head through the EMD (only with an MLM head).
        key_bias: the content keys (and W_k,r) have a bias, as in the released 1.5B model; False: the keys have
            none (DeBERTa-base and -large).
        share_position_projections: project P with the content projections W_q,c and W_k,c (the 1.5B model)
            instead of W_q,r and W_k,r of their own.
        position_buckets: b: distances up to b/2 stay exact, longer ones share log-spaced buckets up to k, and P
            has 2b rows (the released 1.5B model: 256); 0: no buckets, P has 2k rows.
        relative_embedding_norm: a LayerNorm on P before every layer reads it (the released 1.5B model).
        ngram_kernel: the width of nGiE's convolution over the embeddings beside the first block (the 1.5B
            model: 3); 0: none.
        ngram_activation: the activation after that convolution.
    """
    # How models saved before these fields existed were built.
    ADDED_FIELDS: ClassVar[dict[str, object]] = {
        "key_bias": False,
        "share_position_projections": False,
        "position_buckets": 0,
        "relative_embedding_norm": False,
        "ngram_kernel": 0,
        "ngram_activation": "gelu",
    }

    vocab_size: int = 50265
    segments: int = 0
    absolute_positions: bool = False
    norm_eps: float = 1e-7
    pooler: bool = False
    max_relative_positions: int = 512
    position_terms: tuple[str, ...] = POSITION_TERMS
    p2c_distance: str = "released"
    enhanced_mask_decoder: bool = True
    key_bias: bool = False
    share_position_projections: bool = False
    position_buckets: int = 0
    relative_embedding_norm: bool = False
    ngram_kernel: int = 0
    ngram_activation: str = "gelu"

    def __post_init__(self) -> None:
        super().__post_init__()
        unknown = [term for term in self.position_terms if term not in POSITION_TERMS]
        if unknown:
            raise PLMError(f"unknown position term(s) {', '.join(map(repr, unknown))}; choose from c2p, p2c")
        # Canonical order, and a tuple (JSON gives lists back), so equal configs compare equal.
        object.__setattr__(self, "position_terms", tuple(t for t in POSITION_TERMS if t in self.position_terms))
        if self.max_relative_positions < 1:
            raise PLMError(f"max_relative_positions must be at least 1, got {self.max_relative_positions}")
        if self.p2c_distance not in P2C_DISTANCES:
            raise PLMError(f"unknown p2c_distance {self.p2c_distance!r}; choose one of {', '.join(P2C_DISTANCES)}")
        if self.embedding_dim is not None:
            raise PLMError("DeBERTa's embeddings are as wide as its hidden states; embedding_dim must be None")
        if self.position_buckets and not 2 <= self.position_buckets < 2 * self.max_relative_positions - 2:
            # The buckets' log scale runs from b/2 to k - 1: it needs k - 1 > b/2.
            raise PLMError(f"position_buckets must be 0 or from 2 to 2 * max_relative_positions - 3 = "
                           f"{2 * self.max_relative_positions - 3}, got {self.position_buckets}")
        if self.ngram_kernel < 0 or (self.ngram_kernel and self.ngram_kernel % 2 == 0):
            raise PLMError(f"ngram_kernel must be 0 or odd (the convolution keeps the length), got {self.ngram_kernel}")
        if self.ngram_activation not in ACTIVATIONS:
            choices = ", ".join(ACTIVATIONS)
            raise PLMError(f"unknown ngram_activation {self.ngram_activation!r}; choose one of {choices}")

    @property
    def uses_mask_decoder(self) -> bool:
        """Whether the model builds the enhanced mask decoder: asked for, and with an MLM head."""
        return self.enhanced_mask_decoder and "mlm" in self.pretraining_heads


PRESETS = {
    "deberta-base": DebertaConfig(),
    "deberta-large": DebertaConfig(dim=1024, layers=24, heads=16, ffn_dim=4096),
    # The paper's 48 layers of 1536 (section 5.3), with the release's layout (microsoft/deberta-v2-xxlarge), so that
    # its weights load as they were trained.
    "deberta-1.5b": DebertaConfig(
        vocab_size=128100, dim=1536, layers=48, heads=24, ffn_dim=6144, key_bias=True,
        share_position_projections=True, position_buckets=256, relative_embedding_norm=True, ngram_kernel=3,
    ),
    # Small ones for CPU work; the vocabulary follows the tokenizer they are trained with.
    "deberta-mini": DebertaConfig(
        vocab_size=8192, context_length=256, max_relative_positions=256, dim=256, layers=4, heads=4, ffn_dim=1024
    ),
    "deberta-micro": DebertaConfig(
        vocab_size=512, context_length=64, max_relative_positions=64, dim=32, layers=2, heads=2, ffn_dim=128
    ),
}


RECIPE = PretrainingRecipe(
    preset="deberta-mini",
    tokenizer="wordpiece",  # the paper reuses RoBERTa's byte-level BPE; plm's MLM needs [MASK]/[CLS]/[SEP]
    objective="mlm",
    objectives=("mlm", "mlm+nsp", "mlm+sop"),
    block_size=128,
    hyperparameters=Hyperparameters(lr=6e-4, min_lr=0.0, warmup=100, schedule="linear", betas=(0.9, 0.999), eps=1e-6),
    # DeBERTa: Adam, beta1 0.9, beta2 0.999, eps 1e-6, lr 2e-4, weight decay 0.01, 10K warmup steps,
    # linear decay.
    paper=Hyperparameters(lr=2e-4, min_lr=0.0, warmup=10_000, schedule="linear", betas=(0.9, 0.999), eps=1e-6),
    source="DeBERTa (He et al., 2021) appendix A, pre-training hyperparameters",
    paper_scale=None,  # the seed (001) gives no batch, sequence length or steps: only the optimizer is the paper's
)


class DisentangledAttention(MultiHeadAttention):
    """Multi-head attention whose scores add c2p and p2c terms from relative positions.

    As in the released model, ``in_proj`` (W_q,c, W_k,c, W_v,c) has no bias; queries
    and values have biases of their own, keys none but with ``key_bias`` (the 1.5B model).
    ``position_key_proj`` is W_k,r (c2p, with a bias where the keys have one) and
    ``position_query_proj`` W_q,r (p2c); only the switched-on terms exist and run, and none
    with ``share_projections``, which projects P with W_k,c and W_q,c and their biases.

    Args:
        dim: the hidden size.
        heads: the attention heads.
        max_relative_positions: k, the relative distances told apart.
        position_terms: which of "c2p" and "p2c" to add.
        p2c_distance: "released" or "paper".
        dropout: the dropout on the attention weights.
        position_dropout: the dropout on the relative position embeddings.
        key_bias: give the content keys (and W_k,r) a bias.
        share_projections: W_k,r = W_k,c and W_q,r = W_q,c.
        position_buckets: b, or 0 for none (see [`log_buckets`][plm.models.deberta.log_buckets]).
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        max_relative_positions: int,
        position_terms: Sequence[str] = POSITION_TERMS,
        p2c_distance: str = "released",
        dropout: float = 0.0,
        position_dropout: float = 0.0,
        *,
        key_bias: bool = False,
        share_projections: bool = False,
        position_buckets: int = 0,
    ) -> None:
        super().__init__(dim, heads, dropout, bias=False)
        self.out_proj = Linear(dim, dim)
        self.query_bias = nn.Parameter(torch.zeros(dim))
        self.key_bias = nn.Parameter(torch.zeros(dim)) if key_bias else None
        self.value_bias = nn.Parameter(torch.zeros(dim))
        self.max_relative_positions = max_relative_positions
        self.position_buckets = position_buckets
        self.position_terms = tuple(position_terms)
        self.p2c_distance = p2c_distance
        self.share_projections = share_projections
        own = not share_projections
        self.position_key_proj = Linear(dim, dim, bias=key_bias) if own and "c2p" in self.position_terms else None
        self.position_query_proj = Linear(dim, dim) if own and "p2c" in self.position_terms else None
        self.position_dropout = nn.Dropout(position_dropout)
        # Dividing Q (and Q_r) before any product keeps fp16 scores in range (PITFALLS #6).
        self.scale = math.sqrt(self.head_dim * (1 + len(self.position_terms)))

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        context: torch.Tensor | None = None,
        **options,
    ) -> torch.Tensor:
        """Queries from ``x``; keys and values from ``context`` (the EMD) or ``x``.

        Args:
            x: (B, T, dim), or the (tokens, dim) real tokens with ``packing`` in ``options``.
            mask: boolean (B, 1, T or 1, S), True where a query may attend; or None.
            context: (B, S, dim) the keys' and values' input, or None for ``x``.
            **options (torch.Tensor): [`MultiHeadAttention`][plm.core.attention.MultiHeadAttention]'s further inputs,
                and ``relative_embeddings`` P (2k, dim), the model's one table.

        Returns:
            The attention's output, shaped as ``x``.

        Raises:
            PLMError: position terms without ``relative_embeddings``.
        """
        return super().forward(x, mask, memory=context, **options)

    def project(
        self, x: torch.Tensor, memory: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The content queries, keys and values, with the query, value (and key) biases added.

        Args:
            x: (B, T, dim), the queries' input.
            memory: (B, S, dim), the keys' and values' input, or None for ``x``.

        Returns:
            Queries (B, T, dim), keys and values (B, S, dim).
        """
        queries, keys, values = super().project(x, memory)
        if self.key_bias is not None:
            keys = keys + self.key_bias
        return queries + self.query_bias, keys, values + self.value_bias

    def project_positions(self, table: torch.Tensor, term: str) -> torch.Tensor:
        """K_r = P W_k,r (c2p) or Q_r = P W_q,r (p2c) of the rows ``table`` (2span, dim) of P: (1, H, 2span, hd).

        With shared projections W_k,r and W_q,r are the content keys' and queries' rows of ``in_proj``, and their
        biases come along.

        Args:
            table: (2span, dim) rows of P.
            term: "c2p" or "p2c".

        Returns:
            (1, H, 2span, hd).
        """
        if self.share_projections:
            rows = slice(self.dim, 2 * self.dim) if term == "c2p" else slice(0, self.dim)
            bias = self.key_bias if term == "c2p" else self.query_bias
            projected = linear(table, self.in_proj.weight[rows], bias)
        else:
            projection = self.position_key_proj if term == "c2p" else self.position_query_proj
            assert projection is not None  # only switched-on terms are asked for
            projected = projection(table)
        return self.split_heads(projected[None])

    def attend(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor | None,
        is_causal: bool,
        relative_embeddings: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """softmax((Q_c K_c^T + c2p + p2c) / sqrt(d (1 + terms)) + mask) V over (B, H, T, hd) tensors.

        ``mask`` (B, 1, T or 1, S) must let every query row attend somewhere, as
        [`build_attention_mask`][plm.core.masks.build_attention_mask] guarantees, so that no row is all -inf.

        Args:
            queries: (B, H, T, hd).
            keys: (B, H, S, hd).
            values: (B, H, S, hd).
            mask: boolean (B, 1, T or 1, S), True where a query may attend; or None.
            is_causal: mask the future (no position terms only).
            relative_embeddings: P (2k, dim), needed with position terms.

        Returns:
            (B, H, T, hd).

        Raises:
            PLMError: position terms without ``relative_embeddings``.
        """
        queries = queries / self.scale
        if not self.position_terms:
            attention_bias = mask
        else:
            if relative_embeddings is None:
                raise PLMError(f"the {' and '.join(self.position_terms)} terms need the relative position embeddings")
            attention_bias = self.position_scores(queries, keys, relative_embeddings)  # (B, H, T, S)
            if mask is not None:
                attention_bias = attention_bias.masked_fill(~mask, float("-inf"))
        return self.scaled_dot_product(queries, keys, values, attention_bias, is_causal, scale=1.0)

    def position_scores(
        self, queries: torch.Tensor, keys: torch.Tensor, relative_embeddings: torch.Tensor
    ) -> torch.Tensor:
        """c2p + p2c, already scaled: (B, H, T, S) from scaled queries (B, H, T, hd) and keys (B, H, S, hd).

        Each term multiplies by every one of the 2k relative positions (2b with buckets), then picks for
        score (i, j) the one at the pair's distance: with a strided view when no distance
        is clipped or bucketed
        ([`unclipped_position_scores`][plm.models.deberta.DisentangledAttention.unclipped_position_scores]),
        else with a gather, as the released code does.

        Args:
            queries: (B, H, T, hd), already divided by the scale.
            keys: (B, H, S, hd).
            relative_embeddings: P (2k or 2b, dim).

        Returns:
            (B, H, T, S) scores.
        """
        batch, heads, query_length, _ = queries.shape
        key_length = keys.shape[2]
        # Only distances in (-span, span) occur, so only those 2 * span rows of P are projected.
        half = self.position_buckets or self.max_relative_positions  # P: 2 * half rows, row r: distance r - half
        span, gathered = relative_span(max(query_length, key_length), self.max_relative_positions,
                                       self.position_buckets)
        # table: (2span, dim); row r: distance r - span
        table = self.position_dropout(relative_embeddings[half - span : half + span])
        if not gathered and query_length == key_length:
            return self.unclipped_position_scores(queries, keys, table)
        shape = (batch, heads, query_length, key_length)
        i = torch.arange(query_length, device=queries.device)[:, None]
        j = torch.arange(key_length, device=queries.device)[None, :]
        relative = i - j  # (T, S)
        if self.position_buckets:
            relative = log_buckets(relative, self.position_buckets, self.max_relative_positions)
        query_to_key = (relative + span).clamp(0, 2 * span - 1)  # (T, S): delta(i, j), a row of the sliced table
        scores = None
        if "c2p" in self.position_terms:
            position_keys = self.project_positions(table, "c2p")  # (1, H, 2span, hd)
            c2p = queries @ position_keys.transpose(-1, -2)  # (B, H, T, 2span): Q^c_i . K^r of every distance
            scores = c2p.gather(-1, query_to_key.expand(shape))
        if "p2c" in self.position_terms:
            position_queries = self.project_positions(table, "p2c") / self.scale  # (1, H, 2span, hd)
            p2c = position_queries @ keys.transpose(-1, -2)  # (B, H, 2span, S): Q^r of every distance . K^c_j
            if self.p2c_distance == "paper":
                distance = (span - relative).clamp(0, 2 * span - 1)  # delta(j, i)
            else:
                distance = query_to_key  # delta(i, j), as the released code computes it
            p2c = p2c.gather(-2, distance.expand(shape))
            scores = p2c if scores is None else scores + p2c
        assert scores is not None  # attend asks for them only when there are position terms
        return scores

    def unclipped_position_scores(self, queries: torch.Tensor, keys: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        """`position_scores` when T = S = span <= k, so that no distance is clipped (nor bucketed).

        Every distance i - j then lies in (-span, span) and the score of (i, j) sits in
        row i (c2p) or row j (p2c) of a term's product with the 2span positions, at a
        column that moves by one with j - i: [`diagonals`][plm.models.deberta.diagonals] picks it with a strided
        view instead of gathering, which saves the (B, H, T, S) copies, the index tensors
        and the scatter of the gather's backward. Reversing the table's rows turns a
        distance i - j into a column that grows with j.

        Args:
            queries: (B, H, T, hd), already divided by the scale.
            keys: (B, H, T, hd).
            table: (2span, dim), the rows of P for distances -span .. span - 1.

        Returns:
            (B, H, T, T) scores.
        """
        span = queries.shape[2]
        reversed_table = table.flip(0)  # row r: distance span - 1 - r
        scores = None
        if "c2p" in self.position_terms:
            position_keys = self.project_positions(reversed_table, "c2p")  # (1, H, 2span, hd)
            # c2p(i, j) = Q^c_i . K^r of distance i - j: reversed row span - 1 - (i - j), column j - i + span - 1
            scores = diagonals(queries @ position_keys.transpose(-1, -2), span - 1)  # (B, H, T, S)
        if "p2c" in self.position_terms:
            released = self.p2c_distance == "released"
            position_queries = self.project_positions(table if released else reversed_table, "p2c")
            position_queries = position_queries / self.scale  # (1, H, 2span, hd)
            # p2c(i, j) = K^c_j . Q^r of distance i - j (released): row j, column i - j + span of the table;
            # of distance j - i (paper): row j, column span - 1 - (j - i) of the reversed table
            p2c = diagonals(keys @ position_queries.transpose(-1, -2), span if released else span - 1)  # (B, H, S, T)
            p2c = p2c.transpose(-1, -2)
            scores = p2c if scores is None else scores + p2c
        assert scores is not None  # attend asks for them only when there are position terms
        return scores


def log_buckets(distance: torch.Tensor, buckets: int, max_distance: int) -> torch.Tensor:
    """The released 1.5B model's relative distances: exact up to m = b/2, then log-spaced buckets.

    bucket(d) = d for |d| <= m, else sign(d) (m + ceil((m - 1) log(|d| / m) / log((k - 1) / m))): the
    buckets m + 1 .. 2m - 1 cover the distances up to k - 1, and longer ones fall beyond, where the
    gather clips them to the table's last row. Computed in float32 as the released code computes it,
    so that each distance lands in the same bucket.

    Args:
        distance: (T, S) int64 distances i - j.
        buckets: b.
        max_distance: k.

    Returns:
        (T, S) int64 bucketed distances, in (-2m, 2m) up to k - 1.
    """
    middle = buckets // 2
    magnitude = distance.abs().clamp(min=middle)  # the near ones are kept below; this keeps log's argument >= 1
    scale = torch.log(torch.tensor((max_distance - 1) / middle))
    logarithmic = torch.ceil(torch.log(magnitude / middle) / scale * (middle - 1)) + middle
    return torch.where(distance.abs() <= middle, distance, logarithmic.long() * distance.sign())


def relative_span(length: int, max_relative_positions: int, position_buckets: int) -> tuple[int, bool]:
    """How many rows of P a pass over ``length`` tokens projects, 2 * span, and whether it must gather them.

    Without buckets a distance is clipped once ``length`` passes k, with buckets it is bucketed once
    ``length`` - 1 passes b/2; until then span = ``length`` and the scores take the strided view.

    Args:
        length: the longer of the queries' and keys' lengths.
        max_relative_positions: k.
        position_buckets: b, or 0.

    Returns:
        span, and whether distances are clipped or bucketed.
    """
    if position_buckets and length - 1 > position_buckets // 2:
        return position_buckets, True
    span = min(length, position_buckets or max_relative_positions)
    return span, length > span


def diagonals(products: torch.Tensor, offset: int) -> torch.Tensor:
    """The (..., A, A) view ``out[..., a, b] = products[..., a, b - a + offset]`` of (..., A, W) products.

    One row down and one column left in ``products`` is W - 1 elements further in
    memory, so the result is ``products`` read with row stride W - 1: a view, no copy
    (Transformer-XL's "relative shift"). Needs 0 <= b - a + offset < W for all a, b < A.

    Args:
        products: (..., A, W).
        offset: the column of ``out[..., 0, 0]``.

    Returns:
        The (..., A, A) view (of a contiguous copy, if ``products`` was not contiguous).
    """
    products = products.contiguous()
    *batch, rows, width = products.shape
    strides = (*products.stride()[:-2], width - 1, 1)
    return products.as_strided((*batch, rows, rows), strides, products.storage_offset() + offset)


def position_term_values(config: DebertaConfig, batch: int, block: int) -> float:
    """fp32 values per token that one `DisentangledAttention` pass keeps for backward beyond plain attention.

    For ``plm plan``, read off
    [`DisentangledAttention.position_scores`][plm.models.deberta.DisentangledAttention.position_scores] with T = S =
    ``block`` and span as [`relative_span`][plm.models.deberta.relative_span] gives it:

    - each term's product, (B, H, T, hd) @ (1, H, hd, 2span), runs as one bmm over B*H,
      whose backward keeps both operands: the content side copied contiguous (B*H, T, hd),
      ``dim`` per token, and the positions expanded over the batch (B*H, hd, 2span),
      ``dim * 2span / T`` per token;
    - the (2span, dim) tables the projections read ([`position_tables`][plm.models.deberta.position_tables]), once per
      pass and not per token;
    - when distances are clipped (T > k) or bucketed, what the gathers keep: each its input, the
      (B, H, T, 2span) product, ``heads * 2span`` per token, and the (T, S) int64 indices.

    Not kept: the products on the unclipped path (the strided view that picks from them
    needs no values in backward), and the (B, H, T, T) sum of the terms, which reaches
    SDPA as a bias whose keeping is the kernel's (``ExtraActivations.score_bias``).

    Args:
        config: the model's config.
        batch: B, the sequences of a step.
        block: T, the tokens of each.

    Returns:
        The values per token; 0 without position terms.
    """
    terms = len(config.position_terms)
    if not terms:
        return 0.0
    span, clipped = relative_span(block, config.max_relative_positions, config.position_buckets)
    products = terms * config.dim * (1 + 2 * span / block)
    tables = position_tables(config, clipped) * 2 * span * config.dim
    if not clipped:
        return products + tables / (batch * block)
    gathered = terms * config.heads * 2 * span
    indices = 2 * len(gather_indices(config)) * block * block  # int64: 2 fp32 values each
    return products + gathered + (tables + indices) / (batch * block)


def position_tables(config: DebertaConfig, clipped: bool) -> int:
    """How many (2span, dim) tables a pass keeps: the position dropout's noise and each arrangement of P's rows.

    Unclipped, c2p (and the paper's p2c) project P's rows reversed (a copy, by ``flip``),
    the released p2c projects them in order; clipped, both read them in order. Without
    position dropout the rows in order are a view of the parameter: nothing new.

    Args:
        config: the model's config.
        clipped: distances are clipped (the block is longer than k) or bucketed.

    Returns:
        The number of tables.
    """
    dropped = config.dropout > 0
    orders = {"in order"} if clipped else {
        "reversed" if term == "c2p" or config.p2c_distance == "paper" else "in order" for term in config.position_terms
    }
    return dropped + ("reversed" in orders) + (dropped and "in order" in orders)


def gather_indices(config: DebertaConfig) -> set[str]:
    """The distinct (T, S) distance tensors that clipped position terms gather with.

    Args:
        config: the model's config.

    Returns:
        Their names: "delta(i, j)" and, for the paper's p2c, "delta(j, i)".
    """
    return {"delta(j, i)" if term == "p2c" and config.p2c_distance == "paper" else "delta(i, j)"
            for term in config.position_terms}


class NGramConvolution(nn.Module):
    """nGiE (the 1.5B model): LayerNorm(h_1 + act(conv(E))), a convolution over the embeddings E beside the first block.

    The paper adds it "to induce n-gram knowledge of sub-word encodings"; its output and the first block's
    output h_1 are summed before the next block, through a LayerNorm of its own, as the released code does.
    Padding positions are zeros in E and hold zeros after the convolution.

    Args:
        dim: the hidden size.
        kernel: the convolution's width, odd.
        activation: one of the core's activations.
        norm_eps: the LayerNorm's epsilon.
        dropout: the dropout on the convolution's output, before the activation.
    """

    def __init__(self, dim: int, kernel: int, activation: str, norm_eps: float, dropout: float) -> None:
        super().__init__()
        self.conv = nn.Conv1d(dim, dim, kernel, padding=kernel // 2)
        nn.init.normal_(self.conv.weight, std=0.02)
        nn.init.zeros_(self.conv.bias)  # type: ignore[arg-type]  # Conv1d has a bias unless told otherwise
        self.activation = ACTIVATIONS[activation]
        self.dropout = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(dim, eps=norm_eps)

    def forward(self, embeddings: torch.Tensor, first: torch.Tensor, packing: Packing | None) -> torch.Tensor:
        """The first block's output with the n-gram features added, shaped as ``first``.

        Args:
            embeddings: E, (B, T, dim), or (tokens, dim) of the real tokens with ``packing``.
            first: h_1, the first block's output, shaped as ``embeddings``.
            packing: where the real tokens of a padded batch are, or None.

        Returns:
            The input of the second block, shaped as ``first``.
        """
        padded = packing.unpack(embeddings) if packing is not None else embeddings  # (B, T, dim), zeros at padding
        ngrams = self.conv(padded.transpose(1, 2)).transpose(1, 2)  # (B, T, dim): each token and its neighbours
        if packing is not None:
            ngrams = packing.pack(ngrams)  # the real tokens' rows only
        return self.norm(first + self.activation(self.dropout(ngrams)))


class EnhancedMaskDecoder(nn.Module):
    """I = H + P_abs, then I <- block(queries I, keys and values H), n times, before the MLM head.

    The block is the encoder's last one (weights shared); the decoder owns only the
    absolute position table P_abs. As the paper describes it, H is the encoder's output;
    microsoft/DeBERTa's pretraining code instead feeds the last block's input and uses
    the EMD in place of that block.

    Args:
        context_length: the positions of P_abs.
        dim: the hidden size.
    """

    def __init__(self, context_length: int, dim: int) -> None:
        super().__init__()
        self.positions = LearnedPositions(context_length, dim)

    def forward(
        self,
        hidden: torch.Tensor,
        block: nn.Module,
        mask: torch.Tensor | None,
        position_ids: torch.Tensor,
        attention_inputs: dict[str, torch.Tensor],
    ) -> torch.Tensor:
        """hidden: (B, T, dim) encoder output -> (B, T, dim) input of the MLM head.

        Args:
            hidden: (B, T, dim), the encoder's output H.
            block: the encoder's last block.
            mask: the encoder's attention mask, or None.
            position_ids: (B, T) absolute positions.
            attention_inputs: the block's attention inputs (the relative position embeddings).

        Returns:
            (B, T, dim).

        Raises:
            PLMError: a sequence longer than P_abs.
        """
        check_context(hidden.shape[1], self.positions.max_positions)
        queries = hidden + self.positions(position_ids)
        for _ in range(MASK_DECODER_STEPS):
            queries = block(queries, mask, context=hidden, **attention_inputs)
        return queries


class Deberta(Encoder[DebertaConfig]):
    """DeBERTa: the encoder with disentangled attention and the enhanced mask decoder (family ``deberta``).

    Args:
        config: the model's config.
    """
    family = "deberta"
    config_class = DebertaConfig

    def __init__(self, config: DebertaConfig) -> None:
        super().__init__(config)
        self.relative_embeddings: nn.Embedding | None = None
        self.relative_norm: nn.LayerNorm | None = None
        if config.position_terms:  # P: one table for all layers, of 2k rows (2b with buckets)
            rows = 2 * (config.position_buckets or config.max_relative_positions)
            self.relative_embeddings = nn.Embedding(rows, config.dim)
            nn.init.normal_(self.relative_embeddings.weight, std=0.02)
            if config.relative_embedding_norm:
                self.relative_norm = nn.LayerNorm(config.dim, eps=config.norm_eps)
        self.ngram = (
            NGramConvolution(config.dim, config.ngram_kernel, config.ngram_activation, config.norm_eps, config.dropout)
            if config.ngram_kernel
            else None
        )
        self.mask_decoder = EnhancedMaskDecoder(config.context_length, config.dim) if config.uses_mask_decoder else None

    @classmethod
    def extra_activations(cls, config: DebertaConfig, batch: int, block: int, device: str) -> ExtraActivations:
        """What the paper adds to a stack of core blocks, for ``plm plan``.

        The enhanced mask decoder's passes through the last block are whole block passes;
        the encoder output H they take keys and values from stays for their backward. Every
        pass's attention keeps what [`position_term_values`][plm.models.deberta.position_term_values] counts, and hands
        SDPA c2p + p2c as a (B, H, T, T) score bias that needs a gradient.

        Args:
            config: the model's config.
            batch: the sequences of a step.
            block: the tokens of each.
            device: "cpu" or "cuda" (the count is the same on both).

        Returns:
            What the model keeps beyond the core blocks.
        """
        decoder = MASK_DECODER_STEPS if config.uses_mask_decoder else 0
        # nGiE keeps the convolution's input and output and the LayerNorm's input (dim each), and its dropout mask.
        ngram = (3 + (config.dropout > 0) / 4) * config.dim if config.ngram_kernel else 0
        return ExtraActivations(
            passes=decoder,
            per_pass=position_term_values(config, batch, block),
            kept=(config.dim if decoder else 0) + ngram,  # H (B, T, dim)
            score_bias=bool(config.position_terms),
        )

    def build_attention(self, config: DebertaConfig) -> DisentangledAttention:
        """A block's `DisentangledAttention`, its position dropout the model's dropout.

        Args:
            config: the model's config.

        Returns:
            The attention module.
        """
        return DisentangledAttention(
            config.dim,
            config.heads,
            config.max_relative_positions,
            config.position_terms,
            config.p2c_distance,
            dropout=config.attention_dropout,
            position_dropout=config.dropout,
            key_bias=config.key_bias,
            share_projections=config.share_position_projections,
            position_buckets=config.position_buckets,
        )

    def attention_inputs(self, step: EncoderPass) -> dict[str, torch.Tensor]:
        """The relative position embeddings P, which every block's attention reads (through its LayerNorm, if any).

        Args:
            step: the pass.

        Returns:
            ``relative_embeddings`` (2k or 2b, dim); none without position terms.
        """
        if self.relative_embeddings is None:
            return {}
        table = self.relative_embeddings.weight
        return {"relative_embeddings": self.relative_norm(table) if self.relative_norm is not None else table}

    def encode(self, hidden: torch.Tensor, step: EncoderPass) -> torch.Tensor:
        """The blocks, with nGiE's n-gram features added to the first block's output when the model has them.

        Args:
            hidden: the embeddings, (B, T, dim) or (tokens, dim) packed.
            step: the pass.

        Returns:
            The last block's output, shaped as ``hidden``.
        """
        if self.ngram is None:
            return super().encode(hidden, step)
        layers, inputs = self.layers(), self.attention_inputs(step)
        first = run_blocks(layers[:1], hidden, step.mask, packing=step.packing, attention_inputs=inputs)
        first = self.ngram(hidden, first, step.packing)
        if step.hidden_states is not None:
            step.hidden_states.append(step.packing.unpack(first) if step.packing is not None else first)
        return run_blocks(layers[1:], first, step.mask, hidden_states=step.hidden_states, packing=step.packing,
                          attention_inputs=inputs)

    def predict_masked(
        self, hidden: torch.Tensor, step: EncoderPass, masked_positions: torch.Tensor | None
    ) -> torch.Tensor:
        """MLM logits, through the enhanced mask decoder when the model has one.

        Args:
            hidden: (B, T, dim) final hidden states.
            step: the pass.
            masked_positions: (B, T) bool, or None for every position.

        Returns:
            Logits (B, T, V), or (n_masked, V).

        Raises:
            PLMError: a sequence longer than the decoder's positions.
        """
        if self.mask_decoder is not None:
            last_block = self.layers()[-1]
            hidden = self.mask_decoder(hidden, last_block, step.mask, step.position_ids, self.attention_inputs(step))
        return super().predict_masked(hidden, step, masked_positions)
