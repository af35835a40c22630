"""plm's own one-token kernels (plm.cpu.native): their products against fp64 oracles, the build, and the fallback."""

from __future__ import annotations

import logging
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import plm.cpu.linear as linear_routes
from plm.cpu import native
from plm.cpu.int8 import Int8Weight
from plm.cpu.timing import TimedRoutes


@pytest.fixture(autouse=True)
def built() -> None:
    """Skip where the kernels cannot be built (no C compiler); asked in each test, not at collection, so that the
    build goes to the tests' own cache (conftest's PLM_CACHE), not the user's."""
    if not native.available():
        pytest.skip("plm's kernels could not be built here (no C compiler)")


# (rows, out, in): one element; tails after the 32-wide vector loop (31, 33); rows past the last block of 4 (5, 130);
# int8's integer sums flushed every 4,096 inputs (4,100 and 8,227); input rows past a tile of 4 (6).
SHAPES = [(1, 1, 1), (1, 3, 31), (2, 4, 32), (3, 5, 33), (1, 130, 777), (4, 64, 4100), (1, 9, 8227), (6, 9, 65)]


@pytest.fixture(params=[1, 2], ids=["1 thread", "2 threads"])
def threads(request):
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


@pytest.mark.parametrize("rows, out, inputs", SHAPES)
def test_the_bf16_kernel_is_the_exact_product_of_the_bf16_values_rounded_once_to_bf16(rows, out, inputs, threads):
    check_bf16_kernel(rows, out, inputs)


def check_bf16_kernel(rows: int, out: int, inputs: int) -> None:
    torch.manual_seed(rows * out + inputs)
    x, weight, bias = torch.randn(rows, inputs).bfloat16(), torch.randn(out, inputs).bfloat16(), torch.randn(out)
    bias = bias.bfloat16()
    got = native.bf16_linear(x, weight, bias)
    exact = x.double() @ weight.double().T + bias.double()  # (rows, out)
    # bf16's rounding (half of 2^-7 relative), and fp32 sums' (2^-24 a step, over the sum of |terms|)
    bound = exact.abs() * 2.0**-8 + inputs * 2.0**-24 * (x.double().abs() @ weight.double().abs().T)
    assert got.dtype == torch.bfloat16 and got.shape == (rows, out)
    assert torch.all((got.double() - exact).abs() <= bound), (got.double() - exact).abs().max()


@pytest.mark.parametrize("rows, out, inputs", SHAPES)
def test_the_int8_kernel_is_the_exact_product_of_the_input_rounded_to_int16(rows, out, inputs, threads):
    """The one error is the input's rounding to int16 with a scale per row, max |x_r| / 65534 an element; the
    products are summed exactly. A kernel that rounded the input to bf16 instead, or lost a tail, is off by more."""
    check_int8_kernel(rows, out, inputs)


def check_int8_kernel(rows: int, out: int, inputs: int) -> None:
    torch.manual_seed(rows * out + inputs)
    x, weight, bias = torch.randn(rows, inputs) * 3, Int8Weight.of(torch.randn(out, inputs)), torch.randn(out)
    got = native.int8_linear(x, weight.values, weight.scales, bias)
    dequantized = weight.dequantized().double()
    exact = x.double() @ dequantized.T + bias.double()
    rounding = x.abs().amax(1, keepdim=True).double() / 65534  # (rows, 1)
    bound = rounding * dequantized.abs().sum(1) + exact.abs() * 2.0**-23  # (rows, out): and fp32's final rounding
    assert got.dtype == torch.float32 and got.shape == (rows, out)
    assert torch.all((got.double() - exact).abs() <= bound), ((got.double() - exact).abs() / bound).max()


def test_int8_sums_past_the_range_of_int32_do_not_overflow():
    """Every product at its largest, of one sign: 8,224 of 32,767 x -128 is -8.6e9, past int32's range."""
    inputs = 2 * 4096 + 32
    values, scales = torch.full((4, inputs), -128, dtype=torch.int8), torch.ones(4, dtype=torch.bfloat16)
    got = native.int8_linear(torch.ones(1, inputs), values, scales)
    torch.testing.assert_close(got, torch.full((1, 4), -128.0 * inputs), rtol=1e-6, atol=0)


