"""Cloze and multiple choice (GPT-2 §3.2, §3.4): fill each candidate into the blank, keep the likeliest.

The input is JSONL, one item per line::

    {"context": "...", "query": "... XXXXX ...", "options": ["a", "b", ...], "answer": "a"}

``context`` is optional (CBT's 20 sentences before the query); the text scored is
``context + " " + query``. The query holds the blank once (``XXXXX`` as in CBT, or
another marker). ``answer`` is one of the options or its index.

Full scoring (CBT, as the paper): log p(candidate + rest of the text | text before the
blank). Partial scoring (Winograd, after Trinh and Le): log p(rest of the text | text
before + candidate), the candidate itself unscored, so that a rare name does not lose
for being rare. The candidate with the highest total log-probability wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from plm.apps.zeroshot.evaluation import ZeroShotOptions, ZeroShotResult
from plm.apps.zeroshot.scoring import score_continuations
from plm.data.corpus import json_rows
from plm.errors import PLMError

SCORINGS = ("full", "partial")


@dataclass(frozen=True)
class ClozeItem:
    """One cloze item, cut at its blank.

    Attributes:
        before: the text up to the blank.
        after: the text after it.
        options: the candidates.
        answer: the index of the right one in ``options``.
    """
    before: str  # the text up to the blank
    after: str  # the text after it
    options: list[str]
    answer: int  # index into options


@dataclass(frozen=True)
class ClozeResult(ZeroShotResult):
    """The accuracy of a cloze evaluation, and each item's choice and scores.

    Attributes:
        accuracy: the share of items answered right.
        items: the items.
        correct: those answered right.
        scoring: "full" or "partial".
        choices: the option each item chose.
        scores: log p of each option's scored part, in nats.
    """
    accuracy: float
    items: int
    correct: int
    scoring: str
    choices: list[int]  # the option each item chose
    scores: list[list[float]]  # log p of each option's scored part, in nats

    per_item = ("choices", "scores")


def read_cloze(path: str | Path, blank: str = "XXXXX") -> list[ClozeItem]:
    """The items of a cloze JSONL file (format in the module docstring).

    Args:
        path: the JSONL file.
        blank: the marker of the blank in the query.

    Returns:
        The items, in file order.

    Raises:
        PLMError: a file [`json_rows`][plm.data.corpus.json_rows] refuses, fewer than two options or an empty
            one, an answer that is not an option, or a query without exactly one blank.
    """
    items = []
    schema = {"query": str, "options": list, "answer": str | int}
    for number, row in json_rows(path, schema, optional={"context": str}):
        where = f"{path}:{number}"
        options = row["options"]
        if len(options) < 2 or not all(isinstance(option, str) and option.strip() for option in options):
            raise PLMError(f"{where}: 'options' should be a list of at least two non-empty strings")
        answer = row["answer"]
        if isinstance(answer, str):
            if answer not in options:
                raise PLMError(f"{where}: the answer {answer!r} is not one of the options")
            answer = options.index(answer)
        elif not 0 <= answer < len(options):
            raise PLMError(f"{where}: the answer index {answer} is not between 0 and {len(options) - 1}")
        text = f"{row['context']} {row['query']}" if row.get("context") else row["query"]
        if text.count(blank) != 1:
            raise PLMError(
                f"{where}: the query should hold the blank {blank!r} once, it holds it {text.count(blank)} times"
            )
        before, after = text.split(blank)
        items.append(ClozeItem(before, after, options, answer))
    return items


def candidate_pair(item: ClozeItem, option: str, scoring: str) -> tuple[str, str]:
    """(context, continuation) to score for one candidate.

    Args:
        item: the cloze item.
        option: the candidate.
        scoring: "full" scores the candidate and the rest; "partial" only the rest, after the candidate.

    Returns:
        The context and the continuation.

    Raises:
        PLMError: partial scoring of an item with no text after the blank.
    """
    if scoring == "full":
        return item.before, option + item.after
    if not item.after.strip():
        raise PLMError("partial scoring scores the text after the blank, and this item has none")
    return item.before + option, item.after


def evaluate_cloze(
    options: ZeroShotOptions, path: str | Path, scoring: str = "full", blank: str = "XXXXX"
) -> ClozeResult:
    """Accuracy of choosing, for each item, the option with the highest log-probability.

    Args:
        options: the model, its tokenizer and how to run them; a batch is the continuations scored per forward pass.
        path: the cloze JSONL file.
        scoring: "full" or "partial" (see the module docstring).
        blank: the marker of the blank in the query.

    Returns:
        The result.

    Raises:
        PLMError: an unknown scoring, a file [`read_cloze`][plm.apps.zeroshot.cloze.read_cloze] refuses, or an item that
            cannot be scored.
    """
    if scoring not in SCORINGS:
        raise PLMError(f"unknown scoring {scoring!r}; use {' or '.join(SCORINGS)}")
    items = read_cloze(path, blank)[: options.limit]
    pairs = []
    for number, item in enumerate(items, start=1):
        try:
            pairs += [candidate_pair(item, option, scoring) for option in item.options]
        except PLMError as error:
            raise PLMError(f"{path}: item {number}: {error}") from None
    scored = iter(score_continuations(options.model, options.tokenizer, pairs, options.batch_size,
                                      progress=options.progress, desc="cloze"))
    scores = [[next(scored).logprob for _ in item.options] for item in items]
    choices = [max(range(len(row)), key=row.__getitem__) for row in scores]
    correct = sum(choice == item.answer for choice, item in zip(choices, items))
    return ClozeResult(correct / len(items), len(items), correct, scoring, choices, scores)
