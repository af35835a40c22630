"""plm compare: specs route each option to its place, budgets are equal, runs resume, results are the logs'."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
from pathlib import Path

import pytest
import torch

from plm.apps.compare import (
    RESULT_FILE,
    Budget,
    CompareSpec,
    RunResult,
    compare,
    draw_curves,
    plot_curves,
    read_spec,
    results_table,
    run_definition,
)
from plm.cli.main import main
from plm.errors import PLMError
from plm.models import from_config
from plm.storage.checkpoint import load_model
from plm.training.parallel import Parallelism
from plm.training.starting_model import check_model_name, model_config
from plm.training.trainer import Trainer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "compare"


def write_spec(tmp_path: Path, text_file: Path, budget: str = "steps = 6", runs: str = "") -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(
        f"""
title = "Pre-LN vs post-LN"
[budget]
{budget}
[base]
model = "gpt2-micro"
train_files = ["{text_file}"]
vocab_size = 300
block_size = 32
batch_size = 4
eval_every = 2
save_every = 2
progress = false
device = "cpu"
{runs or '''
[[run]]
name = "Pre-LN"
[[run]]
name = "Post-LN"
config = { norm_first = false, final_norm = false, scaled_residual_init = false }
lr = 1e-3
'''}""",
        encoding="utf-8",
    )
    return path


def test_each_option_goes_to_the_setup_the_training_or_the_preset(tmp_path, text_file):
    spec = read_spec(write_spec(tmp_path, text_file))
    pre, post = spec.runs
    assert (pre.slug, post.slug) == ("pre-ln", "post-ln")
    assert post.setup.model_overrides == {"norm_first": False, "final_norm": False, "scaled_residual_init": False}
    assert (post.setup.block_size, post.setup.train_files) == (32, (str(text_file),))
    assert (post.training.lr, pre.training.lr, post.training.eval_every, post.training.steps) == (1e-3, None, 2, 6)


def test_a_token_budget_is_the_same_number_of_tokens_for_every_run(tmp_path, text_file):
    runs = """
