"""LAMB (You et al., 2019), the layer-wise adaptive optimizer ALBERT trained with.

Adam's step, rescaled per parameter tensor (per layer) so that its length is
proportional to the weights' own::

    m_t = b1 m + (1 - b1) g,    v_t = b2 v + (1 - b2) g^2
    r   = m_hat / (sqrt(v_hat) + eps) + weight_decay * w        (m_hat, v_hat bias-corrected)
    w  <- w - lr * (||w|| / ||r||) * r                          (trust ratio 1 if a norm is 0)

``r`` is exactly the step AdamW takes per unit of learning rate; LAMB only changes its
length, to ``lr * ||w||``, which lets large batches use a large learning rate
(ALBERT: batch 4096, lr 0.00176). The paper's phi is the identity here.

A parameter group with ``layer_adaptation=False`` takes plain AdamW steps; Google's
implementation (used for ALBERT) exempts LayerNorm and bias parameters this way.
All state is tensors, the step count included, so checkpoints store it in safetensors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, overload

import torch

from plm.errors import PLMError


class Lamb(torch.optim.Optimizer):
    """LAMB over ``params`` (tensors or parameter groups, as for any torch optimizer).

    Args:
        params: the parameters, or parameter groups (dicts that may set any of the options below).
        lr: the learning rate.
        betas: the decay rates of the first and second moment estimates.
        eps: added to the second moment's square root.
        weight_decay: the decoupled weight decay, added to the step before the trust ratio.
        layer_adaptation: scale each tensor's step by the trust ratio; False takes AdamW's step.

    Raises:
        PLMError: a negative lr, eps or weight decay, or a beta outside [0, 1).
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.01,
        layer_adaptation: bool = True,
    ) -> None:
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0 <= beta < 1 for beta in betas):
            raise PLMError(
                f"LAMB needs lr, eps, weight decay >= 0 and betas in [0, 1); got {lr}, {eps}, {weight_decay}, {betas}"
            )
        defaults = {
            "lr": lr,
            "betas": tuple(betas),
            "eps": eps,
            "weight_decay": weight_decay,
            "layer_adaptation": layer_adaptation,
        }
        super().__init__(params, defaults)

    @overload
    def step(self, closure: None = None) -> None: ...

    @overload
    def step(self, closure: Callable[[], float]) -> float: ...

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """Take one LAMB step on every parameter that has a gradient.

        Args:
            closure: re-evaluates the model and returns the loss, run with gradients enabled before the step.

        Returns:
            The closure's loss, or None without a closure.

        Raises:
            PLMError: a sparse gradient.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for weight in group["params"]:
                if weight.grad is None:
                    continue
                if weight.grad.is_sparse:
                    raise PLMError("LAMB does not support sparse gradients")
                state = self.state[weight]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(weight, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(weight, memory_format=torch.preserve_format)
                state["step"] += 1
                step = state["step"].item()  # on the CPU: no device sync
                exp_avg, exp_avg_sq, grad = state["exp_avg"], state["exp_avg_sq"], weight.grad
                exp_avg.lerp_(grad, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                m_hat = exp_avg / (1 - beta1**step)
                v_hat = exp_avg_sq / (1 - beta2**step)
                update = m_hat / (v_hat.sqrt() + group["eps"])
                if group["weight_decay"] != 0:
                    update.add_(weight, alpha=group["weight_decay"])
                if group["layer_adaptation"]:
                    update.mul_(trust_ratio(weight, update))
                weight.add_(update, alpha=-group["lr"])
        return loss


def trust_ratio(weight: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
    """The trust ratio ||w|| / ||r||, or 1 when either norm is 0 (a zero-initialised bias, a zero step).

    Args:
        weight: a parameter tensor, w.
        update: its Adam step with weight decay, r.

    Returns:
        The ratio, a 0-d tensor.
    """
    weight_norm, update_norm = weight.norm(), update.norm()
    usable = (weight_norm > 0) & (update_norm > 0)
    return torch.where(usable, weight_norm / update_norm.clamp(min=torch.finfo(update_norm.dtype).tiny), 1.0)
