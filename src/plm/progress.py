"""Progress bars: [`progress_bar`][plm.progress.progress_bar] makes every bar plm shows.

On a terminal (or in a notebook, which draws its own widget) a bar redraws itself in place, as
tqdm's do. Anywhere else, in a log file, under ``make demo | tee``, in CI, a redraw is a carriage
return that nothing interprets, and hundreds of them pile up on one line. There a bar writes a plain
line instead, at most one every `LOG_INTERVAL` seconds, and a last one when it closes; a bar done
sooner writes nothing, so that a command that fails early still says so in its one line.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import IO, Any

from tqdm import autonotebook
from tqdm.std import tqdm

LOG_INTERVAL = 10.0  # seconds between a bar's lines where stderr is not a terminal


def progress_bar(iterable: Iterable[Any] | None = None, *, file: IO[str] | None = None, **options: Any) -> Any:
    """A tqdm bar that suits where it is written: redrawn on a terminal, a line every few seconds elsewhere.

    Args:
        iterable: what the bar counts as it is iterated, as for tqdm (None: counted by ``update``).
        file: where the bar goes (None: standard error).
        **options: tqdm's (``total``, ``desc``, ``unit``, ``disable``, ``leave`` ...). Written as lines, a bar
            ends with its last line whatever ``leave`` says (a log has nothing to erase), unless it wrote none.

    Returns:
        The bar, a tqdm.
    """
    stream = sys.stderr if file is None else file
    if autonotebook.tqdm is not tqdm and file is None:
        return autonotebook.tqdm(iterable, **options)
    if stream.isatty():
        return tqdm(iterable, file=stream, **options)
    return tqdm(iterable, file=Lines(stream), **{**options, "delay": LOG_INTERVAL, "mininterval": LOG_INTERVAL,
                                                    "leave": True})


class Lines:
    """A stream that takes tqdm's redraws (a carriage return, the bar, padding) and writes each bar as a line.

    Args:
        stream: where the lines go.
    """

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, text: str) -> None:
        """Write ``text`` as one line, or nothing where it holds no bar.

        Args:
            text: what tqdm writes.
        """
        bar = text.strip("\r\n ")
        if bar:  # not the padding and line ends tqdm writes around a redraw
            self.stream.write(bar + "\n")

    def flush(self) -> None:
        """Flush the stream."""
        self.stream.flush()
