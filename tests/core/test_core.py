"""The shared core: attention against a plain reference, masks, KV cache, blocks, positions, presets."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from plm.core import (
    BlockConfig,
    KVCache,
    MultiHeadAttention,
    SinusoidalPositions,
    TransformerBlock,
    build_attention_mask,
    linear,
)
from plm.errors import PLMError
from plm.models import GPTConfig, from_config, from_preset


def reference_attention(
    attention: MultiHeadAttention,
    x: torch.Tensor,
    memory: torch.Tensor | None = None,
    allowed: torch.Tensor | None = None,
) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d_k)) V written out; ``allowed`` is (batch, query, key), True = may attend."""
    memory = x if memory is None else memory
    batch, heads, head_dim = x.shape[0], attention.heads, attention.head_dim
    w_q, w_k, w_v = attention.in_proj.weight.chunk(3)
    b_q, b_k, b_v = attention.in_proj.bias.chunk(3)

    def split_heads(t: torch.Tensor) -> torch.Tensor:
        return t.view(batch, -1, heads, head_dim).transpose(1, 2)  # (B, H, T, hd)

    q = split_heads(x @ w_q.T + b_q)
    k = split_heads(memory @ w_k.T + b_k)
    v = split_heads(memory @ w_v.T + b_v)
    scores = q @ k.transpose(-1, -2) / math.sqrt(head_dim)  # (B, H, T, S)
    if allowed is not None:
        scores = scores.masked_fill(~allowed[:, None], float("-inf"))
    heads_out = scores.softmax(-1) @ v
    concat = heads_out.transpose(1, 2).reshape(batch, -1, heads * head_dim)
    return concat @ attention.out_proj.weight.T + attention.out_proj.bias


def causal_allowed(query_length: int, key_length: int) -> torch.Tensor:
    """(1, T, S): query i (the last T of S keys) sees keys up to its own position."""
    past = key_length - query_length
    return torch.tensor(
        [[j <= past + i for j in range(key_length)] for i in range(query_length)]
    )[None]


@pytest.fixture
def attention() -> MultiHeadAttention:
    torch.manual_seed(0)
    module = MultiHeadAttention(dim=16, heads=4)
    nn.init.normal_(module.in_proj.bias, std=0.1)
    nn.init.normal_(module.out_proj.bias, std=0.1)
    return module.eval()


def tiny_gpt(**overrides) -> nn.Module:
    torch.manual_seed(0)
    return from_preset("gpt2-micro", **overrides).eval()


# --- attention against the plain reference -------------------------------------------------------


def test_attention_without_mask_matches_reference(attention):
    x = torch.randn(2, 5, 16)
    mask, is_causal = build_attention_mask(None, 5, 5, causal=False)
    assert mask is None and not is_causal
    torch.testing.assert_close(attention(x, mask, is_causal=is_causal), reference_attention(attention, x))


def test_causal_attention_matches_reference(attention):
    x = torch.randn(2, 5, 16)
    mask, is_causal = build_attention_mask(None, 5, 5, causal=True)
    assert mask is None and is_causal  # plain causality takes SDPA's fast path
    expected = reference_attention(attention, x, allowed=causal_allowed(5, 5))
    torch.testing.assert_close(attention(x, mask, is_causal=is_causal), expected)


@pytest.mark.parametrize("causal", [False, True])
def test_padding_mask_without_padding_takes_the_maskless_path(attention, causal):
    x = torch.randn(2, 5, 16)
    mask, is_causal = build_attention_mask(torch.ones(2, 5, dtype=torch.long), 5, 5, causal=causal)
    assert mask is None and is_causal == causal  # as if no mask were given: SDPA's fast path
    expected = reference_attention(attention, x, allowed=causal_allowed(5, 5) if causal else None)
    torch.testing.assert_close(attention(x, mask, is_causal=is_causal), expected)


def test_padding_mask_matches_reference(attention):
    x = torch.randn(2, 5, 16)
    padding = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    mask, is_causal = build_attention_mask(padding, 5, 5, causal=False)
    allowed = padding.bool()[:, None, :].expand(2, 5, 5)
    torch.testing.assert_close(
        attention(x, mask, is_causal=is_causal), reference_attention(attention, x, allowed=allowed)
    )


def test_causal_and_padding_mask_matches_reference(attention):
    x = torch.randn(2, 5, 16)
    padding = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    mask, is_causal = build_attention_mask(padding, 5, 5, causal=True)
    allowed = causal_allowed(5, 5) & padding.bool()[:, None, :]
    torch.testing.assert_close(
        attention(x, mask, is_causal=is_causal), reference_attention(attention, x, allowed=allowed)
    )


