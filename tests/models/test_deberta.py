"""DeBERTa: disentangled attention against the paper's formula, the EMD, presets and fp16."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from plm.core import build_attention_mask
from plm.errors import PLMError
from plm.models import DebertaConfig, from_config, from_preset, preset_config, with_heads
from plm.models.deberta import DisentangledAttention, log_buckets
from plm.storage.checkpoint import load_model, save_model

TINY = DebertaConfig(
    vocab_size=101, context_length=16, max_relative_positions=16, dim=32, layers=2, heads=4, ffn_dim=64
)
TERMS = [(), ("c2p",), ("p2c",), ("c2p", "p2c")]


def randomized(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every parameter drawn at random (biases too), so that a term or bias left out shows."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_(std=0.3)
    return module.eval()


def delta(i: int, j: int, k: int) -> int:
    """The paper's relative distance from token i to token j, in [0, 2k)."""
    if i - j <= -k:
        return 0
    if i - j >= k:
        return 2 * k - 1
    return i - j + k


def reference_attention(attention: DisentangledAttention, x, P, padding_mask, terms, p2c_distance):
    """softmax(A / sqrt(d (1 + |terms|))) V, with A_ij summed element by element as in Eq. 4."""
    batch, length, dim = x.shape
    heads, d, k = attention.heads, attention.head_dim, attention.max_relative_positions
    w_q, w_k, w_v = attention.in_proj.weight.split(dim)
    per_head = lambda t: t.view(*t.shape[:-1], heads, d)  # noqa: E731
    Q = per_head(x @ w_q.T + attention.query_bias)  # (B, T, H, d)
    K = per_head(x @ w_k.T)
    V = per_head(x @ w_v.T + attention.value_bias)
    K_r = per_head(P @ attention.position_key_proj.weight.T) if "c2p" in terms else None  # (2k, H, d)
    Q_r = per_head(attention.position_query_proj(P)) if "p2c" in terms else None
    A = torch.zeros(batch, heads, length, length)
    for i in range(length):
        for j in range(length):
            A[:, :, i, j] = (Q[:, i] * K[:, j]).sum(-1)
            if "c2p" in terms:
                A[:, :, i, j] += (Q[:, i] * K_r[delta(i, j, k)]).sum(-1)
            if "p2c" in terms:
                r = delta(j, i, k) if p2c_distance == "paper" else delta(i, j, k)
                A[:, :, i, j] += (K[:, j] * Q_r[r]).sum(-1)
    A = A / math.sqrt(d * (1 + len(terms)))
    A = A.masked_fill(~padding_mask.bool()[:, None, None, :], float("-inf"))
    out = (A.softmax(-1) @ V.transpose(1, 2)).transpose(1, 2).reshape(batch, length, dim)
    return attention.out_proj(out)


@pytest.mark.parametrize("terms", TERMS)
@pytest.mark.parametrize("p2c_distance", ["paper", "released"])
@pytest.mark.parametrize("k", [2, 16])  # k=2 < length clips distances; k=16 does not
def test_disentangled_attention_is_the_papers_formula(terms, p2c_distance, k):
    attention = randomized(DisentangledAttention(16, 2, k, terms, p2c_distance))
    torch.manual_seed(1)
    x, P = torch.randn(2, 7, 16), torch.randn(2 * k, 16)
    padding = torch.tensor([[1] * 7, [1] * 5 + [0] * 2])
    mask, _ = build_attention_mask(padding, 7, 7, causal=False)

    with torch.no_grad():
        out = attention(x, mask, relative_embeddings=P)
        expected = reference_attention(attention, x, P, padding, terms, p2c_distance)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_only_switched_on_terms_have_weights():
    names = lambda terms: {n for n, _ in DisentangledAttention(16, 2, 4, terms).named_parameters()}  # noqa: E731
    assert "position_key_proj.weight" in names(("c2p",)) and "position_query_proj.weight" not in names(("c2p",))
    assert "position_query_proj.weight" in names(("p2c",)) and "position_key_proj.weight" not in names(("p2c",))
    assert not any(name.startswith("position") for name in names(()))


def test_without_position_terms_it_is_plain_attention():
    attention = randomized(DisentangledAttention(16, 2, 4, ()))
    x = torch.randn(2, 5, 16)
    w_q, w_k, w_v = attention.in_proj.weight.split(16)
    q = (x @ w_q.T + attention.query_bias).view(2, 5, 2, 8).transpose(1, 2)
    k = (x @ w_k.T).view(2, 5, 2, 8).transpose(1, 2)
    v = (x @ w_v.T + attention.value_bias).view(2, 5, 2, 8).transpose(1, 2)
    expected = ((q @ k.transpose(-1, -2) / math.sqrt(8)).softmax(-1) @ v).transpose(1, 2).reshape(2, 5, 16)
    with torch.no_grad():
        torch.testing.assert_close(attention(x), attention.out_proj(expected), atol=1e-5, rtol=1e-5)


