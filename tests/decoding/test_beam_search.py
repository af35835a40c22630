"""Beam search: one beam is greedy, enough beams find the brute-force best, batches that sentences leave change nothing.

The oracle is exhaustive enumeration: on a model whose next-token distribution is a
known function of the whole prefix, every sequence up to the length limit is scored
by its total log-probability divided by GNMT's ((5 + |Y|) / 6)^alpha, computed here
from the definition.
"""

from __future__ import annotations

import math

import pytest
import torch

from plm.core import CausalLMOutput
from plm.decoding import DecodingRequest, GenerationConfig, beam_search, decode_steps, generate
from plm.errors import PLMError
from plm.models import from_preset
from tests.conftest import StubCausalLM


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

    def forward(self, input_ids, attention_mask=None, *, cache=None, num_logits=None) -> CausalLMOutput:
        history = input_ids
        if cache:
            ids = input_ids[:, None, :, None].float()
            cache[0].append(ids, ids)
            history = cache[0].keys[:, 0, : cache[0].length, 0].long()
        logits = torch.stack([self.table(tuple(row)) for row in history.tolist()])[:, None]  # (B, 1, V)
        return CausalLMOutput(last_hidden_state=logits, logits=logits)


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
        out = beam_search(model, torch.tensor(prompts), num_beams=24, length_penalty=alpha, max_new_tokens=4,
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

    def forward(self, input_ids, attention_mask=None, *, cache=None, num_logits=None) -> CausalLMOutput:
        history = input_ids
        if cache:
            ids = input_ids[:, None, :, None].float()
            cache[0].append(ids, ids)
            history = cache[0].keys[:, 0, : cache[0].length, 0].long()
        rows = [self.FIRST if len(row) == 1 else self.AFTER.get(row[1], self.AFTER[1]) for row in history.tolist()]
        logits = torch.stack(rows)[:, None]
        return CausalLMOutput(last_hidden_state=logits, logits=logits)


def test_two_beams_find_the_sequence_that_greedy_search_misses():
    model, prompt = GardenPathLM(), torch.tensor([[2]])  # the prompt token is only a start symbol
    greedy = generate(model, prompt, 4, eos_token_id=0)
    assert greedy[0, 1:].tolist() == [1, 0]  # greedy commits to token 1 (then EOS, as likely as any)
    out = beam_search(model, prompt, num_beams=2, length_penalty=0.0, max_new_tokens=4, eos_token_id=0)
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
    beam = beam_search(model, ids, mask, num_beams=1, length_penalty=0.0, max_new_tokens=12, eos_token_id=eos,
                       pad_token_id=7)
    assert torch.equal(beam.sequences, greedy)


def test_one_beam_does_not_keep_an_ending_that_greedy_search_passed_over():
    # EOS is the second-best first token (0.4 against 0.6): greedy search writes 1, then EOS.
    model = ScriptedLM([[0.4, 0.6, 1e-9], [0.9, 0.1, 1e-9]])
    greedy = generate(model, torch.tensor([[2]]), 4, eos_token_id=0)
    assert greedy[0, 1:].tolist() == [1, 0]
    for early_stopping in (True, False):
        beam = beam_search(model, torch.tensor([[2]]), num_beams=1, length_penalty=0.0, max_new_tokens=4,
                           eos_token_id=0, early_stopping=early_stopping)
        assert torch.equal(beam.sequences, greedy)


def left_padded(prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


def right_padded(sources: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, sources))
    ids = torch.tensor([s + [0] * (width - len(s)) for s in sources])
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in sources])
    return ids, mask


EOS = 2


def recording_rows(model, rows: list[int]):
    """``model``, recording in ``rows`` how many rows each decoding step reads."""
    decode_step = model.decode_step

    def step(history: torch.Tensor, state):
        rows.append(history.shape[0])
        return decode_step(history, state)

    model.decode_step = step
    return model


def ends_after_multiples_of_four(model):
    """``model`` with its EOS logit raised by 2 after a token divisible by 4, so that hypotheses end at
    many different steps; its state and its reordering are its own."""
    decode_step = model.decode_step

    def step(history: torch.Tensor, state):
        logits, state = decode_step(history, state)
        after = history[:, -1:] % 4 == 0  # (rows, 1)
        return logits + 2.0 * (after & (torch.arange(logits.shape[-1]) == EOS)), state

    model.decode_step = step
    return model


