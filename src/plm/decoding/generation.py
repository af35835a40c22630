"""Greedy search and sampling, for any :class:`plm.decoding.Decoder`: stop strings, batched prompts.

Prompts of different lengths are left-padded so that every row's next token sits in
the last column; the attention mask marks the padding and positions skip it, so a
padded prompt decodes exactly like the same prompt alone. The KV cache is on by
default: the prompt is encoded once, then each step feeds only the newest token.
An encoder-decoder decodes from a prompt of start tokens (its BOS column) and takes
its source as ``source_ids`` / ``source_mask``. :func:`decode_steps` is the loop, a step
at a time (what streaming needs); :func:`generate` collects its tokens.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from plm.decoding.interface import Decoder, DecodingRequest
from plm.errors import PLMError


@dataclass(frozen=True)
class GenerationConfig:
    """How a prompt is continued: how many tokens, how each is chosen, where a row stops, how the model runs.

    :func:`generate`, :func:`decode_steps` and ``plm serve`` take one; all defaults mean 32 greedy tokens.

    Attributes:
        max_new_tokens: the most new tokens per row.
        temperature: divides the logits before sampling.
        top_k: sample from the k most likely tokens only (0: all).
        top_p: sample from the smallest set of tokens whose probability reaches p (1.0: all).
        repetition_penalty: CTRL's penalty on tokens already present (1.0: none).
        do_sample: sample (True) or take the most likely token (False); None: sample when a sampling
            option is given.
        eos_token_id: the token that finishes a row (None: rows finish only at a stop string).
        pad_token_id: what fills a finished row (None: the eos id, else 0).
        seed: seeds the sampling, for repeatable output.
        use_cache: keep keys and values between steps (the KV cache).
        keep_last: keep only the prompt's last ``keep_last`` tokens.
        stop: stop strings that finish a row.
        compile: run the model through ``torch.compile`` (see :func:`generate`).
        cuda_graph: replay each one-token step as a CUDA graph over a static KV cache (a GPU's
            launches bound small steps; elsewhere the static cache alone). Greedy output is unchanged.
    """

    max_new_tokens: int = 32
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    do_sample: bool | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None
    seed: int | None = None
    use_cache: bool = True
    keep_last: int | None = None
    stop: StopStrings | None = None
    compile: bool = False
    cuda_graph: bool = False

    @property
    def sampling(self) -> bool:
        """Whether the next token is sampled: ``do_sample`` when given, else whether any option departs from greedy."""
        if self.do_sample is not None:
            return self.do_sample
        return self.temperature != 1.0 or self.top_k > 0 or self.top_p < 1.0

    def validate(self) -> None:
        """Check that every option is in its range.

        Raises:
            PLMError: a temperature or repetition penalty that is not a positive number, a top_p outside
                (0, 1], or a negative top_k.
        """
        # Written so that NaN fails every check: it compares false with everything.
        if not 0 < self.temperature < math.inf:
            raise PLMError(f"temperature must be a positive number, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise PLMError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise PLMError(f"top_k must be >= 0, got {self.top_k}")
        if not 0 < self.repetition_penalty < math.inf:
            raise PLMError(f"repetition_penalty must be a positive number, got {self.repetition_penalty}")


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
        logits = logits.masked_fill(remove.scatter(1, order, remove), float("-inf"))
    return logits


def next_tokens(
    logits: torch.Tensor,
    history: torch.Tensor,
    options: GenerationConfig,
    generator: torch.Generator | None,
    history_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """(batch, vocab) logits of the last position -> (batch,) chosen token ids.

    Args:
        logits: (batch, vocab) logits of the last position.
        history: (batch, time) the tokens so far.
        options: how the token is chosen (greedy or sampled).
        generator: the random generator sampling draws from (None: torch's global one).
        history_mask: (batch, time), 0 at the padding of ``history``.

    Returns:
        The (batch,) chosen token ids.
    """
    if options.repetition_penalty != 1.0:
        logits = penalize_repetition(logits, history, options.repetition_penalty, history_mask)
    if not options.sampling:
        return logits.argmax(-1)
    logits = filter_top_k_top_p(logits / options.temperature, options.top_k, options.top_p)
    return torch.multinomial(logits.float().softmax(-1), 1, generator=generator).squeeze(1)


def fit_prompt(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    max_new_tokens: int,
    context: int,
    keep_last: int | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Check that prompt + new tokens fit the context; cut to the last ``keep_last`` if asked.

    Args:
        input_ids: (batch, time) the prompt.
        attention_mask: (batch, time), 0 at padding, or None.
        max_new_tokens: how many tokens will be generated.
        context: the model's context length.
        keep_last: keep only the prompt's last ``keep_last`` tokens (None: all).

    Returns:
        The prompt and its mask, cut to ``keep_last``.

    Raises:
        PLMError: a negative ``max_new_tokens``, a ``keep_last`` below 1, or a prompt that, with the new
            tokens, does not fit the context.
    """
    if max_new_tokens < 0:
        raise PLMError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    if keep_last is not None:
        if keep_last < 1:
            raise PLMError(f"keep_last must be >= 1, got {keep_last}")
        input_ids = input_ids[:, -keep_last:]
        attention_mask = attention_mask[:, -keep_last:] if attention_mask is not None else None
    length = input_ids.shape[1]
    if length > context:
        raise PLMError(
            f"prompt is {length} tokens but the model's context is {context}; "
            f"pass keep_last (--keep-last N) to keep only the last N tokens"
        )
    if length == context and max_new_tokens:
        raise PLMError(
            f"prompt of {length} tokens fills the model's context of {context}; "
            f"keep fewer prompt tokens (keep_last, --keep-last N) to make room for new ones"
        )
    if length + max_new_tokens > context:
        raise PLMError(
            f"prompt of {length} tokens plus {max_new_tokens} new tokens exceeds the model's context of {context}; "
            f"ask for at most {context - length} new tokens or keep fewer prompt tokens (--keep-last)"
        )
    return input_ids, attention_mask


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

        Computed on request, so that :func:`generate`, which never asks, pays nothing for it.
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
) -> Generator[Step, None, None]:
    """The steps of :func:`generate` one at a time, for a caller that streams tokens or wants their probabilities.

    The options and the prompt are checked here, before the first step; iterating runs the
    model, one :class:`Step` per new token column, and ends after ``config.max_new_tokens``
    steps or once every row is finished. Closing the iterator early stops decoding.

    Args:
        model: the decoder.
        input_ids: (batch, time) the prompt.
        config: how to continue it.
        attention_mask: (batch, time), 0 at (left) padding, or None.
        source_ids: an encoder-decoder's (batch, source_length) source.
        source_mask: 0 at the padding of ``source_ids``.

    Returns:
        An iterator of :class:`Step`, one per new token column.

    Raises:
        PLMError: an option out of range, or a prompt that is not (batch, time) with at least one token
            or does not fit the context with the new tokens.
    """
    config.validate()
    if input_ids.dim() != 2 or input_ids.shape[1] == 0:
        raise PLMError(f"input_ids must be (batch, time) with at least one token, got shape {tuple(input_ids.shape)}")
    input_ids, attention_mask = fit_prompt(
        input_ids, attention_mask, config.max_new_tokens, model.context_length(), config.keep_last
    )
    if attention_mask is not None and bool(attention_mask.all()):
        attention_mask = None  # no padding: attention needs no mask tensor and takes its fastest path
    request = DecodingRequest(input_ids, input_ids.shape[1] + config.max_new_tokens, attention_mask,
                              source_ids, source_mask, config.use_cache, config.compile, config.cuda_graph)
    return _steps(model, request, config)


