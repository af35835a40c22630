"""The one-token step in C (plm.cpu.native_step): the model's logits and caches, each format, and when it stands back.

The oracle is the model's own forward over the whole history, without a cache (``use_cache=False``), which
shares no code with the C step; for bf16 and int8 weights, that forward in fp32 over the weights the formats
hold.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from plm.core import MultiHeadAttention, attention_weights
from plm.core.attention import KVCache
from plm.cpu import native
from plm.cpu.int8 import Int8Weight, quantize
from plm.cpu.native_step import ACTIVATIONS, MAX_BF16_ROWS, MAX_ROWS, NativeDecoder
from plm.decoding.generation import GenerationConfig, decode_steps
from plm.decoding.interface import DecodingRequest
from plm.models.gpt import GPT, GPTConfig

pytestmark = pytest.mark.skipif(not native.available(), reason="plm's kernels are not built here (no C compiler)")

# Odd sizes on purpose: head sizes with and without a 16-wide tail, output rows that are not whole blocks of 4, an
# inner size of two whole chunks of activations and a part of one.
PRE_LN = GPTConfig(vocab_size=301, context_length=40, dim=72, layers=2, heads=2, ffn_dim=1030, dropout=0.0,
                   attention_dropout=0.0, embedding_dropout=0.0)
POST_LN = GPTConfig(vocab_size=300, context_length=40, dim=40, layers=3, heads=4, ffn_dim=72, norm_first=False,
                    final_norm=False, dropout=0.0, attention_dropout=0.0, embedding_dropout=0.0)
PROMPT = torch.tensor([[5, 17, 42, 8, 9, 3, 21]])
NEW_TOKENS = 12


def model_of(config: GPTConfig, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    model = GPT(config).eval()
    with torch.no_grad():  # norms away from their initial ones and zeros, so that a mixed-up norm or bias shows
        for name, parameter in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                parameter.add_(torch.randn_like(parameter) * 0.1)
            if "fc_in.weight" in name:  # the activation's inputs spread over +-10, where exp's error would show
                parameter.mul_(25)
    return model


def steps(model: GPT, *, use_cache: bool = True, prompt: torch.Tensor = PROMPT, mask: torch.Tensor | None = None,
          **options) -> list:
    return list(decode_steps(model, prompt, GenerationConfig(max_new_tokens=NEW_TOKENS, use_cache=use_cache,
                                                             **options), mask))


@pytest.fixture
def c_steps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The slots the C step was called at: a test that means to run it checks that it did.

    The step takes bf16 and int8 weights where the kernels have their vector paths; a CPU without them (CI's may
    be one) runs the plain-C kernels here, which are what such a test checks there.
    """
    monkeypatch.setattr(native, "instructions", lambda: "bf16: AVX512-BF16; int8: AVX512-VNNI")
    slots: list[int] = []
    call = NativeDecoder.__call__
    monkeypatch.setattr(NativeDecoder, "__call__",
                        lambda self, tokens, slot: slots.append(slot) or call(self, tokens, slot))
    return slots


def largest_gap(got: list, expected: list) -> float:
    assert [step.tokens.tolist() for step in got] == [step.tokens.tolist() for step in expected]
    return max(float((a.logits.float() - b.logits.float()).abs().max()) for a, b in zip(got, expected))


@pytest.mark.parametrize("activation", ["gelu_tanh", "gelu", "relu", "silu"])
@pytest.mark.parametrize("config", [PRE_LN, POST_LN], ids=["pre-LN", "post-LN"])
@pytest.mark.parametrize("threads", [1, 3])
def test_the_c_step_gives_the_model_s_own_logits_in_fp32(config: GPTConfig, activation: str, threads: int,
                                                          c_steps: list[int]) -> None:
    model = model_of(GPTConfig(**{**config.__dict__, "activation": activation}))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = steps(model)
    finally:
        torch.set_num_threads(before)
    assert c_steps == list(range(len(PROMPT[0]), len(PROMPT[0]) + NEW_TOKENS - 1))  # every step after the prompt's
    assert largest_gap(got, steps(model, use_cache=False)) < 2e-5


PADDED = torch.tensor([[5, 17, 42, 8, 9, 3, 21], [0, 0, 4, 4, 30, 1, 2], [0, 0, 0, 0, 0, 11, 12],
                       [0, 9, 8, 7, 6, 5, 4], [0, 0, 0, 0, 0, 0, 3], [1, 2, 3, 4, 5, 6, 7]])
