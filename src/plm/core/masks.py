"""Attention masks for scaled_dot_product_attention (padding, causality, no NaN rows), and packing.

[`Packing`][plm.core.masks.Packing] lets an encoder skip the padding: it gathers the real tokens of a padded
batch into rows of their own and scatters them back where attention needs the batch form.
"""

from __future__ import annotations

import torch


def host_may_read(tensor: torch.Tensor) -> bool:
    """Whether code may read ``tensor``'s values on the host here.

    Not while torch.compile traces or a CUDA graph is being captured, where a value read would not be replayed.

    Args:
        tensor: the tensor to read.

    Returns:
        True when a host read is allowed.
    """
    if torch.compiler.is_compiling():
        return False
    return not (tensor.is_cuda and torch.cuda.is_current_stream_capturing())


def build_attention_mask(
    padding_mask: torch.Tensor | None,
    query_length: int,
    key_length: int,
    causal: bool,
) -> tuple[torch.Tensor | None, bool]:
    """Return ``(mask, is_causal)`` for `torch.nn.functional.scaled_dot_product_attention`.

    ``padding_mask`` is (batch, key_length) with 1 for real tokens and 0 for padding.
    The queries are the last ``query_length`` of the keys (a KV cache holds the rest).
    When nothing is masked (no padding mask, or one without padding), or only plain
    causality over a square, no tensor is built so that SDPA can take its fastest
    path. Otherwise the boolean mask (True = may attend) has shape (batch, 1, query,
    key), or (batch, 1, 1, key) without causality: every query sees the same keys, and
    SDPA reads the broadcast row faster than a copy per query. A query row with no key
    to attend to (a left-padding position, a sequence of padding only) attends to every
    key instead: its output is ignored anyway, and an all-False row would make softmax
    return NaN.

    Args:
        padding_mask: (batch, key_length), 1 for real tokens and 0 for padding; or None.
        query_length: the queries, the last of the keys.
        key_length: the keys.
        causal: each query attends only to the keys up to its own position.

    Returns:
        The boolean mask or None, and whether SDPA is to apply causality itself.
    """
    if padding_mask is not None and host_may_read(padding_mask) and bool(padding_mask.all()):
        # Nothing is padded: no mask tensor, as if none were given. The check reads the
        # mask on the host (a sync on a GPU); under torch.compile or a CUDA graph's
        # capture it is skipped: neither can hold a choice made on the data.
        padding_mask = None
    if padding_mask is None:
        if not causal or query_length == 1:
            return None, False
        if query_length == key_length:
            return None, True
    past = key_length - query_length
    device = padding_mask.device if padding_mask is not None else None
    allowed = torch.ones(1, 1, query_length if causal else 1, key_length, dtype=torch.bool, device=device)
    if causal:
        query_pos = torch.arange(past, key_length, device=device)[:, None]
        key_pos = torch.arange(key_length, device=device)[None, :]
        allowed = allowed & (key_pos <= query_pos)
    if padding_mask is not None:
        allowed = allowed & padding_mask.bool()[:, None, None, :]
    return allowed | ~allowed.any(dim=-1, keepdim=True), False


