"""The trainer's task hooks: loss weights, epochs, and keeping the model a validation metric chose.

A toy task on a micro GPT stands for the fine-tuning objectives: an auxiliary LM
term on the task text plus a classification term read at the last position, as in
GPT-1's L3 = L2 + lambda * L1.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from plm.models import from_preset
from plm.objectives import Selection
from plm.storage.checkpoint import BEST_DIR, load_model
from plm.training.trainer import Trainer, TrainingConfig

ONE_STEP = dict(steps=1, clip=0.0, progress=False, device="cpu", precision="fp32")


class ToyTask:
    """Sequences of 8 tokens labelled by their first token's parity; ``lm`` is the auxiliary term."""

    train_tokens = 10_000

    def __init__(self, lm_weight: float = 0.5, batches_per_epoch: int = 10, scripted_metrics=(), selection=None):
        generator = torch.Generator().manual_seed(0)
        self.tokens = torch.randint(2, 64, (64, 8), generator=generator)
        self.labels = self.tokens[:, 0] % 2
        self.loss_weights = {"lm": lm_weight}
        self.batches_per_epoch = batches_per_epoch
        self.scripted = list(scripted_metrics)
        self.selection = selection
        self.weights_seen: list[dict[str, torch.Tensor]] = []

    def batch(self, step: int, index: int) -> dict[str, torch.Tensor]:
        rows = slice(8 * index % 64, 8 * index % 64 + 8)
        return {"tokens": self.tokens[rows], "labels": self.labels[rows]}

    def size(self, batch):
        return batch["tokens"].numel()

    def target_counts(self, batch):
        tokens = batch["tokens"]
        return {"task": tokens.shape[0], "lm": tokens.shape[0] * (tokens.shape[1] - 1)}

    def loss(self, model, batch):
        tokens = batch["tokens"]
        logits = model(tokens).logits  # (B, T, V); the task reads classes 0/1 of the last position
        lm = F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten(), reduction="sum")
        task = F.cross_entropy(logits[:, -1, :2], batch["labels"], reduction="sum")
        return {"task": task, "lm": lm}

    def validation_batches(self):
        yield self.batch(0, 0)

    def validation_metrics(self, model) -> dict[str, float]:
        self.weights_seen.append({k: v.clone() for k, v in model.state_dict().items()})
        return {"accuracy": self.scripted.pop(0)}


def micro_gpt():
    torch.manual_seed(0)
    return from_preset("gpt2-micro", dropout=0.0, attention_dropout=0.0, embedding_dropout=0.0)


def test_loss_weights_scale_each_term_in_the_gradient(tmp_path):
    model, task = micro_gpt(), ToyTask(lm_weight=0.25)
    trainer = Trainer(model, task, TrainingConfig(grad_accum=2, **ONE_STEP), tmp_path)
    captured = {}
    trainer.optimizer.register_step_pre_hook(
        lambda *_: captured.update({n: p.grad.clone() for n, p in model.named_parameters()})
    )
    trainer.optimizer_step(model)

    oracle = micro_gpt()  # the same weights: plain autograd of mean task loss + 0.25 * mean LM loss
    tokens = torch.cat([task.batch(0, 0)["tokens"], task.batch(0, 1)["tokens"]])
    labels = torch.cat([task.batch(0, 0)["labels"], task.batch(0, 1)["labels"]])
    logits = oracle(tokens).logits
    loss = F.cross_entropy(logits[:, -1, :2], labels) + 0.25 * F.cross_entropy(
        logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten()
    )
    loss.backward()
    for name, parameter in oracle.named_parameters():
        torch.testing.assert_close(captured[name], parameter.grad, rtol=1e-4, atol=1e-7, msg=name)


def test_logged_loss_is_the_weighted_sum_of_the_terms(tmp_path):
    trainer = Trainer(micro_gpt(), ToyTask(lm_weight=0.5), TrainingConfig(**ONE_STEP), tmp_path)
    losses, _ = trainer.optimizer_step(trainer.model)
    assert losses["loss"] == pytest.approx(losses["loss_task"] + 0.5 * losses["loss_lm"])


