"""Token ids stored once as a flat ``.npy`` array and read back memory-mapped.

A corpus is tokenized once into one array with a separator (the ``eos`` token)
between documents, as GPT-2 trained; language-model batches are then random
contiguous blocks of that array. Sampling is a pure function of the step, so a
resumed run sees exactly the batches it would have seen without the interruption.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from tqdm import tqdm

from plm.data.corpus import Document
from plm.errors import PLMError
from plm.storage.atomic_files import atomic_open

if TYPE_CHECKING:
    from plm.tokenization.tokenizer import Tokenizer

_BATCH_DOCUMENTS = 512
_PROGRESS_FROM_CHARACTERS = 10_000_000


def encode_documents(
    documents: Sequence[Document], tokenizer: Tokenizer, path: Path, separator_id: int | None
) -> np.ndarray:
    """Tokenize ``documents`` into one array, ``separator_id`` between them, saved at ``path``.

    Ids are stored as uint16 when the vocabulary fits (GPT-2's 50,257 does), halving
    the file. Returns the array memory-mapped from ``path``.
    """
    dtype = np.uint16 if tokenizer.vocab_size <= 2**16 else np.uint32
    separator = np.array([] if separator_id is None else [separator_id], dtype)
    pieces: list[np.ndarray] = []
    total = sum(len(doc.text) for doc in documents)
    with tqdm(
        total=total, unit="char", unit_scale=True, desc=f"tokenizing {Path(path).name}",
        disable=total < _PROGRESS_FROM_CHARACTERS,
    ) as progress:
        for start in range(0, len(documents), _BATCH_DOCUMENTS):
            batch = documents[start : start + _BATCH_DOCUMENTS]
            for ids in tokenizer.encode_batch([doc.text for doc in batch]):
                if pieces:
                    pieces.append(separator)
                pieces.append(np.asarray(ids, dtype))
            progress.update(sum(len(doc.text) for doc in batch))
    with atomic_open(Path(path)) as file:
        np.save(file, np.concatenate(pieces) if pieces else np.zeros(0, dtype))
    return np.load(path, mmap_mode="r")


def cached_token_ids(
    documents: Sequence[Document], tokenizer: Tokenizer, cache_dir: str | os.PathLike[str], name: str
) -> np.ndarray:
    """:func:`encode_documents` with ``eos`` as separator, reused while nothing changed.

    The file name carries a hash of the tokenizer and of every document's name and
    text, so a changed corpus or vocabulary gets a new file instead of stale ids.
    """
    key = hashlib.sha256(tokenizer.backend.to_str().encode())
    key.update(str(tokenizer.eos_id).encode())
    for doc in documents:
        key.update(json.dumps([doc.name, doc.text]).encode())
    path = Path(cache_dir, f"{name}-{key.hexdigest()[:16]}.npy")
    if path.exists():
        return np.load(path, mmap_mode="r")
    return encode_documents(documents, tokenizer, path, tokenizer.eos_id)


class BlockSampler:
    """Random contiguous blocks of ``block_size + 1`` ids: inputs and next-token targets.

    Nothing is stateful: the offsets of a batch come from a generator seeded with
    (seed, step, micro-batch, rank), so resuming at step ``s`` needs no saved position,
    and each rank of a distributed run draws its own blocks.
    """

    def __init__(self, ids: np.ndarray, block_size: int, batch_size: int, seed: int, rank: int = 0) -> None:
        if len(ids) < block_size + 1:
            raise PLMError(
                f"the training text has {len(ids)} tokens, too few for one block of "
                f"{block_size} + 1; use a smaller block size or more text"
            )
        self.ids, self.block_size, self.batch_size = ids, block_size, batch_size
        self.seed, self.rank = seed, rank

    def batch(self, step: int, micro: int = 0) -> torch.Tensor:
        """The (batch_size, block_size + 1) int64 blocks for ``step`` and micro-batch ``micro``."""
        entropy = np.random.SeedSequence([self.seed, step, micro, self.rank]).generate_state(1, np.uint64)
        generator = torch.Generator().manual_seed(int(entropy[0]))
        starts = torch.randint(len(self.ids) - self.block_size, (self.batch_size,), generator=generator)
        return _gather(self.ids, starts.numpy(), self.block_size)


def validation_blocks(ids: np.ndarray, block_size: int, max_blocks: int | None = None) -> torch.Tensor:
    """Consecutive blocks (n, block_size + 1) from the start of ``ids``, the same every time.

    Block ``i`` starts at ``i * block_size``; its extra last id is the next block's
    first, so every position of the text is predicted exactly once.
    """
    count = (len(ids) - 1) // block_size
    if max_blocks is not None:
        count = min(count, max_blocks)
    if count < 1:
        raise PLMError(
            f"the validation text has {len(ids)} tokens, too few for one block of "
            f"{block_size} + 1; use a smaller block size or more validation text"
        )
    return _gather(ids, np.arange(count) * block_size, block_size)


def _gather(ids: np.ndarray, starts: np.ndarray, block_size: int) -> torch.Tensor:
    index = starts[:, None] + np.arange(block_size + 1)  # (n, block_size + 1)
    return torch.from_numpy(ids[index].astype(np.int64))
