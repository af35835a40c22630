"""Parallel text for sequence to sequence: sentence pairs, their tokenizers, and batches under a token budget.

Pairs come from two aligned files (line i of one translates line i of the other), one TSV
(``source<TAB>target`` per line), or JSON lines of Hugging Face translation records
(``{"translation": {"de": ..., "en": ...}}``, WMT's form), all read line by line
([`ParallelText`][plm.data.sentence_pairs.ParallelText]), so that a corpus of millions of pairs streams into
[`prepare_pairs`][plm.data.prepare.prepare_pairs] in bounded memory. Misaligned files and empty sentences are
errors naming the file and line, found before anything trains.

A source is encoded as ``x_1 .. x_n </s>`` (or ``x_n .. x_1 </s>``, reversed as Sutskever et al. reverse it,
when the tokenizers say so); a target as ``<s> y_1 .. y_m </s>``, whose
first m + 1 tokens the decoder reads (teacher forcing) to predict the last m + 1.
The tokenizer is byte-level BPE trained on both sides at once (one joint vocabulary)
or one per side; a separate target tokenizer is saved in ``target/`` of the model directory, and a
reversed source order in its ``seq2seq.json``, so that every user of the model reads sources as it was trained.
A released translation model's directory (Marian's, fairseq's) holds the files of its own
tokenizers ([`plm.tokenization.released`][plm.tokenization.released]), which are read, and saved, in their place.

Batches are drawn from encoded pairs in memory ([`EncodedPairs`][plm.data.sentence_pairs.EncodedPairs]) or mapped from a
prepared corpus ([`PreparedPairs`][plm.data.prepared.PreparedPairs]) alike
([`PairRows`][plm.data.sentence_pairs.PairRows]):
from their lengths as arrays and a pair's ids by its index, so that grouping millions of pairs by length builds two
integer arrays ([`BudgetBatches`][plm.data.sentence_pairs.BudgetBatches]), not a list per batch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import zip_longest
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from plm.data.corpus import json_object
from plm.data.sources import iter_lines
from plm.errors import PLMError
from plm.tokenization.protocol import TokenizerLike
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


def sentence_lines(path: str | os.PathLike[str]) -> Iterator[str]:
    """The lines of a user's file of sentences, one a line, read as they are needed; an empty one is an error.

    Args:
        path: the file (also ``.gz``, ``.zst``).

    Yields:
        Its lines, without their line ends.

    Raises:
        PLMError: a file [`iter_lines`][plm.data.sources.iter_lines] refuses, or an empty line (naming it).
    """
    for number, line in iter_lines(path):
        if not line.strip():
            raise PLMError(f"{path}:{number}: empty line; every line must hold one sentence")
        yield line


def iter_parallel(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> Iterator[SentencePair]:
    """Pairs from two aligned files, one sentence per line, read line by line in lockstep.

    Args:
        source: the file of source sentences.
        target: the file of their translations, line for line.

    Yields:
        The pairs, in file order.

    Raises:
        PLMError: an unreadable file, an empty line, or files of different lengths (once the shorter one ends:
            the longer one is counted to its end).
    """
    sources, targets = sentence_lines(source), sentence_lines(target)
    matched = 0
    for source_line, target_line in zip_longest(sources, targets):
        if source_line is None or target_line is None:
            rest = 1 + sum(1 for _ in (targets if source_line is None else sources))
            counts = (matched, matched + rest) if source_line is None else (matched + rest, matched)
            shorter, longer = (source, target) if source_line is None else (target, source)
            raise PLMError(f"{source} has {counts[0]} lines but {target} has {counts[1]}: the files are not aligned "
                           f"({longer}:{matched + 1} has no counterpart in {shorter})")
        matched += 1
        yield SentencePair(source_line, target_line)


def read_parallel(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> list[SentencePair]:
    """Pairs from two aligned files, one sentence per line (see `iter_parallel`), as a list.

    Args:
        source: the file of source sentences.
        target: the file of their translations, line for line.

    Returns:
        The pairs, in file order.

    Raises:
        PLMError: an unreadable file, an empty line, or files of different lengths.
    """
    return list(iter_parallel(source, target))


def iter_tsv(path: str | os.PathLike[str]) -> Iterator[SentencePair]:
    """Pairs from ``source<TAB>target`` lines, read line by line.

    Args:
        path: the TSV file (also ``.gz``, ``.zst``).

    Yields:
        The pairs, in file order.

    Raises:
        PLMError: an unreadable file, a line without exactly one tab, or an empty sentence.
    """
    for number, line in iter_lines(path):
        fields = line.split("\t")
        if len(fields) != 2:
            raise PLMError(f"{path}:{number}: expected source<TAB>target, found {len(fields) - 1} tabs")
        if not fields[0].strip() or not fields[1].strip():
            side = "source" if not fields[0].strip() else "target"
            raise PLMError(f"{path}:{number}: empty {side} sentence")
        yield SentencePair(*fields)


def read_tsv(path: str | os.PathLike[str]) -> list[SentencePair]:
    """Pairs from ``source<TAB>target`` lines (see [`iter_tsv`][plm.data.sentence_pairs.iter_tsv]), as a list.

    Args:
        path: the TSV file.

    Returns:
        The pairs, in file order.

    Raises:
        PLMError: an unreadable file, a line without exactly one tab, or an empty sentence.
    """
    return list(iter_tsv(path))


def iter_translations(path: str | os.PathLike[str], source_language: str,
                      target_language: str) -> Iterator[SentencePair]:
    """Pairs from JSON lines of Hugging Face translation records, ``{"translation": {"de": ..., "en": ...}}``.

    This is the form of the ``wmt14``, ``wmt16``, ``opus_books`` ... datasets' rows. Blank lines are skipped.

    Args:
        path: the JSONL file (also ``.gz``, ``.zst``).
        source_language: the key of the source sentence in ``translation``.
        target_language: the key of the target sentence.

    Yields:
        The pairs, in file order.

    Raises:
        PLMError: an unreadable file, a line that is not a JSON object, a record without ``translation`` or
            without one of the languages, a sentence that is not a string, or an empty sentence.
    """
    for number, line in iter_lines(path):
        if not line.strip():
            continue
        record = json_object(line, path, number)
        translation = record.get("translation")
        if not isinstance(translation, dict):
            fields = ", ".join(record) or "the object has none"
            raise PLMError(f"{path}:{number}: expected a record {{\"translation\": {{\"{source_language}\": ..., "
                           f"\"{target_language}\": ...}}}} (the fields are {fields})")
        sentences = []
        for language in (source_language, target_language):
            if language not in translation:
                raise PLMError(f"{path}:{number}: the translation has no {language!r} (its languages are "
                               f"{', '.join(translation) or 'none'})")
            sentence = translation[language]
            if not isinstance(sentence, str) or not sentence.strip():
                what = "an empty sentence" if isinstance(sentence, str) else f"{sentence!r}, not a sentence"
                raise PLMError(f"{path}:{number}: {language!r} holds {what}")
            sentences.append(sentence)
        yield SentencePair(*sentences)


@dataclass(frozen=True)
class ParallelText:
    """Where sentence pairs are kept: two aligned files, a TSV file, or JSON lines of translation records.

    Give ``source`` and ``target``, or ``tsv``, or ``translations`` and ``languages``.

    Attributes:
        source: the file of source sentences, one a line.
        target: the file of their translations, line for line.
        tsv: a file of ``source<TAB>target`` lines.
        translations: JSONL files of translation records (see
            [`iter_translations`][plm.data.sentence_pairs.iter_translations]), read in order.
        languages: the keys of the source and the target in the records of ``translations``.

    Raises:
        PLMError: none of the forms, or more than one, or half of one.
    """

    source: str | os.PathLike[str] | None = None
    target: str | os.PathLike[str] | None = None
    tsv: str | os.PathLike[str] | None = None
    translations: tuple[str | os.PathLike[str], ...] = ()
    languages: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        forms = [self.source is not None or self.target is not None, self.tsv is not None, bool(self.translations)]
        aligned = self.source is not None and self.target is not None
        if forms.count(True) != 1 or (forms[0] and not aligned) or (forms[2] != (self.languages is not None)):
            raise PLMError("sentence pairs are read from a source and a target file, from a TSV file, or from "
                           "translation records with their two languages: give one of these")

    @property
    def form(self) -> str:
        """``aligned``, ``tsv`` or ``translations``."""
        return "aligned" if self.source is not None else "tsv" if self.tsv is not None else "translations"

    def files(self) -> list[Path]:
        """The files the pairs are read from, in order.

        Returns:
            The paths.
        """
        if self.source is not None and self.target is not None:
            return [Path(self.source), Path(self.target)]
        return [Path(self.tsv)] if self.tsv is not None else [Path(path) for path in self.translations]

    def pairs(self) -> Iterator[SentencePair]:
        """The pairs, read as they are needed.

        Yields:
            The pairs, in file order.

        Raises:
            PLMError: a file the form's reader refuses ([`iter_parallel`][plm.data.sentence_pairs.iter_parallel],
                [`iter_tsv`][plm.data.sentence_pairs.iter_tsv],
                [`iter_translations`][plm.data.sentence_pairs.iter_translations]).
        """
        if self.source is not None and self.target is not None:
            yield from iter_parallel(self.source, self.target)
        elif self.tsv is not None:
            yield from iter_tsv(self.tsv)
        else:
            assert self.languages is not None  # checked with the form
            for path in self.translations:
                yield from iter_translations(path, *self.languages)


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

    def __init__(self, source: TokenizerLike, target: TokenizerLike | None = None, *,
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
            kind: the tokenizer kind, a key of `TOKENIZER_TRAINERS`; "bpe" gets
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
        """The tokenizers `save` wrote into ``directory``, or a released model's (Marian, fairseq).

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


