"""Training checkpoints: what a kill in the middle of a save leaves, and whose random streams a resume restores."""

from __future__ import annotations

import dataclasses
import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from plm.errors import PLMError
from plm.models import from_config, from_preset
from plm.storage import checkpoint
from plm.storage.atomic_files import flatten_optimizer, read_tensors, unflatten_optimizer, write_tensors
from plm.storage.checkpoint import load_checkpoint, rng_states, save_checkpoint


def seeded_rng_states(seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    return rng_states()


def draws() -> tuple[list[float], list[float], float]:
    return torch.rand(3).tolist(), np.random.rand(3).tolist(), random.random()


def model_and_optimizer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = from_preset("gpt2-micro")
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def test_each_process_resumes_with_its_own_random_streams(tmp_path: Path) -> None:
    """Process 1 of a two-process run must get process 1's RNG states, not process 0's: each draws its own dropout
    masks. The oracle is what each seed draws."""
    expected = {}
    for seed in (10, 11):
        seeded_rng_states(seed)
        expected[seed] = draws()
    model, optimizer = model_and_optimizer()
    save_checkpoint(tmp_path, model, optimizer, {"step": 3}, rng=[seeded_rng_states(10), seeded_rng_states(11)])
    for rank, seed in ((1, 11), (0, 10)):
        torch.manual_seed(99), np.random.seed(99), random.seed(99)
        assert load_checkpoint(tmp_path, model, optimizer, rank=rank, processes=2)["step"] == 3
        assert draws() == expected[seed], rank


def test_a_kill_between_the_renames_of_a_checkpoint_swap_leaves_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new checkpoint replaces the old one with two renames; killed before the second, the old one must still be
    there to resume from (the previous checkpoint or the new one, never neither)."""
    model, optimizer = model_and_optimizer()
    save_checkpoint(tmp_path, model, optimizer, {"step": 1})
    renames, replace = [], os.replace

    def killed_at_the_second_rename(source, target):
        renames.append(Path(target).name)
        if Path(target).name == checkpoint.CHECKPOINT_DIR:
            raise KeyboardInterrupt  # the kill, before the new checkpoint takes the old one's name
        replace(source, target)

    monkeypatch.setattr(checkpoint.os, "replace", killed_at_the_second_rename)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, model, optimizer, {"step": 2})
    monkeypatch.undo()
    assert renames[-1] == checkpoint.CHECKPOINT_DIR
    assert load_checkpoint(tmp_path, model, optimizer)["step"] == 1
    save_checkpoint(tmp_path, model, optimizer, {"step": 2})
    assert load_checkpoint(tmp_path, model, optimizer)["step"] == 2
    assert not (tmp_path / checkpoint.PREVIOUS_CHECKPOINT_DIR).exists()


def test_an_optimizer_state_keyed_by_dotted_parameter_names_survives_the_round_trip(tmp_path: Path) -> None:
    """FSDP saves the optimizer state by parameter name ("blocks.0.attention.in_proj.weight"), dots and all: the
    field is what follows the last dot. The oracle is the state dict that went in."""
    model, optimizer = model_and_optimizer()
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    optimizer.step()
    names = dict(enumerate(name for name, _ in model.named_parameters()))
    by_name = {**optimizer.state_dict()}
    by_name["state"] = {names[index]: values for index, values in by_name["state"].items()}
    tensors, structure = flatten_optimizer(by_name)
    write_tensors(tmp_path / "optimizer.safetensors", tensors)
    restored = unflatten_optimizer(read_tensors(tmp_path / "optimizer.safetensors"), structure, key=str)
    assert restored["state"].keys() == by_name["state"].keys()
    for name, values in by_name["state"].items():
        assert restored["state"][name].keys() == values.keys(), name
        for field, value in values.items():
            assert torch.equal(torch.as_tensor(restored["state"][name][field]), torch.as_tensor(value)), (name, field)


def test_a_checkpoint_of_another_config_is_refused_even_when_every_shape_fits(tmp_path: Path) -> None:
    """A model whose config differs only in a rate (every tensor the same shape) would load without a complaint and
    silently go on as another run; the check on the config must refuse it."""
    model, optimizer = model_and_optimizer()
    save_checkpoint(tmp_path, model, optimizer, {"step": 1})
    other = from_config(dataclasses.replace(model.config, dropout=0.3))
    with pytest.raises(PLMError, match="checkpoint is a gpt model of another config than this run's"):
        load_checkpoint(tmp_path, other, torch.optim.AdamW(other.parameters(), lr=1e-3))
