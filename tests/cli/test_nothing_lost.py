"""Nothing is lost: no command replaces a run or a tokenizer without --overwrite, every run plm writes resumes with
--resume alone (from any working directory), and a resume that cannot go on says why in one line."""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from plm.cli.main import main
from plm.cli.run_definition import RunFlags, saved_flags
from plm.tokenization.tokenizer import Tokenizer
from tests.training.test_runs import locked_by_another_process, logged, signalled_at_step

TINY = ["--model", "gpt2-micro", "--vocab-size", "300", "--block-size", "16", "--batch-size", "2",
        "--no-progress", "--device", "cpu"]
# Batches of 1,024 tokens: the demo evaluates on all of the embedded corpus' validation text before training and
# at every step of a short run, in far fewer (and so faster) forward passes than in batches of 2 x 16 tokens.
DEMO = ["demo", "--model", "gpt2-micro", "--vocab-size", "300", "--block-size", "64", "--batch-size", "16",
        "--device", "cpu"]


def run_main(capsys: pytest.CaptureFixture, *args: object) -> tuple[int, str, str]:
    code = main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def snapshot(path: Path) -> dict[str, str]:
    """Every file under ``path`` with a hash of its bytes: equal snapshots, nothing written."""
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.rglob("*"))
            if p.is_file() and p.name != ".lock"}


