"""plm's own one-token products and decoding step on the CPU, built from C with the machine's C compiler at first use.

Decoding reads every weight once a token, so its speed is that of the products that stream the
weights. PyTorch's bf16 and int8 matrix-vector kernels read them well under the memory bandwidth; the
kernels in ``native.c`` use the CPU's dot-product instructions (AVX512-BF16, AVX512-VNNI) where the
compiler has them, and vectorised C elsewhere. They are one more route that
[`plm.cpu.linear`][plm.cpu.linear] and [`plm.cpu.int8`][plm.cpu.int8] time per shape against PyTorch's
kernels, so a machine where they lose keeps PyTorch's.

The library is compiled once per machine, source and compiler (``-O3 -march=native -fopenmp``, under a
second) into ``$PLM_CACHE/kernels`` and loaded with ctypes; its OpenMP runtime is the one PyTorch
loaded, so its threads are PyTorch's. Where there is no C compiler, or the build fails, or
``PLM_NATIVE=0`` is set, [`library`][plm.cpu.native.library] is None and only PyTorch's kernels are used; the
logger ``plm.cpu.native`` says why at level INFO.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from plm.cache import cache_dir

log = logging.getLogger(__name__)
SOURCES = tuple(Path(__file__).with_name(name) for name in ("native.c", "native_step.c"))  # built into one library
HEADER = Path(__file__).with_name("native.h")  # what they share
ABI = 3  # plm_native_abi() of a library this module can call
FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=gnu11")
BUILD_TIMEOUT_S = 120
_Pointer = ctypes.c_void_p
_Size = ctypes.c_int64
_SIGNATURES = {  # the C functions called, their argument and result types
    "plm_native_abi": ([], ctypes.c_int),
    "plm_native_paths": ([], ctypes.c_char_p),
    "plm_bf16_linear": ([_Pointer, _Size, _Pointer, _Pointer, _Pointer, _Size, _Size, ctypes.c_int], None),
    "plm_int8_linear": ([_Pointer, _Size, _Pointer, _Pointer, _Pointer, _Pointer, _Size, _Size, ctypes.c_int],
                        ctypes.c_int),
    "plm_decoder_step": ([_Pointer, _Pointer, _Pointer, _Size, _Size, _Pointer, _Pointer, ctypes.c_int], ctypes.c_int),
    "plm_activate": ([_Pointer, _Size, ctypes.c_int], None),
}


def compiler() -> list[str]:
    """The C compiler's command: ``$CC``, else ``cc``.

    ``$CC`` may carry options; they come after plm's, so they win (``CC="cc -march=x86-64-v3"`` builds for
    another machine's instructions than this one's).

    Returns:
        The command and its options, as a list.
    """
    return shlex.split(os.environ.get("CC") or "cc")


def compiler_identity(name: str) -> str:
    """The compiler's file, its size and time: another compiler, or this one upgraded, builds anew.

    Args:
        name: the compiler's command.

    Returns:
        Its real path, size in bytes and modification time.

    Raises:
        FileNotFoundError: no such command on the ``PATH``.
    """
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"no C compiler {name!r} on the PATH")
    path = os.path.realpath(found)
    status = os.stat(path)
    return f"{path} {status.st_size} {status.st_mtime_ns}"


def machine_identity() -> str:
    """What a ``-march=native`` build depends on: the CPU's model and instruction-set flags.

    A cache shared between machines (a home directory on a cluster's file system) must not hand one
    machine a library built for another's instructions.

    Returns:
        The CPU's model name and flags where /proc/cpuinfo has them, else the platform's description.
    """
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return f"{platform.machine()} {platform.processor()}"
    wanted = ("model name", "flags", "Features", "CPU part")  # x86, and ARM's names
    return "\n".join(sorted({line for line in lines if line.split(":")[0].strip() in wanted}))


def build(directory: Path) -> Path:
    """Compile the C files into ``directory`` (once: the library is named by what it was built from).

    Concurrent builds (the processes of a torchrun job) each write a temporary file and rename it into
    place, so a reader sees no library or a whole one.

    Args:
        directory: where built libraries are kept.

    Returns:
        The shared library's path.

    Raises:
        OSError: no compiler (FileNotFoundError), the directory cannot be written, or a library found there is not
            this user's alone (PermissionError, [`check_trusted`][plm.cpu.native.check_trusted]).
        subprocess.CalledProcessError: the compiler failed.
        subprocess.TimeoutExpired: the compiler took over ``BUILD_TIMEOUT_S``.
    """
    command = compiler()
    texts = [path.read_text() for path in (*SOURCES, HEADER)]
    key = hashlib.sha256("\0".join([*texts, *command, *FLAGS, compiler_identity(command[0]),
                                    machine_identity()]).encode()).hexdigest()[:16]
    library_path = directory / f"plm-native-{key}.so"
    if library_path.exists():
        check_trusted(directory, library_path)
        return library_path
    directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    check_trusted(directory)
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=".plm-native-", suffix=".so")
    os.close(fd)
    try:
        subprocess.run([command[0], *FLAGS, *command[1:], *map(str, SOURCES), "-o", temporary, "-lm"], check=True,
                       capture_output=True, timeout=BUILD_TIMEOUT_S)
        os.replace(temporary, library_path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    return library_path


def check_trusted(*paths: Path) -> None:
    """Refuse a library (or its folder) that someone else could have written: loading it runs its code here.

    A cache shared between users (``PLM_CACHE`` in a common folder) must not let one of them put code into another's
    process, so the kernels' folder and the library must be this user's, and not writable by every user (a group
    that may write is the user's own group on many systems, whose default umask is 002).

    Args:
        paths: the folder, and the library.

    Raises:
        PermissionError: one of them belongs to another user or is writable by every user.
    """
    if not hasattr(os, "getuid"):  # no POSIX owners (Windows): nothing to compare
        return
    for checked in paths:
        status = checked.stat()
        if status.st_uid != os.getuid() or status.st_mode & 0o002:
            raise PermissionError(f"{checked} belongs to another user or every user may write to it; plm does not "
                                  "load code from it")


@functools.cache
def library() -> ctypes.CDLL | None:
    """The built kernels, loaded (built at the first call in a process, or read from the cache).

    Returns:
        The library, or None where it cannot be had: ``PLM_NATIVE=0``, no C compiler, a failed build.
    """
    if os.environ.get("PLM_NATIVE") == "0":
        return None
    try:
        loaded = ctypes.CDLL(str(build(cache_dir() / "kernels")))
    except (OSError, subprocess.SubprocessError) as error:
        # not an error: PyTorch's kernels do the work; logging.getLogger("plm.cpu.native") at INFO says why
        compiler_said = getattr(error, "stderr", b"") or b""
        log.info("plm's CPU kernels are not used: %s %s", error, compiler_said.decode(errors="replace")[-2000:])
        return None
    for name, (arguments, result) in _SIGNATURES.items():
        function = getattr(loaded, name)
        function.argtypes, function.restype = arguments, result
    return loaded if loaded.plm_native_abi() == ABI else None


def available() -> bool:
    """Whether plm's own kernels can be used in this process (see [`library`][plm.cpu.native.library]).

    Returns:
        True when the library is built and loaded.
    """
    return library() is not None


def instructions() -> str | None:
    """The instructions the built kernels multiply with, for reports: ``bf16: AVX512-BF16; int8: AVX512-VNNI``.

    Returns:
        The description ("C" where the compiler vectorises plain C), or None without the library.
    """
    loaded = library()
    return None if loaded is None else loaded.plm_native_paths().decode()


def usable(*tensors: torch.Tensor | None) -> bool:
    """Whether the kernels can take these tensors: on the CPU, with no gradient to record, and the library loaded.

    Args:
        tensors: the product's input, weight and bias (None for no bias).

    Returns:
        True when the product may go to the kernels.
    """
    # called once a product: plain loops over the few tensors cost a third of all() over generators
    if not available():
        return False
    recording = torch.is_grad_enabled()
    for tensor in tensors:
        if tensor is not None and (not tensor.is_cpu or recording and tensor.requires_grad):
            return False
    return True


def as_float32(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` as contiguous fp32, itself when it is (most calls: a check costs less than a no-op conversion)."""
    return tensor if tensor.dtype == torch.float32 and tensor.is_contiguous() else tensor.float().contiguous()


def bf16_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` in bf16, summed in fp32, by plm's kernel (check [`usable`][plm.cpu.native.usable]).

    Args:
        x: (..., in) bf16 input.
        weight: (out, in) bf16 weight, contiguous.
        bias: (out,) bf16, or None.

    Returns:
        The (..., out) bf16 product.
    """
    out_features, in_features = weight.shape
    x = x if x.is_contiguous() else x.contiguous()  # (..., in): the kernel reads its N = numel / in rows in place
    y = x.new_empty(*x.shape[:-1], out_features)  # (..., out)
    if bias is not None and not bias.is_contiguous():
        bias = bias.contiguous()
    loaded = library()
    assert loaded is not None, "plm.cpu.native.bf16_linear without the library: check usable() first"
    loaded.plm_bf16_linear(x.data_ptr(), x.numel() // in_features, weight.data_ptr(),
                           0 if bias is None else bias.data_ptr(), y.data_ptr(), out_features, in_features,
                           torch.get_num_threads())
    return y


def int8_linear(x: torch.Tensor, values: torch.Tensor, scales: torch.Tensor,
                bias: torch.Tensor | None = None) -> torch.Tensor:
    """The product ``x (W * scales)^T + bias`` in fp32, W int8 with a bf16 scale per row, by plm's kernel.

    Each row of x is rounded to int16 with its own scale (max |x_r| / 32767) and the products are
    summed exactly in integers, so the error is that of the rounding: at most max |x_r| / 65534 an
    element, finer than bf16's input for all but the smallest elements.

    Args:
        x: (..., in) fp32 input.
        values: (out, in) int8 weight, contiguous.
        scales: (out,) bf16 scales.
        bias: (out,) fp32, or None.

    Returns:
        The (..., out) fp32 product.

    Raises:
        MemoryError: no memory for the rounded input.
    """
    out_features, in_features = values.shape
    x = as_float32(x)  # (..., in): the kernel reads its N = numel / in rows in place
    y = x.new_empty(*x.shape[:-1], out_features)  # (..., out)
    bias = None if bias is None else as_float32(bias)
    if scales.dtype != torch.bfloat16 or not scales.is_contiguous():
        scales = scales.to(torch.bfloat16).contiguous()  # held here: the kernel reads it after this line
    loaded = library()
    assert loaded is not None, "plm.cpu.native.int8_linear without the library: check usable() first"
    rows = x.numel() // in_features
    if not loaded.plm_int8_linear(x.data_ptr(), rows, values.data_ptr(), scales.data_ptr(),
                                  0 if bias is None else bias.data_ptr(), y.data_ptr(), out_features, in_features,
                                  torch.get_num_threads()):
        raise MemoryError(f"no memory to round a ({rows}, {in_features}) input to int16")
    return y
