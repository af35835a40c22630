r"""Open-domain question answering by prompting (GPT-2 §3.8): example pairs, the question, a greedy answer.

The input is Natural Questions' open form (``NQ-open.dev.jsonl``), one question a line::

    {"question": "who wrote ...", "answer": ["Bobby Scott", "Bob Russell"]}

As in the paper, the context is seeded with example question/answer pairs, which
show the model the short answers the dataset wants; then comes the question::

    Q: {example question}\nA: {its first answer}\n\n ... Q: {question}\nA:

The examples are the first ``shots`` questions of an examples file, or of the file
itself, whose first ``shots`` questions are then not scored. Greedy decoding runs until a
new line; an answer is right when it equals one of the answers after SQuAD's
normalisation (lower case, no punctuation, no a/an/the, single spaces). The paper also
ranks the answers by the probability the model gives them (the product of the
probabilities of the tokens it chose, the new line that ends the answer included) and
reports the accuracy on the 1% it is most confident of (63.1% for the largest GPT-2,
4.1% on all questions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from plm.apps.zeroshot.evaluation import ZeroShotOptions, ZeroShotResult
from plm.apps.zeroshot.prompting import Prompt, greedy_answers, qa_query, qa_turns, split_examples
from plm.data.corpus import json_rows
from plm.errors import PLMError
from plm.tasks.metrics import exact_match


@dataclass(frozen=True)
class OpenQuestion:
    """A question and its answers, any of which counts.

    Attributes:
        question: the question.
        answers: the answers.
    """

    question: str
    answers: list[str]


@dataclass(frozen=True)
class OpenQAResult(ZeroShotResult):
    """Exact match on all questions and on those the model is most confident of, and the answers.

    Attributes:
        exact_match: the fraction of questions answered right, in [0, 1].
        questions: the questions answered.
        correct: those answered right.
        confident_fraction: the share of the questions, the most confident first, scored apart.
        confident_questions: how many questions that share is.
        confident_correct: those of them answered right.
        confident_exact_match: the fraction of them answered right.
        shots: the example pairs in each prompt.
        prompts_cut: the prompts that lost the beginning of their examples to fit the model.
        predictions: ``{"question", "answer", "probability", "correct"}`` per question, in file order.
    """

    exact_match: float
    questions: int
    correct: int
    confident_fraction: float
    confident_questions: int
    confident_correct: int
    confident_exact_match: float
    shots: int
    prompts_cut: int
    predictions: list[dict[str, Any]]

    per_item = ("predictions",)


def read_questions(path: str | Path) -> list[OpenQuestion]:
    """The questions of an NQ-open JSONL file.

    Args:
        path: the JSONL file, one ``{"question": ..., "answer": [...]}`` a line.

    Returns:
        The questions, in file order.

    Raises:
        PLMError: a file [`json_rows`][plm.data.corpus.json_rows] refuses, an empty question, an answer
            list that is empty or holds something else than strings, or no questions.
    """
    questions = []
    for number, row in json_rows(path, {"question": str, "answer": list}):
        answers = row["answer"]
        if not row["question"].strip():
            raise PLMError(f"{path}:{number}: empty question")
        if not answers or not all(isinstance(answer, str) for answer in answers):
            raise PLMError(f"{path}:{number}: 'answer' should be a list of at least one string")
        questions.append(OpenQuestion(row["question"], answers))
    if not questions:
        raise PLMError(f"{path}: no questions in the file")
    return questions


def is_correct(prediction: str, answers: Sequence[str]) -> bool:
    """Whether the prediction equals one of the answers after SQuAD's normalisation.

    Args:
        prediction: the model's answer.
        answers: the accepted answers.

    Returns:
        True when one matches exactly.
    """
    return any(exact_match(prediction, answer) for answer in answers)


def most_confident(confidences: Sequence[float], fraction: float = 0.01) -> list[int]:
    """The indices of the ``fraction`` of items with the highest confidence, at least one, most confident first.

    Items of equal confidence keep their order. 1% of NQ-open's 3,610 questions is 36.

    Args:
        confidences: each item's confidence (a probability or its log: only the order counts).
        fraction: the share of the items to keep, in (0, 1].

    Returns:
        The indices.

    Raises:
        PLMError: a fraction outside (0, 1], or no items.
    """
    check_fraction(fraction)
    if not confidences:
        raise PLMError("no answers to rank")
    count = max(1, round(fraction * len(confidences)))
    return sorted(range(len(confidences)), key=lambda index: -confidences[index])[:count]


def check_fraction(fraction: float) -> None:
    """Check the share of most confident answers to score apart.

    Args:
        fraction: the share.

    Raises:
        PLMError: a share outside (0, 1].
    """
    if not 0 < fraction <= 1:
        raise PLMError(f"the fraction of most confident answers must be in (0, 1], got {fraction}")


def qa_prompts(examples: Sequence[OpenQuestion], questions: Sequence[OpenQuestion], source: str) -> list[Prompt]:
    """The prompt of each question: the example pairs (each with its first answer), then the question.

    Args:
        examples: the example questions.
        questions: the questions to answer.
        source: the file of the questions, for messages.

    Returns:
        One prompt per question.
    """
    context = qa_turns([(example.question, example.answers[0]) for example in examples])
    return [Prompt(context, qa_query(item.question), f"{source}: question {item.question[:40]!r}")
            for item in questions]


def evaluate_open_qa(
    options: ZeroShotOptions,
    path: str | Path,
    shots: int = 5,
    examples: str | Path | None = None,
    fraction: float = 0.01,
    max_new_tokens: int = 32,
) -> OpenQAResult:
    """Exact match of the model's greedy answers, on all questions and on the most confident ``fraction``.

    Args:
        options: the model, its tokenizer and how to run them; the limit counts the questions after the examples.
        path: the NQ-open JSONL file.
        shots: the example pairs in each prompt.
        examples: a JSONL file of the same format to take them from (None: the first questions of ``path``).
        fraction: the share of the most confident answers scored apart.
        max_new_tokens: the most tokens of an answer.

    Returns:
        The result.

    Raises:
        PLMError: a file [`read_questions`][plm.apps.zeroshot.open_qa.read_questions] refuses, too few examples or
            questions, a fraction outside (0, 1], or a question that does not fit the model.
    """
    check_fraction(fraction)  # before the model runs
    given = read_questions(examples) if examples is not None else None
    chosen, questions = split_examples(read_questions(path), shots, given, str(examples or path))
    questions = questions[: options.limit]
    answers = greedy_answers(options.model, options.tokenizer, qa_prompts(chosen, questions, str(path)),
                             max_new_tokens, options.batch_size, options.progress, desc="qa")
    right = [is_correct(answer.text, item.answers) for answer, item in zip(answers, questions)]
    confident = most_confident([answer.logprob for answer in answers], fraction)
    confident_correct = sum(right[index] for index in confident)
    return OpenQAResult(
        exact_match=sum(right) / len(right),
        questions=len(right),
        correct=sum(right),
        confident_fraction=fraction,
        confident_questions=len(confident),
        confident_correct=confident_correct,
        confident_exact_match=confident_correct / len(confident),
        shots=shots,
        prompts_cut=sum(answer.cut for answer in answers),
        predictions=[
            {"question": item.question, "answer": answer.text, "probability": math.exp(answer.logprob),
             "correct": correct}
            for item, answer, correct in zip(questions, answers, right)
        ],
    )
