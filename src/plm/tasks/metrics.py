"""The metrics the GLUE, CoNLL-2003 and SQuAD papers report, with their published definitions.

Classification: accuracy, F1 of the positive class, Matthews correlation (CoLA).
Regression: Pearson and Spearman correlation (STS-B). Tagging: entity-level
precision, recall and F1 as conlleval counts them, from ``seqeval``. Extractive QA:
exact match and token F1 as the official SQuAD script computes them (v2.0's empty
answer included), each the maximum over the gold answers, as fractions (the script prints them x 100).
"""

from __future__ import annotations

import collections
import math
import re
import string
from collections.abc import Hashable, Mapping, Sequence


def accuracy(predictions: Sequence[Hashable], labels: Sequence[Hashable]) -> float:
    """The share of predictions equal to their label.

    Args:
        predictions: the predicted classes.
        labels: the gold classes, as many.

    Returns:
        The accuracy, in [0, 1].

    Raises:
        ValueError: not as many predictions as labels, or none.
    """
    _same_length(predictions, labels)
    return sum(p == y for p, y in zip(predictions, labels)) / len(labels)


def f1(predictions: Sequence[Hashable], labels: Sequence[Hashable], positive: Hashable = 1) -> float:
    """F1 of the ``positive`` class (GLUE's for MRPC and QQP); 0 when it is never predicted nor gold.

    Args:
        predictions: the predicted classes.
        labels: the gold classes, as many.
        positive: the positive class.

    Returns:
        The F1, in [0, 1].

    Raises:
        ValueError: not as many predictions as labels, or none.
    """
    _same_length(predictions, labels)
    true_positive = sum(p == positive and y == positive for p, y in zip(predictions, labels))
    predicted = sum(p == positive for p in predictions)
    gold = sum(y == positive for y in labels)
    return 2 * true_positive / (predicted + gold) if predicted + gold else 0.0


def matthews_correlation(predictions: Sequence[Hashable], labels: Sequence[Hashable]) -> float:
    """Matthews correlation over K classes (Gorodkin's R_K); 0 when a marginal is constant.

    For two classes it is (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)).

    Args:
        predictions: the predicted classes.
        labels: the gold classes, as many.

    Returns:
        The correlation, in [-1, 1].

    Raises:
        ValueError: not as many predictions as labels, or none.
    """
    _same_length(predictions, labels)
    n = len(labels)
    correct = sum(p == y for p, y in zip(predictions, labels))
    predicted, gold = collections.Counter(predictions), collections.Counter(labels)
    classes = set(predicted) | set(gold)
    covariance = correct * n - sum(predicted[k] * gold[k] for k in classes)
    spread = (n * n - sum(v * v for v in predicted.values())) * (n * n - sum(v * v for v in gold.values()))
    return covariance / math.sqrt(spread) if spread else 0.0


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson's correlation of ``x`` and ``y``; 0 when either is constant.

    Args:
        x: the first values.
        y: the second values, as many.

    Returns:
        The correlation, in [-1, 1].

    Raises:
        ValueError: not as many ``x`` as ``y``, or none.
    """
    _same_length(x, y)
    mean_x, mean_y = sum(x) / len(x), sum(y) / len(y)
    covariance = sum((a - mean_x) * (b - mean_y) for a, b in zip(x, y))
    spread = math.sqrt(sum((a - mean_x) ** 2 for a in x) * sum((b - mean_y) ** 2 for b in y))
    return covariance / spread if spread else 0.0


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson correlation of the ranks; tied values share the mean of their ranks.

    Args:
        x: the first values.
        y: the second values, as many.

    Returns:
        The correlation, in [-1, 1].

    Raises:
        ValueError: not as many ``x`` as ``y``, or none.
    """
    return pearson(_ranks(x), _ranks(y))


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for i in order[start : end + 1]:
            ranks[i] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def confusion_matrix(
    predictions: Sequence[Hashable], labels: Sequence[Hashable], classes: Sequence[Hashable]
) -> list[list[int]]:
    """``matrix[g][p]``: how many examples of gold class ``classes[g]`` were predicted ``classes[p]``.

    Args:
        predictions: the predicted classes.
        labels: the gold classes, as many.
        classes: every class that occurs, in the matrix's order.

    Returns:
        The len(classes) x len(classes) counts.

    Raises:
        ValueError: not as many predictions as labels, or none.
    """
    _same_length(predictions, labels)
    index = {c: i for i, c in enumerate(classes)}
    matrix = [[0] * len(classes) for _ in classes]
    for p, y in zip(predictions, labels):
        matrix[index[y]][index[p]] += 1
    return matrix


