"""A run directory keeps its word: ``--resume`` alone continues the run it holds, one process trains in it at a
time, leftovers of interrupted saves go, and learning-rate schedules that cannot work are refused or fitted.

(Runs stopped by SIGKILL or SIGTERM in another process, and resumed bit for bit: tests/training/test_resume.py.)
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from plm.apps.compare import read_spec
from plm.cli.main import main
from plm.errors import PLMError, RunStopped
from plm.models.recipe import Hyperparameters
from plm.storage.atomic_files import staging_directory
from plm.training.pretrain import PretrainSetup, prepare
from plm.training.run_directory import remove_leftovers
from plm.training.trainer import Trainer, TrainingConfig

README = Path(__file__).resolve().parents[2] / "README.md"
TINY = ["--model", "gpt2-micro", "--vocab-size", "300", "--block-size", "16", "--batch-size", "2", "--steps", "4",
        "--eval-every", "2", "--log-every", "1", "--no-progress", "--device", "cpu"]


def run_main(capsys: pytest.CaptureFixture, *args: object) -> tuple[int, str]:
    code = main([str(arg) for arg in args])
    return code, capsys.readouterr().err


def logged(out: Path, key: str | None = None) -> list:
    """The run's metrics lines without their timing (or one key of each)."""
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    if key is not None:
        return [line[key] for line in lines]
    return [{k: v for k, v in line.items() if k not in ("tokens_per_second", "elapsed")} for line in lines]


@contextmanager
def signalled_at_step(step: int, number: int = signal.SIGTERM) -> Iterator[None]:
    """Send this process ``number`` while it logs ``step``: a scheduler's SIGTERM in the middle of a run."""
    log = Trainer.log

    def log_then_signal(trainer: Trainer, metrics: dict[str, float]) -> None:
        log(trainer, metrics)
        if metrics["step"] == step:
            os.kill(os.getpid(), number)

    Trainer.log = log_then_signal
    try:
        yield
    finally:
        Trainer.log = log


@pytest.fixture
def finished_run(tmp_path: Path, text_file: Path) -> Path:
    out = tmp_path / "run"
    assert main(["pretrain", *TINY, "--train", str(text_file), "--out", str(out)]) == 0
    return out


# A run remembers what defines it -----------------------------------------------------------------------


def test_the_readme_resume_line_continues_a_stopped_run_exactly(tmp_path: Path, text_file: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture) -> None:
    line = next(line for line in README.read_text(encoding="utf-8").splitlines()
                if re.match(r"plm pretrain --out \S+ --resume\b", line))
    command = shlex.split(line.split("#")[0])[1:]  # the README's line, without "plm" and its comment
    out = command[command.index("--out") + 1]
    monkeypatch.chdir(tmp_path)
    straight = ["pretrain", *TINY, "--train", str(text_file)]
    assert main([*straight, "--out", "straight"]) == 0
    with signalled_at_step(2):
        code, err = run_main(capsys, *straight, "--out", out)
    assert code == 143 and f"continue with: plm pretrain --out {out} --resume" in err
    assert logged(tmp_path / out, "step") == [1, 2]

    assert main(command) == 0  # none of the model, data, batch or step flags repeated
    assert logged(tmp_path / out) == logged(tmp_path / "straight")


@pytest.mark.parametrize("flag, value", [("--train", "other.txt"), ("--model", "gpt2-mini"),
                                         ("--batch-size", "3"), ("--whole-word", None)])
def test_a_flag_that_contradicts_the_run_is_refused_and_named(flag: str, value: str | None, finished_run: Path,
                                                              capsys: pytest.CaptureFixture) -> None:
    (finished_run.parent / "other.txt").write_text("Some other text.\n", encoding="utf-8")
    before = (finished_run / "checkpoint" / "model.safetensors").read_bytes()
    given = [flag] if value is None else [flag, str(finished_run.parent / value) if flag == "--train" else value]
    code, err = run_main(capsys, "pretrain", "--out", finished_run, "--resume", "--steps", 6, *given)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"plm pretrain: error: {flag} ") and "was started" in err
    assert (finished_run / "checkpoint" / "model.safetensors").read_bytes() == before


