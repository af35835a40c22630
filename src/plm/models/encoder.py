"""The bidirectional Transformer encoder that BERT, ALBERT and DeBERTa share.

An encoder embeds tokens (word + absolute position + segment, then LayerNorm),
runs a stack of unmasked Transformer blocks, pools the [CLS] vector, and feeds the
pretraining heads its config asks for. A family changes a step by overriding one
method, never by copying the loop:

- [`build_attention`][plm.models.base.PretrainedModel.build_attention] gives each block its attention module
  (DeBERTa's disentangled attention), the same hook as the decoders'
  ([`GPT`][plm.models.gpt.GPT], [`Transformer`][plm.models.transformer.Transformer]);
  [`Encoder.build_blocks`][plm.models.encoder.Encoder.build_blocks] the blocks (ALBERT shares them);
- [`Encoder.layers`][plm.models.encoder.Encoder.layers] says which blocks run, in order (ALBERT repeats shared ones);
- [`Encoder.attention_inputs`][plm.models.encoder.Encoder.attention_inputs] computes extra inputs for every block's
  attention once per pass (DeBERTa's relative-position embeddings);
- [`Encoder.encode`][plm.models.encoder.Encoder.encode] runs the blocks;
  [`Encoder.predict_masked`][plm.models.encoder.Encoder.predict_masked] runs the MLM head (DeBERTa's enhanced mask
  decoder adds absolute positions just before it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import torch
from torch import nn

from plm.core import (
    BlockConfig,
    LearnedPositions,
    Packing,
    build_attention_mask,
    run_blocks,
)
from plm.core.embeddings import check_context
from plm.errors import PLMError
from plm.models.base import PretrainedModel
from plm.models.pretraining_heads import (
    MLM,
    PAIR_HEADS,
    MaskedLMHead,
    PairHead,
    Pooler,
    PretrainingOutput,
    check_pretraining_heads,
)


@dataclass(frozen=True)
class EncoderConfig:
    """Fields every encoder family has; BERT's values are the defaults.

    Unknown, repeated or conflicting pre-training heads, or an ``embedding_dim`` that is not positive, are a
    PLMError.

    Attributes:
        vocab_size: the tokens of the vocabulary.
        context_length: the most positions.
        dim: H, the hidden size.
        layers: the Transformer blocks.
        heads: attention heads per block.
        ffn_dim: the feed-forward layer's inner size.
        embedding_dim: None: embeddings are ``dim`` wide and feed the blocks directly; an int E: the embeddings
            are E wide and projected E -> dim (ALBERT's factorization).
        segments: number of segment (token type) ids, 0 for no segment embedding.
        absolute_positions: add learned position embeddings at the input (DeBERTa: no).
        activation: the feed-forward activation.
        norm_first: pre-LN blocks; False: post-LN (BERT's).
        norm_eps: the LayerNorms' epsilon.
        dropout: the dropout on embeddings and sublayer outputs.
        attention_dropout: the dropout on attention weights.
        pair_head_dropout: the dropout before the sentence-pair head.
        pooler: the dense + tanh layer over [CLS] (BertForMaskedLM has none).
        pretraining_heads: which of "mlm", "nsp", "sop" to build; only those are built.
    """

    vocab_size: int = 30522
    context_length: int = 512
    dim: int = 768
    layers: int = 12
    heads: int = 12
    ffn_dim: int = 3072
    embedding_dim: int | None = None
    segments: int = 2
    absolute_positions: bool = True
    activation: str = "gelu"
    norm_first: bool = False
    norm_eps: float = 1e-12
    dropout: float = 0.1
    attention_dropout: float = 0.1
    pair_head_dropout: float = 0.0
    pooler: bool = True
    pretraining_heads: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # JSON gives lists back; a frozen config compares equal only with a tuple.
        object.__setattr__(self, "pretraining_heads", tuple(self.pretraining_heads))
        check_pretraining_heads(self.pretraining_heads, self.pooler)
        if self.embedding_dim is not None and self.embedding_dim <= 0:
            raise PLMError(f"embedding_dim must be positive or None, got {self.embedding_dim}")

    @property
    def block(self) -> BlockConfig:
        """The shape of each Transformer block, from these fields."""
        return BlockConfig.of(self)

    @property
    def embedding_width(self) -> int:
        """The width of the embeddings: ``embedding_dim``, or ``dim`` without one."""
        return self.dim if self.embedding_dim is None else self.embedding_dim

    @property
    def pair_head(self) -> str | None:
        """The sentence-pair head asked for: nsp, sop, or None."""
        return next((head for head in self.pretraining_heads if head in PAIR_HEADS), None)


ConfigT = TypeVar("ConfigT", bound=EncoderConfig)  # a family's encoder config

def with_heads(config: EncoderConfig, *heads: str, pooler: bool | None = None) -> EncoderConfig:
    """``config`` with exactly the pretraining ``heads`` (e.g. "mlm", "nsp"); none for a bare encoder.

    By default the pooler is kept only where something reads it: a sentence-pair head,
    or a bare encoder (for fine-tuning). MLM alone leaves it out, so that no parameter
    goes without a gradient (DistributedDataParallel fails on one).

    Args:
        config: the encoder's config.
        *heads: the heads.
        pooler: build the pooler; None: as above.

    Returns:
        The new config.

    Raises:
        PLMError: heads the config refuses (see
            [`check_pretraining_heads`][plm.models.pretraining_heads.check_pretraining_heads]).
    """
    if pooler is None:
        pooler = any(head in PAIR_HEADS for head in heads) or (not heads and config.pooler)
    return dataclasses.replace(config, pretraining_heads=tuple(heads), pooler=pooler)


class EncoderEmbeddings(nn.Module):
    """LayerNorm(word + position + segment embeddings), dropout, then the optional E -> H projection.

    Args:
        config: the encoder's config (its sizes, and whether it has positions, segments and a projection).
    """

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        width = config.embedding_width
        self.word = nn.Embedding(config.vocab_size, width)
        self.position = LearnedPositions(config.context_length, width) if config.absolute_positions else None
        self.segment = nn.Embedding(config.segments, width) if config.segments else None
        self.norm = nn.LayerNorm(width, eps=config.norm_eps)
        self.dropout = nn.Dropout(config.dropout)
        self.projection = nn.Linear(width, config.dim) if config.embedding_dim is not None else None

    def forward(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None, position_ids: torch.Tensor
    ) -> torch.Tensor:
        """Embed the tokens: (B, T) ids -> (B, T, dim), or (tokens,) -> (tokens, dim) when packed.

        Args:
            input_ids: (B, T) or (tokens,).
            token_type_ids: the segments, shaped as ``input_ids``; None: segment 0 everywhere.
            position_ids: the positions, shaped as ``input_ids``.

        Returns:
            The embeddings.
        """
        x = self.word(input_ids)
        if self.position is not None:
            x = x + self.position(position_ids)
        if self.segment is not None:
            x = x + (self.segment(token_type_ids) if token_type_ids is not None else self.segment.weight[0])
        x = self.dropout(self.norm(x))
        return self.projection(x) if self.projection is not None else x


@dataclass
class EncoderPass:
    """What one forward pass carries between the steps a family may override.

    Attributes:
        input_ids: (B, T).
        padding_mask: (B, T), 1 for tokens, 0 for padding; or None.
        mask: (B, 1, 1, T) boolean for the attention, None when nothing is masked.
        position_ids: (B, T).
        packing: where the real tokens are, None when nothing is padded.
        hidden_states: the embeddings' output and each layer's, when asked for; else None.
        extras: family-specific values (e.g. DeBERTa's).
    """

    input_ids: torch.Tensor  # (B, T)
    padding_mask: torch.Tensor | None  # (B, T), 1 for tokens, 0 for padding
    mask: torch.Tensor | None  # (B, 1, 1, T) boolean for the attention, None when nothing is masked
    position_ids: torch.Tensor  # (B, T)
    packing: Packing | None  # where the real tokens are, None when nothing is padded
    hidden_states: list[torch.Tensor] | None = None  # embeddings output + each layer's, when asked for
    extras: dict[str, Any] = field(default_factory=dict)  # family-specific values (e.g. DeBERTa's)


class Encoder(PretrainedModel, Generic[ConfigT]):
    """A BERT-style encoder with optional pooler, MLM head and sentence-pair head.

    A family that subclasses it names its config class: ``Albert(Encoder[AlbertConfig])``.

    Args:
        config: the family's config.
    """

    task_pooling = "cls"

    def __init__(self, config: ConfigT) -> None:
        super().__init__(config)
        self.embeddings = EncoderEmbeddings(config)
        self.blocks = self.build_blocks(config)
        self.pooler = Pooler(config.dim) if config.pooler else None
        self.mlm_head = (
            MaskedLMHead(config.dim, config.embedding_width, config.vocab_size, config.activation, config.norm_eps)
            if MLM in config.pretraining_heads
            else None
        )
        self.pair_head = PairHead(config.dim, config.pair_head_dropout) if config.pair_head else None
        self.init_weights()

    @classmethod
    def config_with_heads(cls, config: EncoderConfig, heads: tuple[str, ...]) -> EncoderConfig:
        """Exactly ``heads``; a sentence-pair head tells segment A from B, so it needs two segments.

        Args:
            config: the encoder's config.
            heads: the heads an objective trains.

        Returns:
            The config with those heads (and two segments for a pair head).

        Raises:
            PLMError: heads the config refuses.
        """
        config = with_heads(config, *heads)
        if config.pair_head and not config.segments:  # DeBERTa has no segment embedding of its own
            config = dataclasses.replace(config, segments=2)
        return config

    def word_embeddings(self) -> nn.Embedding:
        """The token embedding table.

        Returns:
            The embedding.
        """
        return self.embeddings.word

    def vocabulary_embeddings(self) -> list[nn.Embedding]:
        """The token tables: the word embeddings, which the MLM head reads as its output matrix.

        Returns:
            The tables.
        """
        return [self.embeddings.word]

    # Steps a family may override ----------------------------------------------------

    def build_blocks(self, config: ConfigT) -> nn.ModuleList:
        """The Transformer blocks, ``config.layers`` of them, each with the family's attention.

        Each comes from [`build_block`][plm.models.base.PretrainedModel.build_block], its attention from
        [`build_attention`][plm.models.base.PretrainedModel.build_attention].

        Args:
            config: the family's config.

        Returns:
            The blocks.
        """
        return nn.ModuleList(self.build_block(config, config.block) for _ in range(config.layers))

    def layers(self) -> nn.ModuleList | Sequence[nn.Module]:
        """The blocks in the order they run; a shared block may appear more than once.

        Returns:
            The blocks.
        """
        return self.blocks

    def embed(self, step: EncoderPass, token_type_ids: torch.Tensor | None) -> torch.Tensor:
        """(B, T, dim) embeddings, or (tokens, dim) of the real tokens alone when ``step.packing``.

        Args:
            step: the pass.
            token_type_ids: (B, T) segments, or None.

        Returns:
            The embeddings.
        """
        ids: tuple[torch.Tensor | None, ...] = (step.input_ids, token_type_ids, step.position_ids)
        if step.packing is not None:
            ids = tuple(step.packing.pack(t) if t is not None else None for t in ids)  # (tokens,) each
        return self.embeddings(*ids)

    def attention_inputs(self, step: EncoderPass) -> dict[str, torch.Tensor]:
        """Keyword inputs that every block passes to its attention module.

        Args:
            step: the pass.

        Returns:
            The inputs by name: none here; a family may compute some once per pass.
        """
        return {}

    def encode(self, hidden: torch.Tensor, step: EncoderPass) -> torch.Tensor:
        """Run the blocks over the embeddings (B, T, dim), or (tokens, dim) packed; record each output when asked.

        Args:
            hidden: the embeddings.
            step: the pass (its mask, packing and the list that records hidden states).

        Returns:
            The last block's output, shaped as ``hidden``.
        """
        return run_blocks(
            self.layers(),
            hidden,
            step.mask,
            hidden_states=step.hidden_states,
            packing=step.packing,
            attention_inputs=self.attention_inputs(step),
        )

    def predict_masked(
        self, hidden: torch.Tensor, step: EncoderPass, masked_positions: torch.Tensor | None
    ) -> torch.Tensor:
        """MLM logits (B, T, V), or (n_masked, V) for the True positions of ``masked_positions``.

        Args:
            hidden: (B, T, dim) final hidden states.
            step: the pass.
            masked_positions: (B, T) bool, or None for every position.

        Returns:
            The logits.
        """
        if masked_positions is not None:
            hidden = hidden[masked_positions]  # (n_masked, dim), row-major
        assert self.mlm_head is not None  # forward asks for MLM logits only when the model has the head
        return self.mlm_head(hidden, self.embeddings.word.weight)

    # ---------------------------------------------------------------------------------

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        *,
        position_ids: torch.Tensor | None = None,
        masked_positions: torch.Tensor | None = None,
        output_hidden_states: bool = False,
    ) -> PretrainingOutput:
        """input_ids, attention_mask (1 = token, 0 = padding), token_type_ids: (batch, time).

        ``masked_positions`` (bool, batch x time) restricts the MLM logits to those
        positions, in row-major order, so the vocabulary projection runs only there.

        A padded batch is computed on its real tokens alone (see [`Packing`][plm.core.masks.Packing]):
        the embeddings and every position-wise part of the blocks skip the padding, and
        only attention sees the (batch, time) form. The hidden states returned are zero
        at padding positions (what a padding position would hold is never read: no real
        token attends to it).

        Args:
            input_ids: (batch, time).
            attention_mask: (batch, time), 1 = token, 0 = padding; or None.
            token_type_ids: (batch, time) segments, or None.
            position_ids: (batch, time); None: 0, 1, ... in every row.
            masked_positions: (batch, time) bool, or None for MLM logits at every position.
            output_hidden_states: also return the embeddings' output and every block's.

        Returns:
            The hidden states, and the pooler's and pre-training heads' outputs the model has.

        Raises:
            PLMError: a sequence longer than the context (with absolute positions), ``token_type_ids`` for a model
                without segments, or ``masked_positions`` of another shape than ``input_ids``.
        """
        batch, time = input_ids.shape
        if self.config.absolute_positions:
            check_context(time, self.config.context_length)
        if token_type_ids is not None and self.embeddings.segment is None:
            raise PLMError("token_type_ids were given to a model without segment embeddings")
        if masked_positions is not None and masked_positions.shape != input_ids.shape:
            raise PLMError(
                f"masked_positions has shape {tuple(masked_positions.shape)}, input_ids {tuple(input_ids.shape)}"
            )
        if position_ids is None:
            position_ids = torch.arange(time, device=input_ids.device).expand(batch, time)
        mask, _ = build_attention_mask(attention_mask, time, time, causal=False)
        packing = Packing.of(attention_mask)
        step = EncoderPass(input_ids, attention_mask, mask, position_ids, packing, [] if output_hidden_states else None)
        hidden = self.embed(step, token_type_ids)
        if step.hidden_states is not None:
            step.hidden_states.append(packing.unpack(hidden) if packing is not None else hidden)
        hidden = self.encode(hidden, step)
        if packing is not None:
            hidden = packing.unpack(hidden)  # (tokens, dim) -> (B, T, dim), once for the whole stack
        pooled = self.pooler(hidden) if self.pooler is not None else None
        return PretrainingOutput(
            last_hidden_state=hidden,
            hidden_states=tuple(step.hidden_states) if step.hidden_states is not None else None,
            pooler_output=pooled,
            logits=self.predict_masked(hidden, step, masked_positions) if self.mlm_head is not None else None,
            pair_logits=self.pair_head(pooled) if self.pair_head is not None else None,
        )
