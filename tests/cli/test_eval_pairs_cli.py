"""plm eval pairs: an encoder's heads scored on NSP or SOP pairs of a text, as the library scores them."""

from __future__ import annotations

import json
from pathlib import Path

import torch

import plm
from plm.apps.head_accuracy import head_accuracies
from plm.cli.main import main
from plm.tokenization.tokenizer import Tokenizer
from tests.conftest import synthetic_text


def test_an_sop_head_scored_on_nsp_pairs(tmp_path: Path) -> None:
    text = tmp_path / "held-out.txt"
    text.write_text(synthetic_text(paragraphs=20, seed=5), encoding="utf-8")
    tokenizer = Tokenizer.train_wordpiece(text.read_text().splitlines(), vocab_size=200, min_frequency=1)
    torch.manual_seed(0)
    model = plm.from_preset("bert-micro", vocab_size=len(tokenizer), pretraining_heads=("mlm", "sop"))
    plm.save(model, tmp_path / "model", tokenizer)
    out = tmp_path / "pairs.json"
    assert main(["eval", "pairs", "--model", str(tmp_path / "model"), str(text), "--pairs", "nsp", "--max-length",
                 "64", "--json", str(out), "--device", "cpu"]) == 0
    expected = head_accuracies(plm.load(tmp_path / "model"), tokenizer, text, "nsp", max_length=64).as_dict()
    assert json.loads(out.read_text()) == expected and expected["pair_head"] == "sop"