# A decoder-only model continues prompts; an encoder-decoder (the Transformer, RNNs with either attention)
# translates sources, whose lengths set each sentence's limit. The lengths differ a lot, so sentences finish
# (by EOS or at their limit) at very different steps.
DECODERS = {
    "gpt2-micro": {},
    "transformer-micro": {},
    "rnn-bahdanau": dict(vocab_size=100),
    "rnn-luong": dict(vocab_size=100),
}


@pytest.mark.parametrize("name", DECODERS)
@pytest.mark.parametrize("early_stopping", [True, False])
@pytest.mark.parametrize("use_cache", [True, False])
def test_batched_beam_search_equals_one_sentence_at_a_time(name, early_stopping, use_cache):
    # Alone, a sentence never leaves a batch early: the oracle for the batch that sentences leave once done.
    torch.manual_seed(0)
    rows: list[int] = []
    model = recording_rows(ends_after_multiples_of_four(from_preset(name, **DECODERS[name]).eval()), rows)
    sentences = [torch.randint(3, model.config.vocab_size, (n,)).tolist() for n in [1, 9, 3, 12, 5, 2]]
    options = dict(num_beams=3, length_penalty=0.6, eos_token_id=EOS, pad_token_id=0, early_stopping=early_stopping,
                   use_cache=use_cache)
    if name.startswith("gpt"):
        ids, mask = left_padded(sentences)
        batched = beam_search(model, ids, mask, max_new_tokens=10, **options)
        batch_rows = list(rows)
        alone = [beam_search(model, torch.tensor([s]), max_new_tokens=10, **options) for s in sentences]
        hypotheses = [(batched.sequences[row, ids.shape[1] :], out.sequences[0, len(sentence) :])
                      for row, (sentence, out) in enumerate(zip(sentences, alone))]
    else:  # a limit of 1.0 x source length + 2 new tokens
        source, source_mask = right_padded(sentences)
        start = torch.full((len(sentences), 1), 1)
        options |= dict(max_len_a=1.0, max_new_tokens=2)
        batched = beam_search(model, start, source_ids=source, source_mask=source_mask, **options)
        batch_rows = list(rows)
        alone = [beam_search(model, start[:1], source_ids=torch.tensor([s]), **options) for s in sentences]
        hypotheses = [(batched.sequences[row, 1:], out.sequences[0, 1:]) for row, out in enumerate(alone)]
    # The batch shrank at two steps or more, so sentences did leave it (should a new initialisation of a
    # preset end every sentence at once, change the seed or the EOS rule, not this check).
    assert len(set(batch_rows[1:])) >= 3, batch_rows
    for row, ((mine, theirs), out) in enumerate(zip(hypotheses, alone)):
        length = out.lengths[0].item()
        assert batched.lengths[row].item() == length, row
        assert mine[:length].tolist() == theirs[:length].tolist(), row
        assert batched.scores[row].item() == pytest.approx(out.scores[0].item(), abs=1e-5), row


def test_sentences_leave_the_batch_once_done():
    # Limits of 1.0 x source length + 1 new tokens (3, 5 and 8) and no EOS: each sentence runs to its limit.
    torch.manual_seed(0)
    rows: list[int] = []
    model = recording_rows(from_preset("transformer-micro").eval(), rows)
    source, source_mask = right_padded([[5] * 2, [6] * 7, [7] * 4])
    beam_search(model, torch.full((3, 1), 1), num_beams=2, max_len_a=1.0, max_new_tokens=1, source_ids=source,
                source_mask=source_mask)
    # one row per sentence, then two beams each; the first sentence leaves after 3 steps, the third after 5
    assert rows == [3, 6, 6, 4, 4, 2, 2, 2]


