"""CoQA, translation and open-domain QA by prompting (GPT-2 §3.5, §3.7, §3.8), checked against hand-computed numbers.

The model is a stub that writes a scripted answer after each prompt, every token with a
logit the test chooses, so that the answers, their probabilities and every score are
known before the code runs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import sacrebleu
import torch

from plm.apps.zeroshot.coqa import coqa_prompts, evaluate_coqa, read_coqa, turn_score
from plm.apps.zeroshot.evaluation import ZeroShotOptions
from plm.apps.zeroshot.open_qa import OpenQuestion, evaluate_open_qa, is_correct, most_confident, qa_prompts
from plm.apps.zeroshot.prompting import Prompt, greedy_answers, split_examples
from plm.apps.zeroshot.translation_prompt import evaluate_translation_prompt, translation_prompts
from plm.data.sentence_pairs import SentencePair
from plm.errors import PLMError
from plm.tasks.metrics import normalize_answer
from tests.apps.zeroshot_stubs import tokenizer
from tests.conftest import StubCausalLM


@pytest.fixture(scope="module")
def tok():
    return tokenizer()


class AnswerLM(StubCausalLM):
    """After a prompt that ends with a key of ``scripts``, writes its text, each token with its logit (all others 0).

    Records the prompts it reads, decoded. After a prompt with no key it writes end of text.
    """

    def __init__(self, tok, scripts: dict[str, tuple[str, float]], context: int = 256) -> None:
        super().__init__(context)
        self.tok, self.vocab_size = tok, len(tok)
        self.scripts = {key: (tok.encode(text), logit) for key, (text, logit) in scripts.items()}
        self.prompts: list[str] = []
        self.rows: list[tuple[list[int], float]] = []
        self.step = 0
        self.device_marker = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask=None, *, cache=None, num_logits=None):
        if input_ids.shape[1] > 1:  # the prompt pass
            mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
            texts = [self.tok.decode(row[keep.bool()].tolist()) for row, keep in zip(input_ids, mask)]
            self.prompts += texts
            self.rows = [self.script_after(text) for text in texts]
            self.step = 0
        return super().forward(input_ids, attention_mask, cache=cache, num_logits=num_logits)

    def script_after(self, prompt: str) -> tuple[list[int], float]:
        return next((script for key, script in self.scripts.items() if prompt.endswith(key)), ([], 1.0))

    def logits_for(self, input_ids: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(*input_ids.shape, self.vocab_size)
        for row, (script, logit) in enumerate(self.rows):
            logits[row, -1, script[self.step] if self.step < len(script) else self.tok.eos_id] = logit
        self.step += 1
        return logits

    def probability(self, logit: float) -> float:
        """p of a scripted token: its logit against vocab - 1 zeros."""
        return math.exp(logit) / (math.exp(logit) + self.vocab_size - 1)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def write_jsonl(path: Path, rows: list) -> Path:
    return write(path, "".join(json.dumps(row) + "\n" for row in rows))


# CoQA ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("prediction, references, exact, f1", [
    ("the Red cat!", ["red cat"], 1.0, 1.0),  # case, punctuation and articles go; one reference: its score
    ("a cat sat", ["The cat sat down"], 0.0, 0.8),  # [cat, sat] in [cat, sat, down]: P 1, R 2/3
    # leave one out: against ["white cat", "dog"] F1 2/3 and EM 0, against the other two groups 1 and 1
    ("white", ["white", "white cat", "dog"], 2 / 3, 8 / 9),
    ("unknown", ["unknown", "no"], 0.5, 0.5),  # against ["no"]: 0; against ["unknown"]: 1
    ("the red book", ["the book", "a red book", "newspaper"], 2 / 3, 8 / 9),  # 1, then [book] 2/3, then 1
])
def test_coqa_turn_score_is_the_mean_of_the_leave_one_out_maxima(prediction, references, exact, f1) -> None:
    assert turn_score(prediction, references) == pytest.approx((exact, f1))


STORY = "The cat reads the book. A dog sees the answer."
COQA = {"version": 1.0, "data": [{
    "source": "mctest", "id": "s1", "story": STORY,
    "questions": [{"input_text": "Who reads?", "turn_id": 1}, {"input_text": "What does it read?", "turn_id": 2}],
    "answers": [{"input_text": "the cat", "turn_id": 1}, {"input_text": "the book", "turn_id": 2}],
    "additional_answers": {
        "0": [{"input_text": "a cat", "turn_id": 1}, {"input_text": "a red book", "turn_id": 2}],
        "1": [{"input_text": "dog", "turn_id": 1}, {"input_text": "newspaper", "turn_id": 2}],
    },
}]}


def test_the_coqa_prompt_is_story_history_question_and_a(tmp_path: Path) -> None:
    story = read_coqa(write(tmp_path / "coqa.json", json.dumps(COQA)))[0]
    assert story.answers == [["the cat", "a cat", "dog"], ["the book", "a red book", "newspaper"]]
    assert [prompt.text for prompt in coqa_prompts(story, "coqa.json")] == [
        "The cat reads the book. A dog sees the answer.\n\nQ: Who reads?\nA:",
        "The cat reads the book. A dog sees the answer.\n\nQ: Who reads?\nA: the cat\n\nQ: What does it read?\nA:",
    ]


def test_coqa_scores_the_greedy_answers_as_the_official_script(tmp_path: Path, tok) -> None:
    path = write(tmp_path / "coqa.json", json.dumps(COQA))
    model = AnswerLM(tok, {"Who reads?\nA:": (" cat\n", 5.0), "read?\nA:": (" the red book\n", 5.0)})
    result = evaluate_coqa(ZeroShotOptions(model, tok, batch_size=2), path)
    # turn 1: "cat" matches every group (1, 1); turn 2: EM 2/3, F1 8/9 (the case above)
    assert result.f1 == pytest.approx((1 + 8 / 9) / 2)  # fractions, as every rate plm writes
    assert result.exact_match == pytest.approx((1 + 2 / 3) / 2)
    assert result.predictions == [{"id": "s1", "turn_id": 1, "answer": "cat"},
                                  {"id": "s1", "turn_id": 2, "answer": "the red book"}]
    assert model.prompts == [prompt.text for prompt in coqa_prompts(read_coqa(path)[0], str(path))]
    assert (result.questions, result.prompts_cut) == (2, 0)
    assert evaluate_coqa(ZeroShotOptions(model, tok, limit=1), path).as_dict() == {
        "f1": 1.0, "exact_match": 1.0, "questions": 1, "prompts_cut": 0}


@pytest.mark.parametrize("change, message", [
    (lambda data: data["data"][0]["answers"].pop(), r"coqa.json: data\[0\].answers: 1 answers for 2 questions"),
    (lambda data: data["data"][0]["additional_answers"]["1"][1].update(turn_id=3),
     r"data\[0\].additional_answers.1\[1\]: turn_id 3, its question's is 2"),
    (lambda data: data["data"][0]["questions"][0].pop("input_text"), r"questions\[0\]: missing field 'input_text'"),
    (lambda data: data.pop("data"), 'not CoQA JSON'),
])
def test_a_coqa_file_out_of_format_is_one_error_naming_where(tmp_path: Path, change, message) -> None:
    data = json.loads(json.dumps(COQA))
    change(data)
    with pytest.raises(PLMError, match=message):
        read_coqa(write(tmp_path / "coqa.json", json.dumps(data)))
    with pytest.raises(PLMError, match=r"coqa.json:2: not valid JSON"):
        read_coqa(write(tmp_path / "coqa.json", '{"data":\n [}'))


# Prompts that do not fit ---------------------------------------------------------------------------------------------


def test_a_long_prompt_loses_the_beginning_of_its_context_never_its_query(tok) -> None:
    query = "Q: Who reads?\nA:"
    model = AnswerLM(tok, {query: (" cat\n", 5.0)}, context=24)
    long = Prompt("The list sorts every token. " * 10, query, "story 1")
    (answer,) = greedy_answers(model, tok, [long], max_new_tokens=4)
    assert answer.text == "cat" and answer.cut
    kept = tok.encode(model.prompts[0])
    assert len(kept) == 24 - 4 and model.prompts[0].endswith(" every token. " + query)  # the context's last tokens
    short = Prompt("He sat.", query, "story 2")
    assert not greedy_answers(model, tok, [short], max_new_tokens=4)[0].cut
    with pytest.raises(PLMError, match="story 3: the prompt's end 'Q: Why does the zebra quiz.*' alone takes 25 "
                       "tokens, and the model's context leaves 20"):
        greedy_answers(model, tok, [short, Prompt("He sat.", "Q: Why does the zebra quiz?\nA:", "story 3")], 4)


def test_an_answer_ends_at_the_new_line_and_its_probability_counts_every_token_written(tok) -> None:
    model = AnswerLM(tok, {"A:": (" the book\n The cat", 4.0), "B:": (" dog", 2.0)})
    answers = greedy_answers(model, tok, [Prompt("x", "A:", "1"), Prompt("", "B:", "2")], max_new_tokens=6)
    assert [answer.text for answer in answers] == ["the book", "dog"]
    # " the", " book", "\n": three tokens at logit 4; " dog" at 2 and then end of text (logit 2 too)
    assert [math.exp(answer.logprob) for answer in answers] == pytest.approx(
        [model.probability(4.0) ** 3, model.probability(2.0) ** 2]
    )


# Open-domain QA --------------------------------------------------------------------------------------------------


def test_nq_answers_are_normalised_as_squad_and_match_exactly() -> None:
    assert normalize_answer("The  Beatles!") == "beatles"
    assert normalize_answer("an apple, a day") == "apple day"
    assert is_correct("the Beatles.", ["The Rolling Stones", "Beatles"])
    assert not is_correct("December 1972", ["14 December 1972 UTC"])  # exact match, not overlap
    assert not is_correct("Beatle", ["Beatles"])


def test_the_most_confident_are_the_highest_ranked_first_with_ties_in_file_order() -> None:
    assert most_confident([0.2, 0.9, 0.5, 0.9, 0.1], fraction=0.4) == [1, 3]
    assert most_confident([-3.0, -1.0, -2.0], fraction=0.01) == [1]  # at least one
    assert len(most_confident([0.5] * 3610)) == 36  # 1% of NQ-open's dev set
    with pytest.raises(PLMError, match=r"must be in \(0, 1\]"):
        most_confident([0.5], fraction=0)


QUESTIONS = [
    {"question": "who reads the book", "answer": ["the cat", "cat"]},  # the example of the first prompt
    {"question": "who sees the answer", "answer": ["a dog"]},
    {"question": "what does the cat read", "answer": ["book"]},
    {"question": "who sat down", "answer": ["he", "she"]},
    {"question": "what sorts every token", "answer": ["the list"]},
]


def test_the_qa_prompt_is_the_examples_then_the_question() -> None:
    examples = [OpenQuestion("who reads the book", ["the cat", "cat"]), OpenQuestion("who sat", ["he"])]
    (prompt,) = qa_prompts(examples, [OpenQuestion("what sorts every token", ["the list"])], "nq.jsonl")
    assert prompt.text == "Q: who reads the book\nA: the cat\n\nQ: who sat\nA: he\n\nQ: what sorts every token\nA:"


def test_qa_exact_match_overall_and_on_the_most_confident(tmp_path: Path, tok) -> None:
    path = write_jsonl(tmp_path / "nq.jsonl", QUESTIONS)
    model = AnswerLM(tok, {  # every answer is one word and the new line: probability p(logit) ** 2
        "answer\nA:": (" dog\n", 10.0),  # right ("a dog"), the surest
        "read\nA:": (" answer\n", 6.0),  # wrong
        "down\nA:": (" He\n", 8.0),  # right
        "token\nA:": (" cat\n", 1.0),  # wrong
    })
    result = evaluate_open_qa(ZeroShotOptions(model, tok), path, shots=1, fraction=0.5)
    assert result.as_dict() == {
        "exact_match": 0.5, "questions": 4, "correct": 2, "confident_fraction": 0.5, "confident_questions": 2,
        "confident_correct": 2, "confident_exact_match": 1.0, "shots": 1, "prompts_cut": 0,
    }
    assert [row["answer"] for row in result.predictions] == ["dog", "answer", "He", "cat"]
    assert [row["probability"] for row in result.predictions] == pytest.approx(
        [model.probability(logit) ** 2 for logit in (10.0, 6.0, 8.0, 1.0)]
    )
    assert model.prompts[0] == "Q: who reads the book\nA: the cat\n\nQ: who sees the answer\nA:"
    first_two = evaluate_open_qa(ZeroShotOptions(model, tok, limit=2), path, shots=1, fraction=0.5)
    assert first_two.confident_exact_match == 1.0


def test_examples_from_another_file_leave_every_question_scored(tmp_path: Path, tok) -> None:
    path = write_jsonl(tmp_path / "nq.jsonl", QUESTIONS)
    examples = write_jsonl(tmp_path / "train.jsonl", [{"question": "who sat", "answer": ["he"]}])
    model = AnswerLM(tok, {})
    result = evaluate_open_qa(ZeroShotOptions(model, tok), path, shots=1, examples=examples)
    assert result.questions == 5 and model.prompts[0] == "Q: who sat\nA: he\n\nQ: who reads the book\nA:"
    with pytest.raises(PLMError, match="train.jsonl: 2 examples asked for, the file holds 1"):
        evaluate_open_qa(ZeroShotOptions(model, tok), path, shots=2, examples=examples)
    with pytest.raises(PLMError, match="nq.jsonl: 5 items, none left to evaluate after the 5 examples"):
        evaluate_open_qa(ZeroShotOptions(model, tok), path, shots=5)


def test_a_question_out_of_format_names_its_line(tmp_path: Path, tok) -> None:
    path = write_jsonl(tmp_path / "nq.jsonl", [QUESTIONS[0], {"question": "who", "answer": [1]}])
    with pytest.raises(PLMError, match="nq.jsonl:2: 'answer' should be a list of at least one string"):
        evaluate_open_qa(ZeroShotOptions(AnswerLM(tok, {}), tok), path)


def test_split_examples_takes_the_first_items_of_the_examples_or_of_the_file() -> None:
    assert split_examples([1, 2, 3], 2, None, "f") == ([1, 2], [3])
    assert split_examples([1, 2, 3], 1, [7, 8], "e") == ([7], [1, 2, 3])
    assert split_examples([1, 2, 3], 0, None, "f") == ([], [1, 2, 3])


# Translation -------------------------------------------------------------------------------------------------------


def test_the_translation_prompt_is_source_equals_target_lines_then_source_equals() -> None:
    examples = [SentencePair("The cat reads.", "Le chat lit."), SentencePair("A dog.", "Un chien.")]
    (prompt,) = translation_prompts(examples, ["He sat down."], "test.en")
    assert prompt.text == "The cat reads. = Le chat lit.\nA dog. = Un chien.\nHe sat down. ="


def test_translation_keeps_the_first_sentence_and_scores_corpus_bleu(tmp_path: Path, tok) -> None:
    src = write(tmp_path / "test.en", "The cat reads.\nA dog sees the answer.\nHe sat down.\n")
    ref = write(tmp_path / "test.fr", "Le chat lit.\nUn chien voit la réponse.\nIl s'assit.\n")
    model = AnswerLM(tok, {"answer. =": (" Un chien voit la réponse. Le chat\n", 3.0), "down. =": (" Il lit.\n", 3.0)})
    result = evaluate_translation_prompt(ZeroShotOptions(model, tok), src, ref, shots=1)
    assert result.translations == ["Un chien voit la réponse.", "Il lit."]
    assert model.prompts == ["The cat reads. = Le chat lit.\nA dog sees the answer. =",
                             "The cat reads. = Le chat lit.\nHe sat down. ="]
    expected = sacrebleu.corpus_bleu(result.translations, [["Un chien voit la réponse.", "Il s'assit."]]).score
    assert result.bleu == pytest.approx(expected) and 0 < expected < 100
    assert (result.exact_match, result.sentences, result.shots) == (0.5, 2, 1)
    with pytest.raises(PLMError, match="give both example files"):
        evaluate_translation_prompt(ZeroShotOptions(model, tok), src, ref, examples_src=src)
