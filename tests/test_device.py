"""Choosing the device and the precision: --precision auto follows what the hardware multiplies natively."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import plm.device
from plm.device import native_bf16_cpu, resolve_precision

CPUINFO = Path("/proc/cpuinfo")


@pytest.mark.skipif(not CPUINFO.exists(), reason="the CPU's flags are read from Linux's /proc/cpuinfo")
def test_the_bf16_probe_agrees_with_the_cpus_own_flags(monkeypatch) -> None:
    monkeypatch.delenv("PLM_CPU_BF16")  # conftest's fp32 for the tests
    flags = {flag for line in CPUINFO.read_text().splitlines() if line.startswith("flags")
             for flag in line.split(":", 1)[1].split()}
    assert native_bf16_cpu() == bool(flags & {"avx512_bf16", "amx_bf16"})


@pytest.mark.parametrize(("native", "expected"), [(True, torch.bfloat16), (False, torch.float32)])
def test_auto_precision_is_bf16_on_a_cpu_that_multiplies_bf16_and_fp32_elsewhere(monkeypatch, native,
                                                                                 expected) -> None:
    monkeypatch.setattr(plm.device, "native_bf16_cpu", lambda: native)
    assert resolve_precision("auto", torch.device("cpu")) == expected
    assert resolve_precision("fp32", torch.device("cpu")) == torch.float32  # a precision named is kept
    assert resolve_precision("bf16", torch.device("cpu")) == torch.bfloat16


def test_plm_cpu_bf16_0_keeps_auto_at_fp32_on_any_cpu(monkeypatch) -> None:
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    monkeypatch.setenv("PLM_CPU_BF16", "1")
    assert native_bf16_cpu()
    monkeypatch.setenv("PLM_CPU_BF16", "0")
    assert not native_bf16_cpu()