TokenIds = Sequence[int] | np.ndarray  # a sentence's ids: a list, or a view of a prepared corpus' mapped file


class PairRows(Protocol):
    """Encoded sentence pairs as batches read them: their lengths as arrays, and a pair's ids by its index.

    [`EncodedPairs`][plm.data.sentence_pairs.EncodedPairs] holds them in memory; a split of a prepared corpus
    ([`PreparedPairSplit`][plm.data.prepared.PreparedPairSplit]) maps them from disk.
    """

    @property
    def source_lengths(self) -> np.ndarray:
        """(pairs,) the tokens of each source, ``</s>`` included."""
        ...

    @property
    def target_lengths(self) -> np.ndarray:
        """(pairs,) the tokens of each target, ``<s>`` and ``</s>`` included."""
        ...

    def pair(self, index: int) -> tuple[TokenIds, TokenIds]:
        """The source and target ids of pair ``index``."""
        ...

    def __len__(self) -> int: ...


@dataclass(frozen=True)
class EncodedPairs:
    """Token ids of sentence pairs, in memory: sources ``x </s>``, targets ``<s> y </s>``.

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

    @cached_property
    def source_lengths(self) -> np.ndarray:
        """(pairs,) int64, the tokens of each source."""
        return np.fromiter(map(len, self.sources), np.int64, len(self.sources))

    @cached_property
    def target_lengths(self) -> np.ndarray:
        """(pairs,) int64, the tokens of each target."""
        return np.fromiter(map(len, self.targets), np.int64, len(self.targets))

    def pair(self, index: int) -> tuple[list[int], list[int]]:
        """The source and target ids of pair ``index``.

        Args:
            index: the pair.

        Returns:
            Its source ids and its target ids.
        """
        return self.sources[index], self.targets[index]


def right_pad(rows: Sequence[TokenIds], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of ids -> (B, T) ids padded on the right with ``pad_id`` and the (B, T) mask, 1 at real tokens.

    Args:
        rows: the ids of each row (lists, or arrays mapped from a prepared corpus).
        pad_id: the id that fills the padding.

    Returns:
        The (B, T) int64 ids and mask; T is the longest row.
    """
    width = max(map(len, rows))
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for row, values in enumerate(rows):
        ids[row, : len(values)] = values
        mask[row, : len(values)] = 1
    return torch.from_numpy(ids), torch.from_numpy(mask)