def test_fully_masked_rows_stay_finite():
    model = randomized(from_config(with_heads(TINY, "mlm")))
    input_ids = torch.tensor([[5, 6, 7, 8], [0, 0, 0, 0]])
    padding = torch.tensor([[1, 1, 1, 1], [0, 0, 0, 0]])  # the second sequence is all padding
    with torch.no_grad():
        output = model(input_ids, padding)
    assert output.last_hidden_state.isfinite().all() and output.logits.isfinite().all()


def test_fp16_scores_are_scaled_before_they_can_overflow():
    """Scores whose unscaled products pass fp16's 65,504 still give finite outputs."""
    attention = DisentangledAttention(64, 1, 8, ("c2p", "p2c")).half().eval()
    with torch.no_grad():
        attention.in_proj.weight.fill_(0.25)
        for proj in (attention.position_key_proj, attention.position_query_proj):
            proj.weight.fill_(0.25)
    x, P = torch.full((1, 6, 64), 4.0, dtype=torch.half), torch.full((16, 64), 4.0, dtype=torch.half)
    q = x[0, 0] @ attention.in_proj.weight[:64].T  # 64 * 4 * 0.25 = 64 per entry
    assert torch.isinf((q @ q).half())  # 64 * 64 * 64 > 65,504: the unscaled score overflows
    with torch.no_grad():
        out = attention(x, relative_embeddings=P)
    assert out.dtype == torch.half and out.isfinite().all()


def test_half_precision_model_gives_finite_outputs():
    model = from_config(with_heads(TINY, "mlm")).half().eval()
    input_ids = torch.randint(0, 101, (2, 12))
    padding = torch.ones(2, 12, dtype=torch.long)
    padding[1, 8:] = 0
    with torch.no_grad():
        output = model(input_ids, padding)
    assert output.logits.dtype == torch.half and output.logits.isfinite().all()


def test_relative_embeddings_are_one_table_for_all_layers():
    model = from_config(dataclasses.replace(TINY, max_relative_positions=5))
    tables = [name for name, p in model.named_parameters() if p.shape == (10, 32)]
    assert tables == ["relative_embeddings.weight"]  # no layer has one of its own

    model.train(False)
    loss = model(torch.randint(0, 101, (1, 6))).last_hidden_state.square().sum()
    grads = torch.autograd.grad(loss, [model.relative_embeddings.weight, *model.blocks[0].attention.parameters()])
    assert all(g.abs().sum() > 0 for g in grads)  # the first layer reads the shared table too


def test_no_relative_table_without_position_terms():
    model = from_config(dataclasses.replace(TINY, position_terms=()))
    assert model.relative_embeddings is None
    assert model(torch.randint(0, 101, (1, 6))).last_hidden_state.shape == (1, 6, 32)


def test_enhanced_mask_decoder_changes_only_the_mlm_logits():
    with_emd = randomized(from_config(with_heads(TINY, "mlm")))
    without = from_config(with_heads(dataclasses.replace(TINY, enhanced_mask_decoder=False), "mlm")).eval()
    without.load_state_dict({k: v for k, v in with_emd.state_dict().items() if not k.startswith("mask_decoder.")})
    input_ids = torch.randint(0, 101, (2, 9))
    with torch.no_grad():
        a, b = with_emd(input_ids), without(input_ids)
    torch.testing.assert_close(a.last_hidden_state, b.last_hidden_state, atol=0, rtol=0)
    assert not torch.allclose(a.logits, b.logits, atol=1e-3)


def test_enhanced_mask_decoder_uses_absolute_positions():
    model = randomized(from_config(with_heads(TINY, "mlm")))
    input_ids = torch.tensor([[7, 7, 7, 7, 7, 7]])  # every token alike: only absolute positions tell them apart
    with torch.no_grad():
        logits = model(input_ids).logits[0]
        model.mask_decoder.positions.weight.zero_()
        without_positions = model(input_ids).logits[0]
    assert not torch.allclose(logits[0], logits[3], atol=1e-3)
    torch.testing.assert_close(without_positions[0], without_positions[3])


