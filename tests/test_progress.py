"""Progress bars redraw on a terminal and write a line every few seconds anywhere else (a log, a pipe, CI)."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest

from plm import progress
from plm.cli.main import main
from plm.progress import progress_bar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def count_slowly(stream: io.StringIO, steps: int = 60, seconds: float = 0.6) -> float:
    started = time.perf_counter()
    with progress_bar(total=steps, desc="train", file=stream) as bar:
        for _ in range(steps):
            time.sleep(seconds / steps)
            bar.update()
    return time.perf_counter() - started


def test_a_bar_in_a_log_is_a_line_every_interval_and_its_last(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.15)
    log = io.StringIO()
    elapsed = count_slowly(log)
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and log.getvalue().endswith("\n")
    assert 2 <= len(lines) <= elapsed / 0.15 + 1, lines
    assert all(line.startswith("train: ") for line in lines) and "60/60" in lines[-1]


def test_a_bar_done_within_the_interval_writes_nothing_to_a_log() -> None:
    log = io.StringIO()
    for _ in progress_bar(range(1000), desc="embed", file=log, leave=False):
        pass
    assert log.getvalue() == ""


def test_a_bar_on_a_terminal_redraws_in_place() -> None:
    terminal = Terminal()
    count_slowly(terminal, steps=20, seconds=0.4)
    assert terminal.getvalue().count("\r") > 2 and terminal.getvalue().count("\n") <= 1


def test_a_pretraining_run_logs_its_bar_as_lines(text_file: Path, tmp_path: Path, capsys,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # captured stderr is no terminal, as under make demo | tee; the 40 steps take 0.1-0.3 s, so a line every 0.02 s
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.02)
    started = time.perf_counter()
    assert main(["pretrain", "--model", "gpt2-micro", "--train", str(text_file), "--vocab-size", "300",
                 "--block-size", "32", "--batch-size", "4", "--steps", "40", "--device", "cpu",
                 "--out", str(tmp_path / "run")]) == 0
    elapsed = time.perf_counter() - started
    err = capsys.readouterr().err
    assert "\r" not in err
    bar = [line for line in err.splitlines() if line.startswith("train: ")]
    assert bar and "40/40" in bar[-1]
    assert len(bar) <= elapsed / 0.02 + 1
