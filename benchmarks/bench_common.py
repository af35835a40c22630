"""What the benchmarks share: interleaved timing, the machine's limits, peak tensor memory.

The machine's limits are measured, not looked up, in the same process and just before
the models run, so a slow or shared machine lowers the limit and the result alike:

* memory bandwidth: the best of a few ``sum`` over a 256 MB fp32 tensor (a pure
  streaming read, as decoding reads its weights);
* matmul peak: the best of a few 2048 x 2048 x 2048 fp32 products (2 * 2048^3 FLOPs).
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved_medians(
    steps: dict[str, Callable[[], object]], repeats: int, warmup: int, device: torch.device
) -> dict[str, float]:
    """Median seconds per call of each step; the steps take turns within every repeat (ABAB)."""
    for step in steps.values():
        for _ in range(warmup):
            step()
    synchronize(device)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            synchronize(device)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(seconds) for name, seconds in times.items()}


def best_seconds(step: Callable[[], object], repeats: int, device: torch.device) -> float:
    step()
    synchronize(device)
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        synchronize(device)
        seconds.append(time.perf_counter() - start)
    return min(seconds)


def memory_bandwidth(device: torch.device) -> float:
    """Bytes per second that one pass reading a 256 MB fp32 tensor achieves (the best of 5)."""
    data = torch.randn(64 * 1024 * 1024, device=device)
    return data.numel() * data.element_size() / best_seconds(data.sum, 5, device)


def matmul_peak(device: torch.device, size: int = 2048) -> float:
    """fp32 FLOP/s of a size^3 matrix product, the best of 5: what the training FLOPs are measured against."""
    a, b = torch.randn(size, size, device=device), torch.randn(size, size, device=device)
    return 2 * size**3 / best_seconds(lambda: a @ b, 5, device)


def quiet_transformers() -> str:
    """Silence transformers' warnings and progress bars; return its version."""
    import transformers
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    return transformers.__version__


# --- peak memory of one step ----------------------------------------------------------------------


def peak_tensor_memory(step: Callable[[], object]) -> int:
    """Peak bytes of the tensors that ``step`` creates and holds at one time (activations, gradients).

    Read from torch.profiler's memory timeline (the one ``export_memory_timeline``
    draws): every tensor created and destroyed during the step, in order, on any
    device; the tensors that existed before (weights) are not counted. Unlike the
    resident set size, this does not move with the C allocator's caching and arenas,
    so two libraries compare exactly.
    """
    from torch.profiler import ProfilerActivity, profile
    from torch.profiler._memory_profiler import Action

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        step()
    live = peak = 0
    for _, action, _, size in prof._memory_profile().timeline:
        if action == Action.CREATE:
            live += size
        elif action == Action.DESTROY:
            live -= size
        peak = max(peak, live)
    return peak
