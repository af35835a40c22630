"""Decoding: the KV cache changes nothing, padding changes nothing, sampling options do what they say."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from plm.decoding import GenerationConfig, StopStrings, decode_steps, generate
from plm.decoding.generation import filter_top_k_top_p, next_tokens, penalize_repetition
from plm.errors import PLMError
from plm.models import from_preset
from tests.conftest import StubCausalLM

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def tiny_gpt():
    torch.manual_seed(0)
    return from_preset("gpt2-micro").eval()  # vocabulary 512, context 64


class CountingLM(StubCausalLM):
    """A model whose continuation is known: it always predicts (last token + 1) mod vocab."""

    def __init__(self, vocab_size: int = 26, context: int = 32) -> None:
        super().__init__(context)
        self.vocab_size = vocab_size

    def logits_for(self, input_ids: torch.Tensor) -> torch.Tensor:
        return F.one_hot((input_ids + 1) % self.vocab_size, self.vocab_size).float()


def letters(ids: list[int]) -> str:
    return "".join(LETTERS[i] for i in ids)


# --- the KV cache and padding change nothing -----------------------------------------------------


def wide_gpt():
    """Feed-forward weights large enough for plm.cpu.linear's batched one-token route."""
    torch.manual_seed(0)
    return from_preset("gpt2-micro", dim=256, heads=4, ffn_dim=1024).eval()


@pytest.mark.parametrize("make_model", [tiny_gpt, wide_gpt])
def test_cached_and_uncached_greedy_decoding_agree(make_model):
    model = make_model()
    prompt = torch.tensor([[1, 2, 3, 4]])
    cached = generate(model, prompt, max_new_tokens=20)
    uncached = generate(model, prompt, max_new_tokens=20, use_cache=False)
    assert torch.equal(cached, uncached)
    batch = torch.randint(0, 512, (3, 6), generator=torch.Generator().manual_seed(1))
    assert torch.equal(generate(model, batch, max_new_tokens=20), generate(model, batch, 20, use_cache=False))


