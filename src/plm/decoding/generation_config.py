"""How a prompt is continued: `GenerationConfig`, taken by every search, and the checks they share.

Greedy search and sampling ([`generate`][plm.decoding.generation.generate],
[`decode_steps`][plm.decoding.generation.decode_steps]), beam search ([`beam_search`][plm.decoding.beam.beam_search]),
[`translate`][plm.objectives.translation.translate] and ``plm serve`` all read their options from one
[`GenerationConfig`][plm.decoding.generation_config.GenerationConfig]; each field says which searches use it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from plm.errors import PLMError


@dataclass(frozen=True)
class GenerationConfig:
    """How a prompt is continued: how many tokens, how each is chosen, where a row stops, how the model runs.

    [`generate`][plm.decoding.generation.generate], [`decode_steps`][plm.decoding.generation.decode_steps] and ``plm
    serve`` take one; all defaults mean 32 greedy tokens.

    Attributes:
        max_new_tokens: the most new tokens per row.
        temperature: divides the logits before sampling.
        top_k: sample from the k most likely tokens only (0: all).
        top_p: sample from the smallest set of tokens whose probability reaches p (1.0: all).
        repetition_penalty: CTRL's penalty on tokens already present (1.0: none).
        do_sample: sample (True) or take the most likely token (False); None: sample when a sampling
            option is given.
        eos_token_id: the token that finishes a row (None: rows finish only at a stop string).
        ignore_eos: go on past ``eos_token_id`` to ``max_new_tokens`` (vLLM's ``ignore_eos``): the token is
            chosen like any other and finishes no row (it still pads one that a stop string finished).
        pad_token_id: what fills a finished row (None: the eos id, else 0).
        seed: seeds the sampling, for repeatable output.
        use_cache: keep keys and values between steps (the KV cache).
        keep_last: keep only the prompt's last ``keep_last`` tokens.
        stop: stop strings that finish a row.
        compile: run the model through ``torch.compile`` (see [`generate`][plm.decoding.generation.generate]).
        cuda_graph: replay each one-token step as a CUDA graph over a static KV cache (a GPU's
            launches bound small steps; elsewhere the static cache alone). Greedy output is unchanged.
            Beam search reorders its cache at every step and decodes eagerly.
        num_beams: the beams per row. Above 1 (or with ``max_len_a``), [`generate`][plm.decoding.generation.generate]
            runs beam search, which neither samples, penalises repetition, stops at strings nor streams.
        length_penalty: GNMT's alpha: beam search ranks finished hypotheses by log P(Y) / ((5 + |Y|) / 6)^alpha
            (0: raw log-probabilities; the Transformer used 0.6). Not Hugging Face's, which divides by |Y|^alpha.
        max_len_a: with a source, a row gets at most ``max_len_a`` x its source tokens + ``max_new_tokens`` new
            tokens (fairseq's max_len_a and max_len_b), never more than the context leaves; beam search only.
        early_stopping: beam search ends a row once it has ``num_beams`` finished hypotheses (GNMT, fairseq);
            False searches on until no live beam can beat the worst of them, which is exact for the beams kept.
    """

    max_new_tokens: int = 32
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    do_sample: bool | None = None
    eos_token_id: int | None = None
    ignore_eos: bool = False
    pad_token_id: int | None = None
    seed: int | None = None
    use_cache: bool = True
    keep_last: int | None = None
    stop: StopStrings | None = None
    compile: bool = False
    cuda_graph: bool = False
    num_beams: int = 1
    length_penalty: float = 0.6
    max_len_a: float = 0.0
    early_stopping: bool = True

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
        if self.max_new_tokens < 0:
            raise PLMError(f"max_new_tokens must be >= 0, got {self.max_new_tokens}")
        if self.num_beams < 1:
            raise PLMError(f"num_beams must be at least 1, got {self.num_beams}")
        if not math.isfinite(self.length_penalty):
            raise PLMError(f"length_penalty (GNMT's alpha) must be a finite number, got {self.length_penalty}")
        if not 0 <= self.max_len_a < math.inf:
            raise PLMError(f"max_len_a must be a number >= 0, got {self.max_len_a}")

    @property
    def finishing_token_id(self) -> int | None:
        """The token that finishes a row: ``eos_token_id``, or None with ``ignore_eos``."""
        return None if self.ignore_eos else self.eos_token_id

    @property
    def searches_beams(self) -> bool:
        """Whether `generate` runs beam search: more than one beam, or ``max_len_a``."""
        return self.num_beams > 1 or self.max_len_a > 0

    def new_token_limits(
        self, batch: int, source_ids: torch.Tensor | None, source_mask: torch.Tensor | None, device: torch.device
    ) -> torch.Tensor:
        """(batch,) each row's new tokens at most: ``max_len_a`` x its real source tokens + ``max_new_tokens``.

        Args:
            batch: the rows.
            source_ids: an encoder-decoder's (batch, source_length) source; None for a decoder-only model.
            source_mask: 0 at the padding of ``source_ids``, or None.
            device: where the limits go.

        Returns:
            The limits, floored to whole tokens.
        """
        if source_ids is None:
            source_lengths = torch.zeros(batch, device=device)
        elif source_mask is not None:
            source_lengths = source_mask.sum(1).to(device)
        else:
            source_lengths = torch.full((batch,), source_ids.shape[1], device=device)
        return (self.max_len_a * source_lengths.double() + self.max_new_tokens).floor().long()




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
        raise PLMError(f"`max_new_tokens` must be >= 0, got {max_new_tokens}")
    input_ids, attention_mask = cut_to_last(input_ids, attention_mask, keep_last)
    length = input_ids.shape[1]
    if length > context:
        raise PLMError(
            f"prompt is {length} tokens but the model's context is {context}; "
            f"pass `keep_last` N to keep only the last N tokens"
        )
    if length == context and max_new_tokens:
        raise PLMError(
            f"prompt of {length} tokens fills the model's context of {context}; "
            f"keep fewer prompt tokens (`keep_last`) to make room for new ones"
        )
    if length + max_new_tokens > context:
        raise PLMError(
            f"prompt of {length} tokens plus {max_new_tokens} new tokens exceeds the model's context of {context}; "
            f"ask for at most {context - length} `max_new_tokens` or keep fewer prompt tokens (`keep_last`)"
        )
    return input_ids, attention_mask




def cut_to_last(
    input_ids: torch.Tensor, attention_mask: torch.Tensor | None, keep_last: int | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The prompt's last ``keep_last`` tokens and their mask (None: the whole prompt).

    Args:
        input_ids: (batch, time) the prompt.
        attention_mask: (batch, time), 0 at padding, or None.
        keep_last: how many tokens to keep.

    Returns:
        The prompt and its mask, cut.

    Raises:
        PLMError: a ``keep_last`` below 1.
    """
    if keep_last is None:
        return input_ids, attention_mask
    if keep_last < 1:
        raise PLMError(f"keep_last must be >= 1, got {keep_last}")
    return input_ids[:, -keep_last:], attention_mask[:, -keep_last:] if attention_mask is not None else None


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
        return until_stop(text, self.strings)[0]


def until_stop(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    """``text`` up to its first stop string, and whether it has one.

    Args:
        text: a decoded continuation.
        stops: the stop strings.

    Returns:
        The text before the first stop string (all of it without one), and whether there was one.
    """
    found = [text.find(stop) for stop in stops if stop in text]
    return (text[: min(found)], True) if found else (text, False)


def stop_prefix(text: str, stops: Sequence[str]) -> int:
    """How many of the last characters of ``text`` may begin a stop string that the next tokens would complete.

    A streamed continuation holds them back until the next tokens tell, so that no stop string is ever handed over.

    Args:
        text: a continuation so far, without a stop string.
        stops: the stop strings.

    Returns:
        The length of the longest end of ``text`` that begins a stop string (0: none does).
    """
    return max((length for stop in stops for length in range(1, len(stop)) if text.endswith(stop[:length])),
               default=0)