[[run]]
name = "batch 4"
[[run]]
name = "batch 8"
batch_size = 8
block_size = 16
[[run]]
name = "batch 3"
batch_size = 3
"""
    spec = read_spec(write_spec(tmp_path, text_file, budget="tokens = 1000", runs=runs))
    # ceil(1000 / (batch x block)): 4 x 32 -> 8 steps, 8 x 16 -> 8 steps, 3 x 32 -> 11 steps
    assert [run.training.steps for run in spec.runs] == [8, 8, 11]


def test_a_minutes_budget_is_a_time_limit(tmp_path, text_file):
    spec = read_spec(write_spec(tmp_path, text_file, budget="minutes = 0.5"))
    assert {run.training.minutes for run in spec.runs} == {0.5}


@pytest.mark.parametrize(
    ("budget", "runs", "message"),
    [
        ("steps = 6\ntokens = 5", "", "exactly one of steps, tokens, minutes"),
        ("hours = 1", "", "exactly one of steps, tokens, minutes"),
        ("steps = 0", "", "should be a number above 0"),
        ("steps = 6", '[[run]]\nname = "a"\nlearning_rate = 1e-3', r"run 1 \(a\): unknown option 'learning_rate'"),
        ("steps = 6", '[[run]]\nname = "a"\nconfig = { norm_frist = false }', "has no field norm_frist"),
        ("steps = 6", '[[run]]\nname = "a"\nconfig = { norm_first = "no" }',
         'config.norm_first should be true or false, got the string "no"'),
        ("steps = 6", '[[run]]\nname = "a"\nbatch_size = "8"', 'batch_size should be an integer, got the string "8"'),
        ("steps = 6", '[[run]]\nname = "A b"\n[[run]]\nname = "a-b"', "share the directory 'a-b'"),
        ("steps = 6", "[[run]]\nlr = 1e-3", "run 1: needs a name"),
    ],
)
def test_spec_mistakes_name_the_file_and_the_run(tmp_path, text_file, budget, runs, message):
    with pytest.raises(PLMError, match=message):
        read_spec(write_spec(tmp_path, text_file, budget=budget, runs=runs or None))


def test_runs_train_what_their_spec_says_and_report_their_own_logs(tmp_path, text_file):
    spec = read_spec(write_spec(tmp_path, text_file))
    results = compare(spec, tmp_path / "out", progress=lambda line: None)

    post = load_model(tmp_path / "out" / "post-ln")
    assert (post.config.norm_first, post.config.final_norm) == (False, False)
    assert load_model(tmp_path / "out" / "pre-ln").config.norm_first is True
    for result in results:
        logged = [json.loads(line) for line in (result.directory / "metrics.jsonl").read_text().splitlines()]
        evaluations = [(r["step"], r["val_loss"]) for r in logged if "val_loss" in r]
        assert [(step, value) for step, _, value in result.curve] == evaluations == [
            (step, value) for step, value in evaluations if step in (2, 4, 6)
        ]
        assert result.final["val_loss"] == evaluations[-1][1] and result.final["step"] == 6
    table = results_table(spec, results)
    assert f"| Post-LN | {results[1].final['val_loss']:.4f} | {min(v for *_, v in results[1].curve):.4f} | 6 |" in table


@pytest.mark.parametrize(("metric", "best"), [("val_loss_mlm", 5.5), ("val_perplexity", 5.5), ("val_accuracy", 7.0)])
def test_the_best_value_is_the_lowest_loss_or_the_highest_score(metric, best):
    spec = CompareSpec("t", metric, Budget("steps", 3), ())
    curve = [(1, 1.0, 7.0), (2, 2.0, 5.5), (3, 3.0, 6.0)]
    result = RunResult("a run", Path("."), {metric: 6.0, "step": 3, "elapsed": 180.0}, curve)
    assert f"| a run | 6.0000 | {best:.4f} | 3 | 3.0 |" in results_table(spec, [result])


def test_a_comparison_stopped_by_sigterm_keeps_finished_runs_and_resumes_the_rest(tmp_path, text_file, monkeypatch,
                                                                                   capsys):
    spec_file = write_spec(tmp_path, text_file)
    spec = read_spec(spec_file)
    reference = compare(spec, tmp_path / "reference", progress=lambda line: None)

    original_log = Trainer.log

    def log_then_sigterm(trainer, metrics):  # the scheduler's SIGTERM during the second run's step 5 (no save due)
        original_log(trainer, metrics)
        if trainer.out.name == "post-ln" and metrics["step"] == 5:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(Trainer, "log", log_then_sigterm)
    assert main(["compare", str(spec_file), "--out", str(tmp_path / "out")]) == 143
    said = capsys.readouterr().err
    assert "stopped by SIGTERM at step 5" in said and "run the same command again to continue" in said
    assert (tmp_path / "out" / "pre-ln" / RESULT_FILE).is_file()
    assert not (tmp_path / "out" / "post-ln" / RESULT_FILE).is_file()
    monkeypatch.setattr(Trainer, "log", original_log)

    said: list[str] = []
    finished = compare(spec, tmp_path / "out", progress=said.append)
    assert "finished before with the same options, recipe, budget and data; kept" in said[0] and "resuming" in said[1]
    for resumed, whole in zip(finished, reference):  # resuming is exact, so the curves are the uninterrupted ones
        assert [v for *_, v in resumed.curve] == pytest.approx([v for *_, v in whole.curve], rel=1e-5)


def test_a_finished_run_is_kept_only_while_nothing_that_defines_it_changed(tmp_path, text_file):
    """Editing a run's lr, the budget or the data must train it again: its old numbers are another run's."""
    said: list[str] = []
    compare(read_spec(write_spec(tmp_path, text_file)), tmp_path / "out", progress=said.append)
    edited = write_spec(tmp_path, text_file, runs="""