@pytest.mark.parametrize(("declared", "logged"), [(None, {"", "_task", "_lm"}), (("lm",), {"_lm"})])
def test_perplexity_is_logged_only_for_log_likelihood_terms(tmp_path, declared, logged):
    """A regression's squared error has no perplexity: an objective names the terms that do."""
    task = ToyTask(scripted_metrics=[0.5])
    if declared is not None:
        task.perplexity_terms = declared
    metrics = Trainer(micro_gpt(), task, TrainingConfig(**ONE_STEP), tmp_path).evaluate()
    assert {name.removeprefix("val_perplexity") for name in metrics if name.startswith("val_perplexity")} == logged
    means = {term: metrics[f"val_loss_{term}"] for term in ("task", "lm")}
    for term in {"task", "lm"} & {suffix.lstrip("_") for suffix in logged}:
        assert metrics[f"val_perplexity_{term}"] == pytest.approx(math.exp(means[term]))


@pytest.mark.parametrize(("epochs", "grad_accum", "steps"), [(3, 2, 15), (1, 1, 10), (0.5, 4, 2), (0.01, 1, 1)])
def test_epochs_count_micro_batches_of_the_whole_step(tmp_path, epochs, grad_accum, steps):
    """10 micro-batches an epoch: ceil(epochs * 10 / grad_accum) optimizer steps."""
    config = TrainingConfig(epochs=epochs, grad_accum=grad_accum, progress=False, device="cpu")
    assert Trainer(micro_gpt(), ToyTask(batches_per_epoch=10), config, tmp_path).config.steps == steps


def test_epochs_need_an_objective_with_a_fixed_training_set(tmp_path):
    task = ToyTask()
    task.batches_per_epoch = None
    with pytest.raises(Exception, match="`epochs` needs a task with a fixed training set"):
        Trainer(micro_gpt(), task, TrainingConfig(epochs=1, progress=False, device="cpu"), tmp_path)


@pytest.mark.parametrize(("maximize", "chosen"), [(True, 1), (False, 0)])
def test_best_model_is_the_one_the_selection_metric_chose(tmp_path, maximize, chosen):
    task = ToyTask(scripted_metrics=[0.2, 0.9, 0.5], selection=Selection("val_accuracy", maximize=maximize))
    config = TrainingConfig(steps=3, eval_every=1, save_every=100, progress=False, device="cpu", lr=1e-2)
    Trainer(micro_gpt(), task, config, tmp_path).train()

    best = load_model(tmp_path / BEST_DIR)
    for name, value in best.state_dict().items():
        torch.testing.assert_close(value, task.weights_seen[chosen][name], rtol=0, atol=0, msg=name)
    logged = [json.loads(line)["val_accuracy"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert logged == [0.2, 0.9, 0.5]


def test_a_resumed_run_remembers_the_best_value(tmp_path):
    selection = Selection("val_accuracy")
    config = TrainingConfig(steps=2, eval_every=1, save_every=1, progress=False, device="cpu", lr=1e-2)
    first = ToyTask(scripted_metrics=[0.2, 0.9], selection=selection)
    Trainer(micro_gpt(), first, config, tmp_path).train()

    resumed = ToyTask(scripted_metrics=[0.5], selection=selection)  # worse than 0.9: best/ must not change
    trainer = Trainer(micro_gpt(), resumed, TrainingConfig(**{**config.__dict__, "steps": 3}), tmp_path)
    trainer.train(resume=True)
    best = load_model(tmp_path / BEST_DIR)
    for name, value in best.state_dict().items():
        torch.testing.assert_close(value, first.weights_seen[1][name], rtol=0, atol=0, msg=name)


def test_a_run_directory_loads_its_best_model_first(tmp_path):
    task = ToyTask(scripted_metrics=[0.9, 0.1], selection=Selection("val_accuracy"))
    config = TrainingConfig(steps=2, eval_every=1, save_every=1, progress=False, device="cpu", lr=1e-2)
    Trainer(micro_gpt(), task, config, tmp_path).train()
    loaded = load_model(tmp_path)  # the run directory: best/ (step 1), not checkpoint/ (step 2)
    torch.testing.assert_close(loaded.state_dict(), task.weights_seen[0], rtol=0, atol=0)


def test_a_selection_metric_the_task_never_reports_is_an_error(tmp_path):
    task = ToyTask(scripted_metrics=[0.5], selection=Selection("val_f1"))
    config = TrainingConfig(steps=1, progress=False, device="cpu")
    with pytest.raises(Exception, match="val_f1, which its validation did not report"):
        Trainer(micro_gpt(), task, config, tmp_path).train()
