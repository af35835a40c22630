"""A model by name: a Hugging Face Hub id opens from huggingface_hub's cache, and a local path wins over it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import plm
from plm.cli.main import main
from plm.errors import PLMWarning
from tests.cli.test_cli import TINY_RUN

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def hf_gpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny GPT-2 in Hugging Face's layout (config.json, model.safetensors, tokenizer files)."""
    folder = tmp_path_factory.mktemp("hub-model")
    (folder / "train.txt").write_text("the cat sat on the mat. " * 200, encoding="utf-8")
    assert main(["pretrain", *TINY_RUN, "--train", str(folder / "train.txt"), "--steps", "2",
                 "--out", str(folder / "run")]) == 0
    assert main(["convert", "--model", str(folder / "run"), "--out", str(folder / "hf")]) == 0
    return folder / "hf"


def cached(cache: Path, repo_id: str, files: Path) -> Path:
    """``files`` laid out as huggingface_hub's cache keeps a downloaded repository (models--owner--name)."""
    repository = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repository / "snapshots" / COMMIT
    shutil.copytree(files, snapshot)
    (repository / "refs").mkdir(parents=True)
    (repository / "refs" / "main").write_text(COMMIT)
    return snapshot


def test_a_hub_id_opens_from_the_cache_offline(hf_gpt: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cached(tmp_path / "hub", "tiny-org/tiny-gpt2", hf_gpt)
    monkeypatch.chdir(tmp_path)  # no local directory of that name
    model, tokenizer = plm.load_pretrained("tiny-org/tiny-gpt2")
    ids = torch.tensor([tokenizer.encode("the cat sat")])
    torch.testing.assert_close(model(ids).logits, plm.load(hf_gpt)(ids).logits, rtol=0, atol=0)


def test_a_local_directory_wins_over_a_hub_id_of_the_same_spelling(hf_gpt: Path, tmp_path: Path,
                                                                  monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cached(tmp_path / "hub", "tiny-org/tiny-gpt2", hf_gpt)
    monkeypatch.chdir(tmp_path)
    local = plm.from_preset("gpt2-micro", vocab_size=300)
    plm.save_hf(local, tmp_path / "tiny-org" / "tiny-gpt2")
    ids = torch.tensor([[5, 6, 7]])
    torch.testing.assert_close(plm.load("tiny-org/tiny-gpt2")(ids).logits, local.eval()(ids).logits)


def test_an_id_neither_local_nor_cached_offline_is_one_line_and_exit_2(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    assert main(["generate", "--model", "nobody/no-such-model", "the", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err == ("plm generate: error: nobody/no-such-model: no such local directory, not in the Hugging Face "
                   "cache, and HF_HUB_OFFLINE=1 is set\n")


def test_a_path_that_cannot_be_a_hub_id_says_there_is_no_such_directory(tmp_path: Path) -> None:
    with pytest.raises(plm.PLMError, match="no-dir/../x: no such model directory"):
        plm.load(str("no-dir/../x"))


def test_a_repository_with_only_pytorch_weights_is_read_weights_only_and_said_so(hf_gpt: Path, tmp_path: Path,
                                                                                monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    snapshot = cached(tmp_path / "hub", "tiny-org/bin-only", hf_gpt)
    torch.save(load_file(snapshot / "model.safetensors"), snapshot / "pytorch_model.bin")
    (snapshot / "model.safetensors").unlink()
    monkeypatch.chdir(tmp_path)
    with pytest.warns(PLMWarning, match="no safetensors weights; reading its pytorch_model.bin with torch's "
                                        "weights-only loader"):
        model = plm.load("tiny-org/bin-only")
    ids = torch.tensor([[5, 6, 7]])
    torch.testing.assert_close(model(ids).logits, plm.load(hf_gpt)(ids).logits, rtol=0, atol=0)


def test_a_mistyped_run_beside_its_folder_is_a_missing_directory_not_a_hub_id(tmp_path: Path, monkeypatch) -> None:
    def no_hub(*args, **kwargs):
        raise AssertionError("the Hub was asked about a local path")

    monkeypatch.setattr("huggingface_hub.snapshot_download", no_hub)
    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(plm.PLMError, match="^runs/gtp: no such model directory$"):
        plm.load("runs/gtp")
