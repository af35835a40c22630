"""What the benchmarks share: interleaved timing, the machine's limits, peak tensor memory, the report.

The machine's limits are measured, not looked up, in the same process and just before
the models run, so a slow or shared machine lowers the limit and the result alike:

* memory bandwidth: the best of a few ``sum`` over a 256 MB fp32 tensor (a pure
  streaming read, as decoding reads its weights);
* matmul peak: the best of a few 2048 x 2048 x 2048 fp32 products (2 * 2048^3 FLOPs); on a GPU
  training in bf16, 8192^3 bf16 products, the tensor cores' rate the training runs at.

Every benchmark prints its table through :class:`Report`, which also merges its rows
into ``benchmarks/results.json`` (with the machine, its limits and the versions);
``summary.py`` prints one table of every ratio from that file.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import torch

from plm.device import cpu_instruction_set

# PLM_RESULTS names another file: benchmarks/gpu.sh keeps a GPU machine's figures apart from the CPU's.
RESULTS = Path(os.environ.get("PLM_RESULTS") or Path(__file__).resolve().parent / "results.json")


def bf16_autocast(device: torch.device, bf16: bool) -> Callable[[], contextlib.AbstractContextManager]:
    """What a benchmark step runs under: bf16 autocast on ``device`` when asked, else nothing."""
    return (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext


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


def matmul_peak(device: torch.device, dtype: torch.dtype = torch.float32) -> float:
    """FLOP/s of a square matrix product in ``dtype``, the best of 5: what the training FLOPs are measured against.

    2048^3 saturates a CPU; a GPU's tensor cores need 8192^3 to reach their rate.
    """
    size = 8192 if device.type == "cuda" else 2048
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    return 2 * size**3 / best_seconds(lambda: a @ b, 5, device)


def training_flops_per_token(weights: int, layers: int, dim: int, length: int) -> int:
    """6 N + 12 L d T (PaLM, appendix B): forward and backward of the weights and of attention.

    N counts every weight that multiplies each token once (not the position or token
    tables, except a token table that is also the output layer); 12 L d T counts
    QK^T and AV over the full T x T square, causal masking notwithstanding.
    """
    return 6 * weights + 12 * layers * dim * length


def linear_weights(model: torch.nn.Module) -> int:
    """The weights of ``model``'s nn.Linear layers, counted once each: what multiplies every token."""
    seen = {id(m.weight): m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear)}
    return sum(seen.values())


def installed_version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def cpu_name() -> str:
    """The processor's model name (its speed tables depend on it), or the platform's best guess."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_isa(device: str) -> str:
    """The CPU's instruction set as the rows' precision depends on it (a GPU's rows run on the GPU)."""
    return f"CPU {cpu_instruction_set()}" + (f", GPU {torch.cuda.get_device_name()}" if device == "cuda" else "")


def figure(value: float) -> str:
    """A measured figure as a table shows it: two decimals below 100, none above."""
    return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"


@dataclass
class Row:
    """One measured figure: plm's and its peer's (None: plm alone), and the physical limit beside it."""

    config: str
    measure: str
    plm: float
    peer: float | None = None
    limit: str = ""  # e.g. "MFU 63% / 61%" or "95% of the bandwidth limit of 42 tok/s"
    precision: str = "fp32"  # what both sides compute in: "fp32", "bf16 autocast", "bf16 weights", "int8 weights"

    @property
    def ratio(self) -> float | None:
        return self.plm / self.peer if self.peer else None


@dataclass
class Report:
    """A benchmark's rows and notes: printed as a table and merged into benchmarks/results.json.

    ``limits`` are the machine's measured memory bandwidth (bytes/s) and matmul peak
    (FLOP/s), measured when the report is made, in the process that runs the models.
    """

    benchmark: str
    peer: str  # what plm is compared with, e.g. "transformers 4.57 GPT2LMHeadModel"
    settings: dict[str, object] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    device: str = "cpu"
    precision: str = "fp32"  # what the training rows compute in: "bf16" measures the peak in bf16
    limits: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.limits:
            device = torch.device(self.device)
            dtype = torch.bfloat16 if self.precision == "bf16" else torch.float32
            self.limits = {"bandwidth": memory_bandwidth(device), "flops": matmul_peak(device, dtype)}
        print(f"memory bandwidth {self.limits['bandwidth'] / 1e9:.1f} GB/s (sum of a 256 MB fp32 tensor); "
              f"matmul peak {self.limits['flops'] / 1e9:.1f} GFLOP/s ({self.precision} product)")

    @property
    def section(self) -> str:
        """The benchmark's section of the results: a bf16 run keeps its own beside the fp32 one."""
        return self.benchmark + ("-bf16" if self.precision == "bf16" else "")

    def add(self, config: str, measure: str, plm: float, peer: float | None = None, limit: str = "",
            precision: str | None = None) -> None:
        """A row; its precision is the report's (autocast, for a bf16 report) unless given."""
        default = "bf16 autocast" if self.precision == "bf16" else self.precision
        self.rows.append(Row(config, measure, plm, peer, limit, precision or default))

    def mfu(self, flops_per_second: float) -> str:
        """Model FLOPs utilisation: a training rate's FLOP/s as a share of the measured matmul peak."""
        return f"{flops_per_second / self.limits['flops']:.0%}"

    def print(self) -> None:
        width = max([len(row.measure) for row in self.rows] + [20])
        print()
        print(f"{'config':<13} {'measure':<{width}} {'precision':<13} {'plm':>10} {'peer':>10} {'plm/peer':>8}  limit")
        for row in self.rows:
            peer = figure(row.peer) if row.peer is not None else ""
            ratio = f"{row.ratio:>7.2f}x" if row.ratio is not None else ""
            print(f"{row.config:<13} {row.measure:<{width}} {row.precision:<13} {figure(row.plm):>10} {peer:>10} "
                  f"{ratio:>8}  {row.limit}")
        print(f"peer: {self.peer}; {machine_isa(self.device)}")
        for note in self.notes:
            print(note)

    def save(self, path: Path = RESULTS) -> None:
        """Replace this benchmark's section of ``path`` (other benchmarks' stay), atomically."""
        results = json.loads(path.read_text()) if path.is_file() else {"benchmarks": {}}
        results["machine"] = {
            "cpu": cpu_name(), "isa": cpu_instruction_set(), "device": self.device,
            **({"gpu": torch.cuda.get_device_name()} if self.device == "cuda" else {}),
            "cores": os.cpu_count(), "threads": torch.get_num_threads(),
            "memory_bandwidth_gb_s": round(self.limits["bandwidth"] / 1e9, 2),
            "matmul_peak_gflop_s": round(self.limits["flops"] / 1e9, 1), "matmul_peak_precision": self.precision,
        }
        results["versions"] = {"torch": torch.__version__, "python": platform.python_version(),
                               "transformers": installed_version("transformers")}
        results["benchmarks"][self.section] = {
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "peer": self.peer,
            "settings": self.settings, "machine": results["machine"],
            "rows": [asdict(row) | {"ratio": row.ratio} for row in self.rows], "notes": self.notes,
        }
        temporary = path.with_suffix(".json.tmp")
        temporary.write_text(json.dumps(results, indent=1) + "\n")
        os.replace(temporary, path)

    def finish(self) -> None:
        self.print()
        self.save()
        print(f"results in {RESULTS.name} ({self.section}); python benchmarks/summary.py prints them all")


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
