"""plm.cpu.linear's one-token route: the same numbers as F.linear, chosen by timing it as decoding uses it."""

import importlib

import pytest
import torch
import torch.nn.functional as F

from plm.cpu.timing import STREAM_BYTES, streamed_seconds

routes = importlib.import_module("plm.cpu.linear")  # plm.core re-exports the function ``linear`` under that name


@pytest.mark.parametrize("out_features", [768, 1030])  # 1030: two rows left over after 4 blocks, like GPT-2's 50,257
@pytest.mark.parametrize("rows", [1, 3])
def test_blocked_product_is_f_linear(out_features: int, rows: int) -> None:
    torch.manual_seed(0)
    x, weight, bias = torch.randn(rows, 1, 256), torch.randn(out_features, 256), torch.randn(out_features)
    # sums of 256 products in another order: a few ulps apart, and more on CPUs with wider vectors
    close = {"rtol": 1e-5, "atol": 1e-4}
    torch.testing.assert_close(routes.blocked_linear(x, weight, bias), F.linear(x, weight, bias), **close)
    torch.testing.assert_close(routes.blocked_linear(x, weight, None), F.linear(x, weight), **close)


def test_a_route_is_timed_on_copies_that_do_not_fit_the_cache() -> None:
    """Timed on one matrix again and again, MKL's product won from the L2 cache and lost 2x in decoding."""
    weight = torch.randn(256, 256)  # 256 KiB
    seen: list[torch.Tensor] = []
    streamed_seconds(seen.append, weight, repeats=1)
    sweep = seen[len(seen) // 2 :]  # the warm-up sweep, then the timed one
    assert len({matrix.data_ptr() for matrix in sweep}) == len(sweep) == STREAM_BYTES // (256 * 256 * 4)
    assert all(torch.equal(matrix, weight) for matrix in sweep)


def test_a_weight_larger_than_the_cache_is_timed_as_it_is() -> None:
    weight = torch.empty(STREAM_BYTES // 4 + 1)[:, None].expand(-1, 2)  # no copy of a matrix this large
    seen: list[torch.Tensor] = []
    streamed_seconds(seen.append, weight, repeats=1)
    assert [matrix.data_ptr() for matrix in seen] == [weight.data_ptr()] * 2


def test_each_shape_takes_the_route_that_timed_faster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(routes, "ROUTES", {})
    seconds = {768: {"plain": 2.0, "blocked": 1.0, "vector": 3.0}, 1024: {"plain": 2.0, "blocked": 3.0, "vector": 1.5}}
    ran: list[str] = []
    for name, route in list(routes.ONE_TOKEN_ROUTES.items()):
        monkeypatch.setitem(routes.ONE_TOKEN_ROUTES, name,
                            lambda *args, name=name, route=route: ran.append(name) or route(*args))

    def fake_seconds(product, weight: torch.Tensor) -> float:
        ran.clear()
        product(weight)
        return seconds[weight.shape[0]][ran[0]]

    monkeypatch.setattr(routes, "streamed_seconds", fake_seconds)
    for out_features in seconds:
        routes.linear(torch.randn(1, 256), torch.randn(out_features, 256))
    routes.linear(torch.randn(2, 256), torch.randn(1024, 256))  # two rows: no matrix-vector route to time
    threads = torch.get_num_threads()
    assert routes.ROUTES == {(1, 768, 256, threads, torch.float32): "blocked",
                             (1, 1024, 256, threads, torch.float32): "vector",
                             (2, 1024, 256, threads, torch.float32): "plain"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_one_token_route_is_f_linear(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x, weight, bias = torch.randn(1, 1, 256, dtype=dtype), torch.randn(1030, 256, dtype=dtype), torch.randn(1030)
    bias = bias.to(dtype)
    close = {"rtol": 1e-5, "atol": 1e-4} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 5e-2}
    for name, route in routes.ONE_TOKEN_ROUTES.items():
        torch.testing.assert_close(route(x, weight, bias), F.linear(x, weight, bias), **close, msg=name)
    assert routes.measured_case(x, weight)  # bf16 weights decode through the timed routes too


def test_autocast_products_are_left_to_pytorch() -> None:
    """The wide route under autocast returned fp32 and ran its backward in fp32: slower than F.linear in bf16."""
    x, weight = torch.randn(8, 64, requires_grad=True), torch.randn(routes.MIN_CHUNKED_FEATURES, 64, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = routes.linear(x, weight)
    assert y.dtype == torch.bfloat16 == F.linear(x.bfloat16(), weight.bfloat16()).dtype
