"""--report-to tensorboard: TensorBoard's curves hold what metrics.jsonl holds, a resumed run's included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from plm.cli.main import main
from plm.training.trainer import Trainer
from tests.cli.test_cli import TINY_RUN


class Killed(Exception):
    """A run that stops between two checkpoints, as SIGKILL stops it."""


def curves(run: Path) -> dict[str, list[tuple[int, float]]]:
    """Each scalar's (step, value) points as TensorBoard reads them, purged ones left out."""
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    return {tag: [(event.step, event.value) for event in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def logged(run: Path) -> dict[str, list[tuple[int, float]]]:
    """The same points, from metrics.jsonl."""
    points: dict[str, list[tuple[int, float]]] = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        metrics = json.loads(line)
        for name, value in metrics.items():
            if name != "step":
                points.setdefault(name, []).append((metrics["step"], value))
    return points


def test_a_resumed_run_continues_the_curves_without_repeating_steps(text_file: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    args = ["pretrain", *TINY_RUN, "--train", str(text_file), "--out", str(run), "--save-every", "2",
            "--log-every", "1", "--eval-every", "3", "--report-to", "tensorboard"]
    save = Trainer.save

    def killed_at_step_5(self: Trainer) -> None:  # checkpoints at 2 and 4; steps 5 and 6 logged, then killed
        if self.step == 6:
            raise Killed
        save(self)

    monkeypatch.setattr(Trainer, "save", killed_at_step_5)
    with pytest.raises(Killed):
        main([*args, "--steps", "8"])
    assert [step for step, _ in curves(run)["loss"]] == [1, 2, 3, 4, 5, 6]
    monkeypatch.setattr(Trainer, "save", save)
    assert main(["pretrain", "--out", str(run), "--resume"]) == 0

    tensorboard, jsonl = curves(run), logged(run)
    assert [step for step, _ in jsonl["loss"]] == list(range(1, 9))  # the stopped run's 5 and 6 once, resumed
    assert set(tensorboard) == set(jsonl) >= {"loss", "lr", "tokens_per_second", "val_loss"}
    for name, points in jsonl.items():
        assert [step for step, _ in tensorboard[name]] == [step for step, _ in points], name
        assert [value for _, value in tensorboard[name]] == pytest.approx([value for _, value in points], rel=1e-6)


def test_without_the_package_the_flag_says_what_to_install(text_file: Path, tmp_path: Path, capsys,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "torch.utils.tensorboard", None)  # as if not installed
    assert main(["pretrain", *TINY_RUN, "--train", str(text_file), "--out", str(tmp_path / "run"), "--steps", "3",
                 "--report-to", "tensorboard"]) == 2
    assert capsys.readouterr().err.endswith("--report-to tensorboard needs the tensorboard package: pip install "
                                            "'plm[tensorboard]'\n")
    assert not (tmp_path / "run").exists()  # refused before anything is written