def test_cross_attention_reads_memory_of_another_length(attention):
    x, memory = torch.randn(2, 3, 16), torch.randn(2, 7, 16)
    memory_padding = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0]])
    mask, _ = build_attention_mask(memory_padding, 3, 7, causal=False)
    allowed = memory_padding.bool()[:, None, :].expand(2, 3, 7)
    torch.testing.assert_close(attention(x, memory=memory), reference_attention(attention, x, memory))
    torch.testing.assert_close(attention(x, mask, memory=memory), reference_attention(attention, x, memory, allowed))


def test_attention_equals_torch_multihead_attention(attention):
    torch_attention = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    with torch.no_grad():
        torch_attention.in_proj_weight.copy_(attention.in_proj.weight)
        torch_attention.in_proj_bias.copy_(attention.in_proj.bias)
        torch_attention.out_proj.weight.copy_(attention.out_proj.weight)
        torch_attention.out_proj.bias.copy_(attention.out_proj.bias)
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 6, 16)
    padding = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]])
    future = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)  # torch: True = may NOT attend

    expected, _ = torch_attention(x, x, x, need_weights=False)
    torch.testing.assert_close(attention(x), expected)
    expected, _ = torch_attention(x, x, x, attn_mask=future, key_padding_mask=~padding.bool(), need_weights=False)
    mask, is_causal = build_attention_mask(padding, 5, 5, causal=True)
    torch.testing.assert_close(attention(x, mask, is_causal=is_causal), expected)
    expected, _ = torch_attention(x, memory, memory, need_weights=False)
    torch.testing.assert_close(attention(x, memory=memory), expected)


@pytest.mark.parametrize("rows", [1, 3, 4, 7])
@pytest.mark.parametrize("out_features", [1024, 1027])  # 1027: rows left over after the row blocks
def test_linear_equals_torch_linear_on_every_route(rows, out_features):
    torch.manual_seed(0)
    weight = torch.randn(out_features, 512, requires_grad=True)  # large enough for the blocked route
    bias = torch.randn(out_features)
    x = torch.randn(rows, 1, 512)
    out = linear(x, weight, bias)
    torch.testing.assert_close(out, F.linear(x, weight, bias), atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(linear(x, weight), F.linear(x, weight), atol=1e-4, rtol=1e-5)
    (gradient,) = torch.autograd.grad(out.sum(), weight)
    torch.testing.assert_close(gradient, x.reshape(rows, 512).sum(0).expand(out_features, 512))


@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_with_many_outputs_has_the_values_and_gradients_of_torch_linear(with_bias):
    """16,900 outputs for 6 rows: the column-chunked route, with a last chunk shorter than the others."""
    torch.manual_seed(0)
    weight = torch.randn(16900, 64, requires_grad=True)
    bias = torch.randn(16900, requires_grad=True) if with_bias else None
    x = torch.randn(2, 3, 64, requires_grad=True)
    upstream = torch.randn(2, 3, 16900)
    inputs = (x, weight, bias) if with_bias else (x, weight)
    out = linear(x, weight, bias)
    assert type(out.grad_fn).__name__ == "WideLinearBackward"  # the route under test was taken
    expected = F.linear(x, weight, bias)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    gradients = torch.autograd.grad(out, inputs, upstream)
    for gradient, reference in zip(gradients, torch.autograd.grad(expected, inputs, upstream)):
        torch.testing.assert_close(gradient, reference, atol=1e-4, rtol=1e-5)


# --- fully masked rows (PITFALLS #8) -------------------------------------------------------------


def test_query_without_any_real_key_attends_everywhere_instead_of_nan(attention):
    left_padding = torch.tensor([[0, 0, 1, 1]])
    mask, _ = build_attention_mask(left_padding, 4, 4, causal=True)
    assert mask[0, 0, 0].tolist() == [True, True, True, True]  # would be all False: only padding in its past
    assert mask[0, 0, 2].tolist() == [False, False, True, False]
    assert mask[0, 0, 3].tolist() == [False, False, True, True]
    assert torch.isfinite(attention(torch.randn(1, 4, 16), mask)).all()


def test_all_padding_sequence_gives_finite_outputs(attention):
    padding = torch.tensor([[1, 1, 0], [0, 0, 0]])
    for causal in (False, True):
        mask, is_causal = build_attention_mask(padding, 3, 3, causal=causal)
        assert torch.isfinite(attention(torch.randn(2, 3, 16), mask, is_causal=is_causal)).all()
    model = tiny_gpt()
    logits = model(torch.tensor([[5, 6, 7], [0, 0, 0]]), torch.tensor([[0, 1, 1], [0, 0, 0]])).logits
    assert torch.isfinite(logits).all()


def test_left_padding_is_invisible_to_the_real_tokens():
    model = tiny_gpt()
    prompt = torch.tensor([[5, 6, 7, 8]])
    padded = torch.tensor([[0, 0, 5, 6, 7, 8]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1]])
    torch.testing.assert_close(model(padded, mask).logits[:, 2:], model(prompt).logits, atol=1e-5, rtol=1e-5)


