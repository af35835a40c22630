"""plm serve under random JSON: no request fails another, every refusal comes in its endpoint's error shape.

Hypothesis throws bodies at every POST endpoint (wrong types, huge and negative numbers, NaN, nested lists,
unknown fields, empty and huge strings, bytes that are not JSON), many of them an ordinary body with a field or two
replaced, so that they reach past the first check. Meanwhile ordinary clients send ordinary requests to the same
server, and each must be answered as it is alone.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

import plm
from plm.data.dates import date_pairs
from plm.data.sentence_pairs import Seq2SeqTokenizers
from plm.models import from_preset
from plm.serve import BackgroundServer, create_app, load_service
from plm.serve.requests import FIELDS
from plm.tasks import task_model
from tests.serve.tiny_models import save_gpt_and_bert

EXAMPLES = 200  # random requests a run (new ones each run, besides PINNED): 4 to 8 s on two cores
DEADLINE = timedelta(seconds=20)  # for one: a hang, not a slow machine
PINNED = [  # requests that were a 500 (or would be without their check), tried first on every run
    ("/generate", {"model": "gpt", "prompt": "The cat", "sample": True, "seed": 2**64}),
    ("/generate", {"model": "gpt", "prompt": "The cat", "seed": -(2**63) - 1}),
    ("/v1/completions", {"model": "gpt", "prompt": "The cat", "seed": 2**64 - 1, "n": 2}),
    ("/v1/completions", {"model": "gpt", "prompt": "The cat", "top_p": 0}),
    ("/v1/completions", {"model": "gpt", "prompt": [0, 1, 10**6]}),
    ("/v1/embeddings", {"model": "bert", "input": ""}),
    ("/generate", {"model": "gpt", "prompt": "The cat", "temperature": 10**400}),  # no float holds it
    ("/generate", {"model": "gpt", "prompt": "The cat", "sample": True, "temperature": 1e-320}),
    ("/v1/completions", {"model": "gpt", "prompt": "The cat", "top_p": 1e-320}),  # 0 as a float32
]

# Each endpoint, the name its fields go by in FIELDS, and an ordinary body that random values replace fields of.
ENDPOINTS = {
    "/generate": ("generate", {"model": "gpt", "prompt": "The cat", "max_new_tokens": 4}),
    "/fill-mask": ("fill-mask", {"model": "bert", "text": "the [MASK] reads", "guesses": 2}),
    "/embed": ("embed", {"model": "bert", "texts": ["The cat reads"]}),
    "/translate": ("translate", {"model": "dates", "text": "the fifth of may", "beam": 2}),
    "/classify": ("classify", {"model": "clf", "text": "The cat reads"}),
    "/attention": ("attention", {"model": "bert", "text": "The cat reads", "layer": 0, "head": 0}),
    "/v1/completions": ("v1/completions", {"model": "gpt", "prompt": "The cat", "max_tokens": 4}),
    "/v1/embeddings": ("v1/embeddings", {"model": "bert", "input": "The cat reads"}),
}

# What ordinary clients send meanwhile, each answered as it is alone.
ORDINARY = [
    ("/generate", {"model": "gpt", "prompt": "a dog likes the", "max_new_tokens": 8}),
    ("/generate", {"model": "gpt", "prompt": "The cat", "max_new_tokens": 8, "sample": True, "seed": 7}),
    ("/v1/completions", {"model": "gpt", "prompt": ["The list", "My friend"], "max_tokens": 6, "temperature": 0}),
    ("/v1/completions", {"model": "gpt", "prompt": "The cat", "max_tokens": 6, "seed": 3}),
    ("/v1/completions", {"model": "gpt", "prompt": [5, 6, 7], "max_tokens": 0, "echo": True, "logprobs": 1}),
    ("/v1/embeddings", {"model": "bert", "input": ["The cat reads", "a dog"]}),
    ("/translate", {"model": "dates", "text": "the fifth of may", "beam": 2}),
]

integers = st.one_of(st.integers(-3, 70), st.integers(), st.sampled_from(  # small ones, and the edges of types
    [2**31, 2**53 + 1, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 2**64 - 1, 2**64, 10**30, -(10**30), 10**400]))
numbers = st.one_of(integers, st.floats(), st.floats(-3, 3))  # NaN and the infinities among st.floats()
strings = st.one_of(st.text(max_size=12), st.sampled_from(
    ["", " ", "The cat", "the [MASK] reads", "[MASK] [MASK]", "<|endoftext|>", "\x00", "é" * 300,
     "The cat reads the book. " * 2000]))
values = st.recursive(
    st.one_of(st.none(), st.booleans(), numbers, strings),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8,
)
token_ids = st.lists(st.one_of(st.integers(0, 299), integers), max_size=80)
KINDS = {  # values of a field's own JSON type, the ones that reach past the type check
    "integer": integers, "number": numbers, "boolean": st.booleans(), "string": strings, "object": values,
    "strings": st.lists(strings, max_size=4),
    "string or strings": st.one_of(strings, st.lists(strings, max_size=4)),
    "prompt": st.one_of(strings, st.lists(strings, max_size=4), token_ids, st.lists(token_ids, max_size=3)),
}


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, bytes]:
    """A path and a body: mostly an ordinary body with fields replaced or added (most of them values of the field's
    own type, out of its range), else random fields alone; now and then a body that is not JSON."""
    path = draw(st.sampled_from(sorted(ENDPOINTS)))
    endpoint, ordinary = ENDPOINTS[path]
    fields = FIELDS[endpoint]
    names = draw(st.lists(st.sampled_from([*fields, "model", "unknown_field"]), min_size=1, max_size=3, unique=True))
    changed = {name: draw(draw(st.sampled_from([KINDS[fields[name].kind]] * 3 + [values])) if name in fields
                          else values) for name in names}
    body = {**ordinary, **changed} if draw(st.sampled_from([True] * 4 + [False])) else changed
    data = json.dumps(body).encode()  # NaN and Infinity as Python's JSON writes them
    kind = draw(st.sampled_from(["json"] * 14 + ["half", "bytes"]))
    if kind == "bytes":
        return path, draw(st.binary(max_size=16))
    return path, data[: len(data) // 2] if kind == "half" else data


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random GPT, BERT (with its MLM head), classifier on the BERT and Transformer on dates."""
    root = tmp_path_factory.mktemp("fuzz")
    bert, wordpiece = save_gpt_and_bert(root, bert_heads=("mlm",))
    plm.save(task_model(bert, "classify", labels=2, label_names=("bad", "good")), root / "clf", wordpiece)
    tokenizers = Seq2SeqTokenizers.train(date_pairs(50, seed=0), vocab_size=300)
    plm.save(from_preset("transformer-micro", vocab_size=len(tokenizers.source)), root / "dates")
    tokenizers.save(root / "dates")
    return root


