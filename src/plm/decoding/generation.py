"""Greedy search and sampling, for any [`Decoder`][plm.decoding.interface.Decoder]: stop strings, batched prompts.

Prompts of different lengths are left-padded so that every row's next token sits in
the last column; the attention mask marks the padding and positions skip it, so a
padded prompt decodes exactly like the same prompt alone. The KV cache is on by
default: the prompt is encoded once, then each step feeds only the newest token.
An encoder-decoder decodes from a prompt of start tokens (its BOS column) and takes
its source as ``source_ids`` / ``source_mask``. [`decode_steps`][plm.decoding.generation.decode_steps] is the loop, a
step at a time (what streaming needs); [`generate`][plm.decoding.generation.generate] collects its tokens.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from plm.decoding.beam import beam_search
from plm.decoding.generation_config import GenerationConfig, configured, fit_prompt
from plm.decoding.interface import Decoder, DecodingRequest
from plm.errors import PLMError


def penalize_repetition(
    logits: torch.Tensor, tokens: torch.Tensor, penalty: float, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """CTRL's penalty: logits of tokens already present are divided by it (multiplied if negative).

    A token counts once however often it occurs.

    Args:
        logits: (batch, vocab) logits of the next token.
        tokens: (batch, time) the tokens so far.
        penalty: the divisor of a present token's positive logit (the factor of a negative one).
        mask: (batch, time), 0 at padding, which does not count as present.

    Returns:
        The (batch, vocab) penalised logits.
    """
    weights = mask.to(logits.dtype) if mask is not None else torch.ones_like(tokens, dtype=logits.dtype)
    present = torch.zeros_like(logits).scatter_add_(1, tokens, weights) > 0
    return torch.where(present, torch.where(logits < 0, logits * penalty, logits / penalty), logits)


def filter_top_k_top_p(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Keep the k most likely tokens and the smallest set whose probability reaches p.

    Args:
        logits: (batch, vocab) logits of the next token.
        top_k: how many of the most likely tokens to keep (0: all).
        top_p: the probability mass the kept tokens must reach (1.0: all).

    Returns:
        The (batch, vocab) logits, -inf at the tokens filtered out.
    """
    if top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        remove = cumulative - sorted_logits.softmax(-1) >= top_p  # mass before this token already >= p
        remove[:, 0] = False  # the most likely token stays, however small p (rounded to 0 it would keep none)
        logits = logits.masked_fill(remove.scatter(1, order, remove), float("-inf"))
    return logits