# --- causality -----------------------------------------------------------------------------------


def test_changing_a_token_changes_outputs_only_from_its_position_on():
    model = tiny_gpt()
    tokens = torch.randint(0, 512, (1, 10), generator=torch.Generator().manual_seed(1))
    t = 6
    changed = tokens.clone()
    changed[0, t] = (tokens[0, t] + 1) % 512
    before, after = model(tokens).logits, model(changed).logits
    torch.testing.assert_close(after[:, :t], before[:, :t], atol=0, rtol=0)
    differs = (after - before).abs().amax(-1)[0]
    assert (differs[t:] > 1e-6).all()


# --- KV cache ------------------------------------------------------------------------------------


def test_token_by_token_decoding_with_cache_equals_full_forward():
    model = tiny_gpt()
    tokens = torch.randint(0, 512, (2, 9), generator=torch.Generator().manual_seed(2))
    full = model(tokens)
    cache = model.new_cache(batch=2, max_length=9)
    steps = [model(tokens[:, i : i + 1], cache=cache) for i in range(9)]
    assert cache[0].length == 9
    torch.testing.assert_close(torch.cat([s.logits for s in steps], 1), full.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        torch.cat([s.last_hidden_state for s in steps], 1), full.last_hidden_state, atol=1e-5, rtol=1e-5
    )


def test_prompt_prefill_then_steps_with_cache_equals_full_forward():
    model = tiny_gpt()
    tokens = torch.randint(0, 512, (2, 9), generator=torch.Generator().manual_seed(3))
    full = model(tokens).logits
    cache = model.new_cache(batch=2, max_length=12)
    logits = [model(tokens[:, :5], cache=cache).logits]
    logits += [model(tokens[:, i : i + 1], cache=cache).logits for i in range(5, 7)]
    logits.append(model(tokens[:, 7:], cache=cache).logits)  # two tokens at once after the cache
    torch.testing.assert_close(torch.cat(logits, 1), full, atol=1e-5, rtol=1e-5)


def test_cached_decoding_of_a_left_padded_batch_equals_full_forward():
    model = tiny_gpt()
    tokens = torch.randint(0, 512, (2, 7), generator=torch.Generator().manual_seed(4))
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1, 1]])
    full = model(tokens, mask).logits
    cache = model.new_cache(batch=2, max_length=7)
    logits = [model(tokens[:, :4], mask[:, :4], cache=cache).logits]
    logits += [model(tokens[:, i : i + 1], mask[:, : i + 1], cache=cache).logits for i in range(4, 7)]
    torch.testing.assert_close(torch.cat(logits, 1)[1, 3:], full[1, 3:], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.cat(logits, 1)[0], full[0], atol=1e-5, rtol=1e-5)


def test_cache_overflow_raises():
    cache = KVCache.empty(batch=1, heads=2, max_length=3, head_dim=4, dtype=torch.float32, device=torch.device("cpu"))
    cache.append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    with pytest.raises(PLMError, match="holds 3 tokens; 4 were asked for"):
        cache.append(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4))
    model = tiny_gpt()
    with pytest.raises(PLMError, match="cache"):
        model(torch.zeros(1, 5, dtype=torch.long), cache=model.new_cache(batch=1, max_length=4))


def test_sequence_longer_than_context_raises():
    model = tiny_gpt()
    with pytest.raises(PLMError, match="65 positions but the model's context is 64"):
        model(torch.zeros(1, 65, dtype=torch.long))


# --- pre-LN and post-LN blocks -------------------------------------------------------------------


def layer_norm(x: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    variance = x.var(-1, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(variance + norm.eps) * norm.weight + norm.bias


@pytest.mark.parametrize("norm_first", [True, False])
def test_pre_and_post_layer_norm_blocks(norm_first):
    torch.manual_seed(0)
    config = BlockConfig(dim=16, heads=4, ffn_dim=32, norm_first=norm_first, dropout=0.1, attention_dropout=0.1)
    block = TransformerBlock(config).eval()  # eval mode: dropout is the identity
    for norm in (block.attention_norm, block.feed_forward_norm):  # not the identity, so their place shows
        nn.init.normal_(norm.weight, mean=1.0, std=0.3)
        nn.init.normal_(norm.bias, std=0.3)
    x = torch.randn(2, 5, 16)
    attend, ffn = block.attention, block.feed_forward
    if norm_first:  # GPT-2: x + f(LN(x))
        h = x + attend(layer_norm(x, block.attention_norm))
        expected = h + ffn(layer_norm(h, block.feed_forward_norm))
    else:  # the Transformer, GPT-1, BERT: LN(x + f(x))
        h = layer_norm(x + attend(x), block.attention_norm)
        expected = layer_norm(h + ffn(h), block.feed_forward_norm)
    torch.testing.assert_close(block(x), expected, atol=1e-5, rtol=1e-5)


# --- positions -----------------------------------------------------------------------------------


def test_sinusoidal_positions_follow_the_formula():
    d = 16
    positions = SinusoidalPositions(max_positions=50, dim=d)
    for pos in (0, 1, 7, 49):
        for i in (0, 1, 5, 7):
            angle = pos / 10000 ** (2 * i / d)
            assert positions.table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-5)
            assert positions.table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-5)
    torch.testing.assert_close(positions(torch.tensor([[3, 7]])), positions.table[[3, 7]][None])


