"""plm serve under load: requests/s and latency for 1, 8 and 32 concurrent clients, batched and one at a time.

A small GPT (gpt2-mini, 4 x 256, random weights, a BPE tokenizer trained on Python's own
documentation in a few seconds: nothing is downloaded) is served twice by ``plm serve`` on
127.0.0.1, each server a process of its own on one torch thread: with dynamic batching
(``--max-batch 32``) and one request at a time (``--max-batch 1``). Each client sends
greedy /generate requests (a prompt from a fixed list, up to 32 new tokens) one after another for
``--seconds``, and the servers take turns at each number of clients. A request counts when
it is answered with 200 and its tokens; every other answer is an error, reported. The load
is bounded: ``--seconds`` per cell and at most ``--max-requests`` requests in it.

The soak (``--soak SECONDS``, 60 by default; 0 skips it) then sends the batched server
``--soak-clients`` (64) clients at once through OpenAI's /v1/completions, each request in turn one of
four kinds: greedy, sampled (temperature 0.8, top-p 0.9, its own seed), streamed (server-sent
events read to ``[DONE]``) and echo (the prompt's log-probabilities, ``max_tokens`` 0, as
lm-evaluation-harness scores). It reports requests/s, p50 and p99 latency for each kind and
all together, the errors (the target is none), and the server's resident memory after the
warm-up and at the end (the target: flat).

    python benchmarks/bench_serve.py                  # 5 s a cell: 30 s of load, and the 60 s soak
    python benchmarks/bench_serve.py --seconds 2 --clients 1 8 --soak 0
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from pydoc_data.topics import topics

import httpx
import torch

import plm
from plm.models import from_preset
from plm.tokenization.tokenizer import Tokenizer

PROMPTS = ["The list type", "A function that returns", "Exceptions are raised when", "The with statement",
           "Dictionaries map keys to", "A generator is", "Class definitions", "The import system"]
NEW_TOKENS = 32


def build_model(directory: Path, seed: int) -> Path:
    """gpt2-mini with random weights and a 2,000-token BPE of Python's reference topics, saved as plm saves."""
    torch.manual_seed(seed)
    tokenizer = Tokenizer.train_bpe([text for text in topics.values()], 2000)
    model = from_preset("gpt2-mini", vocab_size=len(tokenizer))
    return plm.save(model, directory / "gpt", tokenizer)


