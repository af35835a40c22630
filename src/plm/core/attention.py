"""Multi-head attention on scaled_dot_product_attention, with a key/value cache.

One module serves self-attention (GPT, BERT, the Transformer's encoder and decoder)
and encoder-decoder attention: the fused input projection holds W_Q, W_K and W_V
stacked as in ``torch.nn.MultiheadAttention``; for cross-attention the queries come
from the decoder and the keys and values from the encoder's output ("memory").
Families that change the scores (DeBERTa's disentangled attention) subclass it and
override [`MultiHeadAttention.attend`][plm.core.attention.MultiHeadAttention.attend].

When decoding, the encoder-decoder attention computes the keys and values of the
memory once per source sentence
([`MultiHeadAttention.memory_cache`][plm.core.attention.MultiHeadAttention.memory_cache]) and is then given that cache
as its memory. SDPA returns no attention weights; [`attention_weights`][plm.core.attention.attention_weights] switches
the layers of a model to an explicit softmax that keeps them, for as long as it is asked to.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from plm.core.masks import Packing
from plm.cpu.linear import Linear, linear
from plm.cpu.sdpa import scaled_dot_product_attention
from plm.errors import PLMError

FUSED_PARTS = 3  # the blocks of the fused in_proj: W_Q, W_K, W_V, stacked by rows


class KVCache:
    """Keys and values of one attention layer, pre-allocated for ``max_length`` tokens.

    Decoding writes each new token's key and value in place, so a step costs no
    concatenation of the whole history.

    Args:
        keys: (batch, heads, max_length, head_dim) the memory the keys are written to; none is stored yet.
        values: the memory of the values, shaped like ``keys``.
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        self.keys = keys  # (batch, heads, max_length, head_dim)
        self.values = values
        self.length = 0
        self.slot: torch.Tensor | None = None  # static: where the next token goes (see make_static)

    @classmethod
    def empty(
        cls, batch: int, heads: int, max_length: int, head_dim: int, dtype: torch.dtype, device: torch.device
    ) -> KVCache:
        """An empty cache with uninitialised memory for ``max_length`` tokens.

        Args:
            batch: the rows.
            heads: the attention heads.
            max_length: the most tokens it will hold.
            head_dim: the size of each head's keys and values.
            dtype: the keys' and values' dtype.
            device: where their memory is allocated.

        Returns:
            The cache, holding no token yet.
        """
        shape = (batch, heads, max_length, head_dim)
        return cls(torch.empty(shape, dtype=dtype, device=device), torch.empty(shape, dtype=dtype, device=device))

    @property
    def max_length(self) -> int:
        """The most tokens the cache holds (its memory's time axis)."""
        return self.keys.shape[2]

    def make_static(self, slot: torch.Tensor) -> None:
        """From now on, write each new token at position ``slot[0]`` and give attention all ``max_length`` positions.

        A static cache has the same shapes at every step, as a CUDA graph needs: the
        position is a tensor the caller moves (and with it ``length``), and the attention
        mask must hide the positions not written yet. Those are zeroed here, since a
        masked key still multiplies its value by 0 and 0 x NaN from uninitialised
        memory would be NaN.

        Args:
            slot: (1,) int64 on the cache's device, shared by every layer's cache.
        """
        self.keys[:, :, self.length :].zero_()
        self.values[:, :, self.length :].zero_()
        self.slot = slot

    def key_length(self, new: int) -> int:
        """How many key positions attention sees once ``new`` more tokens are stored (all of them when static).

        Args:
            new: the tokens about to be stored.

        Returns:
            The number of key positions.
        """
        return self.max_length if self.slot is not None else self.length + new

    def append(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store (batch, heads, new, head_dim) keys/values; return all stored so far (static: the whole cache).

        Args:
            keys: (batch, heads, new, head_dim) the new tokens' keys.
            values: (batch, heads, new, head_dim) their values.

        Returns:
            The (batch, heads, length, head_dim) keys and values stored so far, the new ones included; a static
            cache returns its whole memory, ``max_length`` positions.

        Raises:
            PLMError: the new tokens would not fit in ``max_length``.
        """
        if self.slot is not None:
            self.keys.index_copy_(2, self.slot, keys)
            self.values.index_copy_(2, self.slot, values)
            return self.keys, self.values
        end = self.length + keys.shape[2]
        if end > self.max_length:
            raise PLMError(f"the key/value cache holds {self.max_length} tokens; {end} were asked for")
        # Slice assignment is one call into C++ (narrow + copy_ would be two): decoding
        # runs this for every layer and token, where Python-side calls are the cost.
        self.keys[:, :, self.length : end] = keys
        self.values[:, :, self.length : end] = values
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]

    def reorder(self, order: torch.Tensor) -> KVCache:
        """A cache whose row i is this cache's row ``order[i]``: beam search keeps the chosen beams' history.

        ``order`` (new_batch,) may repeat rows (one sentence's cache copied to its beams) and drop
        rows. Beam search reorders at every step, so this copies only the positions stored so far
        (most of the cache, allocated for the longest output, holds nothing yet), and into this
        cache's own memory where it has the rows (fresh memory every step costs more than the
        copy): this cache is not to be used after.

        Args:
            order: (new_batch,) the row of this cache each row of the new one takes.

        Returns:
            The reordered cache, holding as many tokens as this one.
        """
        rows = len(order)
        if rows <= self.keys.shape[0]:
            cache = KVCache(self.keys[:rows], self.values[:rows])
        else:
            shape = (rows, *self.keys.shape[1:])
            cache = KVCache(self.keys.new_empty(shape), self.values.new_empty(shape))
        for stored, copy in ((self.keys, cache.keys), (self.values, cache.values)):
            copy[:, :, : self.length] = stored[:, :, : self.length].index_select(0, order)
        cache.length = self.length
        return cache


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = softmax(Q_i K_i^T / sqrt(d_k)) V_i.

    Args:
        dim: the hidden size, split evenly among the heads.
        heads: the number of attention heads.
        dropout: the dropout on the attention weights in training.
        bias: give the projections biases.

    Raises:
        PLMError: ``dim`` is not divisible by ``heads``.
    """

    def __init__(self, dim: int, heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        if dim % heads:
            raise PLMError(f"hidden size {dim} is not divisible by the number of heads {heads}")
        self.dim = dim
        self.heads = heads
        self.head_dim = dim // heads
        self.dropout = dropout
        self.in_proj = Linear(dim, 3 * dim, bias=bias)
        self.in_proj.fused_parts = FUSED_PARTS  # W_Q, W_K, W_V: three layers to a layer-wise optimizer (LAMB)
        self.out_proj = Linear(dim, dim, bias=bias)
        self.keep_weights = False  # set by attention_weights(); then ``weights`` holds the last call's
        self.weights: torch.Tensor | None = None  # (B, H, T, S)

    def project(
        self, x: torch.Tensor, memory: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries from ``x``; keys and values from ``memory`` (cross-attention) or ``x``.

        Args:
            x: (batch, time, dim) the hidden states the queries come from.
            memory: (batch, source, dim) the encoder's output for cross-attention, or None for self-attention.

        Returns:
            The queries, keys and values, each (batch, time or source, dim), heads not split yet.
        """
        if memory is None:
            return self.in_proj(x).chunk(3, dim=-1)  # chunk, not split: split is a Python wrapper
        return self.project_queries(x), *self.project_memory(memory)

    def project_queries(self, x: torch.Tensor) -> torch.Tensor:
        """The queries x W_Q + b_Q: the first third of the fused projection.

        Args:
            x: (batch, time, dim) hidden states.

        Returns:
            The (batch, time, dim) queries.
        """
        bias = self.in_proj.bias[: self.dim] if self.in_proj.bias is not None else None
        return linear(x, self.in_proj.weight[: self.dim], bias)

    def project_memory(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys memory W_K + b_K and values memory W_V + b_V, in one product: the last two thirds.

        Args:
            memory: (batch, source, dim) the encoder's output.

        Returns:
            The (batch, source, dim) keys and values.
        """
        bias = self.in_proj.bias[self.dim :] if self.in_proj.bias is not None else None
        keys, values = linear(memory, self.in_proj.weight[self.dim :], bias).chunk(2, dim=-1)
        return keys, values

    def memory_cache(self, memory: torch.Tensor) -> KVCache:
        """The keys and values of ``memory`` (B, S, dim), full: pass it as ``memory`` at every decoding step.

        Args:
            memory: (batch, source, dim) the encoder's output.

        Returns:
            A cache holding the (batch, heads, source, head_dim) keys and values of every source position.
        """
        keys, values = (self.split_heads(t) for t in self.project_memory(memory))
        cache = KVCache(keys, values)
        cache.length = keys.shape[2]
        return cache

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, time, dim) -> (batch, heads, time, head_dim), a view.

        Args:
            x: (batch, time, dim) projected queries, keys or values.

        Returns:
            The heads' (batch, heads, time, head_dim) view of ``x``.
        """
        batch, time, _ = x.shape
        return x.view(batch, time, self.heads, self.head_dim).transpose(1, 2)  # (B, H, T, hd)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        is_causal: bool = False,
        cache: KVCache | None = None,
        memory: torch.Tensor | KVCache | None = None,
        packing: Packing | None = None,
        **attention_inputs: torch.Tensor,
    ) -> torch.Tensor:
        """Attention of ``x`` over itself (or ``memory``), projected back: (B, T, dim) -> (B, T, dim).

        ``memory``: the encoder's output (B, S, dim) for encoder-decoder attention, or
        its keys and values already computed ([`memory_cache`][plm.core.attention.MultiHeadAttention.memory_cache]).
        With ``packing``, x is the (tokens, dim) rows of a padded batch's real tokens (self-attention only).

        Args:
            x: (B, T, dim) the queries' hidden states, or (tokens, dim) with ``packing``.
            mask: boolean (B, 1, T or 1, S), True where a query may attend, or a float bias added to the scores;
                None attends everywhere (or causally).
            is_causal: each query attends only to the keys up to its own position (SDPA's ``is_causal``).
            cache: the self-attention's key/value cache, which the new keys and values are appended to.
            memory: the encoder's output, or its [`memory_cache`][plm.core.attention.MultiHeadAttention.memory_cache],
                for encoder-decoder attention.
            packing: where the real tokens of a padded batch are, when ``x`` holds only those.
            **attention_inputs: extra inputs of a subclass's [`attend`][plm.core.attention.MultiHeadAttention.attend]
                (DeBERTa's relative positions).

        Returns:
            The (B, T, dim) output, or (tokens, dim) with ``packing``.
        """
        if packing is not None:
            return self.packed_self_attention(x, mask, packing, **attention_inputs)
        batch, time, _ = x.shape
        if isinstance(memory, KVCache):
            queries, keys, values = self.split_heads(self.project_queries(x)), memory.keys, memory.values
        else:
            queries, keys, values = (self.split_heads(t) for t in self.project(x, memory))
            if cache is not None:
                keys, values = cache.append(keys, values)
        out = self.attend(queries, keys, values, mask, is_causal, **attention_inputs)  # (B, H, T, hd)
        return self.out_proj(out.transpose(1, 2).reshape(batch, time, self.dim))

    def packed_self_attention(
        self, x: torch.Tensor, mask: torch.Tensor | None, packing: Packing, **attention_inputs: torch.Tensor
    ) -> torch.Tensor:
        """Self-attention of the packed real tokens x (tokens, dim) -> (tokens, dim).

        The projections run on the real tokens only; the scores and the softmax need
        the padded form, so queries, keys and values are unpacked to (B, T, dim) for them
        (zeros at padding, which ``mask`` hides) and the heads' output is packed again.

        Args:
            x: (tokens, dim) the real tokens' hidden states.
            mask: as for [`forward`][plm.core.attention.MultiHeadAttention.forward], over the padded (B, T) form.
            packing: where the real tokens are in the padded batch.
            **attention_inputs: extra inputs of a subclass's [`attend`][plm.core.attention.MultiHeadAttention.attend].

        Returns:
            The (tokens, dim) output.
        """
        queries, keys, values = (self.split_heads(packing.unpack(t)) for t in self.project(x, None))
        out = self.attend(queries, keys, values, mask, False, **attention_inputs)  # (B, H, T, hd)
        out = out.transpose(1, 2).reshape(packing.batch, packing.time, self.dim)
        return self.out_proj(packing.pack(out))

    def attend(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor | None,
        is_causal: bool,
    ) -> torch.Tensor:
        """softmax(Q K^T / sqrt(d_k) + mask) V over (B, H, T, hd) tensors.

        A family that changes the scores overrides this and takes its own keyword inputs.

        Args:
            queries: (B, H, T, hd) the queries.
            keys: (B, H, S, hd) the keys.
            values: (B, H, S, hd) the values.
            mask: boolean (True = may attend) or a float bias added to the scores, broadcast to (B, H, T, S); or None.
            is_causal: attend causally (``mask`` is then None).

        Returns:
            The (B, H, T, hd) heads' output.
        """
        return self.scaled_dot_product(queries, keys, values, mask, is_causal, 1.0 / math.sqrt(self.head_dim))

    def scaled_dot_product(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor | None,
        is_causal: bool,
        scale: float,
    ) -> torch.Tensor:
        """SDPA, or while `attention_weights` records, the explicit softmax that keeps the weights.

        ``mask`` is boolean (True = may attend) or added to the scores (a float bias).

        Args:
            queries: (B, H, T, hd) the queries.
            keys: (B, H, S, hd) the keys.
            values: (B, H, S, hd) the values.
            mask: boolean or float mask broadcast to (B, H, T, S), or None.
            is_causal: attend causally.
            scale: the factor of the scores Q K^T.

        Returns:
            The (B, H, T, hd) heads' output.
        """
        dropout = self.dropout if self.training else 0.0
        if not self.keep_weights:
            return scaled_dot_product_attention(queries, keys, values, mask, dropout, is_causal, scale)
        scores = (queries @ keys.transpose(-1, -2)) * scale  # (B, H, T, S)
        if is_causal:
            mask = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).tril()
        if mask is not None:
            scores = scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else scores + mask
        self.weights = scores.softmax(-1)
        return F.dropout(self.weights, dropout, self.training) @ values


class AttentionWeights(Mapping):
    """Module name (e.g. "blocks.0.attention") -> the softmax weights (B, H, T, S) of its last call.

    Args:
        modules: the attention layers, by their module name.
    """

    def __init__(self, modules: dict[str, MultiHeadAttention]) -> None:
        self.modules = modules

    def __getitem__(self, name: str) -> torch.Tensor | None:
        return self.modules[name].weights

    def __iter__(self) -> Iterator[str]:
        return iter(self.modules)

    def __len__(self) -> int:
        return len(self.modules)


@contextmanager
def attention_weights(model: nn.Module) -> Iterator[AttentionWeights]:
    """Within the block, every attention layer of ``model`` keeps its weights (an explicit softmax, slower).

    ``with attention_weights(model) as weights: model(ids); weights["blocks.0.attention"]``
    gives layer 0's (batch, heads, query, key) weights. A layer that runs more than once
    (ALBERT's shared blocks, or a decoder step by step) holds those of its last call.

    Args:
        model: the model whose attention layers keep their weights.

    Yields:
        The weights of the layers by module name (None for a layer not called yet); they are dropped on exit.
    """
    modules = {name: m for name, m in model.named_modules() if isinstance(m, MultiHeadAttention)}
    for module in modules.values():
        module.keep_weights = True
    try:
        yield AttentionWeights(modules)
    finally:
        for module in modules.values():
            module.keep_weights = False
            module.weights = None
