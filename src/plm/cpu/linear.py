"""y = x W^T + b, with faster routes on the CPU for the two shapes where MKL's plain product can be slow.

On a GPU, under autocast, or for other shapes the plain F.linear is used. The measured
gains, and the machines they were measured on, are in the speed page of the docs.

* One token per row (decoding with a KV cache multiplies a handful of rows by every
  weight matrix), in fp32 or with bf16 weights. MKL may take a matrix-vector kernel that
  runs on one thread and reads nn.Linear's (out, in) layout slowly; the same product as a
  batched matmul over ``BLOCKS`` row blocks of W goes through MKL's batched GEMM, which
  streams the weight at memory speed and spreads the blocks over threads. Some CPUs' MKL
  has a fast matrix-vector kernel instead, and with one row in bf16 PyTorch's GEMM path
  reads the weight slower than its matrix-vector kernel (``torch.mv``); and plm's own kernel
  ([`plm.cpu.native`][plm.cpu.native]) reads bf16 weights nearer the bandwidth than either where the CPU
  has AVX512-BF16. So each shape takes the route that wins on the machine at hand, timed at
  its first use with the weight read from memory as decoding reads it
  ([`one_token_linear`][plm.cpu.linear.one_token_linear]).
  Every route is timed again after a while: a route chosen while another process loaded
  the machine must not stay once the load is gone ([`TimedRoutes`][plm.cpu.timing.TimedRoutes]).
* Very many output features (the vocabulary projection of a language model, on
  every position of a batch). MKL's GEMM slows down as the number of output features
  grows; the same product computed ``CHUNK`` output columns at a time, each written
  into its slice of the result, gives the same numbers faster for vocabularies of
  30k-50k. Below ``MIN_CHUNKED_FEATURES`` the gain is lost to the page faults of
  writing a freshly allocated result in column stripes.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from plm.cpu import native
from plm.cpu.int8 import Int8Weight
from plm.cpu.timing import MIN_WEIGHT_NUMEL, TimedRoutes, streamed_seconds

BLOCKS = 4
MAX_ROWS = 4
CHUNK = 1024
MIN_CHUNKED_FEATURES = 16384
ROUTES: TimedRoutes[tuple[int, int, int, int, torch.dtype]] = TimedRoutes()  # (rows, out, in, threads, dtype)


def linear(x: torch.Tensor, weight: torch.Tensor | Int8Weight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``: x (..., in), weight (out, in) -> (..., out); int8 weights multiply in int8.

    On the CPU ([`measured_case`][plm.cpu.linear.measured_case]), a product of a few rows by a large weight takes the
    route of `ONE_TOKEN_ROUTES` that was timed fastest, and one of many rows with very many output features takes
    [`WideLinear`][plm.cpu.linear.WideLinear] (in fp32).

    Args:
        x: (..., in) the input.
        weight: (out, in) the weight, fp32, bf16 or int8.
        bias: (out,), or None.

    Returns:
        The (..., out) product.
    """
    if isinstance(weight, Int8Weight):
        return weight.linear(x, bias)
    out_features, in_features = weight.shape
    rows = x.numel() // max(in_features, 1)
    one_token = rows <= MAX_ROWS and weight.numel() >= MIN_WEIGHT_NUMEL
    wide = rows > MAX_ROWS and out_features >= MIN_CHUNKED_FEATURES and x.dtype == torch.float32
    if not (one_token or wide) or not measured_case(x, weight):
        return F.linear(x, weight, bias)
    if wide:
        # Under torch.compile inductor picks its own kernels for the product.
        return F.linear(x, weight, bias) if torch.compiler.is_compiling() else WideLinear.apply(x, weight, bias)
    if torch.compiler.is_compiling():  # no timing inside a traced graph: the route measured before, if traceable
        route = ROUTES.get(route_key(rows, weight), "plain")
        return ONE_TOKEN_ROUTES["plain" if route == "native" else route](x, weight, bias)
    return one_token_linear(x, weight, bias)


