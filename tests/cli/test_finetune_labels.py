"""plm finetune --labels names the classes that the data writes as 0, 1, ...: the model keeps the names, plm predict
says them, and files labelled 0, 1, ... still train and score it."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from plm.cli.main import main
from plm.errors import PLMError
from plm.tasks.fine_tuned import load_task_model
from plm.tasks.finetune import task_labels
from plm.tasks.readers import read_examples
from plm.tasks.synthetic import synthetic_task
from plm.tasks.task_objective import Classification
from plm.tokenization.tokenizer import Tokenizer
from tests.conftest import SHARED_DATA

ROOT = Path(__file__).resolve().parents[2]

QUICK = ["--batch-size", "8", "--epochs", "1", "--no-progress", "--device", "cpu"]


def labelled_by_id(path: Path, count: int, seed: int) -> Path:
    """The built-in classify task as SST-2 writes its classes: bad 0, good 1."""
    rows = ({"text": e.text, "label": int(e.label == "good")} for e in synthetic_task("classify", count, seed))
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def named(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A classifier fine-tuned with --labels bad,good on files labelled 0 and 1, and such a test file."""
    folder = tmp_path_factory.mktemp("named")
    train, dev = labelled_by_id(folder / "train.jsonl", 48, 0), labelled_by_id(folder / "dev.jsonl", 16, 1)
    assert main(["finetune", "--task", "classify", "--train", str(train), "--validation", str(dev),
                 "--labels", "bad,good", *QUICK, "--out", str(folder / "run")]) == 0
    return folder / "run", labelled_by_id(folder / "test.jsonl", 12, 2)


def test_the_model_keeps_the_names(named: tuple[Path, Path]) -> None:
    model, task = load_task_model(named[0])
    assert model.config.head.label_names == ("bad", "good") and task.labels == ("bad", "good")


def test_predict_says_the_names_in_its_json(named: tuple[Path, Path], capsys) -> None:
    run, test = named
    assert main(["predict", "--model", str(run), str(test), "--no-progress"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 12 and {line["prediction"] for line in lines} <= {"bad", "good"}
    assert all(set(line["probabilities"]) == {"bad", "good"} for line in lines)


def test_a_file_labelled_by_id_scores_the_named_model(named: tuple[Path, Path], capsys) -> None:
    run, test = named
    assert main(["eval", "task", "--model", str(run), str(test), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "accuracy" in out and "bad" in out and "good" in out  # the confusion matrix names the classes


def test_a_label_of_no_class_is_named_with_its_file_and_line(named: tuple[Path, Path], tmp_path, capsys) -> None:
    run, test = named
    lines = test.read_text(encoding="utf-8").splitlines()
    lines[2] = json.dumps({"text": "a fine day", "label": 7})
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["eval", "task", "--model", str(run), str(bad), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err == f"plm eval task: error: {bad}:3: label '7' is not one of the task's labels (bad, good, or their " \
        "ids 0 to 1)\n"


@pytest.mark.parametrize("labels, said", [
    ("bad,good,ugly", "plm finetune: error: --labels gives 3 names (bad, good, ugly) for the 2 classes of "),
    ("bad,bad", "plm finetune: error: --labels bad,bad: a name given twice"),
])
def test_labels_that_do_not_name_each_class_once_are_one_line_and_exit_2(labels, said, tmp_path, capsys) -> None:
    train, dev = labelled_by_id(tmp_path / "train.jsonl", 16, 0), labelled_by_id(tmp_path / "dev.jsonl", 8, 1)
    code = main(["finetune", "--task", "classify", "--train", str(train), "--validation", str(dev), "--labels", labels,
                 *QUICK, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(said) and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()


def test_labels_for_data_whose_labels_are_names_already_are_refused(tmp_path, capsys) -> None:
    assert main(["finetune", "--task", "classify", "--labels", "negative,positive", "--synthetic-size", "16", *QUICK,
                 "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the labels of the built-in task are bad, good" in err


def test_a_label_reads_as_a_class_id_only_where_the_classes_are_names() -> None:
    tokenizer = Tokenizer.train_wordpiece(["a b c"], vocab_size=50, min_frequency=1)
    words = Classification(tokenizer, 16, ("negative", "positive"))
    assert [words.class_of(label) for label in ("positive", "0", 1)] == ["positive", "negative", "positive"]
    with pytest.raises(PLMError, match="'2' is not one of the task's labels \\(negative, positive, or their ids 0 "):
        words.class_of("2")
    stars = Classification(tokenizer, 16, ("1", "2", "3"))  # "1" is the first class's name, not the id of the second
    assert stars.class_of("1") == "1"
    with pytest.raises(PLMError):
        stars.class_of("0")


@pytest.mark.skipif(not (SHARED_DATA / "sst-2").is_dir(), reason="SST-2 is in the shared data folder only")
def test_the_fine_tuning_page_names_the_classes_sst2_writes_as_its_predictions_show_them() -> None:
    page = (ROOT / "docs" / "finetuning.md").read_text(encoding="utf-8")
    trained = shlex.split(next(line for line in page.splitlines()
                               if line.startswith("plm finetune") and "--out runs/sst2" in line))
    names = trained[trained.index("--labels") + 1].split(",")
    shown = json.loads(re.search(r'# \{.*"prediction": "(\w+)", "probabilities": (\{[^}]*\})', page).group(2))
    assert list(shown) == names
    dev = read_examples("classify", SHARED_DATA / "sst-2" / "dev.tsv")
    assert task_labels("classify", dev) == ("0", "1")  # what --labels names
