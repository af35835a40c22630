"""The tokenizers of released translation models: Marian's SentencePiece, and fairseq's Moses and BPE.

Each class is one side (source or target) of a [`Seq2SeqTokenizers`][plm.data.sentence_pairs.Seq2SeqTokenizers], read
from a Hugging Face model directory as ``transformers``' ``MarianTokenizer`` and ``FSMTTokenizer``
read it, and giving the same ids (``tests/tokenization/test_released_tokenizers.py``):

- Marian (``Helsinki-NLP/opus-mt-*``): ``source.spm`` and ``target.spm``, the SentencePiece models of
  the two languages, and ``vocab.json``, the one id table of both. A language code that begins a
  multilingual model's source (``>>fra<<``) is a token of its own.
- fairseq's WMT19 models (``facebook/wmt19-*``): Moses' punctuation normalisation and tokenisation in the
  side's language (``langs`` in ``tokenizer_config.json``), then BPE with ``merges.txt`` (word ends
  marked ``</w>``); the ids are ``vocab-src.json``'s or ``vocab-tgt.json``'s.

Roles (see [`plm.tokenization.tokenizer`][plm.tokenization.tokenizer]): ``eos`` ends a sentence (``</s>``), ``pad``
fills a batch (``<pad>``), ``unk`` stands for what the vocabulary lacks; ``bos``, which plm's seq2seq data puts first in
a target, is the token the decoder starts from: Marian's ``<pad>`` and fairseq's ``</s>`` (neither model reads a
beginning-of-sentence token). ``sentencepiece`` and ``sacremoses`` are the ``mt`` extra, imported when a tokenizer is
built.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from plm.errors import PLMError
from plm.storage.atomic_files import atomic_open, read_json

MARIAN_FILES = ("source.spm", "target.spm", "vocab.json")
FSMT_FILES = ("vocab-src.json", "vocab-tgt.json", "merges.txt")
TOKENIZER_CONFIG = "tokenizer_config.json"
SPACE = "▁"  # SentencePiece's mark of a space
WORD_END = "</w>"  # the end of a word in fairseq's BPE


def mt_package(name: str) -> Any:
    """The ``mt`` extra's package ``name``, imported now.

    Args:
        name: ``sentencepiece`` or ``sacremoses``.

    Returns:
        The module.

    Raises:
        PLMError: the package is not installed.
    """
    try:
        return importlib.import_module(name)
    except ImportError:
        raise PLMError(f"released translation models need {name}: pip install 'plm[mt]'") from None


class ReleasedTokenizer:
    """One side of a released model's tokenizer: text to tokens to ids and back, special tokens by role.

    A subclass splits text into tokens ([`tokenize`][plm.tokenization.released.ReleasedTokenizer.tokenize]), joins
    tokens into text ([`detokenize`][plm.tokenization.released.ReleasedTokenizer.detokenize]) and writes its files
    ([`save`][plm.tokenization.released.ReleasedTokenizer.save]).

    Args:
        vocab: token -> id.
        special_tokens: role -> token (roles as `ROLES`).
        skipped: the tokens ``decode(..., skip_special_tokens=True)`` leaves out.

    Raises:
        PLMError: a special token that is not in the vocabulary.
    """

    def __init__(self, vocab: dict[str, int], special_tokens: dict[str, str], skipped: Iterable[str]) -> None:
        for role, token in special_tokens.items():
            if token not in vocab:
                raise PLMError(f"special token {token!r} ({role}) is not in the vocabulary")
        self.vocab = vocab
        self.tokens = {index: token for token, index in vocab.items()}
        self.special_tokens = dict(special_tokens)
        self.skipped_ids = {vocab[token] for token in skipped if token in vocab}

    def tokenize(self, text: str) -> list[str]:
        """The tokens of ``text``.

        Args:
            text: the text.

        Returns:
            Its tokens.

        Raises:
            NotImplementedError: in this base class.
        """
        raise NotImplementedError

    def detokenize(self, tokens: list[str]) -> str:
        """The text of ``tokens``.

        Args:
            tokens: the tokens.

        Returns:
            The text.

        Raises:
            NotImplementedError: in this base class.
        """
        raise NotImplementedError

    def save(self, directory: str | os.PathLike[str]) -> None:
        """Write this side's files into ``directory``, named as the model directory names them.

        Args:
            directory: where to write them.

        Raises:
            NotImplementedError: in this base class.
        """
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``, without special tokens (the data code places those); unknown tokens are ``unk``.

        Args:
            text: the text.

        Returns:
            Its ids.
        """
        unknown = self.required_id("unk")
        return [self.vocab.get(token, unknown) for token in self.tokenize(text)]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """[`encode`][plm.tokenization.released.ReleasedTokenizer.encode] for many texts.

        Args:
            texts: the texts.

        Returns:
            The ids of each text.
        """
        return [self.encode(text) for text in texts]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """The text of ``ids``.

        Args:
            ids: the token ids.
            skip_special_tokens: leave the special tokens out.

        Returns:
            The text.
        """
        unknown = self.special_tokens["unk"]
        kept = [int(i) for i in ids if not (skip_special_tokens and int(i) in self.skipped_ids)]
        return self.detokenize([self.tokens.get(index, unknown) for index in kept])

    def decode_batch(self, batch: Iterable[Iterable[int]], skip_special_tokens: bool = False) -> list[str]:
        """[`decode`][plm.tokenization.released.ReleasedTokenizer.decode] for many sequences.

        Args:
            batch: the ids of each sequence.
            skip_special_tokens: leave the special tokens out.

        Returns:
            The texts.
        """
        return [self.decode(ids, skip_special_tokens) for ids in batch]

    def id_of(self, role: str) -> int | None:
        """The id of the special token with ``role``, None when this tokenizer has none.

        Args:
            role: the role.

        Returns:
            The id, or None.
        """
        token = self.special_tokens.get(role)
        return None if token is None else self.vocab[token]

    def required_id(self, role: str) -> int:
        """[`id_of`][plm.tokenization.released.ReleasedTokenizer.id_of] for a role the caller needs.

        Args:
            role: the role.

        Returns:
            The id of its special token.

        Raises:
            PLMError: the tokenizer has no token with that role.
        """
        index = self.id_of(role)
        if index is None:
            raise PLMError(f"{self!r} has no {role} token")
        return index

    @property
    def eos_id(self) -> int | None:
        """The id of the end-of-sentence token."""
        return self.id_of("eos")

    def __len__(self) -> int:
        return len(self.vocab)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={len(self)}, special_tokens={self.special_tokens})"


