r"""Summarisation by prompting (GPT-2 §3.6): the article, then "TL;DR:", and the model goes on.

The input is JSONL, one ``{"article": ..., "summary": ...}`` per line (the summary is
the reference). As in the paper: the prompt is the article followed by ``\nTL;DR:``,
the model samples 100 tokens with top-k 2, the first three sentences of what it wrote
are its summary, and ROUGE-1, ROUGE-2 and ROUGE-L F1 (``rouge-score``, with stemming; fractions in [0, 1],
as it gives them) compare that with the reference. An article too long for the context loses its beginning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from plm.apps.text_pipelines import generate_text
from plm.apps.zeroshot.evaluation import ZeroShotOptions, ZeroShotResult
from plm.data.corpus import json_rows
from plm.errors import PLMError
from plm.progress import progress_bar

PROMPT = "\nTL;DR:"
ROUGE = ("rouge1", "rouge2", "rougeL")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def first_sentences(text: str, count: int = 3) -> str:
    """The first ``count`` sentences (ending in . ! or ? before whitespace), joined by spaces.

    Runs of whitespace within a sentence become one space.

    Args:
        text: the text.
        count: the sentences to keep.

    Returns:
        The sentences.
    """
    sentences = [sentence for sentence in _SENTENCE_END.split(text.strip()) if sentence]
    return " ".join(" ".join(sentence.split()) for sentence in sentences[:count])


@dataclass(frozen=True)
class SummaryResult(ZeroShotResult):
    """ROUGE F1 of the summaries, and the summaries.

    Attributes:
        rouge1: ROUGE-1 F1, the mean over articles, in [0, 1].
        rouge2: ROUGE-2 F1.
        rougeL: ROUGE-L F1.
        articles: the articles summarised.
        summaries: the model's summary of each article.
    """
    rouge1: float  # F1, the mean over articles
    rouge2: float
    rougeL: float
    articles: int
    summaries: list[str]

    per_item = ("summaries",)


def read_articles(path: str | Path) -> list[tuple[str, str]]:
    """(article, reference summary) of each row.

    Args:
        path: the JSONL file.

    Returns:
        The pairs, in file order.

    Raises:
        PLMError: a file [`json_rows`][plm.data.corpus.json_rows] refuses, or an empty article or summary.
    """
    rows = []
    for number, row in json_rows(path, {"article": str, "summary": str}):
        if not row["article"].strip() or not row["summary"].strip():
            raise PLMError(f"{path}:{number}: 'article' and 'summary' should not be empty")
        rows.append((row["article"], row["summary"]))
    return rows


def evaluate_summaries(
    options: ZeroShotOptions,
    path: str | Path,
    max_new_tokens: int = 100,
    top_k: int = 2,
    sentences: int = 3,
    seed: int | None = 0,
) -> SummaryResult:
    """ROUGE F1 of the model's TL;DR summaries against the references.

    Args:
        options: the model, its tokenizer and how to run them; a batch is the articles summarised together.
        path: the JSONL file.
        max_new_tokens: the tokens sampled after each prompt.
        top_k: sample from the k likeliest tokens.
        sentences: the sentences of the output kept as the summary.
        seed: the seed of the sampling (each batch its own, from it); None: unseeded.

    Returns:
        The result.

    Raises:
        PLMError: a file [`read_articles`][plm.apps.zeroshot.summarize.read_articles] refuses, or ``max_new_tokens``
            that leave no room for the article.
    """
    rows = read_articles(path)[: options.limit]
    model, batch_size = options.model, options.batch_size
    room = model.context_length() - max_new_tokens
    if room < 1:
        raise PLMError(
            f"{max_new_tokens} new tokens leave no room for the article in a context of {model.context_length()}"
        )
    summaries = []
    for start in progress_bar(range(0, len(rows), batch_size), disable=not options.progress, desc="summarize"):
        prompts = [article.rstrip() + PROMPT for article, _ in rows[start : start + batch_size]]
        seed_here = None if seed is None else seed + start
        texts = generate_text(model, options.tokenizer, prompts, max_new_tokens, top_k=top_k, seed=seed_here,
                              keep_last=room)
        summaries += [first_sentences(text, sentences) for text in texts]
    from rouge_score import rouge_scorer  # imported here: with nltk and scipy it takes 1.6 s, which every command paid

    scorer = rouge_scorer.RougeScorer(list(ROUGE), use_stemmer=True)
    scores = [scorer.score(reference, summary) for (_, reference), summary in zip(rows, summaries)]
    mean = {name: sum(score[name].fmeasure for score in scores) / len(scores) for name in ROUGE}
    return SummaryResult(mean["rouge1"], mean["rouge2"], mean["rougeL"], len(rows), summaries)
