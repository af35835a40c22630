"""A padded batch is computed on its real tokens alone, with the results of each sentence run by itself.

The encoders pack the real tokens of a padded batch into rows of their own
(:class:`plm.core.Packing`) and unpack them only for attention. The oracle is brute
force: every sentence run alone, without padding (where nothing is packed), must give
the same hidden states, logits and gradients at its real positions; padding positions
hold zeros.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from plm.core import Packing
from plm.models import from_config, preset_config, with_heads
from plm.tasks import task_model

VOCAB = 60
LENGTHS = [7, 3, 5, 1]  # the first row unpadded, one of a single token
# ALBERT with its one block shared by every layer and with two groups of two, DeBERTa with c2p and p2c.
BACKBONES = {
    "bert": ("bert-micro", {}),
    "albert": ("albert-micro", {}),
    "albert-groups": ("albert-micro", {"layers": 4, "hidden_groups": 2, "inner_group_layers": 2}),
    "deberta": ("deberta-micro", {}),
}


def encoder(name: str, *heads: str):
    """A tiny encoder without dropout (so that training mode is deterministic) with the pretraining ``heads``."""
    preset, fields = BACKBONES[name]
    config = dataclasses.replace(preset_config(preset), vocab_size=VOCAB, dropout=0.0, attention_dropout=0.0, **fields)
    torch.manual_seed(0)
    return from_config(with_heads(config, *heads))


def padded_batch(lengths: list[int] = LENGTHS) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids (batch, time), right-padded with 0, and their attention mask."""
    time = max(lengths)
    mask = (torch.arange(time)[None, :] < torch.tensor(lengths)[:, None]).long()
    input_ids = torch.randint(5, VOCAB, (len(lengths), time), generator=torch.Generator().manual_seed(1))
    return input_ids * mask, mask


def segments(model, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Segment B from the third token on, for a model with segment embeddings."""
    if model.embeddings.segment is None:
        return {}
    return {"token_type_ids": (torch.arange(input_ids.shape[1]) >= 2).long().expand_as(input_ids)}


def test_packing_gathers_the_real_tokens_and_scatters_them_back_with_zeros_at_padding():
    input_ids, mask = padded_batch()
    packing = Packing.of(mask)
    assert packing.pack(input_ids).tolist() == [i for row, n in zip(input_ids.tolist(), LENGTHS) for i in row[:n]]
    hidden = torch.randn(*input_ids.shape, 3)
    torch.testing.assert_close(packing.unpack(packing.pack(hidden)), hidden * mask[..., None], rtol=0, atol=0)
    assert Packing.of(torch.ones_like(mask)) is None and Packing.of(None) is None


@pytest.mark.parametrize("name", list(BACKBONES))
def test_a_padded_batch_gives_each_sentences_states_and_logits_alone(name):
    model = encoder(name, "mlm", "sop").eval()
    input_ids, mask = padded_batch()
    types = segments(model, input_ids)
    with torch.no_grad():
        batched = model(input_ids, mask, output_hidden_states=True, **types)
        for row, length in enumerate(LENGTHS):
            alone_types = {key: value[row : row + 1, :length] for key, value in types.items()}
            alone = model(input_ids[row : row + 1, :length], output_hidden_states=True, **alone_types)
            for got, want in zip(batched.hidden_states, alone.hidden_states, strict=True):
                torch.testing.assert_close(got[row, :length], want[0], atol=1e-5, rtol=1e-5)
                assert not got[row, length:].any()  # padding positions hold zeros
            torch.testing.assert_close(batched.last_hidden_state[row, :length], alone.last_hidden_state[0])
            torch.testing.assert_close(batched.logits[row, :length], alone.logits[0], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(batched.pair_logits[row], alone.pair_logits[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", list(BACKBONES))
def test_a_padded_batch_gives_the_gradients_of_each_sentence_alone(name):
    """Training mode; the loss reads every real position's MLM logits and the pair logits."""
    input_ids, mask = padded_batch()
    targets = torch.randint(0, VOCAB, input_ids.shape, generator=torch.Generator().manual_seed(2))

    def loss(model, rows: slice, length: int) -> torch.Tensor:
        types = {key: value[rows, :length] for key, value in segments(model, input_ids).items()}
        output = model(input_ids[rows, :length], mask[rows, :length], **types)
        real = mask[rows, :length].bool()
        loss = F.cross_entropy(output.logits[real], targets[rows, :length][real], reduction="sum")
        return loss + output.pair_logits.sum()

    batched, alone = encoder(name, "mlm", "sop").train(), encoder(name, "mlm", "sop").train()
    loss(batched, slice(None), max(LENGTHS)).backward()
    for row, length in enumerate(LENGTHS):
        loss(alone, slice(row, row + 1), length).backward()
    for (parameter, got), want in zip(batched.named_parameters(), alone.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad, atol=1e-5, rtol=1e-4, msg=lambda m, p=parameter: f"{p}: {m}")


@pytest.mark.parametrize("task", ["classify", "tag", "span"])
@pytest.mark.parametrize("name", ["bert", "deberta"])
def test_task_heads_read_each_sentence_as_alone(task, name):
    model = task_model(encoder(name), task, labels=3).eval()
    input_ids, mask = padded_batch()
    field = {"classify": "logits", "tag": "logits", "span": "start_logits"}[task]
    with torch.no_grad():
        batched = getattr(model(input_ids, mask), field)
        for row, length in enumerate(LENGTHS):
            alone = getattr(model(input_ids[row : row + 1, :length]), field)[0]
            got = batched[row] if task == "classify" else batched[row, :length]
            torch.testing.assert_close(got, alone, atol=1e-5, rtol=1e-5)


def test_multiple_choice_scores_each_padded_choice_as_alone():
    model = task_model(encoder("albert"), "choice").eval()
    input_ids, mask = padded_batch()  # (4, 7) -> 2 questions of 2 choices
    with torch.no_grad():
        batched = model(input_ids.view(2, 2, -1), mask.view(2, 2, -1)).logits  # (2, 2)
        for row, length in enumerate(LENGTHS):
            alone = model(input_ids[row : row + 1, None, :length]).logits  # (1, 1)
            torch.testing.assert_close(batched.flatten()[row], alone[0, 0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["bert", "albert", "deberta"])
def test_a_classifier_trained_on_padded_batches_learns_what_one_trained_sentence_by_sentence_does(name):
    """Three AdamW steps: on the padded batch (packed), and on the mean loss of each sentence alone (nothing packed)."""
    input_ids, mask = padded_batch()
    labels = torch.tensor([0, 1, 1, 0])
    models = [task_model(encoder(name), "classify", dropout=0.0).train() for _ in range(2)]
    padded, alone = models
    optimizers = [torch.optim.AdamW(model.parameters(), lr=1e-2) for model in models]
    for _ in range(3):
        F.cross_entropy(padded(input_ids, mask).logits, labels).backward()
        for row, length in enumerate(LENGTHS):
            logits = alone(input_ids[row : row + 1, :length]).logits
            (F.cross_entropy(logits, labels[row : row + 1]) / len(LENGTHS)).backward()
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad()
    assert not torch.equal(padded.head.classifier.weight, task_model(encoder(name), "classify").head.classifier.weight)
    for got, want in zip(padded.parameters(), alone.parameters(), strict=True):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
