"""Parallel text for sequence to sequence: sentence pairs, their tokenizers, and batches under a token budget.

Pairs come from two aligned files (line i of one translates line i of the other) or
one TSV (``source<TAB>target`` per line). Misaligned files and empty sentences are
errors naming the file and line, found before anything trains.

A source is encoded as ``x_1 .. x_n </s>`` (or ``x_n .. x_1 </s>``, reversed as Sutskever et al. reverse it,
when the tokenizers say so); a target as ``<s> y_1 .. y_m </s>``, whose
first m + 1 tokens the decoder reads (teacher forcing) to predict the last m + 1.
The tokenizer is byte-level BPE trained on both sides at once (one joint vocabulary)
or one per side; a separate target tokenizer is saved in ``target/`` of the model directory, and a
reversed source order in its ``seq2seq.json``, so that every user of the model reads sources as it was trained.
A released translation model's directory (Marian's, fairseq's) holds the files of its own
tokenizers (:mod:`plm.tokenization.released`), which are read, and saved, in their place.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from plm.data.corpus import read_text
from plm.errors import PLMError
from plm.tokenization.released import ReleasedTokenizer, load_released
from plm.tokenization.tokenizer import TOKENIZER_TRAINERS, Tokenizer

# Special tokens of seq2seq tokenizers, ids 0 to 2: padding, start of target, end of sentence.
SEQ2SEQ_SPECIALS = {"pad": "<pad>", "bos": "<s>", "eos": "</s>"}
TARGET_TOKENIZER_DIR = "target"
SOURCE_ORDER_FILE = "seq2seq.json"  # {"reverse_source": true} when the model reads its sources reversed


@dataclass(frozen=True)
class SentencePair:
    """A source sentence and its translation.

    Attributes:
        source: the sentence to translate.
        target: its translation.
    """
    source: str
    target: str


def non_empty_lines(path: str | os.PathLike[str]) -> list[str]:
    """The lines of a user's file (one sentence each); an empty one is an error naming its line.

    Args:
        path: the file.

    Returns:
        Its lines, without the final line end.

    Raises:
        PLMError: a file :func:`plm.data.corpus.read_text` refuses, or an empty line.
    """
    lines = read_text(path).removesuffix("\n").split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            raise PLMError(f"{path}:{number}: empty line; every line must hold one sentence")
    return lines


def read_parallel(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> list[SentencePair]:
    """Pairs from two aligned files, one sentence per line.

    Args:
        source: the file of source sentences.
        target: the file of their translations, line for line.

    Returns:
        The pairs, in file order.

    Raises:
        PLMError: an unreadable file, an empty line, or files of different lengths.
    """
    sources, targets = non_empty_lines(source), non_empty_lines(target)
    if len(sources) != len(targets):
        shorter, longer = (source, target) if len(sources) < len(targets) else (target, source)
        first_unmatched = min(len(sources), len(targets)) + 1
        raise PLMError(
            f"{source} has {len(sources)} lines but {target} has {len(targets)}: the files are not aligned "
            f"({longer}:{first_unmatched} has no counterpart in {shorter})"
        )
    return [SentencePair(s, t) for s, t in zip(sources, targets)]


def read_tsv(path: str | os.PathLike[str]) -> list[SentencePair]:
    """Pairs from ``source<TAB>target`` lines.

    Args:
        path: the TSV file.

    Returns:
        The pairs, in file order.

    Raises:
        PLMError: an unreadable file, a line without exactly one tab, or an empty sentence.
    """
    pairs = []
    for number, line in enumerate(read_text(path).removesuffix("\n").split("\n"), 1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise PLMError(f"{path}:{number}: expected source<TAB>target, found {len(fields) - 1} tabs")
        if not fields[0].strip() or not fields[1].strip():
            side = "source" if not fields[0].strip() else "target"
            raise PLMError(f"{path}:{number}: empty {side} sentence")
        pairs.append(SentencePair(*fields))
    return pairs


class SideTokenizer(Protocol):
    """What a side of :class:`Seq2SeqTokenizers` does: plm's :class:`Tokenizer`, or a released model's.

    ``bos`` is the role of the token a target starts with, ``eos`` of the one that ends a sentence, ``pad`` of the
    one that fills a batch.
    """

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """The ids of each text, without special tokens."""
        ...

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """The text of ``ids``."""
        ...

    def id_of(self, role: str) -> int | None:
        """The id of the special token with ``role``, or None."""
        ...

    def required_id(self, role: str) -> int:
        """The id of the special token with ``role``; a PLMError when there is none."""
        ...

    @property
    def eos_id(self) -> int | None:
        """The id of the end-of-sentence token, or None."""
        ...

    def save(self, directory: str | os.PathLike[str]) -> None:
        """Write the tokenizer's files into ``directory``."""
        ...

    def __len__(self) -> int: ...