[[run]]
name = "Pre-LN"
lr = 2e-3
[[run]]
name = "Post-LN"
config = { norm_first = false, final_norm = false, scaled_residual_init = false }
lr = 1e-3
""")
    said.clear()
    results = compare(read_spec(edited), tmp_path / "out", progress=said.append)
    assert "changed since it ran (training.lr); training again" in said[0] and "kept" in said[2]
    assert [r.final["step"] for r in results] == [6, 6]

    said.clear()
    results = compare(read_spec(write_spec(tmp_path, text_file, budget="steps = 8", runs=edited.read_text().split(
        'device = "cpu"')[1])), tmp_path / "out", progress=said.append)
    assert [r.final["step"] for r in results] == [8, 8]  # both trained again: the budget is each run's steps
    assert all("training.steps" in line for line in said if "changed" in line)

    said.clear()
    text_file.write_text(text_file.read_text() + "\nOne more line of training text.\n")
    compare(read_spec(edited), tmp_path / "out", progress=said.append)
    assert sum("changed since it ran" in line and "data." in line for line in said) == 2


def test_how_the_processes_share_the_work_does_not_define_a_run(tmp_path, text_file):
    """DDP or FSDP and activation checkpointing give the same numbers: a run saved before they were options stays."""
    run = read_spec(write_spec(tmp_path, text_file)).runs[0]
    sharded = Parallelism("fsdp", checkpoint_activations=True)
    assert "parallelism" not in run_definition(run)["training"]
    assert run_definition(dataclasses.replace(run, training=dataclasses.replace(run.training, parallelism=sharded))) \
        == run_definition(run)


def test_a_metric_no_run_logs_is_refused_before_the_first_step(tmp_path, text_file):
    path = write_spec(tmp_path, text_file)
    path.write_text('metric = "val_los"\n' + path.read_text())
    with pytest.raises(PLMError, match="metric 'val_los' is not one run 'Pre-LN' logs; it logs .*val_loss"):
        compare(read_spec(path), tmp_path / "out", progress=lambda line: None)
    assert not (tmp_path / "out" / "pre-ln" / "metrics.jsonl").exists()


def test_the_plot_draws_each_runs_logged_curve(tmp_path, text_file):
    spec = read_spec(write_spec(tmp_path, text_file))
    results = compare(spec, tmp_path / "out", progress=lambda line: None)
    by_step, by_time = draw_curves(spec, results).axes
    for result, step_line, time_line in zip(results, by_step.lines, by_time.lines, strict=True):
        steps, seconds, values = map(list, zip(*result.curve))
        assert step_line.get_label() == result.name
        assert (list(step_line.get_xdata()), list(step_line.get_ydata())) == (steps, values)
        assert list(time_line.get_xdata()) == [s / 60 for s in seconds]
    path = plot_curves(spec, results, tmp_path / "curves.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_time_limit_stops_the_run_and_still_evaluates_and_saves(tmp_path, text_file):
    spec = read_spec(write_spec(tmp_path, text_file, budget="minutes = 1e-7"))  # 6 us: no step is that fast
    results = compare(spec, tmp_path / "out", progress=lambda line: None)
    for result in results:
        assert result.final["step"] == 1 and math.isfinite(result.final["val_loss"])
        assert result.final["elapsed"] >= 6e-6
        state = json.loads((result.directory / "checkpoint" / "trainer_state.json").read_text())
        assert state["step"] == 1 and state["elapsed"] == result.final["elapsed"]


def test_the_command_prints_the_table_and_writes_its_files(tmp_path, text_file, capsys):
    spec = write_spec(tmp_path, text_file)
    assert main(["compare", str(spec), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "| Pre-LN |" in printed and "| Post-LN |" in printed
    assert {p.name for p in (tmp_path / "out").iterdir()} >= {"results.md", "results.json", "curves.png"}
    assert json.loads((tmp_path / "out" / "results.json").read_text())["Post-LN"]["step"] == 6


def test_a_bad_spec_is_one_line_and_exit_code_2(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("[budget]\nsteps = [", encoding="utf-8")
    assert main(["compare", str(bad)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize("spec", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.stem)
def test_shipped_specs_are_valid_and_cpu_sized(spec):
    parsed = read_spec(spec)
    assert len(parsed.runs) >= 2
    for run in parsed.runs:  # every run builds (its overrides fit its preset), and small: "gpt2" would be 124M
        config = model_config(check_model_name(run.setup.model), run.setup.model_overrides)
        with torch.device("meta"):
            assert from_config(config).num_parameters() < 10_000_000, run.name


def test_a_minutes_budget_defines_a_run_so_a_longer_one_trains_again(tmp_path, text_file):
    """A run kept from a half-minute budget is not the result of a two-minute one: the time limit is part of what
    defines a run, as the step budget is. Guards against leaving the minutes out of the definition, which would keep
    the shorter run's numbers for the longer budget."""
    short, long = (read_spec(write_spec(tmp_path, text_file, budget=f"minutes = {minutes}")) for minutes in (0.5, 2))
    for before, after in zip(short.runs, long.runs):
        assert run_definition(before)["training"]["minutes"] == 0.5
        assert run_definition(after)["training"]["minutes"] == 2
        assert run_definition(before) != run_definition(after)
