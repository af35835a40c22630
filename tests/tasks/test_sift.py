"""SiFT as DeBERTa's released code does it: the symmetric KL against brute force, the perturbation on the
standardised embeddings before the LayerNorm's gamma and beta, the released noise and the inf-norm step."""

from __future__ import annotations

import copy
import math
import statistics

import pytest
import torch
from torch import nn

from plm.errors import PLMError
from plm.models import from_preset
from plm.tasks import task_model
from plm.tasks.readers import TextExample
from plm.tasks.sift_fine_tuning import SiFT, normalised_embeddings, perturbed, symmetric_kl
from plm.tasks.task_objective import TaskObjective, build_task
from plm.tokenization.tokenizer import Tokenizer


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


def test_symmetric_kl_has_the_gradient_of_the_released_cross_entropies():
    """The released loss is CE(q, p) + CE(p, q) with the weights detached: d/da = p - q, d/db = q - p."""
    torch.manual_seed(0)
    a, b = torch.randn(2, 3, requires_grad=True), torch.randn(2, 3, requires_grad=True)
    symmetric_kl(a, b).backward()
    p, q = a.detach().softmax(-1), b.detach().softmax(-1)
    torch.testing.assert_close(a.grad, p - q)
    torch.testing.assert_close(b.grad, q - p)


def by_hand_layer_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    variance = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(variance + eps)


class ReleasedPerturbation(nn.Module):
    """The embeddings' LayerNorm with the released perturbation written out: gamma * norm(x^ + delta) + beta,
    x^ = (x - mean) / sqrt(var + 1e-7) without gamma and beta, detached; the plain LayerNorm while delta is None."""

    def __init__(self, norm: nn.LayerNorm) -> None:
        super().__init__()
        self.weight, self.bias, self.eps = norm.weight, norm.bias, norm.eps
        self.delta: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.delta is not None:
            x = by_hand_layer_norm(x, 1e-7).detach() + self.delta
        return self.weight * by_hand_layer_norm(x, self.eps) + self.bias


def classifier(preset: str = "bert-micro") -> nn.Module:
    """A tiny task model whose embedding LayerNorm has gamma and beta far from 1 and 0."""
    torch.manual_seed(0)
    model = task_model(from_preset(preset, vocab_size=40), "classify", 3).eval()
    with torch.no_grad():
        normalised_embeddings(model).weight.uniform_(0.5, 2.0)
        normalised_embeddings(model).bias.normal_()
    return model


def with_released_norm(model: nn.Module) -> tuple[nn.Module, ReleasedPerturbation]:
    oracle = copy.deepcopy(model)
    norm = ReleasedPerturbation(oracle.backbone.embeddings.norm)
    oracle.backbone.embeddings.norm = norm
    return oracle, norm


FAMILIES = ["bert-micro", "albert-micro", "deberta-micro"]  # ALBERT's LayerNorm is E = 16 wide, not H = 32