class Seq2SeqTokenizers:
    """The source and target tokenizers: one object for a joint vocabulary, two for separate ones.

    Args:
        source: the source tokenizer (and the target's, for a joint vocabulary).
        target: the target tokenizer, or None for a joint vocabulary.
        reverse_source: encode each source's tokens in reverse order (Sutskever et al., 2014, section 3.3):
            the first target words then sit close to the first source words the encoder read last.

    Raises:
        PLMError: a tokenizer without a pad, bos or eos token.
    """

    def __init__(self, source: SideTokenizer, target: SideTokenizer | None = None, *,
                 reverse_source: bool = False) -> None:
        self.source = source
        self.target = target or source
        self.reverse_source = reverse_source
        for side, tokenizer in (("source", self.source), ("target", self.target)):
            missing = [role for role in ("pad", "bos", "eos") if tokenizer.id_of(role) is None]
            if missing:
                raise PLMError(f"the {side} tokenizer has no {', '.join(missing)} token; seq2seq needs pad, bos, eos")

    @property
    def joint(self) -> bool:
        """Whether source and target share one tokenizer."""
        return self.target is self.source

    @classmethod
    def train(
        cls, pairs: Sequence[SentencePair], vocab_size: int = 8000, joint: bool = True, kind: str = "bpe",
        reverse_source: bool = False,
    ) -> Seq2SeqTokenizers:
        """Learn one vocabulary from both sides (``joint``) or one per side, of ``vocab_size`` each.

        Args:
            pairs: the training pairs.
            vocab_size: the size of each vocabulary.
            joint: one vocabulary for both sides.
            kind: the tokenizer kind, a key of :data:`plm.tokenization.tokenizer.TOKENIZER_TRAINERS`; "bpe" gets
                the seq2seq special tokens ``<pad> <s> </s>``.
            reverse_source: encode sources reversed (see the class).

        Returns:
            The tokenizers.

        Raises:
            PLMError: a trained tokenizer without a pad, bos or eos token.
        """
        train = TOKENIZER_TRAINERS[kind]
        options = {"special_tokens": SEQ2SEQ_SPECIALS} if kind == "bpe" else {}
        sources = [pair.source for pair in pairs]
        targets = [pair.target for pair in pairs]
        if joint:
            return cls(train(sources + targets, vocab_size=vocab_size, **options), reverse_source=reverse_source)
        return cls(train(sources, vocab_size=vocab_size, **options), train(targets, vocab_size=vocab_size, **options),
                   reverse_source=reverse_source)

    def in_source_order(self, reverse_source: bool) -> Seq2SeqTokenizers:
        """The same tokenizers, reading sources reversed or in order.

        Args:
            reverse_source: encode each source's tokens in reverse order.

        Returns:
            The tokenizers with that source order.
        """
        return Seq2SeqTokenizers(self.source, None if self.joint else self.target, reverse_source=reverse_source)

    def save(self, directory: str | os.PathLike[str]) -> None:
        """Save the source tokenizer into ``directory``, and a separate target one into its ``target/``.

        A released model's two sides both go into ``directory``, under the names its files have there. A reversed
        source order is written in ``seq2seq.json``.

        Args:
            directory: the model directory.
        """
        self.source.save(directory)
        order = Path(directory, SOURCE_ORDER_FILE)
        if self.reverse_source:
            order.write_text(json.dumps({"reverse_source": True}) + "\n", encoding="utf-8")
        else:  # saved over a directory that held a reversed model's tokenizers: sources in order now
            order.unlink(missing_ok=True)
        if isinstance(self.target, ReleasedTokenizer):
            self.target.save(directory)
        elif not self.joint:
            Path(directory, TARGET_TOKENIZER_DIR).mkdir(parents=True, exist_ok=True)
            self.target.save(Path(directory, TARGET_TOKENIZER_DIR))

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> Seq2SeqTokenizers:
        """The tokenizers :meth:`save` wrote into ``directory``, or a released model's (Marian, fairseq).

        Args:
            directory: the model directory.

        Returns:
            The tokenizers; a joint one when ``target/`` holds no tokenizer; reading sources reversed when
            ``seq2seq.json`` says so.

        Raises:
            PLMError: no readable tokenizer, one without a pad, bos or eos token, or an unreadable ``seq2seq.json``.
        """
        released = load_released(directory)
        if released is not None:
            return cls(*released)
        target = Path(directory, TARGET_TOKENIZER_DIR)
        return cls(Tokenizer.load(directory), Tokenizer.load(target) if (target / "tokenizer.json").is_file() else None,
                   reverse_source=reads_reversed(directory))

    def encode_sources(self, texts: Sequence[str]) -> list[list[int]]:
        """Source sentences as ids ``x_1 .. x_n </s>``.

        Args:
            texts: the source sentences.

        Returns:
            The ids of each sentence (``x_n .. x_1 </s>`` when the tokenizers reverse sources).
        """
        eos = self.source.required_id("eos")
        return [(ids[::-1] if self.reverse_source else ids) + [eos] for ids in self.source.encode_batch(texts)]

    def encode_targets(self, texts: Sequence[str]) -> list[list[int]]:
        """Target sentences as ids ``<s> y_1 .. y_m </s>``.

        Args:
            texts: the target sentences.

        Returns:
            The ids of each sentence.
        """
        bos, eos = self.target.required_id("bos"), self.target.required_id("eos")
        return [[bos, *ids, eos] for ids in self.target.encode_batch(texts)]

    def decode_targets(self, rows: Sequence[Sequence[int]]) -> list[str]:
        """Target ids (as decoded: maybe <s>, tokens, </s>, padding) -> text, cut at the first </s>.

        Args:
            rows: the decoded ids of each sentence.

        Returns:
            The texts, special tokens left out.
        """
        eos, texts = self.target.eos_id, []
        for row in rows:
            row = list(row)
            texts.append(self.target.decode(row[: row.index(eos)] if eos in row else row, skip_special_tokens=True))
        return texts


