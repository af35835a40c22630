"""FSDP against DDP on the same processes: training speed and the memory each process holds.

Each setting runs under torchrun (2 processes, gloo, one thread each) through plm's own
Trainer on the same random token blocks: DDP (every process holds the whole model,
gradients and AdamW state), FSDP (each holds half), and FSDP with activation
checkpointing. A worker reports tokens/s over the timed steps (after one warm-up step),
the bytes of the parameters, gradients and optimizer state it holds (counted from its
local tensors), and the peak resident memory of each process, once the Trainer is made
(start-up) and at the end; ``plm plan``'s estimate for the same setting stands beside the
measured state. The model is built as ``plm pretrain`` builds it: with FSDP, whole on the
first process only (:func:`plm.training.parallel.built_on_first_process`).

    python benchmarks/bench_fsdp.py --config both
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_common import Report
from plm.training.plan import Memory, PlanSetup, plan

CONFIGS = {  # preset, batch per process, block, timed steps
    "small": ("gpt2-mini", 8, 128, 6),
    "gpt2": ("gpt2", 2, 128, 3),
}
SETTINGS = {"ddp": ("ddp", False), "fsdp": ("fsdp", False), "fsdp+ckpt": ("fsdp", True)}
PROCESSES = 2

WORKER = """
import json, resource, sys, time
import numpy as np
import torch
import plm
from plm.objectives.clm import CausalLMObjective
from plm.training.distributed import setup_distributed, teardown_distributed
from plm.training.parallel import Parallelism, built_on_first_process
from plm.training.trainer import Trainer, TrainingConfig

def peak_rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

preset, batch, block, steps, strategy, checkpointing, out = sys.argv[1:]
batch, block, steps = int(batch), int(block), int(steps)
parallelism = Parallelism(strategy, checkpoint_activations=checkpointing == "1")
world = setup_distributed(torch.device("cpu"), group_of_one=parallelism.sharded)
torch.manual_seed(0)
with built_on_first_process(parallelism, world):
    model = plm.from_preset(preset)
tokens = np.random.default_rng(0).integers(0, model.config.vocab_size, size=200_000).astype(np.int64)
objective = CausalLMObjective(tokens, tokens[:4096], block_size=block, batch_size=batch)
config = TrainingConfig(steps=steps + 1, device="cpu", progress=False, save_every=10**6, eval_every=10**6,
                        parallelism=parallelism)
trainer = Trainer(model, objective, config, out, distributed=world)
startup_rss = peak_rss()
wrapped = trainer.wrap(trainer.model)
trainer.optimizer_step(wrapped)  # warm-up: allocations, optimizer state
trainer.step += 1
started = time.perf_counter()
for _ in range(steps):
    trainer.optimizer_step(wrapped)
    trainer.step += 1
seconds = time.perf_counter() - started
local = lambda t: t.to_local() if hasattr(t, "to_local") else t
held = sum(local(p).numel() * 4 for p in trainer.model.parameters())
held += sum(local(v).numel() * v.element_size() for s in trainer.optimizer.state.values() for k, v in s.items()
            if k != "step")
peaks = world.all_gather_object((startup_rss, peak_rss()))  # [(start-up, whole run)] in rank order
if world.is_main:
    json.dump({"tokens_per_second": steps * batch * block * world.world_size / seconds,
               # parameters and their gradients (the same bytes), and the optimizer's moments
               "state_bytes": held + sum(local(p).numel() * 4 for p in trainer.model.parameters()),
               "startup_rss_bytes": [startup for startup, _ in peaks],
               "peak_rss_bytes": [peak for _, peak in peaks]}, open(out + "/result.json", "w"))
teardown_distributed()
"""


def measure(preset: str, batch: int, block: int, steps: int, strategy: str, checkpointing: bool) -> dict:
    with tempfile.TemporaryDirectory() as directory:
        worker = Path(directory) / "worker.py"
        worker.write_text(WORKER, encoding="utf-8")
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={PROCESSES}",
                   str(worker), preset, str(batch), str(block), str(steps), strategy, str(int(checkpointing)),
                   directory]
        result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        if result.returncode != 0:
            raise SystemExit(result.stderr[-3000:])
        return json.loads((Path(directory) / "result.json").read_text())


def bench(name: str, report: Report) -> None:
    preset, batch, block, steps = CONFIGS[name]
    results = {setting: measure(preset, batch, block, steps, *options) for setting, options in SETTINGS.items()}
    ddp = results["ddp"]
    shape = f"{PROCESSES}x{batch}x{block}"
    for setting in ("fsdp", "fsdp+ckpt"):
        result = results[setting]
        strategy, checkpointing = SETTINGS[setting]
        planned = plan(PlanSetup(preset, processes=PROCESSES, batch=batch, block=block, strategy=strategy,
                                 checkpoint_activations=checkpointing, device="cpu"), Memory(10**13, "given")).device
        planned_state = planned["parameters"] + planned["gradients"] + planned["optimizer state"]
        report.add(name, f"{setting} train tok/s ({shape}), vs ddp", result["tokens_per_second"],
                   ddp["tokens_per_second"])
        report.add(name, f"{setting} params+grads+AdamW MB per process, vs ddp (lower is better)",
                   result["state_bytes"] / 2**20, ddp["state_bytes"] / 2**20,
                   f"plm plan: {planned_state / 2**20:,.0f} MB")
        for rank in range(PROCESSES):  # the first process builds the whole model, the others only their shards
            for key, when in (("startup_rss_bytes", "start-up"), ("peak_rss_bytes", "peak")):
                report.add(name, f"{setting} {when} RSS MB of process {rank}, vs ddp (lower is better)",
                           result[key][rank] / 2**20, ddp[key][rank] / 2**20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", choices=[*CONFIGS, "both"], default="small")
    args = parser.parse_args()
    report = Report("fsdp", f"plm DDP on the same {PROCESSES} processes (gloo, 1 thread each)",
                    settings={"processes": PROCESSES, "configs": CONFIGS})
    for name in CONFIGS if args.config == "both" else [args.config]:
        bench(name, report)
    report.notes.append("peak RSS includes each process's libraries (torch alone is a few hundred MB)")
    report.finish()


if __name__ == "__main__":
    main()
