"""Gradient accumulation and data parallelism give the gradient of one big batch.

The oracle is plain autograd on one big batch: all micro-batches concatenated, each
loss term averaged over all of its targets. The trainer's gradient is read at the
optimizer step with clipping off: comparing losses after an AdamW step would hide a
wrongly scaled gradient, since AdamW's update barely depends on the gradient's scale.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import plm
from plm.data.corpus import read_corpus
from plm.models import from_config, preset_config, with_heads
from plm.objectives import CausalLMObjective, MaskedLMObjective
from plm.objectives.masking import IGNORE_INDEX
from plm.storage.checkpoint import load_model, save_model
from plm.tokenization.tokenizer import Tokenizer
from plm.training.trainer import Trainer, TrainingConfig
from tests.conftest import synthetic_text

# the trainer's forward pass and the oracle's are the same function
NO_DROPOUT = dict(dropout=0.0, attention_dropout=0.0)
ONE_STEP = dict(steps=1, clip=0.0, progress=False, device="cpu", precision="fp32")
PADDING = {"labels": IGNORE_INDEX}  # other keys pad with 0: attention mask 0 hides the new positions


def captured_gradients(trainer: Trainer) -> dict[str, torch.Tensor]:
    """Run one optimizer step of ``trainer``; return the gradients the optimizer was handed."""
    gradients: dict[str, torch.Tensor] = {}

    def capture(optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        gradients.update({name: p.grad.clone() for name, p in trainer.model.named_parameters() if p.grad is not None})

    handle = trainer.optimizer.register_step_pre_hook(capture)
    try:
        trainer.optimizer_step(trainer.wrap(trainer.model))
    finally:
        handle.remove()
    return gradients


def one_big_batch(batches: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The micro-batches stacked into one, padded on the right to the widest."""
    width = max(batch["input_ids"].shape[1] for batch in batches)

    def widened(key: str, tensor: torch.Tensor) -> torch.Tensor:  # (b, t) -> (b, width); pair labels (b,) stay
        return F.pad(tensor, (0, width - tensor.shape[1]), value=PADDING.get(key, 0)) if tensor.dim() == 2 else tensor

    return {key: torch.cat([widened(key, batch[key]) for batch in batches]) for key in batches[0]}


