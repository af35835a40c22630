"""Shared fixtures: a small text corpus and an isolated plm cache per test session."""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path

import pytest
import torch

from plm.core import CausalLMOutput, KVCache
from plm.data.dates import date_pairs
from plm.models import CausalLM

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (``make test`` runs a worker per core), each worker and the processes it starts take one
    thread: two workers of two threads each on two cores would wait on each other.

    The processes a test starts (plm, torchrun's workers) print every thread's Python stack should they die of a
    signal, into the output a failing test shows: a rare abort at exit is otherwise a bare "exitcode -6".
    """
    os.environ.setdefault("PYTHONFAULTHANDLER", "1")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)


@pytest.fixture(scope="session", autouse=True)
def plm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Token-id caches of the tests go to a temporary directory, not the user's cache.

    The default corpus is expensive to build, so it is shared with the user's cache
    by linking the corpus files, when they exist.
    """
    cache = tmp_path_factory.mktemp("plm-cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("PLM_CACHE", str(cache))
    yield cache
    mp.undo()


@pytest.fixture(scope="session", autouse=True)
def fp32_on_every_cpu() -> None:
    """The tests train in fp32 on every CPU, as their fp32 references do, in this process and those it starts.

    ``--precision auto`` picks bf16 on a CPU with AVX512-BF16 or AMX; the tests of bf16 ask for it by name
    (or unset ``PLM_CPU_BF16``), so that CI's CPU does not change what a test checks.
    """
    mp = pytest.MonkeyPatch()
    mp.setenv("PLM_CPU_BF16", "0")
    yield
    mp.undo()


SUBJECTS = ["the cat", "a dog", "the model", "my friend", "the list", "a tokenizer"]
VERBS = ["reads", "returns", "sees", "likes", "builds", "sorts"]
OBJECTS = ["the book", "a value", "the answer", "every token", "the data", "a string"]


def synthetic_sentence(rng: random.Random) -> str:
    """One sentence of a tiny grammar: learnable, deterministic, no download."""
    return f"{rng.choice(SUBJECTS).capitalize()} {rng.choice(VERBS)} {rng.choice(OBJECTS)}"


def synthetic_text(paragraphs: int = 200, seed: int = 0) -> str:
    """English-like paragraphs of :func:`synthetic_sentence`, separated by blank lines."""
    rng = random.Random(seed)
    lines = [" ".join(f"{synthetic_sentence(rng)}." for _ in range(rng.randint(2, 5))) for _ in range(paragraphs)]
    return "\n\n".join(lines) + "\n"


@pytest.fixture
def text_file(tmp_path: Path) -> Path:
    path = tmp_path / "train.txt"
    path.write_text(synthetic_text(), encoding="utf-8")
    return path


@pytest.fixture
def one_thread() -> None:
    """Torch on one thread for the test: small models (LSTMs above all) run faster so than on two threads
    that wait for each other on a busy machine, and training curves measured so reproduce."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


DATE_PAIRS = date_pairs(24, seed=0)


@pytest.fixture(scope="session")
def date_pair_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with ``src.txt`` and ``tgt.txt``: :data:`DATE_PAIRS` as --src/--tgt files of the seq2seq commands."""
    folder = tmp_path_factory.mktemp("dates")
    (folder / "src.txt").write_text("".join(p.source + "\n" for p in DATE_PAIRS), encoding="utf-8")
    (folder / "tgt.txt").write_text("".join(p.target + "\n" for p in DATE_PAIRS), encoding="utf-8")
    return folder


class StubCausalLM(CausalLM):
    """A causal LM whose logits a test decides in ``logits_for`` (B, T) -> (B, T, V).

    Its one-layer cache only keeps count of the positions, so generation runs the
    same cached decoding loop as for a real model.
    """

    def __init__(self, context: int = 32) -> None:
        super().__init__(config=None)
        self.context = context

    def logits_for(self, input_ids: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def context_length(self) -> int:
        return self.context

    def new_cache(self, batch: int, max_length: int) -> list[KVCache]:
        return [KVCache.empty(batch, 1, max_length, 1, torch.float32, torch.device("cpu"))]

    def forward(self, input_ids, attention_mask=None, *, cache=None, num_logits=None) -> CausalLMOutput:
        batch, time = input_ids.shape
        if cache:
            cache[0].append(torch.zeros(batch, 1, time, 1), torch.zeros(batch, 1, time, 1))
        logits = self.logits_for(input_ids)
        return CausalLMOutput(last_hidden_state=logits, logits=logits[:, -(num_logits or time) :])


def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every temporary file plm writes through goes to /dev/full: each write fails with ENOSPC."""
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full to simulate a full disk with")
    make_temporary = tempfile.mkstemp

    def mkstemp(*args, **kwargs):
        fd, name = make_temporary(*args, **kwargs)
        full = os.open("/dev/full", os.O_WRONLY)
        os.dup2(full, fd)
        os.close(full)
        return fd, name

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
