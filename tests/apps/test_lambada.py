"""LAMBADA: accuracy needs every sub-word token of the last word; perplexity is per word (GPT-2 §3.3).

The model is a table of next-token preferences (tests/apps/zeroshot_stubs.py), so the
oracle is written out by hand: which passages greedy decoding gets right, and the
log-probability of each target token.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from plm.apps.zeroshot.evaluation import ZeroShotOptions
from plm.apps.zeroshot.lambada import evaluate_lambada, read_lambada, stop_word_tokens
from plm.errors import PLMError
from tests.apps.zeroshot_stubs import PreferenceLM, tokenizer
from tests.conftest import SHARED_DATA

PASSAGES = [  # (context, target): the stub is told below what it predicts after each context
    ("The cat reads the book. A dog sees the", " answer"),  # one token, predicted: right
    ("The list sorts every token. The cat reads", " zqx"),  # " ", "z", "q", "x": all but "x" predicted: wrong
    ("A dog sees the answer. The list sorts every", " token"),  # the model prefers " book": wrong
    ("He sat down. The cat reads the book and", " zhe"),  # " ", "z", "he": all predicted: right
]


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.fixture
def passages(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "lambada.jsonl", [{"text": context + target} for context, target in PASSAGES])


def stub_for(passages: list[tuple[str, str]], context: int = 64) -> tuple[PreferenceLM, object]:
    tok = tokenizer()
    model = PreferenceLM(len(tok), {}, context)
    book = tok.encode(" book")[0]
    (c0, t0), (c1, t1), (c2, t2), (c3, t3) = [(tok.encode(c), tok.encode(t)) for c, t in passages]
    assert len(t0) == len(t2) == 1 and len(t1) > 2 and len(t3) > 1  # the cases above
    model.prefer(c0, t0[0])
    for index in range(len(t1)):
        model.prefer(c1 + t1[:index], t1[index] if index < len(t1) - 1 else book)
    model.prefer(c2, book, t2[0])
    for index in range(len(t3)):
        model.prefer(c3 + t3[:index], t3[index])
    return model, tok


def oracle_nll(model: PreferenceLM, tok, passages: list[tuple[str, str]]) -> float:
    nll = 0.0
    for context, target in passages:
        ids, targets = tok.encode(context), tok.encode(target)
        for index, token in enumerate(targets):
            nll -= model.logprob(ids + targets[:index], token)
    return nll


@pytest.mark.parametrize("batch_size", [1, 3, 16])
def test_accuracy_needs_the_whole_word_and_perplexity_is_per_word(passages: Path, batch_size: int) -> None:
    model, tok = stub_for(PASSAGES)
    result = evaluate_lambada(ZeroShotOptions(model, tok, batch_size), passages)
    assert (result.correct, result.passages, result.accuracy) == (2, 4, 0.5)
    assert result.target_tokens == 1 + 4 + 1 + 3
    assert result.word_perplexity == pytest.approx(math.exp(oracle_nll(model, tok, PASSAGES) / 4), rel=1e-5)


def test_the_stop_word_filter_takes_the_best_answer_that_is_not_a_stop_word(passages: Path) -> None:
    model, tok = stub_for(PASSAGES)
    the, answer = tok.encode(" the")[0], tok.encode(" answer")[0]
    model.prefer(tok.encode(PASSAGES[0][0]), the, answer)  # "... sees the the": a stop word first
    options = ZeroShotOptions(model, tok)
    assert evaluate_lambada(options, passages).correct == 1
    filtered = evaluate_lambada(options, passages, stop_words=True)
    assert filtered.correct == 2 and filtered.stop_word_filter  # " zhe" stays right: "he" is not its first token
    # The filter changes the answer, not the probabilities.
    assert filtered.word_perplexity == pytest.approx(evaluate_lambada(options, passages).word_perplexity, rel=1e-6)


def test_stop_word_tokens_are_those_that_decode_to_a_stop_word() -> None:
    tok = tokenizer()
    banned = stop_word_tokens(tok)
    for word in [" the", "The", " and", " He", " she"]:
        assert banned[tok.encode(word)[0]], word
    for word in [" cat", " book", " answer", "."]:
        assert not banned[tok.encode(word)[0]], word


def test_a_passage_longer_than_the_context_loses_its_beginning(tmp_path: Path) -> None:
    tok = tokenizer()
    context, target = "The cat reads the book. " * 10 + "A dog sees the", " answer"
    ids = tok.encode(context) + tok.encode(target)
    model = PreferenceLM(len(tok), {}, context=16)
    model.prefer(ids[-17:-1], ids[-1])  # exactly the last 16 tokens before the target
    passage = write_jsonl(tmp_path / "long.jsonl", [{"text": context + target}])
    result = evaluate_lambada(ZeroShotOptions(model, tok), passage)
    assert result.correct == 1


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "lambada.jsonl:2: not valid JSON"),
        ('["a list"]', r'lambada.jsonl:2: expected a JSON object \{\.\.\.\}, got the list \["a list"\]'),
        ('{"txt": "a b"}', "lambada.jsonl:2: missing field 'text'"),
        ('{"text": 3}', "lambada.jsonl:2: field 'text' should be a string, got the number 3"),
        ('{"text": "  single  "}', "lambada.jsonl:2: a passage needs at least two words"),
    ],
)
def test_a_malformed_row_names_the_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "lambada.jsonl"
    path.write_text('{"text": "A dog sees the answer"}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(PLMError, match=message):
        read_lambada(path)


def test_the_real_test_set_reads_as_5153_passages_with_their_last_word() -> None:
    path = SHARED_DATA / "lambada" / "lambada_test.jsonl"
    if not path.is_file():
        pytest.skip("../shared/data/lambada is not here")
    pairs = read_lambada(path)
    assert len(pairs) == 5153
    assert pairs[0][1] == " signs" and pairs[0][0].endswith("I don't care about")