@pytest.fixture(scope="module")
def services(model_dirs: Path) -> list:
    return [load_service(model_dirs / name, name, "cpu") for name in ("gpt", "bert", "clf", "dates")]


def comparable(answer: dict[str, Any]) -> dict[str, Any]:
    """An answer without what differs from one request to the next (ids, times)."""
    return {name: value for name, value in answer.items() if name not in ("id", "created")}


def same(batched: Any, alone: Any) -> bool:
    """Equal answers, numbers to rounding (a batch's arithmetic may differ from one row's in the last bits)."""
    if isinstance(batched, float) and isinstance(alone, float):
        return abs(batched - alone) <= 1e-4
    if isinstance(batched, dict) and isinstance(alone, dict):
        return batched.keys() == alone.keys() and all(same(batched[key], alone[key]) for key in batched)
    if isinstance(batched, list) and isinstance(alone, list):
        return len(batched) == len(alone) and all(map(same, batched, alone))
    return batched == alone


@contextmanager
def ordinary_clients(url: str, expected: list[dict], clients: int = 2) -> Iterator[dict[str, Any]]:
    """Clients that send the ORDINARY requests in turn until the block ends; yields their tally: the requests
    ``answered`` and the ``problems`` (an answer other than the one alone)."""
    tally: dict[str, Any] = {"answered": 0, "problems": []}
    stop = threading.Event()

    def client(start: int) -> None:
        with httpx.Client(base_url=url, timeout=60) as http:
            turn = start
            while not stop.is_set():
                path, body = ORDINARY[turn % len(ORDINARY)]
                answer = http.post(path, json=body)
                if answer.status_code != 200 or not same(comparable(answer.json()), expected[turn % len(ORDINARY)]):
                    tally["problems"].append(f"{path} {body}: {answer.status_code} {answer.text[:300]}")
                tally["answered"] += 1
                turn += 1
                stop.wait(0.02)  # beside the random requests, not in place of them

    threads = [threading.Thread(target=client, args=(start,)) for start in range(clients)]
    for thread in threads:
        thread.start()
    try:
        yield tally
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def check_answer(path: str, answer: httpx.Response) -> None:
    """Never a 500; a refusal in the endpoint's own error shape, on one line; an answer that is JSON (or a stream
    of events without an error)."""
    assert answer.status_code in (200, 400, 404, 413), (path, answer.status_code, answer.text[:500])
    if answer.status_code == 200:
        if answer.headers["content-type"].startswith("text/event-stream"):  # no event says that generation failed
            events = answer.text.strip().split("\n\n")
            assert not any(event.startswith("event: error") or event.startswith('data: {"error"') for event in events)
        else:
            answer.json()
        return
    error = answer.json()
    if path.startswith("/v1/"):
        assert set(error) == {"error"} and set(error["error"]) == {"message", "type", "param", "code"}, error
        body = error["error"]
        assert body["type"] == "invalid_request_error" and isinstance(body["message"], str)
        assert all(body[name] is None or isinstance(body[name], str) for name in ("param", "code"))
        message = body["message"]
    else:
        assert set(error) == {"error"} and isinstance(error["error"], str), error
        message = error["error"]
    assert message and "\n" not in message and "internal error" not in message


def pinned(test: Any) -> Any:
    """``test`` with the PINNED requests as explicit examples."""
    for path, body in PINNED:
        test = example(request=(path, json.dumps(body).encode()))(test)
    return test


def test_random_requests_never_fail_the_server_or_the_requests_beside_them(services: list) -> None:
    with TestClient(create_app(services, max_batch=1)) as alone:
        expected = [comparable(alone.post(path, json=body).json()) for path, body in ORDINARY]
    tried = []

    @settings(max_examples=EXAMPLES, deadline=DEADLINE, database=None, suppress_health_check=list(HealthCheck))
    @given(request=requests())
    @pinned
    def one(http: httpx.Client, request: tuple[str, bytes]) -> None:
        path, data = request
        tried.append(path)
        check_answer(path, http.post(path, content=data, headers={"Content-Type": "application/json"}))

    with BackgroundServer(create_app(services)) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        with ordinary_clients(server.url, expected) as ordinary:
            one(http)
        assert http.get("/health").json()["status"] == "ok"
    print(f"{len(tried)} random requests, {ordinary['answered']} ordinary ones beside them")
    assert ordinary["problems"] == [] and ordinary["answered"] >= len(ORDINARY)
    assert len(tried) >= EXAMPLES and set(tried) == set(ENDPOINTS)
