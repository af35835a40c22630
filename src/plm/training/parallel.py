"""How a model is spread over processes and how much of its work it keeps for backward.

``ddp`` replicates the model on every process and averages gradients (DDP);
``fsdp`` shards parameters, gradients and optimizer state over the processes with
PyTorch's FSDP2 (``fully_shard``): each Transformer block is one unit, gathered whole
just before it runs and sharded again after, and the rest of the model (embeddings,
heads, the final LayerNorm) is the root's unit, so a tied output layer reads the same
gathered table as the input embedding. A model without Transformer blocks (the RNNs,
ELMo) is one unit. ``--offload`` keeps the shards and the optimizer's step in CPU
memory (a GPU run); on a GPU with bf16, parameters are gathered in bf16 and gradients
reduced in fp32. Activation checkpointing keeps only each block's input and recomputes
the block in backward, on one process or many.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed._composable import checkpoint
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, fully_shard

from plm.core.block import TransformerBlock
from plm.errors import PLMError

STRATEGIES = ("ddp", "fsdp")


@dataclass(frozen=True)
class Parallelism:
    """``strategy`` over the processes torchrun starts (``ddp`` on one process is plain training)."""

    strategy: str = "ddp"
    offload: bool = False  # FSDP: parameter and optimizer shards in CPU memory
    checkpoint_activations: bool = False

    @property
    def sharded(self) -> bool:
        return self.strategy == "fsdp"

    def validate(self, device: torch.device, dtype: torch.dtype) -> None:
        """Raise a PLMError for a combination this device cannot train with."""
        if self.strategy not in STRATEGIES:
            raise PLMError(f"unknown --strategy {self.strategy!r}; choose one of {', '.join(STRATEGIES)}")
        if self.offload and not self.sharded:
            raise PLMError("--offload moves FSDP's shards to CPU memory; it needs --strategy fsdp")
        if self.offload and device.type != "cuda":
            raise PLMError("--offload moves the shards from GPU to CPU memory; on the CPU they are there already "
                           "(drop --offload)")
        if self.sharded and dtype == torch.float16:
            raise PLMError("--strategy fsdp trains in fp32 or bf16, not fp16; pass --precision bf16 or fp32")


def shard_units(model: nn.Module) -> list[nn.Module]:
    """The Transformer blocks of ``model``, each once (ALBERT runs one block many times)."""
    units: dict[int, nn.Module] = {}
    for module in model.modules():
        if isinstance(module, TransformerBlock):
            units.setdefault(id(module), module)
    return list(units.values())


def prepare_model(model: nn.Module, parallelism: Parallelism, device: torch.device, dtype: torch.dtype) -> nn.Module:
    """Apply activation checkpointing and FSDP to ``model`` in place (its parameter names stay the same).

    FSDP replaces the parameters by sharded ones: the optimizer is built after this.
    """
    if parallelism.checkpoint_activations:
        for block in shard_units(model):
            checkpoint(block)
    if not parallelism.sharded:
        return model
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    options = {"mesh": mesh}
    if parallelism.offload:
        options["offload_policy"] = CPUOffloadPolicy(pin_memory=True)
    if device.type == "cuda" and dtype == torch.bfloat16:
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in shard_units(model):
        fully_shard(block, **options)
    fully_shard(model, **options)
    return model


def is_sharded(model: nn.Module) -> bool:
    return isinstance(model, FSDPModule)


def gradient_sync(model: nn.Module, sync: bool) -> contextlib.AbstractContextManager:
    """A context in which backward reduces gradients over the processes only if ``sync``.

    Micro-batches before the last of an accumulated step keep their gradients local,
    so that the processes communicate once per optimizer step.
    """
    if sync or not dist.is_initialized() or dist.get_world_size() == 1:
        return contextlib.nullcontext()
    if is_sharded(model):
        return _fsdp_no_sync(model)
    return model.no_sync()  # DistributedDataParallel


@contextlib.contextmanager
def _fsdp_no_sync(model: FSDPModule) -> Iterator[None]:
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def reshard(model: nn.Module) -> None:
    """Shard again what a forward pass without backward (an evaluation) left gathered.

    FSDP keeps the root's parameters gathered from forward to backward; with no backward
    they would stay so, and the model's parameters would not be the optimizer's.
    """
    if is_sharded(model):
        for unit in model.modules():
            if isinstance(unit, FSDPModule):
                unit.reshard()


@contextlib.contextmanager
def unsharded(model: nn.Module) -> Iterator[nn.Module]:
    """``model`` with every parameter gathered whole, for what is not a forward pass.

    Decoding held-out translations, or any other method than ``forward``, reads the
    parameters directly; FSDP gathers them only around ``forward``. Every process must
    enter this together; it costs the whole model's memory while inside.
    """
    if not is_sharded(model):
        yield model
        return
    root, *blocks = [module for module in model.modules() if isinstance(module, FSDPModule)]
    # Kept whole through every forward inside (FSDP's own advice for evaluation), then back to
    # resharding the blocks after their forward; the root keeps its parameters through forward anyway.
    root.set_reshard_after_forward(False)
    for unit in (root, *blocks):
        unit.unshard()
    try:
        yield model
    finally:
        reshard(model)
        for unit in blocks:
            unit.set_reshard_after_forward(True, recurse=False)
