"""Optimizer parameter groups and the learning-rate schedules."""

from __future__ import annotations

import math

import torch
from torch import nn

from plm.core import LearnedPositions
from plm.core.attention import FUSED_PARTS
from plm.errors import PLMError
from plm.models.recipe import OPTIMIZERS, SCHEDULES
from plm.training.lamb import Lamb


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight matrices, fused Q, K, V projections, embeddings (the three decayed), biases and norms: a group each.

    A group with no parameters is left out.

    Weight decay applies to every weight but biases and LayerNorm gains, as in GPT-1 ("all non
    bias or gain weights") and BERT's and ALBERT's optimizers (which exclude "LayerNorm" and
    "bias"): the token, position and segment embeddings decay too. They keep a group of their
    own, as when plm did not decay them: a checkpoint's optimizer state restores each group's
    ``weight_decay``, so a run saved then resumes as it started. A fused projection (a module
    whose ``fused_parts`` is 3) is a group of its own, whose ``parts`` tell LAMB to take each of
    its blocks as a layer. The groups carry
    ``layer_adaptation`` for LAMB: biases and LayerNorm parameters take plain Adam steps, as in
    the LAMB implementation ALBERT used. Their trust ratio ||w|| / ||r|| would otherwise pin a
    zero-initialised bias to growing by a factor of about (1 + lr) per step.
    """
    embedding_modules = (nn.Embedding, LearnedPositions)
    matrices, fused, embeddings, biases_and_norms = [], [], [], []
    for module in model.modules():
        for name, parameter in module.named_parameters(recurse=False):
            if not parameter.requires_grad:
                continue
            if isinstance(module, nn.LayerNorm) or name.endswith("bias") or parameter.dim() < 2:
                biases_and_norms.append(parameter)
            elif isinstance(module, embedding_modules):
                embeddings.append(parameter)
            elif getattr(module, "fused_parts", 1) == FUSED_PARTS:
                fused.append(parameter)
            else:
                matrices.append(parameter)
    groups = [
        {"params": matrices, "weight_decay": weight_decay, "layer_adaptation": True},
        {"params": fused, "weight_decay": weight_decay, "layer_adaptation": True, "parts": FUSED_PARTS},
        {"params": embeddings, "weight_decay": weight_decay, "layer_adaptation": True},
        {"params": biases_and_norms, "weight_decay": 0.0, "layer_adaptation": False},
    ]
    return [group for group in groups if group["params"]]


def learning_rate(schedule: str, step: int, peak: float, warmup: int, total: int, floor: float) -> float:
    """The learning rate of optimizer step ``step`` (0-based) out of ``total``.

    A linear warmup from 0 to ``peak`` over ``warmup`` steps, then the schedule's decay:
    ``cosine`` (GPT-1) and ``linear`` (BERT, ALBERT) reach ``floor`` at the last step,
    ``inverse-sqrt`` is the Transformer's d^-0.5 min(n^-0.5, n warmup^-1.5) with
    n = step + 1 and the peak d^-0.5 warmup^-0.5 written as ``peak``, ``constant`` stays.
    """
    if schedule not in SCHEDULES:
        raise PLMError(f"unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    if step < warmup:
        return peak * (step + 1) / warmup
    if schedule == "constant":
        return peak
    if schedule == "inverse-sqrt":
        return peak * math.sqrt(max(1, warmup) / (step + 1))
    return decayed(schedule, (step - warmup) / max(1, total - 1 - warmup), peak, floor)


def decayed(schedule: str, progress: float, start: float, floor: float) -> float:
    """A ``cosine`` or ``linear`` decay from ``start`` to ``floor``, ``progress`` of the way (0 to 1, clipped)."""
    progress = min(1.0, progress)
    if schedule == "linear":
        return floor + (start - floor) * (1.0 - progress)
    return floor + 0.5 * (start - floor) * (1.0 + math.cos(math.pi * progress))


def build_optimizer(
    name: str, model: nn.Module, lr: float, weight_decay: float, betas: tuple[float, float], eps: float
) -> torch.optim.Optimizer:
    """AdamW, LAMB (ALBERT's large-batch optimizer) or Adagrad (ELMo's), over `parameter_groups`."""
    groups = parameter_groups(model, weight_decay)
    if name == "adamw":
        for group in groups:
            del group["layer_adaptation"]
            group.pop("parts", None)
        fused = next(model.parameters()).device.type == "cuda"
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused)
    if name == "lamb":
        return Lamb(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    if name == "adagrad":  # as bilm-tf (TensorFlow's): accumulators start at 1; it takes no betas
        for group in groups:
            del group["layer_adaptation"]
            group.pop("parts", None)
        return torch.optim.Adagrad(groups, lr=lr, eps=eps, initial_accumulator_value=1.0)
    raise PLMError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
