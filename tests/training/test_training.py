"""The trainer: checkpoints load, the loss falls, the schedule.

Accumulation and data parallelism are in test_accumulation.py, resuming in test_resume.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

import plm
from plm.errors import PLMError
from plm.objectives.clm import CausalLMObjective
from plm.storage.checkpoint import CHECKPOINT_DIR, WEIGHTS_FILE, load_model
from plm.training.optim import parameter_groups
from plm.training.parallel import Parallelism
from plm.training.pretrain import PretrainSetup, prepare, pretrain
from plm.training.trainer import Trainer, TrainingConfig

TINY = dict(
    steps=8, lr=3e-3, min_lr=3e-4, warmup=2, eval_every=4, save_every=4, log_every=1, progress=False, device="cpu"
)


def test_checkpoint_holds_a_loadable_model_and_tokenizer(tmp_path: Path, text_file: Path) -> None:
    setup = PretrainSetup(
        model="gpt2-micro", train_files=(str(text_file),), vocab_size=300, block_size=32, batch_size=4
    )
    model, tokenizer, last = pretrain(setup, TrainingConfig(**TINY), tmp_path / "run")
    assert last["step"] == 8 and last["val_loss"] > 0
    loaded = load_model(tmp_path / "run")
    assert loaded.config == model.config
    assert plm.Tokenizer.load(tmp_path / "run" / CHECKPOINT_DIR).vocab_size == len(tokenizer)
    ids = torch.tensor([tokenizer.encode("The cat reads")])
    torch.testing.assert_close(loaded(ids).logits, model.cpu().eval()(ids).logits)


def test_loss_falls_on_learnable_text(tmp_path: Path, text_file: Path) -> None:
    setup = PretrainSetup(
        model="gpt2-micro", train_files=(str(text_file),), vocab_size=300, block_size=32, batch_size=8
    )
    trainer, _ = prepare(
        setup, TrainingConfig(**{**TINY, "steps": 40, "eval_every": 40, "save_every": 40}), tmp_path / "run"
    )
    before = trainer.evaluate()["val_loss"]
    after = trainer.train()["val_loss"]
    assert after < before - 1.0


def test_block_size_beyond_the_context_is_refused(tmp_path: Path, text_file: Path) -> None:
    setup = PretrainSetup(model="gpt2-micro", train_files=(str(text_file),), vocab_size=300, block_size=65)
    with pytest.raises(PLMError, match="exceeds the model's context of 64"):
        prepare(setup, TrainingConfig(**TINY), tmp_path / "run")


def test_resume_without_a_checkpoint_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PLMError, match="no checkpoint to resume from"):
        pretrain(PretrainSetup(model="gpt2-micro"), TrainingConfig(**TINY), tmp_path / "empty", resume=True)


@pytest.mark.parametrize("preset", ["gpt2-micro", "bert-micro"])
def test_weight_decay_on_every_weight_but_biases_and_gains_and_no_trust_ratio_for_them(preset: str) -> None:
    """GPT-1: "w = 0.01 on all non bias or gain weights"; BERT's optimizer excludes "LayerNorm" and "bias" alone, so
    the token, position and segment embeddings decay as the other weights do."""
    model = plm.from_preset(preset)
    names = {id(p): n for n, p in model.named_parameters()}
    decay = {names[id(p)]: (g["weight_decay"], g["layer_adaptation"]) for g in parameter_groups(model, 0.01)
             for p in g["params"]}
    assert sorted(decay) == sorted(names.values())  # every parameter, once
    norms = {f"{name}.{kind}" for name, module in model.named_modules() if isinstance(module, torch.nn.LayerNorm)
             for kind in ("weight", "bias")}
    for name, (weight_decay, layer_adaptation) in decay.items():
        bias_or_gain = name.endswith("bias") or name in norms
        assert (weight_decay, layer_adaptation) == ((0.0, False) if bias_or_gain else (0.01, True)), name
    assert decay["token_embedding.weight" if preset.startswith("gpt") else "embeddings.word.weight"] == (0.01, True)
    [fused] = [g for g in parameter_groups(model, 0.01) if "parts" in g]
    assert {names[id(p)] for p in fused["params"]} == {name for name in names.values() if "in_proj.weight" in name}
    assert fused["parts"] == 3  # W_Q, W_K, W_V: a trust ratio each


def test_compiled_training_takes_the_same_steps(tmp_path: Path, text_file: Path, monkeypatch) -> None:
    """--compile trains the same parameters through a compiled graph (aot_eager here: inductor is slow to build)."""
    compiled = []

    def compile_for_the_test(module, **options):
        compiled.append(module)
        return torch.compile.__wrapped__(module, backend="aot_eager")

    compile_for_the_test.__wrapped__ = torch.compile
    setup = PretrainSetup(model="gpt2-micro", train_files=(str(text_file),), vocab_size=300, block_size=32,
                          batch_size=4, dropout=0.0)
    config = {**TINY, "steps": 3, "log_every": 1}
    pretrain(setup, TrainingConfig(**config), tmp_path / "eager")
    monkeypatch.setattr(torch, "compile", compile_for_the_test)
    pretrain(setup, TrainingConfig(**config, compile=True), tmp_path / "compiled")
    assert len(compiled) == 1
    losses = [[json.loads(line)["loss"] for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
              for run in ("eager", "compiled")]
    assert losses[1] == pytest.approx(losses[0], abs=1e-5)
    # The checkpoint holds the model's own names, not the compiled wrapper's (_orig_mod.): plm and other readers load it
    names = set(plm.from_preset("gpt2-micro").state_dict())
    for run in ("eager", "compiled"):
        with safe_open(tmp_path / run / CHECKPOINT_DIR / WEIGHTS_FILE, "pt") as weights:
            assert set(weights.keys()) == names, run
    loaded = load_model(tmp_path / "compiled" / CHECKPOINT_DIR)
    assert set(loaded.state_dict()) == names


def random_token_objective() -> CausalLMObjective:
    tokens = torch.randint(0, 512, (4000,), generator=torch.Generator().manual_seed(0)).numpy()
    return CausalLMObjective(tokens, tokens[:200], block_size=32, batch_size=4)


def train_micro_gpt(out: Path, device: str, precision: str = "auto", parallelism: Parallelism = Parallelism(),
                    compile: bool = False) -> Trainer:
    """Six steps of gpt2-micro, no dropout, on random tokens: the same run on any device and precision."""
    torch.manual_seed(0)
    model = plm.from_preset("gpt2-micro", dropout=0.0, attention_dropout=0.0, embedding_dropout=0.0)
    config = TrainingConfig(steps=6, device=device, precision=precision, progress=False, log_every=1, eval_every=6,
                            save_every=6, parallelism=parallelism, compile=compile)
    trainer = Trainer(model, random_token_objective(), config, out)
    trainer.train()
    return trainer


def gain_updates(trainer: Trainer) -> torch.Tensor:
    """How far training moved every LayerNorm gain of the model from its initial 1.0, flat, in fp32 on the CPU."""
    return torch.cat([parameter.detach().float().cpu().flatten() - 1.0
                      for name, parameter in trainer.model.named_parameters()
                      if "norm" in name and name.endswith("weight")])


def assert_updates_follow(got: torch.Tensor, want: torch.Tensor) -> None:
    """``got`` within 10% of ``want`` (as vectors): bf16 arithmetic moves Adam's steps by about 1%."""
    assert torch.linalg.vector_norm(got - want) <= 0.1 * torch.linalg.vector_norm(want)


def test_bf16_training_keeps_fp32_master_weights(tmp_path: Path) -> None:
    """bf16 autocast computes in bf16, but the weights and their updates stay fp32.

    A gain's Adam step (about lr) is below bf16's spacing at 1.0 (2^-7): gains kept in bf16
    would not move at all, and their updates would miss fp32's by 100%.
    """
    bf16 = train_micro_gpt(tmp_path / "bf16", "cpu", "bf16")
    fp32 = train_micro_gpt(tmp_path / "fp32", "cpu", "fp32")
    assert bf16.dtype == torch.bfloat16 and next(bf16.model.parameters()).dtype == torch.float32
    assert_updates_follow(gain_updates(bf16), gain_updates(fp32))