PADDING = torch.tensor([[0], [2], [5], [1], [6], [0]])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("rows", [3, 6])  # one tile of input rows, and a whole one and a part
def test_rows_of_a_left_padded_batch_each_get_their_own_logits(threads: int, rows: int, c_steps: list[int]) -> None:
    """Prompts of 7, 5, 2, 6, 1 and 7 tokens, left-padded: each row attends to its own tokens only and counts its
    positions from its first real token."""
    model = model_of(PRE_LN)
    prompts, mask = PADDED[:rows], (torch.arange(7) >= PADDING[:rows]).long()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = steps(model, prompt=prompts, mask=mask, temperature=0.8, seed=1)
    finally:
        torch.set_num_threads(before)
    assert c_steps
    assert largest_gap(got, steps(model, use_cache=False, prompt=prompts, mask=mask, temperature=0.8, seed=1)) < 2e-5


def test_the_c_step_writes_the_caches_the_model_s_steps_write(monkeypatch: pytest.MonkeyPatch,
                                                               c_steps: list[int]) -> None:
    model = model_of(PRE_LN)
    request = DecodingRequest(PROMPT, len(PROMPT[0]) + NEW_TOKENS)
    caches = []
    for with_c in (True, False):
        if not with_c:
            monkeypatch.setattr(GPT, "native_step", lambda self, cache, mask: None)
        state = model.start_decoding(request)
        history = PROMPT
        for token in range(NEW_TOKENS):
            _, state = model.decode_step(history, state)
            history = torch.cat([history, torch.tensor([[token + 1]])], 1)
        caches.append(state.cache)
    assert c_steps  # the first pass ran in C
    for in_c, in_torch in zip(*caches):
        assert in_c.length == in_torch.length == len(history[0]) - 1
        torch.testing.assert_close(in_c.keys[:, :, : in_c.length], in_torch.keys[:, :, : in_c.length])
        torch.testing.assert_close(in_c.values[:, :, : in_c.length], in_torch.values[:, :, : in_c.length])


def test_bf16_weights_in_c_are_nearer_their_fp32_product_than_pytorch_s_bf16_step(c_steps: list[int]) -> None:
    """The C step keeps the residual stream in fp32 where PyTorch's bf16 model rounds it at every op."""
    model = model_of(PRE_LN).to(torch.bfloat16)
    exact = steps(model_of(PRE_LN).to(torch.bfloat16).float(), use_cache=False)  # the bf16 weights, in fp32
    in_c = steps(model)
    assert c_steps
    c_steps.clear()
    in_torch = steps(model, use_cache=False)
    assert not c_steps
    assert in_c[-1].logits.dtype == torch.float32  # the first step's are the prompt pass's, by the model
    c_gap, torch_gap = largest_gap(in_c[1:], exact[1:]), largest_gap(in_torch[1:], exact[1:])  # after the prompt's
    assert c_gap < torch_gap and c_gap < 0.02


def test_int8_weights_in_c_give_the_fp32_logits_of_their_values(c_steps: list[int]) -> None:
    """The C step rounds each input row to int16; the prompt's pass (the model's) rounds it to bf16, as PyTorch's int8
    products take it, and the cached keys and values carry that rounding."""
    model = quantize(model_of(PRE_LN))
    dequantized = model_of(PRE_LN)
    with torch.no_grad():
        for name, module in model.named_modules():
            weight = getattr(module, "weight", None)
            if isinstance(weight, Int8Weight):
                dequantized.get_submodule(name).weight.copy_(weight.dequantized())
    got = steps(model)
    assert c_steps
    assert largest_gap(got, steps(dequantized, use_cache=False)) < 5e-3
    mask = (torch.arange(7) >= PADDING).long()  # six rows: a tile of four and one of two
    got = steps(model, prompt=PADDED, mask=mask)
    assert largest_gap(got, steps(dequantized, use_cache=False, prompt=PADDED, mask=mask)) < 5e-3


def test_one_sampled_row_draws_the_same_tokens_in_c(c_steps: list[int]) -> None:
    model = model_of(PRE_LN)
    sampled = steps(model, temperature=0.9, top_p=0.95, seed=3)
    assert c_steps
    assert largest_gap(sampled, steps(model, use_cache=False, temperature=0.9, top_p=0.95, seed=3)) < 2e-5


class ScaledAttention(MultiHeadAttention):
    """A variant's attention, as a family would subclass it to change the scores."""

    def attend(self, queries, keys, values, mask, is_causal):
        return super().attend(queries * 2, keys, values, mask, is_causal)


class VariantGPT(GPT):
    def build_attention(self, config):
        return ScaledAttention(config.dim, config.heads)


def uses_c_step(model: nn.Module, prompt: torch.Tensor = PROMPT, mask: torch.Tensor | None = None) -> bool:
    return model.start_decoding(DecodingRequest(prompt, prompt.shape[1] + 4, mask)).native is not None


