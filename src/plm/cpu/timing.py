"""Timing the routes of a product whose fastest route depends on the machine (`plm.cpu.linear`, `plm.cpu.int8`).

A route is timed at a shape's first use, and that first use may fall in a slow spell: another process
on one of two cores makes the two-thread routes look slow and the one-thread matrix-vector route win,
and a winner kept for the life of the process then decoded at 30 tok/s where 65 were possible once the
machine was quiet. So [`TimedRoutes`][plm.cpu.timing.TimedRoutes] times every route of a shape again
after a while in wall time, with a back-off: a one-thread winner runs as fast once the load is gone,
and only the routes it beat show it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

import torch

STREAM_BYTES = 64 << 20  # more than the last-level cache of the machines plm is benchmarked on (32 MB)
FIRST_RETIME_S = 5.0  # every route timed again after this much wall time, then after twice as long, and so on
MAX_RETIME_S = 120.0  # a timing of every route costs 0.1-0.2 s a shape: under 1% of the time at this spacing
SWITCH_GAIN = 1.1  # a timing replaces the winner only by a route this much faster: no flapping between equals
clock: Callable[[], float] = time.perf_counter  # TimedRoutes' wall time (a test's fake clock)

Key = TypeVar("Key")


def best_seconds(call: Callable[[], object], repeats: int = 3) -> float:
    """The fastest of ``repeats`` calls, after one to warm up."""
    call()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def streamed_seconds(product: Callable[[torch.Tensor], object], weight: torch.Tensor, repeats: int = 3) -> float:
    """Seconds ``product(weight)`` takes when the weight comes from memory, as in a decoding step.

    Decoding a token reads every weight matrix of a model once, so none is in the cache
    when its turn comes. Timed on one matrix called again and again, a matrix that fits the
    cache favours MKL's matrix-vector product, which can lose inside a decoding step, where
    the weight comes from memory. So a matrix smaller than
    ``STREAM_BYTES`` is timed over that many bytes of copies of itself, one call each,
    and the time per call returned (once per shape: some 50 ms).
    """
    copies = -(-STREAM_BYTES // (weight.numel() * weight.element_size()))
    stack = weight.expand(copies, *weight.shape).clone() if copies > 1 else weight[None]  # (copies, out, in)

    def sweep() -> None:
        for matrix in stack:
            product(matrix)

    return best_seconds(sweep, repeats) / copies


@dataclass(slots=True)
class Watch:
    """What [`TimedRoutes`][plm.cpu.timing.TimedRoutes] knows of one key's winner.

    Attributes:
        route: the winner's name.
        retime_at: the `clock` reading from which every route is timed again.
        retime_after: the wall time from this timing of every route to the next (seconds).
    """

    route: str
    retime_at: float
    retime_after: float = FIRST_RETIME_S


class TimedRoutes(Mapping[Key, str], Generic[Key]):
    """For each key (a product's shape), the route timed fastest, timed again after a while.

    As a mapping it is key -> the winner's name. A caller asks whether a key is
    [`due`][plm.cpu.timing.TimedRoutes.due], times every route when it is and
    [`record`][plm.cpu.timing.TimedRoutes.record]s the seconds: at a key's first use, then ``FIRST_RETIME_S`` of
    wall time later, then after twice as long each time, up to ``MAX_RETIME_S``, and a timing replaces the winner only
    by a route ``SWITCH_GAIN`` times faster. A call between timings reads the clock once.

    The winner's own calls are not watched for a change: their time depends on what the cache holds (a
    timing streams 64 MB through it, and a small model's weights fit in it afterwards), so a watch of
    them took cache effects for a change of load and timed every route again every few tokens (gpt2-mini
    decoded at 100 tok/s where 650 were possible).
    """

    def __init__(self) -> None:
        """No key timed yet."""
        self.watches: dict[Key, Watch] = {}

    def __getitem__(self, key: Key) -> str:
        """The winner of ``key``."""
        return self.watches[key].route

    def __iter__(self) -> Iterator[Key]:
        """The keys timed so far."""
        return iter(self.watches)

    def __len__(self) -> int:
        """How many keys were timed."""
        return len(self.watches)

    def due(self, key: Key) -> bool:
        """Whether every route of ``key`` is to be timed before its next call: at its first use, or after a while.

        Args:
            key: the product's key (its shape, dtype, threads).

        Returns:
            True when the caller should time them and [`record`][plm.cpu.timing.TimedRoutes.record] the seconds.
        """
        watch = self.watches.get(key)
        return watch is None or clock() >= watch.retime_at

    def record(self, key: Key, seconds: dict[str, float]) -> None:
        """Keep the timing of every route of ``key``: the first winner, or a new one much faster than the last.

        Args:
            key: the product's key.
            seconds: seconds a call of each route takes, timed now.
        """
        route = min(seconds, key=seconds.__getitem__)
        watch = self.watches.get(key)
        if watch is None:
            self.watches[key] = Watch(route, clock() + FIRST_RETIME_S)
            return
        if SWITCH_GAIN * seconds[route] < seconds[watch.route]:
            watch.route = route
        watch.retime_after = min(2 * watch.retime_after, MAX_RETIME_S)
        watch.retime_at = clock() + watch.retime_after
