"""The seq2seq objective: label smoothing against torch, teacher-forced batches, metrics.

Also checkpoint averaging and the dates task.
"""

from __future__ import annotations

import datetime
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from plm.data.dates import date_pairs, is_held_out, ordinal_words, styles, year_words
from plm.data.sentence_pairs import EncodedPairs, SentencePair, Seq2SeqTokenizers
from plm.decoding import GenerationConfig
from plm.errors import PLMError
from plm.models import RNNConfig, RNNSeq2Seq
from plm.objectives.teacher_forcing import Seq2SeqObjective, cross_entropies
from plm.storage.checkpoint import save_model
from plm.training.averaging import average_checkpoints
from plm.training.trainer import Trainer, TrainingConfig


def test_the_losses_are_torchs_cross_entropy_with_and_without_label_smoothing_ignoring_pads() -> None:
    torch.manual_seed(0)
    logits, labels = torch.randn(12, 9) * 3, torch.randint(1, 9, (12,))
    labels[[2, 5, 11]] = 0  # padding
    plain = F.cross_entropy(logits, labels, ignore_index=0, reduction="sum")
    for epsilon in (0.0, 0.1, 0.3):
        nll, smoothed = cross_entropies(logits, labels, epsilon, ignore_index=0)
        torch.testing.assert_close(nll, plain)
        expected = F.cross_entropy(logits, labels, ignore_index=0, label_smoothing=epsilon, reduction="sum")
        torch.testing.assert_close(smoothed, expected)


def objective_of(train: list[SentencePair], held_out: list[SentencePair], tokenizers: Seq2SeqTokenizers,
                 **options) -> Seq2SeqObjective:
    """The objective of pairs in memory, every held-out pair's text kept for the metrics."""
    return Seq2SeqObjective(EncodedPairs.of(train, tokenizers), EncodedPairs.of(held_out, tokenizers), tokenizers,
                            held_out, **options)


def tiny_objective(**options) -> tuple[Seq2SeqObjective, RNNSeq2Seq]:
    train, held_out = date_pairs(200, seed=0), date_pairs(8, seed=1, held_out=True)
    tokenizers = Seq2SeqTokenizers.train(train, vocab_size=300)
    decoding = GenerationConfig(max_len_a=1.5, max_new_tokens=12)
    options = {"max_tokens": 256, "seed": 0, "metric_examples": 8, "decoding": decoding} | options
    objective = objective_of(train, held_out, tokenizers, **options)
    torch.manual_seed(0)
    size = len(tokenizers.source)
    model = RNNSeq2Seq(RNNConfig(vocab_size=size, embedding_dim=8, hidden_dim=16, layers=1,
                                 attention="bahdanau", input_feeding=False))
    return objective, model.eval()


