"""plm pretrain checks every flag and its run directory before it writes anything."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from plm.cli.main import main
from tests.conftest import synthetic_text

QUICK = ["--model", "gpt2-micro", "--vocab-size", "300", "--block-size", "32", "--batch-size", "4",
         "--no-progress", "--device", "cpu"]


def snapshot(path: Path) -> dict[str, str]:
    """Every file under ``path`` with a hash of its bytes: equal snapshots, nothing written."""
    if not path.exists():
        return {}
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.rglob("*"))
            if p.is_file()}


def pretrain(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str]:
    code = main(["pretrain", *argv])
    return code, capsys.readouterr().err


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("finished")
    text = root / "train.txt"
    text.write_text(synthetic_text(), encoding="utf-8")
    assert main(["pretrain", *QUICK, "--steps", "2", "--train", str(text), "--out", str(root / "run")]) == 0
    return root / "run", text


BAD_FLAGS = {
    "dropout 1": (["--dropout", "1"], "--dropout must be in [0, 1), got 1.0"),
    "dropout negative": (["--dropout", "-0.1"], "--dropout must be in [0, 1), got -0.1"),
    "lr nan": (["--lr", "nan"], "--lr must be a finite number >= 0, got nan"),
    "lr inf": (["--lr", "inf"], "--lr must be a finite number >= 0, got inf"),
    "lr negative": (["--lr", "-0.001"], "--lr must be a finite number >= 0, got -0.001"),
    "lr zero": (["--lr", "0"], "--lr must be above 0"),
    "warmup negative": (["--warmup", "-5"], "--warmup must be >= 0, got -5"),
    "min-lr above lr": (["--lr", "1e-4", "--min-lr", "1e-3"], "--min-lr 0.001 is above --lr 0.0001"),
    "betas": (["--betas", "0.9", "1.0"], "--betas must be two numbers in [0, 1), got 0.9 1.0"),
    "eps": (["--eps", "0"], "--eps must be a finite number above 0, got 0.0"),
    "whole word for gpt": (["--whole-word"], "--whole-word chooses how a masked-LM objective masks; clm (gpt)"),
    "max-ngram for gpt": (["--max-ngram", "3"],
                          "--max-ngram chooses how a masked-LM objective masks; clm (gpt)"),
    "mask ratios for gpt": (["--mask-ratios", "1,0,0"], "--mask-ratios chooses how a masked-LM objective masks"),
    "mask ratios not 100": (["--model", "bert-micro", "--mask-ratios", "0.8,0.1,0.2"],
                            "the mask ratios are three shares of the selected tokens ([MASK], random, unchanged) "
                            "that add up to 1, got (0.8, 0.1, 0.2)"),
    "objective for gpt": (["--objective", "mlm"], "--objective mlm does not fit a gpt model; it trains with clm"),
    "block size": (["--block-size", "100"], "--block-size 100 exceeds the model's context of 64 tokens"),
}


@pytest.mark.parametrize("case", BAD_FLAGS)
def test_a_bad_flag_is_one_line_exit_2_and_nothing_written(case: str, text_file: Path, tmp_path: Path, capsys) -> None:
    flags, message = BAD_FLAGS[case]
    out = tmp_path / "run"
    code, err = pretrain(capsys, *QUICK, "--train", str(text_file), "--out", str(out), *flags)
    assert code == 2
    assert err == f"plm pretrain: error: {message}\n" or (message in err and err.count("\n") == 1), err
    assert message in err
    assert not out.exists()


def test_mask_ratios_in_percent_are_refused_as_the_fractions_every_rate_is(text_file: Path, tmp_path: Path,
                                                                           capsys) -> None:
    # --mask-ratios once took percentages (80,10,10) where run.json held fractions.
    with pytest.raises(SystemExit) as stop:
        pretrain(capsys, *QUICK, "--model", "bert-micro", "--train", str(text_file), "--out", str(tmp_path / "run"),
                 "--mask-ratios", "80,10,10")
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1, err
    assert "three fractions that add up to 1 (0.8,0.1,0.1), not percentages: got '80,10,10'" in err
    assert not (tmp_path / "run").exists()


def test_out_under_a_regular_file_is_refused(text_file: Path, capsys) -> None:
    code, err = pretrain(capsys, *QUICK, "--train", str(text_file), "--out", str(text_file / "run"))
    assert code == 2 and err.count("\n") == 1
    assert f"{text_file} is a file, not a directory" in err


def test_a_non_empty_out_that_is_no_run_is_refused_unless_overwrite(text_file: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "notes"
    out.mkdir()
    (out / "thesis.tex").write_text("my work")
    before = snapshot(out)
    code, err = pretrain(capsys, *QUICK, "--steps", "1", "--train", str(text_file), "--out", str(out))
    assert code == 2 and "is not empty and holds no plm run; choose another --out or pass --overwrite" in err
    assert snapshot(out) == before

    code, _ = pretrain(capsys, *QUICK, "--steps", "1", "--train", str(text_file), "--out", str(out), "--overwrite")
    assert code == 0 and (out / "checkpoint").is_dir() and (out / "thesis.tex").read_text() == "my work"


def test_a_finished_run_is_never_replaced_without_overwrite(finished_run, capsys) -> None:
    run, text = finished_run
    before = snapshot(run)
    code, err = pretrain(capsys, *QUICK, "--steps", "2", "--train", str(text), "--out", str(run))
    assert code == 2
    assert "holds a training run already; pass --resume to continue it or --overwrite to start again" in err
    assert snapshot(run) == before  # checkpoint and metrics.jsonl untouched


def test_resume_needs_a_checkpoint(tmp_path: Path, capsys) -> None:
    code, err = pretrain(capsys, *QUICK, "--out", str(tmp_path / "none"), "--resume")
    assert code == 2 and "no checkpoint to resume from" in err
    assert not (tmp_path / "none").exists()


def test_too_little_text_for_one_batch_warns_in_one_line(tmp_path: Path, capsys) -> None:
    short = tmp_path / "short.txt"
    short.write_text("The cat reads the book. A dog sees a value.\n\nThe list sorts the data.\n\n" * 20)
    code, err = pretrain(capsys, *QUICK, "--batch-size", "32", "--steps", "1", "--warmup", "0", "--train", str(short),
                         "--validation", str(short), "--out", str(tmp_path / "run"))
    assert code == 0
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1
    assert warnings[0].startswith("plm: warning: a batch of 32 x 32 tokens is more than the ")
    assert warnings[0].endswith("training tokens: blocks repeat within a step")


def test_a_run_stopped_before_its_first_checkpoint_is_not_replaced_without_overwrite(text_file: Path, tmp_path: Path,
                                                                                     capsys) -> None:
    """A run directory that holds only its definition (the run stopped before its first step) is a run still: a new
    run there needs --overwrite, as any run does."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text('{"command": "pretrain", "flags": {}, "data": {}}')
    before = snapshot(out)
    code, err = pretrain(capsys, *QUICK, "--steps", "1", "--train", str(text_file), "--out", str(out))
    assert code == 2 and "holds a training run already" in err and "--overwrite" in err
    assert snapshot(out) == before