def blocked_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """The one-token route: x (..., in) as columns, times ``BLOCKS`` row blocks of W in one batched matmul.

    Args:
        x: (..., in) the input, a few rows.
        weight: (out, in) the weight.
        bias: (out,), or None.

    Returns:
        The (..., out) product.
    """
    out_features, in_features = weight.shape
    rows = x.numel() // in_features
    columns = x.reshape(rows, in_features).t()  # (in, rows)
    if out_features % BLOCKS == 0:  # the bias added by the batched product itself: no op of its own
        blocks = weight.view(BLOCKS, out_features // BLOCKS, in_features)  # (BLOCKS, out/BLOCKS, in)
        expanded = columns.expand(BLOCKS, in_features, rows)
        y = torch.bmm(blocks, expanded) if bias is None else torch.baddbmm(bias.view(BLOCKS, -1, 1), blocks, expanded)
        return y.view(out_features, rows).t().reshape(*x.shape[:-1], out_features)
    # A vocabulary like GPT-2's 50,257 leaves a few rows over, multiplied on their own.
    blocked = out_features - out_features % BLOCKS
    blocks = weight[:blocked].view(BLOCKS, blocked // BLOCKS, in_features)  # (BLOCKS, out/BLOCKS, in)
    y = torch.bmm(blocks, columns.expand(BLOCKS, in_features, rows)).view(blocked, rows).t()  # (rows, blocked)
    y = torch.cat([y, F.linear(columns.t(), weight[blocked:])], dim=-1)
    if bias is not None:
        y = y + bias
    return y.reshape(*x.shape[:-1], out_features)


def vector_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """The one-row route: ``torch.mv``, the matrix-vector kernel, which streams a bf16 weight at memory speed.

    Args:
        x: (..., in) the input, one row.
        weight: (out, in) the weight.
        bias: (out,), or None.

    Returns:
        The (..., out) product.
    """
    vector = x.reshape(-1)  # (in,)
    y = torch.mv(weight, vector) if bias is None else torch.addmv(bias, weight, vector)  # (out,)
    return y.reshape(*x.shape[:-1], weight.shape[0])


def native_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """The route of plm's own bf16 kernel ([`plm.cpu.native`][plm.cpu.native]); F.linear for what it cannot take.

    Args:
        x: (..., in) the input.
        weight: (out, in) the weight.
        bias: (out,), or None.

    Returns:
        The (..., out) product.
    """
    if native_takes(x, weight, bias):
        return native.bf16_linear(x, weight, bias)
    return F.linear(x, weight, bias)


def native_takes(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether plm's own kernel can take this product: all bf16, no gradient to record, the kernel built.

    Args:
        x: (..., in) the input.
        weight: (out, in) the weight.
        bias: (out,), or None.

    Returns:
        True when [`native_linear`][plm.cpu.linear.native_linear] would call the kernel.
    """
    bf16 = torch.bfloat16
    all_bf16 = x.dtype == bf16 and weight.dtype == bf16 and (bias is None or bias.dtype == bf16)
    return all_bf16 and native.usable(x, weight, bias)


Product = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]
ONE_TOKEN_ROUTES: dict[str, Product] = {"plain": F.linear, "blocked": blocked_linear, "vector": vector_linear,
                                        "native": native_linear}


def route_key(rows: int, weight: torch.Tensor) -> tuple[int, int, int, int, torch.dtype]:
    """The key of a one-token product's timed route: its rows, the weight's shape and dtype, the threads.

    Args:
        rows: the input's rows.
        weight: (out, in) the weight.

    Returns:
        (rows, out, in, threads, dtype).
    """
    return rows, *weight.shape, torch.get_num_threads(), weight.dtype


def one_token_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """The one-token product by the fastest of `ONE_TOKEN_ROUTES` for this shape on this machine.

    The winner depends on the machine's MKL (whether its matrix-vector kernel is fast), the dtype and the
    load on the machine, so each route is measured, with the weight read from memory, at a shape's first use
    (some 50 ms a route), and again, in place, when `ROUTES` says so. ``vector`` multiplies one row only, ``native``
    bf16 only.

    Args:
        x: (..., in) the input.
        weight: (out, in) the weight.
        bias: (out,), or None.

    Returns:
        The (..., out) product.
    """
    rows = x.numel() // weight.shape[1]
    key = route_key(rows, weight)
    if ROUTES.due(key):
        def seconds(route: Product) -> float:
            return streamed_seconds(lambda w: route(x, w, bias), weight)

        names = ["plain", "blocked"] + (["vector"] if rows == 1 else []) + (["native"] if native_takes(x, weight, bias)
                                                                            else [])
        with torch.no_grad():
            ROUTES.record(key, {name: seconds(ONE_TOKEN_ROUTES[name]) for name in names})
    route, trial = ROUTES.choose(key)
    if trial:
        return ROUTES.trial(key, lambda name: ONE_TOKEN_ROUTES[name](x, weight, bias))
    return ONE_TOKEN_ROUTES[route](x, weight, bias)


def measured_case(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether a product is in the setting the faster routes were measured in.

    That is fp32 or bf16 on the CPU, input and weight alike, with a contiguous weight, outside autocast
    (whose bf16 products are PyTorch's own to route).

    Args:
        x: the input.
        weight: the weight.

    Returns:
        True in that setting.
    """
    return (x.device.type == "cpu" and x.dtype == weight.dtype and x.dtype in (torch.float32, torch.bfloat16)
            and weight.is_contiguous() and not torch.is_autocast_enabled("cpu"))


class WideLinear(torch.autograd.Function):
    """F.linear computed ``CHUNK`` output features at a time (see the module docstring).

    The backward pass is F.linear's: two products over all output features at once
    (those are not slow), with the weight's gradient computed as grad^T x in W's own
    (out, in) layout rather than transposed afterwards.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """F.linear(x, weight, bias), ``CHUNK`` output features at a time, each written into its slice of the result.

        Args:
            ctx (Any): autograd's context, which keeps ``x``, ``weight`` and whether there is a bias.
            x: (..., in) the input.
            weight: (out, in) the weight.
            bias: (out,), or None.

        Returns:
            The (..., out) product.
        """
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        rows = x.reshape(-1, weight.shape[1])  # (N, in)
        out = rows.new_empty(rows.shape[0], weight.shape[0])  # (N, out)
        for start in range(0, weight.shape[0], CHUNK):
            end = start + CHUNK
            if bias is None:
                torch.mm(rows, weight[start:end].t(), out=out[:, start:end])
            else:
                torch.addmm(bias[start:end], rows, weight[start:end].t(), out=out[:, start:end])
        return out.view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor):
        """The gradients of x, weight and bias (None for those that need none), from the output's.

        Args:
            ctx (Any): autograd's context, as the forward pass left it.
            grad: (..., out) the gradient of the output.

        Returns:
            (tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]): the gradients of ``x``,
                ``weight`` and ``bias``.
        """
        x, weight = ctx.saved_tensors
        grad = grad.reshape(-1, weight.shape[0])  # (N, out)
        grad_x = (grad @ weight).view(x.shape) if ctx.needs_input_grad[0] else None
        grad_weight = grad.t() @ x.reshape(-1, weight.shape[1]) if ctx.needs_input_grad[1] else None
        grad_bias = grad.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_x, grad_weight, grad_bias


class Linear(nn.Linear):
    """nn.Linear (same parameters and state dict) whose product is [`linear`][plm.cpu.linear.linear].

    Attributes:
        fused_parts: the row blocks that are layers of their own to a layer-wise optimizer (LAMB): 3 for a fused
            W_Q, W_K, W_V projection; 1 for one layer.
    """

    fused_parts: int = 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Compute x W^T + b through [`linear`][plm.cpu.linear.linear].

        Args:
            x: (..., in) the input.

        Returns:
            The (..., out) output.
        """
        return linear(x, self.weight, self.bias)