def reads_reversed(directory: str | os.PathLike[str]) -> bool:
    """Whether the model directory's ``seq2seq.json`` says its sources are read reversed.

    Args:
        directory: the model directory.

    Returns:
        True when the file is there and says so.

    Raises:
        PLMError: a file that is not a JSON object with a boolean ``reverse_source``.
    """
    path = Path(directory, SOURCE_ORDER_FILE)
    if not path.is_file():
        return False
    try:
        value = json.loads(path.read_text(encoding="utf-8")).get("reverse_source")
    except (ValueError, UnicodeDecodeError, AttributeError) as error:
        raise PLMError(f"{path}: not a JSON object ({error})") from None
    if not isinstance(value, bool):
        raise PLMError(f"{path}: reverse_source must be true or false, got {value!r}")
    return value


@dataclass(frozen=True)
class EncodedPairs:
    """Token ids of sentence pairs: sources ``x </s>``, targets ``<s> y </s>``.

    Attributes:
        sources: the ids of each source sentence.
        targets: the ids of each target sentence.
    """

    sources: list[list[int]]
    targets: list[list[int]]

    @classmethod
    def of(cls, pairs: Sequence[SentencePair], tokenizers: Seq2SeqTokenizers) -> EncodedPairs:
        """The pairs encoded with ``tokenizers``.

        Args:
            pairs: the sentence pairs.
            tokenizers: the source and target tokenizers.

        Returns:
            The encoded pairs, in the same order.
        """
        return cls(
            tokenizers.encode_sources([p.source for p in pairs]), tokenizers.encode_targets([p.target for p in pairs])
        )

    def __len__(self) -> int:
        return len(self.sources)

    def select(self, indices: Sequence[int]) -> EncodedPairs:
        """The pairs at ``indices``, in that order.

        Args:
            indices: positions of pairs.

        Returns:
            The selected pairs.
        """
        return EncodedPairs([self.sources[i] for i in indices], [self.targets[i] for i in indices])


