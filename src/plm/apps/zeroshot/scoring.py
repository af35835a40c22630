"""Log-probability of a continuation given a context, for many (context, continuation) pairs at once.

Every zero-shot task reduces to this: LAMBADA scores the last word after the
passage, a cloze item each candidate (with the rest of the sentence) after the
text before the blank. Context and continuation are tokenized apart, so the
continuation's tokens are exactly those it has on its own; whitespace at the end
of the context moves to the start of the continuation, where a byte-level BPE
expects it (" word" is one token, " " + "word" two).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from plm.apps.text_pipelines import left_pad
from plm.errors import PLMError
from plm.models import CausalLM
from plm.progress import progress_bar
from plm.tokenization.tokenizer import Tokenizer


@dataclass(frozen=True)
class Continuation:
    """How a model scores one continuation.

    Attributes:
        logprobs: log p of each continuation token, in nats.
        greedy: every continuation token is the model's most likely next token.
    """
    logprobs: list[float]  # log p of each continuation token, in nats
    greedy: bool  # every continuation token is the model's most likely next token

    @property
    def logprob(self) -> float:
        """Log p of the whole continuation, in nats."""
        return sum(self.logprobs)


def split_whitespace(context: str, continuation: str) -> tuple[str, str]:
    """Move the whitespace that ends ``context`` to the start of ``continuation``.

    Args:
        context: the context.
        continuation: the continuation.

    Returns:
        The context without its trailing whitespace, and the continuation with it.
    """
    stripped = context.rstrip()
    return stripped, context[len(stripped) :] + continuation


def encode_pair(tokenizer: Tokenizer, context: str, continuation: str, room: int) -> tuple[list[int], int]:
    """Context + continuation ids cut from the left to ``room + 1`` tokens, and the continuation's length.

    An empty context becomes the beginning-of-text token (else end-of-text).

    Args:
        tokenizer: the model's tokenizer.
        context: the context.
        continuation: the continuation to score.
        room: the model's context length.

    Returns:
        The ids, and the number of continuation tokens at their end.

    Raises:
        PLMError: a continuation without tokens or longer than ``room``, or an empty context with a tokenizer
            that has neither a beginning- nor an end-of-text token.
    """
    context, continuation = split_whitespace(context, continuation)
    target = tokenizer.encode(continuation)
    if not target:
        raise PLMError(f"nothing to score after {context[-30:]!r}")
    prefix = tokenizer.encode(context)
    if not prefix:
        start = tokenizer.start_id
        if start is None:
            raise PLMError("an empty context needs a beginning-of-text token, and the tokenizer has none")
        prefix = [start]
    if len(target) > room:
        raise PLMError(f"a continuation of {len(target)} tokens does not fit the model's context of {room} tokens")
    return (prefix + target)[-(room + 1) :], len(target)


@torch.inference_mode()
def score_continuations(
    model: CausalLM,
    tokenizer: Tokenizer,
    pairs: Sequence[tuple[str, str]],
    batch_size: int = 16,
    banned_first: torch.Tensor | None = None,
    progress: bool = False,
    desc: str = "scoring",
) -> list[Continuation]:
    """Score each (context, continuation) pair; contexts longer than the model's context lose their start.

    ``banned_first`` (vocab,) bool: tokens the greedy check never picks as the
    continuation's first token (the LAMBADA stop-word filter); the log-probabilities
    are the model's own.

    Args:
        model: the causal LM, put in eval mode.
        tokenizer: its tokenizer.
        pairs: the (context, continuation) pairs.
        batch_size: the pairs per forward pass.
        banned_first: (vocab,) bool, or None.
        progress: show a progress bar.
        desc: the progress bar's label.

    Returns:
        The scores, in the order of ``pairs``.

    Raises:
        PLMError: a pair [`encode_pair`][plm.apps.zeroshot.scoring.encode_pair] refuses.
    """
    room = model.context_length()
    encoded = [encode_pair(tokenizer, context, continuation, room) for context, continuation in pairs]
    device = next(model.parameters()).device
    pad = tokenizer.padding_id
    model.eval()
    results = []
    for start in progress_bar(range(0, len(encoded), batch_size), disable=not progress, desc=desc):
        chunk = encoded[start : start + batch_size]
        ids, mask = left_pad([row for row, _ in chunk], pad)  # (B, T): every continuation ends at T - 1
        last = max(length for _, length in chunk)
        logits = model(ids[:, :-1].to(device), mask[:, :-1].to(device), num_logits=last).logits[:, -last:].float()
        logprobs = logits.log_softmax(-1)  # (B, last, V): position j predicts ids[:, T - last + j]
        targets = ids[:, -last:].to(device)
        chosen = logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, last)
        for row, (_, length) in enumerate(chunk):
            scores = logprobs[row, last - length :]  # (length, V)
            if banned_first is not None:
                scores = scores.clone()
                scores[0, banned_first.to(device)] = float("-inf")
            greedy = bool((scores.argmax(-1) == targets[row, last - length :]).all())
            results.append(Continuation(chosen[row, last - length :].tolist(), greedy))
    return results
