"""Stopping a training run on a signal.

A scheduler's SIGTERM before it kills (SLURM, Kubernetes, a spot instance), or Ctrl-C.

While a [`StopSignals`][plm.training.stopping.StopSignals] block runs, those signals are only recorded. The trainer asks
after each optimizer step, saves a checkpoint at the step it reached, and stops; a second signal during that save is
recorded too and changes nothing, so the save completes.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """Record SIGTERM and SIGINT instead of ending the process, while the ``with`` block runs.

    ``received`` is the first such signal's number (0: none). Signal handlers can be set only in
    the main thread; elsewhere (a run started from a worker thread) signals act as usual.
    """

    def __init__(self) -> None:
        self.received = 0
        self.previous: dict[int, Callable[[int, FrameType | None], Any] | int | signal.Handlers | None] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self.previous = {number: signal.signal(number, self.record) for number in STOP_SIGNALS}
        return self

    def record(self, number: int, frame: FrameType | None) -> None:
        """The signal handler: keep the first signal's number.

        Args:
            number: the signal's number.
            frame: the interrupted stack frame (unused).
        """
        self.received = self.received or number

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        for number, handler in self.previous.items():
            signal.signal(number, handler)


def signal_name(number: int) -> str:
    """The name of a signal.

    Args:
        number: the signal's number.

    Returns:
        Its name, such as "SIGTERM".
    """
    return signal.Signals(number).name