def test_a_batch_is_teacher_forced_and_its_losses_count_real_targets_only() -> None:
    objective, model = tiny_objective(label_smoothing=0.1)
    batch = objective.batch(step=3, index=0)
    assert all(torch.equal(batch[k], objective.batch(3, 0)[k]) for k in batch)  # the same step draws the same pairs
    pad = objective.target_pad
    assert torch.equal(batch["decoder_input_ids"][:, 1:], batch["labels"][:, :-1])  # shifted by one
    assert torch.all(batch["decoder_input_ids"][:, 0] == objective.tokenizers.target.bos_id)
    # the oracle: a loop over sentences, each scored alone without padding
    smoothed, nll = 0.0, 0.0
    for row in range(len(batch["labels"])):
        length = int(batch["source_mask"][row].sum())
        targets = batch["labels"][row][batch["labels"][row] != pad]
        alone = model(batch["source_ids"][row : row + 1, :length],
                      batch["decoder_input_ids"][row : row + 1, : len(targets)]).logits[0]
        smoothed += F.cross_entropy(alone, targets, label_smoothing=0.1, reduction="sum")
        nll += F.cross_entropy(alone, targets, reduction="sum")
    losses = objective.loss(model, batch)
    torch.testing.assert_close(losses["label_smoothed"], smoothed, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(losses["nll"], nll, rtol=1e-4, atol=1e-4)
    targets = int((batch["labels"] != pad).sum())
    assert objective.target_counts(batch) == {"nll": targets, "label_smoothed": targets}


def test_training_follows_the_smoothed_loss_and_validation_perplexity_is_the_likelihoods(tmp_path: Path) -> None:
    objective, model = tiny_objective(label_smoothing=0.1, metric_examples=0)
    trainer = Trainer(model, objective, TrainingConfig(steps=1, progress=False, device="cpu", precision="fp32"),
                      tmp_path)
    losses, _ = trainer.optimizer_step(model)
    assert losses["loss"] == losses["loss_label_smoothed"] != losses["loss_nll"]  # the likelihood is logged only
    # the oracle: torch's plain cross entropy over every validation target
    nll, smoothed, targets = 0.0, 0.0, 0
    with torch.no_grad():
        for batch in objective.validation_batches():
            logits = model.eval()(batch["source_ids"], batch["decoder_input_ids"], batch["source_mask"]).logits
            logits, labels = logits.flatten(0, 1), batch["labels"].flatten()
            pad = objective.target_pad
            nll += F.cross_entropy(logits, labels, ignore_index=pad, reduction="sum").item()
            smoothed += F.cross_entropy(logits, labels, ignore_index=pad, label_smoothing=0.1, reduction="sum").item()
            targets += int((labels != pad).sum())
    metrics = trainer.evaluate()
    assert metrics["val_perplexity"] == pytest.approx(math.exp(nll / targets), rel=1e-4)
    assert metrics["val_loss"] == pytest.approx(smoothed / targets, rel=1e-4)
    assert metrics["val_loss_nll"] == pytest.approx(nll / targets, rel=1e-4)


def test_validation_metrics_score_greedy_translations_of_held_out_pairs() -> None:
    objective, model = tiny_objective(select_by="exact_match")
    metrics = objective.validation_metrics(model)
    assert set(metrics) == {"bleu", "chrf", "exact_match"}
    assert metrics["exact_match"] == 0.0  # an untrained model gets no date right
    assert objective.selection.metric == "val_exact_match"


def test_averaging_checkpoints_gives_the_mean_of_their_weights(tmp_path: Path) -> None:
    config = RNNConfig(vocab_size=11, embedding_dim=4, hidden_dim=6, layers=1, attention="dot",
                       input_feeding=False, bidirectional=False)
    states = []
    for seed in range(3):
        torch.manual_seed(seed)
        model = RNNSeq2Seq(config)
        save_model(model, tmp_path / f"step{seed}")
        states.append(model.state_dict())
    averaged = average_checkpoints([tmp_path / f"step{seed}" for seed in range(3)]).state_dict()
    for key, value in averaged.items():
        torch.testing.assert_close(value, (states[0][key] + states[1][key] + states[2][key]) / 3)


def test_dates_are_spelled_as_english_writes_them_and_held_out_days_never_train() -> None:
    assert [ordinal_words(n) for n in (1, 2, 3, 5, 9, 12, 20, 21, 23, 30, 31)] == [
        "first", "second", "third", "fifth", "ninth", "twelfth", "twentieth", "twenty-first", "twenty-third",
        "thirtieth", "thirty-first"]
    assert [year_words(y) for y in (1984, 2005, 2000, 1900, 1907, 2024)] == [
        "nineteen eighty-four", "two thousand and five", "two thousand", "nineteen hundred", "nineteen oh seven",
        "twenty twenty-four"]
    assert "Friday, 15 March 2024" in styles(datetime.date(2024, 3, 15))  # 15 March 2024 was a Friday
    train, held_out = date_pairs(2000, seed=0), date_pairs(200, seed=0, held_out=True)
    assert not {p.target for p in train} & {p.target for p in held_out}
    assert all(is_held_out(datetime.date.fromisoformat(p.target)) for p in held_out)


def test_pairs_longer_than_the_models_context_are_left_out_everywhere() -> None:
    train, held_out = date_pairs(200, seed=0), date_pairs(40, seed=1, held_out=True)
    tokenizers = Seq2SeqTokenizers.train(train, vocab_size=300)
    limit = 9  # cuts sources (7-39 tokens with </s>) and decoder inputs (7-10 tokens) alike
    objective = objective_of(train, held_out, tokenizers, metric_examples=40, max_positions=limit)

    def fits(pair) -> bool:  # the oracle: the source with </s>, and <s> + target, each within the limit
        source = tokenizers.source.encode_batch([pair.source])[0]
        target = tokenizers.target.encode_batch([pair.target])[0]
        return len(source) + 1 <= limit and len(target) + 1 <= limit

    kept_train, kept_held_out = [p for p in train if fits(p)], [p for p in held_out if fits(p)]
    assert 0 < len(kept_train) < len(train) and 0 < len(kept_held_out) < len(held_out)  # the limit bites
    assert objective.dropped == {
        "train": len(train) - len(kept_train), "validation": len(held_out) - len(kept_held_out)
    }
    assert len(objective.sampler.batches.order) == len(kept_train)  # each kept pair is in one batch, no other is
    assert len(objective.validation_groups.order) == len(kept_held_out)
    assert objective.metric_pairs == kept_held_out
    batch = objective.batch(step=0, index=0)
    assert batch["source_ids"].shape[1] <= limit and batch["decoder_input_ids"].shape[1] <= limit
    with pytest.raises(PLMError, match="no training pair fits the model's context of 2 tokens"):
        objective_of(train, held_out, tokenizers, max_positions=2)


def test_validation_metrics_translate_the_held_out_sources_and_score_them_against_their_targets(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import sacrebleu

    import plm.objectives.teacher_forcing

    objective, model = tiny_objective()
    pairs = objective.metric_pairs
    assert len(pairs) == 8
    # A stand-in translator that knows the right answer for every source and half of them exactly: what it is
    # given must be the sources, and what it returns is scored against the targets.
    answers = {pair.source: pair.target if i % 2 == 0 else pair.target + " extra" for i, pair in enumerate(pairs)}
    given = []

    def knows(model, tokenizers, sentences, config=None, **_):
        given.extend(sentences)
        return [answers.get(sentence, "") for sentence in sentences]

    monkeypatch.setattr(plm.objectives.teacher_forcing, "translate", knows)
    metrics = objective.validation_metrics(model)
    assert given == [pair.source for pair in pairs]
    hypotheses, references = [answers[p.source] for p in pairs], [[p.target for p in pairs]]
    assert metrics["exact_match"] == 0.5
    assert metrics["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, references).score)
    assert metrics["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hypotheses, references).score)
