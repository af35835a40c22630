"""SiFT, DeBERTa's scale-invariant fine-tuning (He et al., 2021, section 3.4): virtual adversarial training
on the normalised word embeddings.

A perturbation of a fixed size means little when the embeddings' norms vary from
word to word and grow during training; SiFT adds it after the embedding LayerNorm,
where every vector has the same scale. The perturbation starts as small Gaussian
noise, takes one step up the gradient of the symmetric KL divergence between the
perturbed and the clean predictions (each token's step normalised to length
``step``), and that divergence, at the stepped perturbation, is the added loss term:
the model learns to give the same prediction in a neighbourhood of its input.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from plm.errors import PLMError


def symmetric_kl(logits: torch.Tensor, target_logits: torch.Tensor) -> torch.Tensor:
    """KL(p || q) + KL(q || p) of the softmaxes over the last axis, summed over the rows (batch, ...).

    Each direction treats its second distribution as a fixed target (SMART's and
    DeBERTa's form), so the gradient reaches ``logits`` through the first and
    ``target_logits`` through the second.
    """
    p, q = logits.float().log_softmax(-1), target_logits.float().log_softmax(-1)
    return (F.kl_div(q.detach(), p, log_target=True, reduction="sum")
            + F.kl_div(p.detach(), q, log_target=True, reduction="sum"))


def normalised_embeddings(model: nn.Module) -> nn.Module:
    """The LayerNorm that normalises the word (+ position + segment) embeddings of an encoder or task model."""
    backbone = getattr(model, "backbone", model)
    norm = getattr(getattr(backbone, "embeddings", None), "norm", None)
    if not isinstance(norm, nn.LayerNorm):
        raise PLMError(f"SiFT perturbs an encoder's normalised embeddings; a {type(backbone).__name__} has none")
    return norm


@contextlib.contextmanager
def perturbed(norm: nn.Module, delta: Callable[[torch.Tensor], torch.Tensor]) -> Iterator[None]:
    """Inside the block, ``norm``'s output x becomes x + delta(x)."""
    handle = norm.register_forward_hook(lambda module, inputs, output: output + delta(output))
    try:
        yield
    finally:
        handle.remove()


@dataclass(frozen=True)
class SiFT:
    """``noise``: the initial perturbation's standard deviation; ``step``: the length of the ascent step."""

    noise: float = 1e-5
    step: float = 1e-3

    def loss(self, model: nn.Module, logits_of: Callable[[], torch.Tensor], clean_logits: torch.Tensor) -> torch.Tensor:
        """The symmetric KL between the clean logits and those under the adversarial perturbation, summed.

        ``logits_of()`` runs ``model`` on the batch and returns logits over the last axis.
        """
        norm = normalised_embeddings(model)
        start: dict[str, torch.Tensor] = {}

        def initial(x: torch.Tensor) -> torch.Tensor:
            start["delta"] = (torch.randn_like(x) * self.noise).requires_grad_()
            return start["delta"]

        with perturbed(norm, initial):
            divergence = symmetric_kl(logits_of(), clean_logits.detach())
        (gradient,) = torch.autograd.grad(divergence, start["delta"])
        direction = gradient / gradient.norm(dim=-1, keepdim=True).clamp(min=1e-12)  # per token
        delta = (start["delta"] + self.step * direction).detach()
        with perturbed(norm, lambda x: delta):
            return symmetric_kl(logits_of(), clean_logits)
