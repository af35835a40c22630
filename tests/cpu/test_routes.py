"""plm.cpu.linear's one-token route: the same numbers as F.linear, chosen by timing it as decoding uses it, and
timed again when the machine changes."""

import importlib
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from plm.cpu import timing
from plm.cpu.timing import FIRST_RETIME_S, STREAM_BYTES, TRIALS, TimedRoutes, streamed_seconds

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
    monkeypatch.setattr(routes, "ROUTES", TimedRoutes())
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


class FakeMachine:
    """A machine on a fake clock: a call by a route takes ``cost[route]`` seconds of it (and computes nothing, so
    that the tests' thousands of calls take no real time); the first timing, over streamed copies, gives ``timed``
    (the costs themselves unless a test says otherwise); a timing again times the calls themselves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.cost = {"plain": 2e-5, "blocked": 1e-5, "vector": 3e-5}
        self.timed = self.cost

    def clock(self) -> float:
        return self.now

    def route(self, name: str) -> Callable:
        def run(*args) -> None:
            self.now += self.cost[name]
            self.ran = name

        return run

    def streamed_seconds(self, product: Callable, weight: torch.Tensor) -> float:
        product(weight)
        return self.timed[self.ran]

    @property
    def timings(self) -> int:
        """How many times every route of KEY was timed."""
        return routes.ROUTES.watches[KEY].timings


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> FakeMachine:
    machine = FakeMachine()
    monkeypatch.setattr(timing, "clock", machine.clock)
    monkeypatch.setattr(routes, "ROUTES", TimedRoutes())
    monkeypatch.setattr(routes, "streamed_seconds", machine.streamed_seconds)
    for name in list(routes.ONE_TOKEN_ROUTES):
        monkeypatch.setitem(routes.ONE_TOKEN_ROUTES, name, machine.route(name))
    return machine


ONE_ROW, WEIGHT = torch.randn(1, 256), torch.randn(256, 256)
KEY = routes.route_key(1, WEIGHT)


def decode(calls: int) -> None:
    for _ in range(calls):
        routes.linear(ONE_ROW, WEIGHT)


def test_a_route_chosen_in_a_slow_spell_is_timed_again_and_left_once_the_machine_is_quiet(machine) -> None:
    """Warmed up with another process on one of two cores, the one-thread matrix-vector route won and was kept:
    30 tok/s where 65 were possible once the machine was quiet. Its own calls run as fast as before, so only the
    timing again after a while in wall time finds the two-thread route faster."""
    machine.cost = {"plain": 2e-3, "blocked": 1e-3, "vector": 1.5e-3}
    machine.timed = {"plain": 4e-3, "blocked": 3e-3, "vector": 1.5e-3}  # at first use, under load
    decode(1)
    assert routes.ROUTES[KEY] == "vector"
    machine.timed = machine.cost  # the load is gone
    decode(int(1.2 * FIRST_RETIME_S / 1.5e-3))  # past the first timing again
    assert routes.ROUTES[KEY] == "blocked"
    assert machine.timings == 2


def test_a_timing_again_keeps_a_winner_that_another_route_beats_by_a_hair(machine) -> None:
    """Routes that round differently should not swap back and forth between timings that differ by noise."""
    machine.cost = {"plain": 2e-3, "blocked": 1e-3, "vector": 3e-3}
    decode(1)
    machine.cost = machine.timed = {"plain": 0.96e-3, "blocked": 1e-3, "vector": 3e-3}
    decode(int(1.2 * FIRST_RETIME_S / 1e-3))  # past the first timing again
    assert machine.timings == 2 and routes.ROUTES[KEY] == "blocked"


def test_the_winner_s_calls_changing_speed_do_not_time_every_route_again(machine) -> None:
    """A watch of the winner's own calls saw the cache, not the load: after a timing streamed 64 MB through it,
    gpt2-mini's weights were back in it a few tokens later, 1.5x faster, and every route was timed again every
    few tokens (100 tok/s where 650 were possible)."""
    decode(1)
    for cost in (3e-5, 1e-5 / 3, 1e-5) * 100:
        machine.cost["blocked"] = cost
        decode(10)
    assert machine.now < FIRST_RETIME_S and machine.timings == 1


def test_a_steady_machine_times_every_route_a_handful_of_times(machine) -> None:
    machine.cost = {"plain": 2e-3, "blocked": 1e-3, "vector": 3e-3}
    decode(int(60 / 1e-3))  # a minute on the fake clock
    assert routes.ROUTES[KEY] == "blocked"
    assert machine.timings == 4  # at first use, then 5, 10, 20 s of use apart


def test_a_timing_again_times_the_calls_themselves_and_changes_no_output(machine, monkeypatch) -> None:
    """No copies streamed (0.2-0.3 s a model each time, paid inside a short benchmark's runs): the next calls time
    each route TRIALS times, the fastest call counting, and the winner computes every result (routes round
    differently), so a route on trial that is not the winner costs a call more."""
    streamed = []
    first_timing = machine.streamed_seconds
    monkeypatch.setattr(routes, "streamed_seconds",
                        lambda product, weight: streamed.append(1) or first_timing(product, weight))
    ran = []
    for name in list(routes.ONE_TOKEN_ROUTES):
        monkeypatch.setitem(routes.ONE_TOKEN_ROUTES, name,
                            lambda *args, run=machine.route(name), name=name: ran.append(name) or run(*args))
    decode(1)
    assert len(streamed) == 3 and ran[-1] == "blocked"  # the first timing, a route each; then the winner's call
    machine.now += FIRST_RETIME_S
    ran.clear()
    decode(3 * TRIALS)
    assert len(streamed) == 3 and machine.timings == 2
    trials = [name for name in ran if name != "blocked"]
    assert sorted(trials) == sorted(["plain", "vector"] * TRIALS)
    assert ran.count("blocked") == TRIALS + len(trials) + 0  # its own trials, and the result of every other one