def test_a_row_with_nan_or_infinity_gives_nan_and_a_zero_row_gives_the_bias():
    weight, bias = Int8Weight.of(torch.randn(6, 40)), torch.randn(6)
    x = torch.randn(4, 40)
    x[0, 3], x[1, 7], x[2] = float("nan"), float("inf"), 0.0
    got = native.int8_linear(x, weight.values, weight.scales, bias)
    assert torch.isnan(got[:2]).all() and torch.equal(got[2], bias) and torch.isfinite(got[3]).all()


def test_the_result_does_not_depend_on_the_number_of_threads():
    weight, x = Int8Weight.of(torch.randn(130, 300)), torch.randn(2, 300)
    before = torch.get_num_threads()
    try:
        results = []
        for count in (1, 2, 3):
            torch.set_num_threads(count)
            results.append((native.int8_linear(x, weight.values, weight.scales),
                            native.bf16_linear(x.bfloat16(), weight.values.bfloat16())))
    finally:
        torch.set_num_threads(before)
    for int8, bf16 in results[1:]:
        assert torch.equal(int8, results[0][0]) and torch.equal(bf16, results[0][1])


def test_a_one_token_bf16_product_takes_the_kernel_when_it_is_timed_fastest(monkeypatch):
    """The timing runs each route once; here the one that called plm's kernel takes half the time of the others."""
    kernel_calls = []
    bf16_linear = native.bf16_linear
    monkeypatch.setattr(native, "bf16_linear", lambda *args: kernel_calls.append(args) or bf16_linear(*args))

    def seconds(product, weight):
        kernel_calls.clear()
        product(weight)
        return 0.5 if kernel_calls else 1.0

    monkeypatch.setattr(linear_routes, "streamed_seconds", seconds)
    monkeypatch.setattr(linear_routes, "ROUTES", TimedRoutes())
    weight, x = torch.randn(512, 256).bfloat16(), torch.randn(1, 256).bfloat16()
    got = linear_routes.linear(x, weight)
    assert list(linear_routes.ROUTES.values()) == ["native"]
    assert torch.equal(got, bf16_linear(x, weight))


def test_a_product_that_records_a_gradient_does_not_go_to_the_kernel():
    weight = torch.randn(512, 256, dtype=torch.bfloat16, requires_grad=True)
    x = torch.randn(1, 256).bfloat16()
    assert not linear_routes.native_takes(x, weight, None)
    assert linear_routes.native_linear(x, weight, None).grad_fn is not None
    with torch.no_grad():
        assert linear_routes.native_takes(x, weight, None)
    assert not linear_routes.native_takes(x.float(), weight.float(), None)  # bf16 only


@pytest.fixture
def fresh_build(tmp_path, monkeypatch):
    """plm.cpu.native as in a new process, with an empty kernel cache."""
    monkeypatch.setenv("PLM_CACHE", str(tmp_path))
    native.library.cache_clear()
    yield tmp_path / "kernels"
    native.library.cache_clear()


@pytest.mark.parametrize("environment", [{"PLM_NATIVE": "0"}, {"CC": "no-such-compiler"}, {"CC": "false"}],
                         ids=["turned off", "no compiler", "a failing compiler"])
def test_without_the_kernels_the_products_are_pytorch_s(environment, fresh_build, monkeypatch, caplog):
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with caplog.at_level(logging.INFO, logger="plm.cpu.native"):
        assert not native.available() and native.instructions() is None
    assert ("kernels are not used" in caplog.text) == ("CC" in environment)  # why, for whoever asks the logger
    assert not list(fresh_build.glob("*")) if fresh_build.exists() else True  # nothing half-built is left
    monkeypatch.setattr(linear_routes, "ROUTES", TimedRoutes())
    weight, x = torch.randn(512, 256).bfloat16(), torch.randn(1, 256).bfloat16()
    torch.testing.assert_close(linear_routes.linear(x, weight), F.linear(x, weight))
    assert "native" not in linear_routes.ROUTES.values()
    int8 = Int8Weight.of(torch.randn(64, 256))
    assert int8.routes(torch.randn(1, 256), None) == ("int8",)


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="x86's instruction-set options")
def test_the_plain_c_kernels_where_the_cpu_has_no_dot_product_instructions(fresh_build, monkeypatch):
    """What an AVX2 CPU (or an ARM one, whose compiler vectorises the same C) runs: the same products, in C."""
    monkeypatch.setenv("CC", "cc -mno-avx512f")  # after -march=native: no AVX-512, hence no BF16 or VNNI either
    assert native.instructions() == "bf16: C; int8: C"
    for shape in SHAPES:
        check_bf16_kernel(*shape)
        check_int8_kernel(*shape)
    test_int8_sums_past_the_range_of_int32_do_not_overflow()