class MarianTokenizer(ReleasedTokenizer):
    """One side of a Marian model's tokenizer: its language's SentencePiece model and the shared ``vocab.json``.

    Args:
        side: "source" or "target", which names the ``.spm`` file.
        model_proto: the SentencePiece model (the bytes of the ``.spm`` file).
        vocab: the ids of both sides' pieces.

    Raises:
        PLMError: ``sentencepiece`` is not installed, ``model_proto`` is not a SentencePiece model, or the
            vocabulary lacks Marian's special tokens.
    """

    def __init__(self, side: str, model_proto: bytes, vocab: dict[str, int]) -> None:
        roles = {"eos": "</s>", "unk": "<unk>", "pad": "<pad>", "bos": "<pad>"}  # targets start from <pad>
        super().__init__(vocab, roles, set(roles.values()))
        self.side = side
        self.model_proto = model_proto
        self.spm = mt_package("sentencepiece").SentencePieceProcessor()
        try:
            self.spm.LoadFromSerializedProto(model_proto)
        except (RuntimeError, OSError) as error:
            raise PLMError(f"{side}.spm: not a SentencePiece model ({error})") from None

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> tuple[MarianTokenizer, MarianTokenizer]:
        """The source and target sides of a Marian model directory.

        Args:
            directory: the directory with ``source.spm``, ``target.spm`` and ``vocab.json``.

        Returns:
            The source and target tokenizers.

        Raises:
            PLMError: a file missing or unreadable, or a tokenizer with a vocabulary per side (not supported).
        """
        config = read_tokenizer_config(directory)
        if config.get("separate_vocabs"):
            raise PLMError(f"{directory}: Marian tokenizers with separate_vocabs are not supported")
        vocab = read_vocab(Path(directory, "vocab.json"))
        sides = []
        for side in ("source", "target"):
            path = Path(directory, f"{side}.spm")
            if not path.is_file():
                raise PLMError(f"{path}: no such file")
            sides.append(cls(side, path.read_bytes(), vocab))
        return sides[0], sides[1]

    def tokenize(self, text: str) -> list[str]:
        """A leading language code (``>>fra<<``) as one token, then the SentencePiece pieces of the rest.

        Args:
            text: the text.

        Returns:
            Its tokens.
        """
        code: list[str] = []
        end = text.find("<<")
        if text.startswith(">>") and end != -1:
            code, text = [text[: end + 2]], text[end + 2 :]
        return code + self.spm.encode(text, out_type=str)

    def detokenize(self, tokens: list[str]) -> str:
        """SentencePiece's text of each run of pieces; a special token between runs is kept, followed by a space.

        Args:
            tokens: the tokens.

        Returns:
            The text, stripped.
        """
        specials = set(self.special_tokens.values())
        text = ""
        pieces: list[str] = []  # the pieces since the last special token
        for token in tokens:
            if token in specials:
                text += self.spm.decode_pieces(pieces) + token + " "
                pieces = []
            else:
                pieces.append(token)
        text += self.spm.decode_pieces(pieces)
        return text.replace(SPACE, " ").strip()

    def save(self, directory: str | os.PathLike[str]) -> None:
        """Write ``{side}.spm`` and ``vocab.json`` into ``directory``.

        Args:
            directory: where to write them.
        """
        with atomic_open(Path(directory, f"{self.side}.spm")) as file:
            file.write(self.model_proto)
        write_vocab(Path(directory, "vocab.json"), self.vocab)


