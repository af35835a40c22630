"""SiFT, DeBERTa's scale-invariant fine-tuning (He et al., 2021, section 3.4).

Virtual adversarial training on the normalised word embeddings, as DeBERTa's released code
(``DeBERTa/sift/sift.py``) does it.

A perturbation of a fixed size means little when the embeddings' norms vary from
word to word and grow during training; SiFT adds it where every vector has the same
scale. The released code standardises the input x of the embedding LayerNorm without
affine parameters, x^ = (x - mean) / sqrt(var + 1e-7), and feeds x^ + delta to that
LayerNorm, which renormalises it and applies its gamma and beta:

    clean:     LayerNorm(x)
    perturbed: LayerNorm(x^ + delta)    (x^ detached: the clean pass's, as the released code caches it)

delta starts as N(0, 1e-2) noise clipped to +-2e-2, takes one step up the gradient g of
the symmetric KL divergence between the perturbed and the clean predictions, each
token's step scaled by its largest coordinate (delta + 1e-4 g / (1e-6 + ||g||_inf)),
and that divergence, at the stepped perturbation, is the added loss term: the model
learns to give the same prediction in a neighbourhood of its input.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from plm.errors import PLMError

STANDARDISE_EPS = 1e-7  # the released perturbation layer's own LayerNorm epsilon, whatever the model's
STEP_EPS = 1e-6  # the released guard in g / (eps + ||g||_inf): a vanishing gradient takes a shorter step


def symmetric_kl(logits: torch.Tensor, target_logits: torch.Tensor) -> torch.Tensor:
    """KL(q || p) + KL(p || q) of the softmaxes p, q over the last axis, summed over the rows (batch, ...).

    Each direction differentiates its second distribution only, the first held fixed, as
    the released code's two cross-entropies do: the gradient reaching ``logits`` is
    softmax(logits) - softmax(target_logits), and the one reaching ``target_logits`` its
    negative. (The released code returns the cross-entropies themselves, which add the
    two entropies to this value and nothing to its gradient; the KL is zero when the
    predictions agree, so the logged term says how far they moved.)

    Args:
        logits: (batch, ..., classes), the perturbed predictions' logits.
        target_logits: the clean logits, shaped as ``logits``.

    Returns:
        The divergence, a float32 scalar.
    """
    p, q = logits.float().log_softmax(-1), target_logits.float().log_softmax(-1)
    return (F.kl_div(p, q.detach(), log_target=True, reduction="sum")
            + F.kl_div(q, p.detach(), log_target=True, reduction="sum"))


def normalised_embeddings(model: nn.Module) -> nn.Module:
    """The LayerNorm that normalises the word (+ position + segment) embeddings of an encoder or task model.

    Args:
        model: an encoder, or a task model on one.

    Returns:
        The LayerNorm (``embeddings.norm`` of the model or its backbone).

    Raises:
        PLMError: a model without such a LayerNorm.
    """
    backbone = getattr(model, "backbone", model)
    norm = getattr(getattr(backbone, "embeddings", None), "norm", None)
    if not isinstance(norm, nn.LayerNorm):
        raise PLMError(f"SiFT perturbs an encoder's normalised embeddings; a {type(backbone).__name__} has none")
    return norm


def standardise(x: torch.Tensor) -> torch.Tensor:
    """(x - mean) / sqrt(var + 1e-7) over the last axis: a LayerNorm without gamma and beta, in float32.

    Args:
        x: (..., dim).

    Returns:
        The standardised x, float32, shaped as ``x``.
    """
    return F.layer_norm(x.float(), x.shape[-1:], eps=STANDARDISE_EPS)


@contextlib.contextmanager
def perturbed(norm: nn.Module, delta: Callable[[torch.Tensor], torch.Tensor]) -> Iterator[None]:
    """Inside the block, ``norm`` receives x^ + delta(x^) in place of its input x, x^ = standardise(x) detached.

    ``norm`` then renormalises and applies its own gamma and beta, so delta lives on the
    unit scale of x^, before the affine parameters.

    Args:
        norm: the embeddings' LayerNorm (see
            [`normalised_embeddings`][plm.tasks.sift_fine_tuning.normalised_embeddings]).
        delta: the perturbation for x^, shaped as it.

    Yields:
        Nothing; the hook is removed when the block ends.
    """
    def hook(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        x_hat = standardise(inputs[0]).detach()
        return ((x_hat + delta(x_hat)).to(inputs[0].dtype), *inputs[1:])

    handle = norm.register_forward_pre_hook(hook)
    try:
        yield
    finally:
        handle.remove()


@dataclass(frozen=True)
class SiFT:
    """SiFT's perturbation; the defaults are the released ones.

    Attributes:
        noise: the initial perturbation's standard deviation (clipped at twice it).
        step: how far the ascent step moves each token's largest coordinate.
    """

    noise: float = 1e-2
    step: float = 1e-4

    def initial(self, x_hat: torch.Tensor) -> torch.Tensor:
        """N(0, noise) in float32, clipped to [-2 noise, 2 noise], shaped like ``x_hat``; differentiable.

        Args:
            x_hat: the standardised embeddings.

        Returns:
            The initial perturbation, requiring a gradient.
        """
        noise = torch.randn(x_hat.shape, device=x_hat.device) * self.noise
        return noise.clamp(-2 * self.noise, 2 * self.noise).requires_grad_()

    def ascend(self, delta: torch.Tensor, gradient: torch.Tensor) -> torch.Tensor:
        """The perturbation after one ascent step: delta + step g / (1e-6 + ||g||_inf), the inf-norm per token.

        The inf-norm is over the last axis. delta stays unchanged where the gradient overflowed (as the released
        code keeps its initial noise then).

        Args:
            delta: the perturbation.
            gradient: g, the divergence's gradient with respect to ``delta``.

        Returns:
            The stepped perturbation, detached.
        """
        if not torch.isfinite(gradient).all():
            return delta.detach()
        largest = gradient.abs().amax(-1, keepdim=True)  # (..., 1): each token's largest coordinate
        return (delta + self.step * gradient / (STEP_EPS + largest)).detach()

    def loss(self, model: nn.Module, logits_of: Callable[[], torch.Tensor], clean_logits: torch.Tensor) -> torch.Tensor:
        """The symmetric KL between the clean logits and those under the adversarial perturbation, summed.

        Args:
            model: the model being fine-tuned (an encoder or a task model on one).
            logits_of: runs ``model`` on the batch and returns logits over the last axis; called twice.
            clean_logits: the logits of the clean pass.

        Returns:
            The loss term, a scalar.

        Raises:
            PLMError: a model without normalised embeddings.
        """
        norm = normalised_embeddings(model)
        start: dict[str, torch.Tensor] = {}

        def initial(x_hat: torch.Tensor) -> torch.Tensor:
            start["delta"] = self.initial(x_hat)
            return start["delta"]

        with perturbed(norm, initial):
            divergence = symmetric_kl(logits_of(), clean_logits.detach())
        (gradient,) = torch.autograd.grad(divergence, start["delta"])
        delta = self.ascend(start["delta"], gradient)
        with perturbed(norm, lambda x_hat: delta):
            return symmetric_kl(logits_of(), clean_logits)
