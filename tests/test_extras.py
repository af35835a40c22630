"""The base install works without its extras: each command that needs one says which, in one line.

The extras' packages are hidden from a fresh interpreter (None in sys.modules makes their import fail as if
they were not installed), which then runs plm's command line.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.cli.test_cli import TINY_RUN

EXTRAS = ("starlette", "uvicorn", "huggingface_hub", "tensorboard", "sentencepiece", "sacremoses", "h5py", "pyarrow",
          "zstandard")
WITHOUT_EXTRAS = f"""
import sys
for name in {EXTRAS!r}:
    sys.modules[name] = None
from plm.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def plm_without_extras(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT_EXTRAS, *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def test_the_base_install_trains_and_generates_and_names_the_extra_a_command_needs(text_file: Path,
                                                                                  tmp_path: Path) -> None:
    assert plm_without_extras("--help", cwd=tmp_path).returncode == 0
    trained = plm_without_extras("pretrain", *TINY_RUN, "--train", str(text_file), "--steps", "2", "--out", "run",
                                 cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr
    generated = plm_without_extras("generate", "--model", "run", "the", "--max-new-tokens", "2", "--device", "cpu",
                                   cwd=tmp_path)
    assert generated.returncode == 0, generated.stderr
    parquet, zstd = tmp_path / "rows.parquet", tmp_path / "text.txt.zst"
    parquet.write_bytes(b"PAR1")
    zstd.write_bytes(b"(\xb5/\xfd")
    for args, message in [
        (("serve", "--model", "run"), "plm serve: error: plm serve needs starlette: pip install 'plm[serve]'\n"),
        (("generate", "--model", "owner/model", "hi"),
         "plm generate: error: owner/model: no such local directory; to fetch it from the Hugging Face Hub, pip "
         "install 'plm[hub]'\n"),
        (("pretrain", *TINY_RUN, "--train", str(text_file), "--steps", "2", "--out", "run2", "--report-to",
          "tensorboard"), "--report-to tensorboard needs the tensorboard package: pip install 'plm[tensorboard]'\n"),
        (("data", "prepare", str(parquet), "--tokenizer", "run/tokenizer", "--out", "data"),
         f"{parquet}: reading Parquet needs pyarrow: pip install 'plm[data]'\n"),
        (("pretrain", *TINY_RUN, "--train", str(zstd), "--steps", "2", "--out", "run3"),
         f"{zstd}: reading .zst files needs zstandard: pip install 'plm[data]'\n"),
    ]:
        refused = plm_without_extras(*args, cwd=tmp_path)
        assert refused.returncode == 2 and refused.stderr.endswith(message), refused.stderr