def right_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of ids -> (B, T) ids padded on the right with ``pad_id`` and the (B, T) mask, 1 at real tokens.

    Args:
        rows: the ids of each row.
        pad_id: the id that fills the padding.

    Returns:
        The (B, T) int64 ids and mask; T is the longest row.
    """
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for row, values in enumerate(rows):
        ids[row, : len(values)] = torch.tensor(values, dtype=torch.long)
        mask[row, : len(values)] = 1
    return ids, mask


def collate(data: EncodedPairs, indices: Sequence[int], source_pad: int, target_pad: int) -> dict[str, torch.Tensor]:
    """The pairs ``indices`` as one batch: source ids and mask, decoder inputs, labels (pad where none).

    Args:
        data: the encoded pairs.
        indices: the pairs of the batch.
        source_pad: the source tokenizer's pad id.
        target_pad: the target tokenizer's pad id.

    Returns:
        ``source_ids`` and ``source_mask`` (B, S); ``decoder_input_ids`` (B, T), ``<s> y`` and padding; ``labels``
        (B, T), ``y </s>`` and padding.
    """
    source_ids, source_mask = right_pad([data.sources[i] for i in indices], source_pad)
    targets, _ = right_pad([data.targets[i] for i in indices], target_pad)
    return {
        "source_ids": source_ids,
        "source_mask": source_mask,
        "decoder_input_ids": targets[:, :-1],  # <s> y_1 .. y_m (and padding)
        "labels": targets[:, 1:],  # y_1 .. y_m </s> (and padding)
    }


def token_budget_batches(data: EncodedPairs, max_tokens: int) -> list[list[int]]:
    """Indices of pairs grouped by length, each group's padded size at most ``max_tokens``.

    A group's padded size is rows x (longest source + longest target). Pairs are sorted
    by (source, target) length, so a batch holds sentences of similar lengths and little
    padding (fairseq's ``--max-tokens``). A pair alone over the budget is an error: it
    could never be trained on.

    Args:
        data: the encoded pairs.
        max_tokens: the budget of padded tokens per batch.

    Returns:
        The batches, each a list of pair indices, shortest pairs first.

    Raises:
        PLMError: a pair longer than the budget on its own.
    """
    order = sorted(range(len(data)), key=lambda i: (len(data.sources[i]), len(data.targets[i])))
    batches: list[list[int]] = []
    current: list[int] = []
    longest_source = longest_target = 0
    for index in order:
        source, target = len(data.sources[index]), len(data.targets[index])
        if source + target > max_tokens:
            raise PLMError(f"pair {index + 1} has {source} + {target} tokens, more than the budget of {max_tokens} "
                           f"tokens per batch; raise --max-tokens or drop the pair")
        widths = max(longest_source, source) + max(longest_target, target)
        if current and widths * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest_source, longest_target = [], 0, 0
        current.append(index)
        longest_source, longest_target = max(longest_source, source), max(longest_target, target)
    if current:
        batches.append(current)
    return batches


class BudgetSampler:
    """Batches of similar lengths under a token budget, one drawn at random per (step, micro-batch).

    Stateless like :class:`plm.data.tokens.BlockSampler`: the choice comes from a
    generator seeded with (seed, step, micro-batch), so a resumed run draws the same.

    Args:
        data: the encoded pairs.
        max_tokens: the budget of padded tokens per batch (see :func:`token_budget_batches`).
        seed: the seed of the draws.

    Raises:
        PLMError: a pair longer than the budget on its own.
    """

    def __init__(self, data: EncodedPairs, max_tokens: int, seed: int) -> None:
        self.batches = token_budget_batches(data, max_tokens)
        self.seed = seed

    def __len__(self) -> int:
        return len(self.batches)

    def indices(self, step: int, micro: int) -> list[int]:
        """The batch of micro-batch ``micro`` at step ``step``: the same on every call with the same arguments.

        Args:
            step: the optimizer step.
            micro: the micro-batch within the step.

        Returns:
            The indices of its pairs.
        """
        entropy = np.random.SeedSequence([self.seed, step, micro]).generate_state(1, np.uint64)
        return self.batches[int(np.random.default_rng(entropy).integers(len(self.batches)))]

