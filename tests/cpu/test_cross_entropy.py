"""plm.cpu.cross_entropy: the loss of a vocabulary projection, and both its gradients, equal to the plain route's."""

import pytest
import torch
import torch.nn.functional as F

import plm
from plm.core import linear_cross_entropy
from plm.cpu import cross_entropy


def plain_route(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = F.linear(hidden, weight)
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="sum")


def loss_and_gradients(route, hidden, weight, targets, autocast: bool):
    hidden, weight = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = route(hidden, weight, targets)
    (loss * 0.5).backward()  # a gradient other than 1 reaches the loss, as a mean over tokens does
    return loss, hidden.grad, weight.grad


@pytest.mark.parametrize("autocast", [False, True])
def test_loss_and_gradients_are_the_plain_routes(monkeypatch, autocast: bool) -> None:
    monkeypatch.setattr(cross_entropy, "CHUNK_ELEMENTS", 3 * 97)  # chunks of 3 rows, the last one shorter
    torch.manual_seed(0)
    hidden, weight = torch.randn(2, 7, 16), torch.randn(97, 16)
    targets = torch.randint(0, 97, (2, 7))
    targets[0, 2] = targets[1, 6] = -100  # not scored: no loss, no gradient
    ours = loss_and_gradients(linear_cross_entropy, hidden, weight, targets, autocast)
    reference = loss_and_gradients(plain_route, hidden, weight, targets, autocast)
    # Under autocast both routes multiply in bf16 and take the softmax in fp32; the gradients
    # pass through bf16 in both, in another order.
    close = {"rtol": 1e-2, "atol": 1e-2} if autocast else {"rtol": 1e-5, "atol": 1e-5}
    for name, got, want in zip(("loss", "hidden", "weight"), ours, reference):
        torch.testing.assert_close(got, want, **close, msg=name)
    assert ours[1].dtype == hidden.dtype and ours[2].dtype == weight.dtype
    assert not ours[1][0, 2].any() and not ours[1][1, 6].any()


def test_gpt_trains_on_its_targets_without_logits() -> None:
    torch.manual_seed(0)
    model = plm.from_preset("gpt2-micro").eval()  # no dropout: the two passes see the same network
    tokens = torch.randint(0, model.config.vocab_size, (2, 9))
    out = model(tokens[:, :-1], targets=tokens[:, 1:])
    assert out.logits is None
    logits = model(tokens[:, :-1]).logits
    want = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten(), reduction="sum")
    torch.testing.assert_close(out.loss, want)


def test_positions_of_another_ignore_index_are_not_scored() -> None:
    """ignore_index other than -100: its positions take no loss and no gradient (F.cross_entropy with autograd the
    oracle), where a route that dropped only -100 would score them as predictions of that token."""
    torch.manual_seed(0)
    hidden, weight = torch.randn(2, 7, 16), torch.randn(97, 16)
    targets = torch.randint(0, 97, (2, 7))
    targets[0, 2] = targets[1, 4] = targets[1, 5] = 3

    def plain(hidden, weight, targets):
        return F.cross_entropy(F.linear(hidden, weight).flatten(0, 1), targets.flatten(), ignore_index=3,
                               reduction="sum")

    def chunked(hidden, weight, targets):
        return linear_cross_entropy(hidden, weight, targets, ignore_index=3)

    ours = loss_and_gradients(chunked, hidden, weight, targets, autocast=False)
    reference = loss_and_gradients(plain, hidden, weight, targets, autocast=False)
    for name, got, want in zip(("loss", "hidden", "weight"), ours, reference):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=name)
    assert not ours[1][0, 2].any() and not ours[1][1, 4:6].any()