def test_a_sentence_without_room_keeps_the_empty_hypothesis_and_the_others_are_searched():
    torch.manual_seed(0)
    rows: list[int] = []
    model = recording_rows(from_preset("transformer-micro").eval(), rows)
    source, source_mask = right_padded([[5, 6, 7, 8], [9], [10, 11, 12]])  # limits 0.5 x length: 2, 0 and 1
    options = dict(num_beams=2, max_len_a=0.5, max_new_tokens=0, pad_token_id=0)
    out = beam_search(model, torch.full((3, 1), 1), source_ids=source, source_mask=source_mask, **options)
    assert rows == [2, 2]  # the second sentence never enters the search, the third leaves after one token
    assert (out.lengths.tolist(), out.scores[1].item(), out.sequences[1].tolist()) == ([2, 0, 1], 0.0, [1, 0, 0])
    for row in (0, 2):
        length = int(source_mask[row].sum())
        alone = beam_search(model, torch.full((1, 1), 1), source_ids=source[row : row + 1, :length], **options)
        assert out.sequences[row, : alone.sequences.shape[1]].tolist() == alone.sequences[0].tolist()
        assert out.scores[row].item() == pytest.approx(alone.scores[0].item(), abs=1e-5)


def test_beam_search_calls_the_model_once_per_step_for_all_sentences_and_beams():
    torch.manual_seed(0)
    model = from_preset("gpt2-micro").eval()
    batches = []
    model.register_forward_pre_hook(lambda module, args: batches.append(tuple(args[0].shape)))
    beam_search(model, torch.randint(0, 512, (3, 4)), num_beams=5, max_new_tokens=6)
    assert batches == [(3, 4)] + [(15, 1)] * 5  # the prompts once, then one token per beam


class ScriptedLM(StubCausalLM):
    """Next-token probabilities depend only on how many new tokens there are: ``script[n]`` (the last for more)."""

    def __init__(self, script: list[list[float]], prompt_length: int = 1) -> None:
        super().__init__(context=8)
        self.script, self.prompt_length = script, prompt_length

    def forward(self, input_ids, attention_mask=None, *, cache=None, num_logits=None) -> CausalLMOutput:
        length = input_ids.shape[1]
        if cache:
            cache[0].append(
                torch.zeros(input_ids.shape[0], 1, length, 1), torch.zeros(input_ids.shape[0], 1, length, 1)
            )
            length = cache[0].length
        new = min(length - self.prompt_length, len(self.script) - 1)
        logits = torch.tensor(self.script[new]).log().expand(input_ids.shape[0], 1, -1)
        return CausalLMOutput(last_hidden_state=logits, logits=logits)


def test_length_penalty_changes_the_winner_as_the_formula_says():
    # Token 0 is EOS: either stop at once (p = 0.3) or write 1 1 1 EOS (p = 0.7 * 0.6 * 0.6 * 1).
    model = ScriptedLM([[0.3, 0.7, 1e-9], [1e-9, 0.6, 0.4], [1e-9, 0.6, 0.4], [1.0, 1e-9, 1e-9]])
    short, long = math.log(0.3), math.log(0.7 * 0.6 * 0.6)
    assert short > long
    options = dict(num_beams=2, max_new_tokens=6, eos_token_id=0, early_stopping=False)
    winners = []
    for alpha in (0.0, 0.5, 1.0, 2.0):
        out = beam_search(model, torch.tensor([[2]]), length_penalty=alpha, **options)
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
    options = dict(num_beams=1, length_penalty=2.0, max_new_tokens=6, eos_token_id=0)
    early = beam_search(model, torch.tensor([[2]]), early_stopping=True, **options)
    assert (len(calls), early.lengths[0].item()) == (1, 1)  # stopped with one finished hypothesis
    # Without early stopping the live beam could still score better, so the search goes on and finds it.
    exact = beam_search(model, torch.tensor([[2]]), early_stopping=False, **options)
    assert exact.sequences[0, 1:].tolist() == [1, 0]
    assert exact.scores[0].item() == pytest.approx(math.log(0.45) / (7 / 6) ** 2, rel=1e-5)


def test_the_transformer_moves_its_memory_only_for_rows_that_change_sentence():
    # Beam search reorders the beams within each sentence at every step: the encoder's keys and values,
    # the same for all beams of a sentence, stay where they are then; rows that change sentence need theirs.
    model = from_preset("transformer-micro").eval()
    source, source_mask = right_padded([[5, 6, 7], [8, 9]])
    start = torch.full((4, 1), 1)
    state = model.start_decoding(DecodingRequest(start[:2], 4, None, source, source_mask))
    beams = model.reorder_state(state, torch.tensor([0, 0, 1, 1]))
    within = model.reorder_state(beams, torch.tensor([1, 0, 3, 2]))
    assert within.memory is beams.memory and within.memory_mask is beams.memory_mask
    swapped = model.reorder_state(within, torch.tensor([2, 3, 0, 1]))  # rows 0 and 1 now decode sentence 1
    rows = torch.tensor([1, 1, 0, 0])
    fresh = model.start_decoding(DecodingRequest(start, 4, None, source[rows], source_mask[rows]))
    torch.testing.assert_close(model.decode_step(start, swapped)[0], model.decode_step(start, fresh)[0])


