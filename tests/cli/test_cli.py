"""The plm command: every command teaches with --help and runs end to end (bad inputs: tests/test_bad_inputs.py)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

import plm.cli
from plm.cli import compare as compare_cli
from plm.cli.main import build_parser, main
from plm.errors import with_article
from plm.models import RECIPES

TINY_RUN = ["--model", "gpt2-micro", "--vocab-size", "300", "--block-size", "32", "--batch-size", "4",
            "--warmup", "2", "--no-progress", "--device", "cpu"]


def plm_command(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "plm.cli.main", *args], capture_output=True, text=True, **kwargs)


def run_main(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def every_command(parser: argparse.ArgumentParser = build_parser(), path: tuple[str, ...] = ()) -> list[list[str]]:
    """Every command and subcommand of the parser, found by walking it, so a new command is covered at once."""
    found = [list(path)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, subparser in action.choices.items():
                found += every_command(subparser, (*path, name))
    return found


@pytest.mark.parametrize("command", every_command(), ids=lambda command: " ".join(command) or "plm")
def test_every_command_has_help_with_examples(command: list[str], capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    assert "usage: plm" in help_text
    assert "%%" not in help_text  # a description is printed as written: "15%%" would show doubled
    groups = {("tokenizer",), ("eval",), ("elmo",), ("seq2seq",)}  # a group's help lists its subcommands
    if command and command != ["demo"] and tuple(command) not in groups:
        assert "examples:" in help_text


def test_plm_help_names_every_family(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split()).lower()
    missing = [family for family in RECIPES if family not in help_text]
    assert not missing, f"plm --help does not name {missing}"


def test_the_spec_in_compare_help_trains_a_family_s_small_preset() -> None:
    spec = tomllib.loads(compare_cli.EXAMPLES.split("examples:")[0].split("\n", 1)[1])
    assert RECIPES[spec["base"]["model"]].preset.endswith("-mini")


def test_a_wrong_flag_is_one_line_and_exit_code_2() -> None:
    result = plm_command("pretrain", "--stepz", "3")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "unrecognized arguments: --stepz" in result.stderr


@pytest.mark.parametrize(
    "argv, line",
    [
        (["seq2seq", "train", "--stepz", "3"],
         "plm seq2seq train: error: unrecognized arguments: --stepz 3; did you mean --steps? (see plm seq2seq train "
         "--help)"),
        (["eval", "lambada", "--model", "{tmp}/nowhere", "{tmp}/x.jsonl"], "plm eval lambada: error: "),
        (["finetune", "--task", "qa", "--max-length", "1"],
         "plm finetune: error: --max-length must be at least 8, got 1"),
    ],
)
def test_an_error_names_the_whole_subcommand_and_the_flag(argv, line, tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) if "--stepz" in argv else contextlib.nullcontext():
        code = main([a.format(tmp=tmp_path) for a in argv])
        assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(line), err


def test_a_family_is_named_with_its_article() -> None:
    assert [with_article(f) for f in ("gpt", "elmo", "albert", "rnn", "transformer")] == [
        "a gpt", "an elmo", "an albert", "an rnn", "a transformer"]


@pytest.fixture
def trained(tmp_path_factory: pytest.TempPathFactory, text_file: Path) -> Path:
    out = tmp_path_factory.mktemp("run")
    assert main(["pretrain", *TINY_RUN, "--train", str(text_file), "--steps", "6", "--out", str(out)]) == 0
    return out


def test_pretrain_generate_evaluate_convert(trained: Path, text_file: Path, tmp_path: Path, capsys) -> None:
    code, out, _ = run_main(capsys, "generate", "--model", str(trained), "The cat", "A dog", "--max-new-tokens", "5")
    assert code == 0 and out.startswith("The cat") and "A dog" in out
    # --cuda-graph decodes over a static cache (a CUDA graph on a GPU): greedy output is the same.
    code, static, _ = run_main(capsys, "generate", "--model", str(trained), "The cat", "A dog", "--max-new-tokens",
                               "5", "--cuda-graph")
    assert code == 0 and static == out

    code, out, _ = run_main(capsys, "eval", "perplexity", "--model", str(trained), str(text_file), "--stride", "16")
    assert code == 0 and "perplexity" in out and "stride 16" in out and "window 32" in out  # the run's block size

    hf, back = tmp_path / "hf", tmp_path / "back"
    assert run_main(capsys, "convert", "--model", str(trained), "--out", str(hf))[0] == 0
    assert json.loads((hf / "config.json").read_text())["model_type"] == "gpt2"
    assert run_main(capsys, "convert", "--model", str(hf), "--out", str(back))[0] == 0
    code, again, _ = run_main(capsys, "generate", "--model", str(back), "The cat", "A dog", "--max-new-tokens", "5")
    assert code == 0


def test_a_runs_validation_perplexity_is_eval_perplexity_of_its_validation_file(text_file: Path, tmp_path: Path,
                                                                                capsys) -> None:
    # One file has one perplexity: eval's default window once was the model's context (64), not the run's block (32).
    validation = tmp_path / "validation.txt"
    validation.write_text(text_file.read_text(encoding="utf-8")[:3000], encoding="utf-8")
    out = tmp_path / "run"
    assert main(["pretrain", *TINY_RUN, "--precision", "fp32", "--train", str(text_file), "--validation",
                 str(validation), "--steps", "2", "--out", str(out)]) == 0
    logged = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])["val_perplexity"]
    capsys.readouterr()
    assert main(["eval", "perplexity", "--model", str(out), str(validation), "--no-progress", "--json",
                 str(tmp_path / "ppl.json")]) == 0
    assert json.loads((tmp_path / "ppl.json").read_text())["perplexity"] == pytest.approx(logged, rel=1e-6)


def test_tokenizer_train_writes_a_loadable_tokenizer(text_file: Path, tmp_path: Path, capsys) -> None:
    code, out, _ = run_main(
        capsys, "tokenizer", "train", str(text_file), "--out", str(tmp_path / "tok"), "--vocab-size", "300"
    )
    assert code == 0 and (tmp_path / "tok" / "tokenizer.json").is_file()


# Each of these took a second or more to import (rouge-score pulls in nltk and scipy; FSDP and
# distributed checkpointing pull in DTensor), so every plm command started in 6 s instead of 3.
IMPORTED_ONLY_WHEN_USED = ("rouge_score", "nltk", "scipy", "torch.distributed.fsdp", "torch.distributed.checkpoint")


def test_the_command_imports_no_heavy_library_it_does_not_use_yet() -> None:
    code = "import sys, plm.cli.main; print(' '.join(sorted(set(sys.argv[1:]) & set(sys.modules))))"
    loaded = subprocess.run([sys.executable, "-c", code, *IMPORTED_ONLY_WHEN_USED], capture_output=True, text=True,
                            check=True).stdout.split()
    assert loaded == []


@pytest.mark.parametrize("given, expected", [({"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE"),
                                             ({"GOMP_SPINCOUNT": "1000"}, "None")])
def test_the_command_chooses_openmp_s_wait_policy_before_torch_loads_and_keeps_one_given(given, expected) -> None:
    """OpenMP reads its wait policy once, as PyTorch loads it: set after that, it changes nothing."""
    environment = {name: value for name, value in os.environ.items()
                   if name not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")} | given
    code = "import os, sys, plm.cli; print('torch' in sys.modules, os.environ.get('OMP_WAIT_POLICY'))"
    seen = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env=environment).stdout.split()
    assert seen == ["False", expected]


@pytest.mark.parametrize("busy, given, expected", [
    (0.0, {}, {"GOMP_SPINCOUNT": plm.cli.QUIET_SPIN_COUNT}),
    (1.0, {}, {"OMP_WAIT_POLICY": "PASSIVE"}),
    (1.0, {"OMP_WAIT_POLICY": "ACTIVE"}, {"OMP_WAIT_POLICY": "ACTIVE"}),
    (0.0, {"OMP_WAIT_POLICY": "ACTIVE"}, {"OMP_WAIT_POLICY": "ACTIVE"}),
    (1.0, {"GOMP_SPINCOUNT": "1000"}, {"GOMP_SPINCOUNT": "1000"}),
    (0.0, {"LOCAL_RANK": "0"}, {"LOCAL_RANK": "0"}),  # torchrun's siblings
])
def test_threads_wait_passively_beside_other_busy_processes_and_spin_briefly_elsewhere(busy, given, expected) -> None:
    """Beside a busy process, spinning OpenMP threads took the CPU from the thread they waited for (3-14x slower
    than passive waiting); on a quiet machine, passive waiting cost 14-60%, and 10,000 spin rounds nothing, against
    3-4x faster than libgomp's 300,000 beside a load that came later (benchmarks/bench_load.py)."""
    environment = dict(given)
    plm.cli.choose_wait_policy(environment, busy=lambda: busy)
    assert environment == expected


def test_other_processes_busy_time_is_seen() -> None:
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        assert plm.cli.busy_elsewhere(0.3) >= plm.cli.BUSY_CORES
    finally:
        busy.kill()
        busy.wait()
