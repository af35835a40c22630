"""Choosing the device and the autocast precision; the memory free on the machine."""

from __future__ import annotations

import contextlib
import os

import torch

from plm.errors import PLMError

DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")  # training's autocast, inference's weights


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` picks CUDA when present; asking for CUDA without one is a PLMError.

    Args:
        name: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.

    Returns:
        The device.

    Raises:
        PLMError: an unknown device name, or CUDA asked for where none is available.
    """
    if name not in DEVICES and not name.startswith("cuda:"):
        raise PLMError(f"unknown device {name!r}; choose auto, cpu or cuda")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise PLMError("`device` cuda was asked for but no CUDA GPU is available")
    return torch.device(name)


def native_bf16_cpu() -> bool:
    """Whether this CPU multiplies bf16 in hardware: AVX512-BF16 or AMX, as PyTorch's CPU probe reports it.

    Elsewhere bf16 products are emulated and slower than fp32, so ``auto`` keeps fp32 there. The environment
    variable ``PLM_CPU_BF16=0`` says no on any CPU, for every process a run starts (the tests set it).

    Returns:
        True on a CPU with AVX512-BF16 or AMX tiles, unless ``PLM_CPU_BF16=0``.
    """
    if os.environ.get("PLM_CPU_BF16") == "0":
        return False
    probes = (torch.cpu._is_avx512_bf16_supported, torch.cpu._is_amx_tile_supported)
    return any(probe() for probe in probes)


def cpu_instruction_set() -> str:
    """The widest vector instructions PyTorch's CPU kernels use here, and bf16 support, for benchmark rows.

    Returns:
        For example ``AVX512 + AMX-BF16``, ``AVX512 + AVX512-BF16`` or ``AVX2``.
    """
    extensions = [name for name, probe in (("AVX512-BF16", torch.cpu._is_avx512_bf16_supported),
                                           ("AMX-BF16", torch.cpu._is_amx_tile_supported)) if probe()]
    return " + ".join([torch.backends.cpu.get_cpu_capability(), *extensions])


def resolve_precision(name: str, device: torch.device) -> torch.dtype:
    """``auto`` is bf16 on a GPU or CPU that has it (`native_bf16_cpu`), fp16 on older GPUs, else fp32.

    Args:
        name: ``auto``, ``fp32``, ``bf16`` or ``fp16``.
        device: the device the model runs on.

    Returns:
        The dtype.

    Raises:
        PLMError: an unknown precision name.
    """
    if name not in PRECISIONS:
        raise PLMError(f"unknown precision {name!r}; choose one of {', '.join(PRECISIONS)}")
    if name == "auto":
        if device.type != "cuda":
            return torch.bfloat16 if device.type == "cpu" and native_bf16_cpu() else torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def autocast(device: torch.device, dtype: torch.dtype) -> contextlib.AbstractContextManager:
    """Mixed precision for the forward pass; a no-op in fp32.

    Args:
        device: the device the forward pass runs on.
        dtype: the precision (from [`resolve_precision`][plm.device.resolve_precision]).

    Returns:
        The context manager: ``torch.autocast``, or one that does nothing in fp32.
    """
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def available_memory() -> int | None:
    """Bytes of memory free now (Linux: MemAvailable), or None where the system does not say.

    Returns:
        The bytes available, or None.
    """
    try:
        with open("/proc/meminfo", encoding="ascii") as info:
            fields = dict(line.split(":", 1) for line in info)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None
