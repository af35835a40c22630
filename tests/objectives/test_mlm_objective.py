"""The masked-LM objective: stateless batches, summed losses, and a loss that falls."""

import pytest
import torch
from torch import nn

from plm.data.corpus import Document
from plm.errors import PLMError
from plm.models.pretraining_heads import PretrainingOutput
from plm.objectives import MaskedLMObjective
from plm.objectives.masking import IGNORE_INDEX
from plm.tokenization.tokenizer import Tokenizer
from tests.conftest import synthetic_text

PARAGRAPHS = [p for p in synthetic_text(300).split("\n\n") if p.strip()]
TRAIN = [Document(f"train{i}", text) for i, text in enumerate(PARAGRAPHS[:260])]
VALIDATION = [Document(f"validation{i}", text) for i, text in enumerate(PARAGRAPHS[260:])]


class TinyEncoder(nn.Module):
    """Embeddings, one convolution that sees both neighbours, an MLM head and a pair head.

    With ``restrict_to_masked`` it honours ``masked_positions`` as plm's encoders do.
    """

    def __init__(self, vocab_size: int, dim: int = 32, restrict_to_masked: bool = True) -> None:
        super().__init__()
        self.embed, self.segment = nn.Embedding(vocab_size, dim), nn.Embedding(2, dim)
        self.mix = nn.Conv1d(dim, dim, kernel_size=5, padding=2)
        self.mlm, self.pair = nn.Linear(dim, vocab_size), nn.Linear(dim, 2)
        self.restrict_to_masked = restrict_to_masked

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, masked_positions=None):
        hidden = self.embed(input_ids)
        if token_type_ids is not None:
            hidden = hidden + self.segment(token_type_ids)
        hidden = hidden * attention_mask[..., None]
        hidden = hidden + torch.tanh(self.mix(hidden.transpose(1, 2)).transpose(1, 2))  # (B, T, dim)
        logits = self.mlm(hidden[masked_positions] if self.restrict_to_masked else hidden)
        return PretrainingOutput(last_hidden_state=hidden, logits=logits, pair_logits=self.pair(hidden[:, 0]))


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.train_wordpiece(PARAGRAPHS, vocab_size=200)


def objective(tokenizer, **options) -> MaskedLMObjective:
    return MaskedLMObjective(TRAIN, VALIDATION, tokenizer, **{"max_length": 48, "batch_size": 8, **options})


def equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("pair_task", ["none", "nsp", "sop"])
def test_a_batch_is_masked_examples_with_labels_at_the_targets(tokenizer, pair_task):
    mlm = objective(tokenizer, pair_task=pair_task)
    batch = mlm.batch(step=0, index=0)
    keys = {"input_ids", "token_type_ids", "attention_mask", "labels"}
    assert set(batch) == keys | ({"pair_labels"} if pair_task != "none" else set())
    assert batch["input_ids"].shape == batch["labels"].shape == batch["attention_mask"].shape
    assert batch["input_ids"].shape[0] == 8 and batch["input_ids"].shape[1] <= 48
    targets = batch["labels"] != IGNORE_INDEX
    assert targets.any(1).all() and (batch["attention_mask"][targets] == 1).all()
    assert (batch["input_ids"][targets] == tokenizer.mask_id).float().mean() > 0.5
    counts = mlm.target_counts(batch)
    assert counts["mlm"] == int(targets.sum())
    assert mlm.size(batch) == int(batch["attention_mask"].sum())
    if pair_task != "none":
        assert counts[pair_task] == 8 and set(batch["pair_labels"].tolist()) <= {0, 1}


def test_batches_are_a_function_of_seed_step_and_index(tokenizer):
    """A resumed run, and each process of a distributed one, draws the same batch for (step, index)."""
    first, again = objective(tokenizer, pair_task="sop", seed=3), objective(tokenizer, pair_task="sop", seed=3)
    assert equal(first.batch(5, 1), first.batch(5, 1))
    assert equal(first.batch(5, 1), again.batch(5, 1))
    assert not equal(first.batch(5, 1), first.batch(5, 0))
    assert not equal(first.batch(5, 1), first.batch(6, 1))
    assert not equal(first.batch(5, 1), objective(tokenizer, pair_task="sop", seed=4).batch(5, 1))
    assert all(equal(a, b) for a, b in zip(first.validation_batches(), again.validation_batches(), strict=True))


def test_validation_is_the_first_examples_with_fixed_masks(tokenizer):
    mlm = objective(tokenizer, validation_batches_max=2)
    batches = list(mlm.validation_batches())
    assert len(batches) == 2 and all(len(b["input_ids"]) == 8 for b in batches)
    assert all(equal(a, b) for a, b in zip(batches, mlm.validation_batches()))
    whole = objective(tokenizer, validation_batches_max=None)
    every = list(whole.validation_batches())
    assert sum(len(b["input_ids"]) for b in every) == len(whole.validation_examples) > 16
    assert whole.validation_examples[:16] == mlm.validation_examples


