"""LAMB: Adam's step rescaled per tensor to lr * ||w||, its state saved like any other."""

import json
import math

import pytest
import torch
from torch import nn

from plm.errors import PLMError
from plm.storage.checkpoint import flatten_optimizer, read_tensors, unflatten_optimizer, write_tensors
from plm.training.lamb import Lamb, trust_ratio


def test_one_step_by_hand():
    weight = nn.Parameter(torch.tensor([3.0, 4.0], dtype=torch.float64))
    weight.grad = torch.tensor([1.0, -2.0], dtype=torch.float64)
    Lamb([weight], lr=0.1, eps=1e-6, weight_decay=0.01).step()
    # First step: m_hat = g and v_hat = g^2, so r = g / (|g| + eps) + wd * w.
    r = [1 / (1 + 1e-6) + 0.01 * 3, -2 / (2 + 1e-6) + 0.01 * 4]
    trust = 5 / math.hypot(*r)
    expected = torch.tensor([3 - 0.1 * trust * r[0], 4 - 0.1 * trust * r[1]], dtype=torch.float64)
    torch.testing.assert_close(weight.detach(), expected)
    assert (weight.detach() - torch.tensor([3.0, 4.0], dtype=torch.float64)).norm().item() == pytest.approx(0.1 * 5)


def test_the_trust_ratio_is_one_when_a_norm_is_zero():
    assert trust_ratio(torch.tensor([3.0, 4.0]), torch.tensor([0.0, 2.0])).item() == pytest.approx(2.5)
    assert trust_ratio(torch.zeros(3), torch.ones(3)).item() == 1.0
    assert trust_ratio(torch.ones(3), torch.zeros(3)).item() == 1.0
    bias = nn.Parameter(torch.zeros(4))
    bias.grad = torch.tensor([1.0, -1.0, 2.0, 0.5])
    Lamb([bias], lr=0.01, weight_decay=0.0).step()  # a zero bias moves like Adam's first step: lr * sign(g)
    torch.testing.assert_close(bias.detach(), -0.01 * bias.grad.sign(), atol=1e-7, rtol=1e-5)


def test_each_step_is_adamws_direction_with_length_lr_times_the_weight_norm():
    torch.manual_seed(0)
    layers = [nn.Parameter(torch.randn(8, 4) * scale) for scale in (0.01, 1.0, 30.0)]
    shadows = [nn.Parameter(layer.detach().clone()) for layer in layers]
    lamb = Lamb(layers, lr=0.01, weight_decay=0.0)
    adamw = torch.optim.AdamW(shadows, lr=0.01, eps=1e-6, weight_decay=0.0)
    for _ in range(5):
        grads = [torch.randn(8, 4) for _ in layers]
        for layer, shadow, grad in zip(layers, shadows, grads):
            layer.grad, shadow.grad = grad.clone(), grad.clone()
        before = [layer.detach().clone() for layer in layers]
        shadow_before = [shadow.detach().clone() for shadow in shadows]
        lamb.step()
        adamw.step()
        for layer, shadow, old, shadow_old in zip(layers, shadows, before, shadow_before):
            ours, theirs = (layer.detach() - old).flatten(), (shadow.detach() - shadow_old).flatten()
            assert torch.cosine_similarity(ours, theirs, dim=0).item() == pytest.approx(1.0, abs=1e-5)
            assert ours.norm().item() == pytest.approx(0.01 * old.norm().item(), rel=1e-5)


def test_without_layer_adaptation_it_is_adamw():
    torch.manual_seed(0)
    ours, theirs = nn.Linear(6, 3), nn.Linear(6, 3)
    theirs.load_state_dict(ours.state_dict())
    lamb = Lamb(ours.parameters(), lr=0.05, weight_decay=0.1, layer_adaptation=False)
    adamw = torch.optim.AdamW(theirs.parameters(), lr=0.05, eps=1e-6, weight_decay=0.1)
    x, y = torch.randn(32, 6), torch.randn(32, 3)
    for _ in range(10):
        for model, optimizer in ((ours, lamb), (theirs, adamw)):
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    for a, b in zip(ours.parameters(), theirs.parameters()):
        torch.testing.assert_close(a, b)


