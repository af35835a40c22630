"""The Transformer block, pre-LN (GPT-2) or post-LN (the Transformer, GPT-1, BERT).

A family changes a block by handing it its own attention or feed-forward module
(DeBERTa's disentangled attention, ALBERT's shared layers), never by copying it; a
family's attention reaches its blocks through
[`PretrainedModel.build_block`][plm.models.base.PretrainedModel.build_block].
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from plm.core.attention import KVCache, MultiHeadAttention
from plm.core.masks import Packing
from plm.cpu.linear import Linear
from plm.errors import PLMError

ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,  # swish, Marian's
}


@dataclass(frozen=True)
class BlockConfig:
    """The shape of one block; family configs derive theirs from their own fields.

    Attributes:
        dim: the hidden size.
        heads: the attention heads.
        ffn_dim: the feed-forward layer's inner size.
        activation: the feed-forward activation: "gelu", "gelu_tanh", "relu" or "silu".
        norm_first: pre-LN (GPT-2) when True, post-LN (the Transformer, GPT-1, BERT) when False.
        norm_eps: the LayerNorms' epsilon.
        dropout: the dropout on each sub-layer's output.
        attention_dropout: the dropout on the attention weights.
        bias: give the projections biases.
        cross_attention: add encoder-decoder attention (a Transformer decoder's block).
    """

    dim: int
    heads: int
    ffn_dim: int
    activation: str = "gelu"
    norm_first: bool = True
    norm_eps: float = 1e-5
    dropout: float = 0.1
    attention_dropout: float = 0.1
    bias: bool = True
    cross_attention: bool = False

    @classmethod
    def of(cls, config: object) -> BlockConfig:
        """The block shape of a family config, from its fields named like these ones.

        Args:
            config: a family config; the fields it lacks keep their defaults.

        Returns:
            The block config.
        """
        return cls(**{f.name: getattr(config, f.name) for f in dataclasses.fields(cls) if hasattr(config, f.name)})


class FeedForward(nn.Module):
    """FFN(x) = act(x W_1 + b_1) W_2 + b_2, applied at every position.

    Args:
        dim: the hidden size.
        ffn_dim: the inner size.
        activation: "gelu", "gelu_tanh", "relu" or "silu".
        bias: give the two layers biases.

    Raises:
        PLMError: an unknown activation.
    """

    def __init__(self, dim: int, ffn_dim: int, activation: str = "gelu", bias: bool = True) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise PLMError(f"unknown activation {activation!r}; choose one of {', '.join(ACTIVATIONS)}")
        self.fc_in = Linear(dim, ffn_dim, bias=bias)
        self.fc_out = Linear(ffn_dim, dim, bias=bias)
        self.activation = ACTIVATIONS[activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The feed-forward layer at every position.

        Args:
            x: (..., dim) hidden states.

        Returns:
            The (..., dim) output.
        """
        return self.fc_out(self.activation(self.fc_in(x)))


class TransformerBlock(nn.Module):
    """Self-attention, optional encoder-decoder attention, and a feed-forward layer.

    Each sub-layer is wrapped in dropout, a residual connection and a LayerNorm:
    post-LN computes LayerNorm(x + Sublayer(x)) as in the Transformer, GPT-1 and BERT;
    pre-LN computes x + Sublayer(LayerNorm(x)) as in GPT-2.

    Args:
        config: the block's shape.
        attention: the self-attention module (default: a [`MultiHeadAttention`][plm.core.attention.MultiHeadAttention]
            of ``config``'s shape).
        feed_forward: the feed-forward module (default: a [`FeedForward`][plm.core.block.FeedForward] of ``config``'s
            shape).
        cross_attention: the encoder-decoder attention module, for a ``config`` with ``cross_attention`` (default:
            a [`MultiHeadAttention`][plm.core.attention.MultiHeadAttention] of ``config``'s shape).

    Raises:
        PLMError: a ``cross_attention`` module for a ``config`` without ``cross_attention``.
    """

    def __init__(
        self,
        config: BlockConfig,
        attention: MultiHeadAttention | None = None,
        feed_forward: FeedForward | None = None,
        cross_attention: MultiHeadAttention | None = None,
    ) -> None:
        super().__init__()
        if cross_attention is not None and not config.cross_attention:
            raise PLMError("a cross-attention module for a block whose shape has none (its config's cross_attention is "
                           "False)")
        self.norm_first = config.norm_first
        self.attention = attention or MultiHeadAttention(
            config.dim, config.heads, config.attention_dropout, config.bias
        )
        self.attention_norm = nn.LayerNorm(config.dim, eps=config.norm_eps)
        self.cross_attention = (
            cross_attention or MultiHeadAttention(config.dim, config.heads, config.attention_dropout, config.bias)
            if config.cross_attention
            else None
        )
        self.cross_attention_norm = nn.LayerNorm(config.dim, eps=config.norm_eps) if config.cross_attention else None
        self.feed_forward = feed_forward or FeedForward(config.dim, config.ffn_dim, config.activation, config.bias)
        self.feed_forward_norm = nn.LayerNorm(config.dim, eps=config.norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        is_causal: bool = False,
        cache: KVCache | None = None,
        memory: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        packing: Packing | None = None,
        **attention_inputs: torch.Tensor,
    ) -> torch.Tensor:
        """The block over x: (batch, time, dim); ``attention_inputs`` go to the self-attention module.

        With ``packing`` x is (tokens, dim), the real tokens of a padded batch: all but
        the self-attention works position by position, so only that needs to know.

        Args:
            x: (batch, time, dim) hidden states, or (tokens, dim) with ``packing``.
            mask: the self-attention's mask (see
                [`MultiHeadAttention.forward`][plm.core.attention.MultiHeadAttention.forward]), or None.
            is_causal: the self-attention is causal.
            cache: the self-attention's key/value cache.
            memory: the encoder's output (batch, source, dim), or its keys and values, for encoder-decoder attention.
            memory_mask: the encoder-decoder attention's mask, hiding the source's padding.
            packing: where the real tokens of a padded batch are, when ``x`` holds only those.
            **attention_inputs: extra inputs of the self-attention module.

        Returns:
            The block's output, shaped like ``x``.
        """
        x = self.sublayer(
            x,
            lambda h: self.attention(h, mask, is_causal=is_causal, cache=cache, packing=packing, **attention_inputs),
            self.attention_norm,
        )
        if self.cross_attention is not None and self.cross_attention_norm is not None:  # both or neither
            x = self.sublayer(
                x, lambda h: self.cross_attention(h, memory_mask, memory=memory), self.cross_attention_norm
            )
        return self.sublayer(x, self.feed_forward, self.feed_forward_norm)

    def sublayer(self, x: torch.Tensor, layer, norm: nn.LayerNorm) -> torch.Tensor:
        """One sub-layer with its dropout, residual connection and LayerNorm (pre-LN or post-LN).

        Args:
            x: the sub-layer's input.
            layer (Callable[[torch.Tensor], torch.Tensor]): the sub-layer.
            norm: its LayerNorm.

        Returns:
            The output, shaped like ``x``.
        """
        if self.norm_first:
            return x + self.residual_dropout(layer(norm(x)))
        return norm(x + self.residual_dropout(layer(x)))

    def residual_dropout(self, x: torch.Tensor) -> torch.Tensor:
        """The residual dropout of ``x``; ``x`` itself in eval mode or at p = 0.

        Args:
            x: a sub-layer's output.

        Returns:
            ``x`` after dropout.
        """
        # Dropout is the identity in eval mode and at p = 0. Not calling the module then
        # saves a few Python calls per sub-layer, which add up when decoding token by token.
        return self.dropout(x) if self.training and self.dropout.p > 0 else x