def collate(data: PairRows, indices: Iterable[int], source_pad: int, target_pad: int) -> dict[str, torch.Tensor]:
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
    pairs = [data.pair(int(index)) for index in indices]
    source_ids, source_mask = right_pad([source for source, _ in pairs], source_pad)
    targets, _ = right_pad([target for _, target in pairs], target_pad)
    return {
        "source_ids": source_ids,
        "source_mask": source_mask,
        "decoder_input_ids": targets[:, :-1],  # <s> y_1 .. y_m (and padding)
        "labels": targets[:, 1:],  # y_1 .. y_m </s> (and padding)
    }


@dataclass(frozen=True)
class BudgetBatches:
    """Batches of pairs: one order of the pairs, cut into runs of consecutive pairs.

    Two arrays, whatever the number of pairs, rather than a list per batch.

    Attributes:
        order: (pairs,) int64, the indices of the pairs, shortest first.
        bounds: (batches + 1,) int64, where each batch starts in ``order``; the last is ``len(order)``.
    """

    order: np.ndarray
    bounds: np.ndarray

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def __getitem__(self, batch: int) -> np.ndarray:
        return self.order[self.bounds[batch] : self.bounds[batch + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[batch] for batch in range(len(self)))


_GREEDY_CHUNK = 1 << 16  # the pairs whose lengths are made Python ints at a time


def token_budget_batches(source_lengths: np.ndarray, target_lengths: np.ndarray, max_tokens: int,
                         among: np.ndarray | None = None) -> BudgetBatches:
    """Pairs grouped by length, each group's padded size at most ``max_tokens``.

    A group's padded size is rows x (longest source + longest target). Pairs are sorted
    by (source, target) length, so a batch holds sentences of similar lengths and little
    padding (fairseq's ``--max-tokens``); each batch takes pairs in that order while they fit.
    A pair alone over the budget is an error: it could never be trained on.

    Args:
        source_lengths: (pairs,) the tokens of each source.
        target_lengths: (pairs,) the tokens of each target.
        max_tokens: the budget of padded tokens per batch.
        among: the indices of the pairs to batch (default: all).

    Returns:
        The batches, shortest pairs first.

    Raises:
        PLMError: a pair longer than the budget on its own.
    """
    among = np.arange(len(source_lengths)) if among is None else np.asarray(among, dtype=np.int64)
    order = among[np.lexsort((target_lengths[among], source_lengths[among]))]  # by source, then target; stable
    sources, targets = source_lengths[order], target_lengths[order]
    too_long = np.flatnonzero(sources + targets > max_tokens)
    if len(too_long):
        first = too_long[0]
        raise PLMError(f"pair {order[first] + 1} has {sources[first]} + {targets[first]} tokens, more than the budget "
                       f"of {max_tokens} tokens per batch; raise `max_tokens` or drop the pair")
    starts = [0]
    size = longest_target = 0  # the pairs of the batch being filled, and its longest target
    for chunk in range(0, len(order), _GREEDY_CHUNK):  # over Python ints: numpy's scalars are several times slower
        lengths = zip(sources[chunk : chunk + _GREEDY_CHUNK].tolist(), targets[chunk : chunk + _GREEDY_CHUNK].tolist())
        for source, target in lengths:
            size += 1
            if target > longest_target:
                longest_target = target
            # Sorted by source length: this pair's source is the batch's longest.
            if size > 1 and (source + longest_target) * size > max_tokens:  # it opens the next batch
                starts.append(starts[-1] + size - 1)
                size, longest_target = 1, target
    return BudgetBatches(order, np.array([*starts, len(order)] if len(order) else [0], dtype=np.int64))


class BudgetSampler:
    """Batches of similar lengths under a token budget, one drawn at random per (step, micro-batch).

    Stateless like [`BlockSampler`][plm.data.tokens.BlockSampler]: the choice comes from a
    generator seeded with (seed, step, micro-batch), so a resumed run draws the same.

    Args:
        batches: the batches (see [`token_budget_batches`][plm.data.sentence_pairs.token_budget_batches]).
        seed: the seed of the draws.
    """

    def __init__(self, batches: BudgetBatches, seed: int) -> None:
        self.batches = batches
        self.seed = seed

    def __len__(self) -> int:
        return len(self.batches)

    def indices(self, step: int, micro: int) -> np.ndarray:
        """The batch of micro-batch ``micro`` at step ``step``: the same on every call with the same arguments.

        Args:
            step: the optimizer step.
            micro: the micro-batch within the step.

        Returns:
            The indices of its pairs.
        """
        entropy = np.random.SeedSequence([self.seed, step, micro]).generate_state(1, np.uint64)
        return self.batches[int(np.random.default_rng(entropy).integers(len(self.batches)))]
