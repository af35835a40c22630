"""Leaving the process group: nothing of the run may hold it past teardown."""

from __future__ import annotations

import json
import subprocess
import sys

# A fresh process, as a torchrun worker is: whether DDP's wrapper lies in a cycle can depend on what the process ran
# before (in a pytest worker after other training tests it did not).
TRAINING_PROCESS = """
import gc, weakref
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from plm.training.distributed import setup_distributed, teardown_distributed

def training_loop():
    wrapped = DistributedDataParallel(torch.nn.Linear(4, 4))
    wrapped(torch.randn(2, 4)).sum().backward()
    return weakref.ref(wrapped)

setup_distributed(torch.device("cpu"), group_of_one=True)
gc.disable()  # as it may happen not to run between the loop's end and the teardown
wrapper = training_loop()
held = wrapper() is not None
teardown_distributed()
print(held, wrapper() is None, dist.is_initialized())
"""


def test_teardown_frees_ddp_s_hold_on_the_process_group_before_it_destroys_the_group() -> None:
    """DDP's wrapper lies in a reference cycle, so a training loop that returns leaves it to the garbage collector,
    with its reducer holding the process group. A group held until the interpreter exits is destroyed during its
    shutdown, where gloo's threads sometimes abort a torchrun process that finished its run (SIGABRT, "terminate called
    without an active exception"); teardown collects the wrapper first."""
    result = subprocess.run([sys.executable, "-c", TRAINING_PROCESS], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    held, freed, still_in_a_group = result.stdout.split()
    assert held == "True"  # the cycle kept it after the loop returned
    assert (freed, still_in_a_group) == ("True", "False")


# Two processes as torchrun starts them on two machines of one process each: RANK differs, LOCAL_RANK is 0 on both.
# Each prints what plm's helpers give it; the test compares with what the environment and Python's max say.
TWO_MACHINES = """
import json, os, sys
import torch
from plm.training.distributed import is_first_process, setup_distributed, teardown_distributed

first = is_first_process()
world = setup_distributed(torch.device("cpu"))
value = int(sys.argv[1])
print(json.dumps({"first": first, "rank": world.rank, "is_main": world.is_main, "world": world.world_size,
                  "max": world.max(value, torch.device("cpu")), "broadcast": world.broadcast(value)}))
teardown_distributed()
"""


def test_two_processes_take_rank_from_rank_and_agree_on_the_max_and_the_first_ones_value(tmp_path) -> None:
    # Guards against the rank read from LOCAL_RANK (every machine's first process would write the run), the max
    # taking the min (a signal to one process would not stop the others at the same step), and a broadcast from
    # another rank than the first.
    import os
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    values = {0: 3, 1: 7}
    processes = []
    for rank, value in values.items():
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        processes.append(subprocess.Popen([sys.executable, "-c", TWO_MACHINES, str(value)], env=env, cwd=tmp_path,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    answers = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        answers.append(json.loads(out.strip().splitlines()[-1]))
    assert [(a["first"], a["rank"], a["is_main"], a["world"]) for a in answers] == [(True, 0, True, 2),
                                                                                    (False, 1, False, 2)]
    assert [a["max"] for a in answers] == [max(values.values())] * 2
    assert [a["broadcast"] for a in answers] == [values[0]] * 2
