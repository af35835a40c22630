"""Weight-only int8 for inference on the CPU: a quarter of fp32's bytes for every weight read.

Decoding a token reads every weight matrix once, so its speed is bounded by the memory
bandwidth over the bytes of the weights. [`quantize`][plm.cpu.int8.quantize] stores each (out, in) matrix
of a model's linear layers, and the token embedding tables a tied output layer reads,
as int8 values with one scale per output row (symmetric: w ~ values * scale, scale =
max |w_row| / 127), and multiplies with PyTorch's own int8-weight kernel
(``aten._weight_int8pack_mm``). Everything between the products (norms, softmax, the
residual stream, the KV cache, the logits) stays fp32; the product itself takes its
input in bf16, because that is the kernel's vectorised path on the CPU (its fp32 path
reads the weights several times slower than plm.cpu.linear's fp32 products). A quantized
model is for inference: it has no parameters to train, and the trainer refuses it.

A product of a few rows (decoding one token a sequence) has two int8 routes: PyTorch's kernel, and
plm's own ([`plm.cpu.native`][plm.cpu.native]), which rounds each input row to int16 and sums the
products exactly with the CPU's integer dot-product instructions, reading the weights nearer the
bandwidth where the compiler offers AVX512-VNNI. With many rows (a prompt, a batch of beams) the int8
kernel can be slower than fp32 on a CPU with fast bf16 products: there the int8 values (exact in bf16)
are multiplied as a bf16 matrix and the scales applied after. Which route is fastest is a property of
the machine, so each shape times its routes at its first use and keeps the fastest, and times them
again after a while: a route chosen while another process loaded the machine must not stay once the
load is gone ([`TimedRoutes`][plm.cpu.timing.TimedRoutes]).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from plm.cpu import native
from plm.cpu.huge_pages import into_huge_pages
from plm.cpu.timing import MIN_WEIGHT_NUMEL, TimedRoutes, best_seconds, streamed_seconds
from plm.errors import PLMError

QUANTIZATIONS = ("int8",)
COMPUTE_DTYPE = torch.bfloat16  # the kernel's input, output and scales
ALIGNMENT = 64  # bytes: an AVX-512 register
KERNEL_WIDTHS = 16  # PyTorch's int8 kernel takes inputs of a multiple of this width only
MANY_ROWS = 16  # from here on a product may take the bf16 route, and no longer plm's own kernel
# The routes, timed in this order: the bf16 product of the int8 values, PyTorch's int8 kernel, plm's own kernel.
INT8_ROUTES = ("bf16", "int8", "native")
# (candidate routes, rows rounded up to a power of 2, out, in, threads) -> the fastest route for that many rows
ROUTES: TimedRoutes[tuple[tuple[str, ...], int, int, int, int]] = TimedRoutes()


@dataclass(frozen=True)
class Int8Weight:
    """An (out, in) weight as int8 ``values`` (out, in) and one ``scales`` (out,) entry per row.

    It stands where an fp32 weight matrix is read: [`linear`][plm.cpu.linear.linear] multiplies
    by it, a tied output layer reads an embedding's, and slicing rows (a fused projection's
    parts) gives the rows' own int8 weight.

    Attributes:
        values: (out, in) int8, the weight rounded to its row's scale.
        scales: (out,) bf16, max |w_row| / 127 of each row.
    """

    values: torch.Tensor
    scales: torch.Tensor

    @classmethod
    def of(cls, weight: torch.Tensor) -> Int8Weight:
        """Round ``weight`` (out, in) to int8 with a scale per row; each value is within scale / 2 of the weight.

        Args:
            weight: (out, in) the fp32 weight.

        Returns:
            The int8 weight.
        """
        weight = weight.detach().float()
        scales = (weight.abs().amax(dim=1) / 127).clamp(min=1e-12).to(COMPUTE_DTYPE)  # exact in bf16 from here on
        values = torch.round(weight / scales.float()[:, None]).clamp(-127, 127).to(torch.int8)
        return cls(values, scales)

    @property
    def shape(self) -> torch.Size:
        """The (out, in) shape of the matrix, as for an fp32 weight."""
        return self.values.shape

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of what it computes (fp32), as for an fp32 weight: caches and buffers follow it."""
        return torch.float32

    @property
    def device(self) -> torch.device:
        """The device of the int8 values."""
        return self.values.device

    def __getitem__(self, rows: slice) -> Int8Weight:
        """The int8 weight of ``rows``, as slicing an fp32 weight's rows gives theirs."""
        return Int8Weight(self.values[rows], self.scales[rows])

    def dequantized(self) -> torch.Tensor:
        """The fp32 matrix the int8 values stand for (out, in).

        Returns:
            The (out, in) fp32 matrix.
        """
        return self.values.float() * self.scales.float()[:, None]

    def linear(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """Compute x (..., in) -> x W^T + b (..., out), in fp32, by the fastest of its `routes`.

        Args:
            x: (..., in) the input.
            bias: (out,) fp32, or None.

        Returns:
            The (..., out) fp32 product.
        """
        rows = x.reshape(-1, x.shape[-1])  # (N, in)
        candidates = self.routes(rows, bias)
        if len(candidates) == 1:
            y = self.product(candidates[0], rows, bias)
        else:
            # the candidates in the key: a bucket of rows below MANY_ROWS and one from there share their power of 2
            key = (candidates, 1 << (rows.shape[0] - 1).bit_length(), *self.values.shape, torch.get_num_threads())
            if ROUTES.due(key):
                ROUTES.record(key, self.route_seconds(rows, bias, candidates))
            route, trial = ROUTES.choose(key)
            if trial:
                y = ROUTES.trial(key, lambda name: self.product(name, rows, bias))
            else:
                y = self.product(route, rows, bias)
        return y.view(*x.shape[:-1], self.values.shape[0])

    def routes(self, rows: torch.Tensor, bias: torch.Tensor | None) -> tuple[str, ...]:
        """The routes of `INT8_ROUTES` that may take the product of ``rows``, in the order they are timed.

        A few rows take an int8 kernel: PyTorch's, or plm's own where it is built and the weight is large enough for
        the kernel's speed to count (``MIN_WEIGHT_NUMEL``). Many rows may take the bf16 product instead. Inside a traced
        graph (torch.compile) there is no timing, and PyTorch's kernel is used.

        Args:
            rows: (N, in) the input rows.
            bias: (out,) fp32, or None.

        Returns:
            The candidate routes' names.
        """
        # PyTorch's int8 kernel reads past an input row whose width is not a multiple of KERNEL_WIDTHS (a segfault,
        # torch 2.13, with more than one row): those take the bf16 product of the values instead
        kernel = "int8" if self.values.shape[1] % KERNEL_WIDTHS == 0 else "bf16"
        if torch.compiler.is_compiling():
            return (kernel,)
        if rows.shape[0] >= MANY_ROWS:
            return ("bf16", "int8") if kernel == "int8" else ("bf16",)
        takes = self.values.numel() >= MIN_WEIGHT_NUMEL and self.values.is_contiguous()  # the kernel reads rows whole
        return (kernel, "native") if takes and native.usable(rows, self.values, bias) else (kernel,)

    def product(self, route: str, rows: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """Multiply rows (N, in) -> (N, out) in fp32 by one of `INT8_ROUTES`, adding the bias.

        Args:
            route: "int8" (PyTorch's int8 kernel), "native" (plm's own) or "bf16" (the values as a bf16 matrix).
            rows: (N, in) input rows; PyTorch's kernel and the bf16 product take them in bf16.
            bias: (out,) fp32, or None.

        Returns:
            The (N, out) fp32 product.
        """
        if route == "native":
            return native.int8_linear(rows, self.values, self.scales, bias)
        rows = rows.to(COMPUTE_DTYPE)
        if route == "bf16":
            y = self.bf16_product(rows)  # (N, out) fp32
            return y if bias is None else y + bias
        y = self.int8_product(rows)  # (N, out) bf16
        # bf16 + fp32 bias is fp32: one op where .float() and the addition would be two
        return y.float() if bias is None else torch.add(bias, y)

    def int8_product(self, rows: torch.Tensor) -> torch.Tensor:
        """Multiply rows (N, in) in bf16 -> (N, out) in bf16, through PyTorch's int8-weight kernel.

        Args:
            rows: (N, in) bf16 input rows.

        Returns:
            The (N, out) bf16 product, the scales applied.
        """
        return torch.ops.aten._weight_int8pack_mm(rows, aligned(self.values), self.scales)

    def bf16_product(self, rows: torch.Tensor) -> torch.Tensor:
        """The same product with the int8 values as a bf16 matrix (exactly), the row scales applied in fp32.

        Args:
            rows: (N, in) bf16 input rows.

        Returns:
            The (N, out) fp32 product.
        """
        return F.linear(rows, self.values.to(COMPUTE_DTYPE)).float() * self.scales.float()

    def route_seconds(self, rows: torch.Tensor, bias: torch.Tensor | None, routes: tuple[str, ...]) -> dict[str, float]:
        """Seconds the product of ``rows`` takes by each of ``routes`` on this machine now.

        A few rows (decoding) are timed with the weight read from memory, as a decoding step reads it
        ([`streamed_seconds`][plm.cpu.timing.streamed_seconds]); many rows, where the product's arithmetic counts
        more than the weight's bytes, over the same weight called again (the best of 3).

        Args:
            rows: (N, in) the input rows about to be multiplied.
            bias: (out,) fp32, or None.
            routes: the routes to time.

        Returns:
            The seconds of each route, by name.
        """
        with torch.no_grad():
            if rows.shape[0] >= MANY_ROWS:
                return {route: best_seconds(lambda: self.product(route, rows, bias)) for route in routes}
            return {route: streamed_seconds(lambda values: Int8Weight(values, self.scales).product(route, rows, bias),
                                            self.values) for route in routes}

    def rows_of(self, ids: torch.Tensor) -> torch.Tensor:
        """An embedding lookup: the fp32 rows of ``ids`` (...,) -> (..., in).

        Args:
            ids: (...) row indices.

        Returns:
            The (..., in) fp32 rows.
        """
        return self.values[ids].float() * self.scales[ids].float()[..., None]


def aligned(values: torch.Tensor) -> torch.Tensor:
    """``values`` at an address the int8 kernel can read.

    The kernel uses aligned vector loads, and a matrix read from a safetensors file can start at any
    multiple of 8 bytes (a segfault, not an error).

    Args:
        values: the int8 values.

    Returns:
        ``values`` itself when aligned to ``ALIGNMENT`` bytes, else an aligned copy.
    """
    return values if values.data_ptr() % ALIGNMENT == 0 else values.clone()


class Int8Module(nn.Module):
    """A layer whose weight is an `Int8Weight`: buffers ``weight_values`` and ``weight_scales``.

    Args:
        weight: (out, in) the fp32 weight to quantize.
    """

    weight_values: torch.Tensor
    weight_scales: torch.Tensor

    def __init__(self, weight: torch.Tensor) -> None:
        """Quantize ``weight`` into the buffers."""
        super().__init__()
        int8 = Int8Weight.of(weight)
        self.register_buffer("weight_values", int8.values)
        self.register_buffer("weight_scales", int8.scales)
        self.register_load_state_dict_post_hook(align_loaded)

    @property
    def weight(self) -> Int8Weight:
        """The int8 weight its buffers hold."""
        return Int8Weight(self.weight_values, self.weight_scales)


def align_loaded(module: Int8Module, incompatible_keys: object) -> None:
    """After loading: copy loaded values that the kernel could not read where they lie, once.

    Args:
        module: the layer just loaded.
        incompatible_keys: the load's missing and unexpected keys (unused).
    """
    module.weight_values = aligned(module.weight_values)


class Int8Linear(Int8Module):
    """nn.Linear's product with an int8 weight; the bias stays fp32.

    Args:
        linear: the fp32 layer it replaces.
    """

    bias: torch.Tensor | None  # a buffer

    def __init__(self, linear: nn.Linear) -> None:
        """Quantize ``linear``'s weight and keep a copy of its bias."""
        super().__init__(linear.weight)
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Compute x W^T + b with the int8 weight.

        Args:
            x: (..., in) the input.

        Returns:
            The (..., out) fp32 output.
        """
        return self.weight.linear(x, self.bias)


class Int8Embedding(Int8Module):
    """nn.Embedding's lookup from int8 rows; as a tied output matrix it multiplies in int8.

    Args:
        embedding: the fp32 embedding it replaces.
    """

    def __init__(self, embedding: nn.Embedding) -> None:
        """Quantize ``embedding``'s table."""
        super().__init__(embedding.weight)
        self.num_embeddings, self.embedding_dim = embedding.weight.shape

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """The fp32 rows of ``ids``.

        Args:
            ids: (...) token ids.

        Returns:
            The (..., dim) fp32 vectors.
        """
        return self.weight.rows_of(ids)


ModelT = TypeVar("ModelT", bound=nn.Module)


def quantize(model: ModelT, kind: str = "int8") -> ModelT:
    """Replace ``model``'s linear layers and its token embeddings by int8 ones, in place; returns the model.

    The embeddings are those the model names as its vocabulary tables
    (``model.vocabulary_embeddings()``, where it has them): a tied output layer reads
    them, so the vocabulary projection, the largest product of a language model, runs
    in int8 too. Other embeddings (positions, segments) and RNN cells stay fp32.
    A layer shared by several places (ALBERT) becomes one int8 layer, shared the same way. The weights end in
    huge pages ([`into_huge_pages`][plm.cpu.huge_pages.into_huge_pages]).

    Args:
        model: the model, on the CPU; one already quantized is returned as it is.
        kind: the quantization; only "int8".

    Returns:
        The model, in eval mode.

    Raises:
        PLMError: an unknown ``kind``, or a model that is not on the CPU.
    """
    if kind not in QUANTIZATIONS:
        raise PLMError(f"unknown quantization {kind!r}; choose {', '.join(QUANTIZATIONS)}")
    if is_quantized(model):  # saved quantized: nothing left to do
        return model
    check_device(next(iter(model.state_dict().values())).device)
    embeddings = {id(table) for table in getattr(model, "vocabulary_embeddings", list)()}
    replacements: dict[int, nn.Module] = {}  # one int8 layer per layer, however many places share it (ALBERT)
    for name, module in list(model.named_modules(remove_duplicate=False)):
        if id(module) not in replacements:
            if id(module) in embeddings:
                replacements[id(module)] = Int8Embedding(module)
            elif isinstance(module, nn.Linear):
                replacements[id(module)] = Int8Linear(module)
            else:
                continue
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent), child, replacements[id(module)])
    return into_huge_pages(model.eval())  # the int8 weights are read every token: from huge pages