@torch.inference_mode()
def _steps(model: Decoder, request: DecodingRequest, config: GenerationConfig) -> Generator[Step, None, None]:
    """The decoding loop over checked inputs (see :func:`decode_steps`)."""
    was_training = model.training
    model.eval()
    input_ids, attention_mask, max_new_tokens = request.prompt, request.prompt_mask, config.max_new_tokens
    generator = torch.Generator(input_ids.device).manual_seed(config.seed) if config.seed is not None else None
    eos_token_id, stop = config.eos_token_id, config.stop
    pad = config.pad_token_id if config.pad_token_id is not None else (eos_token_id if eos_token_id is not None else 0)
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
    **options: Any,
) -> torch.Tensor:
    """Continue ``input_ids`` (batch, time) by up to ``max_new_tokens``.

    Greedy unless a sampling option is given. A row that emits ``eos_token_id`` (or
    hits a stop string) is finished: its later positions hold ``pad_token_id``
    (default: the eos id, else 0). Generation ends early when every row is finished.
    The loop is :func:`decode_steps`'; this collects its tokens.

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
        config: how to continue the prompt (None: the defaults of :class:`GenerationConfig`).
        source_ids: an encoder-decoder's (batch, source_length) source.
        source_mask: 0 at the padding of ``source_ids``.
        **options (Any): fields of :class:`GenerationConfig` that replace the config's, as in
            ``generate(model, ids, 20, temperature=0.8, top_p=0.9, seed=1)``.

    Returns:
        (batch, time + N) the prompt (cut to ``keep_last``) followed by the N new tokens.

    Raises:
        PLMError: an unknown option, an option out of range, or a prompt that is not (batch, time) with at
            least one token or does not fit the context with the new tokens.
    """
    config = configured(config, max_new_tokens, options)
    steps = decode_steps(model, input_ids, config, attention_mask, source_ids=source_ids, source_mask=source_mask)
    prompt = input_ids[:, -config.keep_last:] if config.keep_last is not None else input_ids  # decode_steps checked it
    new = [step.tokens for step in steps]
    return torch.cat([prompt, torch.stack(new, 1)], 1) if new else prompt


