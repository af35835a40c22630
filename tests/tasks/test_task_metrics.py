"""Task metrics against hand-worked examples and brute-force definitions."""

from __future__ import annotations

import collections
import re
import string

import numpy as np
import pytest

from plm.tasks.metrics import (
    accuracy,
    confusion_matrix,
    entity_scores,
    exact_match,
    f1,
    matthews_correlation,
    normalize_answer,
    pearson,
    spearman,
    squad_scores,
    token_f1,
)


def test_accuracy_f1_and_matthews_by_hand():
    predictions, labels = [1, 1, 0, 0, 1, 0], [1, 0, 0, 0, 1, 1]  # TP 2, FP 1, TN 2, FN 1
    assert accuracy(predictions, labels) == pytest.approx(4 / 6)
    assert f1(predictions, labels) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    assert matthews_correlation(predictions, labels) == pytest.approx((2 * 2 - 1 * 1) / np.sqrt(3 * 3 * 3 * 3))
    assert f1(predictions, labels, positive=0) == pytest.approx(2 / 3)
    assert f1([1, 1, 1, 0], [1, 0, 0, 0]) == pytest.approx(0.5)  # P 1/3, R 1


def test_matthews_is_the_correlation_of_one_hot_codes_for_many_classes():
    """Gorodkin's R_K is the Pearson correlation of the one-hot class indicator matrices."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 200)
    predictions = np.where(rng.random(200) < 0.6, labels, rng.integers(0, 3, 200))
    x, y = np.eye(3)[predictions], np.eye(3)[labels]
    x, y = x - x.mean(0), y - y.mean(0)
    expected = (x * y).sum() / np.sqrt((x * x).sum() * (y * y).sum())
    assert matthews_correlation(predictions.tolist(), labels.tolist()) == pytest.approx(expected)
    assert matthews_correlation([1, 1, 1], [0, 1, 0]) == 0.0  # a constant prediction correlates with nothing


def test_pearson_and_spearman_with_ties():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=50), rng.normal(size=50)
    assert pearson(x.tolist(), y.tolist()) == pytest.approx(np.corrcoef(x, y)[0, 1])
    a, b = [1.0, 2.0, 2.0, 3.0, 5.0], [2.0, 1.0, 4.0, 4.0, 3.0]
    ranks_a, ranks_b = [1, 2.5, 2.5, 4, 5], [2, 1, 4.5, 4.5, 3]  # ties share the mean rank
    assert spearman(a, b) == pytest.approx(np.corrcoef(ranks_a, ranks_b)[0, 1])
    assert spearman([1, 2, 3, 4], [10, 20, 25, 1000]) == pytest.approx(1.0)  # any increasing map


def test_confusion_matrix_rows_are_gold_classes():
    assert confusion_matrix(["a", "b", "b", "a"], ["a", "a", "b", "b"], ["a", "b"]) == [[1, 1], [1, 1]]
    assert confusion_matrix(["b", "b"], ["a", "b"], ["a", "b"]) == [[0, 1], [0, 1]]


def test_entity_scores_count_whole_entities():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "I-ORG"]]
    predicted = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "O"]]  # PER right; LOC typed ORG; ORG cut short
    scores = entity_scores(gold, predicted)
    assert scores["micro avg"]["precision"] == pytest.approx(1 / 3)  # 1 of 3 predicted entities is right
    assert scores["micro avg"]["recall"] == pytest.approx(1 / 3)
    assert scores["PER"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 1}
    assert scores["ORG"]["precision"] == 0.0 and scores["LOC"]["support"] == 1


def test_entity_scores_read_iob1_as_conlleval_does():
    """IOB1: I-PER I-PER B-PER is two people; the BIO tags of the same two agree fully."""
    scores = entity_scores([["I-PER", "I-PER", "B-PER"]], [["B-PER", "I-PER", "B-PER"]])
    assert scores["micro avg"]["f1"] == 1.0 and scores["PER"]["support"] == 2


def test_squad_normalisation_and_token_f1_by_hand():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert normalize_answer("an Apple, a day") == "apple day"
    assert exact_match("the Eiffel Tower.", "Eiffel tower") == 1.0
    # prediction tokens: cat sat on mat; gold: cat on mat -> P 3/4, R 1
    assert token_f1("the cat sat on a mat", "cat on the mat") == pytest.approx(2 * 0.75 / 1.75)
    assert token_f1("dog", "cat") == 0.0
    assert token_f1("", "") == 1.0 and token_f1("", "cat") == 0.0


def test_squad_scores_take_the_best_gold_answer_and_count_missing_predictions_as_wrong():
    gold = {"q1": ["Denver Broncos", "the Broncos"], "q2": ["in 1990"], "q3": [], "q4": ["x"]}
    predictions = {"q1": "Broncos", "q2": "1990 or so", "q3": ""}  # q4 missing
    scores = squad_scores(predictions, gold)
    # q1: EM 1 ("the Broncos" -> "broncos"); q2: F1 2*(1/3)*(1/2)/(5/6) = 0.4; q3: empty = no answer -> 1
    assert scores["exact_match"] == pytest.approx(2 / 4)  # fractions, as every rate plm writes
    assert scores["f1"] == pytest.approx((1 + 0.4 + 1 + 0) / 4)


def official_f1(prediction: str, gold: str) -> float:
    """f1_score of the official SQuAD v1.1 evaluate script, written out again (its normalisation, its
    multiset of common tokens) so that plm's normalize_answer and token_f1 are checked against it."""
    def normalize(s: str) -> str:
        s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
        return " ".join(re.sub(r"\b(a|an|the)\b", " ", s).split())

    prediction_tokens, gold_tokens = normalize(prediction).split(), normalize(gold).split()
    common = collections.Counter(prediction_tokens) & collections.Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(prediction_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def test_token_f1_counts_repeated_tokens_as_the_official_script_does():
    """Common tokens are a multiset: "new york new york" shares 4 tokens with "New York, New York City", not 2."""
    assert token_f1("new york new york", "New York, New York City") == pytest.approx(2 * 1 * 0.8 / 1.8)
    pairs = [("the cat the cat sat", "a cat sat sat on the cat"), ("1 2 2 3 3 3", "3 3 2 1 1"),
             ("Denver Broncos Broncos", "the Denver Broncos")]
    for prediction, gold in pairs:
        assert token_f1(prediction, gold) == pytest.approx(official_f1(prediction, gold))


def test_gold_answers_that_normalise_to_nothing_are_dropped_as_the_v2_script_does():
    """SQuAD v2.0's evaluate script keeps only the gold answers with text once normalised (and "" when none is
    left): a gold answer "The" is no answer, so a prediction of nothing does not match it."""
    gold = {"q1": ["The", "Denver Broncos"], "q2": ["a", "."]}
    scores = squad_scores({"q1": "", "q2": ""}, gold)
    assert scores == {"exact_match": pytest.approx(0.5), "f1": pytest.approx(0.5)}  # q1 wrong, q2 (no answer) right
