"""plm.cpu.sdpa: bf16 heads trained on the CPU attend in fp32; inference keeps SDPA in bf16."""

import pytest
import torch
import torch.nn.functional as F

from plm.cpu import sdpa as attention


def heads(dtype: torch.dtype, requires_grad: bool) -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(2, 3, 5, 8).to(dtype).requires_grad_(requires_grad) for _ in range(3)]


def sdpa_dtypes(monkeypatch) -> list[torch.dtype]:
    seen: list[torch.dtype] = []
    sdpa = F.scaled_dot_product_attention

    def recording(queries, *args, **kwargs):
        seen.append(queries.dtype)
        return sdpa(queries, *args, **kwargs)

    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", recording)
    return seen


@pytest.mark.parametrize("mask_kind", ["bool", "bias", "causal"])
def test_trained_bf16_heads_attend_in_fp32_with_fp32_gradients(monkeypatch, mask_kind: str) -> None:
    seen = sdpa_dtypes(monkeypatch)
    queries, keys, values = heads(torch.bfloat16, True)
    allowed = torch.ones(2, 1, 5, 5, dtype=torch.bool).tril()
    mask = {"bool": allowed, "bias": torch.zeros(2, 1, 5, 5).masked_fill(~allowed, -1e4).bfloat16(),
            "causal": None}[mask_kind]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = attention.scaled_dot_product_attention(queries, keys, values, mask, 0.0, mask is None, 8**-0.5)
    assert seen == [torch.float32] and out.dtype == torch.bfloat16
    out.float().square().sum().backward()
    # The oracle: fp32 attention of the same bf16 values, differentiated in fp32.
    exact = [t.detach().float().requires_grad_() for t in (queries, keys, values)]
    reference = F.scaled_dot_product_attention(*exact, attn_mask=allowed, scale=8**-0.5)
    reference.bfloat16().float().square().sum().backward()
    torch.testing.assert_close(out.float(), reference.bfloat16().float())
    for ours, want in zip((queries, keys, values), exact):
        torch.testing.assert_close(ours.grad.float(), want.grad, rtol=1e-2, atol=2e-2)


def test_inference_and_fp32_keep_sdpa_as_it_is(monkeypatch) -> None:
    seen = sdpa_dtypes(monkeypatch)
    with torch.no_grad():
        attention.scaled_dot_product_attention(*heads(torch.bfloat16, True), None, 0.0, True, 1.0)  # bf16 inference
    attention.scaled_dot_product_attention(*heads(torch.float32, True), None, 0.0, True, 1.0)
    assert seen == [torch.bfloat16, torch.float32]
