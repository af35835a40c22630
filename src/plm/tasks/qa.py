"""Extractive QA as BERT section 4.2-4.3 does it: windows, span scores, n-best spans, the null answer.

A context longer than the model reads is cut into windows of ``[CLS] question [SEP]
window [SEP]`` whose starts are ``stride`` tokens apart, so that every answer lies
whole in some window. In a window, the span from token i to token j scores
S . T_i + E . T_j (the start and end logits), for j >= i and j - i < the maximum
answer length, both inside the context. A question's spans from all its windows are
ranked together and mapped back to the original text by the tokens' character
offsets. SQuAD v2.0's null answer scores S . C + E . C (the [CLS] position); a span
is predicted only when it beats the smallest null score of the question's windows by
tau, chosen on the dev set ([`best_threshold`][plm.tasks.qa.best_threshold]).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch

from plm.errors import PLMError
from plm.tasks.encoding import Feature
from plm.tasks.metrics import exact_match, normalize_answer, token_f1
from plm.tasks.readers import QAExample
from plm.tokenization.tokenizer import Tokenizer


def answer_start(example: QAExample) -> int | None:
    """The first gold answer's character offset; found in the context (ignoring case) when the file gives none.

    Args:
        example: the question.

    Returns:
        The offset, or None when the question has no answer or the answer is not in the context.
    """
    if not example.answers:
        return None
    answer = example.answers[0]
    if answer.start is not None:
        return answer.start
    found = example.context.lower().find(answer.text.lower())
    return None if found < 0 else found


def encode_windows(
    tokenizer: Tokenizer, example: QAExample, max_length: int = 384, stride: int = 128, max_question: int = 64
) -> list[Feature]:
    """The windows of ``example``: ids, segment ids, each token's character span in the context (None off it).

    With training positions: ``start_positions``/``end_positions`` are the answer's
    first and last token in the window, or 0 (the [CLS] token, the null answer) when
    the question is unanswerable or the answer is not wholly in the window. An answer
    that cannot be found in the context gives no positions: nothing to train on.

    Args:
        tokenizer: the model's tokenizer, with [CLS] and [SEP].
        example: the question and its context.
        max_length: the tokens of a window, special tokens and question included.
        stride: the context tokens between the starts of two windows.
        max_question: the question's tokens kept (the rest is cut).

    Returns:
        One feature per window: ``input_ids``, ``token_type_ids``, ``offsets`` and ``word_ids`` (the question's
        words, then the context's numbered after them; None at the special tokens), and the positions when there
        are some to train on.

    Raises:
        PLMError: a tokenizer without [CLS] or [SEP], or a ``max_length`` that leaves no room for the context.
    """
    if tokenizer.cls_id is None or tokenizer.sep_id is None:
        raise PLMError(f"extractive QA reads [CLS] question [SEP] context [SEP]; {tokenizer!r} has no [CLS] or [SEP]")
    asked = tokenizer.backend.encode(example.question, add_special_tokens=False)
    question = asked.ids[:max_question]
    context = tokenizer.backend.encode(example.context, add_special_tokens=False)
    width = max_length - len(question) - 3  # context tokens per window
    if width < 1:
        raise PLMError(f"max_length {max_length} leaves no room for the context after a {len(question)}-token question")
    start_char = answer_start(example)
    end_char = None if start_char is None else start_char + len(example.answers[0].text)
    features = []
    for first in range(0, max(1, len(context.ids)), stride):
        last = min(first + width, len(context.ids))  # the window is context tokens [first, last)
        head = 2 + len(question)  # [CLS] question [SEP]
        ids = [tokenizer.cls_id, *question, tokenizer.sep_id, *context.ids[first:last], tokenizer.sep_id]
        offsets = [None] * head + [tuple(o) for o in context.offsets[first:last]] + [None]
        start = end = 0
        if start_char is not None and end_char is not None:
            chars = context.offsets  # (start, end) of each context token
            inside = [i for i in range(first, last) if chars[i][0] < end_char and chars[i][1] > start_char]
            if inside and chars[inside[0]][0] <= start_char and chars[inside[-1]][1] >= end_char:
                start, end = head + inside[0] - first, head + inside[-1] - first
        words = [None, *asked.word_ids[:max_question], None,
                 *(None if w is None else len(question) + w for w in context.word_ids[first:last]), None]
        feature = {"input_ids": ids, "token_type_ids": [0] * head + [1] * (len(ids) - head), "offsets": offsets,
                   "word_ids": words}
        if start_char is not None or example.impossible:
            feature |= {"start_positions": start, "end_positions": end}
        features.append(feature)
        if last == len(context.ids):
            break
    return features


@dataclass(frozen=True)
class AnswerSpan:
    """A span of a window and its score.

    Attributes:
        score: S . T_start + E . T_end.
        start: the span's first token's position in the window.
        end: its last token's position (inclusive).
    """
    score: float
    start: int  # token positions in the window, end inclusive
    end: int


def best_spans(
    start_logits: torch.Tensor,
    end_logits: torch.Tensor,
    allowed: torch.Tensor,
    max_answer_length: int = 30,
    n_best: int = 20,
) -> list[AnswerSpan]:
    """The ``n_best`` spans (i, j) of one window by S.T_i + E.T_j, j >= i, j - i < max_answer_length.

    Args:
        start_logits: (time,) the start logits S.T_i.
        end_logits: (time,) the end logits E.T_j.
        allowed: (time,) bool, the positions an answer may cover (the context's tokens).
        max_answer_length: the most tokens of a span.
        n_best: the most spans returned.

    Returns:
        The best spans, best first.
    """
    time = start_logits.shape[0]
    scores = start_logits[:, None] + end_logits[None, :]  # (T, T): row i is the start, column j the end
    i, j = torch.arange(time)[:, None], torch.arange(time)[None, :]
    valid = (j >= i) & (j - i < max_answer_length) & allowed[:, None] & allowed[None, :]
    scores = scores.masked_fill(~valid, float("-inf"))
    count = min(n_best, int(valid.sum()))
    top = scores.flatten().topk(count)
    return [AnswerSpan(float(s), int(k) // time, int(k) % time) for s, k in zip(top.values, top.indices)]


@dataclass(frozen=True)
class QAPrediction:
    """A question's best span (its text, its score) and its null score; n-best texts with their scores.

    Attributes:
        text: the best span's text ("" when no span was found).
        score: its score S . T_i + E . T_j (-inf when no span was found).
        null_score: the smallest null score S . C + E . C of the question's windows.
        n_best: the best spans' texts and scores, best first.
    """

    text: str
    score: float
    null_score: float
    n_best: tuple[tuple[str, float], ...]

    def answer(self, threshold: float | None) -> str:
        """The span's text, or "" (no answer) when ``threshold`` is given and the span does not beat null by it.

        Args:
            threshold: tau, the margin by which the span's score must beat the null score; None: always the span.

        Returns:
            The answer.
        """
        if threshold is not None and not self.score - self.null_score > threshold:
            return ""
        return self.text


def predict_answer(
    context: str,
    windows: Sequence[Feature],
    start_logits: Sequence[torch.Tensor],
    end_logits: Sequence[torch.Tensor],
    max_answer_length: int = 30,
    n_best: int = 20,
) -> QAPrediction:
    """Merge the spans of a question's windows (overlapping windows give a span once, at its best score).

    Args:
        context: the question's context.
        windows: its windows (see [`encode_windows`][plm.tasks.qa.encode_windows]), for their offsets.
        start_logits: each window's start logits, (time,) (a padded row is cut to the window).
        end_logits: each window's end logits, (time,).
        max_answer_length: the most tokens of a span.
        n_best: the most spans kept.

    Returns:
        The best span's text and score, the smallest null score of the windows, and the n-best texts (no
        span: an empty text scoring -inf).
    """
    candidates: dict[tuple[int, int], float] = {}
    null_score = float("inf")
    for window, start, end in zip(windows, start_logits, end_logits):
        # on the CPU, whatever device the model ran on: the mask of allowed positions is built there
        start, end = (logits[: len(window["offsets"])].float().cpu() for logits in (start, end))
        null_score = min(null_score, float(start[0] + end[0]))
        allowed = torch.tensor([offset is not None for offset in window["offsets"]])
        for span in best_spans(start, end, allowed, max_answer_length, n_best):
            chars = (window["offsets"][span.start][0], window["offsets"][span.end][1])
            candidates[chars] = max(span.score, candidates.get(chars, float("-inf")))
    ranked = sorted(candidates.items(), key=lambda item: -item[1])[:n_best]
    if not ranked:
        return QAPrediction("", float("-inf"), null_score, ())
    texts = tuple((context[a:b], score) for (a, b), score in ranked)
    return QAPrediction(texts[0][0], texts[0][1], null_score, texts)


Key = TypeVar("Key")  # what names a question: its id, or its index


def best_threshold(
    predictions: Mapping[Key, QAPrediction], gold: Mapping[Key, Sequence[str]], metric: str = "f1"
) -> float:
    """The threshold tau that maximises the dev set's total EM or F1 when spans must beat null by more than tau.

    Raising tau past a question's margin (span - null) turns its answer from the span
    into "": the total only changes at the margins, so they (and one below them all)
    are the only thresholds to try; sorted, each step changes one question.

    Args:
        predictions: each question's prediction.
        gold: each question's gold answers (the questions without a prediction are left out).
        metric: "exact_match"; anything else is token F1.

    Returns:
        tau (0.0 when no question has a prediction).
    """
    score = exact_match if metric == "exact_match" else token_f1

    def best(question: Key, answer: str) -> float:
        answers = [a for a in gold[question] if normalize_answer(a)] or [""]
        return max(score(answer, a) for a in answers)

    questions = [q for q in gold if q in predictions]
    margins = {q: predictions[q].score - predictions[q].null_score for q in questions}
    order = sorted(questions, key=lambda q: margins[q])
    total = sum((best(q, predictions[q].text) for q in questions), 0.0)  # tau below every margin: all spans
    best_total, best_tau = total, margins[order[0]] - 1 if order else 0.0
    for k, q in enumerate(order):  # tau = margins[q]: q and every question below it answer ""
        total += best(q, "") - best(q, predictions[q].text)
        tied = k + 1 < len(order) and margins[order[k + 1]] == margins[q]  # the next one turns at the same tau
        if not tied and total > best_total:
            best_total, best_tau = total, margins[q]
    return best_tau