def test_steps_device_and_reporting_may_change_on_resume(finished_run: Path, capsys: pytest.CaptureFixture) -> None:
    capsys.readouterr()
    code, err = run_main(capsys, "pretrain", "--out", finished_run, "--resume", "--steps", 60, "--device", "cpu",
                         "--log-every", 2, "--no-progress")
    assert code == 0 and "warmup" not in err  # the run keeps the warmup it started with: nothing is fitted again
    assert json.loads((finished_run / "training_config.json").read_text())["warmup"] == 0
    assert logged(finished_run, "step")[:6] == [1, 2, 3, 4, 6, 8] and logged(finished_run, "step")[-1] == 60
    saved = json.loads((finished_run / "run.json").read_text())
    assert saved["flags"]["steps"] == 60 and saved["flags"]["model"] == "gpt2-micro"  # the next resume goes on to 60


def test_a_data_file_that_changed_is_refused_unless_allowed(finished_run: Path, text_file: Path,
                                                            capsys: pytest.CaptureFixture) -> None:
    text_file.write_text(text_file.read_text(encoding="utf-8") + "\nA paragraph added later.\n", encoding="utf-8")
    code, err = run_main(capsys, "pretrain", "--out", finished_run, "--resume", "--steps", 6)
    assert code == 2 and err.count("\n") == 1
    assert f"--train {text_file}: the file changed since the run started" in err and "--allow-data-change" in err

    assert main(["pretrain", "--out", str(finished_run), "--resume", "--steps", "6", "--allow-data-change"]) == 0
    digest = hashlib.sha256(text_file.read_bytes()).hexdigest()
    assert json.loads((finished_run / "run.json").read_text())["data"]["train"] == {str(text_file): digest}


def test_a_run_resumed_by_another_command_is_refused(finished_run: Path, capsys: pytest.CaptureFixture) -> None:
    code, err = run_main(capsys, "seq2seq", "train", "--out", finished_run, "--resume")
    assert code == 2 and f"{finished_run}: a run of plm pretrain, not of plm seq2seq train" in err