def entity_scores(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict[str, dict[str, float]]:
    """Entity-level precision, recall, F1 and support per entity type and ``micro avg``, as conlleval counts.

    An entity counts as found only when its type and both boundaries match. Tags are
    BIO or IOB1 (conlleval's reading: an I-X that does not continue X starts an entity).

    Args:
        gold: each sentence's gold tags.
        predicted: each sentence's predicted tags, one per gold tag.

    Returns:
        For each entity type and ``micro avg``: its ``precision``, ``recall``, ``f1`` (in [0, 1]) and
        ``support`` (gold entities).

    Raises:
        ValueError: not as many predicted sentences as gold ones, none, or a sentence with another number of
            tags.
    """
    _same_length(predicted, gold)
    for sentence, (p, y) in enumerate(zip(predicted, gold)):
        if len(p) != len(y):
            raise ValueError(f"sentence {sentence}: {len(p)} predicted tags for {len(y)} words")
    from seqeval.metrics import classification_report  # imports scikit-learn: seconds, so only when tagging

    report = classification_report(
        [list(s) for s in gold], [list(s) for s in predicted], output_dict=True, zero_division=0
    )
    return {
        name: {"precision": row["precision"], "recall": row["recall"], "f1": row["f1-score"], "support": row["support"]}
        for name, row in report.items()
        if name not in ("macro avg", "weighted avg")
    }


# SQuAD ------------------------------------------------------------------------------


def normalize_answer(text: str) -> str:
    """The official script's normalisation: lower case, no punctuation, no a/an/the, single spaces.

    Args:
        text: an answer.

    Returns:
        The normalised answer.
    """
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


_PUNCTUATION = set(string.punctuation)


def exact_match(prediction: str, gold: str) -> float:
    """Whether the answers are equal once normalised (see [`normalize_answer`][plm.tasks.metrics.normalize_answer]).

    Args:
        prediction: the predicted answer.
        gold: a gold answer.

    Returns:
        1.0 or 0.0.
    """
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    """F1 of the normalised tokens' multiset overlap; v2.0: an empty answer matches only an empty one.

    Args:
        prediction: the predicted answer.
        gold: a gold answer.

    Returns:
        The F1, in [0, 1].
    """
    predicted, expected = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not predicted or not expected:
        return float(predicted == expected)
    common = sum((collections.Counter(predicted) & collections.Counter(expected)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


def squad_scores(predictions: Mapping[str, str], gold: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """EM and F1 over the questions of ``gold`` (id -> answer texts; none for unanswerable), as fractions.

    The official script prints them x 100; plm writes every rate as a fraction in [0, 1].

    Each question scores its best match over its gold answers; an unanswerable one
    (or one whose answers all normalise to nothing) has the empty string as its gold
    answer. A question without a prediction scores 0, as in the official script.

    Args:
        predictions: the predicted answer of each question id.
        gold: the gold answers of each question id.

    Returns:
        ``exact_match`` and ``f1``, each in [0, 1].
    """
    em = f1_total = 0.0
    for question, answers in gold.items():
        answers = [a for a in answers if normalize_answer(a)] or [""]
        if question not in predictions:
            continue
        em += max(exact_match(predictions[question], a) for a in answers)
        f1_total += max(token_f1(predictions[question], a) for a in answers)
    return {"exact_match": em / len(gold), "f1": f1_total / len(gold)}


def _same_length(predictions: Sequence, labels: Sequence) -> None:
    if len(predictions) != len(labels):
        raise ValueError(f"{len(predictions)} predictions for {len(labels)} labels")
    if not labels:
        raise ValueError("no examples to score")
