"""LAMBADA (GPT-2 §3.3): predict the last word of a passage, which needs the whole passage.

The input is OpenAI's JSONL, one ``{"text": ...}`` per passage; the target is the
last whitespace-separated word, scored with the whitespace before it (" word").
Accuracy counts a passage when greedy decoding gives every sub-word token of the
target; perplexity is per target word, exp(mean over passages of -log p(word | passage)),
as the paper reports it.

The paper's stop-word filter (GPT-2 reached 63.24% instead of 52.66% with it) stops
the model from answering with a word that continues a sentence but cannot end one:
with ``stop_words=True`` the greedy check never takes, as the target's first token,
a token that is on its own a stop word ("the", "and", "he", ...).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from plm.apps.zeroshot.evaluation import ZeroShotOptions, ZeroShotResult
from plm.apps.zeroshot.scoring import score_continuations
from plm.data.corpus import json_rows
from plm.errors import PLMError
from plm.tokenization.tokenizer import Tokenizer

# NLTK's English stop words, the list the public GPT-2 LAMBADA replications filtered with.
STOP_WORDS = frozenset(
    """i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers
    herself it its itself they them their theirs themselves what which who whom this that these those am is are
    was were be been being have has had having do does did doing a an the and but if or because as until while of
    at by for with about against between into through during before after above below to from up down in out on
    off over under again further then once here there when where why how all any both each few more most other
    some such no nor not only own same so than too very s t can will just don should now""".split()
)

_LAST_WORD = re.compile(r"(?s)^(.*\S)(\s+)(\S+)\s*$")


@dataclass(frozen=True)
class LambadaResult(ZeroShotResult):
    """LAMBADA's accuracy and last-word perplexity.

    Attributes:
        accuracy: the share of passages whose target greedy decoding gives in full.
        word_perplexity: per target word (the key `plm eval perplexity` gives its per-word figure).
        passages: the passages.
        correct: those predicted right.
        target_tokens: the sub-word tokens of all targets.
        stop_word_filter: whether the stop-word filter was on.
    """
    accuracy: float
    word_perplexity: float  # per target word, not per token
    passages: int
    correct: int
    target_tokens: int  # sub-word tokens of all targets
    stop_word_filter: bool


def split_last_word(text: str) -> tuple[str, str]:
    """(passage without its last word, whitespace + last word); ValueError for a text of one word.

    Args:
        text: the passage.

    Returns:
        The context and the target.

    Raises:
        ValueError: a text of fewer than two words.
    """
    match = _LAST_WORD.match(text)
    if match is None:
        raise ValueError("a passage needs at least two words")
    return match[1], match[2] + match[3]


def read_lambada(path: str | Path) -> list[tuple[str, str]]:
    """(context, " target") of each passage of a LAMBADA JSONL file.

    Args:
        path: the JSONL file, one ``{"text": ...}`` per line.

    Returns:
        The pairs, in file order.

    Raises:
        PLMError: a file [`json_rows`][plm.data.corpus.json_rows] refuses, or a passage of one word.
    """
    pairs = []
    for number, row in json_rows(path, {"text": str}):
        try:
            pairs.append(split_last_word(row["text"]))
        except ValueError as error:
            raise PLMError(f"{path}:{number}: {error}") from None
    return pairs


def stop_word_tokens(tokenizer: Tokenizer) -> torch.Tensor:
    """(vocab,) bool: the tokens that decode to a stop word (case and surrounding spaces aside).

    Args:
        tokenizer: the tokenizer.

    Returns:
        The mask, True at stop words.
    """
    words = tokenizer.decode_batch([[index] for index in range(len(tokenizer))])
    return torch.tensor([word.strip().lower() in STOP_WORDS for word in words])


def evaluate_lambada(options: ZeroShotOptions, path: str | Path, stop_words: bool = False) -> LambadaResult:
    """Accuracy and last-word perplexity of the model on a LAMBADA JSONL file.

    Args:
        options: the model, its tokenizer and how to run them; a batch is the passages scored per forward pass.
        path: the JSONL file.
        stop_words: apply the stop-word filter to the target's first token in the greedy check.

    Returns:
        The result.

    Raises:
        PLMError: a file [`read_lambada`][plm.apps.zeroshot.lambada.read_lambada] refuses, or a passage that cannot be
            scored.
    """
    pairs = read_lambada(path)[: options.limit]
    banned = stop_word_tokens(options.tokenizer) if stop_words else None
    scored = score_continuations(options.model, options.tokenizer, pairs, options.batch_size, banned,
                                 options.progress, desc="lambada")
    correct = sum(item.greedy for item in scored)
    nll = -sum(item.logprob for item in scored)
    return LambadaResult(
        accuracy=correct / len(scored),
        word_perplexity=math.exp(nll / len(scored)),
        passages=len(scored),
        correct=correct,
        target_tokens=sum(len(item.logprobs) for item in scored),
        stop_word_filter=stop_words,
    )