def test_steps_over_a_static_cache_give_the_logits_of_the_growing_cache() -> None:
    """cuda_graph=True decodes over a static cache (a CUDA graph's replay on a GPU, eager here).

    Left padding makes each row's positions and mask differ from its cache slots, which is
    where a static step can go wrong; the cache's unwritten slots are masked, not read.
    """
    torch.manual_seed(0)
    model = from_preset("gpt2-micro").eval()
    prompts = torch.randint(0, 512, (3, 7), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(prompts)
    mask[0, :3] = 0
    mask[1, :1] = 0
    growing = list(decode_steps(model, prompts, GenerationConfig(max_new_tokens=12), mask))
    static = list(decode_steps(model, prompts, GenerationConfig(max_new_tokens=12, cuda_graph=True), mask))
    for got, want in zip(static, growing, strict=True):
        assert torch.equal(got.tokens, want.tokens)
        torch.testing.assert_close(got.logits, want.logits, rtol=0, atol=1e-5)


@pytest.mark.skipif(
    not torch._dynamo.is_dynamo_supported(), reason="torch.compile does not support this Python/platform"
)
def test_compiled_decoding_gives_the_tokens_of_eager_decoding(monkeypatch):
    """generate(compile=True) runs the prompt pass and the cached one-token step as captured graphs.

    The aot_eager backend checks the captured graphs, the in-place cache writes
    included, without inductor's C++ build (a minute on a small CPU); bench_gpt2.py
    --compile reports whether inductor's greedy tokens are eager's too.
    """
    real_compile, compiled = torch.compile, []

    def compile_with_aot_eager(model, **options):
        compiled.append(model)
        return real_compile(model, backend="aot_eager", **options)

    monkeypatch.setattr(torch, "compile", compile_with_aot_eager)
    model = wide_gpt()  # wide enough for the batched one-token linear route
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("bias"):  # GPT-2 starts them at zero; a bias lost in the graph must show
                parameter.normal_(std=0.1)
    prompt = torch.tensor([[1, 2, 3, 4]])
    try:
        assert torch.equal(generate(model, prompt, 12, compile=True), generate(model, prompt, 12))
    finally:
        torch._dynamo.reset()  # drop the compiled code, so that it cannot leak into other tests
    assert compiled == [model]


def test_model_generate_delegates_to_generate():
    model = tiny_gpt()
    prompt = torch.tensor([[7, 8, 9]])
    assert torch.equal(model.generate(prompt, max_new_tokens=5), generate(model, prompt, max_new_tokens=5))


@pytest.mark.parametrize("use_cache", [True, False])
def test_left_padded_batch_generates_what_each_prompt_generates_alone(use_cache):
    model = tiny_gpt()
    prompts = [[11, 12, 13], [21, 22, 23, 24, 25], [31, 32, 33, 34, 35, 36, 37]]
    width = max(map(len, prompts))
    input_ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    batched = generate(model, input_ids, max_new_tokens=10, attention_mask=attention_mask, use_cache=use_cache)
    for row, prompt in enumerate(prompts):
        alone = generate(model, torch.tensor([prompt]), max_new_tokens=10, use_cache=use_cache)
        assert batched[row, width:].tolist() == alone[0, len(prompt) :].tolist()


def test_a_mask_without_padding_changes_nothing():
    model = tiny_gpt()
    prompt = torch.tensor([[5, 6, 7], [8, 9, 10]])
    assert torch.equal(generate(model, prompt, 8, attention_mask=torch.ones_like(prompt)), generate(model, prompt, 8))


def test_output_is_prompt_plus_max_new_tokens_without_eos():
    model = tiny_gpt()
    prompt = torch.randint(0, 512, (2, 5), generator=torch.Generator().manual_seed(2))
    out = generate(model, prompt, max_new_tokens=7)
    assert out.shape == (2, 12)
    assert torch.equal(out[:, :5], prompt)


def test_generate_leaves_the_training_mode_as_it_was():
    model = tiny_gpt().train()
    generate(model, torch.tensor([[1, 2]]), max_new_tokens=2)
    assert model.training


# --- sampling ------------------------------------------------------------------------------------


def test_sampling_is_reproducible_with_a_seed_and_differs_across_seeds():
    model = tiny_gpt()
    prompt = torch.tensor([[1, 2, 3]])
    options = dict(max_new_tokens=20, do_sample=True, temperature=2.0)
    first = generate(model, prompt, seed=1, **options)
    assert torch.equal(first, generate(model, prompt, seed=1, **options))
    assert not torch.equal(first, generate(model, prompt, seed=2, **options))


def test_each_row_with_a_generator_of_its_own_samples_as_it_does_alone():
    model = tiny_gpt()
    prompts = torch.tensor([[1, 2, 3], [4, 5, 6]])
    config = GenerationConfig(max_new_tokens=12, do_sample=True, temperature=2.0)

    def sampled(ids: torch.Tensor, seeds: list[int]) -> torch.Tensor:
        generators = [torch.Generator().manual_seed(seed) for seed in seeds]
        return torch.stack([step.tokens for step in decode_steps(model, ids, config, generators=generators)], 1)

    together = sampled(prompts, [7, 8])
    assert torch.equal(together[0], sampled(prompts[:1], [7])[0])
    assert torch.equal(together[1], sampled(prompts[1:], [8])[0])
    assert torch.equal(together[0], generate(model, prompts[:1], config=config, seed=7)[0, 3:])  # as one seed does
    with pytest.raises(PLMError, match="one per row"):
        decode_steps(model, prompts, config, generators=[torch.Generator()])


def test_top_k_one_is_greedy():
    model = tiny_gpt()
    prompt = torch.tensor([[4, 5, 6]])
    greedy = generate(model, prompt, max_new_tokens=15)
    assert torch.equal(generate(model, prompt, max_new_tokens=15, do_sample=True, top_k=1, seed=3), greedy)


def test_a_temperature_or_top_p_near_zero_samples_the_most_likely_token():
    """Guards against NaN: logits over a temperature of 1e-320, or a top_p that float32 rounds to 0, once left no
    token to draw."""
    model = tiny_gpt()
    prompt = torch.tensor([[4, 5, 6]])
    greedy = generate(model, prompt, max_new_tokens=10)
    for options in ({"temperature": 1e-320}, {"top_p": 1e-320}):
        assert torch.equal(generate(model, prompt, max_new_tokens=10, do_sample=True, seed=3, **options), greedy)
    logits = torch.tensor([[1.0, 4.0, 2.0, 3.0]])
    assert torch.isfinite(filter_top_k_top_p(logits, top_k=0, top_p=1e-320)).tolist() == [[False, True, False, False]]


def test_top_k_keeps_the_k_most_likely_tokens():
    logits = torch.tensor([[1.0, 4.0, 2.0, 3.0]])
    kept = filter_top_k_top_p(logits, top_k=2, top_p=1.0)
    assert torch.isfinite(kept).tolist() == [[False, True, False, True]]


def test_top_p_keeps_the_smallest_set_that_reaches_p():
    probabilities = torch.tensor([[0.15, 0.5, 0.05, 0.3]])  # sorted: 0.5, 0.3, 0.15, 0.05
    logits = probabilities.log()

    def kept(top_p: float) -> list[bool]:
        return torch.isfinite(filter_top_k_top_p(logits, top_k=0, top_p=top_p))[0].tolist()

    assert kept(0.4) == [False, True, False, False]  # 0.5 alone reaches 0.4
    assert kept(0.75) == [False, True, False, True]  # 0.5 + 0.3
    assert kept(0.9) == [True, True, False, True]  # 0.5 + 0.3 + 0.15
    assert kept(1.0) == [True, True, True, True]
    both = filter_top_k_top_p(logits, top_k=1, top_p=0.9)
    assert torch.isfinite(both)[0].tolist() == [False, True, False, False]
    torch.testing.assert_close(filter_top_k_top_p(logits, 0, 0.75)[0, [1, 3]], logits[0, [1, 3]])


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits():
    logits = torch.tensor([[2.0, -2.0, 1.0, 0.5]])
    seen = torch.tensor([[0, 1, 0]])  # token 0 twice: penalised once
    penalized = penalize_repetition(logits.clone(), seen, penalty=2.0)
    assert penalized.tolist() == [[1.0, -4.0, 1.0, 0.5]]


def test_repetition_penalty_ignores_padding():
    logits = torch.tensor([[2.0, -2.0, 1.0, 0.5]])
    history = torch.tensor([[3, 3, 0, 1]])
    mask = torch.tensor([[0, 0, 1, 1]])  # the two 3s are left padding
    assert penalize_repetition(logits, history, 2.0, mask).tolist() == [[1.0, -4.0, 1.0, 0.5]]


def test_left_padded_batch_with_repetition_penalty_generates_what_each_prompt_generates_alone():
    model = tiny_gpt()
    prompts = [[11, 12, 13], [21, 22, 23, 24, 25]]
    alone = [generate(model, torch.tensor([p]), 6, repetition_penalty=1.5)[0, len(p) :].tolist() for p in prompts]
    pad = alone[0][0]  # padding with the token the short prompt picks first: it must not count as seen
    input_ids = torch.tensor([[pad, pad] + prompts[0], prompts[1]])
    attention_mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    batched = generate(model, input_ids, 6, attention_mask=attention_mask, repetition_penalty=1.5)
    assert batched[:, 5:].tolist() == alone


def test_strong_repetition_penalty_stops_greedy_decoding_from_repeating():
    model = tiny_gpt()
    prompt = torch.tensor([[1, 2, 3]])
    assert len(set(generate(model, prompt, max_new_tokens=20)[0].tolist())) < 23  # a random model loops
    penalized = generate(model, prompt, max_new_tokens=20, repetition_penalty=100.0)
    assert len(set(penalized[0].tolist())) == 23


# --- stopping ------------------------------------------------------------------------------------


def test_eos_finishes_a_row_and_pads_after_it():
    model = CountingLM()
    out = generate(model, torch.tensor([[1, 2], [5, 6]]), max_new_tokens=5, eos_token_id=4, pad_token_id=0)
    assert out.tolist() == [[1, 2, 3, 4, 0, 0, 0], [5, 6, 7, 8, 9, 10, 11]]


def test_ignore_eos_writes_the_eos_token_as_any_other_and_every_token_asked_for():
    model = CountingLM()
    out = generate(model, torch.tensor([[1, 2], [5, 6]]), max_new_tokens=5, eos_token_id=4, ignore_eos=True)
    assert out.tolist() == [[1, 2, 3, 4, 5, 6, 7], [5, 6, 7, 8, 9, 10, 11]]
    beams = generate(model, torch.tensor([[1]]), max_new_tokens=5, eos_token_id=4, ignore_eos=True, num_beams=2)
    assert beams.tolist() == [[1, 2, 3, 4, 5, 6]]


def test_generation_ends_early_when_every_row_is_finished():
    model = CountingLM()
    out = generate(model, torch.tensor([[1], [2]]), max_new_tokens=10, eos_token_id=4)
    assert out.tolist() == [[1, 2, 3, 4], [2, 3, 4, 4]]  # pad defaults to the eos id


def test_stop_string_finishes_a_row():
    model = CountingLM()
    stop = StopStrings(["x"], letters)
    out = generate(model, torch.tensor([[20]]), max_new_tokens=5, stop=stop)
    assert letters(out[0].tolist()) == "uvwx"
    assert stop.cut(letters(out[0, 1:].tolist())) == "vw"
    batch = generate(model, torch.tensor([[20], [0]]), max_new_tokens=5, stop=stop, pad_token_id=0)
    assert [letters(row) for row in batch.tolist()] == ["uvwxaa", "abcdef"]


def test_a_stop_string_in_the_prompt_does_not_stop_the_continuation():
    """Stop strings are searched in the new text only: a prompt that contains one ("cx" holds "c") must not
    finish its row at once. Each row is the continuation without stop strings, cut before its first "c"."""
    model = CountingLM()
    prompts = [[2, 23], [0, 19]]  # "cx" and "at", which continue "yzabcd..." and "uvwxyz..."
    stop = StopStrings(["c"], letters)
    for prompt in prompts:
        free = letters(generate(model, torch.tensor([prompt]), 12)[0, len(prompt):].tolist())
        stopped = letters(generate(model, torch.tensor([prompt]), 12, stop=stop)[0, len(prompt):].tolist())
        expected = free[: free.index("c")]  # the new text without stop strings, cut before its first "c"
        assert stopped == expected + "c"  # the row finishes with the token that completes the stop string
        assert stop.cut(stopped) == expected
    batch = generate(model, torch.tensor(prompts), max_new_tokens=12, stop=stop, pad_token_id=0)
    assert [stop.cut(letters(row[2:])) for row in batch.tolist()] == ["yzab", "uvwxyzab"]


# --- prompts and the context ---------------------------------------------------------------------


def test_prompt_longer_than_the_context_raises_and_keep_last_fixes_it():
    model = tiny_gpt()
    prompt = torch.randint(0, 512, (1, 70), generator=torch.Generator().manual_seed(5))
    with pytest.raises(PLMError, match="prompt is 70 tokens but the model's context is 64.*keep_last"):
        generate(model, prompt, max_new_tokens=4)
    out = generate(model, prompt, max_new_tokens=4, keep_last=50)
    assert out.shape == (1, 54)
    assert torch.equal(out, generate(model, prompt[:, -50:], max_new_tokens=4))


def test_prompt_plus_new_tokens_beyond_the_context_raises():
    model = tiny_gpt()
    with pytest.raises(PLMError, match="prompt of 60 tokens plus 5 new tokens exceeds the model's context of 64"):
        generate(model, torch.zeros(1, 60, dtype=torch.long), max_new_tokens=5)


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(max_new_tokens=-1), "max_new_tokens must be >= 0"),
        (dict(keep_last=0), "keep_last must be >= 1"),
        (dict(temperature=0.0), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_k=-1), "top_k"),
        (dict(repetition_penalty=0.0), "repetition_penalty"),
    ],
)
def test_invalid_options_raise(options, message):
    with pytest.raises(PLMError, match=message):
        generate(CountingLM(), torch.tensor([[1]]), **{"max_new_tokens": 1, **options})


