"""Beam search: one beam is greedy search, enough beams find the brute-force best, batching changes nothing.

The oracle is exhaustive enumeration: on a model whose next-token distribution is a
known function of the whole prefix, every sequence up to the length limit is scored
by its total log-probability divided by GNMT's ((5 + |Y|) / 6)^alpha, computed here
from the definition.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from conftest import StubCausalLM
from plm.core import ModelOutput
from plm.decoding import beam_search
from plm.generation import generate
from plm.models import from_preset


class PrefixLM(StubCausalLM):
    """Next-token logits are a fixed random function of the whole prefix (prompt included).

    Its one-layer cache stores the token ids themselves, so that beam search's reordering
    of the cache is what tells the model which prefix a row continues.
    """

    def __init__(self, vocab: int, seed: int, context: int = 16) -> None:
        super().__init__(context)
        self.vocab, self.seed = vocab, seed

    def table(self, prefix: tuple[int, ...]) -> torch.Tensor:
        generator = torch.Generator().manual_seed(hash((self.seed, *prefix)) % 2**31)
        return 2 * torch.randn(self.vocab, generator=generator)

    def forward(self, input_ids, attention_mask=None, *, cache=None, num_logits=None) -> ModelOutput:
        history = input_ids
        if cache:
            ids = input_ids[:, None, :, None].float()
            cache[0].append(ids, ids)
            history = cache[0].keys[:, 0, : cache[0].length, 0].long()
        logits = torch.stack([self.table(tuple(row)) for row in history.tolist()])[:, None]  # (B, 1, V)
        return ModelOutput(last_hidden_state=logits, logits=logits)


def brute_force_best(model: PrefixLM, prompt: list[int], eos: int, limit: int, alpha: float):
    """(score, tokens) of the best of all sequences that end with EOS or reach ``limit`` tokens."""
    best = (-math.inf, [])

    def extend(tokens: list[int], log_prob: float) -> None:
        nonlocal best
        step = torch.log_softmax(model.table(tuple(prompt + tokens)).double(), -1).tolist()
        for token in range(model.vocab):
            sequence, total = tokens + [token], log_prob + step[token]
            if token == eos or len(sequence) == limit:
                score = total / ((5 + len(sequence)) / 6) ** alpha
                best = max(best, (score, sequence))
            else:
                extend(sequence, total)

    extend([], 0.0)
    return best


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0, -0.5])
@pytest.mark.parametrize("early_stopping", [True, False])
def test_enough_beams_find_the_brute_force_best_sequence(alpha, early_stopping):
    # Vocabulary 3 (token 0 is EOS), at most 4 new tokens: at most 2^3 live prefixes, each with 3
    # extensions, so 24 beams hold every candidate and the search is exhaustive.
    for seed in range(6):
        model = PrefixLM(vocab=3, seed=seed)
        prompts = [[1, 2], [2, 2], [1, 1]]
        out = beam_search(model, torch.tensor(prompts), beam_size=24, alpha=alpha, max_len_b=4,
                          eos_token_id=0, pad_token_id=0, early_stopping=early_stopping)
        for row, prompt in enumerate(prompts):
            score, tokens = brute_force_best(model, prompt, eos=0, limit=4, alpha=alpha)
            assert out.lengths[row] == len(tokens)
            assert out.sequences[row, 2 : 2 + len(tokens)].tolist() == tokens, (seed, row)
            assert out.scores[row].item() == pytest.approx(score, abs=1e-4)


class GardenPathLM(StubCausalLM):
    """Greedy is led astray: token 1 looks best first, but every sequence after it is unlikely.

    Token 0 is EOS. First step: 1 has p = 0.5, 2 has p = 0.4, EOS 0.1. After 1, the next
    token is uniform over 3 tokens (p = 1/3); after 2, EOS has p = 0.9. So 1 EOS has
    p = 0.167, 2 EOS p = 0.36: the best sequence starts with the worse first token.
    """

    FIRST = torch.tensor([0.1, 0.5, 0.4]).log()
    AFTER = {1: torch.tensor([1 / 3, 1 / 3, 1 / 3]).log(), 2: torch.tensor([0.9, 0.05, 0.05]).log()}

    def __init__(self) -> None:
        super().__init__(context=8)

    def forward(self, input_ids, attention_mask=None, *, cache=None, num_logits=None) -> ModelOutput:
        history = input_ids
        if cache:
            ids = input_ids[:, None, :, None].float()
            cache[0].append(ids, ids)
            history = cache[0].keys[:, 0, : cache[0].length, 0].long()
        rows = [self.FIRST if len(row) == 1 else self.AFTER.get(row[1], self.AFTER[1]) for row in history.tolist()]
        logits = torch.stack(rows)[:, None]
        return ModelOutput(last_hidden_state=logits, logits=logits)


def test_two_beams_find_the_sequence_that_greedy_search_misses():
    model, prompt = GardenPathLM(), torch.tensor([[2]])  # the prompt token is only a start symbol
    greedy = generate(model, prompt, 4, eos_token_id=0)
    assert greedy[0, 1:].tolist() == [1, 0]  # greedy commits to token 1 (then EOS, as likely as any)
    out = beam_search(model, prompt, beam_size=2, alpha=0.0, max_len_b=4, eos_token_id=0)
    assert out.sequences[0, 1:].tolist() == [2, 0]
    assert out.scores[0].item() == pytest.approx(math.log(0.4 * 0.9))


def test_one_beam_is_greedy_search():
    torch.manual_seed(0)
    model = from_preset("gpt2-micro").eval()
    prompts = [[11, 12], [21, 22, 23, 24, 25], [31, 32, 33, 34]]
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    greedy = generate(model, ids, 12, attention_mask=mask)
    # An EOS that greedy search emits in one row, so that rows finish at different steps.
    eos = greedy[1, width + 3].item()
    greedy = generate(model, ids, 12, attention_mask=mask, eos_token_id=eos, pad_token_id=7)
    beam = beam_search(model, ids, mask, beam_size=1, alpha=0.0, max_len_b=12, eos_token_id=eos, pad_token_id=7)
    assert torch.equal(beam.sequences, greedy)


def test_one_beam_does_not_keep_an_ending_that_greedy_search_passed_over():
    # EOS is the second-best first token (0.4 against 0.6): greedy search writes 1, then EOS.
    model = ScriptedLM([[0.4, 0.6, 1e-9], [0.9, 0.1, 1e-9]])
    greedy = generate(model, torch.tensor([[2]]), 4, eos_token_id=0)
    assert greedy[0, 1:].tolist() == [1, 0]
    for early_stopping in (True, False):
        beam = beam_search(model, torch.tensor([[2]]), beam_size=1, alpha=0.0, max_len_b=4, eos_token_id=0,
                           early_stopping=early_stopping)
        assert torch.equal(beam.sequences, greedy)


def left_padded(prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


@pytest.mark.parametrize("use_cache", [True, False])
def test_batched_beam_search_equals_one_sentence_at_a_time(use_cache):
    torch.manual_seed(0)
    model = from_preset("gpt2-micro").eval()
    prompts = [[11, 12, 13], [21, 22, 23, 24, 25], [31, 32, 33, 34, 35, 36]]
    ids, mask = left_padded(prompts)
    options = dict(beam_size=3, alpha=0.6, max_len_b=8, eos_token_id=None, use_cache=use_cache)
    batched = beam_search(model, ids, mask, **options)
    for row, prompt in enumerate(prompts):
        alone = beam_search(model, torch.tensor([prompt]), **options)
        assert batched.sequences[row, ids.shape[1] :].tolist() == alone.sequences[0, len(prompt) :].tolist()
        assert batched.scores[row].item() == pytest.approx(alone.scores[0].item(), abs=1e-5)


def test_beam_search_calls_the_model_once_per_step_for_all_sentences_and_beams():
    torch.manual_seed(0)
    model = from_preset("gpt2-micro").eval()
    batches = []
    model.register_forward_pre_hook(lambda module, args: batches.append(tuple(args[0].shape)))
    beam_search(model, torch.randint(0, 512, (3, 4)), beam_size=5, max_len_b=6)
    assert batches == [(3, 4)] + [(15, 1)] * 5  # the prompts once, then one token per beam


class ScriptedLM(StubCausalLM):
    """Next-token probabilities depend only on how many new tokens there are: ``script[n]`` (the last for more)."""

    def __init__(self, script: list[list[float]], prompt_length: int = 1) -> None:
        super().__init__(context=8)
        self.script, self.prompt_length = script, prompt_length

    def forward(self, input_ids, attention_mask=None, *, cache=None, num_logits=None) -> ModelOutput:
        length = input_ids.shape[1]
        if cache:
            cache[0].append(torch.zeros(input_ids.shape[0], 1, length, 1), torch.zeros(input_ids.shape[0], 1, length, 1))
            length = cache[0].length
        new = min(length - self.prompt_length, len(self.script) - 1)
        logits = torch.tensor(self.script[new]).log().expand(input_ids.shape[0], 1, -1)
        return ModelOutput(last_hidden_state=logits, logits=logits)


def test_length_penalty_changes_the_winner_as_the_formula_says():
    # Token 0 is EOS: either stop at once (p = 0.3) or write 1 1 1 EOS (p = 0.7 * 0.6 * 0.6 * 1).
    model = ScriptedLM([[0.3, 0.7, 1e-9], [1e-9, 0.6, 0.4], [1e-9, 0.6, 0.4], [1.0, 1e-9, 1e-9]])
    short, long = math.log(0.3), math.log(0.7 * 0.6 * 0.6)
    assert short > long
    options = dict(beam_size=2, max_len_b=6, eos_token_id=0, early_stopping=False)
    winners = []
    for alpha in (0.0, 0.5, 1.0, 2.0):
        out = beam_search(model, torch.tensor([[2]]), alpha=alpha, **options)
        penalised = {1: short / ((5 + 1) / 6) ** alpha, 4: long / ((5 + 4) / 6) ** alpha}
        winner = max(penalised, key=penalised.get)
        assert out.lengths[0].item() == winner, alpha
        assert out.scores[0].item() == pytest.approx(penalised[winner], rel=1e-5)
        winners.append(winner)
    assert winners[0] == 1 and winners[-1] == 4  # the penalty really flips the choice


def test_early_stopping_ends_a_sentence_once_it_has_beam_size_finished_hypotheses():
    # EOS first (p = 0.5) or 1 EOS (p = 0.45): with alpha = 2, 1 EOS scores log(0.45) / (7/6)^2 = -0.59,
    # better than log(0.5) = -0.69. One beam finishes "EOS" at the first step.
    model = ScriptedLM([[0.5, 0.45, 0.05], [1.0, 1e-9, 1e-9]])
    calls = []
    model.register_forward_pre_hook(lambda module, args: calls.append(1))
    options = dict(beam_size=1, alpha=2.0, max_len_b=6, eos_token_id=0)
    early = beam_search(model, torch.tensor([[2]]), early_stopping=True, **options)
    assert (len(calls), early.lengths[0].item()) == (1, 1)  # stopped with one finished hypothesis
    # Without early stopping the live beam could still score better, so the search goes on and finds it.
    exact = beam_search(model, torch.tensor([[2]]), early_stopping=False, **options)
    assert exact.sequences[0, 1:].tolist() == [1, 0]
    assert exact.scores[0].item() == pytest.approx(math.log(0.45) / (7 / 6) ** 2, rel=1e-5)
