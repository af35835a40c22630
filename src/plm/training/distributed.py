"""Data parallelism under torchrun: one process per device, gloo on the CPU, NCCL on GPUs."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


@dataclass(frozen=True)
class Distributed:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def all_reduce_sum(self, value: torch.Tensor) -> torch.Tensor:
        if self.enabled:
            dist.all_reduce(value, op=dist.ReduceOp.SUM)
        return value

    def max(self, value: int, device: torch.device) -> int:
        """The largest ``value`` of any process, on every process."""
        if not self.enabled:
            return value
        tensor = torch.tensor([value], device=device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return int(tensor.item())

    def all_gather_object(self, value: Any) -> list[Any]:
        """``value`` of every process, in rank order."""
        if not self.enabled:
            return [value]
        values: list[Any] = [None] * self.world_size
        dist.all_gather_object(values, value)
        return values

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def broadcast(self, value: T) -> T:
        """The first process's ``value``, on every process (pickled between our own processes)."""
        if not self.enabled:
            return value
        holder = [value]
        dist.broadcast_object_list(holder, src=0)
        return holder[0]


def is_first_process() -> bool:
    """Whether this is torchrun's first process (or the only one), before the process group exists."""
    return os.environ.get("RANK", "0") == "0"


def setup_distributed(device: torch.device, group_of_one: bool = False) -> Distributed:
    """Join the process group that torchrun describes in the environment, if any.

    ``group_of_one`` makes a group of this process alone where torchrun started none:
    FSDP shards over a process group, and a sharded run may resume on one process.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    backend = "nccl" if device.type == "cuda" else "gloo"
    if world_size == 1:
        if group_of_one and not dist.is_initialized():
            dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
        return Distributed()
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":
        torch.cuda.set_device(local_rank)
    return Distributed(rank=dist.get_rank(), local_rank=local_rank, world_size=world_size)


def teardown_distributed() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