def gradients_of(model: torch.nn.Module, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    loss.backward()
    return {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


def mlm_nsp_big_batch_gradients(
    model: torch.nn.Module, batches: list[dict[str, torch.Tensor]]
) -> dict[str, torch.Tensor]:
    """Mean MLM loss over every masked token of the step + mean NSP loss over every pair, by plain autograd."""
    big = one_big_batch(batches)
    output = model.train()(big["input_ids"], attention_mask=big["attention_mask"], token_type_ids=big["token_type_ids"])
    masked = big["labels"] != IGNORE_INDEX
    loss = F.cross_entropy(output.logits[masked], big["labels"][masked]) + F.cross_entropy(
        output.pair_logits, big["pair_labels"]
    )
    return gradients_of(model, loss)


def assert_same_gradients(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert actual.keys() == expected.keys()
    for name, gradient in expected.items():
        torch.testing.assert_close(actual[name], gradient, rtol=1e-4, atol=1e-7, msg=name)


# A run directory that several processes can build the same MLM + NSP trainer from.


def write_mlm_run(directory: Path) -> Path:
    """Text, a WordPiece tokenizer and an initial bert-micro with MLM + NSP heads, saved in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "train.txt").write_text(synthetic_text(60), encoding="utf-8")
    corpus = read_corpus([directory / "train.txt"])
    tokenizer = Tokenizer.train_wordpiece((d.text for d in corpus.train), vocab_size=300)
    torch.manual_seed(0)
    config = with_heads(preset_config("bert-micro", vocab_size=len(tokenizer), **NO_DROPOUT), "mlm", "nsp")
    save_model(from_config(config), directory / "initial", tokenizer)
    return directory


def mlm_objective(directory: Path) -> MaskedLMObjective:
    corpus = read_corpus([directory / "train.txt"])
    tokenizer = Tokenizer.load(directory / "initial")
    # Seed 2 gives micro-batches (and processes) with different numbers of masked tokens, as the tests check.
    return MaskedLMObjective(
        corpus.train, corpus.validation, tokenizer, max_length=32, batch_size=4, pair_task="nsp", seed=2
    )


def mlm_trainer(directory: Path, grad_accum: int) -> Trainer:
    config = TrainingConfig(**ONE_STEP, grad_accum=grad_accum)
    return Trainer(load_model(directory / "initial"), mlm_objective(directory), config, directory / "run")


@pytest.fixture(scope="module")
def mlm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_mlm_run(tmp_path_factory.mktemp("mlm"))


def masked_counts(batches: list[dict[str, torch.Tensor]]) -> list[int]:
    return [int((batch["labels"] != IGNORE_INDEX).sum()) for batch in batches]


def test_accumulated_mlm_nsp_gradient_equals_one_big_batch_with_unequal_masked_counts(mlm_run: Path) -> None:
    micro_batches = 3
    trainer = mlm_trainer(mlm_run, micro_batches)
    batches = [trainer.objective.batch(0, index) for index in range(micro_batches)]
    masked = masked_counts(batches)
    assert len(set(masked)) > 1, (
        f"the micro-batches must differ in masked tokens to tell the normalisations apart: {masked}"
    )

    actual = captured_gradients(trainer)

    assert_same_gradients(actual, mlm_nsp_big_batch_gradients(load_model(mlm_run / "initial"), batches))


def clm_step_gradients(directory: Path, seed: int, **config: Any) -> tuple[dict, dict]:
    """One step of 4 accumulated CLM micro-batches: the trainer's gradients, and an oracle's of the same tokens taken
    as one big batch by plain autograd."""
    ids = np.random.default_rng(seed).integers(0, 512, size=2000).astype(np.int64)
    objective = CausalLMObjective(ids, ids[:100], block_size=16, batch_size=2)
    torch.manual_seed(0)
    model = plm.from_preset("gpt2-micro", embedding_dropout=0.0, **NO_DROPOUT)
    oracle = plm.from_preset("gpt2-micro", embedding_dropout=0.0, **NO_DROPOUT)
    oracle.load_state_dict(model.state_dict())
    micro_batches = 4
    trainer = Trainer(model, objective, TrainingConfig(**{**ONE_STEP, **config}, grad_accum=micro_batches), directory)
    actual = captured_gradients(trainer)
    tokens = torch.cat([objective.batch(0, index)["tokens"] for index in range(micro_batches)])  # (8, 17)
    logits = oracle.train()(tokens[:, :-1]).logits
    return actual, gradients_of(oracle, F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()))


def test_accumulated_clm_gradient_equals_one_big_batch(tmp_path: Path) -> None:
    assert_same_gradients(*clm_step_gradients(tmp_path, seed=0))


ROOT = Path(__file__).resolve().parents[2]  # the repository: the worker imports tests.training.test_accumulation
DDP_WORKER = """
import sys
from pathlib import Path

import torch

sys.path.insert(0, {root!r})
from tests.training.test_accumulation import captured_gradients, mlm_trainer
from plm.training.distributed import teardown_distributed

directory = Path({directory!r})
trainer = mlm_trainer(directory, grad_accum=2)
torch.save(captured_gradients(trainer), directory / f"gradients-{{trainer.distributed.rank}}.pt")
teardown_distributed()
"""


def test_two_processes_give_the_gradient_of_one_big_batch(mlm_run: Path) -> None:
    # Process r draws micro-batches r and r + 2: together the two see batches 0-3 of step 0.
    worker = mlm_run / "ddp_worker.py"
    worker.write_text(DDP_WORKER.format(root=str(ROOT), directory=str(mlm_run)), encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(worker)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]

    objective = mlm_objective(mlm_run)
    batches = [objective.batch(0, index) for index in range(4)]
    masked = masked_counts(batches)
    assert masked[0] + masked[2] != masked[1] + masked[3], f"the processes must differ in masked tokens: {masked}"
    expected = mlm_nsp_big_batch_gradients(load_model(mlm_run / "initial"), batches)
    for rank in range(2):
        assert_same_gradients(torch.load(mlm_run / f"gradients-{rank}.pt"), expected)


def test_clipping_acts_on_the_gradient_of_the_whole_step(tmp_path: Path) -> None:
    """Clip after accumulation: the step's gradient is the big batch's, scaled as torch's clip_grad_norm_ does
    (by clip / (norm + 1e-6) when the norm is above clip). Clipping each micro-batch's part, or the sum so far,
    turns its direction."""
    clip = 0.05
    actual, whole = clm_step_gradients(tmp_path, seed=1, clip=clip)
    norm = torch.sqrt(sum(g.double().pow(2).sum() for g in whole.values())).item()
    assert norm > 10 * clip  # clipping acts
    assert_same_gradients(actual, {name: g * (clip / (norm + 1e-6)) for name, g in whole.items()})


def test_the_logged_losses_of_an_accumulated_step_are_the_big_batchs_means(mlm_run: Path) -> None:
    """What a run logs for a step of 3 micro-batches: each term's mean over all of the step's targets.

    Weights far from their initialisation make the micro-batches' mean losses differ, so that the mean of
    the micro-batches' means (or their sum) is far from the big batch's."""
    torch.manual_seed(1)
    model = load_model(mlm_run / "initial")
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(std=0.3)
    config = TrainingConfig(**ONE_STEP, grad_accum=3)
    trainer = Trainer(copy.deepcopy(model), mlm_objective(mlm_run), config, mlm_run / "logged")
    batches = [trainer.objective.batch(0, index) for index in range(3)]
    big = one_big_batch(batches)
    model.train()
    with torch.no_grad():
        output = model(big["input_ids"], attention_mask=big["attention_mask"], token_type_ids=big["token_type_ids"])
    masked = big["labels"] != IGNORE_INDEX
    mlm = F.cross_entropy(output.logits[masked], big["labels"][masked]).item()
    nsp = F.cross_entropy(output.pair_logits, big["pair_labels"]).item()

    losses, _ = trainer.optimizer_step(trainer.wrap(trainer.model))

    assert losses["loss_mlm"] == pytest.approx(mlm, rel=1e-5)
    assert losses["loss_nsp"] == pytest.approx(nsp, rel=1e-5)
    assert losses["loss"] == pytest.approx(mlm + nsp, rel=1e-5)
