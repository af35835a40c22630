"""Timing a call where the faster of two routes depends on the machine (:mod:`plm.core.linear`, :mod:`plm.core.quantize`)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable


def best_seconds(call: Callable[[], object], repeats: int = 3) -> float:
    """The fastest of ``repeats`` calls, after one to warm up."""
    call()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best