def test_generate_with_beams_returns_the_brute_force_best_sequence():
    # generate takes one GenerationConfig for every search: more than one beam makes it a beam search.
    model = PrefixLM(vocab=3, seed=4)
    config = GenerationConfig(max_new_tokens=4, num_beams=24, length_penalty=0.6, eos_token_id=0, pad_token_id=0)
    out = generate(model, torch.tensor([[1, 2]]), config=config)
    score, tokens = brute_force_best(model, [1, 2], eos=0, limit=4, alpha=0.6)
    assert out[0, 2:].tolist() == tokens


def test_beam_search_keeps_the_last_prompt_tokens_it_is_asked_to():
    model = PrefixLM(vocab=3, seed=1)
    cut = beam_search(model, torch.tensor([[2, 2, 1, 2]]), num_beams=2, max_new_tokens=3, keep_last=2)
    short = beam_search(model, torch.tensor([[1, 2]]), num_beams=2, max_new_tokens=3)
    assert torch.equal(cut.sequences, short.sequences)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"num_beams": 2, "temperature": 0.7}, "beam search neither samples"),
        ({"num_beams": 2, "repetition_penalty": 1.3}, "beam search neither samples"),
        ({"num_beams": 0}, "num_beams must be at least 1"),
        ({"num_beams": 2, "length_penalty": math.nan}, "length_penalty .* must be a finite number"),
        ({"num_beams": 2, "max_len_a": -1.0}, "max_len_a must be a number >= 0"),
    ],
)
def test_generate_refuses_a_beam_search_it_cannot_run(options, message):
    with pytest.raises(PLMError, match=message):
        generate(PrefixLM(vocab=3, seed=0), torch.tensor([[1]]), 3, **options)


def test_beam_search_cannot_be_streamed_step_by_step():
    with pytest.raises(PLMError, match="beam search .* has no steps to stream"):
        decode_steps(PrefixLM(vocab=3, seed=0), torch.tensor([[1]]), GenerationConfig(num_beams=2))


class DesignedLM(PrefixLM):
    """Next-token probabilities set by hand for a few prefixes (prompt [4]); the others uniform. Token 0 is EOS."""

    PROBABILITIES = {
        (4,): [0.16, 0.12, 0.5, 0.11, 0.11],  # EOS is second: it ends a hypothesis at once
        (4, 2): [0.45, 1e-9, 1e-9, 0.55, 1e-9],  # "2 EOS" ends a second one
        (4, 2, 3): [1.0, 1e-9, 1e-9, 1e-9, 1e-9],  # "2 3" then ends as the best of all
    }

    def __init__(self) -> None:
        super().__init__(vocab=5, seed=0)

    def table(self, prefix: tuple[int, ...]) -> torch.Tensor:
        return torch.tensor(self.PROBABILITIES.get(prefix, [0.2] * 5)).log()


def test_a_negative_length_penalty_searches_on_while_a_live_beam_can_still_win():
    # alpha = -1: lp(L) = 6 / (5 + L). After the second step the finished hypotheses are EOS (log 0.16 = -1.83)
    # and "2 EOS" (log 0.225 * 7/6 = -1.74); the live beam "2 3" (log 0.275 = -1.29) still ends at best as
    # -1.29 * 8/6 = -1.72 (its next length, 3), which beats both: the search must not stop there.
    # (A bound that took its penalty at length 4, -1.29 * 9/6 = -1.94, would stop and return "2 EOS".)
    model = DesignedLM()
    out = beam_search(model, torch.tensor([[4]]), num_beams=2, length_penalty=-1.0, max_new_tokens=4,
                      eos_token_id=0, pad_token_id=0, early_stopping=False)
    score, tokens = brute_force_best(model, [4], eos=0, limit=4, alpha=-1.0)
    assert tokens == [2, 3, 0]
    assert out.sequences[0, 1:].tolist() == tokens
    assert out.scores[0].item() == pytest.approx(score, abs=1e-5)
