"""The trainer: checkpoints load, the loss falls, the schedule.

Accumulation and data parallelism are in test_accumulation.py, resuming in test_resume.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import plm
from plm.checkpoint import CHECKPOINT_DIR, load_model
from plm.errors import PLMError
from plm.training.optim import parameter_groups, warmup_cosine
from plm.training.pretrain import PretrainSetup, prepare, pretrain
from plm.training.trainer import TrainingConfig

TINY = dict(steps=8, lr=3e-3, min_lr=3e-4, warmup=2, eval_every=4, save_every=4, log_every=1, progress=False, device="cpu")


def test_checkpoint_holds_a_loadable_model_and_tokenizer(tmp_path: Path, text_file: Path) -> None:
    setup = PretrainSetup(model="gpt2-micro", train_files=(str(text_file),), vocab_size=300, block_size=32, batch_size=4)
    model, tokenizer, last = pretrain(setup, TrainingConfig(**TINY), tmp_path)
    assert last["step"] == 8 and last["val_loss"] > 0
    loaded = load_model(tmp_path)
    assert loaded.config == model.config
    assert plm.Tokenizer.load(tmp_path / CHECKPOINT_DIR).vocab_size == len(tokenizer)
    ids = torch.tensor([tokenizer.encode("The cat reads")])
    torch.testing.assert_close(loaded(ids).logits, model.cpu().eval()(ids).logits)


def test_loss_falls_on_learnable_text(tmp_path: Path, text_file: Path) -> None:
    setup = PretrainSetup(model="gpt2-micro", train_files=(str(text_file),), vocab_size=300, block_size=32, batch_size=8)
    trainer, _ = prepare(setup, TrainingConfig(**{**TINY, "steps": 40, "eval_every": 40, "save_every": 40}), tmp_path)
    before = trainer.evaluate()["val_loss"]
    after = trainer.train()["val_loss"]
    assert after < before - 1.0


def test_block_size_beyond_the_context_is_refused(tmp_path: Path, text_file: Path) -> None:
    setup = PretrainSetup(model="gpt2-micro", train_files=(str(text_file),), vocab_size=300, block_size=65)
    with pytest.raises(PLMError, match="exceeds the model's context of 64"):
        prepare(setup, TrainingConfig(**TINY), tmp_path)


def test_resume_without_a_checkpoint_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PLMError, match="no checkpoint to resume from"):
        prepare(PretrainSetup(model="gpt2-micro"), TrainingConfig(**TINY), tmp_path / "empty", resume=True)


def test_no_weight_decay_on_biases_norms_and_embeddings() -> None:
    model = plm.from_preset("gpt2-micro")
    decay, no_decay = parameter_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    assert all(names[id(p)].endswith("weight") and p.dim() == 2 for p in decay["params"])
    no_decay_names = {names[id(p)] for p in no_decay["params"]}
    assert {"token_embedding.weight", "position_embedding.weight", "blocks.0.attention.in_proj.bias"} <= no_decay_names
    assert "blocks.0.attention_norm.weight" in no_decay_names


def test_learning_rate_warms_up_linearly_then_decays_to_the_floor() -> None:
    lrs = [warmup_cosine(step, peak=1.0, warmup=10, total=110, floor=0.1) for step in range(111)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert lrs[60] == pytest.approx(0.55)  # half-way down the cosine
    assert lrs[110] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))