def test_finetune_needs_a_task_but_for_a_resume(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    code, err = run_main(capsys, "finetune", "--out", tmp_path / "out")
    assert code == 2 and "the following arguments are required: --task" in err
    assert not (tmp_path / "out").exists()


# Preemption --------------------------------------------------------------------------------------------


def test_sigint_saves_the_step_reached_and_exits_130(finished_run: Path, capsys: pytest.CaptureFixture) -> None:
    with signalled_at_step(5, signal.SIGINT):
        code, err = run_main(capsys, "pretrain", "--out", finished_run, "--resume", "--steps", 8, "--save-every", 1000)
    assert code == 130 and "stopped by SIGINT at step 5" in err
    assert json.loads((finished_run / "checkpoint" / "trainer_state.json").read_text())["step"] == 5


def test_a_second_signal_during_the_save_does_not_interrupt_it(tmp_path: Path, text_file: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    setup = PretrainSetup(model="gpt2-micro", train_files=(str(text_file),), vocab_size=300, block_size=16,
                          batch_size=2)
    config = TrainingConfig(steps=6, warmup=1, save_every=100, log_every=1, progress=False, device="cpu")
    trainer, _ = prepare(setup, config, tmp_path / "run")
    save = Trainer.save

    def save_signalled_again(self: Trainer) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # recorded, and the save goes on
        save(self)

    monkeypatch.setattr(Trainer, "save", save_signalled_again)
    with signalled_at_step(3), pytest.raises(RunStopped) as stopped:
        trainer.train()
    assert stopped.value.signal_number == signal.SIGTERM
    assert json.loads((tmp_path / "run" / "checkpoint" / "trainer_state.json").read_text())["step"] == 3


def test_a_new_start_removes_what_interrupted_saves_left(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "checkpoint").mkdir(parents=True)
    (run / "metrics.jsonl").write_text("")
    (run / ".lock").write_text("")
    (run / "checkpoints").mkdir()
    kept = {"checkpoint", "checkpoints", "metrics.jsonl", ".lock"}
    litter = [staging_directory(run, ".checkpoint-"), staging_directory(run, ".best-"),
              staging_directory(run / "checkpoints", ".step-"), run / ".checkpoint-previous",
              run / ".metrics.jsonl.x81kd.tmp", staging_directory(run, ".deleted-"),
              staging_directory(run / "checkpoints", ".deleted-")]
    litter[3].mkdir()  # the old checkpoint of a swap whose second rename was done
    litter[4].write_text("{")
    for trash in litter[5:]:  # remove_directory killed between its rename and its rmtree
        (trash / "step-000004").mkdir()
    assert set(remove_leftovers(run)) == set(litter)
    assert {path.name for path in run.iterdir()} == kept
    assert not any((run / "checkpoints").iterdir())


def test_an_interrupted_swap_is_finished_not_deleted(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / ".checkpoint-previous").mkdir(parents=True)  # killed between its two renames: the only checkpoint
    (run / ".checkpoint-previous" / "trainer_state.json").write_text("{}")
    remove_leftovers(run)
    assert (run / "checkpoint" / "trainer_state.json").is_file() and not (run / ".checkpoint-previous").exists()


# One process per run directory -------------------------------------------------------------------------


@contextmanager
def locked_by_another_process(directory: Path) -> Iterator[int]:
    """Hold ``directory``'s run lock from another process; yield its process id."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom plm.training.run_directory import run_lock\n"
         "with run_lock(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(600)", str(directory)],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout.readline() == b"held\n"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("command", [
    ["pretrain", "--overwrite", *TINY],
    ["pretrain", "--resume"],
    ["seq2seq", "train", "--overwrite", "--steps", "2"],
    ["finetune", "--task", "classify", "--synthetic-size", "8", "--overwrite"],
    ["convert", "--model", "{run}/checkpoint", "--overwrite"],
], ids=["pretrain-overwrite", "pretrain-resume", "seq2seq-overwrite", "finetune-overwrite", "convert-overwrite"])
def test_a_run_directory_in_use_refuses_every_other_writer(command: list[str], finished_run: Path,
                                                           capsys: pytest.CaptureFixture) -> None:
    before = sorted(path.name for path in finished_run.iterdir())
    with locked_by_another_process(finished_run) as pid:
        code, err = run_main(capsys, *[arg.replace("{run}", str(finished_run)) for arg in command],
                             "--out", finished_run)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert f"{finished_run}: in use by process {pid} (python -c " in err
    assert sorted(path.name for path in finished_run.iterdir()) == before


def test_a_comparison_in_use_refuses_a_second_one(tmp_path: Path, text_file: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(f'[budget]\nsteps = 2\n[base]\nmodel = "gpt2-micro"\ntrain_files = ["{text_file}"]\n'
                    'vocab_size = 300\nblock_size = 16\nbatch_size = 2\n[[run]]\nname = "a"\n', encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    with locked_by_another_process(out) as pid:
        code, err = run_main(capsys, "compare", spec, "--out", out)
    assert code == 2 and f"in use by process {pid}" in err and not (out / "a").exists()


def test_a_second_process_cannot_replace_or_resume_a_run_in_training(tmp_path: Path, text_file: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-m", "plm.cli.main", "pretrain", *TINY, "--steps", "60",
                              "--save-every", "2", "--train", str(text_file), "--out", str(out)],
                             stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (out / "checkpoint").exists():  # a run that could be resumed
        assert first.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    for second in (["--overwrite", *TINY, "--steps", "5"], ["--resume"]):
        code, err = run_main(capsys, "pretrain", *second, "--out", out)
        assert code == 2 and f"{out}: in use by process {first.pid} (python -m plm.cli.main pretrain " in err
    assert first.wait(timeout=300) == 0, first.stderr.read().decode()[-2000:]
    assert logged(out, "step") == list(range(1, 61))
    assert json.loads((out / "checkpoint" / "trainer_state.json").read_text())["step"] == 60
    assert json.loads((out / "run.json").read_text())["flags"]["steps"] == 60


# Schedules that can work ---------------------------------------------------------------------------------


def test_a_warmup_as_long_as_the_run_is_refused(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    code, err = run_main(capsys, "pretrain", *TINY, "--warmup", 500, "--steps", 50, "--out", tmp_path / "run")
    assert code == 2 and "--warmup 500 is more than --steps 50" in err and not (tmp_path / "run").exists()


def test_the_recipes_warmup_is_fitted_to_a_short_run_and_said(tmp_path: Path, text_file: Path,
                                                               capsys: pytest.CaptureFixture) -> None:
    code, err = run_main(capsys, "pretrain", *TINY, "--steps", 20, "--train", text_file, "--out", tmp_path / "run")
    assert code == 0 and "plm: warning: the recipe's warmup of 100 steps would fill the whole run of 20; " \
        "warming up over 2 steps instead" in err
    assert json.loads((tmp_path / "run" / "training_config.json").read_text())["warmup"] == 2

    config = TrainingConfig(steps=50)
    assert "warmup of 100 steps would fill the whole run of 50; warming up over 5" in config.warmup_note(
        Hyperparameters(warmup=100))
    assert config.with_defaults(Hyperparameters(warmup=100)).warmup == 5
    assert TrainingConfig(steps=101).with_defaults(Hyperparameters(warmup=100)).warmup == 100  # a run it fits
    assert TrainingConfig(steps=101).warmup_note(Hyperparameters(warmup=100)) is None


def test_a_comparison_shrunk_below_its_warmup_is_refused(tmp_path: Path, text_file: Path) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(f'[budget]\nsteps = 6\n[base]\nmodel = "gpt2-micro"\ntrain_files = ["{text_file}"]\n'
                    '[[run]]\nname = "a"\n[[run]]\nname = "b"\nwarmup = 10\n', encoding="utf-8")
    with pytest.raises(PLMError, match=r"run 2 \(b\): warmup 10 is more than the budget's 6 steps"):
        read_spec(spec)


def cosine(start: float, floor: float, done: int, length: int) -> float:
    """A cosine decay from ``start`` to ``floor`` over ``length`` steps, ``done`` of them done (by hand)."""
    return floor + 0.5 * (start - floor) * (1 + math.cos(math.pi * done / length))


def test_extending_a_run_continues_its_decay_from_where_it_is(tmp_path: Path, text_file: Path) -> None:
    setup = PretrainSetup(model="gpt2-micro", train_files=(str(text_file),), vocab_size=300, block_size=16,
                          batch_size=2)
    peak, floor, warmup = 1e-3, 1e-4, 2
    options = dict(lr=peak, min_lr=floor, warmup=warmup, schedule="cosine", log_every=1, eval_every=100,
                   progress=False, device="cpu")
    trainer, _ = prepare(setup, TrainingConfig(steps=8, **options), tmp_path / "run")
    with signalled_at_step(4), pytest.raises(RunStopped):
        trainer.train()
    trainer, _ = prepare(setup, TrainingConfig(steps=12, **options), tmp_path / "run", resume=True)
    trainer.train(resume=True)

    # The first 4 steps on the 8-step layout: warmup, then the decay towards step 8.
    planned = [peak * (i + 1) / warmup if i < warmup else cosine(peak, floor, i - warmup, 8 - 1 - warmup)
               for i in range(8)]
    reached = planned[4]  # what step 5 would have had
    extended = [cosine(reached, floor, i - 4, 12 - 1 - 4) for i in range(4, 12)]
    assert logged(tmp_path / "run", "lr") == pytest.approx(planned[:4] + extended, rel=1e-12)
    assert extended[0] == reached and extended[-1] == pytest.approx(floor)  # no jump, and the floor at the end


def test_extending_a_run_whose_rate_reached_zero_is_refused(capsys: pytest.CaptureFixture, tmp_path: Path,
                                                            text_file: Path) -> None:
    out = tmp_path / "zero"
    assert main(["pretrain", *TINY, "--train", str(text_file), "--min-lr", "0", "--out", str(out)]) == 0
    code, err = run_main(capsys, "pretrain", "--out", out, "--resume", "--steps", 8)
    assert code == 2 and "decayed to 0 at its last step (4)" in err and f"--model {out}/checkpoint" in err


def test_the_runs_page_python_example_trains_and_resumes(tmp_path: Path, text_file: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "runs.md").read_text(encoding="utf-8")
    assert "plm pretrain --out runs/gpt --resume" in page  # the README's line, tested above
    example = page.split("```python\n")[1].split("```")[0]
    monkeypatch.chdir(tmp_path)
    text_file.rename(tmp_path / "big.txt")
    exec(example.replace("steps=2000", "steps=3").replace('model="gpt2-micro"',  # a few steps of a small run
                                                           'model="gpt2-micro", vocab_size=300, block_size=16'))
    assert logged(tmp_path / "runs" / "gpt", "step")[-1] == 3


def test_a_finetune_sweep_stopped_in_its_second_run_resumes_with_only_out(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture) -> None:
    sweep = ["finetune", "--task", "classify", "--synthetic-size", "32", "--batch-size", "8", "--epochs", "2",
             "--lr-grid", "1e-3,3e-3", "--no-progress", "--device", "cpu"]
    assert main([*sweep, "--out", str(tmp_path / "straight")]) == 0
    log = Trainer.log

    def stop_in_the_second_run(trainer: Trainer, metrics: dict[str, float]) -> None:
        log(trainer, metrics)
        if trainer.out.name.startswith("lr0.003") and metrics["step"] == 3:
            os.kill(os.getpid(), signal.SIGTERM)

    Trainer.log = stop_in_the_second_run
    try:
        code, err = run_main(capsys, *sweep, "--out", tmp_path / "stopped")
    finally:
        Trainer.log = log
    assert code == 143 and "stopped by SIGTERM at step 3" in err
    assert not (tmp_path / "stopped" / "summary.json").exists()

    assert main(["finetune", "--out", str(tmp_path / "stopped"), "--resume"]) == 0
    for name in ("lr0.001-seed0", "lr0.003-seed0"):
        assert logged(tmp_path / "stopped" / "runs" / name) == logged(tmp_path / "straight" / "runs" / name)
    summaries = [json.loads((tmp_path / run / "summary.json").read_text()) for run in ("straight", "stopped")]
    assert [run["val_accuracy"] for run in summaries[0]["runs"]] == [
        run["val_accuracy"] for run in summaries[1]["runs"]
    ]


def test_resuming_from_python_with_other_training_options_is_refused(tmp_path: Path, text_file: Path) -> None:
    setup = PretrainSetup(model="gpt2-micro", train_files=(str(text_file),), vocab_size=300, block_size=16,
                          batch_size=2)
    options = dict(steps=4, warmup=1, progress=False, device="cpu")
    trainer, _ = prepare(setup, TrainingConfig(lr=1e-3, **options), tmp_path / "run")
    trainer.train()
    trainer, _ = prepare(setup, TrainingConfig(lr=2e-3, **options), tmp_path / "run", resume=True)
    with pytest.raises(PLMError, match="the run was started with `lr` 0.001, not 0.002"):
        trainer.train(resume=True)


def test_finetune_saves_every_save_every_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saved = []
    save = Trainer.save

    def save_and_note(trainer: Trainer) -> None:
        saved.append(trainer.step)
        save(trainer)

    monkeypatch.setattr(Trainer, "save", save_and_note)
    assert main(["finetune", "--task", "classify", "--synthetic-size", "64", "--batch-size", "8", "--epochs", "1",
                 "--save-every", "3", "--no-progress", "--device", "cpu", "--out", str(tmp_path / "run")]) == 0
    assert saved == [3, 6, 8]  # every 3 steps, and the epoch's end


def test_a_signal_in_the_last_step_of_a_sweeps_run_starts_no_other_run(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture) -> None:
    sweep = ["finetune", "--task", "classify", "--synthetic-size", "32", "--batch-size", "8", "--epochs", "2",
             "--lr-grid", "1e-3,3e-3", "--no-progress", "--device", "cpu", "--out", str(tmp_path / "run")]
    log = Trainer.log

    def stop_at_the_first_runs_end(trainer: Trainer, metrics: dict[str, float]) -> None:
        log(trainer, metrics)
        if trainer.out.name.startswith("lr0.001") and metrics["step"] == trainer.config.steps:
            os.kill(os.getpid(), signal.SIGTERM)

    Trainer.log = stop_at_the_first_runs_end
    try:
        code, err = run_main(capsys, *sweep)
    finally:
        Trainer.log = log
    assert code == 143 and "stopped by SIGTERM at step 8" in err
    assert not (tmp_path / "run" / "runs" / "lr0.003-seed0").exists()


def test_an_extended_run_stopped_again_resumes_on_the_same_schedule_with_the_warmup_it_started_with(
        tmp_path: Path, text_file: Path) -> None:
    """A run of 20 steps warms up over 2 (the recipe's 100 cut to a tenth), is stopped at step 4, extended to 30
    steps, stopped at step 8 and resumed again (to step 10): its learning rates are those of the schedule written
    out here.

    A resume that took a new default warmup (3 for 30 steps) would restart the decay elsewhere; one that lost where
    the extended decay started (not saved with the checkpoint) would jump back to the peak at step 8.
    """
    setup = PretrainSetup(model="gpt2-micro", train_files=(str(text_file),), vocab_size=300, block_size=16,
                          batch_size=2)
    peak, floor = 1e-3, 1e-4
    options = dict(lr=peak, min_lr=floor, schedule="cosine", log_every=1, eval_every=100, progress=False,
                   device="cpu")
    trainer, _ = prepare(setup, TrainingConfig(steps=20, **options), tmp_path / "run")
    assert trainer.config.warmup == 2
    with signalled_at_step(4), pytest.raises(RunStopped):
        trainer.train()
    trainer, _ = prepare(setup, TrainingConfig(steps=30, **options), tmp_path / "run", resume=True)
    with signalled_at_step(8), pytest.raises(RunStopped):
        trainer.train(resume=True)
    trainer, _ = prepare(setup, TrainingConfig(steps=30, **options), tmp_path / "run", resume=True)
    with signalled_at_step(10), pytest.raises(RunStopped):
        trainer.train(resume=True)

    warmup = 2
    planned = [peak * (i + 1) / warmup if i < warmup else cosine(peak, floor, i - warmup, 20 - 1 - warmup)
               for i in range(4)]
    reached = cosine(peak, floor, 4 - warmup, 20 - 1 - warmup)  # step 5 of the 20-step layout
    extended = [cosine(reached, floor, i - 4, 30 - 1 - 4) for i in range(4, 10)]
    assert logged(tmp_path / "run", "step") == list(range(1, 11))
    assert logged(tmp_path / "run", "lr") == pytest.approx(planned + extended, rel=1e-12)


def test_a_run_saved_before_embeddings_decayed_resumes_without_decaying_them(tmp_path: Path, text_file: Path) -> None:
    """plm once left embeddings undecayed; its runs' saved optimizer groups say so, and a resume keeps them as saved."""
    setup = PretrainSetup(model="gpt2-micro", train_files=(str(text_file),), vocab_size=300, block_size=16,
                          batch_size=2)
    options = dict(warmup=1, progress=False, device="cpu", weight_decay=0.01)
    trainer, _ = prepare(setup, TrainingConfig(steps=2, **options), tmp_path / "run")
    trainer.train()
    [embeddings] = [index for index, group in enumerate(trainer.optimizer.param_groups)
                    if any(p is trainer.model.token_embedding.weight for p in group["params"])]
    assert trainer.optimizer.param_groups[embeddings]["weight_decay"] == 0.01
    state_file = tmp_path / "run" / "checkpoint" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    state["optimizer"]["param_groups"][embeddings]["weight_decay"] = 0.0  # as an older plm saved it
    state_file.write_text(json.dumps(state))
    trainer, _ = prepare(setup, TrainingConfig(steps=4, **options), tmp_path / "run", resume=True)
    trainer.train(resume=True)
    decays = [group["weight_decay"] for group in trainer.optimizer.param_groups]
    assert decays[embeddings] == 0.0 and decays[0] == 0.01


# Flags that define what a run trains (docs/runs.md lists the few that may change on a resume; these are not among
# them), each with a value other than the one finished_run was started with.
DEFINING = [("--lr", "0.5"), ("--seed", "7"), ("--precision", "bf16"), ("--warmup", "3"), ("--block-size", "8"),
            ("--vocab-size", "280"), ("--grad-accum", "2"), ("--weight-decay", "0.3"), ("--optimizer", "lamb"),
            ("--schedule", "constant"), ("--dropout", "0.3"), ("--clip", "0.7"), ("--min-lr", "0.001"),
            ("--eval-every", "3"), ("--objective", "mlm")]


def test_every_flag_that_defines_the_run_is_refused_when_changed_on_resume(finished_run: Path,
                                                                          capsys: pytest.CaptureFixture) -> None:
    """Not only a sample: a flag wrongly let through as changeable (a new learning rate or seed on a resume) would
    continue the run as another one than it was started."""
    before = (finished_run / "checkpoint" / "model.safetensors").read_bytes()
    for flag, value in DEFINING:
        code, err = run_main(capsys, "pretrain", "--out", finished_run, "--resume", "--steps", 6, flag, value)
        assert code == 2 and err.startswith(f"plm pretrain: error: {flag} {value}: ") and "was started" in err, flag
    assert (finished_run / "checkpoint" / "model.safetensors").read_bytes() == before


def test_a_resume_given_only_out_and_steps_takes_the_flags_the_run_was_started_with(
        tmp_path: Path, text_file: Path, capsys: pytest.CaptureFixture) -> None:
    """Flags left out on --resume are the run's, not the defaults: a learning rate, weight decay, schedule, clip and
    seed given at the start (none of them the default) are what the resumed run trains with."""
    out = tmp_path / "run"
    started = {"lr": 0.003, "weight_decay": 0.2, "schedule": "constant", "clip": 0.5, "seed": 5}
    flags = [str(part) for dest, value in started.items() for part in ("--" + dest.replace("_", "-"), value)]
    assert main(["pretrain", *TINY, "--steps", "1", *flags, "--train", str(text_file), "--out", str(out)]) == 0
    code, err = run_main(capsys, "pretrain", "--out", out, "--resume", "--steps", 2)
    assert code == 0, err
    config = json.loads((out / "training_config.json").read_text())
    assert {dest: config[dest] for dest in started} == started
    assert logged(out, "step") == [1, 2]
