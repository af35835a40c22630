"""Issue 12: training for a number of minutes, keeping the last N checkpoints, and averaging them."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from plm.cli.main import main
from plm.models import from_config, preset_config
from plm.storage.checkpoint import save_model
from plm.training.trainer import Trainer


def train_args(pairs: Path, out: Path, *flags: str) -> list[str]:
    """plm seq2seq train on the tiny pairs (a folder of src.txt and tgt.txt) with the smallest Transformer; no
    translation at evaluations."""
    return ["seq2seq", "train", "--model", "transformer-micro", "--src", str(pairs / "src.txt"), "--tgt",
            str(pairs / "tgt.txt"), "--vocab-size", "300", "--max-tokens", "256", "--metric-examples", "0",
            "--out", str(out), "--no-progress", "--device", "cpu", *flags]


def test_minutes_stop_the_run_at_the_first_step_past_the_limit(date_pair_files: Path, tmp_path: Path, capsys) -> None:
    minutes = 0.05  # 3 s: a few hundred steps on a 2-core CPU, far from 100,000
    steps = ["--steps", "100000"]
    assert (
        main(train_args(date_pair_files, tmp_path / "run", *steps, "--minutes", str(minutes), "--log-every", "1")) == 0
    )
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["step"] == len(lines) < 100_000  # one line per step: it stopped early
    assert all(line["elapsed"] < minutes * 60 for line in lines[:-1])
    assert lines[-1]["elapsed"] >= minutes * 60
    state = json.loads((tmp_path / "run" / "checkpoint" / "trainer_state.json").read_text())
    assert state["step"] == lines[-1]["step"]  # the last step was saved


@pytest.mark.parametrize("command", [["seq2seq", "train"], ["pretrain"]])
@pytest.mark.parametrize("value", ["0", "-1", "nan", "ten"])
def test_a_bad_number_of_minutes_is_one_line_and_exit_2(tmp_path: Path, capsys, command, value) -> None:
    with pytest.raises(SystemExit) as exit_info:  # argparse's error, one line
        main([*command, "--minutes", value, "--out", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--minutes" in err
    assert not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def kept(
    date_pair_files: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[int, dict[str, torch.Tensor]]]:
    """A run of 5 steps saved at every step with --keep-last 3, and the weights the model had after each step,
    copied by hand from the trainer as it trained."""
    run = tmp_path_factory.mktemp("kept") / "run"
    by_hand: dict[int, dict[str, torch.Tensor]] = {}
    optimizer_step = Trainer.optimizer_step

    def step_and_copy(self: Trainer, wrapped: torch.nn.Module):
        result = optimizer_step(self, wrapped)
        by_hand[self.step + 1] = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        return result

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Trainer, "optimizer_step", step_and_copy)
        assert main(train_args(date_pair_files, run, "--steps", "5", "--save-every", "1", "--keep-last", "3")) == 0
    return run, by_hand


def test_keep_last_leaves_the_last_snapshots_with_the_weights_of_their_steps(kept) -> None:
    run, by_hand = kept
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-000003", "step-000004", "step-000005"]
    for step in (3, 4, 5):
        weights = load_file(run / "checkpoints" / f"step-{step:06d}" / "model.safetensors")
        assert weights.keys() == by_hand[step].keys()
        for name, value in weights.items():
            torch.testing.assert_close(value, by_hand[step][name], rtol=0, atol=0, msg=f"step {step}: {name}")
    assert any(by_hand[4][k].ne(by_hand[5][k]).any() for k in by_hand[5])  # the steps did change the weights
    assert (run / "checkpoint" / "trainer_state.json").is_file()


def test_a_resumed_run_keeps_the_snapshots_it_would_have_kept_straight(
    kept, date_pair_files: Path, tmp_path: Path
) -> None:
    run, by_hand = kept
    resumed = tmp_path / "run"
    assert main(train_args(date_pair_files, resumed, "--steps", "3", "--save-every", "1", "--keep-last", "2")) == 0
    # What a kill can leave: a snapshot newer than the checkpoint (a run stopped with other flags), a half-written one.
    (resumed / "checkpoints" / "step-000009").mkdir()
    (resumed / "checkpoints" / ".step-k1ll3d00").mkdir()
    (resumed / "checkpoints" / ".step-k1ll3d00" / "config.json").write_text("{", encoding="utf-8")
    assert main(
        train_args(date_pair_files, resumed, "--steps", "5", "--save-every", "1", "--keep-last", "2", "--resume")
    ) == 0
    assert sorted(p.name for p in (resumed / "checkpoints").glob("step-*")) == ["step-000004", "step-000005"]
    for step in (4, 5):
        weights = load_file(resumed / "checkpoints" / f"step-{step:06d}" / "model.safetensors")
        for name, value in weights.items():
            torch.testing.assert_close(value, by_hand[step][name], msg=f"step {step}: {name}")
    assert main(["seq2seq", "average", "--model", str(resumed), "--out", str(tmp_path / "averaged")]) == 0


def snapshot_mean(run: Path, steps: list[int]) -> dict[str, torch.Tensor]:
    files = [load_file(run / "checkpoints" / f"step-{step:06d}" / "model.safetensors") for step in steps]
    return {name: torch.stack([f[name] for f in files]).mean(0) for name in files[0]}


@pytest.mark.parametrize("which, steps", [(["--last", "3"], [3, 4, 5]), (["{step4}", "{step5}"], [4, 5])])
def test_average_writes_the_mean_of_the_snapshots_and_translate_reads_it(kept, tmp_path: Path, capsys, monkeypatch,
                                                                          which, steps) -> None:
    run, _ = kept
    out = tmp_path / "averaged"
    which = [
        a.format(step4=run / "checkpoints" / "step-000004", step5=run / "checkpoints" / "step-000005") for a in which
    ]
    assert main(["seq2seq", "average", "--model", str(run), *which, "--out", str(out)]) == 0
    averaged, expected = load_file(out / "model.safetensors"), snapshot_mean(run, steps)
    assert averaged.keys() == expected.keys()
    for name, value in averaged.items():
        torch.testing.assert_close(value, expected[name], msg=name)
    monkeypatch.setattr("sys.stdin", io.StringIO("3 May 1999\nthe first of June, two thousand\n"))
    capsys.readouterr()
    assert main(["translate", "--model", str(out), "--max-len-a", "0", "--max-len-b", "3", "--device", "cpu"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_average_last_2_of_3_kept_snapshots_is_the_mean_of_the_newest_two(kept, tmp_path: Path) -> None:
    """The run kept steps 3, 4 and 5: --last 2 averages steps 4 and 5, not the first two it kept (3 and 4)."""
    run, _ = kept
    assert main(["seq2seq", "average", "--model", str(run), "--last", "2", "--out", str(tmp_path / "averaged")]) == 0
    averaged = load_file(tmp_path / "averaged" / "model.safetensors")
    step3, step4, step5 = (load_file(run / "checkpoints" / f"step-{step:06d}" / "model.safetensors")
                           for step in (3, 4, 5))
    assert averaged.keys() == step5.keys()
    for name, value in averaged.items():
        torch.testing.assert_close(value, (step4[name] + step5[name]) / 2, msg=name)
    assert any(not torch.allclose(averaged[name], (step3[name] + step4[name]) / 2) for name in averaged)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--last", "4"], r"3 snapshots in .* fewer than --last 4"),
        (["{step5}", "{other}"], "a model of another config"),
        (["{step5}", "{step5}/"], r"step-000005/?: given twice \(as .*step-000005 too\); average each checkpoint once"),
        (["--last", "2", "{step5}"], "--last N or checkpoint directories, not both"),
        (["--out", "{exists}"], "exists; pass --overwrite to replace it"),
        (["--out", "{run}", "--overwrite"], "would replace .*, which the average reads"),
        (["--model", "{nowhere}"], "no such run directory"),
        (["--model", "{bare}"], "no snapshots in .*; train with --keep-last N"),
    ],
)
def test_bad_averages_are_one_line_and_exit_2(kept, tmp_path: Path, capsys, argv, message) -> None:
    run, _ = kept
    save_model(from_config(preset_config("transformer-micro", vocab_size=100)), tmp_path / "other")
    (tmp_path / "exists").mkdir()
    (tmp_path / "bare").mkdir()
    names = {"run": run, "step5": run / "checkpoints" / "step-000005", "other": tmp_path / "other",
             "exists": tmp_path / "exists", "nowhere": tmp_path / "nowhere", "bare": tmp_path / "bare"}
    argv = [
        "seq2seq", "average", "--model", str(run), "--out", str(tmp_path / "out"), *(a.format(**names) for a in argv)
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and re.search(message, err), err
    assert not (tmp_path / "out").exists() and (run / "checkpoints" / "step-000005" / "model.safetensors").is_file()


def test_a_negative_keep_last_is_one_line_and_exit_2(date_pair_files: Path, tmp_path: Path, capsys) -> None:
    assert main(train_args(date_pair_files, tmp_path / "run", "--keep-last", "-1", "--steps", "1")) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--keep-last must be >= 0" in err
    assert not (tmp_path / "run").exists()


def test_averaging_state_dicts_weighs_each_equally_and_takes_counters_from_the_last() -> None:
    from plm.training.averaging import average_state_dicts

    generator = torch.Generator().manual_seed(0)
    weights = [torch.randn(4, 3, generator=generator) for _ in range(3)]
    halves = [w.to(torch.bfloat16) for w in weights]
    states = [{"w": w, "h": h, "steps": torch.tensor(10 * (i + 1))} for i, (w, h) in enumerate(zip(weights, halves))]
    averaged = average_state_dicts(states)
    # the mean written out: (w1 + w2 + w3) / 3, in float64, back to each tensor's dtype
    expected = (weights[0].double() + weights[1].double() + weights[2].double()) / 3
    torch.testing.assert_close(averaged["w"], expected.float(), atol=0, rtol=0)
    expected_half = (halves[0].double() + halves[1].double() + halves[2].double()) / 3
    assert averaged["h"].dtype == torch.bfloat16
    torch.testing.assert_close(averaged["h"], expected_half.to(torch.bfloat16), atol=0, rtol=0)
    assert averaged["steps"].item() == 30  # a counter is the newest checkpoint's, not the first's nor a mean
