"""Summarisation by prompting: "TL;DR:" after the article, top-k 2 sampling, three sentences, ROUGE."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from rouge_score import rouge_scorer

from plm.apps.zeroshot.evaluation import ZeroShotOptions
from plm.apps.zeroshot.summarize import evaluate_summaries, first_sentences
from plm.core import CausalLMOutput
from plm.errors import PLMError
from tests.apps.zeroshot_stubs import tokenizer
from tests.conftest import StubCausalLM

SCRIPT = " The cat reads the book. A dog sees the answer! He sat down? The list sorts every token. The"
ARTICLES = [
    {"article": "The cat and the dog.", "summary": "The cat reads the book. A dog sees the answer."},
    {"article": "A longer article, about a list that sorts every token in the book.", "summary": "He sat down."},
]


class ScriptLM(StubCausalLM):
    """Writes SCRIPT after any prompt that ends in "TL;DR:", whatever the sampling; records the prompts."""

    def __init__(self, tok, context: int = 64) -> None:
        super().__init__(context)
        self.script = tok.encode(SCRIPT) + [tok.eos_id]
        self.vocab_size = len(tok)
        self.prompts: list[list[int]] = []
        self.step = 0
        self.device_marker = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask=None, *, cache=None, num_logits=None) -> CausalLMOutput:
        if input_ids.shape[1] > 1:  # the prompt pass
            mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
            self.prompts += [row[keep.bool()].tolist() for row, keep in zip(input_ids, mask)]
            self.step = 0
        return super().forward(input_ids, attention_mask, cache=cache, num_logits=num_logits)

    def logits_for(self, input_ids: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(*input_ids.shape, self.vocab_size)
        logits[:, -1, self.script[min(self.step, len(self.script) - 1)]] = 100.0
        self.step += 1
        return logits


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_first_sentences_keeps_three_sentences_and_their_punctuation() -> None:
    assert first_sentences(SCRIPT) == "The cat reads the book. A dog sees the answer! He sat down?"
    assert first_sentences("One.\n\nTwo  words. Three", 2) == "One. Two words."
    assert first_sentences("no end") == "no end"


@pytest.mark.parametrize("batch_size", [1, 2])
def test_the_summary_is_three_sentences_after_tldr_scored_with_rouge(tmp_path: Path, batch_size: int) -> None:
    tok = tokenizer()
    model = ScriptLM(tok, context=128)
    result = evaluate_summaries(
        ZeroShotOptions(model, tok, batch_size), write_jsonl(tmp_path / "news.jsonl", ARTICLES), max_new_tokens=32
    )
    summary = "The cat reads the book. A dog sees the answer! He sat down?"
    assert result.summaries == [summary, summary]
    assert [tok.decode(prompt) for prompt in model.prompts] == [row["article"] + "\nTL;DR:" for row in ARTICLES]
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    scores = [scorer.score(row["summary"], summary) for row in ARTICLES]
    for name in ("rouge1", "rouge2", "rougeL"):
        assert getattr(result, name) == pytest.approx(sum(s[name].fmeasure for s in scores) / 2)  # a fraction


class TwoLikelyTokensLM(StubCausalLM):
    """Two tokens a little likelier than the rest: without top-k, the rest would win nearly always."""

    def __init__(self, vocab_size: int, likely: tuple[int, int]) -> None:
        super().__init__(context=256)
        self.vocab_size, self.likely = vocab_size, list(likely)
        self.device_marker = torch.nn.Parameter(torch.zeros(1))

    def logits_for(self, input_ids):
        logits = torch.full((*input_ids.shape, self.vocab_size), 9.0)
        logits[..., self.likely] = 10.0
        return logits


def test_sampling_is_top_k_2_as_in_the_paper(tmp_path: Path) -> None:
    tok = tokenizer()
    cat, dog = tok.encode(" cat")[0], tok.encode(" dog")[0]
    model = TwoLikelyTokensLM(len(tok), (cat, dog))
    result = evaluate_summaries(ZeroShotOptions(model, tok), write_jsonl(tmp_path / "news.jsonl", ARTICLES))
    words = " ".join(result.summaries).split()
    assert set(words) == {"cat", "dog"} and len(words) == 200  # both sampled, nothing else, no sentence end


def test_a_long_article_loses_its_beginning_and_an_empty_one_is_an_error(tmp_path: Path) -> None:
    tok = tokenizer()
    model = ScriptLM(tok, context=64)
    long = {"article": "The cat reads the book. " * 40, "summary": "A cat."}
    options = ZeroShotOptions(model, tok)
    result = evaluate_summaries(options, write_jsonl(tmp_path / "long.jsonl", [long]), max_new_tokens=32)
    assert len(model.prompts[0]) == 64 - 32 and tok.decode(model.prompts[0]).endswith("book.\nTL;DR:")
    assert result.summaries == ["The cat reads the book. A dog sees the answer! He sat down?"]  # not the prompt's end
    with pytest.raises(PLMError, match="empty.jsonl:2: 'article' and 'summary' should not be empty"):
        evaluate_summaries(options, write_jsonl(tmp_path / "empty.jsonl", [long, {"article": " ", "summary": "x"}]))


def test_rouge_stems_words_as_the_papers_rouge_does(tmp_path: Path) -> None:
    """ROUGE with Porter stemming, as GPT-2's summaries were scored: "cats reading books" matches "cat reads book".
    Guards against scoring without the stemmer. The expected F1 is counted by hand: the summary's 13 words (the cat
    read the book a dog see the answer he sat down) against the reference's 5 (the cat read the book) share 5 words
    once stemmed (the twice, cat, read, book), 2 unstemmed (the twice)."""
    tok = tokenizer()
    rows = [{"article": "The cat and the dog.", "summary": "The cats reading the books."}]
    result = evaluate_summaries(ZeroShotOptions(ScriptLM(tok, context=128), tok),
                                write_jsonl(tmp_path / "news.jsonl", rows), max_new_tokens=32)
    precision, recall = 5 / 13, 5 / 5
    assert result.rouge1 == pytest.approx(2 * precision * recall / (precision + recall))  # 10 / 18; 2 / 9 unstemmed