def test_the_loss_is_the_same_with_or_without_masked_positions(tokenizer):
    mlm = objective(tokenizer, pair_task="nsp")
    torch.manual_seed(0)
    restricted = TinyEncoder(tokenizer.vocab_size)
    everywhere = TinyEncoder(tokenizer.vocab_size, restrict_to_masked=False)
    everywhere.load_state_dict(restricted.state_dict())
    batch = mlm.batch(0, 0)
    ours, theirs = mlm.loss(restricted, batch), mlm.loss(everywhere, batch)
    assert ours.keys() == theirs.keys() == {"mlm", "nsp"}
    for term in ours:
        torch.testing.assert_close(ours[term], theirs[term])
    logits = everywhere(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits
    expected = nn.functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), reduction="sum")
    torch.testing.assert_close(ours["mlm"], expected)


@pytest.mark.parametrize("options", [{"pair_task": "sop", "whole_word": True, "max_ngram": 3}, {"pair_task": "nsp"}])
def test_a_tiny_encoder_learns(tokenizer, options):
    mlm = objective(tokenizer, batch_size=16, **options)
    torch.manual_seed(0)
    model = TinyEncoder(tokenizer.vocab_size)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

    def validation_loss() -> float:
        with torch.no_grad():
            sums = [mlm.loss(model, batch)["mlm"].item() for batch in mlm.validation_batches()]
            return sum(sums) / sum(mlm.target_counts(batch)["mlm"] for batch in mlm.validation_batches())

    before = validation_loss()
    for step in range(25):
        batch = mlm.batch(step, 0)
        losses, counts = mlm.loss(model, batch), mlm.target_counts(batch)
        loss = sum(losses[term] / counts[term] for term in losses)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert validation_loss() < 0.6 * before


def test_bad_settings_are_refused_with_a_reason(tokenizer):
    with pytest.raises(PLMError, match="unknown pair task 'mlm'"):
        objective(tokenizer, pair_task="mlm")
    with pytest.raises(PLMError, match="has no mask token"):
        objective(Tokenizer.train_bpe(PARAGRAPHS, vocab_size=300))
    with pytest.raises(PLMError, match="validation text: next sentence prediction needs at least 2 documents"):
        MaskedLMObjective(TRAIN, VALIDATION[:1], tokenizer, pair_task="nsp")
    with pytest.raises(PLMError, match="masking probability must be in"):
        objective(tokenizer, mlm_probability=0.0)


@pytest.mark.parametrize("pair_task", ["none", "nsp", "sop"])
def test_validation_reports_each_head_s_accuracy(tokenizer, pair_task):
    """Counted here from the full (B, T, V) logits at every position, then read at the masked ones."""
    torch.manual_seed(0)
    mlm = objective(tokenizer, pair_task=pair_task, validation_batches_max=3)
    model = TinyEncoder(tokenizer.vocab_size, restrict_to_masked=False).eval()
    with torch.no_grad():  # a head that gets some right: bias it toward each batch's most common label
        labels = torch.cat([b["labels"][b["labels"] != IGNORE_INDEX] for b in mlm.validation_batches()])
        model.mlm.bias[labels.mode().values] += 5.0
    right_words = words = right_pairs = pairs = 0
    with torch.no_grad():
        for batch in mlm.validation_batches():
            segments = batch["token_type_ids"] if pair_task != "none" else None
            output = model(batch["input_ids"], batch["attention_mask"], segments)
            targets = batch["labels"] != IGNORE_INDEX
            right_words += int((output.logits.argmax(-1)[targets] == batch["labels"][targets]).sum())
            words += int(targets.sum())
            if pair_task != "none":
                right_pairs += int((output.pair_logits.argmax(-1) == batch["pair_labels"]).sum())
                pairs += len(batch["pair_labels"])
    metrics = mlm.validation_metrics(model)
    assert 0 < right_words < words
    expected = {"accuracy_mlm": right_words / words} | ({f"accuracy_{pair_task}": right_pairs / pairs} if pairs else {})
    assert metrics == pytest.approx(expected)


def test_validation_masks_80_10_10_whatever_the_training_ratios(tokenizer):
    """Runs with other ratios (BERT Appendix C.2) are scored on the same corruption: BERT's 80/10/10."""
    mlm = MaskedLMObjective(TRAIN, TRAIN, tokenizer, max_length=48, batch_size=8, mask_ratios=(1.0, 0.0, 0.0),
                            validation_batches_max=None)  # the training text as validation too: more targets
    train = mlm.batch(step=0, index=0)
    assert (train["input_ids"][train["labels"] != IGNORE_INDEX] == tokenizer.mask_id).all()
    shown, originals = [], []
    for batch in mlm.validation_batches():
        targets = batch["labels"] != IGNORE_INDEX
        shown.append(batch["input_ids"][targets])
        originals.append(batch["labels"][targets])
    shown, originals = torch.cat(shown), torch.cat(originals)
    n = len(shown)
    assert n > 600
    to_mask = (shown == tokenizer.mask_id).float().mean().item()
    kept = (shown == originals).float().mean().item()
    for share, expected in ((to_mask, 0.8), (kept, 0.1), (1 - to_mask - kept, 0.1)):
        assert share == pytest.approx(expected, abs=5 * (expected * (1 - expected) / n) ** 0.5)  # 5 binomial sd