def configured(
    config: GenerationConfig | None, max_new_tokens: int | None, options: dict[str, Any]
) -> GenerationConfig:
    """``config`` (or the defaults) with ``max_new_tokens`` and the named ``options`` in place of its own."""
    unknown = sorted(set(options) - {field.name for field in dataclasses.fields(GenerationConfig)})
    if unknown:
        raise PLMError(f"unknown generation option(s) {', '.join(unknown)}; GenerationConfig has "
                       f"{', '.join(field.name for field in dataclasses.fields(GenerationConfig))}")
    if max_new_tokens is not None:
        options = {**options, "max_new_tokens": max_new_tokens}
    return dataclasses.replace(config or GenerationConfig(), **options)


class StopStrings:
    """Finishes a row once its decoded continuation contains one of ``strings``.

    Args:
        strings: the stop strings (empty ones are dropped).
        decode (Callable[[list[int]], str]): turns a list of token ids into text.
    """

    def __init__(self, strings: Sequence[str], decode) -> None:
        self.strings = [s for s in strings if s]
        self.decode = decode

    def reached(self, new_tokens: torch.Tensor) -> torch.Tensor:
        """Which rows' decoded new tokens contain a stop string.

        Args:
            new_tokens: (batch, time) the tokens generated so far.

        Returns:
            A (batch,) bool tensor.
        """
        texts = [self.decode(row.tolist()) for row in new_tokens]
        return torch.tensor([any(s in text for s in self.strings) for text in texts], device=new_tokens.device)

    def cut(self, text: str) -> str:
        """``text`` up to (not including) the first stop string.

        Args:
            text: a decoded continuation.

        Returns:
            The text before the first stop string in it (all of it when there is none).
        """
        positions = [text.find(s) for s in self.strings if s in text]
        return text[: min(positions)] if positions else text
