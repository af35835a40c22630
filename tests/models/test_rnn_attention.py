"""The RNN attention variants against brute force: one example, one query, one source position at a time.

The oracle below writes each paper's score as a scalar formula over the real (unpadded)
source of one example and takes a plain softmax over it, so batching, broadcasting and
the masked softmax are all checked against arithmetic that has none of them.
"""

from __future__ import annotations

import pytest
import torch

from plm.models.rnn_attention import SCORES, build_attention, masked_softmax

DIM = 6


def brute_force_score(attention, score: str, s: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """The score of one decoder state s (Dq,) against one encoder state h (Dk,), as the papers write it."""
    if score == "bahdanau":  # v^T tanh(W s + U h + b)
        W, U = attention.query_proj.weight, attention.key_proj.weight
        b, v = attention.key_proj.bias, attention.v.weight[0]
        return v @ torch.tanh(W @ s + U @ h + b)
    if score == "dot":
        return s @ h
    if score == "general":  # s^T W h
        return s @ (attention.weight.weight @ h)
    W, v = attention.proj.weight, attention.v.weight[0]  # concat: v^T tanh(W [s; h])
    return v @ torch.tanh(W @ torch.cat([s, h]))


@pytest.mark.parametrize("score", SCORES)
def test_attention_equals_a_loop_over_examples_queries_and_real_source_positions(score: str) -> None:
    torch.manual_seed(0)
    query_dim, key_dim = (DIM, DIM) if score == "dot" else (DIM, DIM + 2)
    attention = build_attention(score, query_dim, key_dim, dim=5)
    lengths = [4, 1, 3]
    query, keys = torch.randn(3, 2, query_dim), torch.randn(3, 4, key_dim)
    mask = torch.arange(4)[None] < torch.tensor(lengths)[:, None]
    context, weights = attention(query, keys, mask)
    for b, length in enumerate(lengths):
        for q in range(2):
            scores = torch.stack([brute_force_score(attention, score, query[b, q], keys[b, j]) for j in range(length)])
            expected = scores.softmax(0)
            torch.testing.assert_close(weights[b, q, :length], expected)
            assert torch.all(weights[b, q, length:] == 0)
            torch.testing.assert_close(context[b, q], sum(expected[j] * keys[b, j] for j in range(length)))


def test_a_fully_masked_row_gives_zeros_not_nan() -> None:
    scores = torch.tensor([[[1.0, 2.0, 3.0]], [[0.5, -1.0, 4.0]]])
    mask = torch.tensor([[False, False, False], [True, True, False]])
    weights = masked_softmax(scores, mask)
    assert torch.equal(weights[0], torch.zeros(1, 3))
    torch.testing.assert_close(weights[1, 0, :2], torch.tensor([0.5, -1.0]).softmax(0))
    assert weights[1, 0, 2] == 0


def test_weights_depend_on_the_source() -> None:
    """PITFALLS 17: the PyTorch tutorial's "Bahdanau" attention ignored the encoder states."""
    torch.manual_seed(0)
    attention = build_attention("bahdanau", DIM, DIM, dim=5)
    query, mask = torch.randn(1, 1, DIM), torch.ones(1, 3, dtype=torch.bool)
    first, second = torch.randn(1, 3, DIM), torch.randn(1, 3, DIM)
    assert not torch.allclose(attention(query, first, mask)[1], attention(query, second, mask)[1], atol=1e-3)


@pytest.mark.parametrize("alignment", ["local-m", "local-p"])
@pytest.mark.parametrize("score", ["dot", "general", "concat"])
def test_local_attention_equals_luong_s_formulas_in_a_loop(alignment: str, score: str) -> None:
    """a_t(s) = align(h_t, h_s) over the window [p_t - D, p_t + D]; local-p times exp(-(s - p_t)^2 / (2 (D/2)^2))."""
    torch.manual_seed(1)
    window, lengths = 2, [7, 3, 5]
    attention = build_attention(score, DIM, DIM, dim=5, alignment=alignment, window=window)
    query, keys = torch.randn(3, 4, DIM) * 2, torch.randn(3, 7, DIM)
    mask = torch.arange(7)[None] < torch.tensor(lengths)[:, None]
    positions = torch.tensor([0, 3, 5, 8])  # the queries' target positions; 8 is past every source
    context, weights = attention(query, keys, mask, positions=positions)
    for b, length in enumerate(lengths):
        for q in range(4):
            h = query[b, q]
            if alignment == "local-m":
                centre = float(min(positions[q].item(), length - 1))
            else:  # p_t = S sigmoid(v_p^T tanh(W_p h_t))
                W_p, v_p = attention.aligner[0].weight, attention.aligner[2].weight[0]
                centre = length * torch.sigmoid(v_p @ torch.tanh(W_p @ h)).item()
            window_positions = [s for s in range(length) if abs(s - centre) <= window]
            scores = torch.stack([brute_force_score(attention.inner, score, h, keys[b, s]) for s in window_positions])
            expected = torch.zeros(7)
            expected[window_positions] = scores.softmax(0)
            if alignment == "local-p":
                expected *= torch.exp(-((torch.arange(7) - centre) ** 2) / (2 * (window / 2) ** 2))
            torch.testing.assert_close(weights[b, q], expected, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(context[b, q], expected @ keys[b], rtol=1e-5, atol=1e-6)
