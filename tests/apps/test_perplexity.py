"""Sliding-window perplexity gives the number its definition gives.

Token t (1 <= t < N) is scored once, by the window that ends at the first of
``window, window + stride, window + 2 * stride, ...`` (or N) beyond t, reading
the ``window`` tokens up to that end, or all tokens before t in the first window.
The oracle scores each token alone, by feeding the model exactly that context,
with a model whose predictions depend on how much context it sees.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch import nn

import plm
from plm.apps.perplexity import perplexity, windows
from plm.core import CausalLMOutput
from plm.models import CausalLM, from_preset


class ContextCountingLM(CausalLM):
    """A causal LM whose next-token logits depend on the whole context and on its length.

    At position p, after reading x_0..x_p: a bigram table term for x_p, plus 0.7 for
    every earlier occurrence of each token (a unigram cache), plus 0.15 * p for the
    token after x_p. Dropping or adding a token of context changes the prediction.
    """

    def __init__(self, vocab_size: int = 7, context: int = 16) -> None:
        super().__init__(config=None)
        self.vocab_size = vocab_size
        self.context = context
        self.bigram = nn.Parameter(torch.randn(vocab_size, vocab_size, generator=torch.Generator().manual_seed(0)))

    def context_length(self) -> int:
        return self.context

    def forward(self, input_ids, attention_mask=None, **_) -> CausalLMOutput:
        seen = nn.functional.one_hot(input_ids, self.vocab_size).float().cumsum(1)  # (B, T, V); causal
        positions = torch.arange(input_ids.shape[1]).view(1, -1, 1)
        successor = nn.functional.one_hot((input_ids + 1) % self.vocab_size, self.vocab_size).float()
        logits = self.bigram[input_ids] + 0.7 * seen + 0.15 * positions * successor
        return CausalLMOutput(last_hidden_state=logits, logits=logits)


def context_begin(t: int, length: int, window: int, stride: int) -> int:
    """Where the context of token t starts, from the definition above."""
    if t < window:
        return 0
    later = -(-(t + 1 - window) // stride)  # the index of the later window scoring t: ceil((t + 1 - window) / stride)
    end = min(window + later * stride, length)
    return end - window


def brute_force_nll(model: CausalLM, ids: list[int], window: int, stride: int) -> float:
    """Summed negative log-likelihood of tokens 1..N-1, each scored alone after its context."""
    nll = 0.0
    with torch.no_grad():
        for t in range(1, len(ids)):
            begin = context_begin(t, len(ids), window, stride)
            logits = model(torch.tensor([ids[begin:t]])).logits[0, -1]
            nll -= logits.double().log_softmax(-1)[ids[t]].item()
    return nll


def token_ids(length: int, vocab_size: int, seed: int = 1) -> list[int]:
    return torch.randint(0, vocab_size, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


CASES = [  # length, window, stride, batch_size
    (40, 8, 3, 2),  # window not a multiple of the stride
    (40, 8, 4, 8),
    (41, 8, 7, 3),  # the most overlap-free stride
    (23, 16, 1, 4),  # stride 1: each token with 15 tokens of context
    (5, 8, 4, 8),  # shorter than one window
]


@pytest.mark.parametrize(("length", "window", "stride", "batch_size"), CASES)
def test_windows_score_each_token_once_with_at_least_window_minus_stride_context(length, window, stride, batch_size):
    spans = windows(length, window, stride)
    assert spans[0][:2] == (0, min(window, length))  # the first window is full
    scored = Counter(t for _, end, first in spans for t in range(first, end))
    assert scored == Counter(range(1, length))  # tokens 1..N-1, each exactly once
    for begin, end, first in spans:
        assert end - begin == min(window, length)
        if begin > 0:
            assert first - begin >= window - stride  # the context before the first scored token


@pytest.mark.parametrize(("length", "window", "stride", "batch_size"), CASES)
def test_perplexity_equals_scoring_each_token_alone_with_its_context(length, window, stride, batch_size):
    model = ContextCountingLM()
    ids = token_ids(length, model.vocab_size)
    fed = []
    hook = model.register_forward_pre_hook(lambda module, args: fed.append(int(args[1].sum(1).min())))
    result = perplexity(model, ids, window=window, stride=stride, batch_size=batch_size)
    hook.remove()
    nll = brute_force_nll(model, ids, window, stride)
    assert result.tokens == length - 1
    assert fed and min(fed) == min(window, length)  # every row the model reads is a full window
    assert result.loss == pytest.approx(nll / (length - 1), rel=1e-6)
    assert result.perplexity == pytest.approx(math.exp(nll / (length - 1)), rel=1e-6)
    assert (result.window, result.stride) == (window, stride)


def test_a_gpt_with_the_default_window_and_stride_matches_token_by_token_scoring():
    torch.manual_seed(0)
    model = from_preset("gpt2-micro").eval()  # context 64: window 64, stride 32 by default
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(std=0.3)  # far from uniform, so that the context matters
    ids = token_ids(100, 512, seed=2)  # windows [0, 64), [32, 96), [36, 100)
    result = perplexity(model, ids)
    nll = brute_force_nll(model, ids, window=64, stride=32)
    assert (result.tokens, result.window, result.stride) == (99, 64, 32)
    assert result.loss == pytest.approx(nll / 99, rel=1e-5)


def test_a_file_is_scored_as_its_documents_each_followed_by_the_end_of_text(tmp_path: Path):
    """Paragraphs separated by blank lines, each encoded alone and followed by <|endoftext|>, after one start token:
    the stream pre-training reads (plm.data.prepare), every token of it scored, the first one included."""
    paragraphs = ["The cat reads the book.\nA dog sees the answer.", "The list sorts every token.", "Every cat reads."]
    text = "\n\n\n".join(paragraphs[:2]) + "\n \n" + paragraphs[2] + "\n"  # blank lines, one of them a space
    tokenizer = plm.Tokenizer.train_bpe([text * 20], vocab_size=300, min_frequency=1)
    path = tmp_path / "text.txt"
    path.write_text(text, encoding="utf-8")
    model = ContextCountingLM(vocab_size=len(tokenizer), context=16)
    result = plm.file_perplexity(model, tokenizer, str(path), window=16, stride=8)
    eos = tokenizer.eos_id  # GPT-2's <|endoftext|> also begins a text
    ids = [eos] + [token for paragraph in paragraphs for token in [*tokenizer.encode(paragraph), eos]]
    nll = brute_force_nll(model, ids, window=16, stride=8)
    assert result.tokens == len(ids) - 1
    assert result.loss == pytest.approx(nll / result.tokens, rel=1e-6)
    assert result.bytes == sum(len(paragraph.encode()) for paragraph in paragraphs)
    assert result.words == len(text.split())


def test_one_text_scores_the_file_whole_blank_lines_and_all(tmp_path: Path):
    # Bits per byte divide by the UTF-8 bytes, which outnumber the characters outside ASCII.
    text = "The cat reads the book.\n\nLe café du coin — 東京の本 — sorts every token.\n"
    tokenizer = plm.Tokenizer.train_bpe([text * 20], vocab_size=300, min_frequency=1)
    path = tmp_path / "text.txt"
    path.write_text(text, encoding="utf-8")
    model = ContextCountingLM(vocab_size=len(tokenizer), context=16)
    result = plm.file_perplexity(model, tokenizer, str(path), window=16, stride=8, one_text=True)
    ids = [tokenizer.eos_id, *tokenizer.encode(text)]
    nll = brute_force_nll(model, ids, window=16, stride=8)
    assert result.tokens == len(ids) - 1 == len(tokenizer.encode(text))
    assert result.loss == pytest.approx(nll / result.tokens, rel=1e-6)
    assert result.bytes == len(text.encode("utf-8")) > len(text)
    assert result.bits_per_byte == pytest.approx(nll / result.bytes / math.log(2), rel=1e-6)


def test_per_word_and_per_byte_perplexity_divide_the_same_total_loss(tmp_path: Path):
    tokenised = " The cat 's book , well @-@ read , sorts every token . \n = = A list = = \n"
    written = "The cat's book, well-read, sorts every token.\n== A list ==\n"
    tokenizer = plm.Tokenizer.train_bpe([written * 20], vocab_size=300, min_frequency=1)
    path = tmp_path / "wiki.txt"
    path.write_text(tokenised, encoding="utf-8")
    model = ContextCountingLM(vocab_size=len(tokenizer), context=16)
    result = plm.file_perplexity(model, tokenizer, str(path), window=16, stride=8, detokenize="wikitext",
                                 one_text=True)  # as GPT-2 scored WikiText
    nll = brute_force_nll(model, [tokenizer.eos_id, *tokenizer.encode(written)], window=16, stride=8)
    words = 19  # as WikiText counts them: "The cat 's book , well @-@ read , ..."
    assert (result.words, result.bytes) == (words, len(written.encode("utf-8")))
    assert result.word_perplexity == pytest.approx(math.exp(nll / words), rel=1e-6)
    assert result.byte_perplexity == pytest.approx(math.exp(nll / result.bytes), rel=1e-6)
    assert result.bits_per_byte == pytest.approx(nll / result.bytes / math.log(2), rel=1e-6)
    assert f"per word {math.exp(nll / words):.3f} over 19 words" in str(result)
