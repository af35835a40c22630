"""Where plm's output goes: a pipe closed early, files whose names say another format, nothing but the result on
standard output."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from plm.cli.main import main


def test_output_piped_into_a_reader_that_stops_early_ends_quietly() -> None:
    # `plm plan ... | head -1`: the reader is gone before plm writes; no "error: Broken pipe", no traceback
    with subprocess.Popen([sys.executable, "-m", "plm.cli.main", "plan", "--model", "gpt2", "--memory", "80GB",
                           "--device", "cpu"], stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        process.stdout.close()
        error = process.stderr.read().decode()
    assert error == "" and process.returncode == 141  # SIGPIPE's status, as a shell tool's


def test_attention_refuses_a_file_name_that_is_not_a_png(tmp_path: Path, capsys) -> None:
    out = tmp_path / "map.txt"
    assert main(["attention", "--model", "no-such-run", "a text", "--out", str(out)]) == 2
    assert capsys.readouterr().err == (f"plm attention: error: --out {out}: the attention map is a PNG image; give a "
                                       "file name ending in .png\n")
    assert not out.exists()


@pytest.mark.parametrize("kind", ["bpe", "wordpiece", "unigram"])
def test_tokenizer_train_writes_its_one_line_to_standard_output(kind: str, text_file: Path, tmp_path: Path,
                                                                capfd: pytest.CaptureFixture) -> None:
    out = tmp_path / "tok"
    assert main(["tokenizer", "train", str(text_file), "--kind", kind, "--vocab-size", "300", "--out", str(out)]) == 0
    printed = capfd.readouterr().out  # what the tokenizers library writes to the file descriptor, too
    assert printed.startswith("wrote a ") and printed.endswith(f"-token {kind} tokenizer to {out}\n")
    assert printed.count("\n") == 1, repr(printed)
