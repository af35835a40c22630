"""plm elmo probe: the per-layer accuracies of the library's probes, as a table and as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import plm
from plm.apps.elmo_probes import probe_pos, probe_wsd, read_conll_column, read_sense_tagged
from plm.cli.main import main


@pytest.fixture(scope="module")
def bilm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("elmo") / "model"
    plm.save(plm.from_preset("elmo-micro", softmax=False), directory)
    return directory


def test_the_pos_probe_reports_every_layer_and_the_mix(bilm: Path, tmp_path: Path, capsys) -> None:
    conll = tmp_path / "pos.conll"
    conll.write_text("The DT\ncat NN\nsat VBD\n\nA DT\ndog NN\nran VBD\n\nThe DT\nbird NN\nsang VBD\n")
    out = tmp_path / "pos.json"
    assert main(["elmo", "probe", "pos", "--model", str(bilm), "--train", str(conll), "--test", str(conll),
                 "--epochs", "5", "--json", str(out), "--device", "cpu"]) == 0
    accuracy = json.loads(out.read_text())
    sentences = read_conll_column(conll, 2)
    assert accuracy == pytest.approx(probe_pos(plm.load(bilm), sentences, sentences, epochs=5))  # seeded: the same
    assert set(accuracy) == {"token", "lstm 1", "lstm 2", "mix"}
    assert "part-of-speech accuracy" in capsys.readouterr().out


def test_the_wsd_probe_prints_what_the_library_computes(bilm: Path, tmp_path: Path, capsys) -> None:
    train, test, first = tmp_path / "train.txt", tmp_path / "test.txt", tmp_path / "first.txt"
    train.write_text("the bank|shore of the river\na bank|money loan\n")
    test.write_text("my bank|money account\non the river bank|shore\na plant|flora grows\nthe bass|fish swims\n")
    first.write_text("plant flora\n")
    out = tmp_path / "wsd.json"
    assert main(["elmo", "probe", "wsd", "--model", str(bilm), "--train", str(train), "--test", str(test),
                 "--first-senses", str(first), "--json", str(out), "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    expected = probe_wsd(plm.load(bilm), read_sense_tagged(train), read_sense_tagged(test), {"plant": "flora"})
    written = json.loads(out.read_text())
    assert set(written) == {"token", "lstm 1", "lstm 2"}
    for name, score in expected.items():  # the bass is unanswered, the plant takes its first sense
        assert written[name] == pytest.approx({"precision": score.precision, "recall": score.recall, "f1": score.f1,
                                               "correct": score.correct, "answered": 3, "instances": 4,
                                               "first_sense": 1})
        assert f"  {name:<8}  {score.precision:>9.4f}  {score.recall:>7.4f}  {score.f1:>7.4f}  3 of 4\n" in printed
    assert "4 tagged words, 1 of them (lemmas unseen in training) answered by their first sense" in printed
