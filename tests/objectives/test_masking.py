"""MLM masking: BERT's 15% with 80/10/10, whole words, ALBERT's n-grams; checked on 200k tokens."""

import pytest
import torch

from plm.errors import PLMError
from plm.objectives.masking import IGNORE_INDEX, check_mask_ratios, mask_tokens, select_spans

VOCAB, MASK, CLS, SEP, PAD = 1000, 4, 2, 3, 0
SPECIALS = (0, 1, 2, 3, 4)


def sequences(rows: int = 200, width: int = 1000, seed: int = 0):
    """[CLS] A [SEP] B [SEP] [PAD]...: random ids, random lengths, random words of 1 to 4 tokens."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(len(SPECIALS), VOCAB, (rows, width), generator=generator)
    lengths = torch.randint(width // 2, width + 1, (rows,), generator=generator)
    ids[:, 0] = CLS
    ids[torch.arange(rows), lengths // 2] = SEP
    ids[torch.arange(rows), lengths - 1] = SEP
    ids[torch.arange(width) >= lengths[:, None]] = PAD
    maskable = ~torch.isin(ids, torch.tensor(SPECIALS))
    word_lengths = torch.randint(1, 5, (rows, width), generator=generator)
    starts = torch.zeros(rows, width, dtype=torch.bool)
    for row in range(rows):
        starts[row, word_lengths[row].cumsum(0)[word_lengths[row].cumsum(0) < width]] = True
    starts[:, 1:] |= ~maskable[:, :-1]  # no word runs across [SEP]
    word_ids = torch.where(maskable, starts.long().cumsum(1), -1)
    return ids, maskable, word_ids


def budget(maskable: torch.Tensor) -> torch.Tensor:
    return torch.tensor([max(1, round(n * 0.15)) for n in maskable.sum(1).tolist()])


def runs(spans: torch.Tensor) -> list[list[int]]:
    """The positions of every chosen span, row after row."""
    found = []
    for row in spans.tolist():
        groups: dict[int, list[int]] = {}
        for position, number in enumerate(row):
            if number >= 0:
                groups.setdefault(number, []).append(position)
        found += groups.values()
    return found


def test_bert_masks_15_percent_of_maskable_tokens_80_10_10():
    ids, maskable, _ = sequences()
    assert maskable.sum() > 100_000
    masked, labels = mask_tokens(ids, maskable, MASK, VOCAB, torch.Generator().manual_seed(1), special_ids=SPECIALS)
    selected = labels != IGNORE_INDEX
    assert torch.equal(selected.sum(1), budget(maskable))  # exactly round(15%) in every sequence
    assert not (selected & ~maskable).any()  # never [CLS], [SEP] or padding
    assert torch.equal(labels[selected], ids[selected])
    assert torch.equal(masked[~selected], ids[~selected])
    to_mask = (masked[selected] == MASK).float().mean().item()
    kept = (masked[selected] == ids[selected]).float().mean().item()
    replaced = masked[selected][(masked[selected] != MASK) & (masked[selected] != ids[selected])]
    assert to_mask == pytest.approx(0.8, abs=0.01)
    assert kept == pytest.approx(0.1, abs=0.008)
    assert len(replaced) / selected.sum().item() == pytest.approx(0.1, abs=0.008)
    assert not torch.isin(replaced, torch.tensor(SPECIALS)).any()
    positions = selected.nonzero()[:, 1].float()  # the choice is spread over the whole sequence
    assert positions.mean().item() == pytest.approx(maskable.nonzero()[:, 1].float().mean().item(), rel=0.02)


@pytest.mark.parametrize("ratios", [(1.0, 0.0, 0.0), (0.0, 0.2, 0.8), (0.5, 0.3, 0.2)])
def test_the_mask_ratios_of_bert_appendix_c2_are_options(ratios):
    ids, maskable, _ = sequences()
    masked, labels = mask_tokens(ids, maskable, MASK, VOCAB, torch.Generator().manual_seed(2), special_ids=SPECIALS,
                                 ratios=ratios)
    selected = labels != IGNORE_INDEX
    n = selected.sum().item()
    to_mask = (masked[selected] == MASK).float().mean().item()
    kept = (masked[selected] == ids[selected]).float().mean().item()
    shares = [to_mask, 1 - to_mask - kept, kept]  # neither [MASK] nor the original: a random token
    for share, expected in zip(shares, ratios):  # within 5 standard deviations of the binomial share
        assert share == pytest.approx(expected, abs=5 * (expected * (1 - expected) / n) ** 0.5 + 1 / VOCAB)


def test_mask_ratios_that_do_not_add_up_are_refused():
    with pytest.raises(PLMError, match=r"add up to 1, got \(0.8, 0.1, 0.2\)"):
        check_mask_ratios((0.8, 0.1, 0.2))


def test_masking_is_a_function_of_the_generator_seed():
    ids, maskable, word_ids = sequences(rows=8, width=64)
    runs_ = [
        mask_tokens(ids, maskable, MASK, VOCAB, torch.Generator().manual_seed(seed), word_ids=word_ids, max_ngram=3)
        for seed in (5, 5, 6)
    ]
    assert all(torch.equal(a, b) for a, b in zip(runs_[0], runs_[1]))
    assert not torch.equal(runs_[0][1], runs_[2][1])


def test_whole_word_masking_takes_every_piece_of_a_word_or_none():
    ids, maskable, word_ids = sequences()
    _, labels = mask_tokens(
        ids, maskable, MASK, VOCAB, torch.Generator().manual_seed(2), word_ids=word_ids, whole_word=True
    )
    selected = labels != IGNORE_INDEX
    for row in range(len(ids)):
        words = word_ids[row][maskable[row]]
        chosen = selected[row][maskable[row]]
        per_word = torch.zeros(int(words.max()) + 1).index_add_(0, words, chosen.float())
        sizes = torch.bincount(words)
        assert torch.equal(per_word[sizes > 0] == 0, per_word[sizes > 0] != sizes[sizes > 0])
    assert (selected.sum(1) <= budget(maskable)).all()
    assert (selected.sum() / maskable.sum()).item() == pytest.approx(0.15, abs=0.002)


def test_ngram_lengths_follow_one_over_n():
    """ALBERT: p(n) = (1/n) / sum_k (1/k), so 6/11, 3/11 and 2/11 for spans of up to 3 words."""
    ids, maskable, _ = sequences()
    one_token_words = torch.where(maskable, torch.arange(ids.shape[1]), -1)
    spans = select_spans(maskable, torch.Generator().manual_seed(3), word_ids=one_token_words, max_ngram=3)
    assert torch.equal((spans >= 0).sum(1), budget(maskable))
    lengths = torch.tensor([len(span) for span in runs(spans)])
    assert len(lengths) > 12_000
    shares = torch.bincount(lengths, minlength=4)[1:] / len(lengths)
    assert shares.tolist() == pytest.approx([6 / 11, 3 / 11, 2 / 11], abs=0.015)


def test_ngrams_are_consecutive_whole_words_and_never_cross_a_separator():
    ids, maskable, word_ids = sequences(rows=50)
    spans = select_spans(maskable, torch.Generator().manual_seed(4), word_ids=word_ids, max_ngram=3)
    words_per_span = []
    for row in range(len(ids)):
        for span in runs(spans[row : row + 1]):
            assert span == list(range(span[0], span[-1] + 1))  # consecutive tokens, no [SEP] inside
            words = word_ids[row, span].unique()
            in_span = torch.isin(torch.arange(ids.shape[1]), torch.tensor(span))
            assert torch.equal(torch.isin(word_ids[row], words), in_span)  # whole words only
            words_per_span.append(len(words))
    assert set(words_per_span) == {1, 2, 3}


def test_a_sequence_without_maskable_tokens_gets_no_target_and_bad_settings_are_refused():
    ids = torch.tensor([[CLS, SEP, PAD, PAD], [CLS, 7, SEP, PAD]])
    maskable = torch.tensor([[False] * 4, [False, True, False, False]])
    masked, labels = mask_tokens(ids, maskable, MASK, VOCAB, torch.Generator().manual_seed(0))
    assert labels.tolist() == [[IGNORE_INDEX] * 4, [IGNORE_INDEX, 7, IGNORE_INDEX, IGNORE_INDEX]]
    with pytest.raises(PLMError, match="masking probability must be in"):
        select_spans(maskable, torch.Generator(), mlm_probability=1.5)
    with pytest.raises(PLMError, match="whole-word masking needs the word ids"):
        select_spans(maskable, torch.Generator(), whole_word=True)
