"""Optimizer parameter groups and the learning-rate schedule."""

from __future__ import annotations

import math

import torch
from torch import nn

from plm.core import LearnedPositions
from plm.errors import PLMError
from plm.training.lamb import Lamb


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on weight matrices only: never on biases, norms or embeddings."""
    no_decay_modules = (nn.LayerNorm, nn.Embedding, LearnedPositions)
    decay, no_decay = [], []
    for module in model.modules():
        for name, parameter in module.named_parameters(recurse=False):
            if not parameter.requires_grad:
                continue
            if isinstance(module, no_decay_modules) or name.endswith("bias") or parameter.dim() < 2:
                no_decay.append(parameter)
            else:
                decay.append(parameter)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def warmup_cosine(step: int, peak: float, warmup: int, total: int, floor: float) -> float:
    """GPT-1's schedule: linear warmup from 0 to ``peak``, then cosine decay to ``floor``."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + 0.5 * (peak - floor) * (1.0 + math.cos(math.pi * progress))


OPTIMIZERS = ("auto", "adamw", "lamb")


def build_optimizer(
    name: str, model: nn.Module, lr: float, weight_decay: float, betas: tuple[float, float], eps: float
) -> torch.optim.Optimizer:
    """AdamW (also for "auto"), or LAMB (ALBERT's large-batch optimizer), over :func:`parameter_groups`."""
    groups = parameter_groups(model, weight_decay)
    if name in ("auto", "adamw"):
        fused = next(model.parameters()).device.type == "cuda"
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused)
    if name == "lamb":
        return Lamb(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    raise PLMError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