def test_the_model_s_forward_runs_where_the_c_step_would_not_do_what_it_does(monkeypatch: pytest.MonkeyPatch) -> None:
    model = model_of(PRE_LN)
    assert uses_c_step(model)
    assert uses_c_step(model, PROMPT.repeat(MAX_ROWS, 1), torch.tensor([[0, 1, 1, 1, 1, 1, 1]] * MAX_ROWS))
    assert not uses_c_step(model, PROMPT.repeat(MAX_ROWS + 1, 1))  # more rows than the step reads weights once for
    bf16 = model_of(PRE_LN).bfloat16()
    monkeypatch.setattr(native, "instructions", lambda: "bf16: AVX512-BF16; int8: AVX512-VNNI")
    assert uses_c_step(bf16, PROMPT.repeat(MAX_BF16_ROWS, 1))
    assert not uses_c_step(bf16, PROMPT.repeat(MAX_BF16_ROWS + 1, 1))  # oneDNN's products win there
    assert not uses_c_step(model_of(PRE_LN).half())  # fp16 weights
    assert not uses_c_step(model_of(PRE_LN).train())  # dropout, which the C step has not
    with torch.autocast("cpu", dtype=torch.bfloat16):  # asked for bf16 products of the fp32 weights
        assert not uses_c_step(model)
    with attention_weights(model):
        assert not uses_c_step(model)
    torch.manual_seed(0)
    variant = VariantGPT(PRE_LN).eval()
    assert not uses_c_step(variant)
    monkeypatch.setattr(native, "instructions", lambda: "bf16: C; int8: C")  # an AVX2 CPU's build
    assert uses_c_step(model)
    assert not uses_c_step(model_of(PRE_LN).bfloat16()) and not uses_c_step(quantize(model_of(PRE_LN)))
    monkeypatch.setattr(native, "library", lambda: None)  # PLM_NATIVE=0, or no compiler
    assert not uses_c_step(model)


def test_a_hook_on_a_module_sees_every_step() -> None:
    model = model_of(PRE_LN)
    seen = []
    handle = model.blocks[1].register_forward_hook(lambda module, inputs, output: seen.append(output.shape[1]))
    try:
        assert not uses_c_step(model)
        steps(model)
    finally:
        handle.remove()
    assert seen == [len(PROMPT[0])] + [1] * (NEW_TOKENS - 1)
    assert uses_c_step(model)


def test_a_token_or_position_out_of_range_is_refused_before_the_c_side_reads_it() -> None:
    model = model_of(PRE_LN)
    state = model.start_decoding(DecodingRequest(PROMPT, 10))
    with pytest.raises(IndexError, match="out of range"):
        state.native(torch.tensor([PRE_LN.vocab_size]), 8)
    with pytest.raises(IndexError, match="out of range"):
        state.native(torch.tensor([3]), 10)
    with pytest.raises(IndexError, match="out of range"):
        state.native(torch.tensor([3, 4]), 8)  # two tokens for one row


def exact_activation(name: str, x: torch.Tensor) -> torch.Tensor:
    """The activation in fp64, written so that no term cancels where the value is tiny (PyTorch's 1 + tanh does)."""
    if name == "gelu":
        return 0.5 * x * torch.special.erfc(-x / 2 ** 0.5)
    if name == "gelu_tanh":
        return x / (1 + torch.exp(-2 * 0.79788456080286536 * (x + 0.044715 * x ** 3)))
    return torch.relu(x) if name == "relu" else x / (1 + torch.exp(-x))


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_each_activation_keeps_its_stated_error_over_the_whole_range_of_exp(activation: str) -> None:
    """fast_exp within a few ulp and fast_erf within 3.2e-7 wherever exp does not clamp, not only where a model's
    activations fall: a constant of exp's range reduction dropped is an error of 2e-4 per power of 2."""
    library = native.library()
    if library is None:
        pytest.skip("plm's C kernels are not built here")
    x = torch.linspace(-87, 88, 400_001)
    got = x.clone()
    library.plm_activate(got.data_ptr(), got.numel(), ACTIVATIONS.index(activation))
    exact = exact_activation(activation, x.double())
    error = (got.double() - exact).abs()
    assert float((error / x.double().abs().clamp_min(1)).max()) < 2e-7
    if activation == "silu":  # x exp(x) / (1 + exp(x)): exp's relative error shows at every x, down to e^-87
        assert float((error / exact.abs().clamp_min(1e-300)).max()) < 4e-7


