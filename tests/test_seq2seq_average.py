"""Issue 12: training for a number of minutes, keeping the last N checkpoints, and averaging them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plm.cli.main import main
from plm.data.dates import date_pairs

PAIRS = date_pairs(24, seed=0)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 pairs of the dates task as --src/--tgt files."""
    folder = tmp_path_factory.mktemp("dates")
    (folder / "src.txt").write_text("".join(p.source + "\n" for p in PAIRS), encoding="utf-8")
    (folder / "tgt.txt").write_text("".join(p.target + "\n" for p in PAIRS), encoding="utf-8")
    return folder


def train_args(pairs: Path, out: Path, *flags: str) -> list[str]:
    """plm seq2seq train on the tiny pairs with the smallest Transformer; no translation at evaluations."""
    return ["seq2seq", "train", "--model", "transformer-micro", "--src", str(pairs / "src.txt"), "--tgt",
            str(pairs / "tgt.txt"), "--vocab-size", "300", "--max-tokens", "256", "--metric-examples", "0",
            "--out", str(out), "--no-progress", "--device", "cpu", *flags]


def test_minutes_stop_the_run_at_the_first_step_past_the_limit(pairs: Path, tmp_path: Path, capsys) -> None:
    minutes = 0.05  # 3 s: a few steps on a busy CPU, far from 1000
    assert main(train_args(pairs, tmp_path / "run", "--steps", "1000", "--minutes", str(minutes), "--log-every", "1")) == 0
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["step"] == len(lines) < 1000  # one line per step: it stopped early
    assert all(line["elapsed"] < minutes * 60 for line in lines[:-1])
    assert lines[-1]["elapsed"] >= minutes * 60
    state = json.loads((tmp_path / "run" / "checkpoint" / "trainer_state.json").read_text())
    assert state["step"] == lines[-1]["step"]  # the last step was saved


@pytest.mark.parametrize("command", [["seq2seq", "train"], ["pretrain"]])
@pytest.mark.parametrize("value", ["0", "-1", "nan", "ten"])
def test_a_bad_number_of_minutes_is_one_line_and_exit_2(tmp_path: Path, capsys, command, value) -> None:
    with pytest.raises(SystemExit) as exit_info:  # argparse's error, one line
        main([*command, "--minutes", value, "--out", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--minutes" in err
    assert not (tmp_path / "run").exists()
