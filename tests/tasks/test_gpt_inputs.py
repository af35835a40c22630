"""GPT-1's task input transformations: learned start, delimiter and extract tokens (section 3.3)."""

from __future__ import annotations

import math

import pytest
import torch

from plm.errors import PLMError
from plm.models import from_preset
from plm.tasks import task_model
from plm.tasks.gpt_inputs import DELIMITER, EXTRACT, START, TaskInputs, add_task_tokens, pad_batch, task_tokens
from plm.tokenization.tokenizer import Tokenizer

TEXTS = ["the cat sat on the mat", "a dog ran in the park", "birds sing at dawn"] * 20


@pytest.fixture(scope="module")
def tokenizer_files(tmp_path_factory):
    directory = tmp_path_factory.mktemp("bpe")
    Tokenizer.train_bpe(TEXTS, vocab_size=300).save(directory)
    return directory


def test_new_rows_are_drawn_from_n_0_002_and_old_rows_stay(tokenizer_files):
    tokenizer = Tokenizer.load(tokenizer_files)
    torch.manual_seed(0)
    model = from_preset("gpt2-micro", vocab_size=len(tokenizer), dim=512, heads=8, layers=1).eval()
    old_rows = model.token_embedding.weight.detach().clone()
    tokens = torch.tensor([tokenizer.encode("the cat sat")])
    with torch.no_grad():
        before = model(tokens).logits
    ids = add_task_tokens(model, tokenizer)

    assert [ids.start, ids.delimiter, ids.extract] == [len(old_rows), len(old_rows) + 1, len(old_rows) + 2]
    weight = model.token_embedding.weight.detach()
    assert weight.shape == (len(old_rows) + 3, 512) and model.config.vocab_size == len(old_rows) + 3
    assert torch.equal(weight[: len(old_rows)], old_rows)
    new = weight[len(old_rows) :].flatten()  # 1,536 draws
    # The sample standard deviation of n normal draws has relative error about 1 / sqrt(2n) (2%); allow 4 of those.
    assert abs(new.std().item() / 0.02 - 1) < 4 / math.sqrt(2 * new.numel())
    assert abs(new.mean().item()) < 4 * 0.02 / math.sqrt(new.numel())
    with torch.no_grad():
        after = model(tokens).logits  # the tied output layer grew with the embeddings
    assert after.shape[-1] == len(old_rows) + 3
    torch.testing.assert_close(after[..., : len(old_rows)], before)


def test_adding_the_tokens_again_changes_nothing_and_they_survive_saving(tokenizer_files, tmp_path):
    tokenizer = Tokenizer.load(tokenizer_files)
    model = task_model(from_preset("gpt2-micro", vocab_size=len(tokenizer)), "classify")
    first = add_task_tokens(model, tokenizer)
    rows = model.word_embeddings().num_embeddings
    assert rows == len(tokenizer) == model.config.vocab_size  # the task model's config follows its backbone
    assert add_task_tokens(model, tokenizer) == first and model.word_embeddings().num_embeddings == rows
    tokenizer.save(tmp_path)
    assert task_tokens(Tokenizer.load(tmp_path)) == first


def test_each_input_form_is_written_as_the_paper_shows(tokenizer_files):
    tokenizer = Tokenizer.load(tokenizer_files)
    add_task_tokens(from_preset("gpt2-micro", vocab_size=len(tokenizer)), tokenizer)
    inputs = TaskInputs(tokenizer, max_length=64)
    decode = tokenizer.decode
    assert decode(inputs.classification("the cat")) == f"{START}the cat{EXTRACT}"
    assert decode(inputs.entailment("the cat sat", " a dog ran")) == f"{START}the cat sat{DELIMITER} a dog ran{EXTRACT}"
    assert [decode(ids) for ids in inputs.similarity("the cat", "a dog")] == [
        f"{START}the cat{DELIMITER}a dog{EXTRACT}",
        f"{START}a dog{DELIMITER}the cat{EXTRACT}",
    ]
    assert [decode(ids) for ids in inputs.choice("birds sing", ["at dawn", "in the park"], question=" when?")] == [
        f"{START}birds sing when?{DELIMITER}at dawn{EXTRACT}",
        f"{START}birds sing when?{DELIMITER}in the park{EXTRACT}",
    ]


def test_a_long_premise_is_cut_and_the_hypothesis_kept(tokenizer_files):
    tokenizer = Tokenizer.load(tokenizer_files)
    add_task_tokens(from_preset("gpt2-micro", vocab_size=len(tokenizer)), tokenizer)
    premise, hypothesis = " ".join(TEXTS[:3]), "a dog"
    ids = TaskInputs(tokenizer, max_length=12).entailment(premise, hypothesis)
    hypothesis_ids = tokenizer.encode(hypothesis)
    assert len(ids) == 12
    assert ids[-2 - len(hypothesis_ids) : -1] == [task_tokens(tokenizer).delimiter, *hypothesis_ids]
    assert ids[1:-2 - len(hypothesis_ids)] == tokenizer.encode(premise)[: 12 - 3 - len(hypothesis_ids)]


def test_pad_batch_stacks_the_sequences_of_each_example():
    batch = pad_batch([[[1, 2], [3]], [[4], [5, 6, 7]]], pad_id=0)
    assert batch["input_ids"].tolist() == [[[1, 2, 0], [3, 0, 0]], [[4, 0, 0], [5, 6, 7]]]
    assert batch["attention_mask"].tolist() == [[[1, 1, 0], [1, 0, 0]], [[1, 0, 0], [1, 1, 1]]]
    with pytest.raises(PLMError, match="different numbers"):
        pad_batch([[[1], [2]], [[3]]], pad_id=0)
