"""Data parallelism under torchrun: one process per device, gloo on the CPU, NCCL on GPUs."""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


@dataclass(frozen=True)
class Distributed:
    """This process's place among the run's processes; the default is a run of one.

    Each collective is a no-op, returning its input, in a run of one.

    Attributes:
        rank: this process's rank in the run.
        local_rank: its rank on its machine, which picks its GPU.
        world_size: the number of processes.
    """
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @property
    def enabled(self) -> bool:
        """Whether the run has more than one process."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Whether this is the first process, the one that writes the run directory."""
        return self.rank == 0

    def all_reduce_sum(self, value: torch.Tensor) -> torch.Tensor:
        """The sum of ``value`` over every process, in place, on every process.

        Args:
            value: this process's tensor.

        Returns:
            ``value``, now the sum.
        """
        if self.enabled:
            dist.all_reduce(value, op=dist.ReduceOp.SUM)
        return value

    def max(self, value: int, device: torch.device) -> int:
        """The largest ``value`` of any process, on every process.

        Args:
            value: this process's value.
            device: where the collective's tensor lives (the process group's device).

        Returns:
            The largest value.
        """
        if not self.enabled:
            return value
        tensor = torch.tensor([value], device=device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return int(tensor.item())

    def all_gather_object(self, value: Any) -> list[Any]:
        """``value`` of every process, in rank order.

        Args:
            value: this process's value; it must pickle.

        Returns:
            The values of all processes.
        """
        if not self.enabled:
            return [value]
        values: list[Any] = [None] * self.world_size
        dist.all_gather_object(values, value)
        return values

    def barrier(self) -> None:
        """Wait until every process gets here."""
        if self.enabled:
            dist.barrier()

    def broadcast(self, value: T) -> T:
        """The first process's ``value``, on every process (pickled between our own processes).

        Args:
            value: this process's value; only the first process's is kept.

        Returns:
            The first process's value.
        """
        if not self.enabled:
            return value
        holder = [value]
        dist.broadcast_object_list(holder, src=0)
        return holder[0]


def is_first_process() -> bool:
    """Whether this is torchrun's first process (or the only one), before the process group exists.

    Returns:
        True when the environment's ``RANK`` is 0 or unset.
    """
    return os.environ.get("RANK", "0") == "0"


def setup_distributed(device: torch.device, group_of_one: bool = False) -> Distributed:
    """Join the process group that torchrun describes in the environment, if any.

    ``group_of_one`` makes a group of this process alone where torchrun started none:
    FSDP shards over a process group, and a sharded run may resume on one process.
    On a GPU each process takes the device of its local rank.

    Args:
        device: the run's device: NCCL on a GPU, gloo otherwise.
        group_of_one: make a process group even for one process.

    Returns:
        This process's place in the run.
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
    """Leave the process group, if there is one, once nothing of the run holds it any more.

    DDP's wrapper lies in a reference cycle, so it outlives the training loop until the garbage collector
    runs, and its reducer holds the process group. A group still held when the interpreter exits is
    destroyed during its shutdown, where gloo's threads can abort the process ("terminate called without
    an active exception", SIGABRT: a finished torchrun run that reports a failure). Collecting first lets
    the group end here.
    """
    if dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()