class FSMTTokenizer(ReleasedTokenizer):
    """One side of a fairseq WMT19 model's tokenizer: Moses in its language, then BPE and its vocabulary.

    Args:
        side: "src" or "tgt", which names the vocabulary file.
        langs: the source and the target language (Moses' rules differ by language).
        vocab: this side's token ids.
        merges: the BPE merges, most frequent first.
        lowercase: lowercase the text first.

    Raises:
        PLMError: ``sacremoses`` is not installed, or the vocabulary lacks fairseq's special tokens.
    """

    def __init__(
        self, side: str, langs: tuple[str, str], vocab: dict[str, int], merges: list[tuple[str, ...]], lowercase: bool
    ) -> None:
        roles = {"eos": "</s>", "unk": "<unk>", "pad": "<pad>", "bos": "</s>"}  # targets start from </s>
        super().__init__(vocab, roles, {*roles.values(), "<s>"})
        self.side, self.langs, self.merges, self.lowercase = side, langs, merges, lowercase
        self.lang = langs[0] if side == "src" else langs[1]
        self.ranks = {merge: rank for rank, merge in enumerate(merges)}
        self.words: dict[str, list[str]] = {}  # each word's BPE pieces, as found
        moses = mt_package("sacremoses")
        # FSMTTokenizer's preprocessing: Unicode punctuation replaced, Moses' normalisation, control characters out.
        self.normalizer = moses.MosesPunctNormalizer(
            lang=self.lang, pre_replace_unicode_punct=True, post_remove_control_chars=True
        )
        self.moses = moses.MosesTokenizer(lang=self.lang)
        self.detokenizer = moses.MosesDetokenizer(lang=self.lang)

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> tuple[FSMTTokenizer, FSMTTokenizer]:
        """The source and target sides of a fairseq model directory.

        Args:
            directory: the directory with ``vocab-src.json``, ``vocab-tgt.json``, ``merges.txt`` and the languages
                (``langs`` in ``tokenizer_config.json``, else in ``config.json``).

        Returns:
            The source and target tokenizers.

        Raises:
            PLMError: a file missing or unreadable, or no pair of languages.
        """
        config = read_tokenizer_config(directory)
        langs = config.get("langs")
        if langs is None and Path(directory, "config.json").is_file():
            langs = read_json(Path(directory, "config.json")).get("langs")
        if not (isinstance(langs, list) and len(langs) == 2 and all(isinstance(lang, str) for lang in langs)):
            raise PLMError(f"{directory}: no pair of languages (\"langs\") in {TOKENIZER_CONFIG} or config.json")
        path = Path(directory, "merges.txt")
        try:
            lines = path.read_text(encoding="utf-8").split("\n")[:-1]  # as FSMTTokenizer reads it
        except (OSError, UnicodeDecodeError) as error:
            raise PLMError(f"{path}: unreadable ({error})") from None
        merges = [tuple(line.split()[:2]) for line in lines]
        lowercase = bool(config.get("do_lower_case", False))
        source, target = (
            cls(side, (langs[0], langs[1]), read_vocab(Path(directory, f"vocab-{side}.json")), merges, lowercase)
            for side in ("src", "tgt")
        )
        return source, target

    def bpe(self, word: str) -> list[str]:
        """The BPE pieces of one Moses token: its characters, the last marked ``</w>``, merged by rank.

        Args:
            word: the token.

        Returns:
            Its pieces.
        """
        if word not in self.words:
            symbols = [*word[:-1], word[-1] + WORD_END]
            while len(symbols) > 1:
                pair = min(zip(symbols, symbols[1:]), key=lambda p: self.ranks.get(p, len(self.ranks)))
                if pair not in self.ranks:
                    break
                merged, index = [], 0
                while index < len(symbols):  # every occurrence of the pair, left to right
                    if index + 1 < len(symbols) and (symbols[index], symbols[index + 1]) == pair:
                        merged.append(symbols[index] + symbols[index + 1])
                        index += 2
                    else:
                        merged.append(symbols[index])
                        index += 1
                symbols = merged
            self.words[word] = symbols
        return self.words[word]

    def tokenize(self, text: str) -> list[str]:
        """Moses' normalisation and tokenisation (HTML characters escaped, dashes split), then BPE.

        Args:
            text: the text.

        Returns:
            Its tokens.
        """
        text = self.normalizer.normalize(text.lower() if self.lowercase else text)
        words = self.moses.tokenize(text, aggressive_dash_splits=True, return_str=False, escape=True)
        return [piece for word in words if word for piece in self.bpe(word)]

    def detokenize(self, tokens: list[str]) -> str:
        """Words rebuilt from their pieces, then Moses' detokenisation.

        Args:
            tokens: the tokens.

        Returns:
            The text.
        """
        words = "".join(token.replace(" ", "").replace(WORD_END, " ") for token in tokens).split()
        return self.detokenizer.detokenize(words)

    def save(self, directory: str | os.PathLike[str]) -> None:
        """Write ``vocab-{side}.json``, ``merges.txt`` and the languages in ``tokenizer_config.json``.

        Args:
            directory: where to write them.
        """
        write_vocab(Path(directory, f"vocab-{self.side}.json"), self.vocab)
        with atomic_open(Path(directory, "merges.txt")) as file:
            file.write("".join(" ".join(merge) + "\n" for merge in self.merges).encode("utf-8"))
        config = {"tokenizer_class": "FSMTTokenizer", "langs": list(self.langs), "do_lower_case": self.lowercase}
        with atomic_open(Path(directory, TOKENIZER_CONFIG)) as file:
            file.write(json.dumps(config, indent=2).encode("utf-8") + b"\n")


