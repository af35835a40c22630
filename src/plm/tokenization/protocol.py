"""What a tokenizer is to the rest of plm: text to ids and back, special tokens by role, its size, its files.

Two kinds of tokenizer give it: plm's own [`Tokenizer`][plm.tokenization.tokenizer.Tokenizer] (byte-level BPE,
WordPiece, Unigram, words) and a released translation model's
[`ReleasedTokenizer`][plm.tokenization.released.ReleasedTokenizer] (Marian's SentencePiece, fairseq's Moses and BPE).
Code that reads either, such as a side of [`Seq2SeqTokenizers`][plm.data.sentence_pairs.Seq2SeqTokenizers] or a served
model's tokenizer, takes a [`TokenizerLike`][plm.tokenization.protocol.TokenizerLike]; code that needs more of plm's
own (its backend, sentence pairs, added tokens) takes a `Tokenizer`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Protocol


class TokenizerLike(Protocol):
    """A tokenizer of either kind: plm's [`Tokenizer`][plm.tokenization.tokenizer.Tokenizer] or a released model's.

    Encoding adds no special tokens: the data code places them, by role. The roles are those of
    [`plm.tokenization.tokenizer`][plm.tokenization.tokenizer]: ``eos`` ends a text, ``bos`` starts one (a
    seq2seq target), ``pad`` fills a batch, ``unk`` stands for what the vocabulary lacks.
    """

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``, without special tokens.

        Args:
            text: the text.

        Returns:
            Its ids.
        """
        ...

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """[`encode`][plm.tokenization.protocol.TokenizerLike.encode] for many texts.

        Args:
            texts: the texts.

        Returns:
            The ids of each text.
        """
        ...

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """The text of ``ids``.

        Args:
            ids: the token ids.
            skip_special_tokens: leave the special tokens out.

        Returns:
            The text.
        """
        ...

    def decode_batch(self, batch: Iterable[Iterable[int]], skip_special_tokens: bool = False) -> list[str]:
        """[`decode`][plm.tokenization.protocol.TokenizerLike.decode] for many sequences.

        Args:
            batch: the ids of each sequence.
            skip_special_tokens: leave the special tokens out.

        Returns:
            The texts.
        """
        ...

    def id_of(self, role: str) -> int | None:
        """The id of the special token with ``role``, None when the tokenizer has none.

        Args:
            role: the role.

        Returns:
            The id, or None.
        """
        ...

    def required_id(self, role: str) -> int:
        """[`id_of`][plm.tokenization.protocol.TokenizerLike.id_of] for a role the caller needs.

        Args:
            role: the role.

        Returns:
            The id of its special token.

        Raises:
            PLMError: the tokenizer has no token with that role.
        """
        ...

    @property
    def eos_id(self) -> int | None:
        """The id of the end-of-text token, or None."""
        ...

    def __len__(self) -> int:
        """The number of ids: a model reading them needs as many embeddings."""
        ...

    def save(self, directory: str | os.PathLike[str]) -> None:
        """Write the tokenizer's files into ``directory``, as a model directory holds them.

        Args:
            directory: where to write them.
        """
        ...
