"""GPT-1's section 5 analyses as example scripts: zero-shot over pre-training, and the layers transferred."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import plm

EXAMPLES = Path(__file__).parents[2] / "examples" / "pretraining"
WORDS = {"1": "good fine great lovely warm funny", "0": "bad dull poor boring cold flat"}


def sentiment_file(path: Path, size: int, seed: int) -> None:
    """A tiny SST-2 in GLUE's layout: a header, then label<TAB>sentence lines."""
    draw = random.Random(seed)
    lines = ["label\tsentence"]
    for _ in range(size):
        label = draw.choice("01")
        words = draw.choices(WORDS[label].split(), k=6) + draw.choices("the film was a very and".split(), k=4)
        draw.shuffle(words)
        lines.append(f"{label}\t{' '.join(words)}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def run_example(script: str, *arguments: Path, **environment: str) -> list[str]:
    """The table rows an example script prints (its lines that start with '| ' past the header)."""
    printed = subprocess.run([sys.executable, str(EXAMPLES / script), *map(str, arguments)],
                             env={**os.environ, **environment}, capture_output=True, text=True, check=True).stdout
    return [line for line in printed.splitlines() if line.startswith("| ") and "---" not in line][1:]


def test_the_zero_shot_curve_and_the_layers_transferred_at_a_tiny_budget(tmp_path: Path) -> None:
    """Four steps of gpt2-micro scored at each snapshot; then one fine-tuning per k, each from the right weights."""
    data = tmp_path / "sst-2"
    data.mkdir()
    sentiment_file(data / "train.tsv", 120, seed=1)
    sentiment_file(data / "dev.tsv", 12, seed=2)
    rows = run_example("gpt1-zero-shot.py", data, tmp_path / "zs",
                       STEPS="4", MODEL="gpt2-micro", VOCAB="300", BLOCK="32")
    steps = [row.split("|")[1].strip() for row in rows]
    assert steps == ["1", "2", "3", "4"]  # a snapshot every STEPS / 10 steps, at least one: all four kept
    for row in rows:
        assert 0.0 <= float(row.split("|")[2].strip().rstrip("%")) <= 100.0

    run, out = tmp_path / "zs" / "run", tmp_path / "layers"
    rows = run_example("gpt1-layers-transferred.py", data, run, out, TRAIN="24", EPOCHS="1")
    assert [row.split("|")[1].strip() for row in rows] == ["0", "1", "2", "none"]  # gpt2-micro has 2 layers
    for row in rows:
        name = row.split("|")[1].strip()
        result = json.loads((out / f"k-{name}" / "finetuned" / "result.json").read_text())  # one lr: one run
        assert row.split("|")[2].strip() == f"{result['val_accuracy']:.1%}"

    pretrained = plm.load(run).state_dict()
    one = plm.load(out / "k-1" / "model").state_dict()
    none = plm.load(out / "k-none" / "model").state_dict()
    assert one["token_embedding.weight"].equal(pretrained["token_embedding.weight"])
    assert one["blocks.0.attention.in_proj.weight"].equal(pretrained["blocks.0.attention.in_proj.weight"])
    assert not one["blocks.1.attention.in_proj.weight"].equal(pretrained["blocks.1.attention.in_proj.weight"])
    assert not none["token_embedding.weight"].equal(pretrained["token_embedding.weight"])