def test_masked_positions_select_rows_of_the_full_logits():
    model = randomized(from_config(with_heads(TINY, "mlm")))
    input_ids = torch.randint(0, 101, (2, 8))
    masked = torch.zeros(2, 8, dtype=torch.bool)
    masked[0, 2] = masked[1, 5] = masked[1, 7] = True
    with torch.no_grad():
        full = model(input_ids).logits
        selected = model(input_ids, masked_positions=masked).logits
    torch.testing.assert_close(selected, full[masked])


def test_emd_needs_positions_for_the_whole_sequence():
    model = from_config(with_heads(TINY, "mlm"))
    with pytest.raises(PLMError, match="context is 16 tokens"):
        model(torch.randint(0, 101, (1, 17)))
    assert from_config(TINY)(torch.randint(0, 101, (1, 40))).last_hidden_state.shape == (1, 40, 32)  # no limit without


def test_every_parameter_learns_from_the_mlm_loss():
    """No parameter without a gradient: DDP needs no find_unused_parameters (PITFALLS #4)."""
    model = from_config(with_heads(TINY, "mlm")).train()
    logits = model(torch.randint(0, 101, (2, 8))).logits
    logits.logsumexp(-1).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_deberta_base_has_the_parameters_of_hugging_faces_debertamodel():
    with torch.device("meta"):
        model = from_preset("deberta-base")
    assert model.num_parameters() == 138_601_728  # embeddings + 12 layers + relative table, no heads
    assert model.relative_embeddings.weight.shape == (1024, 768)  # 2k rows, k = 512


@pytest.mark.parametrize("name", ["deberta-mini", "deberta-micro"])
def test_small_presets_run(name):
    config = with_heads(preset_config(name), "mlm")
    model = from_config(config).eval()
    with torch.no_grad():
        logits = model(torch.randint(0, config.vocab_size, (1, 10))).logits
    assert logits.shape == (1, 10, config.vocab_size)


def test_saved_model_loads_with_the_same_config_and_outputs(tmp_path):
    config = with_heads(dataclasses.replace(TINY, position_terms=("p2c",), p2c_distance="paper"), "mlm")
    model = randomized(from_config(config))
    save_model(model, tmp_path)
    loaded = load_model(tmp_path)
    assert loaded.config == model.config
    input_ids = torch.randint(0, 101, (2, 6))
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids).logits, model(input_ids).logits)


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(position_terms=("c2p", "p2p")), "unknown position term"),
        (dict(max_relative_positions=0), "max_relative_positions must be at least 1"),
        (dict(p2c_distance="other"), "unknown p2c_distance"),
        (dict(embedding_dim=16), "embedding_dim must be None"),
    ],
)
def test_invalid_configs_are_refused(changes, message):
    with pytest.raises(PLMError, match=message):
        dataclasses.replace(TINY, **changes)


def test_position_terms_are_kept_in_one_order():
    assert dataclasses.replace(TINY, position_terms=["p2c", "c2p"]) == TINY


# --- the 1.5B model (paper section 5.3, released as microsoft/deberta-v2-xxlarge) ---------------------------

# Its layout features at a tiny size: b = 4 buckets the distances beyond 2 of 9 tokens, up to k = 8.
TINY_1_5B = dataclasses.replace(
    TINY, max_relative_positions=8, key_bias=True, share_position_projections=True, position_buckets=4,
    relative_embedding_norm=True, ngram_kernel=3,
)


def test_deberta_1_5b_has_the_papers_shape_and_the_released_size():
    """48 layers of 1536 and 24 heads. Its 1,564,549,632 parameters are exactly transformers' DebertaV2Model of the
    released config (tests/hf/test_hf_deberta.py); the paper's "1.5B" is that count cut after one decimal, 4.1%
    below it (rounded, it would be 1.6B)."""
    config = preset_config("deberta-1.5b")
    assert (config.layers, config.dim, config.heads, config.ffn_dim, config.vocab_size) == (48, 1536, 24, 6144, 128100)
    with torch.device("meta"):
        count = from_preset("deberta-1.5b").num_parameters()
    assert count == 1_564_549_632
    assert int(count / 1e8) / 10 == 1.5 and abs(1.5e9 - count) / count == pytest.approx(0.0413, abs=5e-4)