def test_the_library_is_built_once_per_source_compiler_and_machine(fresh_build, monkeypatch):
    first = native.build(fresh_build)
    compiles = []
    real_run = subprocess.run

    def run(command, **options):
        compiles.extend([command] if "-o" in command else [])
        return real_run(command, **options)

    monkeypatch.setattr(native.subprocess, "run", run)
    assert native.build(fresh_build) == first and not compiles  # read from the cache
    monkeypatch.setattr(native, "machine_identity", lambda: "another CPU")
    other = native.build(fresh_build)
    assert other != first and len(compiles) == 1 and Path(other).exists()
    assert sorted(path.name for path in fresh_build.iterdir()) == sorted([first.name, other.name])  # no temporaries


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX owners and modes")
@pytest.mark.parametrize("writable", ["library", "folder"])
def test_a_library_every_user_may_write_is_not_loaded(writable, fresh_build):
    """Loading a library runs its code: in a cache shared between users, one could put code into another's process."""
    library_path = native.build(fresh_build)
    assert native.available()
    native.library.cache_clear()
    changed = library_path if writable == "library" else fresh_build
    changed.chmod(changed.stat().st_mode | 0o002)
    assert not native.available()
    with pytest.raises(PermissionError, match="every user may write"):
        native.build(fresh_build)


def test_processes_building_at_once_each_load_the_one_library(fresh_build):
    """A torchrun job's processes reach their first product together: each compiles to a file of its own and renames
    it into place, so none loads half a library and no temporary file is left."""
    script = "from plm.cpu import native; print(native.available())"
    processes = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
                 for _ in range(3)]
    assert [process.communicate(timeout=120)[0].split() for process in processes] == [["True"]] * 3
    assert len(list(fresh_build.iterdir())) == 1


def test_the_bf16_kernel_rounds_an_output_halfway_between_two_bf16_values_to_the_even_one():
    """Outputs b + 2^-8 with b a bf16 value in [1, 2) (whose ulp is 2^-7), exact in fp32 and halfway between two bf16
    values: torch's rounding (nearest, ties to even) the oracle, which rounding half away from zero (or truncating)
    gets wrong for half of them."""
    bias = (1 + torch.arange(16) * 2.0**-7) * torch.tensor([1.0, -1.0]).repeat(8)  # (16,) bf16 values, both signs
    weight = (torch.full((16, 1), 2.0**-8) * bias.sign()[:, None]).bfloat16()
    x = torch.ones(1, 1, dtype=torch.bfloat16)
    exact = x.float() @ weight.float().T + bias  # exact in fp32: ties
    got = native.bf16_linear(x, weight, bias.bfloat16())
    assert torch.equal(got, exact.bfloat16())
    assert not torch.equal(got.float(), exact)  # ties indeed, not values bf16 holds


def test_the_int8_kernel_rounds_each_input_to_the_nearest_int16_step():
    """Through an identity weight each output is one input: within half a step (max |x_r| / 32767) of it, where
    truncating the input to the step below is up to a whole step off."""
    torch.manual_seed(0)
    weight = Int8Weight.of(torch.eye(70))
    x = torch.randn(3, 70) * 3
    got = native.int8_linear(x, weight.values, weight.scales)
    exact = x.double() @ weight.dequantized().double().T
    step = x.abs().amax(1, keepdim=True).double() / 32767
    bound = step / 2 * weight.dequantized().double().diagonal() + exact.abs() * 2.0**-21  # and fp32 arithmetic
    assert torch.all((got.double() - exact).abs() <= bound), ((got.double() - exact).abs() / bound).max()
