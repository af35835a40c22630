"""Attention weights on request: the explicit softmax gives SDPA's outputs and the textbook weights.

The oracle is softmax(Q K^T / sqrt(d_k) + mask) computed here from the layer's own
W_Q, W_K (the rows of its fused input projection), head by head.
"""

from __future__ import annotations

import math

import pytest
import torch

from plm.core import MultiHeadAttention, attention_weights, build_attention_mask
from plm.models import from_preset


def brute_force_weights(attention: MultiHeadAttention, x, memory, allowed) -> torch.Tensor:
    """(B, H, T, S) weights from the definition; ``allowed`` (B, T, S) boolean or None."""
    dim, heads = attention.dim, attention.heads
    head_dim = dim // heads
    weight, bias = attention.in_proj.weight, attention.in_proj.bias
    source = x if memory is None else memory
    q = x @ weight[:dim].T + bias[:dim]
    k = source @ weight[dim : 2 * dim].T + bias[dim : 2 * dim]
    out = torch.empty(x.shape[0], heads, x.shape[1], source.shape[1])
    for h in range(heads):
        cols = slice(h * head_dim, (h + 1) * head_dim)
        scores = q[:, :, cols] @ k[:, :, cols].transpose(1, 2) / math.sqrt(head_dim)
        if allowed is not None:
            scores = scores.masked_fill(~allowed, -math.inf)
        out[:, h] = scores.softmax(-1)
    return out


def layer() -> MultiHeadAttention:
    torch.manual_seed(0)
    attention = MultiHeadAttention(dim=16, heads=4).eval()
    torch.nn.init.normal_(attention.in_proj.bias)  # nonzero, so that a lost bias shows
    return attention


@pytest.mark.parametrize("case", ["padding", "causal", "cross", "cached cross"])
def test_recorded_weights_are_the_softmax_of_scaled_scores_and_outputs_are_sdpa_s(case):
    attention = layer()
    x = torch.randn(2, 5, 16)
    memory = torch.randn(2, 7, 16) if "cross" in case else None
    padding = torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    if case == "padding":
        padding = padding[:, :5]
        mask, is_causal = build_attention_mask(padding, 5, 5, causal=False)
        allowed = padding.bool()[:, None, :].expand(2, 5, 5)
    elif case == "causal":
        mask, is_causal = None, True
        allowed = torch.ones(5, 5, dtype=torch.bool).tril().expand(2, 5, 5)
    else:
        mask, is_causal = build_attention_mask(padding, 5, 7, causal=False)
        allowed = padding.bool()[:, None, :].expand(2, 5, 7)
    given_memory = attention.memory_cache(memory) if case == "cached cross" else memory
    sdpa = attention(x, mask, is_causal=is_causal, memory=given_memory)
    with attention_weights(attention) as weights:
        explicit = attention(x, mask, is_causal=is_causal, memory=given_memory)
        recorded = weights[""]
    torch.testing.assert_close(explicit, sdpa, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(recorded, brute_force_weights(attention, x, memory, allowed), atol=1e-6, rtol=1e-5)
    assert attention.weights is None and not attention.keep_weights  # the normal path again, nothing kept


def test_a_model_records_every_layer_and_its_outputs_do_not_change():
    torch.manual_seed(0)
    model = from_preset("gpt2-micro").eval()  # pre-LN: layer 0's attention reads LayerNorm(embeddings)
    ids = torch.randint(0, 512, (2, 6))
    mask = torch.tensor([[1] * 6, [0, 0, 1, 1, 1, 1]])
    expected = model(ids, mask).logits
    with attention_weights(model) as weights:
        logits = model(ids, mask).logits
        names = list(weights)
        first = weights["blocks.0.attention"]
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)
    assert names == [f"blocks.{i}.attention" for i in range(2)]
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    embedded = model.token_embedding(ids) + model.position_embedding(positions)
    allowed = torch.ones(6, 6, dtype=torch.bool).tril() & mask.bool()[:, None, :]
    oracle = brute_force_weights(model.blocks[0].attention, model.blocks[0].attention_norm(embedded), None, allowed)
    rows, queries = mask.bool().nonzero(as_tuple=True)  # padded queries attend anywhere (ignored): skip them
    torch.testing.assert_close(first[rows, :, queries], oracle[rows, :, queries], atol=1e-5, rtol=1e-5)


def test_disentangled_attention_records_weights_that_give_its_outputs():
    torch.manual_seed(0)
    model = from_preset("deberta-micro").eval()
    ids = torch.randint(0, 512, (2, 6))
    mask = torch.tensor([[1] * 6, [1, 1, 1, 1, 0, 0]])
    expected = model(ids, mask).last_hidden_state
    with attention_weights(model) as weights:
        hidden = model(ids, mask).last_hidden_state
        first = weights["blocks.0.attention"]
    torch.testing.assert_close(hidden, expected, atol=1e-5, rtol=1e-5)
    assert first[1, :, :, 4:].abs().max() == 0  # padding gets no weight