@pytest.fixture
def finished_run(tmp_path: Path, text_file: Path) -> Path:
    out = tmp_path / "run"
    assert main(["pretrain", *TINY, "--steps", "2", "--warmup", "1", "--train", str(text_file),
                 "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A complete demo run of 4 steps on the embedded corpus, left alone: the tests copy it or compare with it."""
    out = tmp_path_factory.mktemp("demo") / "straight"
    assert main([str(arg) for arg in (*DEMO, "--steps", 4, "--out", out)]) == 0
    return out


# plm demo -----------------------------------------------------------------------------------------------


def test_the_demo_keeps_a_run_it_did_not_start_unless_overwrite(finished_run: Path,
                                                                capsys: pytest.CaptureFixture) -> None:
    before = snapshot(finished_run)
    code, _, err = run_main(capsys, *DEMO, "--steps", 1, "--out", finished_run)
    assert code == 2 and err.count("\n") == 1
    assert f"{finished_run} holds a run that plm demo did not start" in err and "--overwrite" in err
    assert snapshot(finished_run) == before

    code, _, err = run_main(capsys, *DEMO, "--steps", 1, "--out", finished_run, "--overwrite")
    assert code == 0, err
    assert json.loads((finished_run / "run.json").read_text())["started_by"] == "plm demo"
    assert logged(finished_run, "step") == [1]


def test_a_second_demo_continues_its_own_run(demo_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "demo"
    shutil.copytree(demo_run, out, ignore=shutil.ignore_patterns(".lock"))
    before = snapshot(out)
    code, printed, err = run_main(capsys, "demo", "--out", out)  # make demo again: the run is complete
    assert code == 0, err
    assert f"{out}: the run was complete already, at step 4 of 4" in err
    assert "validation perplexity after training" in printed and "greedy" in printed
    assert snapshot(out) == before

    code, _, err = run_main(capsys, "demo", "--steps", 5, "--out", out)
    assert code == 0, err
    assert logged(out, "step") == [1, 2, 3, 4, 5]


def test_plm_pretrain_resume_continues_a_stopped_demo_exactly(demo_run: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture) -> None:
    with signalled_at_step(2):
        code, _, err = run_main(capsys, *DEMO, "--steps", 4, "--out", tmp_path / "stopped")
    assert code == 143 and "stopped by SIGTERM at step 2" in err
    assert json.loads((tmp_path / "stopped" / "run.json").read_text())["command"] == "pretrain"

    code, _, err = run_main(capsys, "pretrain", "--out", tmp_path / "stopped", "--resume")
    assert code == 0, err
    assert "warning" not in err  # the demo's run.json says what the run is: not "a run of an older plm"
    assert logged(tmp_path / "stopped") == logged(demo_run)


# plm tokenizer train -----------------------------------------------------------------------------------


def test_tokenizer_train_keeps_a_tokenizer_unless_overwrite(finished_run: Path, text_file: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture) -> None:
    train = ["tokenizer", "train", text_file, "--vocab-size", 300]
    assert run_main(capsys, *train, "--out", tmp_path / "tok")[0] == 0
    for out in (tmp_path / "tok", finished_run / "checkpoint"):  # a tokenizer, and a model's
        before = snapshot(out)
        code, _, err = run_main(capsys, *train, "--kind", "wordpiece", "--out", out)
        assert code == 2 and err.count("\n") == 1
        assert f"{out}: the directory is not empty; choose another --out or pass --overwrite" in err
        assert snapshot(out) == before

    code, _, err = run_main(capsys, *train, "--kind", "wordpiece", "--out", tmp_path / "tok", "--overwrite")
    assert code == 0, err
    assert Tokenizer.load(tmp_path / "tok").mask_id is not None  # BERT's, with [MASK]


def test_a_tokenizer_that_fails_to_train_leaves_the_old_one(text_file: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    train = ["tokenizer", "train", text_file, "--vocab-size", 300, "--out", tmp_path / "tok"]
    assert run_main(capsys, *train)[0] == 0
    before = snapshot(tmp_path / "tok")

    def interrupted(*args: object, **kwargs: object) -> Tokenizer:
        raise KeyboardInterrupt

    monkeypatch.setattr(Tokenizer, "train_bpe", interrupted)
    assert run_main(capsys, *train, "--overwrite")[0] == 130
    assert snapshot(tmp_path / "tok") == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["tok", "train.txt"]  # no half-written staging


# Resuming from another working directory -----------------------------------------------------------------


def test_a_run_started_with_relative_paths_resumes_from_another_directory(tmp_path: Path, text_file: Path,
                                                                          capsys: pytest.CaptureFixture,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    start, elsewhere = tmp_path / "a", tmp_path / "b"
    start.mkdir()
    elsewhere.mkdir()
    shutil.copy(text_file, start / "train.txt")
    monkeypatch.chdir(start)
    assert main(["pretrain", *TINY, "--steps", "2", "--warmup", "1", "--train", "train.txt", "--out", "first"]) == 0
    assert main(["pretrain", *TINY[2:], "--model", "first/checkpoint", "--tokenizer", "first/tokenizer",
                 "--steps", "4", "--warmup", "1", "--train", "train.txt", "--out", "../run"]) == 0
    saved = json.loads((tmp_path / "run" / "run.json").read_text())
    assert saved["flags"]["train"] == [str(start / "train.txt")]
    assert saved["flags"]["model"] == str(start / "first" / "checkpoint")
    assert saved["flags"]["tokenizer"] == str(start / "first" / "tokenizer")
    assert list(saved["data"]["train"]) == [str(start / "train.txt")]

    monkeypatch.chdir(elsewhere)
    code, _, err = run_main(capsys, "pretrain", "--out", "../run", "--resume", "--steps", 6)
    assert code == 0, err
    assert logged(tmp_path / "run", "step")[-1] == 6


def test_saved_flags_make_paths_absolute_but_keep_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for directory in ("tok", "gpt2-micro", "runs/gpt"):
        (tmp_path / directory).mkdir(parents=True)
    flags = RunFlags("pretrain", data=("train",), paths=("model", "tokenizer"))
    given = {"train": ["a.txt"], "tokenizer": "tok"}
    saved = saved_flags(argparse.Namespace(**given, model="runs/gpt"), flags)
    assert saved == {"train": [str(tmp_path / "a.txt")], "tokenizer": str(tmp_path / "tok"),
                     "model": str(tmp_path / "runs" / "gpt")}
    for name in ("gpt2-micro", "gpt2", "openai-community/gpt2"):  # a preset (beside a directory so named), a family,
        assert saved_flags(argparse.Namespace(**given, model=name), flags)["model"] == name  # a Hub id


# plm finetune --resume --steps ----------------------------------------------------------------------------


def test_a_finished_finetune_run_is_extended_with_steps(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """4 steps (an epoch of 4 batches), then --steps 8: steps 5-8 take the rates of the schedule laid out over 8."""
    out = tmp_path / "run"
    code, _, err = run_main(capsys, "finetune", "--task", "classify", "--synthetic-size", 64, "--batch-size", 16,
                            "--epochs", 1, "--warmup-fraction", 0, "--lr", "3e-3", "--no-progress", "--device", "cpu",
                            "--out", out)
    assert code == 0, err
    assert logged(out, "lr") == pytest.approx([3e-3, 2e-3, 1e-3, 0.0])

    code, _, err = run_main(capsys, "finetune", "--out", out, "--resume", "--steps", 8)
    assert code == 0, err
    assert "extending the run from 4 to 8 steps" in err
    assert logged(out, "lr") == pytest.approx([3e-3, 2e-3, 1e-3, 0.0] + [3e-3 * (7 - step) / 7 for step in range(4, 8)])
    assert json.loads((out / "result.json").read_text())["steps"] == 8
    assert json.loads((out / "run.json").read_text())["flags"]["steps"] == 8

    before = snapshot(out)
    code, _, err = run_main(capsys, "finetune", "--out", out, "--resume")
    assert code == 0 and f"{out}: the run was complete already, at step 8" in err
    assert snapshot(out) == before

    code, _, err = run_main(capsys, "finetune", "--out", out, "--resume", "--epochs", 4)
    assert code == 2 and "drop --epochs; --steps N extends it" in err


# Resume messages -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["pretrain", "finetune"])
def test_resuming_where_there_is_no_run_says_so_in_one_line(command: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "empty").mkdir()
    for out in (tmp_path / "empty", tmp_path / "nothere"):
        code, _, err = run_main(capsys, command, "--out", out, "--resume")
        assert code == 2
        assert err == f"plm {command}: error: {out}: no run there, so no checkpoint to resume from (drop --resume " \
            "to start a new run)\n"
    assert not (tmp_path / "nothere").exists()


def test_resuming_a_run_before_its_first_checkpoint_names_the_process_training_it(
        finished_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    starting, training = tmp_path / "starting", tmp_path / "training"
    starting.mkdir()  # a run still building its tokenizer: nothing but its lock yet
    shutil.copytree(finished_run, training, ignore=shutil.ignore_patterns("checkpoint", ".lock"))  # no save yet
    for out in (starting, training):
        with locked_by_another_process(out) as pid:
            code, _, err = run_main(capsys, "pretrain", "--out", out, "--resume")
        assert code == 2 and err.count("\n") == 1
        assert f"{out}: in use by process {pid} (python -c " in err


def test_resuming_a_complete_run_says_so_and_writes_nothing(finished_run: Path, capsys: pytest.CaptureFixture) -> None:
    before = snapshot(finished_run)
    times = {path: path.stat().st_mtime_ns for path in finished_run.iterdir()
             if path.is_file() and path.name != ".lock"}
    code, printed, err = run_main(capsys, "pretrain", "--out", finished_run, "--resume")
    assert code == 0
    assert err == f"{finished_run}: the run was complete already, at step 2 of 2; nothing trained (resume it with " \
        "more steps to extend it)\n"
    assert printed.startswith("step 2: validation loss ")  # what the run logged at its last step
    assert snapshot(finished_run) == before
    assert {path: path.stat().st_mtime_ns for path in times} == times  # run.json and the rest not written again


# A damaged run: refused before anything is read from it or written --------------------------------------------


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 2-step run that the tests below copy and damage."""
    folder = tmp_path_factory.mktemp("saved")
    (folder / "text.txt").write_text("the cat sat on the mat. the dog sat on the log.\n" * 200, encoding="utf-8")
    out = folder / "run"
    assert main(["pretrain", *TINY, "--steps", "2", "--warmup", "1", "--train", str(folder / "text.txt"),
                 "--out", str(out)]) == 0
    return out


def damaged_copy(saved_run: Path, tmp_path: Path, name: str, edit) -> Path:
    """A copy of ``saved_run`` whose JSON file ``name`` went through ``edit`` (which may return a replacement)."""
    out = tmp_path / "run"
    shutil.copytree(saved_run, out)
    path = out / name
    value = json.loads(path.read_text())
    replaced = edit(value)
    path.write_text(json.dumps(value if replaced is None else replaced))
    return out


def resuming_is_refused(out: Path, message: str, capsys: pytest.CaptureFixture) -> None:
    """``--resume`` of the run in ``out`` fails in one line with ``out/message`` and writes nothing."""
    before = snapshot(out)
    code, _, err = run_main(capsys, "pretrain", "--out", out, "--resume", "--steps", 4)
    assert code == 2 and err.count("\n") == 1
    assert f"{out}/{message}" in err
    assert snapshot(out) == before


@pytest.mark.parametrize(("edit", "message"), [
    (lambda state: state.update(step=-5), "step must be a whole number >= 0, got -5"),
    (lambda state: state.update(step=1.5), "step must be a whole number >= 0, got 1.5"),
    (lambda state: state.update(step="two"), 'step must be a whole number >= 0, got "two"'),
    (lambda state: {name: value for name, value in state.items() if name != "step"}, "no step"),
    (lambda state: [1], "not a trainer state"),
    (lambda state: state.update(micro_batches="x"), 'micro_batches must be a whole number >= 1, got "x"'),
    (lambda state: state.update(decay_start=[1]), "decay_start must be null or [step, learning rate]"),
])
def test_a_damaged_trainer_state_is_refused_and_the_run_left_as_it_was(edit, message: str, saved_run: Path,
                                                                      tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    # A step of -5 once cut the run's whole log back to nothing and rewrote its definition before failing.
    resuming_is_refused(damaged_copy(saved_run, tmp_path, "checkpoint/trainer_state.json", edit),
                        f"checkpoint/trainer_state.json: {message}", capsys)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda run: [1, 2], "not a run definition"),
    (lambda run: run.update(flags=[1]), "not a run definition"),
    (lambda run: run["flags"].update(steps="many"), '--steps is saved as "many"'),
    (lambda run: run["flags"].update(lr="fast"), '--lr is saved as "fast"'),
    (lambda run: run["flags"].update(train="one.txt"), '--train is saved as "one.txt"'),  # a path, not a list
    (lambda run: run["flags"].update(mask_ratios=[0.8, 0.2]), "--mask-ratios is saved as [0.8, 0.2]"),
    (lambda run: run["flags"].update(precision="fp8"), '--precision is saved as "fp8"'),
    (lambda run: run["flags"].update(no_progress="yes"), '--no-progress is saved as "yes"'),
    (lambda run: run.update(data=[1]), "its data is not the files by flag"),
    (lambda run: run["data"].update(train="one.txt"), "its data is not the files by flag"),  # not {path: digest}
])
def test_a_damaged_run_definition_is_refused_naming_the_flag(edit, message: str, saved_run: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture) -> None:
    # A path saved where a list of paths belongs was once read letter by letter: "/" walked the whole disk.
    resuming_is_refused(damaged_copy(saved_run, tmp_path, "run.json", edit), f"run.json: {message}", capsys)


def test_a_run_definition_as_plm_writes_it_resumes(saved_run: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture) -> None:
    out = damaged_copy(saved_run, tmp_path, "run.json", lambda run: None)  # every kind of flag, as saved
    code, _, _ = run_main(capsys, "pretrain", "--out", out, "--resume", "--steps", 3)
    assert code == 0 and logged(out)[-1]["step"] == 3


def test_a_damaged_finetune_result_is_refused(tmp_path: Path) -> None:
    from plm.errors import PLMError
    from plm.tasks.finetune import read_result

    path = tmp_path / "result.json"
    for damaged in ([], {"steps": "9", "accuracy": 0.5}, {"steps": 9, "accuracy": "high"}, {"accuracy": 0.5}):
        path.write_text(json.dumps(damaged))
        with pytest.raises(PLMError, match=f"{path}: not the result of a finished run"):
            read_result(path, "accuracy")
    path.write_text(json.dumps({"steps": 9, "accuracy": 0.5, "lr": 1e-4}))
    assert read_result(path, "accuracy")["steps"] == 9


def test_a_run_whose_data_file_is_gone_is_refused_naming_it(saved_run: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture) -> None:
    """The run's --train file moved away: refused in one line that names the flag and the file, before the
    data is read or anything written (not the reader's error, nor a run on without it)."""
    gone = tmp_path / "moved.txt"

    def move(run):
        digest = next(iter(run["data"]["train"].values()))
        run["data"]["train"] = {str(gone): digest}
        run["flags"]["train"] = [str(gone)]

    out = damaged_copy(saved_run, tmp_path, "run.json", move)
    before = snapshot(out)
    code, _, err = run_main(capsys, "pretrain", "--out", out, "--resume", "--steps", 4)
    assert code == 2 and err.count("\n") == 1
    assert f"--train {gone}: the run's data file is gone" in err
    assert snapshot(out) == before
