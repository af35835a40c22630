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
implementation (used for ALBERT) exempts LayerNorm and bias parameters this way. A group
with ``parts=3`` holds fused matrices (plm's one ``in_proj`` for W_Q, W_K and W_V): each of
their three row blocks is a layer of its own, with its own ratio, as the separate query, key
and value matrices of ALBERT's code have. One ratio for the three would let the value
matrix's steady step set the length of the query's and key's, which at the start of
training are small and noisy, and keep attention from learning (an albert-mini that did so
stayed at the most frequent token where transformers' ALBERT on the same batches learned).
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
        parts: the row blocks of each tensor that take a ratio each (a fused projection's Q, K, V: 3).

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
        parts: int = 1,
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
            "parts": parts,
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
                if group["layer_adaptation"] and group["parts"] > 1:
                    scale_parts(weight, update, group["parts"])
                elif group["layer_adaptation"]:
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


def scale_parts(weight: torch.Tensor, update: torch.Tensor, parts: int) -> None:
    """Multiply each of the ``parts`` equal row blocks of ``update`` by its own trust ratio, in place.

    Under FSDP (a DTensor whose rows are sharded over the processes in ``torch.chunk``'s blocks) each process
    sums the squares of its rows into their blocks, and the sums are added over the processes.

    Args:
        weight: a fused parameter, w, (parts * rows, ...).
        update: its Adam step with weight decay, r, of the same shape.
        parts: the row blocks.

    Raises:
        PLMError: rows that do not split into ``parts`` blocks, or a DTensor sharded otherwise than by rows.
    """
    if weight.shape[0] % parts:
        raise PLMError(f"a tensor of {weight.shape[0]} rows does not split into {parts} blocks")
    block_rows = weight.shape[0] // parts
    local_weight, local_update, first_row, group = local_rows(weight, update)
    block = (first_row + torch.arange(local_weight.shape[0], device=local_weight.device)) // block_rows  # of each row
    squares = torch.zeros(2, parts, dtype=torch.float32, device=local_weight.device)
    squares[0].index_add_(0, block, local_weight.float().pow(2).flatten(1).sum(1))
    squares[1].index_add_(0, block, local_update.float().pow(2).flatten(1).sum(1))
    if group is not None:
        torch.distributed.all_reduce(squares, group=group)
    weight_norm, update_norm = squares.sqrt()  # (parts,) each
    usable = (weight_norm > 0) & (update_norm > 0)
    ratio = torch.where(usable, weight_norm / update_norm.clamp(min=torch.finfo(update_norm.dtype).tiny), 1.0)
    local_update.mul_(ratio[block].to(local_update.dtype).view(-1, *[1] * (local_update.dim() - 1)))


def local_rows(weight: torch.Tensor, update: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int, Any]:
    """This process's rows of ``weight`` and ``update``, where the first is, and the group that holds the rest.

    A plain tensor is all here: its rows start at 0 and there is no group.

    Args:
        weight: a parameter, a plain tensor or FSDP2's DTensor sharded by rows.
        update: its step, laid out as ``weight``.

    Returns:
        The local rows of each, the first one's index in the whole tensor, and the process group or None.

    Raises:
        PLMError: a DTensor sharded otherwise than by rows over one mesh dimension.
    """
    from torch.distributed.tensor import DTensor, Shard

    if not isinstance(weight, DTensor):
        return weight, update, 0, None
    if not isinstance(update, DTensor) or tuple(weight.placements) != (Shard(0),) or tuple(update.placements) != (
            Shard(0),):
        raise PLMError(f"LAMB's fused blocks need rows sharded over one mesh dimension, not {weight.placements}")
    mesh = weight.device_mesh
    rows_per_process = -(-weight.shape[0] // mesh.size())  # torch.chunk's blocks: the last ones may be short
    first_row = min(mesh.get_local_rank() * rows_per_process, weight.shape[0])
    return weight.to_local(), update.to_local(), first_row, mesh.get_group()
