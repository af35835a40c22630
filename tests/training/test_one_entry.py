"""Every trainer runs one way (plm.training.trainer.train_run): its run directory checked twice, before and after
it is locked, and never again on the way to the first step; the process group left however the run ends.

Before the one entry, a pre-training checked its directory five times (the entry, the prepare, the trainer's own
claim) and a fine-tuning or a comparison never left the process group that an FSDP run of one process makes.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch.distributed as dist

from plm.apps.compare import compare, read_spec
from plm.tasks import finetune as finetune_module
from plm.tasks.finetune import FinetuneData, FinetuneOptimization, FinetuneSetup, finetune
from plm.training import run_directory, trainer
from plm.training.parallel import Parallelism
from plm.training.pretrain import PretrainSetup, pretrain
from plm.training.train_seq2seq import Seq2SeqSetup, train_seq2seq
from plm.training.trainer import TrainingConfig
from tests.apps.test_compare import write_spec

SHARDED = Parallelism(strategy="fsdp")  # on one process, a process group of one that the run must leave
TINY = dict(steps=2, eval_every=2, save_every=2, log_every=1, progress=False, device="cpu")


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """How many times each run directory is checked, wherever the check is called from."""
    counted: Counter = Counter()
    real = run_directory.check_run_directory

    def counting(out: Path, resume: bool, overwrite: bool) -> None:
        counted[Path(out).name] += 1
        real(out, resume, overwrite)

    for module in (trainer, finetune_module):
        monkeypatch.setattr(module, "check_run_directory", counting)
    return counted


def test_pretraining_checks_its_directory_before_and_after_the_lock_only_and_leaves_the_group(
        checks: Counter, text_file: Path, tmp_path: Path) -> None:
    setup = PretrainSetup(model="gpt2-micro", train_files=(str(text_file),), vocab_size=300, block_size=16,
                          batch_size=2)
    pretrain(setup, TrainingConfig(**TINY, parallelism=SHARDED), tmp_path / "run")
    assert checks == {"run": 2}
    assert not dist.is_initialized()


def test_seq2seq_training_checks_its_directory_before_and_after_the_lock_only_and_leaves_the_group(
        checks: Counter, tmp_path: Path) -> None:
    setup = Seq2SeqSetup(model="transformer-micro", max_tokens=256, metric_examples=2)
    train_seq2seq(setup, TrainingConfig(**TINY, parallelism=SHARDED), tmp_path / "run")
    assert checks == {"run": 2}
    assert not dist.is_initialized()


def test_a_fine_tuning_sweep_checks_each_directory_twice_and_leaves_the_group(checks: Counter,
                                                                                tmp_path: Path) -> None:
    setup = FinetuneSetup(task="classify", data=FinetuneData(synthetic_size=16),
                          optimization=FinetuneOptimization(steps=2, restarts=2), device="cpu", progress=False,
                          parallelism=SHARDED)
    finetune(setup, tmp_path / "run")
    assert checks == {"run": 2, "lr0.003-seed0": 2, "lr0.003-seed1": 2}  # the sweep's, then each run's own
    assert not dist.is_initialized()


def test_each_run_of_a_comparison_checks_its_directory_twice(checks: Counter, text_file: Path,
                                                              tmp_path: Path) -> None:
    spec = read_spec(write_spec(tmp_path, text_file, budget="steps = 2"))
    compare(spec, tmp_path / "compare", progress=lambda line: None)
    assert checks == {run.slug: 2 for run in spec.runs}
