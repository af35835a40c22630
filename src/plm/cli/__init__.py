"""The ``plm`` command line: thin wrappers that parse, call the library and print.

Importing it, before anything imports PyTorch, chooses how OpenMP's threads wait
([`choose_wait_policy`][plm.cli.choose_wait_policy]); OpenMP reads the policy once, when PyTorch loads it.
By default a libgomp thread that finishes its share of a parallel region spins 300,000 rounds (some
milliseconds) before it sleeps. Beside another busy process, the spinning takes CPU time from the
thread it waits for: on 2 cores with one busy process beside them, gpt2-mini trained 4-6x and decoded
11-14x faster with passive waiting (``OMP_WAIT_POLICY=PASSIVE``), which on a quiet machine cost 14-60%.
So plm waits passively where other processes are busy as it starts, and elsewhere spins
`QUIET_SPIN_COUNT` rounds: as fast as the default on a quiet machine, and 3-4x faster than it beside a
load that arrives later (docs/speed.md, "Speed under load").
"""

import os
import time
from collections.abc import Callable, MutableMapping

BUSY_CORES = 0.5  # other processes' CPU use, in cores, from which threads wait passively
QUIET_SPIN_COUNT = "10000"  # libgomp's spin rounds before a waiting thread sleeps, where the machine is quiet
SAMPLE_SECONDS = 0.1


def busy_elsewhere(seconds: float = SAMPLE_SECONDS) -> float:
    """The cores' worth of CPU time that other processes use now, over ``seconds`` (0 without /proc/stat).

    Args:
        seconds: how long to sample.

    Returns:
        The machine's busy CPU time over the interval, less this process's own, per second.
    """

    def busy_ticks() -> int:  # user, nice, system, irq, softirq, steal: all but idle and iowait
        with open("/proc/stat", encoding="ascii") as stat:
            ticks = [int(field) for field in stat.readline().split()[1:9]]
        return sum(ticks) - ticks[3] - ticks[4]

    try:
        before, ours_before = busy_ticks(), os.times()
        time.sleep(seconds)
        after, ours_after = busy_ticks(), os.times()
    except (OSError, ValueError, IndexError):  # not Linux, or a /proc/stat of another shape
        return 0.0
    ours = ours_after.user + ours_after.system - ours_before.user - ours_before.system
    return max(0.0, (after - before) / os.sysconf("SC_CLK_TCK") - ours) / seconds


def choose_wait_policy(environment: MutableMapping[str, str], busy: Callable[[], float] = busy_elsewhere) -> None:
    """``OMP_WAIT_POLICY=PASSIVE`` when other processes keep ``BUSY_CORES`` or more busy, else a short spin.

    On a quiet machine a waiting thread spins `QUIET_SPIN_COUNT` rounds (``GOMP_SPINCOUNT``) before it
    sleeps, not libgomp's 300,000: the gaps between a step's parallel regions are shorter than either, so
    a quiet machine runs as fast, and a load that arrives after the start meets threads that give the CPU
    up in a fraction of the time. An environment that says how OpenMP waits (``OMP_WAIT_POLICY``, or
    ``GOMP_SPINCOUNT``) is left as it is, and so is a process of a torchrun job (``LOCAL_RANK``): its
    siblings start at the same moment, and would look like other busy processes.

    Args:
        environment: the environment to read and set (``os.environ``).
        busy: the cores other processes use now.
    """
    if any(name in environment for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "LOCAL_RANK")):
        return
    if busy() >= BUSY_CORES:
        environment["OMP_WAIT_POLICY"] = "PASSIVE"
    else:
        environment["GOMP_SPINCOUNT"] = QUIET_SPIN_COUNT


choose_wait_policy(os.environ)
