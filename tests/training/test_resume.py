"""A resumed run is the run that was never interrupted, bit for bit.

A run is killed with SIGKILL some time after its first checkpoint and continued with
``--resume``; its metrics.jsonl must then hold exactly the losses of a run that was
not killed. Dropout stays on, so every process's RNG states must come back with the
weights and the optimizer, and the batches (MLM masks included) must go on from the
checkpoint's step; in fp16, the loss scaler's state must come back as well.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import plm
from plm.cli.main import main
from plm.errors import PLMError
from plm.storage.atomic_files import staging_directory
from plm.storage.checkpoint import (
    CHECKPOINT_DIR,
    STATE_FILE,
    load_checkpoint,
    recover_checkpoint,
    rng_states,
    save_checkpoint,
)
from plm.training.pretrain import PretrainSetup, prepare, pretrain
from plm.training.trainer import Trainer, TrainingConfig

STEPS = 24
RUN = ["--vocab-size", "400", "--block-size", "32", "--batch-size", "4", "--warmup", "2", "--no-progress",
       "--device", "cpu", "--steps", str(STEPS), "--save-every", "6", "--eval-every", "12", "--log-every", "1"]
PLM = [sys.executable, "-m", "plm.cli.main"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "plm.cli.main"]


def logged_losses(run: Path) -> list[dict[str, float]]:
    """Every metrics line without its timing."""
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    return [{k: v for k, v in line.items() if k not in ("tokens_per_second", "elapsed")} for line in lines]


def start(launcher: list[str], args: list[str], out: Path) -> subprocess.Popen:
    """``plm ARGS`` into ``out`` in a session of its own, its output appended to :func:`log_of` ``out``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(log_of(out), "a", encoding="utf-8") as log:
        return subprocess.Popen([*launcher, *args, "--out", str(out)], stdout=log,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)


def log_of(out: Path) -> Path:
    return out.with_name(f"{out.name}.log")


def finish(process: subprocess.Popen, out: Path) -> None:
    assert process.wait(timeout=300) == 0, log_of(out).read_text()[-3000:]


def wait_for(path: Path, process: subprocess.Popen, out: Path) -> Path:
    """``path``, once the run into ``out`` has written it."""
    deadline = time.monotonic() + 300
    while not path.exists():
        assert process.poll() is None, f"the run ended before it wrote {path}: {log_of(out).read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {path} within the time limit"
        time.sleep(0.02)
    return path


def kill(process: subprocess.Popen) -> None:
    """SIGKILL the run: the launcher and its children (torchrun starts each worker in a session of its own)."""
    children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
    for group in [process.pid, *map(int, children)]:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
    process.wait()


def logged_steps(out: Path) -> int:
    path = out / "metrics.jsonl"
    return len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0


