"""Attention masks for scaled_dot_product_attention: padding, causality, and no NaN rows."""

from __future__ import annotations

import torch


def build_attention_mask(
    padding_mask: torch.Tensor | None,
    query_length: int,
    key_length: int,
    causal: bool,
) -> tuple[torch.Tensor | None, bool]:
    """Return ``(mask, is_causal)`` for :func:`torch.nn.functional.scaled_dot_product_attention`.

    ``padding_mask`` is (batch, key_length) with 1 for real tokens and 0 for padding.
    The queries are the last ``query_length`` of the keys (a KV cache holds the rest).
    When nothing is masked (no padding mask, or one without padding), or only plain
    causality over a square, no tensor is built so that SDPA can take its fastest
    path. Otherwise the boolean mask (True = may attend) has shape (batch, 1, query,
    key). A query row with no key to attend to (a left-padding position) attends to
    every key instead: its output is ignored anyway, and an all-False row would make
    softmax return NaN.
    """
    if padding_mask is not None and not torch.compiler.is_compiling() and bool(padding_mask.all()):
        # Nothing is padded: no mask tensor, as if none were given. The check reads the
        # mask on the host (a sync on a GPU); under torch.compile it is skipped so that
        # the graph does not break on it.
        padding_mask = None
    if padding_mask is None:
        if not causal or query_length == 1:
            return None, False
        if query_length == key_length:
            return None, True
    past = key_length - query_length
    device = padding_mask.device if padding_mask is not None else None
    allowed = torch.ones(1, 1, query_length, key_length, dtype=torch.bool, device=device)
    if causal:
        query_pos = torch.arange(past, key_length, device=device)[:, None]
        key_pos = torch.arange(key_length, device=device)[None, :]
        allowed = allowed & (key_pos <= query_pos)
    if padding_mask is not None:
        allowed = allowed & padding_mask.bool()[:, None, None, :]
    return allowed | ~allowed.any(dim=-1, keepdim=True), False