def load_released(directory: str | os.PathLike[str]) -> tuple[ReleasedTokenizer, ReleasedTokenizer] | None:
    """The source and target tokenizers of a Marian or fairseq model directory; None for another directory.

    Args:
        directory: the model directory.

    Returns:
        The two sides, or None when ``directory`` holds neither model's files.

    Raises:
        PLMError: a released model's files that cannot be read.
    """
    if all(Path(directory, name).is_file() for name in MARIAN_FILES):
        return MarianTokenizer.load(directory)
    if all(Path(directory, name).is_file() for name in FSMT_FILES):
        return FSMTTokenizer.load(directory)
    return None


def read_tokenizer_config(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """``tokenizer_config.json`` of ``directory``, or {} when there is none.

    Args:
        directory: the model directory.

    Returns:
        Its fields.

    Raises:
        PLMError: a file that is not a JSON object.
    """
    path = Path(directory, TOKENIZER_CONFIG)
    config = read_json(path) if path.is_file() else {}
    if not isinstance(config, dict):
        raise PLMError(f"{path}: not a JSON object")
    return config


def read_vocab(path: Path) -> dict[str, int]:
    """A token -> id table.

    Args:
        path: the JSON file.

    Returns:
        The table.

    Raises:
        PLMError: a missing file, or one that is not an object of integer ids.
    """
    vocab = read_json(path)
    if not isinstance(vocab, dict) or not all(isinstance(index, int) for index in vocab.values()):
        raise PLMError(f"{path}: not a vocabulary (an object of token ids)")
    return vocab


def write_vocab(path: Path, vocab: dict[str, int]) -> None:
    """Write a token -> id table as JSON, characters unescaped.

    Args:
        path: the file.
        vocab: the table.
    """
    with atomic_open(path) as file:
        file.write(json.dumps(vocab, indent=2, ensure_ascii=False).encode("utf-8") + b"\n")
