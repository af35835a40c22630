"""``--dry-run``: a run built as it would train, a few of its steps timed, the whole run projected.

Nothing is written. The answer comes in about a minute at any scale: a step of a paper's batch
(GPT-2's 512 sequences of 1,024 tokens, ALBERT's 4,096 of 512) takes minutes on a CPU, so
there a step is run only when micro-batches of one and two sequences say that it takes at
most `WHOLE_STEP_SECONDS`. A longer step is projected instead, from micro-batches of one
and two sequences: a pass costs a fixed part and a part per sequence, which a CPU's work makes
proportional to the sequences, and the optimizer's update is timed once. The peak memory is
extrapolated from the same two micro-batches (the activations grow with the sequences; the
weights, gradients and optimizer state do not). A GPU times whole steps, as it runs a paper's
batch in seconds.
"""

from __future__ import annotations

import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import torch

from plm.device import autocast
from plm.training.distributed import teardown_distributed
from plm.training.trainer import Trainer, to_device

WHOLE_STEP_SECONDS = 5.0  # on a CPU, a step that would take longer is projected from micro-batches


@dataclass(frozen=True)
class Phase:
    """A span of a run's steps at one sequence length.

    Attributes:
        block_size: the tokens per sequence (None: as many as each sequence has, as sentence pairs).
        start: the first step.
        end: one past the last step.
    """

    block_size: int | None
    start: int
    end: int


@dataclass(frozen=True)
class PhaseTiming:
    """The measured speed of a run's steps at one sequence length.

    Attributes:
        block_size: the tokens per sequence (None: as many as each sequence has).
        steps: the run's steps at this length.
        seconds_per_step: the mean time of an optimizer step.
        tokens_per_step: the tokens one step reads, over all processes and micro-batches.
        peak_memory: the bytes at the peak of a step.
        timed: what was timed, in words.
    """

    block_size: int | None
    steps: int
    seconds_per_step: float
    tokens_per_step: int
    peak_memory: int
    timed: str

    @property
    def tokens_per_second(self) -> float:
        """The tokens read per second."""
        return self.tokens_per_step / self.seconds_per_step


@dataclass(frozen=True)
class DryRun:
    """What [`dry_run`][plm.training.dry_run.dry_run] measured, and the whole run it projects.

    Attributes:
        phases: the timing of each sequence length the run trains at (BERT's two phases, else one).
        memory_source: what the phases' peak memory measures.
    """

    phases: tuple[PhaseTiming, ...]
    memory_source: str

    @property
    def steps(self) -> int:
        """The run's optimizer steps."""
        return sum(phase.steps for phase in self.phases)

    @property
    def projected_seconds(self) -> float:
        """The whole run's time at the measured speed: each phase's steps x its time per step."""
        return sum(phase.steps * phase.seconds_per_step for phase in self.phases)

    @property
    def peak_memory(self) -> int:
        """The bytes at the peak of the run: its largest phase's."""
        return max(phase.peak_memory for phase in self.phases)

    def report(self) -> str:
        """The measurements and the projection, as ``--dry-run`` prints them.

        Returns:
            The text, one line per phase and one for the whole run.
        """
        timed = "; ".join(dict.fromkeys(phase.timed for phase in self.phases))
        lines = [f"dry run: {timed}; nothing written"]
        for phase in self.phases:
            length = "" if phase.block_size is None else f" of {phase.block_size} tokens per sequence"
            lines.append(f"  {phase.steps:,} steps{length}: "
                         f"{phase.seconds_per_step:.3g} s per step of {phase.tokens_per_step:,} tokens, "
                         f"{phase.tokens_per_second:,.0f} tokens/s")
        lines.append(f"projected: {self.steps:,} steps in {duration(self.projected_seconds)}; peak memory "
                     f"{self.peak_memory / 2**30:.3g} GiB ({self.memory_source})")
        return "\n".join(lines)


