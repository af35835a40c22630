"""A decoder's whole one-token step in C (``native_step.c``): decoding a few rows without Python between the products.

A PyTorch one-token step of GPT-2 124M spends 1.7 ms outside its products, in Python, dispatch and the
small ops between them (the speed page of the docs has the profile): a fifth of an int8 token's time.
[`NativeDecoder`][plm.cpu.native_step.NativeDecoder] runs the same step as one C call over the model's
own tensors (no copy of a weight), through plm's product kernels ([`plm.cpu.native`][plm.cpu.native]), and
reads and writes the model's own key/value caches, so its steps and the model's are interchangeable. A
family describes its model to it ([`LayerTensors`][plm.cpu.native_step.LayerTensors] per block); the
decoding loop uses it for the one-token steps of up to `MAX_ROWS` rows on the CPU (left-padded prompts
included), and the model's own forward everywhere else.

The step's arithmetic follows the model's: the residual stream, norms, attention and activation in
fp32, each product at its weight's format (fp32; bf16 with a bf16 rounding of its input, as PyTorch's
bf16 products take it; int8 with an int16 rounding, as plm's int8 kernel takes it).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from plm.cpu import native
from plm.cpu.int8 import Int8Weight

KINDS = {torch.float32: 0, torch.bfloat16: 1}  # the C side's WEIGHT_F32, WEIGHT_BF16; Int8Weight is 2
INT8 = 2
MAX_ROWS = 8  # rows decoded together; each block of weights is read once for all of them
# bf16 products of more rows gain nothing over PyTorch's (oneDNN's, with AMX where the CPU has it): GPT-2 124M's step
# was level with the model's forward at 8 rows (1.01x) and 1.34-1.39x as fast at 4, on the 2-core Xeon with AMX
# (bench_decode_limits.py --part step)
MAX_BF16_ROWS = 4
# The narrow formats' products take the step only where the library multiplies them with the CPU's dot-product
# instructions: elsewhere (plain C) plm's kernels are one route that each shape times against PyTorch's, and may
# lose, which the step would not know.
VECTOR_PATHS = {KINDS[torch.bfloat16]: "bf16: AVX512-BF16", INT8: "int8: AVX512-VNNI"}
ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "silu")  # the C side's order
Weight = torch.Tensor | Int8Weight


class _Product(ctypes.Structure):
    _fields_ = [("weight", ctypes.c_void_p), ("scales", ctypes.c_void_p), ("bias", ctypes.c_void_p),
                ("out", ctypes.c_int64), ("in_", ctypes.c_int64), ("kind", ctypes.c_int32)]


class _Layer(ctypes.Structure):
    _fields_ = [("attention_norm_weight", ctypes.c_void_p), ("attention_norm_bias", ctypes.c_void_p),
                ("in_proj", _Product), ("out_proj", _Product),
                ("feed_forward_norm_weight", ctypes.c_void_p), ("feed_forward_norm_bias", ctypes.c_void_p),
                ("fc_in", _Product), ("fc_out", _Product),
                ("keys", ctypes.c_void_p), ("values", ctypes.c_void_p)]


class _Decoder(ctypes.Structure):
    _fields_ = [("layers", ctypes.c_int64), ("dim", ctypes.c_int64), ("heads", ctypes.c_int64),
                ("ffn_dim", ctypes.c_int64), ("max_length", ctypes.c_int64),
                ("norm_first", ctypes.c_int32), ("activation", ctypes.c_int32), ("cache_kind", ctypes.c_int32),
                ("token_kind", ctypes.c_int32), ("position_kind", ctypes.c_int32), ("norm_eps", ctypes.c_float),
                ("token_embedding", ctypes.c_void_p), ("token_scales", ctypes.c_void_p),
                ("position_embedding", ctypes.c_void_p),
                ("final_norm_weight", ctypes.c_void_p), ("final_norm_bias", ctypes.c_void_p),
                ("head", _Product), ("layer", ctypes.c_void_p)]


@dataclass(frozen=True)
class LayerTensors:
    """One Transformer block's tensors, as [`TransformerBlock`][plm.core.block.TransformerBlock] holds them.

    Attributes:
        attention_norm: the attention sub-layer's LayerNorm weight and bias, (dim,) each.
        in_proj: the fused (3 dim, dim) W_Q, W_K, W_V and its (3 dim,) bias or None.
        out_proj: the (dim, dim) output projection and its bias.
        feed_forward_norm: the feed-forward sub-layer's LayerNorm weight and bias.
        fc_in: the (ffn_dim, dim) first feed-forward layer and its bias.
        fc_out: the (dim, ffn_dim) second one and its bias.
        keys: (rows, heads, max_length, head_dim) the layer's key cache, which each step writes a position of.
        values: its value cache, shaped like ``keys``.
    """

    attention_norm: tuple[torch.Tensor, torch.Tensor]
    in_proj: tuple[Weight, torch.Tensor | None]
    out_proj: tuple[Weight, torch.Tensor | None]
    feed_forward_norm: tuple[torch.Tensor, torch.Tensor]
    fc_in: tuple[Weight, torch.Tensor | None]
    fc_out: tuple[Weight, torch.Tensor | None]
    keys: torch.Tensor
    values: torch.Tensor


class NativeDecoder:
    """A decoder-only stack's one-token step for a few rows, in C, over the model's own tensors and caches.

    Build it with [`of`][plm.cpu.native_step.NativeDecoder.of], which says None where the step cannot take the
    model; then each call stores the rows' keys and values at ``slot`` of the caches and returns their logits.
    """

    def __init__(self, structure: _Decoder, layers: ctypes.Array, kept: list[torch.Tensor], vocab: int,
                 tokens: int, padding: torch.Tensor, valid: torch.Tensor | None) -> None:
        self.structure, self.layers, self.kept = structure, layers, kept  # kept: every tensor the C side reads
        self.vocab, self.tokens = vocab, tokens  # the output's size, and the rows of the token table
        self.padding = padding  # (rows,) each row's left padding: its positions count its real tokens only
        self.valid = valid  # (rows, max_length) uint8, 1 where a row may attend; None: everywhere

    @classmethod
    def of(
        cls,
        layers: Sequence[LayerTensors],
        *,
        heads: int,
        norm_first: bool,
        activation: str,
        norm_eps: float,
        token_embedding: Weight,
        position_embedding: torch.Tensor,
        final_norm: tuple[torch.Tensor, torch.Tensor] | None,
        head: Weight,
        mask: torch.Tensor | None = None,
    ) -> NativeDecoder | None:
        """The step of a stack of ``layers`` between a token and a position table, and an output matrix.

        Args:
            layers: the blocks' tensors, in order; their caches' rows are the rows decoded.
            heads: the attention heads.
            norm_first: pre-LN (GPT-2) when True, post-LN (GPT-1) when False.
            activation: the feed-forward activation, one of `ACTIVATIONS`.
            norm_eps: the LayerNorms' epsilon.
            token_embedding: the (vocab, dim) token table, fp32, bf16 or int8.
            position_embedding: the (positions, dim) learned position table, fp32 or bf16.
            final_norm: the LayerNorm after the last block (GPT-2's), or None.
            head: the (vocab, dim) output matrix, the token table itself when tied.
            mask: (rows, max_length), 0 at the prompts' left padding and 1 at every other position, or None
                without padding.

        Returns:
            The step, or None where it cannot run: no kernels ([`native.available`][plm.cpu.native.available]), a
            tensor off the CPU, of another format (fp16), or not contiguous, caches of more than `MAX_ROWS` rows
            (`MAX_BF16_ROWS` with bf16 weights), an activation it does not know, or bf16 or int8 weights on a CPU
            without their dot-product instructions (`VECTOR_PATHS`).
        """
        if not native.available() or activation not in ACTIVATIONS or not layers:
            return None
        kept: list[torch.Tensor] = []  # every tensor the C side reads (fp32 copies of norms and biases among them)
        keys = layers[0].keys
        if keys.dim() != 4 or not 0 < keys.shape[0] <= MAX_ROWS or keys.shape[1] != heads or keys.dtype not in KINDS:
            return None
        rows, _, max_length, head_dim = keys.shape
        if mask is not None and tuple(mask.shape) != (rows, max_length):
            return None
        dim, ffn_dim = heads * head_dim, layers[0].fc_in[0].shape[0]
        described = (_layer(tensors, kept, keys, dim, ffn_dim) for tensors in layers)
        built = [layer for layer in described if layer is not None]
        token, positions = _table(token_embedding, dim, kept), _table(position_embedding, dim, kept)
        head_product = _product(head, None, kept, head.shape[0], dim)
        final = None if final_norm is None else _norm(final_norm, kept, dim)
        if (len(built) < len(layers) or token is None or positions is None or head_product is None
                or final_norm is not None and final is None or position_embedding.shape[0] < max_length):
            return None
        kinds = {product.kind for layer in built for product in (layer.in_proj, layer.out_proj, layer.fc_in,
                                                                   layer.fc_out)} | {head_product.kind}
        if any(VECTOR_PATHS.get(kind, "") not in (native.instructions() or "") for kind in kinds):
            return None
        if KINDS[torch.bfloat16] in kinds and rows > MAX_BF16_ROWS:
            return None
        structure = _Decoder(layers=len(layers), dim=dim, heads=heads, ffn_dim=ffn_dim, max_length=max_length,
                             norm_first=int(norm_first), activation=ACTIVATIONS.index(activation),
                             cache_kind=KINDS[keys.dtype], norm_eps=norm_eps, head=head_product)
        structure.token_kind, structure.token_embedding, structure.token_scales = token
        structure.position_kind, structure.position_embedding, _ = positions
        if final is not None:
            structure.final_norm_weight, structure.final_norm_bias = final
        array = (_Layer * len(built))(*built)
        structure.layer = ctypes.addressof(array)
        padding = torch.zeros(rows, dtype=torch.long) if mask is None else (mask == 0).sum(-1)
        valid = None if mask is None else mask.to(torch.uint8).contiguous()
        return cls(structure, array, kept, head.shape[0], token_embedding.shape[0], padding, valid)

    def __call__(self, tokens: torch.Tensor, slot: int) -> torch.Tensor:
        """The (rows, vocab) fp32 logits after each row's token at ``slot``, their keys and values stored there.

        Args:
            tokens: (rows,) each row's newest token.
            slot: its place in the caches: the tokens before it, padding included.

        Returns:
            The next tokens' (rows, vocab) logits.

        Raises:
            IndexError: a token the table has no row for, a slot past the caches, or not a token a row.
            MemoryError: no memory for the step's scratch.
        """
        tokens = tokens.to(torch.int64).contiguous()
        rows = len(self.padding)
        if (tokens.shape != (rows,) or not 0 <= slot < self.structure.max_length
                or bool(((tokens < 0) | (tokens >= self.tokens)).any())):  # the C side reads there
            raise IndexError(f"tokens {tokens.tolist()} or position {slot} out of range ({rows} rows, {self.tokens} "
                             f"tokens, {self.structure.max_length} positions)")
        positions = slot - self.padding  # (rows,)
        logits = torch.empty(rows, self.vocab)
        loaded = native.library()
        assert loaded is not None  # `of` checked it
        if not loaded.plm_decoder_step(ctypes.addressof(self.structure), tokens.data_ptr(), positions.data_ptr(), rows,
                                       slot, 0 if self.valid is None else self.valid.data_ptr(), logits.data_ptr(),
                                       torch.get_num_threads()):
            raise MemoryError("no memory for a decoding step's scratch")
        return logits


def _usable(tensor: torch.Tensor, shape: tuple[int, ...]) -> bool:
    return tensor.is_cpu and tensor.is_contiguous() and tuple(tensor.shape) == shape


def _table(table: Weight, columns: int, kept: list[torch.Tensor]) -> tuple[int, int, int] | None:
    """A (rows, ``columns``) matrix's kind, values and scales (0 without); None where the C side cannot read it.

    The tensors it points at are held in ``kept``.
    """
    shape = (table.shape[0], columns)
    if isinstance(table, Int8Weight):
        if not (_usable(table.values, shape) and _usable(table.scales, shape[:1])
                and table.scales.dtype == torch.bfloat16):
            return None
        kept += [table.values, table.scales]
        return INT8, table.values.data_ptr(), table.scales.data_ptr()
    if table.dtype not in KINDS or not _usable(table, shape):
        return None
    kept.append(table)
    return KINDS[table.dtype], table.data_ptr(), 0


def _vector(tensor: torch.Tensor | None, kept: list[torch.Tensor], size: int) -> int | None:
    """The address of a (``size``,) ``tensor`` as fp32 (a copy, held in ``kept``), 0 for None; None if it is not one."""
    if tensor is None:
        return 0
    if not tensor.is_cpu or tuple(tensor.shape) != (size,):
        return None
    copy = tensor.detach().float().contiguous()
    kept.append(copy)
    return copy.data_ptr()


def _norm(norm: tuple[torch.Tensor, torch.Tensor], kept: list[torch.Tensor], dim: int) -> tuple[int, int] | None:
    weight, bias = (_vector(tensor, kept, dim) for tensor in norm)
    return None if not weight or not bias else (weight, bias)


def _product(weight: Weight, bias: torch.Tensor | None, kept: list[torch.Tensor], out_features: int,
             in_features: int) -> _Product | None:
    """An (out, in) product's description, or None where its weight or bias is not of that shape or readable."""
    table = _table(weight, in_features, kept) if weight.shape[0] == out_features else None
    address = _vector(bias, kept, out_features)
    if table is None or address is None:
        return None
    kind, values, scales = table
    return _Product(weight=values, scales=scales, bias=address, out=out_features, in_=in_features, kind=kind)


def _layer(layer: LayerTensors, kept: list[torch.Tensor], keys: torch.Tensor, dim: int, ffn_dim: int) -> _Layer | None:
    """A block's description, or None where a tensor is not of the block's shapes or not readable."""
    products = [_product(*layer.in_proj, kept, 3 * dim, dim), _product(*layer.out_proj, kept, dim, dim),
                _product(*layer.fc_in, kept, ffn_dim, dim), _product(*layer.fc_out, kept, dim, ffn_dim)]
    norms = [_norm(norm, kept, dim) for norm in (layer.attention_norm, layer.feed_forward_norm)]
    caches_usable = all(cache.dtype == keys.dtype and _usable(cache, tuple(keys.shape))
                        for cache in (layer.keys, layer.values))
    if any(part is None for part in (*products, *norms)) or not caches_usable:
        return None
    kept += [layer.keys, layer.values]
    (attention_weight, attention_bias), (feed_forward_weight, feed_forward_bias) = norms  # type: ignore[misc]
    in_proj, out_proj, fc_in, fc_out = products
    return _Layer(attention_norm_weight=attention_weight, attention_norm_bias=attention_bias, in_proj=in_proj,
                  out_proj=out_proj, feed_forward_norm_weight=feed_forward_weight,
                  feed_forward_norm_bias=feed_forward_bias, fc_in=fc_in, fc_out=fc_out,
                  keys=layer.keys.data_ptr(), values=layer.values.data_ptr())
