r"""CoQA by prompting (GPT-2 §3.5): the story, the conversation so far, ``A:``; the model answers greedily.

The input is CoQA's official JSON (``coqa-dev-v1.0.json``)::

    {"data": [{"id": ..., "story": ..., "questions": [{"input_text": ..., "turn_id": 1}, ...],
               "answers": [{"input_text": ..., "turn_id": 1}, ...], "additional_answers": {"0": [...], ...}}]}

The paper conditions the model on "a document, the history of the associated
conversation, and a final token A:". For turn 3 of a story the prompt is::

    {story}\n\nQ: {question 1}\nA: {answer 1}\n\nQ: {question 2}\nA: {answer 2}\n\nQ: {question 3}\nA:

with the dataset's answers in the history (the conversation a reader of CoQA sees).
Greedy decoding runs until a new line. A prompt too long for the model loses the
beginning of the story (then of the history), never its last question.

Scores are those of CoQA's official script (``evaluate-v1.0.py``): exact match and token
F1 after SQuAD's normalisation, and a question with several references scores the mean,
over its references, of the best match among the others ([`turn_score`][plm.apps.zeroshot.coqa.turn_score]). The
overall numbers are means over the questions, as fractions (the official script prints them x 100): its
"overall" on the development set, whose stories all come from the script's in-domain sources.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from plm.apps.zeroshot.evaluation import ZeroShotOptions, ZeroShotResult
from plm.apps.zeroshot.prompting import Prompt, greedy_answers, qa_query, qa_turns
from plm.data.corpus import check_fields, json_document
from plm.errors import PLMError
from plm.tasks.metrics import exact_match, token_f1

TURN = {"input_text": str, "turn_id": int}


@dataclass(frozen=True)
class CoQAStory:
    """One story of CoQA and its conversation.

    Attributes:
        id: the story's id.
        story: the document.
        questions: the questions, in turn order.
        turn_ids: each question's ``turn_id``.
        answers: each question's references: the answer in ``answers`` first, then the additional ones.
    """

    id: str
    story: str
    questions: list[str]
    turn_ids: list[int]
    answers: list[list[str]]


@dataclass(frozen=True)
class CoQAResult(ZeroShotResult):
    """CoQA's F1 and exact match, and the answers.

    Attributes:
        f1: the official F1, the mean over questions, in [0, 1].
        exact_match: the official exact match, in [0, 1].
        questions: the questions answered.
        prompts_cut: the prompts that lost the beginning of their story to fit the model.
        predictions: ``{"id", "turn_id", "answer"}`` per question, the official script's prediction format.
    """

    f1: float
    exact_match: float
    questions: int
    prompts_cut: int
    predictions: list[dict[str, Any]]

    per_item = ("predictions",)


def read_coqa(path: str | Path) -> list[CoQAStory]:
    """The stories of a CoQA JSON file (format in the module docstring).

    Args:
        path: the JSON file.

    Returns:
        The stories, in file order.

    Raises:
        PLMError: a file that is not JSON, not CoQA's layout, a missing or ill-typed field, a list of answers
            not as long as the questions, an answer whose ``turn_id`` is not its question's, or no questions.
    """
    document = json_document(path)
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise PLMError(f'{path}: not CoQA JSON (no "data" list at the top)')
    stories = []
    for index, row in enumerate(document["data"]):
        where = f"{path}: data[{index}]"
        check_fields(row, {"id": str, "story": str, "questions": list, "answers": list},
                     {"additional_answers": dict}, where)
        questions = [check_fields(question, TURN, None, f"{where}.questions[{number}]")
                     for number, question in enumerate(row["questions"])]
        additional = row.get("additional_answers", {})
        references = {"answers": row["answers"]} | {f"additional_answers.{key}": additional[key] for key in additional}
        for name, answers in references.items():
            if not isinstance(answers, list) or len(answers) != len(questions):
                count = len(answers) if isinstance(answers, list) else "no list of"
                raise PLMError(f"{where}.{name}: {count} answers for {len(questions)} questions")
            for number, (question, answer) in enumerate(zip(questions, answers)):
                check_fields(answer, TURN, None, f"{where}.{name}[{number}]")
                if answer["turn_id"] != question["turn_id"]:
                    raise PLMError(f"{where}.{name}[{number}]: turn_id {answer['turn_id']}, its question's is "
                                   f"{question['turn_id']}")
        stories.append(CoQAStory(
            row["id"], row["story"], [question["input_text"] for question in questions],
            [question["turn_id"] for question in questions],
            [[answers[number]["input_text"] for answers in references.values()] for number in range(len(questions))],
        ))
    if not any(story.questions for story in stories):
        raise PLMError(f"{path}: no questions in the file")
    return stories


def coqa_prompts(story: CoQAStory, source: str) -> list[Prompt]:
    """The prompt of each turn of a story: the story, the turns before it with their answers, the question.

    Args:
        story: the story.
        source: the file, for messages.

    Returns:
        One prompt per question.
    """
    history = [(question, answers[0]) for question, answers in zip(story.questions, story.answers)]
    return [
        Prompt(f"{story.story}\n\n{qa_turns(history[:turn])}", qa_query(question),
               f"{source}: story {story.id!r}, turn {turn_id}")
        for turn, (question, turn_id) in enumerate(zip(story.questions, story.turn_ids))
    ]


def turn_score(prediction: str, references: Sequence[str]) -> tuple[float, float]:
    """Exact match and F1 of one answer against its references, each in [0, 1], as CoQA's script scores a turn.

    Args:
        prediction: the answer.
        references: its references, at least one.

    Returns:
        The exact match and the F1.
    """
    # CoQA's evaluate-v1.0.py, CoQAEvaluator._compute_turn_score: with n > 1 references, the mean over i of the
    # best score against the n - 1 references other than reference i (a human's answer is scored the same way
    # against the others); with one, the score against it. Its normalize_answer and compute_f1 are SQuAD's,
    # which plm.tasks.metrics implements (lower case, no punctuation, no a/an/the, single spaces).
    if len(references) == 1:
        groups: list[Sequence[str]] = [references]
    else:
        groups = [[*references[:i], *references[i + 1 :]] for i in range(len(references))]
    exact = sum(max(exact_match(prediction, reference) for reference in group) for group in groups)
    f1 = sum(max(token_f1(prediction, reference) for reference in group) for group in groups)
    return exact / len(groups), f1 / len(groups)


def evaluate_coqa(options: ZeroShotOptions, path: str | Path, max_new_tokens: int = 32) -> CoQAResult:
    """CoQA's F1 and exact match of the model's greedy answers.

    Args:
        options: the model, its tokenizer and how to run them; the limit counts the questions of the file.
        path: the CoQA JSON file.
        max_new_tokens: the most tokens of an answer.

    Returns:
        The result.

    Raises:
        PLMError: a file [`read_coqa`][plm.apps.zeroshot.coqa.read_coqa] refuses, or a prompt whose question does not
            fit the model.
    """
    stories = read_coqa(path)
    turns = [(story, turn_id, answers) for story in stories for turn_id, answers in zip(story.turn_ids, story.answers)]
    prompts = [prompt for story in stories for prompt in coqa_prompts(story, str(path))]
    turns, prompts = turns[: options.limit], prompts[: options.limit]
    answers = greedy_answers(options.model, options.tokenizer, prompts, max_new_tokens, options.batch_size,
                             options.progress, desc="coqa")
    scores = [turn_score(answer.text, references) for answer, (_, _, references) in zip(answers, turns)]
    return CoQAResult(
        f1=sum(f1 for _, f1 in scores) / len(scores),
        exact_match=sum(exact for exact, _ in scores) / len(scores),
        questions=len(scores),
        prompts_cut=sum(answer.cut for answer in answers),
        predictions=[{"id": story.id, "turn_id": turn_id, "answer": answer.text}
                     for answer, (story, turn_id, _) in zip(answers, turns)],
    )
