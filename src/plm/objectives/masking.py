"""Masked language modelling's corruption step (BERT, ALBERT), on tensors.

BERT hides 15% of the tokens of a sequence (never [CLS], [SEP] or padding) and asks
the model for the originals. Of the selected tokens 80% become [MASK], 10% a random
token and 10% stay as they are, so that the model cannot rely on seeing [MASK]
where it must predict; each token's fate is drawn on its own, as in BERT's code.

Selection follows BERT's ``create_pretraining_data.py``: a sequence with n maskable
tokens gets ``max(1, round(0.15 * n))`` targets; the candidates (tokens, or whole
words) are visited in random order and taken while they fit that count. So the rate
is exactly 15% per sequence, not 15% on average.

Whole-word masking takes all the pieces of a word together; words come from the
tokenizer's word ids, so it works for WordPiece, Unigram and byte-level BPE alike.
ALBERT's n-gram masking takes spans of n consecutive words with p(n) proportional
to 1/n (n <= 3: 6/11, 3/11, 2/11). ALBERT's code draws a span at a random start and
drops it when it overlaps an earlier one, which drops long spans more often than
short ones; here each stretch of words between special tokens is cut into
consecutive spans whose lengths are drawn from p(n), and whole spans are taken in
random order, so spans never overlap and their lengths follow p(n) (except the
last one or two, chosen to fill the count, and those cut short by a [SEP]).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch

from plm.errors import PLMError

IGNORE_INDEX = -100  # the label of a position that is not a target (cross_entropy's ignore_index)
MLM_PROBABILITY = 0.15  # the share of tokens a masked LM predicts (BERT section 3.1)
MASK_RATIOS = (0.8, 0.1, 0.1)  # of the selected tokens: [MASK], a random token, unchanged (BERT section 3.1)


def check_mask_ratios(ratios: Sequence[float]) -> tuple[float, float, float]:
    """The shares of [MASK], random and unchanged tokens, checked: three non-negative numbers that sum to 1.

    Args:
        ratios: the three shares.

    Returns:
        The shares as a tuple.

    Raises:
        PLMError: not three, a negative one, or a sum other than 1.
    """
    if len(ratios) != 3 or min(ratios) < 0 or abs(sum(ratios) - 1) > 1e-6:
        raise PLMError(f"the mask ratios are three shares of the selected tokens ([MASK], random, unchanged) that "
                       f"add up to 1, got {tuple(ratios)}")
    mask, random_token, unchanged = ratios
    return mask, random_token, unchanged


def mask_tokens(
    input_ids: torch.Tensor,
    maskable: torch.Tensor,
    mask_id: int,
    vocab_size: int,
    generator: torch.Generator,
    mlm_probability: float = MLM_PROBABILITY,
    word_ids: torch.Tensor | None = None,
    whole_word: bool = False,
    max_ngram: int = 1,
    special_ids: Sequence[int] = (),
    ratios: tuple[float, float, float] = MASK_RATIOS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Corrupt ``input_ids`` (B, T) for MLM; return ``(masked_input_ids, labels)``.

    Of the selected positions, 80% become ``mask_id``, 10% a random id and 10% stay (``ratios``; BERT's Appendix
    C.2 varies them). Random replacements are drawn from the ids that are not in ``special_ids``. All randomness
    comes from ``generator`` (CPU).

    Args:
        input_ids: (B, T) token ids.
        maskable: (B, T), True where a token may be selected: not a special token, not padding.
        mask_id: the mask token's id.
        vocab_size: the ids random replacements are drawn from.
        generator: the random numbers.
        mlm_probability: the share of maskable tokens selected.
        word_ids: as for [`select_spans`][plm.objectives.masking.select_spans].
        whole_word: as for [`select_spans`][plm.objectives.masking.select_spans].
        max_ngram: as for [`select_spans`][plm.objectives.masking.select_spans].
        special_ids: ids never drawn as a random replacement.
        ratios: the shares of the selected positions that become ``mask_id``, a random id, or stay.

    Returns:
        The corrupted ids (B, T), and the labels (B, T): the original id at the selected positions,
        `IGNORE_INDEX` elsewhere.

    Raises:
        PLMError: as [`select_spans`][plm.objectives.masking.select_spans].
    """
    selected = select_spans(maskable, generator, mlm_probability, word_ids, whole_word, max_ngram) >= 0
    selected = selected.to(input_ids.device)
    labels = torch.where(selected, input_ids, IGNORE_INDEX)
    fate = torch.rand(input_ids.shape, generator=generator).to(input_ids.device)
    excluded = torch.zeros(vocab_size, dtype=torch.bool)
    excluded[list(special_ids)] = True
    candidates = torch.arange(vocab_size)[~excluded]
    random_ids = candidates[torch.randint(len(candidates), input_ids.shape, generator=generator)]
    to_mask, to_random = ratios[0], ratios[0] + ratios[1]  # each position's fate: below, between, above
    masked = torch.where(selected & (fate < to_mask), mask_id, input_ids)
    masked = torch.where(selected & (fate >= to_mask) & (fate < to_random), random_ids.to(input_ids.device), masked)
    return masked, labels