def first_layer_cache_after_a_step(model: GPT, cache_dtype: torch.dtype, token: int) -> tuple[torch.Tensor, ...]:
    """The key and value (heads, head_dim) that one C step at slot 0 stores in the first layer's cache of
    ``cache_dtype`` (whatever the weights' dtype)."""
    config = model.config
    caches = [KVCache.empty(1, config.heads, 8, config.dim // config.heads, cache_dtype, torch.device("cpu"))
              for _ in model.blocks]
    for cache in caches:
        cache.keys.zero_()
        cache.values.zero_()
    step = model.native_step(caches, None)
    assert step is not None
    step(torch.tensor([token]), 0)
    return caches[0].keys[0, :, 0].clone(), caches[0].values[0, :, 0].clone()


def post_ln_first_keys_and_values(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, heads: int):
    """A post-LN block's first key and value in fp64: the in_proj of its input x (dim,) itself, no norm before it."""
    dim = x.shape[0]
    qkv = x.double() @ weight.double().T + bias.double()
    bound = (x.double().abs() @ weight.double().abs().T) * dim * 2.0**-24 + qkv.abs() * 2.0**-23
    return [(qkv[part * dim:(part + 1) * dim].view(heads, -1), bound[part * dim:(part + 1) * dim].view(heads, -1))
            for part in (1, 2)]


def test_a_bf16_cache_holds_the_step_s_keys_and_values_rounded_to_nearest_even(c_steps: list[int]) -> None:
    """The C step's fp32 keys and values, stored in a bf16 cache, are torch's bf16 rounding of them (nearest, ties to
    even): a store that truncated the fp32 bits would be off by up to a bf16 ulp in half the elements."""
    model, token = model_of(POST_LN), 11
    keys, values = first_layer_cache_after_a_step(model, torch.float32, token)
    attention = model.blocks[0].attention.in_proj
    x = model.token_embedding.weight[token] + model.position_embedding.weight[0]
    for got, (exact, bound) in zip((keys, values), post_ln_first_keys_and_values(x, attention.weight,
                                                                                  attention.bias, POST_LN.heads)):
        assert torch.all((got.double() - exact).abs() <= bound)  # the fp32 cache: the step's product itself
    bf16_keys, bf16_values = first_layer_cache_after_a_step(model, torch.bfloat16, token)
    assert bf16_keys.dtype == torch.bfloat16
    assert torch.equal(bf16_keys, keys.bfloat16()) and torch.equal(bf16_values, values.bfloat16())


def test_bf16_weights_multiply_the_input_rounded_to_nearest_bf16(c_steps: list[int]) -> None:
    """A post-LN block's first product takes the embeddings' sum itself: the C step rounds it to bf16 as torch does
    (nearest even) and sums the products in fp32; truncating the input instead moves the keys by far more."""
    model, token = model_of(POST_LN).bfloat16(), 11
    keys, values = first_layer_cache_after_a_step(model, torch.float32, token)
    attention = model.blocks[0].attention.in_proj
    x = (model.token_embedding.weight[token].float() + model.position_embedding.weight[0].float()).bfloat16()
    for got, (exact, bound) in zip((keys, values), post_ln_first_keys_and_values(x, attention.weight,
                                                                                  attention.bias, POST_LN.heads)):
        assert torch.all((got.double() - exact).abs() <= bound), ((got.double() - exact).abs() / bound).max()


def test_an_int8_token_table_embeds_each_row_at_its_own_scale(c_steps: list[int]) -> None:
    """Rows of the token table two orders of magnitude apart: the C step's embedding of a token is its int8 row
    times that row's scale (the dequantized row), as the key its first product stores shows."""
    fp32 = model_of(POST_LN)
    with torch.no_grad():
        fp32.token_embedding.weight.mul_(torch.logspace(-1, 1, POST_LN.vocab_size)[:, None])
    model, token = quantize(fp32), 150
    table, attention = model.token_embedding.weight, model.blocks[0].attention.in_proj.weight
    assert not torch.equal(table.scales[token], table.scales[0])
    keys, values = first_layer_cache_after_a_step(model, torch.float32, token)
    x = table.dequantized()[token] + model.position_embedding.weight[0].detach()
    weight = attention.dequantized()
    rounding = x.abs().max().double() / 65534 * weight.double().abs().sum(1)  # the input's int16 rounding, (3 dim,)
    dim = POST_LN.dim
    for part, (got, (exact, bound)) in enumerate(zip((keys, values), post_ln_first_keys_and_values(
            x, weight, model.blocks[0].attention.in_proj.bias, POST_LN.heads)), start=1):
        bound = bound + rounding[part * dim:(part + 1) * dim].view(POST_LN.heads, -1)
        assert torch.all((got.double() - exact).abs() <= bound), ((got.double() - exact).abs() / bound).max()