class Packing:
    """Where the real tokens of a padded (batch, time) batch are, to compute on them alone.

    Every part of a block but attention works position by position, so an encoder runs
    it on the packed (tokens, ...) rows of the real tokens: a padded batch then costs
    the FLOPs of its real tokens only. Attention, which mixes positions, unpacks its
    queries, keys and values to (batch, time, ...) and packs its output again.

    Args:
        indices: (tokens,) the flat positions b * time + t of the real tokens, in row-major order.
        batch: the padded batch's rows.
        time: its length.
    """

    def __init__(self, indices: torch.Tensor, batch: int, time: int) -> None:
        self.indices = indices  # (tokens,): flat positions b * time + t of the real tokens, row-major
        self.batch = batch
        self.time = time

    @classmethod
    def of(cls, padding_mask: torch.Tensor | None) -> Packing | None:
        """The packing of ``padding_mask`` (batch, time), 1 for real tokens; None when nothing is padded.

        Finding the tokens reads the mask on the host (a sync on a GPU); under
        torch.compile, whose graph cannot have a data-dependent size, there is no packing.

        Args:
            padding_mask: (batch, time), 1 for real tokens and 0 for padding; or None.

        Returns:
            The packing, or None without padding, without a mask, or under torch.compile.
        """
        if padding_mask is None or not host_may_read(padding_mask) or bool(padding_mask.all()):
            return None
        batch, time = padding_mask.shape
        return cls(padding_mask.flatten().nonzero().squeeze(1), batch, time)

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, time, ...) -> (tokens, ...), the real tokens' rows in row-major order.

        Args:
            x: (batch, time, ...) values of the padded batch.

        Returns:
            The (tokens, ...) rows of the real tokens.
        """
        return GatherRows.apply(x.flatten(0, 1), self.indices)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """(tokens, ...) -> (batch, time, ...), zeros at padding positions.

        Zeros, not uninitialised memory: attention reads padded keys and values (with
        weight 0), and 0 times a stray NaN or inf would still be NaN.

        Args:
            x: (tokens, ...) rows of the real tokens.

        Returns:
            The (batch, time, ...) padded form.
        """
        return ScatterRows.apply(x, self.indices, self.batch * self.time).view(self.batch, self.time, *x.shape[1:])


def scatter_rows(x: torch.Tensor, indices: torch.Tensor, rows: int) -> torch.Tensor:
    """(len(indices), ...) -> (rows, ...): row i of x at row indices[i], zeros elsewhere.

    index_put_, not index_copy_ or index_add_: on the CPU it is the one of the three
    that copies in parallel.

    Args:
        x: (len(indices), ...) the rows to place.
        indices: (len(indices),) the row each goes to.
        rows: the rows of the result.

    Returns:
        The (rows, ...) tensor.
    """
    return x.new_zeros(rows, *x.shape[1:]).index_put_((indices,), x)


class GatherRows(torch.autograd.Function):
    """x[indices] along the first axis, whose gradient is `scatter_rows` (index_select's own is index_add_)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        """The rows ``x[indices]``.

        Args:
            ctx (Any): autograd's context, which keeps ``indices`` and the rows of ``x`` for the backward pass.
            x: (rows, ...) the tensor to gather from.
            indices: (n,) the rows to gather.

        Returns:
            The (n, ...) rows.
        """
        ctx.save_for_backward(indices)
        ctx.rows = x.shape[0]
        return x.index_select(0, indices)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        """The gradient of ``x``: ``grad``'s rows scattered back, zeros elsewhere.

        Args:
            ctx (Any): autograd's context, as the forward pass left it.
            grad: (n, ...) the gradient of the gathered rows.

        Returns:
            The gradient of ``x``, and None for ``indices``.
        """
        (indices,) = ctx.saved_tensors
        return scatter_rows(grad, indices, ctx.rows), None


class ScatterRows(torch.autograd.Function):
    """[`scatter_rows`][plm.core.masks.scatter_rows] with the gather of the same rows as its gradient."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, indices: torch.Tensor, rows: int) -> torch.Tensor:
        """[`scatter_rows`][plm.core.masks.scatter_rows] of ``x``.

        Args:
            ctx (Any): autograd's context, which keeps ``indices`` for the backward pass.
            x: (n, ...) the rows to place.
            indices: (n,) the row each goes to.
            rows: the rows of the result.

        Returns:
            The (rows, ...) tensor.
        """
        ctx.save_for_backward(indices)
        return scatter_rows(x, indices, rows)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        """The gradient of ``x``: the rows of ``grad`` at ``indices``.

        Args:
            ctx (Any): autograd's context, as the forward pass left it.
            grad: (rows, ...) the gradient of the scattered tensor.

        Returns:
            The gradient of ``x``, and None for ``indices`` and ``rows``.
        """
        (indices,) = ctx.saved_tensors
        return grad.index_select(0, indices), None, None
