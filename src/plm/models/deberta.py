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

Sizes (vocabulary 50,265, k = 512): base L=12 H=768 (139M), large L=24 H=1024 (405M),
counted as Hugging Face's ``DebertaModel`` (no pooler, no heads).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from plm.core import LearnedPositions, Linear, MultiHeadAttention
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
    pooler. An unknown position term or ``p2c_distance``, a ``max_relative_positions`` below 1, or an
    ``embedding_dim`` other than None are a PLMError.

    Attributes:
        max_relative_positions: k: distances are clipped to [-k, k).
        position_terms: which of "c2p" and "p2c" the attention adds to content-to-content; none gives plain
            attention.
        p2c_distance: "released" or "paper" (see the module docstring).
        enhanced_mask_decoder: feed the MLM head through the EMD (only with an MLM head).
    """

    vocab_size: int = 50265
    segments: int = 0
    absolute_positions: bool = False
    norm_eps: float = 1e-7
    pooler: bool = False
    max_relative_positions: int = 512
    position_terms: tuple[str, ...] = POSITION_TERMS
    p2c_distance: str = "released"
    enhanced_mask_decoder: bool = True

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

    @property
    def uses_mask_decoder(self) -> bool:
        """Whether the model builds the enhanced mask decoder: asked for, and with an MLM head."""
        return self.enhanced_mask_decoder and "mlm" in self.pretraining_heads


PRESETS = {
    "deberta-base": DebertaConfig(),
    "deberta-large": DebertaConfig(dim=1024, layers=24, heads=16, ffn_dim=4096),
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
    and values have biases of their own, keys none. ``position_key_proj`` is W_k,r
    (c2p) and ``position_query_proj`` W_q,r (p2c); only the switched-on terms exist and run.

    Args:
        dim: the hidden size.
        heads: the attention heads.
        max_relative_positions: k, the relative distances told apart.
        position_terms: which of "c2p" and "p2c" to add.
        p2c_distance: "released" or "paper".
        dropout: the dropout on the attention weights.
        position_dropout: the dropout on the relative position embeddings.
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
    ) -> None:
        super().__init__(dim, heads, dropout, bias=False)
        self.out_proj = Linear(dim, dim)
        self.query_bias = nn.Parameter(torch.zeros(dim))
        self.value_bias = nn.Parameter(torch.zeros(dim))
        self.max_relative_positions = max_relative_positions
        self.position_terms = tuple(position_terms)
        self.p2c_distance = p2c_distance
        self.position_key_proj = Linear(dim, dim, bias=False) if "c2p" in self.position_terms else None
        self.position_query_proj = Linear(dim, dim) if "p2c" in self.position_terms else None
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
        """The content queries, keys and values, with the query and value biases added.

        Args:
            x: (B, T, dim), the queries' input.
            memory: (B, S, dim), the keys' and values' input, or None for ``x``.

        Returns:
            Queries (B, T, dim), keys and values (B, S, dim).
        """
        queries, keys, values = super().project(x, memory)
        return queries + self.query_bias, keys, values + self.value_bias

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

        Each term multiplies by every one of the 2k relative positions, then picks for
        score (i, j) the one at the pair's distance: with a strided view when no distance
        is clipped ([`unclipped_position_scores`][plm.models.deberta.DisentangledAttention.unclipped_position_scores]),
        else with a gather, as the released code does.

        Args:
            queries: (B, H, T, hd), already divided by the scale.
            keys: (B, H, S, hd).
            relative_embeddings: P (2k, dim).

        Returns:
            (B, H, T, S) scores.
        """
        batch, heads, query_length, _ = queries.shape
        key_length = keys.shape[2]
        # Only distances in (-span, span) occur, so only those 2 * span rows of P are projected.
        k = self.max_relative_positions
        span = min(max(query_length, key_length), k)
        # table: (2span, dim); row r: distance r - span
        table = self.position_dropout(relative_embeddings[k - span : k + span])
        if query_length == key_length == span:
            return self.unclipped_position_scores(queries, keys, table)
        shape = (batch, heads, query_length, key_length)
        i = torch.arange(query_length, device=queries.device)[:, None]
        j = torch.arange(key_length, device=queries.device)[None, :]
        query_to_key = (i - j + span).clamp(0, 2 * span - 1)  # (T, S): delta(i, j), a row of the sliced table
        scores = None
        if self.position_key_proj is not None:
            position_keys = self.split_heads(self.position_key_proj(table[None]))  # (1, H, 2span, hd)
            c2p = queries @ position_keys.transpose(-1, -2)  # (B, H, T, 2span): Q^c_i . K^r of every distance
            scores = c2p.gather(-1, query_to_key.expand(shape))
        if self.position_query_proj is not None:
            position_queries = self.split_heads(self.position_query_proj(table[None])) / self.scale  # (1, H, 2span, hd)
            p2c = position_queries @ keys.transpose(-1, -2)  # (B, H, 2span, S): Q^r of every distance . K^c_j
            if self.p2c_distance == "paper":
                distance = (j - i + span).clamp(0, 2 * span - 1)  # delta(j, i)
            else:
                distance = query_to_key  # delta(i, j), as the released code computes it
            p2c = p2c.gather(-2, distance.expand(shape))
            scores = p2c if scores is None else scores + p2c
        assert scores is not None  # attend asks for them only when there are position terms
        return scores

    def unclipped_position_scores(self, queries: torch.Tensor, keys: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        """`position_scores` when T = S = span <= k, so that no distance is clipped.

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
        if self.position_key_proj is not None:
            position_keys = self.split_heads(self.position_key_proj(reversed_table[None]))  # (1, H, 2span, hd)
            # c2p(i, j) = Q^c_i . K^r of distance i - j: reversed row span - 1 - (i - j), column j - i + span - 1
            scores = diagonals(queries @ position_keys.transpose(-1, -2), span - 1)  # (B, H, T, S)
        if self.position_query_proj is not None:
            released = self.p2c_distance == "released"
            position_queries = self.split_heads(self.position_query_proj((table if released else reversed_table)[None]))
            position_queries = position_queries / self.scale  # (1, H, 2span, hd)
            # p2c(i, j) = K^c_j . Q^r of distance i - j (released): row j, column i - j + span of the table;
            # of distance j - i (paper): row j, column span - 1 - (j - i) of the reversed table
            p2c = diagonals(keys @ position_queries.transpose(-1, -2), span if released else span - 1)  # (B, H, S, T)
            p2c = p2c.transpose(-1, -2)
            scores = p2c if scores is None else scores + p2c
        assert scores is not None  # attend asks for them only when there are position terms
        return scores


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
    ``block`` and span = min(T, k):

    - each term's product, (B, H, T, hd) @ (1, H, hd, 2span), runs as one bmm over B*H,
      whose backward keeps both operands: the content side copied contiguous (B*H, T, hd),
      ``dim`` per token, and the positions expanded over the batch (B*H, hd, 2span),
      ``dim * 2span / T`` per token;
    - the (2span, dim) tables the projections read ([`position_tables`][plm.models.deberta.position_tables]), once per
      pass and not per token;
    - when distances are clipped (T > k), what the gathers keep: each its input, the
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
    span = min(block, config.max_relative_positions)
    clipped = block > span
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
        clipped: the block is longer than k, so distances are clipped.

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
        if config.position_terms:  # P: one table for all layers
            self.relative_embeddings: nn.Embedding | None = nn.Embedding(2 * config.max_relative_positions, config.dim)
            nn.init.normal_(self.relative_embeddings.weight, std=0.02)
        else:
            self.relative_embeddings = None
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
        return ExtraActivations(
            passes=decoder,
            per_pass=position_term_values(config, batch, block),
            kept=config.dim if decoder else 0,  # H (B, T, dim)
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
        )

    def attention_inputs(self, step: EncoderPass) -> dict[str, torch.Tensor]:
        """The relative position embeddings P, which every block's attention reads.

        Args:
            step: the pass.

        Returns:
            ``relative_embeddings`` (2k, dim); none without position terms.
        """
        if self.relative_embeddings is None:
            return {}
        return {"relative_embeddings": self.relative_embeddings.weight}

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
