"""The built wheel installs and runs without the source tree: the version, the help, a micro demo, the serve page.

The wheel is built from a copy of the project (so the tree gains no build/ or egg-info) and installed into a
fresh virtual environment without its dependencies, which that environment reads from this one's
site-packages (installing PyTorch again would take minutes). plm itself comes from the wheel alone: the
commands run in a folder outside the tree, and this environment's editable install is not on their path.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("src", "pyproject.toml", "README.md")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin/ folder of a fresh environment with the wheel of this tree installed."""
    work = tmp_path_factory.mktemp("wheel")
    for name in SOURCES:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        copy(ROOT / name, work / "project" / name, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                                      if (ROOT / name).is_dir() else {}))
    run([sys.executable, "-m", "build", "--wheel", "--sdist", "--no-isolation", "--outdir", str(work / "dist"),
         str(work / "project")])
    [wheel] = (work / "dist").glob("plm-*.whl")
    assert len(list((work / "dist").glob("plm-*.tar.gz"))) == 1
    run([sys.executable, "-m", "venv", "--without-pip", str(work / "venv")])
    python = work / "venv" / "bin" / "python"
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).strip())
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")  # torch and the others, not plm
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--quiet", str(wheel)])
    return work / "venv" / "bin"


def run(command: list[str], **options) -> str:
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, **options)
    assert result.returncode == 0, f"{' '.join(command)}:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    return result.stdout


def test_the_wheel_carries_the_version_from_pyproject(installed: Path, tmp_path: Path) -> None:
    version = re.search(r'^version = "(.+)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert version is not None
    printed = run([str(installed / "plm"), "--version"], cwd=tmp_path)
    assert printed.startswith(f"plm {version[1]} (PyTorch ")
    where = run([str(installed / "python"), "-c", "import plm; print(plm.__file__, plm.__version__)"], cwd=tmp_path)
    assert "site-packages" in where and str(ROOT) not in where and where.split()[1] == version[1]


def test_the_installed_command_helps_trains_and_serves_its_page(installed: Path, text_file: Path,
                                                                tmp_path: Path) -> None:
    assert "pretrain" in run([str(installed / "plm"), "--help"], cwd=tmp_path)
    # A small text, not the embedded corpus: that is built from the standard library, not from the wheel.
    run([str(installed / "plm"), "pretrain", "--model", "gpt2-micro", "--vocab-size", "300", "--steps", "5",
         "--block-size", "32", "--batch-size", "4", "--train", str(text_file), "--no-progress", "--device", "cpu",
         "--out", "run"], cwd=tmp_path)
    with subprocess.Popen([str(installed / "plm"), "serve", "--model", "run", "--port", "0", "--device", "cpu"],
                          cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as server:
        try:
            assert server.stdout is not None
            url = next(line.split()[2] for line in server.stdout if line.startswith("plm serve: http"))
            page = urllib.request.urlopen(url, timeout=30).read().decode()  # the page's static files are in the wheel
            assert "<html" in page.lower()
            script = re.search(r'src="([^"]+\.js)"', page)
            assert script is not None and urllib.request.urlopen(url + script[1].lstrip("/"), timeout=30).status == 200
        finally:
            server.terminate()


def test_the_wheel_carries_the_source_of_plm_s_kernels_and_builds_them(installed: Path, tmp_path: Path) -> None:
    """The C files are package data: without them in the wheel, plm would quietly keep PyTorch's kernels."""
    from plm.cpu import native

    code = ("from plm.cpu import native; "
            "print(all(path.is_file() for path in (*native.SOURCES, native.HEADER)), native.available())")
    printed = run([str(installed / "python"), "-c", code], cwd=tmp_path, env={**os.environ, "PLM_CACHE": str(tmp_path)})
    assert printed.split() == ["True", str(native.available())]  # built here as in this tree, where a compiler is