def duration(seconds: float) -> str:
    """A time span as a reader says it: ``42 s``, ``17 min``, ``3.5 h``, ``12.3 days``.

    Args:
        seconds: the span.

    Returns:
        The text.
    """
    for unit, length in (("days", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= length:
            return f"{seconds / length:.3g} {unit}"
    return f"{seconds:.3g} s"


def dry_run(build: Callable[[], Trainer], phases: Callable[[Trainer], list[Phase]], timed_steps: int = 3) -> DryRun:
    """Build a run's trainer, time its steps at each sequence length, and project the whole run.

    Each phase the run reaches is timed from its first step: ``timed_steps`` whole optimizer steps
    after an untimed one (which also compiles, with ``compile``), or, for a long step on a CPU,
    micro-batches of two and one sequences (see the module's docstring).

    Args:
        build: makes the trainer as the run would (nothing written).
        phases: the run's phases, from its trainer.
        timed_steps: the optimizer steps timed per phase, where whole steps are.

    Returns:
        The measurements and the projection.

    Raises:
        PLMError: whatever ``build`` raises: an argument that cannot train, a run directory that cannot take it.
    """
    try:
        trainer = build()
        wrapped = trainer.wrap(trainer.model)
        if trainer.config.compile:  # as the training loop runs it
            wrapped = cast(torch.nn.Module, torch.compile(wrapped))
        reached = [phase for phase in phases(trainer) if phase.end > phase.start]
        timings = tuple(time_phase(trainer, wrapped, phase, timed_steps) for phase in reached)
        return DryRun(timings, memory_source(trainer.device))
    finally:
        teardown_distributed()


def time_phase(trainer: Trainer, wrapped: torch.nn.Module, phase: Phase, count: int) -> PhaseTiming:
    """A phase's timing: from whole steps, or on a CPU from micro-batches when a step would be long.

    Args:
        trainer: the run's trainer.
        wrapped: the module its steps run (see [`wrap`][plm.training.trainer.Trainer.wrap]).
        phase: the steps at one sequence length.
        count: the whole steps timed, where whole steps are.

    Returns:
        The phase's timing.
    """
    if trainer.device.type == "cuda":
        return time_steps(trainer, wrapped, phase, count)
    projected = time_micro_batches(trainer, wrapped, phase)
    if projected.seconds_per_step <= WHOLE_STEP_SECONDS:
        return time_steps(trainer, wrapped, phase, count)
    return projected


def time_steps(trainer: Trainer, wrapped: torch.nn.Module, phase: Phase, count: int) -> PhaseTiming:
    """The mean time and tokens of ``count`` optimizer steps of ``phase``, after its first step, untimed.

    The timed steps are the phase's next ones (again from its start in a phase of fewer), so that
    they read its batches. Each optimizer step ends by reading its losses back from the device, so
    the clock stops only once the device's work is done.

    Args:
        trainer: the run's trainer.
        wrapped: the module its steps run.
        phase: the steps at one sequence length.
        count: the steps timed.

    Returns:
        The phase's timing.
    """
    steps = range(phase.start, phase.end)
    if trainer.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(trainer.device)
    trainer.step = steps[0]
    trainer.optimizer_step(wrapped)
    started, tokens = time.perf_counter(), 0
    for index in range(1, count + 1):
        trainer.step = steps[index % len(steps)]
        tokens += trainer.optimizer_step(wrapped)[1]
    seconds = (time.perf_counter() - started) / count
    return PhaseTiming(phase.block_size, len(steps), seconds, tokens // count, peak_memory(trainer.device),
                       f"{count} optimizer steps timed after one warm-up step")


def time_micro_batches(trainer: Trainer, wrapped: torch.nn.Module, phase: Phase) -> PhaseTiming:
    """A phase's step time and peak memory, extrapolated from micro-batches of one and two sequences.

    After a warm-up pass of one sequence and one of two, passes of one and of two are timed, twice each:
    the first gives a pass's fixed cost with one sequence's, the difference each further sequence's (a
    small model's pass is mostly the fixed cost; a large model's, the sequences').

    Args:
        trainer: the run's trainer.
        wrapped: the module its steps run.
        phase: the steps at one sequence length.

    Returns:
        The phase's timing, projected to its whole steps.
    """
    batch = trainer.objective.batch(phase.start, 0)
    micro_batch = len(next(iter(batch.values())))  # sequences
    accumulated = trainer.config.grad_accum
    forward_backward(trainer, wrapped, batch, 1)  # warm-up
    peak_of_one = peak_memory(trainer.device)
    forward_backward(trainer, wrapped, batch, 2)  # warm-up: a new shape may take its kernels' first call
    peak_of_two = peak_memory(trainer.device)
    # Each the shorter of two passes: a pass that another process slowed down counts for nothing.
    one, two = (min(forward_backward(trainer, wrapped, batch, sequences) for _ in range(2)) for sequences in (1, 2))
    started = time.perf_counter()
    trainer.optimizer.step()
    trainer.optimizer.zero_grad(set_to_none=True)
    update = time.perf_counter() - started
    seconds = (one + (micro_batch - 1) * max(0.0, two - one)) * accumulated + update
    tokens = trainer.objective.size(batch) * accumulated * trainer.distributed.world_size
    # The activations grow by the same bytes with each sequence; what stays is in the peak of one.
    peak = peak_of_one + (micro_batch - 1) * max(0, peak_of_two - peak_of_one)
    timed = (f"micro-batches of 1 and 2 sequences timed, and steps of {micro_batch * accumulated:,} sequences per "
             "process projected from them, their peak memory too")
    return PhaseTiming(phase.block_size, phase.end - phase.start, seconds, tokens, peak, timed)


def forward_backward(trainer: Trainer, wrapped: torch.nn.Module, batch: dict[str, torch.Tensor],
                     sequences: int) -> float:
    """The seconds of one forward and backward pass over the first ``sequences`` sequences of ``batch``.

    Args:
        trainer: the run's trainer.
        wrapped: the module its steps run.
        batch: a micro-batch of the run's objective, every tensor batch-first.
        sequences: the sequences to take.

    Returns:
        The seconds.
    """
    trainer.model.train()
    part = to_device({name: tensor[:sequences] for name, tensor in batch.items()}, trainer.device)
    started = time.perf_counter()
    with autocast(trainer.device, trainer.dtype):
        losses = trainer.objective.loss(wrapped, part)
    cast(torch.Tensor, sum(losses.values())).backward()
    return time.perf_counter() - started


def peak_memory(device: torch.device) -> int:
    """The peak memory of this process so far: on a GPU what PyTorch allocated there, else the process's RSS.

    Args:
        device: the run's device.

    Returns:
        The bytes.
    """
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    unit = 1 if sys.platform == "darwin" else 1024  # ru_maxrss is in bytes on macOS, in KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * unit


def memory_source(device: torch.device) -> str:
    """What [`peak_memory`][plm.training.dry_run.peak_memory] measures on ``device``.

    Args:
        device: the run's device.

    Returns:
        The words.
    """
    return "the GPU's peak allocated by PyTorch" if device.type == "cuda" else "the process's peak RSS"
