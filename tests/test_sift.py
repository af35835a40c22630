"""SiFT: the symmetric KL term against brute force, the perturbation where the paper puts it."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from plm.errors import PLMError
from plm.models import from_preset
from plm.tasks import task_model
from plm.tasks.sift import SiFT, normalised_embeddings, perturbed, symmetric_kl


def test_symmetric_kl_equals_the_sum_of_both_divergences_by_hand():
    torch.manual_seed(0)
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    expected = 0.0
    for row_a, row_b in zip(a.tolist(), b.tolist()):
        p = [math.exp(x) / sum(math.exp(y) for y in row_a) for x in row_a]
        q = [math.exp(x) / sum(math.exp(y) for y in row_b) for x in row_b]
        expected += sum(pi * math.log(pi / qi) + qi * math.log(qi / pi) for pi, qi in zip(p, q))
    assert symmetric_kl(a, b).item() == pytest.approx(expected, rel=1e-5)
    assert symmetric_kl(a, a).item() == pytest.approx(0.0, abs=1e-6)


def test_symmetric_kl_sends_gradient_to_both_sides():
    a, b = torch.randn(2, 3, requires_grad=True), torch.randn(2, 3, requires_grad=True)
    symmetric_kl(a, b).backward()
    assert a.grad.abs().sum() > 0 and b.grad.abs().sum() > 0


def classifier():
    torch.manual_seed(0)
    return task_model(from_preset("bert-micro", vocab_size=40), "classify", 3).eval()


def test_the_perturbation_lands_on_the_normalised_embeddings():
    """Adding a vector after the embedding LayerNorm is adding it to that LayerNorm's bias."""
    model, ids = classifier(), torch.randint(5, 40, (2, 7))
    delta = torch.randn(model.config.backbone.dim) * 0.1
    with perturbed(normalised_embeddings(model), lambda x: delta):
        logits = model(ids).logits
    oracle = copy.deepcopy(model)
    with torch.no_grad():
        oracle.backbone.embeddings.norm.bias += delta
    torch.testing.assert_close(logits, oracle(ids).logits)
    torch.testing.assert_close(model(ids).logits, classifier()(ids).logits)  # the hook is gone afterwards


def test_the_sift_term_is_the_kl_at_the_stepped_perturbation_and_trains_the_model():
    model, ids = classifier(), torch.randint(5, 40, (4, 7))
    clean = model(ids).logits
    loss = SiFT(noise=1e-3, step=1e-1).loss(model, lambda: model(ids).logits, clean)
    assert loss.item() > 0
    loss.backward()
    assert model.backbone.embeddings.word.weight.grad.abs().sum() > 0
    # a larger step moves further from the clean prediction: the term grows with the perturbation
    torch.manual_seed(1)
    small = SiFT(noise=1e-3, step=1e-2).loss(model, lambda: model(ids).logits, clean).item()
    torch.manual_seed(1)
    large = SiFT(noise=1e-3, step=1.0).loss(model, lambda: model(ids).logits, clean).item()
    assert small < large


def test_the_ascent_step_raises_the_divergence_over_a_random_one():
    """One step along the KL gradient beats a random direction of the same length."""
    model, ids = classifier(), torch.randint(5, 40, (4, 7))
    clean = model(ids).logits.detach()
    torch.manual_seed(2)
    adversarial = SiFT(noise=1e-4, step=0.5).loss(model, lambda: model(ids).logits, clean).item()
    torch.manual_seed(2)
    direction = torch.randn(4, 7, model.config.backbone.dim)
    direction = 0.5 * direction / direction.norm(dim=-1, keepdim=True)
    with perturbed(normalised_embeddings(model), lambda x: direction):
        random = symmetric_kl(model(ids).logits, clean).item()
    assert adversarial > random


def test_sift_needs_an_encoder():
    torch.manual_seed(0)
    gpt = task_model(from_preset("gpt2-micro", vocab_size=40), "classify", 2)
    with pytest.raises(PLMError, match="SiFT perturbs an encoder's normalised embeddings"):
        normalised_embeddings(gpt)
