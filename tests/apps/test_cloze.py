"""Cloze / multiple choice: each option filled into the blank; full (CBT) or partial (Winograd) scoring.

Oracles: the preference table's own log-probabilities (tests/apps/zeroshot_stubs.py), and
a GPT run on one candidate at a time, token after token, with no batching or padding.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from plm.apps.zeroshot.cloze import evaluate_cloze, read_cloze
from plm.apps.zeroshot.evaluation import ZeroShotOptions
from plm.errors import PLMError
from plm.models import from_preset
from tests.apps.zeroshot_stubs import PreferenceLM, tokenizer

BEFORE = "The book sat on the list because"
AFTER = " sees the answer."
WINOGRAD = {"query": f"{BEFORE} XXXXX{AFTER}", "options": ["the book", "the list"], "answer": 0}


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def table_logprob(model: PreferenceLM, tok, context: str, continuation: str) -> float:
    ids, targets = tok.encode(context), tok.encode(continuation)
    return sum(model.logprob(ids + targets[:index], token) for index, token in enumerate(targets))


def test_full_scoring_favours_the_likely_word_and_partial_scoring_what_follows_it(tmp_path: Path) -> None:
    tok = tokenizer()
    model = PreferenceLM(len(tok), {})
    book, the_list = tok.encode(" the book"), tok.encode(" the list")  # [" the", " book"], [" the", " list"]
    context = tok.encode(BEFORE)
    sees = tok.encode(" sees")[0]
    model.prefer(context + book[:1], the_list[1])  # "because the list" is far likelier than "... the book"
    model.prefer(context + book, sees)  # but " sees" is likelier after " book" (first choice)
    model.prefer(context + the_list, book[1], sees)  # than after " list" (second choice)
    path = write_jsonl(tmp_path / "wsc.jsonl", [WINOGRAD])
    full = evaluate_cloze(ZeroShotOptions(model, tok), path, "full")
    partial = evaluate_cloze(ZeroShotOptions(model, tok), path, "partial")
    assert (full.choices, full.correct, partial.choices, partial.correct) == ([1], 0, [0], 1)
    for option, full_score, partial_score in zip(WINOGRAD["options"], full.scores[0], partial.scores[0]):
        assert full_score == pytest.approx(table_logprob(model, tok, BEFORE, f" {option}{AFTER}"), abs=1e-4)
        assert partial_score == pytest.approx(table_logprob(model, tok, f"{BEFORE} {option}", AFTER), abs=1e-4)


@pytest.mark.parametrize("batch_size", [1, 4])
def test_scores_equal_a_gpt_run_on_each_candidate_alone(tmp_path: Path, batch_size: int) -> None:
    tok = tokenizer()
    torch.manual_seed(0)
    model = from_preset("gpt2-micro", vocab_size=len(tok)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(std=0.3)  # far from uniform, so that the context matters
    items = [
        {
            "context": "The cat reads the book.",
            "query": "A XXXXX sees the answer.",
            "options": ["dog", "cat", "list"],
            "answer": "dog",
        },
        {"query": "He and XXXXX sat down.", "options": ["she", "the token"], "answer": 1},
    ]
    path = write_jsonl(tmp_path / "cbt.jsonl", items)
    result = evaluate_cloze(ZeroShotOptions(model, tok, batch_size), path, "full")
    expected = []
    for before, options in [
        ("The cat reads the book. A", [" dog", " cat", " list"]),
        ("He and", [" she", " the token"]),
    ]:
        scores = []
        for option, rest in zip(options, [" sees the answer."] * 3 if len(options) == 3 else [" sat down."] * 2):
            ids, targets = tok.encode(before), tok.encode(option + rest)
            with torch.no_grad():
                logits = model(torch.tensor([ids + targets])).logits[0].double().log_softmax(-1)
            scores.append(sum(logits[len(ids) - 1 + index, token].item() for index, token in enumerate(targets)))
        expected.append(scores)
    assert result.scores == [pytest.approx(row, abs=1e-4) for row in expected]
    assert result.choices == [max(range(len(row)), key=row.__getitem__) for row in expected]
    assert result.correct == sum(choice == answer for choice, answer in zip(result.choices, [0, 1]))


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"query": "a XXXXX b", "options": ["x", "y"], "answer": "z"},
         "cloze.jsonl:2: the answer 'z' is not one of the options"),
        ({"query": "a XXXXX b", "options": ["x", "y"], "answer": 2},
         "cloze.jsonl:2: the answer index 2 is not between 0 and 1"),
        ({"query": "a XXXXX b XXXXX", "options": ["x", "y"], "answer": 0},
         "cloze.jsonl:2: the query should hold the blank 'XXXXX' once"),
        ({"query": "a XXXXX b", "options": "x y", "answer": 0}, "cloze.jsonl:2: field 'options' should be a list"),
        ({"query": "a XXXXX b", "options": ["x"], "answer": 0},
         "cloze.jsonl:2: 'options' should be a list of at least two"),
        ({"query": "a XXXXX b", "options": ["x", "y"]}, "cloze.jsonl:2: missing field 'answer'"),
    ],
)
def test_a_malformed_item_names_the_file_and_line(tmp_path: Path, row: dict, message: str) -> None:
    path = write_jsonl(tmp_path / "cloze.jsonl", [WINOGRAD, row])
    with pytest.raises(PLMError, match=message):
        read_cloze(path)


def test_partial_scoring_needs_text_after_the_blank(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "cloze.jsonl", [WINOGRAD, {"query": "The end is XXXXX", "options": ["near", "far"], "answer": 0}]
    )
    tok = tokenizer()
    with pytest.raises(PLMError, match="cloze.jsonl: item 2: partial scoring scores the text after the blank"):
        evaluate_cloze(ZeroShotOptions(PreferenceLM(len(tok), {}), tok), path, "partial")