@pytest.mark.parametrize("preset", FAMILIES)
def test_the_perturbation_is_added_to_the_standardised_embeddings_before_gamma_and_beta(preset):
    model, ids = classifier(preset), torch.randint(5, 40, (2, 7))
    oracle, norm = with_released_norm(model)
    width = normalised_embeddings(model).normalized_shape[0]
    delta = torch.randn(2, 7, width) * 0.3
    with perturbed(normalised_embeddings(model), lambda x_hat: delta):
        logits = model(ids).logits
    norm.delta = delta
    torch.testing.assert_close(logits, oracle(ids).logits)
    with perturbed(normalised_embeddings(model), torch.zeros_like):  # no perturbation: the clean prediction
        torch.testing.assert_close(model(ids).logits, classifier(preset)(ids).logits, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(model(ids).logits, classifier(preset)(ids).logits)  # the hook is gone afterwards


@pytest.mark.parametrize("preset", FAMILIES)
def test_the_sift_term_is_one_inf_norm_ascent_step_on_the_released_divergence(preset):
    """The whole term and its gradients against autograd on the released formula, built by hand."""
    sift = SiFT(noise=0.05, step=0.1)  # larger than the released sizes, so a wrong formula shows
    model, ids = classifier(preset), torch.randint(5, 40, (4, 7))
    torch.manual_seed(3)
    loss = sift.loss(model, lambda: model(ids).logits, model(ids).logits)
    loss.backward()

    expected, oracle = released_sift_term(preset, {"input_ids": ids}, noise=0.05, step=0.1, seed=3)
    assert_same_term_and_gradients(model, loss, oracle, expected)


def released_sift_term(preset: str, inputs: dict[str, torch.Tensor], noise: float, step: float,
                       seed: int) -> tuple[torch.Tensor, nn.Module]:
    """The released SiFT term built by hand on a copy of ``classifier(preset)``, back-propagated into the copy."""
    oracle, norm = with_released_norm(classifier(preset))
    clean = oracle(**inputs).logits
    torch.manual_seed(seed)
    width = norm.weight.shape[0]
    start = (torch.randn(*inputs["input_ids"].shape, width) * noise).clamp(-2 * noise, 2 * noise).requires_grad_()
    norm.delta = start
    log_p, q = oracle(**inputs).logits.log_softmax(-1), clean.detach().softmax(-1)
    (gradient,) = torch.autograd.grad(-(q * log_p).sum(), start)  # the released ascent: CE(q, p), q fixed
    norm.delta = start.detach() + step * gradient / (1e-6 + gradient.abs().amax(-1, keepdim=True))
    log_p, log_q = oracle(**inputs).logits.log_softmax(-1), clean.log_softmax(-1)
    # the released cross-entropies, less their entropies: KL(q || p) + KL(p || q), each weight detached
    expected = ((log_q.exp().detach() * (log_q.detach() - log_p)).sum()
                + (log_p.exp().detach() * (log_p.detach() - log_q)).sum())
    expected.backward()
    return expected, oracle


def assert_same_term_and_gradients(model: nn.Module, loss: torch.Tensor, oracle: nn.Module,
                                   expected: torch.Tensor) -> None:
    assert loss.item() == pytest.approx(expected.item(), rel=1e-4)
    oracle_grads = dict(oracle.named_parameters())
    for name, parameter in model.named_parameters():
        if oracle_grads[name].grad is None:
            assert parameter.grad is None or not parameter.grad.any(), name
            continue
        torch.testing.assert_close(parameter.grad, oracle_grads[name].grad, rtol=1e-4, atol=1e-6, msg=name)


def test_the_initial_noise_is_the_released_clipped_normal():
    """N(0, 1e-2) clipped to +-2e-2: the median |delta| is that of the normal, 4.6% sit on the clip."""
    torch.manual_seed(0)
    delta = SiFT().initial(torch.zeros(128, 64, 64))
    assert delta.requires_grad and delta.dtype == torch.float32
    assert delta.abs().max().item() == pytest.approx(2e-2)
    median = 1e-2 * statistics.NormalDist().inv_cdf(0.75)
    assert delta.abs().median().item() == pytest.approx(median, rel=0.01)
    clipped = math.erfc(2 / math.sqrt(2))  # P(|z| > 2)
    assert (delta.abs() == 2e-2).float().mean().item() == pytest.approx(clipped, rel=0.05)


def test_the_step_moves_each_tokens_largest_coordinate_by_1e_4():
    """delta + 1e-4 g / (1e-6 + ||g||_inf) per token; an overflowing gradient leaves delta as it was."""
    delta = torch.full((1, 2, 3), 0.01)
    gradient = torch.tensor([[[3.0, -4.0, 0.0], [0.0, 1e-7, 0.0]]])
    expected = torch.tensor([[[0.01 + 1e-4 * 3 / (4 + 1e-6), 0.01 - 1e-4 * 4 / (4 + 1e-6), 0.01],
                              [0.01, 0.01 + 1e-4 * 1e-7 / (1e-7 + 1e-6), 0.01]]])
    torch.testing.assert_close(SiFT().ascend(delta, gradient), expected)
    torch.testing.assert_close(SiFT().ascend(delta, torch.tensor([[[math.inf, 0.0, 0.0]] * 2])), delta)


def test_the_ascent_step_raises_the_divergence_over_a_random_one():
    """One step along the KL gradient beats a step of the same size in a random direction from the same start."""
    model, ids = classifier(), torch.randint(5, 40, (4, 7))
    clean = model(ids).logits.detach()
    sift = SiFT(noise=0.05, step=0.2)
    torch.manual_seed(2)
    adversarial = sift.loss(model, lambda: model(ids).logits, clean).item()
    torch.manual_seed(2)
    start = sift.initial(torch.zeros(4, 7, model.config.backbone.dim)).detach()
    direction = torch.randn(4, 7, model.config.backbone.dim)
    delta = start + 0.2 * direction / direction.abs().amax(-1, keepdim=True)
    with perturbed(normalised_embeddings(model), lambda x_hat: delta):
        random = symmetric_kl(model(ids).logits, clean).item()
    assert adversarial > random


def test_sift_needs_an_encoder():
    torch.manual_seed(0)
    gpt = task_model(from_preset("gpt2-micro", vocab_size=40), "classify", 2)
    with pytest.raises(PLMError, match="SiFT perturbs an encoder's normalised embeddings"):
        normalised_embeddings(gpt)


def test_the_objectives_sift_term_back_propagates_through_the_clean_pass_too(tmp_path):
    """The term fine-tuning adds (TaskObjective with ``sift``) is the released one, gradients and all: the released
    KL(p || q) differentiates the clean logits q as well, so the clean pass gets a gradient from it."""
    vocabulary = [f"w{i}" for i in range(30)]
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *vocabulary]) + "\n")
    tokens = Tokenizer.from_vocab_txt(tmp_path / "vocab.txt")
    model = classifier()
    task = build_task("classify", tokens, model, labels=["a", "b", "c"])
    train = [TextExample(" ".join(vocabulary[3 * k:3 * k + 5]), None, "abc"[k % 3]) for k in range(4)]
    objective = TaskObjective(task, train, [], batch_size=4, sift=SiFT(noise=0.05, step=0.1))
    batch = objective.batch(0, 0)
    assert batch["attention_mask"].all()  # one length: the oracle reads the same positions
    torch.manual_seed(3)
    loss = objective.loss(model, batch)["sift"]
    loss.backward()
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    expected, oracle = released_sift_term("bert-micro", inputs, noise=0.05, step=0.1, seed=3)
    assert_same_term_and_gradients(model, loss, oracle, expected)

