"""Recipes: each family's paper choices in one place, the schedules and optimizers they name."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch
from torch import nn

import plm
from plm.cli.main import main
from plm.models import RECIPES
from plm.models.recipe import Hyperparameters
from plm.objectives import objective_spec
from plm.training.optim import build_optimizer, learning_rate, parameter_groups
from plm.training.pretrain import PretrainSetup, prepare
from plm.training.trainer import TrainingConfig

SRC = Path(plm.__file__).parent
QUICK = ["--vocab-size", "300", "--block-size", "32", "--batch-size", "4", "--no-progress", "--device", "cpu"]


def test_the_paper_values_are_the_seeds() -> None:
    gpt1, bert, albert = RECIPES["gpt"].paper, RECIPES["bert"].paper, RECIPES["albert"].paper
    # GPT-1: Adam, 2.5e-4 reached after 2000 warmup steps, cosine annealing to 0.
    assert (gpt1.optimizer, gpt1.lr, gpt1.warmup, gpt1.schedule, gpt1.min_lr) == ("adamw", 2.5e-4, 2000, "cosine", 0.0)
    # BERT: Adam 1e-4, betas (0.9, 0.999), weight decay 0.01, 10k warmup steps, linear decay.
    assert (bert.optimizer, bert.lr, bert.betas, bert.weight_decay) == ("adamw", 1e-4, (0.9, 0.999), 0.01)
    assert (bert.warmup, bert.schedule, bert.min_lr) == (10_000, "linear", 0.0)
    # ALBERT: LAMB 0.00176, betas (0.9, 0.999), eps 1e-6.
    assert (albert.optimizer, albert.lr, albert.betas, albert.eps) == ("lamb", 0.00176, (0.9, 0.999), 1e-6)
    # DeBERTa (its paper's appendix A, Table 8, base; seed 001 gives no optimizer): Adam 2e-4, betas (0.9, 0.999),
    # eps 1e-6, weight decay 0.01, 10K warmup steps, linear decay.
    deberta = RECIPES["deberta"].paper
    assert (deberta.optimizer, deberta.lr, deberta.betas, deberta.eps, deberta.weight_decay) == (
        "adamw", 2e-4, (0.9, 0.999), 1e-6, 0.01)
    assert (deberta.warmup, deberta.schedule, deberta.min_lr) == (10_000, "linear", 0.0)


def test_each_family_name_stands_for_its_recipe(text_file: Path, tmp_path: Path) -> None:
    tokenizer_kinds = {"bpe": "BPE", "wordpiece": "WordPiece", "unigram": "Unigram", "words": "WordLevel"}
    for family, recipe in RECIPES.items():
        if objective_spec(recipe.objective).parallel_text:  # encoder-decoders: plm seq2seq train (test_seq2seq_cli)
            continue
        setup = PretrainSetup(model=family, train_files=(str(text_file),), vocab_size=300, batch_size=2)
        trainer, tokenizer = prepare(setup, TrainingConfig(steps=1000, device="cpu"), tmp_path / family)
        assert trainer.model.family == family
        assert trainer.model.config == plm.models.preset_config(
            recipe.preset, vocab_size=len(tokenizer), **{k: getattr(trainer.model.config, k)
                                                         for k in ("pretraining_heads", "pooler", "segments")
                                                         if hasattr(trainer.model.config, k)})
        assert type(tokenizer.backend.model).__name__ == tokenizer_kinds[recipe.tokenizer]
        cpu = recipe.hyperparameters
        assert type(trainer.optimizer).__name__ == {"adamw": "AdamW", "lamb": "Lamb"}[cpu.optimizer]
        group = trainer.optimizer.param_groups[0]
        assert (group["betas"], group["eps"], group["weight_decay"]) == (cpu.betas, cpu.eps, cpu.weight_decay)
        assert (trainer.config.lr, trainer.config.warmup, trainer.config.schedule) == (cpu.lr, cpu.warmup, cpu.schedule)


def test_paper_hyperparameters_and_flags_reach_the_optimizer(text_file: Path, tmp_path: Path) -> None:
    setup = PretrainSetup(model="bert-micro", train_files=(str(text_file),), vocab_size=300, batch_size=2,
                          hyperparameters="paper")
    trainer, _ = prepare(setup, TrainingConfig(steps=100_000, device="cpu", eps=1e-7), tmp_path / "paper")
    assert trainer.config.lr == 1e-4 and trainer.config.warmup == 10_000 and trainer.config.eps == 1e-7

    out = tmp_path / "flags"
    argv = ["pretrain", "--model", "albert-micro", *QUICK, "--steps", "2", "--train", str(text_file), "--out", str(out),
            "--betas", "0.8", "0.99", "--eps", "1e-7", "--schedule", "inverse-sqrt", "--warmup", "1", "--lr", "0.01",
            "--log-every", "1"]
    assert main(argv) == 0
    saved = json.loads((out / "training_config.json").read_text())
    assert (saved["betas"], saved["eps"], saved["schedule"], saved["optimizer"]) == (
        [0.8, 0.99], 1e-7, "inverse-sqrt", "lamb"
    )
    lrs = [json.loads(line)["lr"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert lrs == pytest.approx([0.01, 0.01 * math.sqrt(1 / 2)])


def test_inverse_sqrt_is_the_transformers_learning_rate() -> None:
    d_model, warmup = 512, 4000
    peak = d_model**-0.5 * warmup**-0.5
    for step_num in (1, 100, 3999, 4000, 4001, 20_000, 100_000):
        expected = d_model**-0.5 * min(step_num**-0.5, step_num * warmup**-1.5)
        assert learning_rate("inverse-sqrt", step_num - 1, peak, warmup, 100_000, 0.0) == pytest.approx(expected)


@pytest.mark.parametrize("schedule", ["cosine", "linear", "constant"])
def test_schedules_warm_up_linearly_then_decay_to_the_floor_at_the_last_step(schedule: str) -> None:
    lrs = [learning_rate(schedule, step, peak=1.0, warmup=10, total=111, floor=0.1) for step in range(111)]
    assert lrs[:10] == pytest.approx([(step + 1) / 10 for step in range(10)])
    middle = {"cosine": 0.55, "linear": 0.55, "constant": 1.0}[schedule]  # step 60 is half-way from 10 to 110
    assert lrs[60] == pytest.approx(middle)
    assert lrs[110] == pytest.approx(1.0 if schedule == "constant" else 0.1)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))


def steps_until_the_bias_reaches(target: float, optimizer: str, lr: float = 0.01) -> int:
    """A zero-initialised bias pulled towards ``target``: optimizer steps until it is within 10%."""
    torch.manual_seed(0)
    layer = nn.Linear(8, 8)
    nn.init.zeros_(layer.bias)
    step = build_optimizer(optimizer, layer, lr=lr, weight_decay=0.0, betas=(0.9, 0.999), eps=1e-6)
    for count in range(1, 2000):
        step.zero_grad()
        ((layer.bias - target) ** 2).sum().backward()
        step.step()
        if bool(((layer.bias - target).abs() < 0.1 * target).all()):
            return count
    return 2000


def test_lamb_moves_a_zero_bias_as_fast_as_adamw() -> None:
    # With the trust ratio ||w|| / ||r|| on biases, a zero bias grows by about (1 + lr) per step: ~400 steps here.
    adamw, lamb = steps_until_the_bias_reaches(0.5, "adamw"), steps_until_the_bias_reaches(0.5, "lamb")
    assert adamw < 100
    assert lamb <= 1.2 * adamw


def test_lamb_exempts_every_bias_and_norm_of_albert_from_the_trust_ratio() -> None:
    model = plm.from_preset("albert-micro", pretraining_heads=("mlm", "sop"))
    names = {id(p): n for n, p in model.named_parameters()}
    exempt = {names[id(p)] for g in parameter_groups(model, 0.01) if not g["layer_adaptation"] for p in g["params"]}
    assert {"mlm_head.bias", "pooler.dense.bias", "pair_head.classifier.bias"} <= exempt
    assert all(name.endswith("bias") or "norm" in name for name in exempt)


def test_albert_pretrains_without_dropout_in_its_sop_head() -> None:
    model = plm.from_preset("albert-micro", pretraining_heads=("mlm", "sop")).train()
    ids = torch.randint(5, 500, (4, 16), generator=torch.Generator().manual_seed(0))
    first, second = model(ids).pair_logits, model(ids).pair_logits
    torch.testing.assert_close(first, second, rtol=0, atol=0)  # training mode, yet nothing is dropped


def test_training_code_names_no_family() -> None:
    """Recipes have one home: the training entry points read them and never branch on a family name."""
    families = "|".join(RECIPES)
    for path in [*(SRC / "training").glob("*.py"), SRC / "cli" / "pretrain.py", SRC / "objectives" / "builders.py"]:
        assert not re.search(rf"""["']({families})["']""", path.read_text()), path


def test_a_bare_trainer_takes_the_generic_hyperparameters(tmp_path: Path) -> None:
    class NoBatches:
        train_tokens = 0

    config = plm.training.trainer.Trainer(plm.from_preset("gpt2-micro"), NoBatches(), TrainingConfig(), tmp_path).config
    assert {name: getattr(config, name) for name in vars(Hyperparameters())} == vars(Hyperparameters())
