import numpy as np
import pytest
import tokenizers
import torch
from tokenizers import models, pre_tokenizers

from plm.data.corpus import Document
from plm.data.tokens import BlockSampler, cached_token_ids, encode_documents, validation_blocks
from plm.errors import PLMError
from plm.tokenization.tokenizer import Tokenizer

DOCUMENTS = [
    Document("a", "The first document is about tokens."),
    Document("b", "The second one is about blocks of tokens."),
]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.train_bpe([doc.text for doc in DOCUMENTS] * 10, vocab_size=300)


def test_documents_become_one_memory_mapped_array_joined_by_eos(tmp_path, tokenizer):
    ids = encode_documents(DOCUMENTS, tokenizer, tmp_path / "train.npy", tokenizer.eos_id)
    first, second = (tokenizer.encode(doc.text) for doc in DOCUMENTS)
    assert isinstance(ids, np.memmap) and ids.dtype == np.uint16
    assert ids.tolist() == first + [tokenizer.eos_id] + second
    assert np.load(tmp_path / "train.npy").tolist() == ids.tolist()
    assert tokenizer.decode(ids) == (
        "The first document is about tokens.<|endoftext|>The second one is about blocks of tokens."
    )


def test_a_vocabulary_beyond_uint16_is_stored_as_uint32(tmp_path):
    words = {f"w{i}": i for i in range(70_000)}
    backend = tokenizers.Tokenizer(models.WordLevel(words, unk_token="w0"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    ids = encode_documents([Document("d", "w1 w69999")], Tokenizer(backend, {}), tmp_path / "ids.npy", None)
    assert ids.dtype == np.uint32 and ids.tolist() == [1, 69_999]


def test_ids_above_32767_round_trip_through_uint16_storage(tmp_path):
    """A vocabulary of exactly 2**16 words is stored as uint16; ids past int16's 32,767 up to 65,535 must read back
    as written (int16 storage would wrap 40,000 to -25,536 or refuse it), in the array and in training blocks."""
    words = {f"w{i}": i for i in range(2**16)}
    backend = tokenizers.Tokenizer(models.WordLevel(words, unk_token="w0"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    written = [32_767, 32_768, 40_000, 65_535, 7]
    text = " ".join(f"w{i}" for i in written)
    ids = encode_documents([Document("d", text)], Tokenizer(backend, {}), tmp_path / "ids.npy", None)
    assert ids.tolist() == written and np.load(tmp_path / "ids.npy").tolist() == written
    assert validation_blocks(ids, block_size=4)[0].tolist() == written
    assert ids.dtype == np.uint16  # two bytes an id: the vocabulary fits


def test_cached_ids_are_reused_until_the_text_changes(tmp_path, tokenizer):
    ids = cached_token_ids(DOCUMENTS, tokenizer, tmp_path, "train")
    again = cached_token_ids(DOCUMENTS, tokenizer, tmp_path, "train")
    assert again.filename == ids.filename and again.tolist() == ids.tolist()
    tokenizer.save(tmp_path / "tokenizer")
    reloaded = Tokenizer.load(tmp_path / "tokenizer")
    assert cached_token_ids(DOCUMENTS, reloaded, tmp_path, "train").filename == ids.filename
    changed = cached_token_ids(DOCUMENTS[:1], tokenizer, tmp_path, "train")
    assert changed.filename != ids.filename
    assert len(list(tmp_path.glob("train-*.npy"))) == 2


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
