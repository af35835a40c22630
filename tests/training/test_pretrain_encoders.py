"""Pre-training the encoders from the command line: objectives, heads, optimizers, and their commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import plm
from plm.cli.main import main
from plm.data.corpus import Corpus, default_corpus
from plm.training import pretrain
from plm.training.lamb import Lamb
from plm.training.pretrain import PretrainSetup, prepare
from plm.training.trainer import TrainingConfig
from tests.conftest import synthetic_text

QUICK = ["--vocab-size", "400", "--batch-size", "8", "--block-size", "48", "--warmup", "2",
         "--no-progress", "--device", "cpu", "--log-every", "1"]


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    ("model", "objective", "heads", "optimizer"),
    [
        ("bert-micro", "mlm+nsp", ("mlm", "nsp"), "AdamW"),
        ("albert-micro", "auto", ("mlm", "sop"), "Lamb"),
        ("deberta-micro", "mlm", ("mlm",), "AdamW"),
        ("deberta-micro", "mlm+sop", ("mlm", "sop"), "AdamW"),
    ],
)
def test_each_encoder_pretrains_with_its_objective(model, objective, heads, optimizer, text_file, tmp_path, capsys):
    argv = ["pretrain", "--model", model, "--objective", objective, *QUICK, "--steps", "3", "--train", str(text_file)]
    assert main([*argv, "--out", str(tmp_path / "run")]) == 0
    last = metrics(tmp_path / "run")[-1]
    assert {f"loss_{head}" for head in heads if head != "mlm"} <= set(last) and last["val_loss"] > 0
    trained = plm.load(tmp_path / "run")
    assert trained.config.pretraining_heads == heads
    trainer, _ = prepare(
        PretrainSetup(model=model, objective=objective, train_files=(str(text_file),), vocab_size=400, batch_size=8),
        TrainingConfig(steps=1, device="cpu", progress=False),
        tmp_path / "probe",
    )
    assert type(trainer.optimizer).__name__ == optimizer


def test_albert_sop_with_ngram_masking_and_lamb_visibly_learns(tmp_path):
    # Its own validation text, so that the drop measured does not hang on which documents are held out:
    # 0.97 to 1.08 nats over seeds 0-3, as before examples were drawn at random (0.94 to 1.16).
    paragraphs = synthetic_text(240).split("\n\n")
    train, validation = tmp_path / "train.txt", tmp_path / "valid.txt"
    train.write_text("\n\n".join(paragraphs[:200]), encoding="utf-8")
    validation.write_text("\n\n".join(paragraphs[200:]), encoding="utf-8")
    setup = PretrainSetup(model="albert-micro", train_files=(str(train),), validation_files=(str(validation),),
                          vocab_size=400, batch_size=16, block_size=48)
    training = TrainingConfig(
        steps=60, lr=5e-2, min_lr=5e-3, warmup=5, eval_every=60, save_every=60, progress=False, device="cpu"
    )
    trainer, _ = prepare(setup, training, tmp_path / "run")
    assert isinstance(trainer.optimizer, Lamb)
    before = trainer.evaluate()
    after = trainer.train()
    assert after["val_loss_mlm"] < before["val_loss_mlm"] - 0.8


def test_fill_mask_and_embed_commands(text_file, tmp_path, capsys):
    run = tmp_path / "bert"
    argv = ["pretrain", "--model", "bert-micro", *QUICK, "--steps", "2", "--train", str(text_file), "--out", str(run)]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["fill-mask", "--model", str(run), "The cat [MASK] the book.", "--guesses", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("mask 1: ") and out.count("(") == 3

    vectors = tmp_path / "vectors.npy"
    assert main(["embed", "--model", str(run), "The cat reads.", "A dog sees.", "--out", str(vectors)]) == 0
    embeddings = np.load(vectors)
    assert embeddings.shape == (2, 32)
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, rtol=1e-5)


def test_encoder_commands_refuse_bad_input_in_one_line(text_file, tmp_path, capsys):
    run = tmp_path / "gpt"
    argv = ["pretrain", "--model", "gpt2-micro", *QUICK, "--steps", "2", "--train", str(text_file), "--out", str(run)]
    assert main(argv) == 0
    capsys.readouterr()
    cases = [
        (["embed", "--model", str(run), "hello"], "is not an encoder"),
        (["fill-mask", "--model", str(run), "a [MASK]"], "is not an encoder"),
        (["pretrain", "--model", "bert-micro", "--objective", "clm", "--out", str(tmp_path / "x")],
         "does not fit a bert model"),
        (["pretrain", "--model", "gpt2-micro", "--objective", "mlm+nsp", "--out", str(tmp_path / "y")],
         "does not fit a gpt model"),
    ]
    for argv, message in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1


def test_torchrun_pretrains_albert_sop_like_one_process_with_accumulation(text_file, tmp_path):
    """Every head gets a gradient (no unused NSP head or pooler), so DDP runs; the losses match."""
    # Both runs take one tokenizer, so that only the training is compared.
    assert main(["tokenizer", "train", str(text_file), "--kind", "unigram", "--vocab-size", "400",
                 "--out", str(tmp_path / "tok")]) == 0
    common = ["--model", "albert-micro", *QUICK, "--steps", "2", "--dropout", "0", "--train", str(text_file),
              "--tokenizer", str(tmp_path / "tok")]
    with subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         "-m", "plm.cli.main", "pretrain", *common, "--out", str(tmp_path / "ddp")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
    ) as ddp:
        # The one process, here meanwhile.
        assert main(["pretrain", *common, "--grad-accum", "2", "--out", str(tmp_path / "single")]) == 0
        _, err = ddp.communicate(timeout=300)
    # the workers' own messages come first, torchrun's summary of them last
    assert ddp.returncode == 0, err[:4000] + "\n[...]\n" + err[-1500:]
    for key in ("loss", "loss_mlm", "loss_sop"):
        single_losses = [m[key] for m in metrics(tmp_path / "single")]
        assert [m[key] for m in metrics(tmp_path / "ddp")] == pytest.approx(single_losses, abs=1e-5)


@pytest.fixture
def a_tenth_of_the_embedded_corpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every tenth training document of the embedded corpus (and all its validation ones) for plm pretrain: each
    family's tokenizer of 8,192 tokens trains on it in about a second, not in 4 to 15 (tests/cli/test_nothing_lost.py
    trains plm demo's on all of it)."""
    whole = default_corpus()
    monkeypatch.setattr(pretrain, "default_corpus", lambda: Corpus(whole.train[::10], whole.validation))


@pytest.mark.parametrize("family", ["bert", "albert", "deberta"])
def test_a_family_name_alone_pretrains_on_the_embedded_corpus(family, tmp_path, capsys, a_tenth_of_the_embedded_corpus):
    out = tmp_path / family
    assert main(["pretrain", "--model", family, "--steps", "1", "--batch-size", "2", "--no-progress",
                 "--out", str(out)]) == 0
    assert "validation loss" in capsys.readouterr().out
    assert plm.load(out).family == family