def test_sinusoidal_positions_are_computed_even_under_meta_device():
    reference = SinusoidalPositions(max_positions=20, dim=8)
    with torch.device("meta"):
        positions = SinusoidalPositions(max_positions=20, dim=8)
    assert positions.table.device.type == "cpu"
    torch.testing.assert_close(positions.table, reference.table)
    assert positions.table[3, 0].item() == pytest.approx(math.sin(3.0))


# --- presets and initialisation ------------------------------------------------------------------


@pytest.mark.parametrize(
    "preset, parameters",
    [
        ("gpt2", 124_439_808),
        ("gpt2-medium", 354_823_168),
        ("gpt2-large", 774_030_080),
        ("gpt2-xl", 1_557_611_200),
        ("gpt1", 116_534_784),
    ],
)
def test_preset_parameter_counts_match_the_published_models(preset, parameters):
    with torch.device("meta"):
        model = from_preset(preset)
    assert model.num_parameters() == parameters  # the LM head is tied to the token embedding


def test_gpt2_scales_the_init_of_residual_projections():
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=1000, context_length=64, dim=256, layers=8, heads=4, ffn_dim=1024)
    model = from_config(config)
    scaled = 0.02 / math.sqrt(2 * config.layers)
    for block in model.blocks:
        assert block.attention.out_proj.weight.std().item() == pytest.approx(scaled, rel=0.05)
        assert block.feed_forward.fc_out.weight.std().item() == pytest.approx(scaled, rel=0.05)
        assert block.attention.in_proj.weight.std().item() == pytest.approx(0.02, rel=0.05)
        assert block.feed_forward.fc_in.weight.std().item() == pytest.approx(0.02, rel=0.05)
    unscaled = from_config(dataclasses.replace(config, scaled_residual_init=False))
    assert unscaled.blocks[0].attention.out_proj.weight.std().item() == pytest.approx(0.02, rel=0.05)


def test_unknown_preset_raises():
    with pytest.raises(PLMError, match="unknown preset 'gpt5'"):
        from_preset("gpt5")


def test_a_static_cache_step_ignores_whatever_its_unwritten_slots_held():
    """A static cache gives attention all its slots, masking the unwritten ones; their memory may hold NaN.

    The oracle is softmax(q K^T / sqrt(d_k)) V over the written slots alone, written out. Guards against
    make_static leaving the unwritten memory as it was: a masked key's weight 0 times NaN is NaN.
    """
    torch.manual_seed(0)
    attention = MultiHeadAttention(8, 2, dropout=0.0).eval()
    x = torch.randn(1, 4, 8)
    nan = torch.full((1, 2, 6, 4), float("nan"))
    cache = KVCache(nan.clone(), nan.clone())
    with torch.no_grad():
        attention(x[:, :3], is_causal=True, cache=cache)  # three tokens written, slots 3..5 hold NaN
        cache.make_static(torch.tensor([3]))
        mask = torch.tensor([True, True, True, True, False, False])[None, None, None, :]  # (1, 1, 1, 6)
        got = attention(x[:, 3:], mask, cache=cache)
        w_q, w_k, w_v = attention.in_proj.weight.split(8)
        b_q, b_k, b_v = attention.in_proj.bias.split(8)
        heads = lambda t: t.view(t.shape[0], 2, 4).transpose(0, 1)  # noqa: E731  # (T, 8) -> (2, T, 4)
        q, k, v = heads(x[0, 3:] @ w_q.T + b_q), heads(x[0] @ w_k.T + b_k), heads(x[0] @ w_v.T + b_v)
        out = ((q @ k.transpose(1, 2)) / 2.0).softmax(-1) @ v  # (2, 1, 4); sqrt(d_k) = 2
        expected = attention.out_proj(out.transpose(0, 1).reshape(1, 8))
    torch.testing.assert_close(got[0], expected)
