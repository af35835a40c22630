"""The base install works without its extras: each command that needs one says which, in one line.

The extras' packages are hidden from a fresh interpreter (None in sys.modules makes their import fail as if
they were not installed), which then runs plm's command line: one command after another, in that one process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.cli.test_cli import TINY_RUN

EXTRAS = ("starlette", "uvicorn", "huggingface_hub", "tensorboard", "sentencepiece", "sacremoses", "h5py", "pyarrow",
          "zstandard", "gguf")
# Runs the commands of the JSON file argv[1] and writes their exit statuses and what they wrote to stderr to argv[2].
WITHOUT_EXTRAS = f"""
import contextlib, io, json, sys
for name in {EXTRAS!r}:
    sys.modules[name] = None
from plm.cli.main import main
answers = []
for args in json.load(open(sys.argv[1])):
    with contextlib.redirect_stderr(io.StringIO()) as err:
        try:
            code = main(args)
        except SystemExit as stop:  # --help
            code = stop.code
    answers.append([code, err.getvalue()])
json.dump(answers, open(sys.argv[2], "w"))
"""


def plm_without_extras(commands: list[list[str]], cwd: Path) -> list[tuple[int, str]]:
    """The exit status and stderr of each command, run in turn by one interpreter without the extras."""
    (cwd / "commands.json").write_text(json.dumps(commands), encoding="utf-8")
    ran = subprocess.run([sys.executable, "-c", WITHOUT_EXTRAS, "commands.json", "answers.json"], capture_output=True,
                         text=True, cwd=cwd, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return [tuple(answer) for answer in json.loads((cwd / "answers.json").read_text(encoding="utf-8"))]


def test_the_base_install_trains_and_generates_and_names_the_extra_a_command_needs(text_file: Path,
                                                                                  tmp_path: Path) -> None:
    parquet, zstd = tmp_path / "rows.parquet", tmp_path / "text.txt.zst"
    parquet.write_bytes(b"PAR1")
    zstd.write_bytes(b"(\xb5/\xfd")
    works = [
        ["--help"],
        ["pretrain", *TINY_RUN, "--train", str(text_file), "--steps", "2", "--out", "run"],
        ["generate", "--model", "run", "the", "--max-new-tokens", "2", "--device", "cpu"],
    ]
    refused = [
        (["serve", "--model", "run"], "plm serve: error: plm serve needs starlette: pip install 'plm[serve]'\n"),
        (["generate", "--model", "owner/model", "hi"],
         "plm generate: error: owner/model: no such local directory; to fetch it from the Hugging Face Hub, pip "
         "install 'plm[hub]'\n"),
        (["pretrain", *TINY_RUN, "--train", str(text_file), "--steps", "2", "--out", "run2", "--report-to",
          "tensorboard"], "--report-to tensorboard needs the tensorboard package: pip install 'plm[tensorboard]'\n"),
        (["data", "prepare", str(parquet), "--tokenizer", "run/tokenizer", "--out", "data"],
         f"{parquet}: reading Parquet needs pyarrow: pip install 'plm[data]'\n"),
        (["pretrain", *TINY_RUN, "--train", str(zstd), "--steps", "2", "--out", "run3"],
         f"{zstd}: reading .zst files needs zstandard: pip install 'plm[data]'\n"),
        (["convert", "--model", "run", "--to", "gguf", "--out", "run.gguf"],
         "plm convert: error: writing GGUF needs llama.cpp's gguf package: pip install 'plm[gguf]'\n"),
    ]
    answers = plm_without_extras([*works, *(args for args, _ in refused)], cwd=tmp_path)
    for args, (code, err) in zip(works, answers):
        assert code == 0, (args, err)
    for (args, message), (code, err) in zip(refused, answers[len(works):]):
        assert code == 2 and err.endswith(message), (args, err)
