"""scaled_dot_product_attention, with bf16 training on the CPU routed through fp32.

PyTorch's CPU flash attention runs its backward pass slower in bf16 than in fp32: on
the Xeon of the speed page, forward and backward of (8, 4, 128, 64) causal heads took
35 ms in bf16 and 25 ms with the same heads cast to fp32, and with a padding mask,
(32, 4, 128, 64), 158 ms against 45 ms. So where a gradient flows through bf16 heads on
the CPU (training under bf16 autocast), attention takes fp32 copies of them, outside
autocast, and hands back bf16; elsewhere (inference, fp32, a GPU) it is SDPA as it is.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def scaled_dot_product_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None,
    dropout: float,
    is_causal: bool,
    scale: float,
) -> torch.Tensor:
    """``F.scaled_dot_product_attention``, in fp32 where bf16 heads are trained on the CPU.

    Args:
        queries: (B, H, T, hd) the queries.
        keys: (B, H, S, hd) the keys.
        values: (B, H, S, hd) the values.
        mask: boolean (True = may attend) or a float bias broadcast to (B, H, T, S); or None.
        dropout: the attention dropout's rate.
        is_causal: attend causally (``mask`` is then None).
        scale: the factor of the scores Q K^T.

    Returns:
        The (B, H, T, hd) heads' output, in the queries' dtype.
    """
    trained = torch.is_grad_enabled() and (queries.requires_grad or keys.requires_grad or values.requires_grad)
    if not (trained and queries.device.type == "cpu" and queries.dtype == torch.bfloat16):
        return F.scaled_dot_product_attention(
            queries, keys, values, attn_mask=mask, dropout_p=dropout, is_causal=is_causal, scale=scale
        )
    if mask is not None and mask.is_floating_point():
        mask = mask.float()
    with torch.autocast("cpu", enabled=False):
        heads = F.scaled_dot_product_attention(
            queries.float(), keys.float(), values.float(), attn_mask=mask, dropout_p=dropout, is_causal=is_causal,
            scale=scale,
        )
    return heads.to(queries.dtype)
