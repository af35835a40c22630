"""Extractive QA: windows over long contexts, spans against brute force, answers by character offsets, tau."""

from __future__ import annotations

import random

import pytest
import torch

from plm.tasks.metrics import squad_scores
from plm.tasks.qa import QAPrediction, best_spans, best_threshold, encode_windows, predict_answer
from plm.tasks.readers import Answer, QAExample
from plm.tokenization.tokenizer import Tokenizer

WORDS = "the river flows past old mills and green fields toward a quiet harbour where boats rest".split()


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.train_wordpiece([" ".join(WORDS)] * 20 + ["Paris France capital city"] * 20, vocab_size=200)


def long_example(answer_at: int = 154):  # the window of tokens [100, 155) ends inside the answer
    rng = random.Random(0)
    words = [rng.choice(WORDS) for _ in range(300)]
    words[answer_at:answer_at + 2] = ["Paris", "France"]
    context = " ".join(words)
    start = context.index("Paris France")
    return QAExample("q", "where is the capital city", context, (Answer("Paris France", start),))


def test_windows_cover_the_context_with_a_stride_and_locate_the_answer(tokenizer):
    example = long_example()
    windows = encode_windows(tokenizer, example, max_length=64, stride=20)
    context_tokens = tokenizer.encode(example.context)
    question = tokenizer.encode(example.question)
    firsts = []
    for window in windows:
        head = len(question) + 2
        assert window["input_ids"][:head] == [tokenizer.cls_id, *question, tokenizer.sep_id]
        assert len(window["input_ids"]) <= 64 and window["token_type_ids"].count(0) == head
        body = window["input_ids"][head:-1]
        firsts.append(next(k for k in range(len(context_tokens)) if context_tokens[k:k + len(body)] == body))
        if window["start_positions"]:
            a, b = window["offsets"][window["start_positions"]][0], window["offsets"][window["end_positions"]][1]
            assert example.context[a:b] == "Paris France"
    assert firsts == list(range(0, 20 * len(windows), 20))  # a window starts every 20 tokens ...
    assert firsts[-1] + len(windows[-1]["input_ids"]) - head - 1 == len(context_tokens)  # ... until the end
    holding = [w for w in windows if w["start_positions"]]
    start = example.answers[0].start
    cut = [w for w in windows if any(o and o[0] == start for o in w["offsets"]) and w not in holding]
    assert cut  # a window ends inside the answer: it does not hold it
    assert 1 <= len(holding) < len(windows)  # the others point at [CLS]: the answer is not wholly inside
    assert all(w["start_positions"] == w["end_positions"] == 0 for w in windows if w not in holding)


def test_a_window_with_the_answers_start_but_not_its_end_labels_no_span(tokenizer):
    """The window of context tokens [100, 155) holds "Paris" but not "France", which starts the next window's
    answer: it is labelled with [CLS] (0, 0), not with a span cut at its end nor one ending past it. The positions
    expected in each window are worked out here from the context's tokens and the windows' arithmetic."""
    example = long_example()
    question, context = tokenizer.encode(example.question), tokenizer.encode(example.context)
    paris = context.index(tokenizer.encode("Paris")[0])  # "France" is the token after it
    head, width, stride = len(question) + 2, 64 - len(question) - 3, 20  # [CLS] question [SEP] window [SEP]
    windows = encode_windows(tokenizer, example, max_length=64, stride=stride)
    expected, cut = [], []
    for k in range(len(windows)):
        first, last = k * stride, min(k * stride + width, len(context))  # the window's context tokens [first, last)
        if first <= paris and paris + 1 < last:
            expected.append((head + paris - first, head + paris + 1 - first))
        else:
            expected.append((0, 0))
            if first <= paris < last:
                cut.append(k)
    assert cut == [5]  # the case this test is about: window 5 ends between "Paris" and "France"
    assert [(w["start_positions"], w["end_positions"]) for w in windows] == expected
    labelled = [w for w in windows if w["start_positions"]]
    assert len(labelled) == 2
    for window in labelled:
        start, end = window["offsets"][window["start_positions"]], window["offsets"][window["end_positions"]]
        assert example.context[start[0]:end[1]] == "Paris France"


def test_unanswerable_questions_point_every_window_at_cls(tokenizer):
    example = QAExample("q", "who", long_example().context, (), impossible=True)
    assert all(w["start_positions"] == w["end_positions"] == 0 for w in encode_windows(tokenizer, example, 64, 20))


@pytest.mark.parametrize("seed", range(5))
def test_best_spans_equal_brute_force_over_all_pairs(seed):
    generator = torch.Generator().manual_seed(seed)
    time = 24
    start, end = torch.randn(time, generator=generator), torch.randn(time, generator=generator)
    allowed = torch.rand(time, generator=generator) > 0.3
    brute = sorted(
        ((float(start[i] + end[j]), i, j) for i in range(time) for j in range(time)
         if j >= i and j - i < 5 and allowed[i] and allowed[j]),
        reverse=True,
    )[:7]
    spans = best_spans(start, end, allowed, max_answer_length=5, n_best=7)
    assert [(s.start, s.end) for s in spans] == [(i, j) for _, i, j in brute]
    assert [s.score for s in spans] == pytest.approx([s for s, _, _ in brute])