def terminate_at_a_random_step(process: subprocess.Popen, out: Path, steps: int) -> int:
    """SIGTERM the launcher (as a scheduler does) once the run has logged a random number of steps; return
    the step its checkpoint holds. torchrun passes the signal on to its workers, which go on training until its
    monitor next looks (0.1 s): micro models train several steps meanwhile, so the signal comes by half way."""
    at = random.randint(2, steps // 2)
    deadline = time.monotonic() + 300
    while logged_steps(out) < at:
        assert process.poll() is None, f"the run ended before step {at}: {log_of(out).read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no step {at} within the time limit"
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    code = process.wait(timeout=120)
    saved = json.loads((out / CHECKPOINT_DIR / STATE_FILE).read_text())["step"]
    log = log_of(out).read_text()
    assert f"stopped by SIGTERM at step {saved}, saved to" in log, log[-3000:]
    assert code == (143 if process.args[:3] == PLM else 1), log[-3000:]  # torchrun: its workers failed
    assert saved == logged_steps(out) >= at  # the step in flight was finished, logged and saved
    return saved


def leave_an_interrupted_save(out: Path) -> list[Path]:
    """What saves killed halfway leave, named as plm names them: staging directories and a temporary file."""
    litter = [staging_directory(out, ".checkpoint-"), staging_directory(out, ".best-")]
    (litter[0] / "model.safetensors").write_bytes(b"half a checkpoint")
    litter.append(out / ".metrics.jsonl.k2j4x9.tmp")
    litter[-1].write_text("{}")
    return litter


def trained_here(args: list[str]) -> None:
    """``plm ARGS`` in this process, on one thread as the processes :func:`start` starts."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(args) == 0
    finally:
        torch.set_num_threads(threads)


def stopped_and_resumed_like_straight(
    launcher: list[str], command: list[str], args: list[str], tmp_path: Path, stop: signal.Signals,
    shared_tokenizer: bool = True, steps: int = STEPS, resume: list[str] = ("--resume",),
) -> None:
    """A run stopped at a random step and resumed with nothing but ``--out`` and ``--resume`` logs the same
    numbers, step by step, as one left alone.

    SIGKILL lands some time after a checkpoint, and the run goes on from there; SIGTERM saves the step
    the run has reached, whatever --save-every says. Leftovers of saves killed halfway are gone once
    the resumed run has finished, and it never read them. The run left alone trains while the stopped one
    resumes: in this process (a process start less), or under torchrun when the others do.
    """
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    interrupted = start(launcher, [*command, *args], stopped)
    if stop == signal.SIGKILL:
        wait_for(stopped / CHECKPOINT_DIR / STATE_FILE, interrupted, stopped)
        kill(interrupted)
        recover_checkpoint(stopped)  # as the resumed run will, should the kill have hit a checkpoint swap
        saved = json.loads((stopped / CHECKPOINT_DIR / STATE_FILE).read_text())["step"]
        assert (stopped / ".lock").exists()  # the killed process's lock file, whose OS lock went with it
    else:
        saved = terminate_at_a_random_step(interrupted, stopped, steps)
    assert saved < steps, "the run finished before it could be stopped"
    litter = leave_an_interrupted_save(stopped)
    resumed = start(launcher, [*command, *resume], stopped)
    if shared_tokenizer:  # the stopped run's: Unigram training differs between processes
        args = [*args, "--tokenizer", str(stopped / "tokenizer")]
    if launcher == PLM:
        trained_here([*command, *args, "--out", str(straight)])
    else:
        finish(start(launcher, [*command, *args], straight), straight)
    finish(resumed, stopped)

    expected = logged_losses(straight)
    assert [line["step"] for line in expected] == list(range(1, steps + 1))
    assert logged_losses(stopped) == expected
    assert not any(path.exists() for path in litter)
    assert sorted(os.listdir(stopped)) == sorted(os.listdir(straight))


@pytest.mark.parametrize(
    "model, stop",
    [("gpt2-micro", signal.SIGTERM), ("bert-micro", signal.SIGKILL), ("albert-micro", signal.SIGKILL)],
)  # CLM, MLM + NSP, MLM + SOP (ELMo: test_elmo)
def test_a_stopped_run_resumes_bit_exactly(model: str, stop: signal.Signals, text_file: Path, tmp_path: Path) -> None:
    args = [*RUN, "--model", model, "--train", str(text_file)]
    stopped_and_resumed_like_straight(PLM, ["pretrain"], args, tmp_path, stop)


def test_a_torchrun_run_preempted_with_sigterm_resumes_bit_exactly(text_file: Path, tmp_path: Path) -> None:
    # Each process draws its own dropout masks: each must get its own RNG state back, not the first one's;
    # and both processes stop at the same step, whichever got the signal first.
    args = [*RUN, "--model", "gpt2-micro", "--train", str(text_file), "--save-every", "1000"]
    stopped_and_resumed_like_straight(TORCHRUN, ["pretrain"], args, tmp_path, signal.SIGTERM)


@pytest.mark.parametrize("model, stop", [("rnn-luong", signal.SIGKILL), ("transformer-micro", signal.SIGTERM)])
def test_a_stopped_seq2seq_run_resumes_bit_exactly(model: str, stop: signal.Signals, date_pair_files: Path,
                                                   tmp_path: Path) -> None:
    # The held-out translations at steps 12 and 24 are logged too (val_bleu ...): greedy decoding is compared as well.
    files = ["--src", str(date_pair_files / "src.txt"), "--tgt", str(date_pair_files / "tgt.txt")]
    args = ["--model", model, *files, "--vocab-size", "300", "--max-tokens", "256",
            "--steps", str(STEPS), "--save-every", "6", "--eval-every", "12", "--log-every", "1",
            "--metric-examples", "2", "--no-progress", "--device", "cpu"]
    stopped_and_resumed_like_straight(PLM, ["seq2seq", "train"], args, tmp_path, stop)


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM])
def test_a_stopped_finetune_run_resumes_bit_exactly(stop: signal.Signals, tmp_path: Path) -> None:
    # The built-in task: 64 examples in batches of 8, 3 epochs = 24 steps, a checkpoint every 5 steps.
    args = ["--task", "classify", "--synthetic-size", "64", "--batch-size", "8", "--epochs", "3",
            "--save-every", "5", "--no-progress", "--device", "cpu"]
    stopped_and_resumed_like_straight(PLM, ["finetune"], args, tmp_path, stop, shared_tokenizer=False)


# In one process, an interrupt during step 6, after the step-4 checkpoint, stands for the kill.

IN_PROCESS = dict(steps=8, lr=3e-3, min_lr=3e-4, warmup=2, eval_every=4, save_every=4, log_every=1, progress=False,
                  device="cpu")


def gpt_setup(text_file: Path) -> PretrainSetup:
    return PretrainSetup(model="gpt2-micro", train_files=(str(text_file),), vocab_size=300, block_size=32, batch_size=4)


def interrupted_then_resumable(setup: Any, config: TrainingConfig, out: Path,
                               build: Callable[..., tuple[Trainer, Any]] = prepare) -> Trainer:
    """Train into ``out`` until interrupted during step 6; return the trainer a new process would resume with.

    ``build(setup, config, out, resume=...)`` makes the trainer: :func:`plm.training.pretrain.prepare`, or
    another recipe's (:func:`plm.training.train_seq2seq.prepare_seq2seq`).
    """
    interrupted, _ = build(setup, config, out)
    draw = interrupted.objective.batch

    def interrupted_during_step_six(step: int, micro: int) -> dict[str, torch.Tensor]:
        if step == 5:
            raise KeyboardInterrupt
        return draw(step, micro)

    interrupted.objective.batch = interrupted_during_step_six
    with pytest.raises(KeyboardInterrupt):
        interrupted.train()
    return build(setup, config, out, resume=True)[0]


def test_an_interrupted_run_resumes_bit_exactly(tmp_path: Path, text_file: Path) -> None:
    config = TrainingConfig(**IN_PROCESS)
    pretrain(gpt_setup(text_file), config, tmp_path / "straight")
    interrupted_then_resumable(gpt_setup(text_file), config, tmp_path / "halves").train(resume=True)

    expected = logged_losses(tmp_path / "straight")
    assert [line["step"] for line in expected] == list(range(1, 9))
    assert logged_losses(tmp_path / "halves") == expected


def scaler_states(trainer: Trainer) -> list[dict]:
    """The loss scaler's state after every optimizer step ``trainer`` takes from now on."""
    states: list[dict] = []
    update = trainer.scaler.update

    def update_and_record(*args, **kwargs) -> None:
        update(*args, **kwargs)
        states.append(trainer.scaler.state_dict())

    trainer.scaler.update = update_and_record
    return states


def test_the_fp16_loss_scaler_resumes_where_it_stopped(tmp_path: Path, text_file: Path) -> None:
    config = TrainingConfig(**IN_PROCESS, precision="fp16")  # on the CPU too: autocast to fp16, GradScaler("cpu")
    straight, _ = prepare(gpt_setup(text_file), config, tmp_path / "straight")
    assert straight.scaler.is_enabled()
    expected = scaler_states(straight)
    straight.train()
    assert expected[3] != torch.amp.GradScaler("cpu").state_dict(), (
        "at the checkpoint the scaler must differ from a new one"
    )

    resumed = interrupted_then_resumable(gpt_setup(text_file), config, tmp_path / "halves")
    actual = scaler_states(resumed)
    resumed.train(resume=True)

    assert actual == expected[4:]
    assert logged_losses(tmp_path / "halves") == logged_losses(tmp_path / "straight")


def test_resuming_on_another_number_of_processes_is_refused(tmp_path: Path) -> None:
    """The global batch is grad_accum x processes micro-batches: another count would silently change the run."""
    model = plm.from_preset("gpt2-micro")
    optimizer = torch.optim.AdamW(model.parameters())
    save_checkpoint(tmp_path / "one", model, optimizer, {"step": 1})  # by one process
    load_checkpoint(tmp_path / "one", model, optimizer, rank=0)
    with pytest.raises(PLMError, match=r"trained on 1 process\(es\) and is resumed on 2; resume it on 1 processes"):
        load_checkpoint(tmp_path / "one", model, optimizer, rank=1, processes=2)
    save_checkpoint(tmp_path / "two", model, optimizer, {"step": 1}, rng=[rng_states(), rng_states()])
    load_checkpoint(tmp_path / "two", model, optimizer, rank=1, processes=2)
    with pytest.raises(PLMError, match=r"trained on 2 process\(es\) and is resumed on 1"):
        load_checkpoint(tmp_path / "two", model, optimizer, rank=0, processes=1)