def test_a_small_regression_converges():
    torch.manual_seed(0)
    x = torch.randn(256, 10)
    y = x @ torch.randn(10, 1) + 0.5
    model = nn.Linear(10, 1)
    optimizer = Lamb(model.parameters(), lr=0.05, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / 300)
    start = nn.functional.mse_loss(model(x), y).item()
    for _ in range(300):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        schedule.step()
    assert loss.item() < 1e-3 * start


def test_the_state_survives_a_checkpoint(tmp_path):
    """plm's checkpoints keep tensor state in safetensors and the rest in JSON; the step is a tensor."""
    torch.manual_seed(0)
    x, y = torch.randn(16, 5), torch.randn(16, 2)

    def train(model, optimizer, steps):
        for _ in range(steps):
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()

    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 2))
    groups = [{"params": model[0].parameters()}, {"params": model[2].parameters(), "weight_decay": 0.0}]
    optimizer = Lamb(groups, lr=0.01)
    train(model, optimizer, 3)
    tensors, structure = flatten_optimizer(optimizer.state_dict())
    assert structure["scalars"] == {} and tensors["0.step"].item() == 3
    structure = json.loads(json.dumps(structure))
    write_tensors(tmp_path / "optimizer.safetensors", tensors)
    resumed_model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 2))
    resumed_model.load_state_dict(model.state_dict())
    resumed = Lamb([{"params": resumed_model[0].parameters()}, {"params": resumed_model[2].parameters()}], lr=0.5)
    resumed.load_state_dict(unflatten_optimizer(read_tensors(tmp_path / "optimizer.safetensors"), structure))
    assert resumed.param_groups[1]["weight_decay"] == 0.0 and resumed.param_groups[0]["lr"] == 0.01
    train(model, optimizer, 3)
    train(resumed_model, resumed, 3)
    for a, b in zip(model.parameters(), resumed_model.parameters()):
        assert torch.equal(a, b)


def test_bad_hyperparameters_are_refused():
    with pytest.raises(PLMError, match="betas in"):
        Lamb([nn.Parameter(torch.ones(1))], betas=(0.9, 1.0))


def test_a_fused_projection_steps_as_its_three_matrices_would_apart():
    """plm's in_proj stacks W_Q, W_K, W_V; ALBERT's code has three matrices, each with its own trust ratio."""
    torch.manual_seed(0)
    blocks = [torch.randn(4, 6) * scale for scale in (0.02, 0.05, 1.0)]  # norms far apart
    fused = nn.Parameter(torch.cat(blocks))
    apart = [nn.Parameter(block.clone()) for block in blocks]
    fused_lamb = Lamb([{"params": [fused], "parts": 3}], lr=0.1, weight_decay=0.01)
    apart_lamb = Lamb(apart, lr=0.1, weight_decay=0.01)
    for _ in range(3):
        gradients = [torch.randn(4, 6) * scale for scale in (1e-3, 1.0, 10.0)]
        fused.grad = torch.cat(gradients)
        for parameter, gradient in zip(apart, gradients):
            parameter.grad = gradient.clone()
        fused_lamb.step()
        apart_lamb.step()
    torch.testing.assert_close(fused.detach(), torch.cat([parameter.detach() for parameter in apart]))


def test_the_optimizer_groups_put_each_fused_projection_in_its_own_blocks():
    from plm.models import from_config, preset_config
    from plm.training.optim import parameter_groups

    model = from_config(preset_config("albert-micro"))
    [fused] = [group for group in parameter_groups(model, 0.01) if group.get("parts") == 3]
    assert fused["params"] == [block.attention.in_proj.weight for block in model.blocks[:1]]  # shared by all layers