def test_log_buckets_keep_near_distances_and_share_far_ones():
    distance = torch.arange(-40, 41)
    bucket = log_buckets(distance, buckets=8, max_distance=32)  # m = 4
    near = distance.abs() <= 4
    assert torch.equal(bucket[near], distance[near])
    assert torch.equal(bucket, -bucket.flip(0))  # bucket(-d) = -bucket(d)
    assert bool((bucket.diff() >= 0).all()) and bucket.unique().numel() < distance.numel()
    assert bucket[distance == 31].item() == 7  # k - 1 lands in the last bucket, 2m - 1


def test_shared_projections_are_the_content_projections():
    """W_k,r = W_k,c and W_q,r = W_q,c, biases included: the same as own projections that copy them."""
    shared = randomized(DisentangledAttention(16, 2, 8, key_bias=True, share_projections=True, position_buckets=4))
    own = DisentangledAttention(16, 2, 8, key_bias=True, position_buckets=4).eval()
    assert not any(name.startswith("position_") for name, _ in shared.named_parameters())
    own.load_state_dict(shared.state_dict(), strict=False)
    w_q, w_k, _ = shared.in_proj.weight.split(16)
    with torch.no_grad():
        own.position_key_proj.weight.copy_(w_k)
        own.position_key_proj.bias.copy_(shared.key_bias)
        own.position_query_proj.weight.copy_(w_q)
        own.position_query_proj.bias.copy_(shared.query_bias)
        x, P = torch.randn(2, 9, 16), torch.randn(8, 16)
        torch.testing.assert_close(shared(x, relative_embeddings=P), own(x, relative_embeddings=P))


def test_padding_changes_no_real_token_of_the_1_5b_layout():
    """nGiE's convolution sees each token's neighbours, never a padding position's or another sequence's."""
    model = randomized(from_config(with_heads(TINY_1_5B, "mlm")))
    input_ids = torch.randint(0, 101, (2, 9), generator=torch.Generator().manual_seed(0))
    padding = torch.tensor([[1] * 9, [1] * 6 + [0] * 3])
    with torch.no_grad():
        batch = model(input_ids, padding)
        alone = model(input_ids[1:, :6])
    torch.testing.assert_close(batch.last_hidden_state[1, :6], alone.last_hidden_state[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(batch.logits[1, :6], alone.logits[0], atol=1e-5, rtol=1e-5)


def test_every_1_5b_feature_changes_the_outputs():
    model = randomized(from_config(TINY_1_5B))
    input_ids = torch.randint(0, 101, (1, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model(input_ids).last_hidden_state
        for field in ("key_bias", "relative_embedding_norm", "ngram_kernel"):
            without = from_config(dataclasses.replace(TINY_1_5B, **{field: type(getattr(TINY_1_5B, field))()}))
            without.load_state_dict(model.state_dict(), strict=False)
            assert not torch.allclose(without.eval()(input_ids).last_hidden_state, full, atol=1e-3), field


def test_a_model_saved_before_the_1_5b_fields_still_loads(tmp_path):
    model = randomized(from_config(TINY))
    save_model(model, tmp_path)
    path = tmp_path / "config.json"
    saved = json.loads(path.read_text())
    for field in DebertaConfig.ADDED_FIELDS:
        del saved["config"][field]
    path.write_text(json.dumps(saved))
    assert load_model(tmp_path).config == model.config


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(position_buckets=1), "position_buckets must be 0 or from 2 to 2 \\* max_relative_positions - 3 = 29"),
        (dict(position_buckets=30), "position_buckets must be 0 or from 2"),
        (dict(ngram_kernel=2), "ngram_kernel must be 0 or odd"),
        (dict(ngram_activation="tanh"), "unknown ngram_activation 'tanh'"),
    ],
)
def test_invalid_1_5b_options_are_refused(changes, message):
    with pytest.raises(PLMError, match=message):
        dataclasses.replace(TINY, **changes)


def test_enhanced_mask_decoder_is_two_passes_of_the_last_block_with_keys_and_values_from_h():
    """The paper's EMD written out: I = H + P_abs; I <- block(queries I, keys and values H), n = 2 times; the MLM head.

    Guards against one pass instead of two, and against keys and values taken from I rather than from H.
    """
    model = randomized(from_config(with_heads(TINY, "mlm")))
    input_ids = torch.randint(0, 101, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model(input_ids)
        H = out.last_hidden_state
        last_block, P = model.layers()[-1], model.relative_embeddings.weight
        I = H + model.mask_decoder.positions.weight[:9]  # noqa: E741  # the paper's name
        for _ in range(2):
            I = last_block(I, None, context=H, relative_embeddings=P)  # noqa: E741
        expected = model.mlm_head(I, model.embeddings.word.weight)
    torch.testing.assert_close(out.logits, expected)
