"""The stack of Transformer blocks: the one loop that every encoder and decoder runs.

GPT runs it causally with a KV cache per block, the BERT-style encoders over the
blocks their family lists (ALBERT repeats shared ones; DeBERTa passes relative
positions to every attention), and the Transformer's decoder with the encoder's
output as memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import torch
from torch import nn

from plm.core.attention import KVCache, MultiHeadAttention
from plm.core.block import FeedForward, TransformerBlock
from plm.core.masks import Packing
from plm.cpu.native_step import LayerTensors


def run_blocks(
    blocks: Iterable[nn.Module],
    hidden: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    is_causal: bool = False,
    caches: Sequence[KVCache] | None = None,
    memory: torch.Tensor | Sequence[KVCache] | None = None,
    memory_mask: torch.Tensor | None = None,
    hidden_states: list[torch.Tensor] | None = None,
    packing: Packing | None = None,
    attention_inputs: Mapping[str, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Run hidden (B, T, dim) through ``blocks`` in order; returns the last block's output.

    ``caches`` holds one self-attention KV cache per block. ``memory`` is the encoder's
    output (B, S, dim), or one cache of its keys and values per block (see
    [`memory_cache`][plm.core.attention.MultiHeadAttention.memory_cache]); ``memory_mask`` (B, 1, 1, S)
    hides its padding. Each block's output is appended to ``hidden_states`` when given;
    ``attention_inputs`` go to every block's self-attention. With ``packing`` (an
    encoder's padded batch) hidden is the (tokens, dim) rows of the real tokens, and so
    is the result; the states appended are unpacked to (B, T, dim), zeros at padding.

    Args:
        blocks: the blocks, in the order they run.
        hidden: (B, T, dim) the embedded input, or (tokens, dim) with ``packing``.
        mask: the self-attention's mask, or None.
        is_causal: the self-attention is causal.
        caches: one self-attention key/value cache per block, or None.
        memory: the encoder's output, or one cache of its keys and values per block; or None.
        memory_mask: the encoder-decoder attention's mask, or None.
        hidden_states: a list each block's output is appended to, or None.
        packing: where the real tokens of a padded batch are, when ``hidden`` holds only those.
        attention_inputs: extra inputs of every block's self-attention.

    Returns:
        The last block's output, shaped like ``hidden``.
    """
    for index, block in enumerate(blocks):
        hidden = block(
            hidden,
            mask,
            is_causal=is_causal,
            cache=caches[index] if caches else None,
            memory=memory[index] if isinstance(memory, (list, tuple)) else memory,
            memory_mask=memory_mask,
            packing=packing,
            **(attention_inputs or {}),
        )
        if hidden_states is not None:
            hidden_states.append(packing.unpack(hidden) if packing is not None else hidden)
    return hidden


def native_layers(blocks: Iterable[nn.Module], caches: Sequence[KVCache]) -> list[LayerTensors] | None:
    """The tensors of ``blocks`` and their caches for the C step ([`NativeDecoder`][plm.cpu.native_step.NativeDecoder]).

    The C step runs the core's own block: a [`TransformerBlock`][plm.core.block.TransformerBlock] of a
    [`MultiHeadAttention`][plm.core.attention.MultiHeadAttention] and a [`FeedForward`][plm.core.block.FeedForward]
    (not a subclass: a family's attention changes the scores), with LayerNorms that have weights and biases, no
    cross-attention, and attention that is not keeping its weights
    ([`attention_weights`][plm.core.attention.attention_weights]).

    Args:
        blocks: the blocks, in the order they run.
        caches: their key/value caches, one per block.

    Returns:
        One [`LayerTensors`][plm.cpu.native_step.LayerTensors] per block, or None where a block is not one the C step
        can run.
    """
    layers = []
    for block, cache in zip(blocks, caches, strict=True):
        if type(block) is not TransformerBlock:
            return None
        attention, feed_forward = block.attention, block.feed_forward
        if (type(attention) is not MultiHeadAttention or type(feed_forward) is not FeedForward
                or block.cross_attention is not None or attention.keep_weights):
            return None
        norms = []
        for norm in (block.attention_norm, block.feed_forward_norm):
            if norm.weight is None or norm.bias is None:
                return None
            norms.append((norm.weight, norm.bias))
        layers.append(LayerTensors(
            norms[0], (attention.in_proj.weight, attention.in_proj.bias),
            (attention.out_proj.weight, attention.out_proj.bias), norms[1],
            (feed_forward.fc_in.weight, feed_forward.fc_in.bias),
            (feed_forward.fc_out.weight, feed_forward.fc_out.bias),
            cache.keys, cache.values))
    return layers
