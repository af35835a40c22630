"""Every objective trains from a prepared corpus (plm data prepare), and a run of it resumes bit for bit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plm.cli.main import main
from plm.data.prepare import PrepareOptions, prepare_corpus
from plm.data.prepared import PreparedCorpus, tokenizer_fingerprint
from plm.errors import PLMError
from plm.tokenization.tokenizer import TOKENIZER_TRAINERS
from plm.training.pretrain import PretrainSetup, prepare, pretrain
from plm.training.trainer import TrainingConfig
from tests.conftest import synthetic_text
from tests.training.test_resume import IN_PROCESS, interrupted_then_resumable, logged_losses

FAMILIES = {  # preset: its tokenizer's kind, and the objective its recipe trains
    "gpt2-micro": ("bpe", "clm"),
    "bert-micro": ("wordpiece", "mlm+nsp"),
    "albert-micro": ("unigram", "mlm+sop"),
    "deberta-micro": ("wordpiece", "mlm"),
    "elmo-micro": ("words", "bilm"),
}


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A prepared corpus for each kind of tokenizer, of the same text."""
    directory = tmp_path_factory.mktemp("prepared")
    text = directory / "train.jsonl"
    paragraphs = [p for p in synthetic_text(300).split("\n\n") if p.strip()]
    text.write_text("".join(json.dumps({"text": p}) + "\n" for p in paragraphs), encoding="utf-8")
    prepared = {}
    for kind in ("bpe", "wordpiece", "unigram", "words"):
        tokenizer = TOKENIZER_TRAINERS[kind](paragraphs, vocab_size=300)
        options = PrepareOptions(progress=False)
        prepared[kind] = prepare_corpus([text], tokenizer, directory / kind, options=options).path
    return prepared


def setup_of(model: str, data: Path) -> PretrainSetup:
    return PretrainSetup(model=model, data=str(data), block_size=32, batch_size=4, validation_blocks=8)


@pytest.mark.parametrize("model", list(FAMILIES))
def test_each_objective_trains_from_a_prepared_corpus_and_resumes_bit_exactly(model, corpora, tmp_path):
    kind, objective = FAMILIES[model]
    config = TrainingConfig(**IN_PROCESS)
    straight = tmp_path / "straight"
    _, tokenizer, _ = pretrain(setup_of(model, corpora[kind]), config, straight)
    assert tokenizer_fingerprint(tokenizer) == PreparedCorpus.open(corpora[kind]).manifest["tokenizer"]
    interrupted_then_resumable(setup_of(model, corpora[kind]), config, tmp_path / "halves").train(resume=True)
    expected = logged_losses(straight)
    assert [line["step"] for line in expected] == list(range(1, 9))
    assert logged_losses(tmp_path / "halves") == expected
    terms = {"clm": {"loss"}, "mlm+nsp": {"loss_mlm", "loss_nsp"}, "mlm+sop": {"loss_mlm", "loss_sop"},
             "mlm": {"loss"}, "bilm": {"loss_forward", "loss_backward"}}[objective]
    assert terms <= set(expected[-1])


def test_epochs_count_the_prepared_corpus_tokens(corpora, tmp_path):
    trainer, _ = prepare(setup_of("gpt2-micro", corpora["bpe"]), TrainingConfig(epochs=2, device="cpu",
                                                                                  progress=False), tmp_path / "run")
    tokens = trainer.objective.train_tokens
    assert tokens == len(trainer.objective.sampler.ids) > 0
    assert trainer.config.steps == -(-2 * tokens // (4 * 32))


def test_a_prepared_corpus_is_refused_with_text_files_another_tokenizer_or_the_bilm(corpora, text_file, tmp_path):
    config = TrainingConfig(steps=1, device="cpu", progress=False)
    with pytest.raises(PLMError, match="give one of them"):
        prepare(PretrainSetup(model="gpt2-micro", data=str(corpora["bpe"]), train_files=(str(text_file),)), config,
                tmp_path / "a")
    with pytest.raises(PLMError, match="prepared with another tokenizer"):
        prepare(PretrainSetup(model="gpt2-micro", data=str(corpora["bpe"]),
                              tokenizer=str(corpora["wordpiece"] / "tokenizer")), config, tmp_path / "b")
    with pytest.raises(PLMError, match="the biLM predicts words.*prepared with a subword tokenizer"):
        prepare(PretrainSetup(model="elmo-micro", data=str(corpora["bpe"])), config, tmp_path / "c")


def test_plm_data_prepare_then_pretrain_data_on_the_command_line(corpora, tmp_path, capsys):
    text = tmp_path / "train.txt"
    text.write_text(synthetic_text(100), encoding="utf-8")
    tokenizer = corpora["wordpiece"] / "tokenizer"
    prepare_args = ["data", "prepare", str(text), "--tokenizer", str(tokenizer), "--out", str(tmp_path / "data"),
                    "--no-progress"]
    assert main(prepare_args) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("train: ") and "validation: " in printed and f"prepared {tmp_path / 'data'}" in printed
    assert main(["pretrain", "--model", "bert-micro", "--data", str(tmp_path / "data"), "--steps", "2",
                 "--block-size", "32", "--batch-size", "4", "--no-progress", "--device", "cpu",
                 "--out", str(tmp_path / "run")]) == 0
    assert (tmp_path / "run" / "checkpoint").is_dir()
    assert main([*prepare_args[:-3], "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    assert "holds other files; choose another directory, or overwrite it" in capsys.readouterr().err


def test_a_run_of_a_prepared_corpus_resumes_with_only_out_and_refuses_one_prepared_again(corpora, tmp_path, capsys):
    """run.json keeps --data by its absolute path and the SHA-256 of its manifest."""
    import shutil

    data = tmp_path / "data"
    shutil.copytree(corpora["bpe"], data)
    run = ["--no-progress", "--device", "cpu", "--block-size", "32", "--batch-size", "4",
           "--out", str(tmp_path / "run")]
    assert main(["pretrain", "--model", "gpt2-micro", "--data", str(data), "--steps", "2", *run]) == 0
    assert main(["pretrain", "--resume", "--steps", "3", *run]) == 0
    assert json.loads((tmp_path / "run" / "run.json").read_text())["flags"]["data"] == str(data.resolve())
    manifest = json.loads((data / "manifest.json").read_text())
    (data / "manifest.json").write_text(json.dumps({**manifest, "text_field": "body"}))
    capsys.readouterr()
    assert main(["pretrain", "--resume", "--steps", "4", *run]) == 2
    assert "manifest.json: the file changed since the run started" in capsys.readouterr().err