def check_device(device: torch.device | str) -> None:
    """Check that int8 weights run on the CPU (the kernel plm uses is PyTorch's CPU one).

    Args:
        device: the device they would run on ("meta" passes too).

    Raises:
        PLMError: a device other than the CPU.
    """
    if torch.device(device).type not in ("cpu", "meta"):
        raise PLMError(f"int8 weights are for inference on the CPU, not on {torch.device(device).type}")


def check_trainable(model: nn.Module, what: str) -> None:
    """Refuse to train (or average, or convert) a quantized model: its int8 weights have no gradients.

    Args:
        model: the model.
        what: how the error names it.

    Raises:
        PLMError: the model has int8 weights.
    """
    if is_quantized(model):
        raise PLMError(f"{what} has int8 weights, which are for inference; use the fp32 model it was quantized from")


def is_quantized(model: nn.Module) -> bool:
    """Whether ``model`` has int8 layers.

    Args:
        model: the model.

    Returns:
        True when any of its modules is an [`Int8Module`][plm.cpu.int8.Int8Module].
    """
    return any(isinstance(module, Int8Module) for module in model.modules())


def quantization_of(model: nn.Module) -> str | None:
    """"int8" for a quantized model, None for an fp32 one (what a saved model's config records).

    Args:
        model: the model.

    Returns:
        The quantization, or None.
    """
    return "int8" if is_quantized(model) else None