def next_tokens(
    logits: torch.Tensor,
    history: torch.Tensor,
    options: GenerationConfig,
    generator: torch.Generator | Sequence[torch.Generator | None] | None,
    history_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """(batch, vocab) logits of the last position -> (batch,) chosen token ids.

    Args:
        logits: (batch, vocab) logits of the last position.
        history: (batch, time) the tokens so far.
        options: how the token is chosen (greedy or sampled).
        generator: the random generator sampling draws from (None: torch's global one), or one per row, each
            row drawing from its own as it would alone.
        history_mask: (batch, time), 0 at the padding of ``history``.

    Returns:
        The (batch,) chosen token ids.
    """
    if options.repetition_penalty != 1.0:
        logits = penalize_repetition(logits, history, options.repetition_penalty, history_mask)
    if not options.sampling:
        # the same first maximal index as argmax (NaN included), 2.7x faster over a (1, 50257) row in fp32, 4x in bf16
        return logits.max(-1).indices
    logits = logits.double()  # so that a temperature near 0 leaves the most likely token's scaled logit 0, not NaN
    scaled = (logits - logits.amax(-1, keepdim=True)) / options.temperature  # (batch, vocab), at most 0
    probabilities = filter_top_k_top_p(scaled, options.top_k, options.top_p).softmax(-1)
    if isinstance(generator, Sequence):  # (1, vocab) a row: the draw a row alone would make
        return torch.cat([torch.multinomial(row[None], 1, generator=own) for row, own in zip(probabilities, generator)],
                         0).squeeze(1)
    return torch.multinomial(probabilities, 1, generator=generator).squeeze(1)


def row_generator(seed: int, row: int, device: torch.device) -> torch.Generator:
    """The random generator of the row at position ``row`` of an input sampled with ``seed``.

    A row that draws from its own generator samples the same tokens whatever rows share its batch, so a
    sampled output depends on its seed and its line, not on the batch size or the lines around it. The
    first row's is seeded with ``seed`` itself, so that one prompt samples as
    [`generate`][plm.decoding.generation.generate] and a served request with that seed do; the others'
    with numpy's SeedSequence of the two numbers, so that seed s at row i + 1 draws nothing like seed
    s + 1 at row i.

    Args:
        seed: the sampling's seed (any integer; taken modulo 2^64).
        row: the row's position in the input, from 0.
        device: where the generator draws.

    Returns:
        The generator.
    """
    if row == 0:
        return torch.Generator(device).manual_seed(seed)
    state = np.random.SeedSequence([seed % 2**64, row]).generate_state(1, np.uint64)[0]
    return torch.Generator(device).manual_seed(int(state))


@dataclass(frozen=True)
class Step:
    """One decoding step of a batch: the token each row wrote and the logits it was chosen from.

    A row's token is its own while the row was unfinished before this step; after that it is padding.
    """

    tokens: torch.Tensor  # (batch,) the new column: chosen tokens, pad in rows finished earlier
    finished: torch.Tensor  # (batch,) bool: the row has emitted eos or reached a stop string (this step or before)
    logits: torch.Tensor  # (batch, vocab) the model's, before the repetition penalty, temperature and filtering

    @property
    def logprobs(self) -> torch.Tensor:
        """(batch,) log p(token | history) under the model's own distribution: how sure it was of each token.

        Computed on request, so that [`generate`][plm.decoding.generation.generate], which never asks, pays nothing for
        it.
        """
        return self.logits.float().log_softmax(-1).gather(1, self.tokens[:, None].long()).squeeze(1)


def decode_steps(
    model: Decoder,
    input_ids: torch.Tensor,
    config: GenerationConfig = GenerationConfig(),
    attention_mask: torch.Tensor | None = None,
    *,
    source_ids: torch.Tensor | None = None,
    source_mask: torch.Tensor | None = None,
    generators: Sequence[torch.Generator | None] | None = None,
) -> Generator[Step, None, None]:
    """The steps of `generate` one at a time, for a caller that streams tokens or wants their probabilities.

    The options and the prompt are checked here, before the first step; iterating runs the
    model, one [`Step`][plm.decoding.generation.Step] per new token column, and ends after ``config.max_new_tokens``
    steps or once every row is finished. Closing the iterator early stops decoding.

    Args:
        model: the decoder.
        input_ids: (batch, time) the prompt.
        config: how to continue it.
        attention_mask: (batch, time), 0 at (left) padding, or None.
        source_ids: an encoder-decoder's (batch, source_length) source.
        source_mask: 0 at the padding of ``source_ids``.
        generators: a random generator per row (None: torch's global one) in place of ``config.seed``'s one for
            the batch, so that each row samples as it would alone (a server's requests in one batch, each with
            its seed).

    Returns:
        An iterator of [`Step`][plm.decoding.generation.Step], one per new token column.

    Raises:
        PLMError: an option out of range, a prompt that is not (batch, time) with at least one token
            or does not fit the context with the new tokens, or ``generators`` not one per row.
    """
    config.validate()
    if config.searches_beams:
        raise PLMError("beam search (num_beams > 1 or max_len_a) has no steps to stream; call generate or "
                       "beam_search for it")
    if input_ids.dim() != 2 or input_ids.shape[1] == 0:
        raise PLMError(f"input_ids must be (batch, time) with at least one token, got shape {tuple(input_ids.shape)}")
    if generators is not None and len(generators) != input_ids.shape[0]:
        raise PLMError(f"generators must be one per row: {input_ids.shape[0]} rows, {len(generators)} generators")
    input_ids, attention_mask = fit_prompt(
        input_ids, attention_mask, config.max_new_tokens, model.context_length(), config.keep_last
    )
    if attention_mask is not None and bool(attention_mask.all()):
        attention_mask = None  # no padding: attention needs no mask tensor and takes its fastest path
    request = DecodingRequest(input_ids, input_ids.shape[1] + config.max_new_tokens, attention_mask,
                              source_ids, source_mask, config.use_cache, config.compile, config.cuda_graph)
    return _steps(model, request, config, generators)


@torch.inference_mode()
def _steps(
    model: Decoder, request: DecodingRequest, config: GenerationConfig,
    generators: Sequence[torch.Generator | None] | None,
) -> Generator[Step, None, None]:
    """The decoding loop over checked inputs (see [`decode_steps`][plm.decoding.generation.decode_steps])."""
    was_training = model.training
    model.eval()
    input_ids, attention_mask, max_new_tokens = request.prompt, request.prompt_mask, config.max_new_tokens
    generator: torch.Generator | Sequence[torch.Generator | None] | None = generators
    if generators is None and config.seed is not None:
        generator = torch.Generator(input_ids.device).manual_seed(config.seed)
    eos_token_id, stop = config.finishing_token_id, config.stop
    pad = config.pad_token_id if config.pad_token_id is not None else (
        config.eos_token_id if config.eos_token_id is not None else 0)
    batch, prompt_length = input_ids.shape
    tokens = torch.empty(batch, prompt_length + max_new_tokens, dtype=input_ids.dtype, device=input_ids.device)
    tokens[:, :prompt_length] = input_ids
    history_mask = None  # what the repetition penalty counts as present: not the prompt's padding
    if attention_mask is not None and config.repetition_penalty != 1.0:
        history_mask = torch.ones(batch, tokens.shape[1], dtype=attention_mask.dtype, device=input_ids.device)
        history_mask[:, :prompt_length] = attention_mask
    finished = torch.zeros(batch, dtype=torch.bool, device=input_ids.device)
    can_finish = eos_token_id is not None or stop is not None
    length = prompt_length
    try:
        state = model.start_decoding(request)
        for _ in range(max_new_tokens):
            logits, state = model.decode_step(tokens[:, :length], state)
            step_mask = history_mask[:, :length] if history_mask is not None else None
            chosen = next_tokens(logits, tokens[:, :length], config, generator, step_mask)
            tokens[:, length] = torch.where(finished, pad, chosen) if can_finish else chosen
            length += 1
            if eos_token_id is not None:
                finished |= chosen == eos_token_id
            if stop is not None:
                finished |= stop.reached(tokens[:, prompt_length:length])
            yield Step(tokens[:, length - 1].clone(), finished.clone(), logits)
            if can_finish and bool(finished.all()):
                break
    finally:
        model.train(was_training)


@torch.inference_mode()
def generate(
    model: Decoder,
    input_ids: torch.Tensor,
    max_new_tokens: int | None = None,
    attention_mask: torch.Tensor | None = None,
    *,
    config: GenerationConfig | None = None,
    source_ids: torch.Tensor | None = None,
    source_mask: torch.Tensor | None = None,
    generators: Sequence[torch.Generator | None] | None = None,
    **options: Any,
) -> torch.Tensor:
    """Continue ``input_ids`` (batch, time) by up to ``max_new_tokens``.

    Greedy unless a sampling option is given; beam search with ``num_beams`` > 1 or ``max_len_a``
    ([`beam_search`][plm.decoding.beam.beam_search], whose best hypothesis per row this returns). A row that emits
    ``eos_token_id`` (or hits a stop string) is finished: its later positions hold ``pad_token_id``
    (default: the eos id, else 0). Generation ends early when every row is finished; with ``ignore_eos``
    the eos token finishes no row, and every row gets ``max_new_tokens`` but for stop strings.
    The loop is [`decode_steps`][plm.decoding.generation.decode_steps]'; this collects its tokens.

    ``compile`` runs the model through ``torch.compile`` (inductor; on the CPU it needs
    a C++ compiler). The first call compiles the prompt pass and the one-token step,
    which takes tens of seconds; later calls on the same model with the same batch
    size and prompt length reuse that code. It pays off where a step is mostly Python
    overhead (small models, long generations), not where reading the weights bounds
    the step (see benchmarks/README.md).

    An encoder-decoder translates ``source_ids`` (batch, source_length), 0 in
    ``source_mask`` at padding, starting from ``input_ids`` (its start token per row).

    Args:
        model: the decoder.
        input_ids: (batch, time) the prompt.
        max_new_tokens: the most new tokens per row (None: the config's).
        attention_mask: (batch, time), 0 at (left) padding, or None.
        config: how to continue the prompt (None: the defaults of
            [`GenerationConfig`][plm.decoding.generation_config.GenerationConfig]).
        source_ids: an encoder-decoder's (batch, source_length) source.
        source_mask: 0 at the padding of ``source_ids``.
        generators: a random generator per row in place of ``seed``'s one for the batch (see
            [`decode_steps`][plm.decoding.generation.decode_steps] and
            [`row_generator`][plm.decoding.generation.row_generator]); not for beam search.
        **options (Any): fields of [`GenerationConfig`][plm.decoding.generation_config.GenerationConfig] that replace
            the config's, as in ``generate(model, ids, 20, temperature=0.8, top_p=0.9, seed=1)``.

    Returns:
        (batch, time + N) the prompt (cut to ``keep_last``) followed by the N new tokens.

    Raises:
        PLMError: an unknown option, an option out of range, a prompt that is not (batch, time) with at
            least one token or does not fit the context with the new tokens, or ``generators`` for beam search or
            not one per row.
    """
    config = configured(config, max_new_tokens, options)
    if config.searches_beams:
        if generators is not None:
            raise PLMError("generators are for greedy search and sampling; beam search draws nothing")
        return beam_search(model, input_ids, attention_mask, config=config, source_ids=source_ids,
                           source_mask=source_mask).sequences
    steps = decode_steps(model, input_ids, config, attention_mask, source_ids=source_ids, source_mask=source_mask,
                         generators=generators)
    prompt = input_ids[:, -config.keep_last:] if config.keep_last is not None else input_ids  # decode_steps checked it
    new = [step.tokens for step in steps]
    return torch.cat([prompt, torch.stack(new, 1)], 1) if new else prompt
