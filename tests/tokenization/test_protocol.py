"""plm's own tokenizer and a released model's are both a TokenizerLike: the same code reads either.

mypy checks the assignments below structurally (``MYPYPATH=src mypy tests/tokenization/test_protocol.py``), as it
checks every place in src/plm where either kind flows into a ``TokenizerLike``; the tests run the calls, and hold each
kind's members to the protocol's names and parameters.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import pytest

from plm.tokenization import TokenizerLike
from plm.tokenization.released import ReleasedTokenizer, read_vocab, write_vocab
from plm.tokenization.tokenizer import Tokenizer

TEXTS = ["the cat sat on the mat", "the dog sat on the log", "a cat and a dog"]
SPECIALS = {"pad": "<pad>", "bos": "<s>", "eos": "</s>"}


class Words(ReleasedTokenizer):
    """The smallest released tokenizer: words split at spaces, joined with spaces, ids from ``vocab.json``."""

    def tokenize(self, text: str) -> list[str]:
        return text.split()

    def detokenize(self, tokens: list[str]) -> str:
        return " ".join(tokens)

    def save(self, directory: str | os.PathLike[str]) -> None:
        write_vocab(Path(directory, "vocab.json"), self.vocab)


def words() -> Words:
    tokens = [*SPECIALS.values(), "<unk>", *sorted(set(" ".join(TEXTS).split()))]
    vocab = {token: index for index, token in enumerate(tokens)}
    return Words(vocab, {**SPECIALS, "unk": "<unk>"}, skipped=SPECIALS.values())


def sentence(tokenizer: TokenizerLike, text: str) -> list[int]:
    """A text as seq2seq data writes a target: bos, its ids, eos."""
    return [tokenizer.required_id("bos"), *tokenizer.encode(text), tokenizer.required_id("eos")]


def test_either_kind_encodes_decodes_and_saves_through_the_protocol(tmp_path):
    plm_own: TokenizerLike = Tokenizer.train_bpe(TEXTS, vocab_size=300, min_frequency=1, special_tokens=SPECIALS)
    released: TokenizerLike = words()
    for name, tokenizer in (("plm", plm_own), ("released", released)):
        ids = sentence(tokenizer, "the cat sat")
        assert tokenizer.decode(ids, skip_special_tokens=True) == "the cat sat"
        assert tokenizer.decode_batch([ids, ids[1:-1]], skip_special_tokens=True) == ["the cat sat"] * 2
        assert tokenizer.encode_batch(["a dog", "the mat"]) == [tokenizer.encode("a dog"), tokenizer.encode("the mat")]
        assert tokenizer.eos_id == tokenizer.id_of("eos") == ids[-1]
        assert tokenizer.id_of("mask") is None
        assert max(ids) < len(tokenizer)
        tokenizer.save(tmp_path / name)
    assert Tokenizer.load(tmp_path / "plm").encode("the cat sat") == plm_own.encode("the cat sat")
    assert read_vocab(tmp_path / "released" / "vocab.json") == words().vocab


MEMBERS = [name for name, member in vars(TokenizerLike).items() if isinstance(member, property)
           or inspect.isfunction(member) and member.__qualname__.startswith("TokenizerLike.")]


@pytest.mark.parametrize("kind", [Tokenizer, ReleasedTokenizer])
def test_each_kind_has_every_member_with_the_protocols_parameters(kind):
    assert set(MEMBERS) == {"encode", "encode_batch", "decode", "decode_batch", "id_of", "required_id", "eos_id",
                            "__len__", "save"}
    for name in MEMBERS:
        wanted, there = vars(TokenizerLike)[name], getattr(kind, name)
        if isinstance(wanted, property):
            assert isinstance(there, property), name
        else:
            assert inspect.signature(there).parameters.keys() == inspect.signature(wanted).parameters.keys(), name
