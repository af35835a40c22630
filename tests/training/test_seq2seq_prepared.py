"""The encoder-decoders train from prepared sentence pairs (plm seq2seq train --data), and a run of them resumes
bit for bit."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from plm.cli.main import main
from plm.data.prepare import PrepareOptions, prepare_pairs
from plm.data.prepared import PreparedPairSplit
from plm.data.sentence_pairs import ParallelText, Seq2SeqTokenizers
from plm.errors import PLMError
from plm.training.pretrain import PretrainSetup, prepare
from plm.training.train_seq2seq import Seq2SeqSetup, prepare_seq2seq, train_seq2seq
from plm.training.trainer import TrainingConfig
from tests.conftest import DATE_PAIRS
from tests.training.test_resume import IN_PROCESS, interrupted_then_resumable, logged_losses


@pytest.fixture(scope="module")
def prepared(date_pair_files: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The dates pairs of ``date_pair_files``, prepared with tokenizers trained on them."""
    directory = tmp_path_factory.mktemp("prepared-pairs")
    tokenizers = Seq2SeqTokenizers.train(DATE_PAIRS, vocab_size=300)
    text = ParallelText(source=date_pair_files / "src.txt", target=date_pair_files / "tgt.txt")
    return prepare_pairs(text, tokenizers, directory / "dates", options=PrepareOptions(progress=False)).path


def setup_of(model: str, data: Path, **fields) -> Seq2SeqSetup:
    return Seq2SeqSetup(model=model, data=str(data), max_tokens=256, metric_examples=2, **fields)


@pytest.mark.parametrize("model", ["transformer-micro", "rnn-luong"])
def test_an_encoder_decoder_trains_from_prepared_pairs_and_resumes_bit_exactly(model, prepared, tmp_path):
    config = TrainingConfig(**IN_PROCESS)
    _, tokenizers, _ = train_seq2seq(setup_of(model, prepared), config, tmp_path / "straight")
    assert tokenizers.source.backend.to_str() == Seq2SeqTokenizers.load(prepared / "tokenizer").source.backend.to_str()
    resumed = interrupted_then_resumable(setup_of(model, prepared), config, tmp_path / "halves", build=prepare_seq2seq)
    assert isinstance(resumed.objective.train_data, PreparedPairSplit)  # mapped, not read into lists
    resumed.train(resume=True)
    expected = logged_losses(tmp_path / "straight")
    assert [line["step"] for line in expected] == list(range(1, 9))
    assert {"loss_label_smoothed", "loss_nll"} <= set(expected[-1]) and "val_bleu" in expected[3]
    assert logged_losses(tmp_path / "halves") == expected


def test_epochs_count_the_batches_of_the_prepared_pairs(prepared, tmp_path):
    config = TrainingConfig(epochs=3, device="cpu", progress=False)
    trainer, _ = prepare_seq2seq(setup_of("rnn-luong", prepared), config, tmp_path / "run")
    batches = trainer.objective.sampler.batches
    assert sorted(np.concatenate(list(batches)).tolist()) == list(range(len(trainer.objective.train_data)))
    assert trainer.config.steps == math.ceil(3 * len(batches))


def test_prepared_pairs_are_refused_with_files_other_tokenizers_or_as_documents(prepared, date_pair_files, tmp_path):
    config = TrainingConfig(steps=1, device="cpu", progress=False)
    with pytest.raises(PLMError, match="`data` is a prepared corpus of pairs, `source`/`target` and `tsv` files"):
        prepare_seq2seq(setup_of("rnn-luong", prepared, source=str(date_pair_files / "src.txt"),
                                 target=str(date_pair_files / "tgt.txt")), config, tmp_path / "a")
    Seq2SeqTokenizers.train(DATE_PAIRS, vocab_size=280).save(tmp_path / "other")
    with pytest.raises(PLMError, match="prepared with other tokenizers"):
        prepare_seq2seq(setup_of("rnn-luong", prepared, tokenizer=str(tmp_path / "other")), config, tmp_path / "b")
    with pytest.raises(PLMError, match="prepared with its sources in order"):
        prepare_seq2seq(setup_of("rnn-luong", prepared, reverse_source=True), config, tmp_path / "c")
    with pytest.raises(PLMError, match="a corpus of sentence pairs, for sequence to sequence; this reads one of "
                                       "documents"):
        prepare(PretrainSetup(model="gpt2-micro", data=str(prepared)), config, tmp_path / "d")
    assert not any((tmp_path / name).exists() for name in "abcd")


def test_plm_data_prepare_then_seq2seq_train_data_on_the_command_line(date_pair_files, tmp_path, capsys):
    Seq2SeqTokenizers.train(DATE_PAIRS, vocab_size=300).save(tmp_path / "tok")
    files = ["--src", str(date_pair_files / "src.txt"), "--tgt", str(date_pair_files / "tgt.txt")]
    assert main(["data", "prepare", *files, "--tokenizer", str(tmp_path / "tok"), "--out", str(tmp_path / "data"),
                 "--no-progress"]) == 0
    assert main(["seq2seq", "train", "--model", "transformer-micro", "--data", str(tmp_path / "data"),
                 "--max-tokens", "256", "--steps", "2", "--metric-examples", "2", "--no-progress", "--device", "cpu",
                 "--out", str(tmp_path / "run")]) == 0
    assert f"saved to {tmp_path / 'run'}/checkpoint" in capsys.readouterr().out
    saved = (tmp_path / "run" / "checkpoint" / "tokenizer.json").read_text(encoding="utf-8")
    assert saved == (tmp_path / "data" / "tokenizer" / "tokenizer.json").read_text(encoding="utf-8")  # the data's
    assert main(["pretrain", "--model", "gpt2-micro", "--data", str(tmp_path / "data"), "--steps", "1",
                 "--no-progress", "--out", str(tmp_path / "gpt")]) == 2
    assert "a corpus of sentence pairs" in capsys.readouterr().err