def start_server(model: Path, max_batch: int) -> tuple[subprocess.Popen, str]:
    """``plm serve`` on a free loopback port, one torch thread; its process and URL once it listens."""
    command = [sys.executable, "-m", "plm.cli.main", "serve", "--model", str(model), "--host", "127.0.0.1",
               "--port", "0", "--max-batch", str(max_batch), "--device", "cpu"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    for line in server.stdout:
        if line.startswith("plm serve: http://"):
            return server, line.split()[2].rstrip("/")
    raise RuntimeError(f"plm serve --max-batch {max_batch} did not start (exit code {server.wait()})")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def load(url: str, clients: int, seconds: float, max_requests: int) -> dict[str, float]:
    """``clients`` clients, each sending its next request when its last is answered, for ``seconds``."""
    latencies: list[float] = []
    errors = sent = tokens = 0
    stop = time.perf_counter() + seconds

    async def client(http: httpx.AsyncClient, number: int) -> None:
        nonlocal errors, sent, tokens
        while time.perf_counter() < stop and sent < max_requests:
            sent += 1
            body = {"prompt": PROMPTS[(number + sent) % len(PROMPTS)], "max_new_tokens": NEW_TOKENS}
            start = time.perf_counter()
            response = await http.post("/generate", json=body)
            if response.status_code == 200 and response.json()["tokens"]:
                latencies.append(time.perf_counter() - start)
                tokens += len(response.json()["tokens"])
            else:
                errors += 1

    begin = time.perf_counter()
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
        await asyncio.gather(*(client(http, number) for number in range(clients)))
    elapsed = time.perf_counter() - begin
    return {"requests/s": len(latencies) / elapsed, "tokens/s": tokens / elapsed,
            **{f"p{p}": percentile(latencies, p / 100) * 1e3 for p in (50, 90, 99)},
            "answered": len(latencies), "errors": errors}


KINDS = ("greedy", "sampled", "streamed", "echo")


def completion(kind: str, prompt: str, seed: int) -> dict:
    """The /v1/completions body of a request of ``kind`` (see :data:`KINDS`)."""
    body = {"model": "gpt", "prompt": prompt, "max_tokens": NEW_TOKENS, "temperature": 0}
    if kind == "sampled":
        body |= {"temperature": 0.8, "top_p": 0.9, "seed": seed}
    elif kind == "streamed":
        body |= {"stream": True}
    elif kind == "echo":
        body |= {"echo": True, "max_tokens": 0, "logprobs": 1}
    return body


async def answered(http: httpx.AsyncClient, kind: str, body: dict) -> bool:
    """Send one request; whether it was answered as asked: 200, and its text, tokens or log-probabilities."""
    if kind == "streamed":
        events = []
        async with http.stream("POST", "/v1/completions", json=body) as response:
            if response.status_code != 200:
                return False
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    events.append(line.removeprefix("data: "))
        return len(events) > 1 and events[-1] == "[DONE]"
    response = await http.post("/v1/completions", json=body)
    if response.status_code != 200:
        print(f"[{kind}] {response.status_code}: {response.text[:500]}", file=sys.stderr)
        return False
    [choice] = response.json()["choices"]
    if kind == "echo":
        return bool(choice["logprobs"]["token_logprobs"])
    # a sampled text may end at once, where the model draws its end-of-text token first: empty, and answered
    return bool(choice["text"]) or choice["finish_reason"] == "stop"


async def soak(url: str, clients: int, seconds: float) -> dict[str, dict[str, float]]:
    """``clients`` clients sending requests of each kind in turn for ``seconds``: per kind, and all together."""
    latencies: dict[str, list[float]] = {kind: [] for kind in KINDS}
    errors = {kind: 0 for kind in KINDS}
    sent = 0
    stop = time.perf_counter() + seconds

    async def client(http: httpx.AsyncClient, number: int) -> None:
        nonlocal sent
        while time.perf_counter() < stop:
            sent += 1
            kind = KINDS[(number + sent) % len(KINDS)]
            start = time.perf_counter()
            try:
                ok = await answered(http, kind, completion(kind, PROMPTS[sent % len(PROMPTS)], sent))
            except httpx.HTTPError:
                ok = False
            if ok:
                latencies[kind].append(time.perf_counter() - start)
            else:
                errors[kind] += 1

    begin = time.perf_counter()
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
        await asyncio.gather(*(client(http, number) for number in range(clients)))
    elapsed = time.perf_counter() - begin
    rows = {kind: (latencies[kind], errors[kind]) for kind in KINDS}
    rows["all"] = ([t for kind in KINDS for t in latencies[kind]], sum(errors.values()))
    return {name: {"requests/s": len(times) / elapsed, "p50": percentile(times, 0.5) * 1e3 if times else 0.0,
                   "p99": percentile(times, 0.99) * 1e3 if times else 0.0, "answered": len(times), "errors": failed}
            for name, (times, failed) in rows.items()}


def resident_mb(process: subprocess.Popen) -> float:
    """The server's resident memory, as the kernel counts it (Linux; the tests read it the same way)."""
    status = Path(f"/proc/{process.pid}/status").read_text().splitlines()
    return int(next(line for line in status if line.startswith("VmRSS:")).split()[1]) / 1024


def print_soak(rows: dict[str, dict[str, float]], clients: int, seconds: float, memory: tuple[float, float]) -> None:
    print(f"\nsoak: {clients} clients for {seconds:g} s on the batched server, /v1/completions, the four kinds in turn")
    print(f"{'kind':<9} {'requests/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'answered':>8} {'errors':>6}")
    for kind, r in rows.items():
        print(f"{kind:<9} {r['requests/s']:>10.1f} {r['p50']:>8.1f} {r['p99']:>8.1f} {r['answered']:>8.0f} "
              f"{r['errors']:>6.0f}")
    start, end = memory
    print(f"server resident memory: {start:,.0f} MB after the warm-up, {end:,.0f} MB at the end "
          f"({end - start:+,.0f} MB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32],
                        help="the cells' numbers of clients; the batched server's --max-batch is the largest")
    parser.add_argument("--seconds", type=float, default=5.0, help="load per cell (number of clients x server)")
    parser.add_argument("--max-requests", type=int, default=20_000, help="at most this many requests per cell")
    parser.add_argument("--soak", type=float, default=60.0, metavar="SECONDS",
                        help="the soak's length on the batched server (0: no soak)")
    parser.add_argument("--soak-clients", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results: dict[tuple[int, str], dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as directory, ExitStack() as servers:
        model = build_model(Path(directory), args.seed)
        urls, processes = {}, {}
        for name, max_batch in (("batched", max(args.clients)), ("one at a time", 1)):
            processes[name], urls[name] = start_server(model, max_batch)
            servers.callback(processes[name].wait, 30)
            servers.callback(processes[name].terminate)
        print(f"gpt2-mini ({sum(p.numel() for p in plm.load(model).parameters()):,} parameters), greedy, "
              f"{NEW_TOKENS} new tokens a request; each server on one torch thread; {args.seconds:g} s a cell")
        for url in urls.values():
            asyncio.run(load(url, 4, 1.0, args.max_requests))  # warm-up: first calls, connection set-up
        for clients in args.clients:
            for name, url in urls.items():
                results[clients, name] = asyncio.run(load(url, clients, args.seconds, args.max_requests))
        if args.soak > 0:
            asyncio.run(soak(urls["batched"], args.soak_clients, 2.0))  # warm-up: each kind's first requests
            before = resident_mb(processes["batched"])
            soaked = asyncio.run(soak(urls["batched"], args.soak_clients, args.soak))
            memory = before, resident_mb(processes["batched"])
    print()
    print(f"{'clients':>7}  {'server':<14} {'requests/s':>10} {'tokens/s':>9} {'p50 ms':>8} {'p90 ms':>8} "
          f"{'p99 ms':>8} {'answered':>8} {'errors':>6}")
    for (clients, name), r in results.items():
        print(f"{clients:>7}  {name:<14} {r['requests/s']:>10.1f} {r['tokens/s']:>9.0f} {r['p50']:>8.1f} "
              f"{r['p90']:>8.1f} {r['p99']:>8.1f} {r['answered']:>8.0f} {r['errors']:>6.0f}")
    for clients in args.clients:
        batched, single = results[clients, "batched"], results[clients, "one at a time"]
        print(f"{clients} clients: batching serves {batched['requests/s'] / single['requests/s']:.2f}x the requests/s, "
              f"at {batched['p50'] / single['p50']:.2f}x the median latency")
    if args.soak > 0:
        print_soak(soaked, args.soak_clients, args.soak, memory)


if __name__ == "__main__":
    main()
