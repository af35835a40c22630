"""Decoding does what it promises: the KV cache is on by default, and sampling follows its law.

The cache is checked by what the model is fed (the prompt once, then one token per
row per step); sampling by a chi-square goodness-of-fit test of many draws against
softmax(logits / T) restricted to the top-k / top-p set, computed here from the
definitions.
"""

from __future__ import annotations

import math

import pytest
import torch

from plm.models import from_preset
from tests.conftest import StubCausalLM


def tiny_gpt():
    torch.manual_seed(0)
    return from_preset("gpt2-micro").eval()  # vocabulary 512, context 64


def left_padded(prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


def record_inputs(model: torch.nn.Module) -> list[tuple[tuple[int, ...], tuple[int, ...] | None]]:
    """Shapes of (input_ids, attention_mask) of every forward call from now on."""
    calls = []

    def hook(module, args, kwargs):
        mask = args[1] if len(args) > 1 else kwargs.get("attention_mask")
        calls.append((tuple(args[0].shape), None if mask is None else tuple(mask.shape)))

    model.register_forward_pre_hook(hook, with_kwargs=True)
    return calls


# --- the KV cache is the default -----------------------------------------------------------------


def test_generate_feeds_the_prompt_once_then_one_token_per_step_by_default():
    model = tiny_gpt()
    calls = record_inputs(model)
    model.generate(torch.tensor([[1, 2, 3, 4, 5]]), 6)
    assert [shape for shape, _ in calls] == [(1, 5)] + [(1, 1)] * 5


def test_a_left_padded_batch_is_fed_one_token_per_row_per_step_by_default():
    model = tiny_gpt()
    ids, mask = left_padded([[11, 12], [21, 22, 23, 24, 25], [31, 32, 33, 34]])
    calls = record_inputs(model)
    model.generate(ids, 4, attention_mask=mask)
    assert [shape for shape, _ in calls] == [(3, 5), (3, 1), (3, 1), (3, 1)]
    # The mask still covers the cached tokens, so the padding stays hidden at every step.
    assert [mask_shape for _, mask_shape in calls] == [(3, 5), (3, 6), (3, 7), (3, 8)]


def test_cached_and_uncached_greedy_decoding_of_a_left_padded_batch_agree():
    model = tiny_gpt()
    ids, mask = left_padded([[11, 12], [21, 22, 23, 24, 25], [31, 32, 33, 34]])
    calls = record_inputs(model)
    uncached = model.generate(ids, 12, attention_mask=mask, use_cache=False)
    assert [shape for shape, _ in calls] == [(3, 5 + step) for step in range(12)]  # really without a cache
    assert torch.equal(model.generate(ids, 12, attention_mask=mask), uncached)


# --- sampling follows softmax(logits / T) on the top-k / top-p set ---------------------------------

LOGITS = torch.tensor([2.0, 1.4, 1.1, 0.6, 0.2, -0.3, -0.9, -1.6])  # distinct, so every boundary is sharp
DRAWS = 20_000


class FixedLogitsLM(StubCausalLM):
    """A model whose next-token logits are always ``LOGITS``, whatever it reads."""

    def __init__(self) -> None:
        super().__init__(context=8)

    def logits_for(self, input_ids: torch.Tensor) -> torch.Tensor:
        return LOGITS.expand(*input_ids.shape, len(LOGITS))


def expected_distribution(temperature: float, top_k: int, top_p: float) -> list[float]:
    """The sampling law from the definitions, token by token in plain Python.

    Temperature divides the logits; top-k keeps the k largest; top-p (nucleus) keeps,
    in order of decreasing probability under what top-k left (renormalised), the
    smallest prefix whose mass reaches p; the kept probabilities are renormalised.
    """
    scaled = [value / temperature for value in LOGITS.tolist()]
    order = sorted(range(len(scaled)), key=lambda token: -scaled[token])
    kept = order[:top_k] if top_k else order
    weights = {token: math.exp(scaled[token]) for token in kept}
    total = sum(weights.values())
    nucleus, mass = [], 0.0
    for token in kept:
        if mass >= top_p:
            break
        nucleus.append(token)
        mass += weights[token] / total
    nucleus_total = sum(weights[token] for token in nucleus)
    return [weights[token] / nucleus_total if token in nucleus else 0.0 for token in range(len(scaled))]


# Upper 0.001 points of the chi-square distribution by degrees of freedom (any statistics table,
# e.g. NIST/SEMATECH e-Handbook 1.3.6.7.4): a correct sampler fails the test with probability 1/1000.
CHI_SQUARE_CRITICAL_0_001 = {1: 10.828, 2: 13.816, 3: 16.266, 4: 18.467, 5: 20.515, 6: 22.458, 7: 24.322}


def chi_square(counts: list[int], probabilities: list[float]) -> tuple[float, int]:
    """Pearson's statistic over the tokens of nonzero probability, and its degrees of freedom."""
    total = sum(counts)
    support = [token for token, p in enumerate(probabilities) if p > 0]
    statistic = sum((counts[t] - total * probabilities[t]) ** 2 / (total * probabilities[t]) for t in support)
    return statistic, len(support) - 1


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"),
    [
        (1.0, 0, 1.0),  # plain sampling: all 8 tokens
        (0.5, 0, 1.0),  # sharper, no filtering
        (2.0, 0, 1.0),  # flatter, no filtering
        (1.0, 3, 1.0),  # top-k alone: 3 tokens
        (1.0, 0, 0.8),  # top-p alone: 4 tokens (the first 3 hold 0.767 of the mass, 4 hold 0.864)
        (2.0, 0, 0.8),  # top-p after temperature: 5 tokens (4 hold 0.719, 5 hold 0.821)
        (0.7, 5, 0.875),  # top-p on the renormalised top-5: 3 tokens hold 0.889 (of all 8 only 0.863)
    ],
)
def test_sampled_frequencies_follow_the_filtered_tempered_softmax(temperature, top_k, top_p):
    model = FixedLogitsLM()
    prompts = torch.zeros(DRAWS, 1, dtype=torch.long)  # identical rows: DRAWS draws in one step
    options = dict(do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p, seed=0)
    drawn = model.generate(prompts, 1, **options)[:, -1]
    counts = torch.bincount(drawn, minlength=len(LOGITS)).tolist()
    expected = expected_distribution(temperature, top_k, top_p)
    support = [token for token, p in enumerate(expected) if p > 0]
    assert [token for token, count in enumerate(counts) if count] == support  # nothing outside the filtered set
    statistic, df = chi_square(counts, expected)
    assert statistic < CHI_SQUARE_CRITICAL_0_001[df], (counts, [round(DRAWS * p) for p in expected])
