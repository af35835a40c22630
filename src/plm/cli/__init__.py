"""The ``plm`` command line: thin wrappers that parse, call the library and print.

Importing it, before anything imports PyTorch, chooses how OpenMP's threads wait
([`choose_wait_policy`][plm.cli.choose_wait_policy]); OpenMP reads the policy once, when PyTorch loads it.
By default a thread that finishes its share of a parallel region spins before it sleeps. Beside
another busy process, the spinning takes CPU time from the thread it waits for: on 2 cores with one
busy process beside them, gpt2-mini trained 1.6-2.2x and decoded 2-5x faster with passive waiting
(``OMP_WAIT_POLICY=PASSIVE``). On a quiet machine passive waiting cost 15-27%, so plm waits passively
only when other processes are busy as it starts (docs/speed.md, "Speed under load").
"""

import os
import time
from collections.abc import Callable, MutableMapping

BUSY_CORES = 0.5  # other processes' CPU use, in cores, from which threads wait passively
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
    """Set ``OMP_WAIT_POLICY=PASSIVE`` when other processes keep ``BUSY_CORES`` or more busy, unless told otherwise.

    An environment that says how OpenMP waits (``OMP_WAIT_POLICY``, or libgomp's ``GOMP_SPINCOUNT``) is left as
    it is, and so is a process of a torchrun job (``LOCAL_RANK``): its siblings start at the same moment, and
    would look like other busy processes.

    Args:
        environment: the environment to read and set (``os.environ``).
        busy: the cores other processes use now.
    """
    if any(name in environment for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "LOCAL_RANK")):
        return
    if busy() >= BUSY_CORES:
        environment["OMP_WAIT_POLICY"] = "PASSIVE"


choose_wait_policy(os.environ)
