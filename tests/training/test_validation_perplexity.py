"""One perplexity for one file: a run's final validation perplexity is ``plm eval perplexity`` on its validation file.

Both score every token of the file once, read as pre-training reads it: its documents (paragraphs separated by
blank lines), each followed by <|endoftext|>, after one start token, in windows of the block size that move by
half a window. The oracle below scores each token alone from the model's logits, with the context that
definition gives it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

import plm
from plm.cli.main import main
from plm.models import CausalLM
from plm.tokenization.tokenizer import Tokenizer
from plm.training.pretrain import PretrainSetup, prepare, pretrain
from plm.training.trainer import TrainingConfig
from tests.conftest import synthetic_text

CONTEXT = 64  # gpt2-micro's, which is also its default block size: windows of 64 tokens, moving by 32
ONE_FP32_RUN = {"steps": 3, "eval_every": 1, "log_every": 1, "save_every": 100, "progress": False,
                "device": "cpu", "precision": "fp32"}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Training text, and validation text of more than 64 blocks with blank lines, two of them in a row."""
    directory = tmp_path_factory.mktemp("text")
    train, validation = directory / "train.txt", directory / "valid.txt"
    train.write_text(synthetic_text(200, seed=1), encoding="utf-8")
    validation.write_text(synthetic_text(300, seed=2).replace("\n\n", "\n\n\n", 3), encoding="utf-8")
    return train, validation


def documents_stream(tokenizer: Tokenizer, path: Path) -> list[int]:
    """<|endoftext|>, then each paragraph's ids and <|endoftext|>: read here with str.split, not plm.data."""
    paragraphs = [p.strip() for p in path.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    eos = tokenizer.eos_id
    return [eos] + [token for paragraph in paragraphs for token in [*tokenizer.encode(paragraph), eos]]


def nll_by_hand(model: CausalLM, ids: list[int], window: int) -> float:
    """The summed NLL of tokens 1..N-1, each from the model's logits after its context: every token before it in the
    first window, else those from the start of the window (moving on by window // 2) that scores it.

    The tokens whose context starts at the same place are read in one forward pass; a causal model's logits at a
    position depend on the tokens up to it alone.
    """
    stride, by_begin = window // 2, {}
    for t in range(1, len(ids)):
        end = window if t < window else min(window + math.ceil((t + 1 - window) / stride) * stride, len(ids))
        by_begin.setdefault(max(0, end - window), []).append(t)
    total = 0.0
    model.eval()
    with torch.no_grad():
        for begin, scored in by_begin.items():
            logits = model(torch.tensor([ids[begin : scored[-1]]])).logits[0].double()  # the last context's end
            for t in scored:
                total -= logits[t - 1 - begin].log_softmax(-1)[ids[t]].item()
    return total


@pytest.fixture(scope="module")
def run(files: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, CausalLM, Tokenizer, dict]:
    train, validation = files
    out = tmp_path_factory.mktemp("run") / "gpt"
    setup = PretrainSetup(model="gpt2-micro", train_files=(str(train),), validation_files=(str(validation),),
                          vocab_size=300, batch_size=4)
    model, tokenizer, metrics = pretrain(setup, TrainingConfig(**ONE_FP32_RUN), out)
    return out, model.eval(), tokenizer, metrics


def test_the_final_validation_perplexity_scores_every_token_of_the_documents(run, files) -> None:
    out, model, tokenizer, metrics = run
    ids = documents_stream(tokenizer, files[1])
    assert len(ids) > 64 * CONTEXT  # more than the 64 blocks validation once stopped at
    nll = nll_by_hand(model, ids, CONTEXT)
    assert metrics["val_loss"] == pytest.approx(nll / (len(ids) - 1), rel=1e-5)
    assert metrics["val_perplexity"] == pytest.approx(math.exp(nll / (len(ids) - 1)), rel=1e-5)


def test_eval_perplexity_on_the_validation_file_is_the_runs_final_validation_perplexity(run, files, tmp_path,
                                                                                         capsys) -> None:
    out, model, tokenizer, metrics = run
    scored = tmp_path / "eval.json"
    assert main(["eval", "perplexity", "--model", str(out), str(files[1]), "--json", str(scored),
                 "--no-progress", "--device", "cpu"]) == 0  # its defaults: the context, which the run's blocks are
    result = json.loads(scored.read_text())
    assert (result["window"], result["stride"]) == (CONTEXT, CONTEXT // 2)
    assert result["perplexity"] == pytest.approx(metrics["val_perplexity"], rel=1e-5)
    assert result["tokens"] == len(documents_stream(tokenizer, files[1])) - 1
    assert plm.file_perplexity(model, tokenizer, str(files[1])).perplexity == pytest.approx(result["perplexity"])


def test_a_run_that_validates_on_a_sample_names_it_and_scores_the_whole_file_at_its_end(files, tmp_path) -> None:
    train, validation = files
    setup = PretrainSetup(model="gpt2-micro", train_files=(str(train),), validation_files=(str(validation),),
                          vocab_size=300, batch_size=4, validation_sample_tokens=200)
    _, tokenizer, final = pretrain(setup, TrainingConfig(**ONE_FP32_RUN), tmp_path / "sampled")
    lines = [json.loads(line) for line in (tmp_path / "sampled" / "metrics.jsonl").read_text().splitlines()]
    assert [sorted(k for k in line if k.startswith("val_")) for line in lines] == [
        ["val_loss_lm_sample", "val_loss_sample", "val_perplexity_sample"],
        ["val_loss_lm_sample", "val_loss_sample", "val_perplexity_sample"],
        ["val_loss", "val_loss_lm", "val_perplexity"],  # the last step: the whole file
    ]
    assert final["val_loss"] == lines[-1]["val_loss"]

    trainer, _ = prepare(setup, TrainingConfig(**ONE_FP32_RUN), tmp_path / "prepared")
    model = trainer.model.eval()
    ids = documents_stream(tokenizer, validation)
    # The windows that score the first 200 tokens begin their targets at 1, 64, 96, ..., 192: 6 windows, in whole
    # batches of 4 the first 8, which score tokens 1 .. 64 + 7 * 32 - 1.
    scored = CONTEXT + 7 * CONTEXT // 2 - 1
    sample = trainer.evaluate(sample=True)
    assert sample["val_loss_sample"] == pytest.approx(nll_by_hand(model, ids[: scored + 1], CONTEXT) / scored,
                                                      rel=1e-5)
    assert trainer.evaluate()["val_loss"] == pytest.approx(nll_by_hand(model, ids, CONTEXT) / (len(ids) - 1),
                                                           rel=1e-5)