def test_the_answer_is_read_from_the_original_text_across_windows(tokenizer):
    example = long_example()
    windows = encode_windows(tokenizer, example, max_length=64, stride=20)
    holding = next(k for k, w in enumerate(windows) if w["start_positions"])
    starts, ends = [], []
    for k, window in enumerate(windows):
        start, end = torch.zeros(len(window["input_ids"]) + 3), torch.zeros(len(window["input_ids"]) + 3)  # padded
        start[0] = end[0] = 1.0 + k  # null score 2 + 2k: the question's null score is the smallest
        if k == holding:
            start[window["start_positions"]], end[window["end_positions"]] = 5.0, 4.0
        starts.append(start)
        ends.append(end)
    prediction = predict_answer(example.context, windows, starts, ends)
    assert prediction.text == "Paris France"
    assert prediction.score == pytest.approx(9.0) and prediction.null_score == pytest.approx(2.0)
    assert prediction.answer(threshold=6.9) == "Paris France" and prediction.answer(threshold=7.0) == ""


def test_tau_maximises_f1_over_every_threshold():
    rng = random.Random(3)
    predictions, gold = {}, {}
    for q in range(40):
        answerable = rng.random() < 0.5
        right = rng.random() < 0.6
        gold[str(q)] = ["blue boat"] if answerable else []
        text = "blue boat" if right else "green field"
        predictions[str(q)] = QAPrediction(text, rng.uniform(0, 5), rng.uniform(0, 5), ())

    def total(tau):
        return squad_scores({q: p.answer(tau) for q, p in predictions.items()}, gold)["f1"]

    margins = sorted(p.score - p.null_score for p in predictions.values())
    candidates = [margins[0] - 1] + margins + [m + 1e-9 for m in margins]  # below, at and just above each margin
    tau = best_threshold(predictions, gold)
    assert total(tau) == pytest.approx(max(total(t) for t in candidates))
    assert total(tau) > total(None)  # choosing tau beats always answering


def test_tau_moves_tied_margins_together():
    """Two questions with margin 1 turn to "no answer" at the same tau: one gains, one loses."""
    predictions = {"wrong": QAPrediction("x", 2.0, 1.0, ()), "right": QAPrediction("boat", 2.0, 1.0, ()),
                   "low": QAPrediction("x", 1.5, 1.0, ())}
    gold = {"wrong": [], "right": ["boat"], "low": []}
    tau = best_threshold(predictions, gold)
    assert 0.5 <= tau < 1.0  # "low" says no answer; "wrong" and "right" keep their spans


def test_an_answer_missing_from_the_context_gives_nothing_to_train_on(tokenizer):
    """Not the null answer: a v1.1 question whose answer text is not in the context is left out of training."""
    example = QAExample("q", "where", "the river flows past old mills", (Answer("Paris", None),))
    windows = encode_windows(tokenizer, example, 64, 20)
    assert windows and all("start_positions" not in w for w in windows)


def test_qa_windows_default_to_berts_384_tokens_128_apart(tokenizer):
    """BERT's SQuAD fine-tuning: 384-token windows whose starts are 128 tokens apart; other tasks read 128 tokens."""
    from plm.models import from_preset
    from plm.tasks.finetune import FinetuneSetup
    from plm.tasks.task_objective import build_task

    encoder = from_preset("bert-micro", vocab_size=len(tokenizer), context_length=512)
    qa = build_task("qa", tokenizer, encoder)
    assert (qa.max_length, qa.stride) == (384, 128)
    assert build_task("classify", tokenizer, encoder, ["a", "b"]).max_length == 128
    encoder = from_preset("bert-micro", vocab_size=len(tokenizer))
    assert build_task("qa", tokenizer, encoder).max_length == 64  # its context
    setup = FinetuneSetup(task="qa")
    assert (setup.data.max_length, setup.data.stride) == (None, 128)  # None: the task's own length
    windows = qa.encode(long_example())  # 300 words: one window of 384 tokens (128-token windows would take 3)
    assert len(windows) == 1 and 300 < len(windows[0]["input_ids"]) <= 384


def test_a_span_seen_by_several_windows_keeps_its_best_score_as_brute_force_gives_it(tokenizer):
    """Windows 20 tokens apart overlap: a span read by several of them is one candidate, at its best score.

    The oracle loops over every window and every (start, end) pair of context tokens, maps each to its
    characters, and keeps the highest score per character span; the null score is the smallest of the windows'.
    """
    example = long_example()
    windows = encode_windows(tokenizer, example, max_length=64, stride=20)
    assert len(windows) > 3
    generator = torch.Generator().manual_seed(0)
    # A score per context token, the same in each window that reads it, plus each window's own noise: the top
    # spans are read by several windows, at different scores.
    token_start, token_end = (torch.randn(len(example.context), generator=generator) for _ in range(2))

    def logits(window: dict, per_token: torch.Tensor) -> torch.Tensor:
        shared = torch.tensor([0.0 if o is None else float(per_token[o[0]]) for o in window["offsets"]])
        return shared + 0.3 * torch.randn(len(shared), generator=generator)

    starts = [logits(w, token_start) for w in windows]
    ends = [logits(w, token_end) for w in windows]
    best: dict[tuple[int, int], float] = {}
    seen_twice = set()
    for window, start, end in zip(windows, starts, ends):
        context = [k for k, offset in enumerate(window["offsets"]) if offset is not None]
        for i in context:
            for j in context:
                if i <= j < i + 30:
                    chars = (window["offsets"][i][0], window["offsets"][j][1])
                    score = float(start[i]) + float(end[j])
                    if chars in best:
                        seen_twice.add(chars)
                    best[chars] = max(score, best.get(chars, float("-inf")))
    ranked = sorted(best.items(), key=lambda item: -item[1])[:20]
    assert seen_twice & {chars for chars, _ in ranked}  # the test means something: the top spans overlap windows
    prediction = predict_answer(example.context, windows, starts, ends)
    assert [text for text, _ in prediction.n_best] == [example.context[a:b] for (a, b), _ in ranked]
    assert [score for _, score in prediction.n_best] == pytest.approx([score for _, score in ranked])
    assert prediction.null_score == pytest.approx(min(float(s[0] + e[0]) for s, e in zip(starts, ends)))