def test_empty_prompt_raises():
    with pytest.raises(PLMError, match="at least one token"):
        generate(CountingLM(), torch.zeros(1, 0, dtype=torch.long), max_new_tokens=1)


def test_one_generation_config_drives_generate_and_its_steps() -> None:
    """generate(config=...) is generate(**options) is the tokens of decode_steps: one set of options, written once."""
    torch.manual_seed(0)
    model = from_preset("gpt2-micro", vocab_size=50).eval()
    ids = torch.randint(0, 50, (2, 5))
    config = GenerationConfig(max_new_tokens=6, temperature=0.7, top_k=5, seed=3)
    by_config = generate(model, ids, config=config)
    by_options = generate(model, ids, 6, temperature=0.7, top_k=5, seed=3)
    steps = torch.stack([step.tokens for step in decode_steps(model, ids, config)], 1)
    assert torch.equal(by_config, by_options) and torch.equal(by_config[:, 5:], steps)
    assert not torch.equal(by_config, generate(model, ids, config=config, seed=4))  # an option replaces the config's
    with pytest.raises(PLMError, match="unknown generation option.*top_q"):
        generate(model, ids, 2, top_q=0.9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_greedy_takes_the_first_of_tied_tokens_as_argmax_does(dtype: torch.dtype) -> None:
    """Greedy reads the maximum through max(-1), faster than argmax; the token must be argmax's: the first of a tie
    (bf16 logits tie often), and a NaN's position where the model gave one."""
    logits = torch.tensor([[1.0, 3.0, 0.5, 3.0], [2.0, 2.0, 2.0, 2.0], [0.0, float("nan"), 9.0, float("nan")]])
    logits = logits.to(dtype)
    chosen = next_tokens(logits, torch.zeros(3, 1, dtype=torch.long), GenerationConfig(), None)
    assert chosen.tolist() == [1, 0, 1] == logits.argmax(-1).tolist()


def test_top_p_drops_the_token_after_a_set_that_reaches_p_exactly():
    """Four equally likely tokens (softmax 0.25 each, exactly): the smallest set whose mass reaches p.

    Guards the boundary: two tokens reach p = 0.5 exactly, so a third is one too many (mass >= p, not > p).
    """
    logits = torch.zeros(1, 4)
    for top_p, count in ((0.25, 1), (0.3, 2), (0.5, 2), (0.75, 3), (0.76, 4)):
        kept = torch.isfinite(filter_top_k_top_p(logits, top_k=0, top_p=top_p))
        assert int(kept.sum()) == count, top_p
