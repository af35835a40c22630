"""BERT's two phases: the short sequences' batches before the switch step, the long ones' from it on."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from plm.data.corpus import read_corpus
from plm.data.prepare import PrepareOptions, cached_corpus
from plm.objectives import ObjectiveData, PhasedObjective, objective_spec, phased_objective
from plm.tokenization.tokenizer import TOKENIZER_TRAINERS

SHORT, LONG, SWITCH = 16, 48, 3


def run_data(text_file: Path, kind: str) -> ObjectiveData:
    corpus = read_corpus([text_file])
    tokenizer = TOKENIZER_TRAINERS[kind]((document.text for document in corpus.train), vocab_size=300)
    prepared = cached_corpus([text_file], tokenizer, options=PrepareOptions(progress=False))
    return ObjectiveData(prepared=prepared, tokenizer=tokenizer, block_size=LONG, batch_size=4, seed=0,
                         validation_blocks=8)


def test_the_batch_of_step_switch_minus_1_is_short_and_of_step_switch_long(text_file: Path) -> None:
    objective = phased_objective(objective_spec("clm"), run_data(text_file, "bpe"), SHORT, SWITCH)
    lengths = [objective.batch(step, 0)["tokens"].shape[1] - 1 for step in range(SWITCH + 2)]  # inputs, not targets
    assert lengths == [SHORT] * SWITCH + [LONG] * 2
    assert objective.batch(SWITCH - 1, 1)["tokens"].shape == (4, SHORT + 1)  # every micro-batch of the step


def test_a_run_resumed_after_the_switch_goes_on_with_the_long_sequences(text_file: Path) -> None:
    data = run_data(text_file, "bpe")
    spec = objective_spec("clm")
    started = phased_objective(spec, data, SHORT, SWITCH)
    resumed = phased_objective(spec, data, SHORT, SWITCH)  # built anew, as a resumed run builds it
    long_only = spec.build(data)
    for step in (SWITCH, SWITCH + 7):  # the batch depends on the step alone
        assert torch.equal(resumed.batch(step, 1)["tokens"], started.batch(step, 1)["tokens"])
        assert torch.equal(resumed.batch(step, 1)["tokens"], long_only.batch(step, 1)["tokens"])


def test_validation_sizes_losses_and_hooks_are_the_second_objective_s(text_file: Path) -> None:
    objective = phased_objective(objective_spec("mlm+nsp"), run_data(text_file, "wordpiece"), SHORT, SWITCH)
    assert isinstance(objective, PhasedObjective)
    second = objective.second
    for ours, theirs in zip(objective.validation_batches(), second.validation_batches(), strict=True):
        assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert objective.train_tokens == second.train_tokens
    short = objective.batch(0, 0)
    assert short["input_ids"].shape[1] <= SHORT < objective.batch(SWITCH, 0)["input_ids"].shape[1]
    assert objective.size(short) == objective.first.size(short)
    assert objective.target_counts(short) == objective.first.target_counts(short)
    # The optional hooks the trainer reads with getattr: the second's, or none where it has none.
    assert objective.validation_metrics.__self__ is second
    assert getattr(objective, "batches_per_epoch", None) is None
    with pytest.raises(AttributeError):
        objective.no_such_hook  # noqa: B018
