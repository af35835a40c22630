"""Timing the routes of a product whose fastest route depends on the machine (`plm.cpu.linear`, `plm.cpu.int8`).

A route is timed at a shape's first use, and that first use may fall in a slow spell: another process
on one of two cores makes the two-thread routes look slow and the one-thread matrix-vector route win,
and a winner kept for the life of the process then decoded at 30 tok/s where 65 were possible once the
machine was quiet. So [`TimedRoutes`][plm.cpu.timing.TimedRoutes] times every route of a shape again
after a while in wall time, with a back-off: a one-thread winner runs as fast once the load is gone,
and only the routes it beat show it.

The first timing streams copies of the weight through the routes before the shape's first call
([`streamed_seconds`][plm.cpu.timing.streamed_seconds], some 50 ms a shape). A timing again uses the
calls the program makes anyway: the shape's next calls each time one route, in turn, ``TRIALS`` times
each, on the weights as the program reads them (decoding: from memory, one layer's after another's).
That costs a call more where the route on trial is not the winner, which computes the result, where
streaming copies cost 0.2-0.3 s a model each time: a benchmark that decoded GPT-2 for a few seconds
at a time paid that in most of its runs (int8: 61 tok/s where 114 were possible).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import torch

MIN_WEIGHT_NUMEL = 1 << 16  # 256 x 256: below that, a product is mostly the call, and no route is timed
STREAM_BYTES = 64 << 20  # more than the last-level cache of the machines plm is benchmarked on (32 MB)
FIRST_RETIME_S = 5.0  # every route timed again after this much wall time, then after twice as long, and so on
MAX_RETIME_S = 120.0
SWITCH_GAIN = 1.1  # a timing replaces the winner only by a route this much faster: no flapping between equals
TRIALS = 3  # calls of each route in a timing again, the fastest counted: one call may meet an interruption
clock: Callable[[], float] = time.perf_counter  # TimedRoutes' wall time (a test's fake clock)

Key = TypeVar("Key")
Result = TypeVar("Result")


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
    # Copies of their own (not slices of one stack): each starts where PyTorch's allocator aligns a tensor, as the
    # weight itself does, for kernels that load aligned vectors (PyTorch's int8 kernel).
    stack = [weight.clone() for _ in range(copies)] if copies > 1 else [weight]

    def sweep() -> None:
        for matrix in stack:
            product(matrix)

    return best_seconds(sweep, repeats) / copies


@dataclass(slots=True)
class Watch:
    """What [`TimedRoutes`][plm.cpu.timing.TimedRoutes] knows of one key's routes.

    Attributes:
        route: the winner's name.
        routes: every route's name, as first timed.
        retime_at: the `clock` reading from which every route is timed again.
        retime_after: the wall time from this timing of every route to the next (seconds).
        timings: how many times every route was timed (the first timing included).
        trials: the routes the next calls take in a timing again, the last first; empty between timings.
        trial_seconds: the fastest call of each route in this timing again.
    """

    route: str
    routes: tuple[str, ...]
    retime_at: float
    retime_after: float = FIRST_RETIME_S
    timings: int = 1
    trials: list[str] = field(default_factory=list)
    trial_seconds: dict[str, float] = field(default_factory=dict)


class TimedRoutes(Mapping[Key, str], Generic[Key]):
    """For each key (a product's shape), the route timed fastest, timed again after a while.

    As a mapping it is key -> the winner's name. At a key's first use the caller finds it
    [`due`][plm.cpu.timing.TimedRoutes.due], times every route and [`record`][plm.cpu.timing.TimedRoutes.record]s the
    seconds. Every call then asks [`choose`][plm.cpu.timing.TimedRoutes.choose] for the winner; from
    ``FIRST_RETIME_S`` of wall time on, the next calls are [`trial`][plm.cpu.timing.TimedRoutes.trial]s, which time
    each route in turn, ``TRIALS`` calls each. Then the next timing is twice as far off, up to ``MAX_RETIME_S``,
    and a timing replaces the winner only by a route ``SWITCH_GAIN`` times faster. A call between timings reads the
    clock once.

    The winner's own calls are not compared with its earlier ones: their time depends on what the cache holds (a
    first timing streams 64 MB through it, and a small model's weights fit in it afterwards), so a watch of
    them took cache effects for a change of load and timed every route again every few tokens (gpt2-mini
    decoded at 100 tok/s where 650 were possible). Calls of the routes in turn, a few apart, meet the same cache.
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
        """Whether ``key`` is new: the caller times every route and [`record`][plm.cpu.timing.TimedRoutes.record]s them.

        Args:
            key: the product's key (its shape, dtype, threads).

        Returns:
            True at the key's first use.
        """
        return key not in self.watches

    def record(self, key: Key, seconds: dict[str, float]) -> None:
        """Keep the first timing of every route of ``key``: the fastest wins.

        Args:
            key: the product's key.
            seconds: seconds a call of each route takes, timed now.
        """
        self.watches[key] = Watch(min(seconds, key=seconds.__getitem__), tuple(seconds), clock() + FIRST_RETIME_S)

    def choose(self, key: Key) -> tuple[str, bool]:
        """The winner of ``key``, and whether its next call is a trial of a timing again.

        Args:
            key: the product's key, already recorded.

        Returns:
            The winner's name, and True when the caller is to make the call through
            [`trial`][plm.cpu.timing.TimedRoutes.trial].
        """
        watch = self.watches[key]
        if not watch.trials:
            if clock() < watch.retime_at or len(watch.routes) == 1:
                return watch.route, False
            watch.trials = list(watch.routes) * TRIALS
            watch.trial_seconds = {}
        return watch.route, True

    def trial(self, key: Key, run: Callable[[str], Result]) -> Result:
        """A call of ``key`` that times the next route of its timing again; the result is always the winner's.

        The route on trial runs first, timed, as the call would run it; where it is not the winner, the winner then
        computes the result, so that a timing again changes no output (routes round differently). A trial of
        another route costs one call more.

        Args:
            key: the product's key.
            run: the product by the route it is given.

        Returns:
            The winner's product.
        """
        watch = self.watches[key]
        route = watch.trials.pop()
        start = clock()
        result = run(route)
        watch.trial_seconds[route] = min(clock() - start, watch.trial_seconds.get(route, math.inf))
        winner = watch.route
        if not watch.trials:
            self.decide(watch)
        return result if route == winner else run(winner)

    @staticmethod
    def decide(watch: Watch) -> None:
        """End a timing again: a route much faster than the winner replaces it; the next timing is further off."""
        seconds = watch.trial_seconds
        fastest = min(seconds, key=seconds.__getitem__)
        if SWITCH_GAIN * seconds[fastest] < seconds.get(watch.route, math.inf):
            watch.route = fastest
        watch.timings += 1
        watch.retime_after = min(2 * watch.retime_after, MAX_RETIME_S)
        watch.retime_at = clock() + watch.retime_after
