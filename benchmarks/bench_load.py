"""Speed under load: plm's training and decoding with another process busy on one core, by OpenMP wait policy.

A CPU user's machine is rarely idle. This benchmark runs gpt2-mini's training steps (8x128, fp32
and bf16 autocast, which is ``--precision auto`` on a CPU with AVX512-BF16 or AMX) and its greedy
decoding (1x16+128) in fresh processes, on a quiet machine and beside one busy process (a Python
loop, one core's worth of work), under two OpenMP wait policies:

* spin: libgomp's default, a thread done with its share of a parallel region spins for a while
  (300,000 rounds of its spin loop) before it sleeps;
* spin N (``GOMP_SPINCOUNT=N``): it spins N rounds, then sleeps; ``plm`` sets 10,000 on a machine quiet as
  it starts;
* passive (``OMP_WAIT_POLICY=PASSIVE``): it sleeps at once; what ``plm`` sets on a machine busy as it starts.

A load that arrives after a process starts meets the policy chosen at its start, so the busy rows
show what a spin count costs there. The policies take turns, ``--rounds`` times per condition; each
figure is the median of its rounds.
OpenMP reads the policy when PyTorch loads it, so each measurement is a process of its own.

    python benchmarks/bench_load.py          # about 12 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager

from bench_common import Report

POLICIES = {"spin": {}, "spin 10000": {"GOMP_SPINCOUNT": "10000"}, "spin 30000": {"GOMP_SPINCOUNT": "30000"},
            "passive": {"OMP_WAIT_POLICY": "PASSIVE"}}
WORKER = r"""
import json, statistics, sys, time, torch
from plm.decoding.generation import generate
from plm.models import from_preset
torch.manual_seed(0)
model = from_preset("gpt2-mini")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
ids = torch.randint(0, model.config.vocab_size, (8, 128))
def train(bf16):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = model(ids, targets=ids).loss
    loss.backward(); optimizer.step(); optimizer.zero_grad()
seconds = {False: [], True: []}
for bf16 in (False, True):
    train(bf16)
for _ in range(5):
    for bf16 in (False, True):
        start = time.perf_counter(); train(bf16); seconds[bf16].append(time.perf_counter() - start)
model.eval()
prompt = ids[:1, :16]
with torch.inference_mode():
    generate(model, prompt, 8)
    decode = []
    for _ in range(3):
        start = time.perf_counter(); generate(model, prompt, 128); decode.append(time.perf_counter() - start)
print(json.dumps({"train fp32": 1024 / statistics.median(seconds[False]),
                  "train bf16 autocast": 1024 / statistics.median(seconds[True]),
                  "decode fp32": 128 / statistics.median(decode)}))
"""


@contextmanager
def busy_core(loaded: bool):
    """One core's worth of another process's work, while the block runs (nothing when not ``loaded``)."""
    process = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if loaded else None
    try:
        time.sleep(0.5 if loaded else 0)
        yield
    finally:
        if process is not None:
            process.kill()
            process.wait()


def measure(policy: str) -> dict[str, float]:
    environment = {name: value for name, value in os.environ.items()
                   if name not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")} | POLICIES[policy]
    ran = subprocess.run([sys.executable, "-c", WORKER], capture_output=True, text=True, env=environment, check=True)
    return json.loads(ran.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    report = Report("load", "libgomp's default wait policy (spin, then sleep) in the same conditions",
                    settings=vars(args))
    figures: dict[tuple[str, str], dict[str, float]] = {}
    for condition in ("quiet", "one busy process"):
        runs: dict[str, list[dict[str, float]]] = {policy: [] for policy in POLICIES}
        with busy_core(condition != "quiet"):
            for _ in range(args.rounds):
                for policy in POLICIES:
                    runs[policy].append(measure(policy))
        for policy, results in runs.items():
            figures[condition, policy] = {name: statistics.median(result[name] for result in results)
                                          for name in results[0]}
    for condition in ("quiet", "one busy process"):
        spin = figures[condition, "spin"]
        for policy in POLICIES:
            if policy == "spin":
                continue
            ours = figures[condition, policy]
            for measure_name in ours:
                report.add("gpt2-mini", f"{measure_name} tok/s, {condition}: {policy} vs spin", ours[measure_name],
                           spin[measure_name], precision="bf16 autocast" if "bf16" in measure_name else "fp32")
        auto = {policy: figures[condition, policy]["train bf16 autocast"] / figures[condition, policy]["train fp32"]
                for policy in POLICIES}
        report.notes.append(f"[{condition}] auto (bf16 autocast) / fp32 training: "
                            + ", ".join(f"{policy} {ratio:.2f}x" for policy, ratio in auto.items()))
    for policy in POLICIES:
        loaded, quiet = figures["one busy process", policy], figures["quiet", policy]
        report.notes.append(f"[{policy}] beside a busy process, as a share of quiet: " + ", ".join(
            f"{name} {loaded[name] / quiet[name]:.0%}" for name in quiet))
    report.finish()


if __name__ == "__main__":
    main()
