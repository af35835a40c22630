import numpy as np
import pytest
import torch

from plm.data.corpus import Document
from plm.data.tokens import BlockSampler, validation_blocks
from plm.errors import PLMError
from plm.tokenization.tokenizer import Tokenizer

DOCUMENTS = [
    Document("a", "The first document is about tokens."),
    Document("b", "The second one is about blocks of tokens."),
]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.train_bpe([doc.text for doc in DOCUMENTS] * 10, vocab_size=300)


def test_sampled_blocks_depend_only_on_the_step():
    ids = np.arange(1000, dtype=np.uint16)
    sampler = BlockSampler(ids, block_size=8, batch_size=4, seed=1)
    batch = sampler.batch(step=5)
    assert batch.shape == (4, 9) and batch.dtype == torch.int64
    assert (batch.diff(dim=1) == 1).all()  # each row is a contiguous slice: inputs then next-token targets
    resumed = BlockSampler(ids, block_size=8, batch_size=4, seed=1)
    assert torch.equal(resumed.batch(step=5), batch)
    assert not torch.equal(sampler.batch(step=6), batch)
    assert not torch.equal(sampler.batch(step=5, micro=1), batch)
    assert not torch.equal(BlockSampler(ids, 8, 4, seed=1, rank=1).batch(step=5), batch)
    assert not torch.equal(BlockSampler(ids, 8, 4, seed=2).batch(step=5), batch)


def test_blocks_reach_the_last_token():
    sampler = BlockSampler(np.arange(10), block_size=8, batch_size=64, seed=0)
    assert set(sampler.batch(step=0)[:, 0].tolist()) == {0, 1}


def test_validation_blocks_are_consecutive_and_fixed():
    ids = np.arange(100, dtype=np.uint16)
    blocks = validation_blocks(ids, block_size=10, max_blocks=None)
    assert blocks.shape == (9, 11) and blocks.dtype == torch.int64
    assert blocks[0].tolist() == list(range(11))
    assert (blocks[1:, 0] == blocks[:-1, -1]).all()  # every token after the first is a target exactly once
    assert torch.equal(validation_blocks(ids, block_size=10, max_blocks=3), blocks[:3])


def test_too_little_text_for_one_block_is_a_user_error():
    with pytest.raises(PLMError, match="has 8 tokens, too few for one block of 8 \\+ 1"):
        BlockSampler(np.arange(8), block_size=8, batch_size=2, seed=0)
    with pytest.raises(PLMError, match="validation text has 8 tokens"):
        validation_blocks(np.arange(8), block_size=8)
