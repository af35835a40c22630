"""The trainer: accumulation equals one big batch, resume equals an uninterrupted run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import plm
from plm.checkpoint import CHECKPOINT_DIR, load_model
from plm.errors import PLMError
from plm.training.optim import parameter_groups
from plm.training.pretrain import PretrainSetup, prepare, pretrain
from plm.training.trainer import Trainer, TrainingConfig

TINY = dict(steps=8, lr=3e-3, min_lr=3e-4, warmup=2, eval_every=4, save_every=4, log_every=1, progress=False, device="cpu")


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


class FixedBatches:
    """A causal-LM objective over a fixed set of sequences, split into micro-batches."""

    def __init__(self, tokens: torch.Tensor, micro_batches: int) -> None:
        self.parts = tokens.chunk(micro_batches)

    def batch(self, step: int, micro: int) -> dict[str, torch.Tensor]:
        return {"tokens": self.parts[micro]}

    def size(self, batch: dict[str, torch.Tensor]) -> int:
        return batch["tokens"][:, 1:].numel()

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        return {"lm": self.size(batch)}

    def loss(self, model, batch):
        tokens = batch["tokens"]
        logits = model(tokens[:, :-1]).logits
        return {"lm": torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten(), reduction="sum")}

    def validation_batches(self):
        return iter(())


def test_gradient_accumulation_equals_one_big_batch(tmp_path: Path) -> None:
    tokens = torch.randint(0, 512, (8, 17), generator=torch.Generator().manual_seed(0))
    results = []
    for micro_batches in (1, 4):
        torch.manual_seed(0)
        model = plm.from_preset("gpt2-micro", dropout=0.0, attention_dropout=0.0, embedding_dropout=0.0)
        config = TrainingConfig(**{**TINY, "steps": 1, "grad_accum": micro_batches, "clip": 0.5})
        Trainer(model, FixedBatches(tokens, micro_batches), config, tmp_path / str(micro_batches)).train()
        results.append(model.state_dict())
    for name, value in results[0].items():
        torch.testing.assert_close(results[1][name], value, atol=1e-6, rtol=1e-5, msg=name)


def test_resume_gives_the_same_losses_as_an_uninterrupted_run(tmp_path: Path, text_file: Path) -> None:
    setup = PretrainSetup(model="gpt2-micro", train_files=(str(text_file),), vocab_size=300, block_size=32, batch_size=4)
    straight = tmp_path / "straight"
    pretrain(setup, TrainingConfig(**TINY), straight)  # dropout stays on: RNG state must be restored

    halves = tmp_path / "halves"
    interrupted, _ = prepare(setup, TrainingConfig(**TINY), halves)
    draw = interrupted.objective.batch

    def killed_during_step_six(step: int, micro: int) -> dict[str, torch.Tensor]:
        if step == 5:
            raise KeyboardInterrupt
        return draw(step, micro)

    interrupted.objective.batch = killed_during_step_six
    with pytest.raises(KeyboardInterrupt):
        interrupted.train()
    # A new process would build a new trainer, which continues from the step-4 checkpoint.
    resumed, _ = prepare(setup, TrainingConfig(**TINY), halves, resume=True)
    resumed.train(resume=True)

    assert [m["loss"] for m in metrics(halves)] == pytest.approx([m["loss"] for m in metrics(straight)], abs=1e-6)
    assert [m["step"] for m in metrics(halves)] == list(range(1, 9))


def test_checkpoint_holds_a_loadable_model_and_tokenizer(tmp_path: Path, text_file: Path) -> None:
    setup = PretrainSetup(model="gpt2-micro", train_files=(str(text_file),), vocab_size=300, block_size=32, batch_size=4)
    model, tokenizer, last = pretrain(setup, TrainingConfig(**TINY), tmp_path / "run")
    assert last["step"] == 8 and last["val_loss"] > 0
    loaded = load_model(tmp_path / "run")
    assert loaded.config == model.config
    assert plm.Tokenizer.load(tmp_path / "run" / CHECKPOINT_DIR).vocab_size == len(tokenizer)
    ids = torch.tensor([tokenizer.encode("The cat reads")])
    torch.testing.assert_close(loaded(ids).logits, model.cpu().eval()(ids).logits)


def test_loss_falls_on_learnable_text(tmp_path: Path, text_file: Path) -> None:
    setup = PretrainSetup(model="gpt2-micro", train_files=(str(text_file),), vocab_size=300, block_size=32, batch_size=8)
    trainer, _ = prepare(setup, TrainingConfig(**{**TINY, "steps": 40, "eval_every": 40, "save_every": 40}), tmp_path / "run")
    before = trainer.evaluate()["val_loss"]
    after = trainer.train()["val_loss"]
    assert after < before - 1.0


def test_block_size_beyond_the_context_is_refused(tmp_path: Path, text_file: Path) -> None:
    setup = PretrainSetup(model="gpt2-micro", train_files=(str(text_file),), vocab_size=300, block_size=65)
    with pytest.raises(PLMError, match="exceeds the model's context of 64"):
        prepare(setup, TrainingConfig(**TINY), tmp_path / "run")


def test_resume_without_a_checkpoint_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PLMError, match="no checkpoint to resume from"):
        prepare(PretrainSetup(model="gpt2-micro"), TrainingConfig(**TINY), tmp_path / "empty", resume=True)


def test_weight_decay_on_weight_matrices_only_and_no_trust_ratio_for_biases_and_norms() -> None:
    model = plm.from_preset("gpt2-micro")
    matrices, embeddings, biases_and_norms = parameter_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}

    def group(g):
        return {names[id(p)] for p in g["params"]}

    assert group(matrices) == {n for n, p in model.named_parameters() if p.dim() == 2} - group(embeddings)
    assert group(embeddings) == {"token_embedding.weight", "position_embedding.weight"}
    assert {"blocks.0.attention.in_proj.bias", "blocks.0.attention_norm.weight"} <= group(biases_and_norms)
    assert [g["weight_decay"] for g in (matrices, embeddings, biases_and_norms)] == [0.01, 0.0, 0.0]
    assert [g["layer_adaptation"] for g in (matrices, embeddings, biases_and_norms)] == [True, True, False]
    assert len(group(matrices) | group(embeddings) | group(biases_and_norms)) == len(list(model.parameters()))
