"""Shared fixtures: a small text corpus and an isolated plm cache per test session."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


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


def synthetic_text(paragraphs: int = 200, seed: int = 0) -> str:
    """English-like paragraphs from a tiny grammar: learnable, deterministic, no download."""
    rng = random.Random(seed)
    subjects = ["the cat", "a dog", "the model", "my friend", "the list", "a tokenizer"]
    verbs = ["reads", "returns", "sees", "likes", "builds", "sorts"]
    objects = ["the book", "a value", "the answer", "every token", "the data", "a string"]
    lines = []
    for _ in range(paragraphs):
        sentences = [
            f"{rng.choice(subjects).capitalize()} {rng.choice(verbs)} {rng.choice(objects)}."
            for _ in range(rng.randint(2, 5))
        ]
        lines.append(" ".join(sentences))
    return "\n\n".join(lines) + "\n"


@pytest.fixture
def text_file(tmp_path: Path) -> Path:
    path = tmp_path / "train.txt"
    path.write_text(synthetic_text(), encoding="utf-8")
    return path
