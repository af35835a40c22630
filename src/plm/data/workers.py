"""Text encoded a batch at a time, in order: in this process, or in worker processes on every core.

The workers are spawned processes that import what the encoding function needs and no more: a
document's encoding ([`encode_texts`][plm.data.encoded.encode_texts]) needs numpy and the tokenizers
library, not PyTorch, so a worker costs the tokenizer's memory and little else.
"""

from __future__ import annotations

import os
import sys
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from multiprocessing import get_context
from typing import Any, TypeVar

Item = TypeVar("Item")  # what a batch is made of: a document's text, a sentence pair
Encoded = TypeVar("Encoded")  # what a batch is encoded into

BATCH_CHARACTERS = 1 << 20  # the text a worker encodes at a time
PARALLEL_FROM_CHARACTERS = 8 << 20  # below this, encoding in this process beats starting workers


def batches(items: Iterator[tuple[str, Item]],
            size: Callable[[Item], int]) -> Iterator[tuple[str, list[Item], int]]:
    """The items of each split, about ``BATCH_CHARACTERS`` of text at a time, with their characters.

    Each split's items keep their order; a batch holds one split's, gathered while the other's arrive
    in between (one document in twenty held out would otherwise cut every batch short).

    Args:
        items: each item with its split, in order.
        size: an item's characters.

    Yields:
        Each batch's split, items and characters.
    """
    pending: dict[str, list[Item]] = {}
    characters: dict[str, int] = {}
    for split, item in items:
        pending.setdefault(split, []).append(item)
        characters[split] = characters.get(split, 0) + size(item)
        if characters[split] >= BATCH_CHARACTERS:
            yield split, pending.pop(split), characters.pop(split)
    for split, batch in pending.items():
        yield split, batch, characters[split]


def encoded_batches(
    batches: Iterator[tuple[str, list[Item], int]],
    encode: Callable[[list[Item]], Encoded],
    total: int,
    workers: int | None,
) -> Iterator[tuple[str, Encoded, int]]:
    """Each batch's split, encoding and characters, in the order given; in worker processes for a large corpus.

    Args:
        batches: each batch's split, items and characters (see [`batches`][plm.data.workers.batches]).
        encode: encodes a batch. It goes to the workers pickled (a `functools.partial` of a module's
            function, whose tokenizers travel as their JSON): its module is all a worker imports.
        total: the characters of all batches (a small text is encoded here).
        workers: the worker processes (None: one per core; 1: none, in this process).

    Yields:
        Each batch's split, encoding and characters.
    """
    workers = workers or len(os.sched_getaffinity(0))
    if workers == 1 or total < PARALLEL_FROM_CHARACTERS:
        for split, batch, characters in batches:
            yield split, encode(batch), characters
        return
    # Each worker encodes on one thread; the processes share the cores. Spawned, not forked: a fork
    # would copy this process's threads (PyTorch's, the tokenizer's) in whatever state they are.
    with _main_module_hidden(), ProcessPoolExecutor(workers, mp_context=get_context("spawn"),
                                                    initializer=_start_worker, initargs=(encode,)) as pool:
        pending: deque[tuple[str, Future[Encoded], int]] = deque()
        for split, batch, characters in batches:
            pending.append((split, pool.submit(_encode_in_worker, batch), characters))
            if len(pending) >= 2 * workers:  # a bounded queue: the reader never runs far ahead
                split, future, characters = pending.popleft()
                yield split, future.result(), characters
        while pending:
            split, future, characters = pending.popleft()
            yield split, future.result(), characters


@contextmanager
def _main_module_hidden() -> Iterator[None]:
    """Hide this process's main module from the worker processes started meanwhile.

    A spawned process imports its parent's ``__main__`` before anything else: the ``plm`` command, which imports
    PyTorch, about 240 MB a worker for nothing, since encoding needs only [`plm.data.encoded`][plm.data.encoded].
    multiprocessing finds the main module by its ``__spec__`` and ``__file__``; without them it imports none.
    """
    main = sys.modules["__main__"].__dict__
    saved: dict[str, Any] = {name: main[name] for name in ("__spec__", "__file__") if name in main}
    main["__spec__"] = None
    main.pop("__file__", None)
    try:
        yield
    finally:
        main.pop("__spec__", None)
        main.update(saved)


_worker: dict[str, Any] = {}


def _start_worker(encode: Callable[[list[Any]], Any]) -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # read at the first encoding, after this
    _worker["encode"] = encode


def _encode_in_worker(batch: list[Any]) -> Any:
    return _worker["encode"](batch)