def select_spans(
    maskable: torch.Tensor,
    generator: torch.Generator,
    mlm_probability: float = MLM_PROBABILITY,
    word_ids: torch.Tensor | None = None,
    whole_word: bool = False,
    max_ngram: int = 1,
) -> torch.Tensor:
    """Choose the positions to predict: (B, T) with a span number at chosen tokens, -1 elsewhere.

    The candidates are tokens, or words when ``whole_word`` is set or when
    ``max_ngram > 1`` and ``word_ids`` are given (ALBERT's n-grams are of whole words).
    Neither a word nor a span crosses a token that is not maskable (BERT's [SEP]). A span is what was chosen
    in one draw: a token, a word, or n consecutive words.

    Args:
        maskable: (B, T), True where a token may be selected.
        generator: the random numbers.
        mlm_probability: the share of maskable tokens selected (``max(1, round(p * n))`` per row).
        word_ids: (B, T): tokens of one word share a value and the next word has another; a negative value is
            a token of no word. None: no words.
        whole_word: select whole words.
        max_ngram: the longest span, in words; n is drawn with p(n) proportional to 1/n.

    Returns:
        (B, T) int64 span numbers.

    Raises:
        PLMError: a probability outside (0, 1], a ``max_ngram`` below 1, or ``whole_word`` without
            ``word_ids``.
    """
    if not 0 < mlm_probability <= 1:
        raise PLMError(f"the masking probability must be in (0, 1], got {mlm_probability}")
    if max_ngram < 1:
        raise PLMError(f"the longest masked n-gram must be at least 1 word, got {max_ngram}")
    if whole_word and word_ids is None:
        raise PLMError("whole-word masking needs the word ids of the tokens")
    by_word = word_ids is not None and (whole_word or max_ngram > 1)
    # One Python generator per batch, seeded from the torch one: the walk over words below
    # is sequential, and Python's random is the fastest way to draw one number at a time.
    rng = random.Random(int(torch.randint(2**62, (1,), generator=generator)))
    lengths, weights = list(range(1, max_ngram + 1)), [1 / n for n in range(1, max_ngram + 1)]
    rows = []
    units = word_ids if by_word and word_ids is not None else maskable
    for allowed, words in zip(maskable.tolist(), units.tolist()):
        tiles = [
            sum(stretch[start : start + n], [])
            for stretch in _stretches(allowed, words if by_word else None)
            for start, n in _tiling(len(stretch), lengths, weights, rng)
        ]
        budget = max(1, round(sum(allowed) * mlm_probability)) if any(allowed) else 0
        rng.shuffle(tiles)
        spans, covered = [-1] * len(allowed), 0
        for number, tile in enumerate(tiles):
            if covered == budget:
                break
            if covered + len(tile) > budget:
                continue
            for position in tile:
                spans[position] = number
            covered += len(tile)
        rows.append(spans)
    return torch.tensor(rows, dtype=torch.long).reshape(maskable.shape)


def _stretches(allowed: list[bool], words: list[int] | None) -> list[list[list[int]]]:
    """Runs of maskable tokens, each a list of units (a word's positions, or one token's)."""
    stretches: list[list[list[int]]] = []
    for position, ok in enumerate(allowed):
        if not ok:
            continue
        if position == 0 or not allowed[position - 1]:
            stretches.append([])
        same_word = (
            words is not None
            and stretches[-1]
            and words[position] >= 0
            and words[position] == words[position - 1]
        )
        if same_word:
            stretches[-1][-1].append(position)
        else:
            stretches[-1].append([position])
    return stretches


def _tiling(units: int, lengths: list[int], weights: list[float], rng: random.Random) -> list[tuple[int, int]]:
    """Cut ``units`` consecutive units into spans (start, n), n drawn with the given weights."""
    if len(lengths) == 1:
        return [(start, 1) for start in range(units)]
    tiles, start = [], 0
    while start < units:
        n = rng.choices(lengths, weights)[0]
        tiles.append((start, n))
        start += n
    return tiles
