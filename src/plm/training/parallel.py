"""How a model is spread over processes and how much of its work it keeps for backward.

``ddp`` replicates the model on every process and averages gradients (DDP);
``fsdp`` shards parameters, gradients and optimizer state over the processes with
PyTorch's FSDP2 (``fully_shard``): each Transformer block is one unit, gathered whole
just before it runs and sharded again after (a sub-layer that several blocks hold, as ALBERT's
shared attention or feed-forward, is a unit of its own), and the rest of the model (embeddings,
heads, the final LayerNorm) is the root's unit, so a tied output layer reads the same
gathered table as the input embedding. A model without Transformer blocks (the RNNs,
ELMo) is one unit. ``--offload`` keeps the shards and the optimizer's step in CPU
memory (a GPU run); on a GPU with bf16, parameters are gathered in bf16 and gradients
reduced in fp32. Activation checkpointing keeps only each block's input and recomputes
the block in backward, on one process or many.

Under FSDP only the first process builds the whole model: the others build it on the
meta device ([`built_on_first_process`][plm.training.parallel.built_on_first_process]) and
[`prepare_model`][plm.training.parallel.prepare_model] gives them their shards of the first process's weights, broadcast
one tensor at a time, so that no other process holds more of the whole model than that one tensor.
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed._composable import checkpoint

from plm.core.block import TransformerBlock
from plm.errors import PLMError
from plm.training.distributed import Distributed

if TYPE_CHECKING:
    from torch.distributed.fsdp import FSDPModule
    from typing_extensions import TypeIs

# torch's FSDP and its state-dict helpers are imported where a model is sharded: together they take
# over a second to import, which every plm command paid at start-up (see FSDP_MODULE below).
FSDP_MODULE = "torch.distributed.fsdp"

STRATEGIES = ("ddp", "fsdp")


@dataclass(frozen=True)
class Parallelism:
    """``strategy`` over the processes torchrun starts (``ddp`` on one process is plain training).

    Attributes:
        strategy: "ddp" (replicas, gradients averaged) or "fsdp" (parameters, gradients and optimizer state
            sharded).
        offload: FSDP: keep parameter and optimizer shards in CPU memory (a GPU run).
        checkpoint_activations: keep only each block's input and recompute the block in backward.
    """

    strategy: str = "ddp"
    offload: bool = False  # FSDP: parameter and optimizer shards in CPU memory
    checkpoint_activations: bool = False

    @property
    def sharded(self) -> bool:
        """Whether the strategy shards the model (FSDP)."""
        return self.strategy == "fsdp"

    def validate(self, device: torch.device, dtype: torch.dtype) -> None:
        """Raise a PLMError for a combination this device cannot train with.

        Args:
            device: the run's device.
            dtype: the run's precision.

        Raises:
            PLMError: an unknown strategy, ``offload`` without FSDP or off a GPU, or FSDP in fp16.
        """
        if self.strategy not in STRATEGIES:
            raise PLMError(f"unknown `strategy` {self.strategy!r}; choose one of {', '.join(STRATEGIES)}")
        if self.offload and not self.sharded:
            raise PLMError("`offload` moves FSDP's shards to CPU memory; it needs `strategy` fsdp")
        if self.offload and device.type != "cuda":
            raise PLMError("`offload` moves the shards from GPU to CPU memory; on the CPU they are there already "
                           "(drop `offload`)")
        if self.sharded and dtype == torch.float16:
            raise PLMError("`strategy` fsdp trains in fp32 or bf16, not fp16; pass `precision` bf16 or fp32")


def transformer_blocks(model: nn.Module) -> list[nn.Module]:
    """The Transformer blocks of ``model``, each once (ALBERT runs one block many times).

    Args:
        model: the model.

    Returns:
        Its distinct blocks, in module order.
    """
    blocks: dict[int, nn.Module] = {}
    for module in model.modules():
        if isinstance(module, TransformerBlock):
            blocks.setdefault(id(module), module)
    return list(blocks.values())


def shard_units(model: nn.Module) -> list[nn.Module]:
    """The FSDP units of ``model`` below its root, in the order to shard them.

    The modules that several blocks hold come first, then the blocks. FSDP2 needs each parameter in exactly one
    unit, and a unit takes what its units below have not. Distinct blocks may hold the same sub-layer (ALBERT
    sharing only the attention or only the feed-forward): that sub-layer becomes a unit of its own, gathered
    wherever a block runs it.

    Args:
        model: the model.

    Returns:
        The units: shared sub-layers, then blocks.
    """
    blocks = transformer_blocks(model)
    holders = Counter(id(module) for block in blocks for module in block.modules() if module is not block)
    shared: dict[int, nn.Module] = {}
    for block in blocks:
        for module in outermost(block, lambda module: holders[id(module)] > 1):
            shared.setdefault(id(module), module)
    return [*shared.values(), *blocks]


def outermost(module: nn.Module, chosen: Callable[[nn.Module], bool]) -> Iterator[nn.Module]:
    """The submodules of ``module`` that are ``chosen`` and lie inside no other chosen one.

    Args:
        module: the module to search below.
        chosen: whether a submodule is one of those sought.

    Yields:
        The outermost chosen submodules, in module order.
    """
    for child in module.children():
        if chosen(child):
            yield child
        else:
            yield from outermost(child, chosen)


def built_on_first_process(parallelism: Parallelism, world: Distributed) -> contextlib.AbstractContextManager:
    """A context in which a model is built whole on the first process only, when FSDP shards it.

    Every other process builds it on the meta device (shapes without memory, no initialisation,
    a saved model's weights left unread: see [`reads_no_weights`][plm.storage.checkpoint.reads_no_weights]), and
    [`prepare_model`][plm.training.parallel.prepare_model] fills its shards from the first process's weights. Without it
    every process would hold a whole model at start-up, however few of its shards it keeps.

    Args:
        parallelism: how the run spreads the model.
        world: this process's place in the run.

    Returns:
        The meta device as a context on the other processes of a sharded run, else a context that does nothing.
    """
    return torch.device("meta") if parallelism.sharded and not world.is_main else contextlib.nullcontext()


ModelT = TypeVar("ModelT", bound=nn.Module)


def prepare_model(model: ModelT, parallelism: Parallelism, device: torch.device, dtype: torch.dtype) -> ModelT:
    """``model`` on ``device`` with activation checkpointing and FSDP applied in place (the same parameter names).

    FSDP replaces the parameters by sharded ones: the optimizer is built after this. Their
    values are the first process's on every process, whether the others built ``model`` on
    the meta device ([`built_on_first_process`][plm.training.parallel.built_on_first_process]) or whole. On a GPU in
    bf16, FSDP gathers parameters in bf16 and reduces gradients in fp32.

    Args:
        model: the model, whole or on the meta device.
        parallelism: how the run spreads the model.
        device: the run's device.
        dtype: the run's precision.

    Returns:
        The model itself, prepared.
    """
    if parallelism.checkpoint_activations:
        for block in transformer_blocks(model):
            checkpoint(block)
    if not parallelism.sharded:
        return model.to(device)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    on_meta = any(parameter.is_meta for parameter in model.parameters())
    spread = dist.get_world_size() > 1
    # The first process's whole tensors where it built them, kept for the others until their shards are filled;
    # fully_shard moves each unit to the device as it shards it, so that no GPU holds the whole model.
    whole = model.state_dict() if spread and dist.get_rank() == 0 else {}
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    options: dict[str, Any] = {"mesh": mesh}
    if parallelism.offload:
        options["offload_policy"] = CPUOffloadPolicy(pin_memory=True)
    if device.type == "cuda" and dtype == torch.bfloat16:
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for unit in shard_units(model):
        fully_shard(unit, **options)
    fully_shard(model, **options)
    if on_meta:  # storage for this process's shards (and the buffers), filled below
        model.to_empty(device=device)
    if spread:
        copy_first_process(model, whole)
    return model


def copy_first_process(model: nn.Module, whole: dict[str, Any]) -> None:
    """Fill every process's shards and buffers of the sharded ``model`` with the first process's values.

    ``whole`` is the first process's state dict before sharding (empty on the others): torch
    broadcasts it one tensor at a time and each process keeps its slices. The state dict leaves
    out non-persistent buffers (the Transformer's sinusoidal table), so every buffer is sent too.

    Args:
        model: the sharded model.
        whole: the first process's whole state dict; empty on the others.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(model, whole, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    for buffer in model.buffers():
        dist.broadcast(buffer, src=0)


def is_sharded(model: object) -> TypeIs[FSDPModule]:
    """Whether ``model`` is an FSDP module (a sharded model or one of its units).

    Args:
        model: the object to test.

    Returns:
        True for an FSDP module; False whenever FSDP was never imported.
    """
    fsdp = sys.modules.get(FSDP_MODULE)  # never imported: nothing was sharded in this process
    return fsdp is not None and isinstance(model, fsdp.FSDPModule)


def gradient_sync(model: nn.Module, sync: bool) -> contextlib.AbstractContextManager:
    """A context in which backward reduces gradients over the processes only if ``sync``.

    Micro-batches before the last of an accumulated step keep their gradients local,
    so that the processes communicate once per optimizer step.

    Args:
        model: the model, DDP-wrapped or sharded when there are several processes.
        sync: reduce the gradients in this backward.

    Returns:
        The context.
    """
    if sync or not dist.is_initialized() or dist.get_world_size() == 1:
        return contextlib.nullcontext()
    if is_sharded(model):
        return _fsdp_no_sync(model)
    assert isinstance(model, nn.parallel.DistributedDataParallel)  # several processes, not sharded: DDP
    return model.no_sync()


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

    Args:
        model: the model; one that is not sharded is left as it is.
    """
    if is_sharded(model):
        for unit in model.modules():
            if is_sharded(unit):
                unit.reshard()


@contextlib.contextmanager
def unsharded(model: nn.Module) -> Iterator[nn.Module]:
    """``model`` with every parameter gathered whole, for what is not a forward pass.

    Decoding held-out translations, or any other method than ``forward``, reads the
    parameters directly; FSDP gathers them only around ``forward``. Every process must
    enter this together; it costs the whole model's memory while inside.

    Args:
        model: the model; one that is not sharded is yielded as it is.

    Yields:
        The model, its parameters whole until the context ends.
    """
    if not is_sharded(model):
        yield model
        return
    root, *blocks = [module for module in model.modules() if is_sharded(module)]
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
