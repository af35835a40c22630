"""ALBERT's intrinsic evaluation: a head trained for one pair task scored on the other's pairs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import plm
from plm.apps.head_accuracy import head_accuracies
from plm.data.corpus import read_corpus
from plm.data.prepared import PreparedSplit
from plm.objectives.pairs import IN_ORDER, PairExamples
from plm.tokenization.tokenizer import Tokenizer
from tests.conftest import synthetic_text


@pytest.fixture(scope="module")
def text(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pairs") / "held-out.txt"
    path.write_text(synthetic_text(paragraphs=30, seed=3), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tokenizer(text: Path) -> Tokenizer:
    return Tokenizer.train_wordpiece(text.read_text().splitlines(), vocab_size=200, min_frequency=1)


def encoder(tokenizer: Tokenizer, heads: tuple[str, ...]) -> plm.models.Encoder:
    torch.manual_seed(0)
    return plm.from_preset("bert-micro", vocab_size=len(tokenizer), pretraining_heads=heads).eval()


def test_an_nsp_head_that_always_says_is_next_scores_the_share_of_in_order_sop_pairs(text, tokenizer) -> None:
    model = encoder(tokenizer, ("mlm", "nsp"))
    with torch.no_grad():  # "IsNext" (0) whatever the pair: in-order SOP pairs (0) are right, swapped ones wrong
        model.pair_head.classifier.bias.copy_(torch.tensor([50.0, -50.0]))
    result = head_accuracies(model, tokenizer, text, "sop", max_length=64)
    split = PreparedSplit.from_documents(read_corpus([text], [text]).validation, tokenizer)
    labels = [example.label for example in PairExamples(split, tokenizer, "sop", 64).in_order(seed=0)]
    assert result.pair_head == "nsp" and result.examples == len(labels)
    assert result.pair == pytest.approx(labels.count(IN_ORDER) / len(labels))
    assert 0 <= result.mlm <= 1


def test_a_model_without_a_pair_head_is_reported_as_such(text, tokenizer, capsys) -> None:
    result = head_accuracies(encoder(tokenizer, ("mlm",)), tokenizer, text, "nsp", max_length=64)
    assert result.pair is None and result.pair_head is None
    assert str(result).endswith("no pair head to score on nsp pairs")
    with pytest.raises(plm.PLMError, match="has no masked-LM head"):
        head_accuracies(encoder(tokenizer, ()), tokenizer, text, "sop")


def test_the_table_5_script_scores_each_trained_head_on_both_tasks(tmp_path: Path) -> None:
    """examples/pretraining/albert-table5.sh at 2 steps of a micro model: its four cells are the four pairings."""
    import json
    import os
    import subprocess
    import sys

    data = tmp_path / "data"
    data.mkdir()
    (data / "valid.txt").write_text(synthetic_text(paragraphs=80, seed=1), encoding="utf-8")
    (data / "test.txt").write_text(synthetic_text(paragraphs=30, seed=2), encoding="utf-8")
    script = Path(__file__).parents[2] / "examples" / "pretraining" / "albert-table5.sh"
    environment = {**os.environ, "STEPS": "2", "MODEL": "albert-micro", "OUT": str(tmp_path / "runs"),
                   "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}  # this plm and python
    table = subprocess.run([str(script), str(data)], env=environment, capture_output=True, text=True, check=True)
    rows = table.stdout.splitlines()[2:]
    assert [row.split("|")[1].strip() for row in rows] == ["MLM + NSP", "MLM + SOP"]
    for row, trained in zip(rows, ("nsp", "sop")):
        cells = [cell.strip() for cell in row.split("|")[2:4]]
        for cell, task in zip(cells, ("nsp", "sop")):
            scored = json.loads((tmp_path / "runs" / f"{trained}-on-{task}.json").read_text())
            assert (scored["pair_head"], scored["task"]) == (trained, task)
            assert cell == f"{scored['accuracy_' + task]:.1%}"


def test_eval_pairs_on_a_runs_validation_file_gives_the_accuracies_the_run_logged(tmp_path: Path) -> None:
    """The examples are built as the run's validation built them: at its block size (once 128 whatever the run's),
    under the key the run logs them (val_ less)."""
    import json

    from plm.cli.main import main

    train, validation = tmp_path / "train.txt", tmp_path / "validation.txt"
    train.write_text(synthetic_text(paragraphs=60, seed=1), encoding="utf-8")
    validation.write_text(synthetic_text(paragraphs=20, seed=2), encoding="utf-8")
    run = tmp_path / "run"
    assert main(["pretrain", "--model", "bert-micro", "--train", str(train), "--validation", str(validation),
                 "--vocab-size", "300", "--block-size", "32", "--batch-size", "4", "--steps", "2", "--warmup", "1",
                 "--precision", "fp32", "--no-progress", "--device", "cpu", "--out", str(run)]) == 0
    logged = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert main(["eval", "pairs", "--model", str(run), str(validation), "--pairs", "nsp", "--no-progress", "--json",
                 str(tmp_path / "pairs.json")]) == 0
    scored = json.loads((tmp_path / "pairs.json").read_text())
    assert scored["accuracy_nsp"] == pytest.approx(logged["val_accuracy_nsp"], abs=1e-9)
    assert scored["accuracy_mlm"] == pytest.approx(logged["val_accuracy_mlm"], abs=1e-9)
