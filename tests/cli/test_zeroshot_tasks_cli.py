"""plm eval coqa / translate / qa from the command line: the --json numbers are those of the written predictions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sacrebleu
import torch

import plm
from plm.apps.zeroshot.coqa import turn_score
from plm.apps.zeroshot.open_qa import is_correct, most_confident
from plm.cli.main import main
from tests.apps.zeroshot_stubs import tokenizer


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tok = tokenizer()
    torch.manual_seed(0)
    model = plm.from_preset("gpt2-micro", vocab_size=len(tok))
    return plm.save(model, tmp_path_factory.mktemp("gpt") / "model", tok)


def run(model_dir: Path, *args: str) -> int:
    return main(["eval", *args, "--model", str(model_dir), "--max-new-tokens", "4", "--device", "cpu"])


def read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


def coqa_file(path: Path, additional: str) -> Path:
    turns = [("Who reads?", "the cat"), ("What?", "the book"), ("Who sees it?", "a dog")]
    story = {
        "id": "s1", "story": "The cat reads the book. A dog sees the answer.",
        "questions": [{"input_text": q, "turn_id": n} for n, (q, _) in enumerate(turns, 1)],
        "answers": [{"input_text": a, "turn_id": n} for n, (_, a) in enumerate(turns, 1)],
        "additional_answers": {"0": [{"input_text": text, "turn_id": n}
                                     for n, text in enumerate([additional, "book", "dog"], 1)]},
    }
    path.write_text(json.dumps({"data": [story]}), encoding="utf-8")
    return path


def test_coqa_writes_the_official_f1_of_its_predictions(model_dir: Path, tmp_path: Path, capsys) -> None:
    out, predictions = tmp_path / "coqa.json", tmp_path / "answers.json"
    assert run(model_dir, "coqa", str(coqa_file(tmp_path / "dev.json", "cat")), "--predictions", str(predictions)) == 0
    first = read_json(predictions)
    # The additional answers are not in the prompts (the history holds the first answers): the same predictions,
    # and turn 1 now has the model's own answer among its references.
    data = coqa_file(tmp_path / "dev.json", first[0]["answer"])
    assert run(model_dir, "coqa", str(data), "--json", str(out), "--predictions", str(predictions)) == 0
    assert "CoQA" in capsys.readouterr().out
    answers = read_json(predictions)
    assert answers == first and [(row["id"], row["turn_id"]) for row in answers] == [("s1", 1), ("s1", 2), ("s1", 3)]
    story = read_json(data)["data"][0]
    references = [[main["input_text"], extra["input_text"]]
                  for main, extra in zip(story["answers"], story["additional_answers"]["0"])]
    scores = [turn_score(row["answer"], refs) for row, refs in zip(answers, references)]
    numbers = read_json(out)
    assert set(numbers) == {"f1", "exact_match", "questions", "prompts_cut"} and numbers["questions"] == 3
    assert numbers["f1"] == pytest.approx(sum(f1 for _, f1 in scores) / 3) and numbers["f1"] >= 1 / 6  # fractions
    assert numbers["exact_match"] == pytest.approx(sum(em for em, _ in scores) / 3)
    assert run(model_dir, "coqa", str(data), "--limit", "2", "--json", str(out)) == 0
    assert read_json(out)["questions"] == 2


NQ = [{"question": "who reads the book", "answer": ["the cat"]}, {"question": "who sees the answer", "answer": ["dog"]},
      {"question": "what does the cat read", "answer": ["book"]}, {"question": "who sat", "answer": ["he", "she"]}]


def test_qa_writes_exact_match_and_the_most_confident_share_of_its_predictions(model_dir: Path, tmp_path: Path) -> None:
    data, out, predictions = tmp_path / "nq.jsonl", tmp_path / "nq.json", tmp_path / "answers.json"
    data.write_text("".join(json.dumps(row) + "\n" for row in NQ), encoding="utf-8")
    assert run(model_dir, "qa", str(data), "--shots", "1", "--predictions", str(predictions)) == 0
    rows = [*NQ[:2], {**NQ[2], "answer": ["book", read_json(predictions)[1]["answer"]]}, NQ[3]]  # one right answer
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    args = ["qa", str(data), "--shots", "1", "--confident-fraction", "0.5", "--json", str(out),
            "--predictions", str(predictions)]
    assert run(model_dir, *args) == 0
    numbers, answers = read_json(out), read_json(predictions)
    right = [is_correct(row["answer"], gold["answer"]) for row, gold in zip(answers, rows[1:])]
    assert [row["correct"] for row in answers] == right and sum(right) >= 1
    confident = most_confident([row["probability"] for row in answers], 0.5)
    assert numbers == pytest.approx({
        "exact_match": sum(right) / 3, "questions": 3, "correct": sum(right), "confident_fraction": 0.5,
        "confident_questions": 2, "confident_correct": sum(right[i] for i in confident),
        "confident_exact_match": sum(right[i] for i in confident) / 2, "shots": 1, "prompts_cut": 0,
    })


def test_translate_writes_the_corpus_bleu_of_its_translations(model_dir: Path, tmp_path: Path) -> None:
    src, ref = tmp_path / "test.en", tmp_path / "test.fr"
    src.write_text("The cat reads.\nA dog sees the answer.\nHe sat down.\n", encoding="utf-8")
    ref.write_text("Le chat lit.\nUn chien voit la réponse.\nIl s'assit.\n", encoding="utf-8")
    out, predictions = tmp_path / "bleu.json", tmp_path / "translations.json"
    args = ["translate", "--src", str(src), "--ref", str(ref), "--shots", "1", "--json", str(out),
            "--predictions", str(predictions)]
    assert run(model_dir, *args) == 0
    first = read_json(predictions)
    # The references of the sentences translated are not in the prompts: the same translations, the first now right.
    references = [first[0], "Il s'assit."]  # the first line is the example
    ref.write_text("Le chat lit.\n" + "\n".join(references) + "\n", encoding="utf-8")
    assert run(model_dir, *args) == 0
    numbers, translations = read_json(out), read_json(predictions)
    assert set(numbers) == {"bleu", "chrf", "exact_match", "sentences", "shots", "prompts_cut"}
    assert translations == first and numbers["exact_match"] == 0.5  # a fraction, not a percentage
    assert numbers["bleu"] == pytest.approx(sacrebleu.corpus_bleu(translations, [references]).score)
    assert numbers["bleu"] > 0
    assert numbers["chrf"] == pytest.approx(sacrebleu.corpus_chrf(translations, [references]).score)
    assert (numbers["sentences"], numbers["shots"], len(translations)) == (2, 1, 2)
    examples_src, examples_ref = tmp_path / "train.en", tmp_path / "train.fr"
    examples_src.write_text("A cat.\n", encoding="utf-8")
    examples_ref.write_text("Un chat.\n", encoding="utf-8")
    assert run(model_dir, *args, "--examples-src", str(examples_src), "--examples-ref", str(examples_ref)) == 0
    assert read_json(out)["sentences"] == 3


@pytest.mark.parametrize("task, name, text, message", [
    ("coqa", "bad.json", '{"data": [\n\n}', "bad.json:3: not valid JSON"),
    ("coqa", "bad.json", '{"data": [{"id": "s", "story": "x", "questions": [], "answers": 1}]}',
     "bad.json: data[0]: field 'answers' should be a list"),
    ("qa", "bad.jsonl", '\n\n{oops\n', "bad.jsonl:3: not valid JSON"),
    ("qa", "bad.jsonl", '{"question": "q", "answer": "a"}\n', "bad.jsonl:1: field 'answer' should be a list"),
])
def test_a_malformed_file_is_one_line_naming_where_and_exit_code_2(
    model_dir: Path, tmp_path: Path, capsys, task, name, text, message
) -> None:
    (tmp_path / name).write_text(text, encoding="utf-8")
    assert run(model_dir, task, str(tmp_path / name)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_misaligned_translation_files_are_one_line_and_exit_code_2(model_dir: Path, tmp_path: Path, capsys) -> None:
    (tmp_path / "a.en").write_text("One.\nTwo.\n", encoding="utf-8")
    (tmp_path / "a.fr").write_text("Un.\n", encoding="utf-8")
    assert run(model_dir, "translate", "--src", str(tmp_path / "a.en"), "--ref", str(tmp_path / "a.fr")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not aligned" in err


@pytest.mark.parametrize("task", ["coqa", "translate", "qa"])
def test_every_task_has_help_with_its_prompt(task: str, capsys) -> None:
    with pytest.raises(SystemExit):
        main(["eval", task, "--help"])
    text = capsys.readouterr().out
    assert "examples:" in text and "greedily" in text
