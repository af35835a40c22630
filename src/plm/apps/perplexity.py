"""Perplexity of a text under a causal language model, with a sliding window.

Each token is scored exactly once, with the context it had inside its window:
after the first window, each window moves on by ``stride`` tokens and scores only
those, so every token after the first window sees at least ``window - stride``
tokens of context.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F

from plm.data.tokens import windows
from plm.errors import PLMError
from plm.models import CausalLM
from plm.progress import progress_bar


@dataclass(frozen=True)
class Perplexity:
    """The mean loss over the scored tokens, and what the text was, so that tokenizers compare.

    Per-token perplexity depends on how finely a tokenizer cuts the text; ``words``
    (whitespace-separated words of the text as given) and ``bytes`` (UTF-8 bytes of
    the text the model read) give per-word and per-byte perplexities from the same
    total negative log-likelihood, which compare across tokenizers (GPT-2 §3.1).
    """

    perplexity: float
    loss: float  # mean negative log-likelihood, nats per token
    tokens: int  # tokens scored
    window: int
    stride: int
    words: int | None = None
    bytes: int | None = None

    @property
    def nll(self) -> float:
        """Total negative log-likelihood of the scored tokens, in nats."""
        return self.loss * self.tokens

    @property
    def word_perplexity(self) -> float | None:
        """Perplexity per word of the text; None when the words were not counted."""
        return math.exp(self.nll / self.words) if self.words else None

    @property
    def byte_perplexity(self) -> float | None:
        """Perplexity per UTF-8 byte of the text; None when the bytes were not counted."""
        return math.exp(self.nll / self.bytes) if self.bytes else None

    @property
    def bits_per_byte(self) -> float | None:
        """Bits per UTF-8 byte of the text; None when the bytes were not counted."""
        return self.nll / self.bytes / math.log(2) if self.bytes else None

    def as_dict(self) -> dict[str, float | int | None]:
        """The fields and the per-word and per-byte measures, by name, for JSON.

        Returns:
            The values by name.
        """
        names = ("perplexity", "loss", "tokens", "window", "stride", "words", "bytes")
        return {name: getattr(self, name) for name in names} | {
            "word_perplexity": self.word_perplexity,
            "byte_perplexity": self.byte_perplexity,
            "bits_per_byte": self.bits_per_byte,
        }

    def __str__(self) -> str:
        text = (
            f"perplexity {self.perplexity:.3f} (loss {self.loss:.4f} nats/token) over {self.tokens:,} tokens, "
            f"window {self.window}, stride {self.stride}"
        )
        if self.words:
            text += f"; per word {self.word_perplexity:.3f} over {self.words:,} words"
        if self.bytes:
            text += (
                f"; per byte {self.byte_perplexity:.4f} ({self.bits_per_byte:.4f} bits/byte) over {self.bytes:,} bytes"
            )
        return text


@torch.inference_mode()
def perplexity(
    model: CausalLM,
    ids: Sequence[int],
    window: int | None = None,
    stride: int | None = None,
    batch_size: int = 8,
    progress: bool = False,
) -> Perplexity:
    """Perplexity of the token sequence ``ids``; the first token is context only.

    Args:
        model: the causal language model.
        ids: the token ids of the text.
        window: the tokens a window reads (default: the model's context).
        stride: the tokens each window after the first scores (default: half the window).
        batch_size: windows per forward pass.
        progress: show a progress bar.

    Returns:
        The perplexity, its loss and the tokens scored.

    Raises:
        PLMError: a window below 2 or beyond the model's context, a stride not in [1, window - 1], or
            fewer than 2 tokens.
    """
    window = window or model.context_length()
    stride = stride or max(1, window // 2)
    if window < 2:
        raise PLMError(f"window must be at least 2 tokens (context for one, one to score), got {window}")
    if window > model.context_length():
        raise PLMError(f"window {window} exceeds the model's context of {model.context_length()} tokens")
    if not 0 < stride < window:
        raise PLMError(f"stride must be between 1 and window - 1 ({window - 1}), got {stride}")
    if len(ids) < 2:
        raise PLMError("perplexity needs at least 2 tokens of text")
    device = next(model.parameters()).device
    tokens = torch.as_tensor(list(ids), dtype=torch.long)
    spans = windows(len(tokens), window, stride)
    model.eval()
    nll, count = 0.0, 0
    for start in progress_bar(range(0, len(spans), batch_size), disable=not progress, desc="perplexity"):
        chunk = spans[start : start + batch_size]
        width = max(end - begin for begin, end, _ in chunk)
        inputs = torch.zeros(len(chunk), width, dtype=torch.long)
        mask = torch.zeros(len(chunk), width, dtype=torch.long)
        targets = torch.full((len(chunk), width), -100, dtype=torch.long)
        for row, (begin, end, first) in enumerate(chunk):
            inputs[row, : end - begin] = tokens[begin:end]
            mask[row, : end - begin] = 1
            # The logit at position p predicts token begin + p + 1.
            targets[row, first - begin - 1 : end - begin - 1] = tokens[first:end]
        logits = model(inputs.to(device), mask.to(device)).logits.float()
        nll += F.cross_entropy(logits.flatten(0, 1), targets.to(device).flatten(), reduction="sum").item()
        count += int((targets != -100).sum())
    loss = nll / count
    return Perplexity(math.exp(loss), loss, count, window, stride)
