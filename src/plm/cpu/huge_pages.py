"""Inference weights in huge pages: a decoding step reads every weight, and 4 KiB pages cost it a TLB miss each.

Decoding a token streams every weight matrix from memory. With the kernel's ordinary 4 KiB pages,
GPT-2 124M's bf16 weights are 60,000 pages a token, each a TLB miss at its first read: plm's own
one-token products read 21.7 GB/s of weights inside a decoding step, and 26.0 GB/s with the same
weights in 2 MiB pages (11.4 against 9.5 ms of products a token, the vocabulary's product at 22.7
against 30.9 GB/s). PyTorch allocates in huge pages only when ``THP_MEM_ALLOC_ENABLE=1`` is set
before it starts, and then for every large tensor, activations and gradients included.
[`into_huge_pages`][plm.cpu.huge_pages.into_huge_pages] moves only a model's weights: it copies
them, packed, into arenas of ``ARENA_BYTES`` whose memory is asked for in huge pages
(``madvise(MADV_HUGEPAGE)`` before the first touch), and points each parameter and buffer at its
copy, then asks the kernel to collapse into huge pages what the first touch left in small ones
(``MADV_COLLAPSE``, Linux 6.1 on). On Linux with transparent huge pages in ``madvise`` or ``always``
mode; elsewhere it changes nothing.
"""

from __future__ import annotations

import ctypes
import functools
import platform
from pathlib import Path
from typing import TypeVar

import torch
from torch import nn

HUGE_PAGE = 2 << 20  # x86-64's and arm64's (4 KiB base pages) transparent huge page
ARENA_BYTES = 64 << 20  # weights are copied an arena at a time: the copy holds at most this much more memory
ALIGNMENT = 64  # bytes between tensors in an arena: an AVX-512 register, as plm.cpu.int8's kernel needs
MADV_HUGEPAGE = 14  # Linux's values (asm-generic/mman-common.h)
MADV_COLLAPSE = 25  # Linux 6.1 and later; refused (EINVAL) before
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")

ModelT = TypeVar("ModelT", bound=nn.Module)


@functools.cache
def huge_pages_available() -> bool:
    """Whether this system gives a region huge pages when asked: Linux, with THP not ``[never]``.

    Returns:
        True on such a system.
    """
    if platform.system() != "Linux":
        return False
    try:
        return "[never]" not in THP_SETTING.read_text()
    except OSError:
        return False


def arena(nbytes: int) -> torch.Tensor:
    """Untouched memory for ``nbytes``, starting at a huge page boundary, asked for in huge pages.

    Args:
        nbytes: the bytes wanted.

    Returns:
        A (nbytes,) uint8 tensor whose memory the kernel backs with huge pages where it can.

    Raises:
        OSError: madvise refused.
    """
    length = -(-nbytes // HUGE_PAGE) * HUGE_PAGE  # whole huge pages (madvise's), all inside the allocation
    memory = torch.empty(length + HUGE_PAGE, dtype=torch.uint8)  # large: mapped, not touched, by the allocator
    start = -memory.data_ptr() % HUGE_PAGE
    region = memory[start : start + nbytes]
    if madvise(region, MADV_HUGEPAGE) != 0:
        raise OSError(ctypes.get_errno(), "madvise(MADV_HUGEPAGE) failed")
    return region


def madvise(region: torch.Tensor, advice: int) -> int:
    """``madvise`` over the whole huge pages of an arena's ``region``.

    Args:
        region: an arena, as [`arena`][plm.cpu.huge_pages.arena] gives it.
        advice: ``MADV_HUGEPAGE`` or ``MADV_COLLAPSE``.

    Returns:
        madvise's result: 0, or -1 with ``ctypes.get_errno()`` saying why.
    """
    length = -(-region.numel() // HUGE_PAGE) * HUGE_PAGE
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.madvise(ctypes.c_void_p(region.data_ptr()), ctypes.c_size_t(length), advice))


def weight_storages(model: nn.Module) -> list[list[torch.Tensor]]:
    """The model's parameters and buffers on the CPU that are worth moving, grouped by the memory they share.

    Tensors that share a storage (tied weights that are distinct tensors, a view of another) are moved
    together, so that they share the copy as they shared the original.

    Args:
        model: the model.

    Returns:
        For each storage of a page (4 KiB) or more, in the order the model holds them, the tensors on it.
    """
    groups: dict[int, list[torch.Tensor]] = {}
    for tensor in [*model.parameters(), *model.buffers()]:
        storage = tensor.untyped_storage()
        if tensor.device.type == "cpu" and storage.nbytes() >= 4096:
            groups.setdefault(storage.data_ptr(), []).append(tensor)
    return list(groups.values())


def into_huge_pages(model: ModelT) -> ModelT:
    """Copy ``model``'s weights into huge-page arenas, in place; returns the model (unchanged where there are none).

    Each parameter and buffer keeps its identity (a tied output layer stays tied, an optimizer's or a hook's
    references stay valid): only its ``data`` points at the copy, at the same offset and strides in a copy of
    its whole storage. The outputs are the same, bit for bit.

    Args:
        model: the model, on the CPU.

    Returns:
        The model.
    """
    if not huge_pages_available():
        return model
    groups = weight_storages(model)
    with torch.no_grad():
        while groups:
            batch: list[list[torch.Tensor]] = []
            size = 0
            while groups and (not batch or size + storage_bytes(groups[0]) <= ARENA_BYTES):
                size += -(-storage_bytes(groups[0]) // ALIGNMENT) * ALIGNMENT
                batch.append(groups.pop(0))
            try:
                memory = arena(size)
            except OSError:
                return model
            offset = 0
            for group in batch:
                nbytes = storage_bytes(group)
                copy = memory[offset : offset + nbytes]  # (nbytes,) uint8: the whole storage, byte for byte
                copy.copy_(torch.empty(0, dtype=torch.uint8).set_(group[0].untyped_storage()))
                for tensor in group:
                    typed = copy.view(tensor.dtype)  # as_strided's offset counts from the arena's own start
                    tensor.data = typed.as_strided(tensor.shape, tensor.stride(),
                                                   typed.storage_offset() + tensor.storage_offset())
                offset += -(-nbytes // ALIGNMENT) * ALIGNMENT
            # The first touch got huge pages where free ones were at hand; collapse what fell back to 4 KiB pages
            # (a machine that has run a while: 72% of a benchmark's weights were in huge pages without this).
            madvise(memory, MADV_COLLAPSE)
    return model


def storage_bytes(group: list[torch.Tensor]) -> int:
    """The bytes of the storage the tensors of ``group`` share."""
    return group[0].untyped_storage().nbytes()
