"""Parallel text: aligned files and TSV whose errors name file and line, tokenizers for both sides, budget batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from plm.data.sentence_pairs import (
    EncodedPairs,
    SentencePair,
    Seq2SeqTokenizers,
    collate,
    read_parallel,
    read_tsv,
    token_budget_batches,
)
from plm.errors import PLMError

GERMAN = ["ein hund läuft", "zwei katzen schlafen", "der mann liest ein buch", "eine frau singt"]
ENGLISH = ["a dog runs", "two cats sleep", "the man reads a book", "a woman sings"]


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_two_aligned_files_and_a_tsv_give_the_same_pairs(tmp_path: Path) -> None:
    pairs = read_parallel(write(tmp_path / "de", GERMAN), write(tmp_path / "en", ENGLISH))
    assert pairs == [SentencePair(s, t) for s, t in zip(GERMAN, ENGLISH)]
    assert read_tsv(write(tmp_path / "pairs.tsv", [f"{s}\t{t}" for s, t in zip(GERMAN, ENGLISH)])) == pairs


def test_misaligned_files_name_both_files_and_the_first_unmatched_line(tmp_path: Path) -> None:
    source, target = write(tmp_path / "de", GERMAN), write(tmp_path / "en", ENGLISH[:3])
    with pytest.raises(PLMError, match=rf"{source} has 4 lines but {target} has 3.*{source}:4 has no counterpart"):
        read_parallel(source, target)


def test_an_empty_line_names_its_file_and_line(tmp_path: Path) -> None:
    source, target = write(tmp_path / "de", GERMAN), write(tmp_path / "en", [*ENGLISH[:2], " ", ENGLISH[3]])
    with pytest.raises(PLMError, match=rf"{target}:3: empty line"):
        read_parallel(source, target)
    tsv = write(tmp_path / "pairs.tsv", ["a\tb", "c\t", "d\te"])
    with pytest.raises(PLMError, match=rf"{tsv}:2: empty target"):
        read_tsv(tsv)
    with pytest.raises(PLMError, match=rf"{tsv}:1: expected source<TAB>target, found 0 tabs"):
        read_tsv(write(tmp_path / "pairs.tsv", ["no tab here", "a\tb"]))


def test_a_joint_tokenizer_knows_both_sides_and_separate_ones_round_trip(tmp_path: Path) -> None:
    pairs = [SentencePair(s, t) for s, t in zip(GERMAN, ENGLISH)] * 20
    joint = Seq2SeqTokenizers.train(pairs, vocab_size=400)
    assert joint.joint
    # a word of each side is one token
    assert len(joint.source.encode(" katzen")) == 1 and len(joint.source.encode(" cats")) == 1
    separate = Seq2SeqTokenizers.train(pairs, vocab_size=400, joint=False)
    assert len(separate.source.encode(" katzen")) == 1 and len(separate.target.encode(" katzen")) > 1
    separate.save(tmp_path)
    loaded = Seq2SeqTokenizers.load(tmp_path)
    assert not loaded.joint and loaded.target.encode("cats sleep") == separate.target.encode("cats sleep")
    [target] = loaded.encode_targets(["two cats sleep"])
    assert target[0] == loaded.target.bos_id and target[-1] == loaded.target.eos_id
    assert loaded.decode_targets([target + [loaded.target.pad_id] * 2]) == ["two cats sleep"]


def test_budget_batches_hold_every_pair_once_and_each_stays_under_the_budget() -> None:
    lengths = [(3, 4), (10, 12), (5, 5), (2, 2), (9, 11), (4, 3), (7, 8), (1, 2), (12, 9)]
    data = EncodedPairs([[0] * s for s, _ in lengths], [[0] * t for _, t in lengths])
    batches = token_budget_batches(data.source_lengths, data.target_lengths, max_tokens=40)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    for batch in batches:  # the padded size, computed from the definition
        assert len(batch) * (max(lengths[i][0] for i in batch) + max(lengths[i][1] for i in batch)) <= 40
    # greedy over the length-sorted pairs
    assert [sorted(batch) for batch in batches] == [[0, 3, 5, 7], [2, 6], [4], [1], [8]]
    among = token_budget_batches(data.source_lengths, data.target_lengths, max_tokens=40, among=[1, 2, 3, 6])
    assert [sorted(batch) for batch in among] == [[2, 3], [6], [1]]  # the pairs given, by their own indices
    with pytest.raises(PLMError, match="pair 2 has 10 \\+ 12 tokens, more than the budget of 20"):
        token_budget_batches(data.source_lengths, data.target_lengths, max_tokens=20)


def test_a_batch_shifts_the_target_for_teacher_forcing() -> None:
    data = EncodedPairs(sources=[[5, 6, 2], [7, 2]], targets=[[1, 8, 9, 2], [1, 4, 2]])
    batch = collate(data, [0, 1], source_pad=0, target_pad=0)
    assert batch["source_ids"].tolist() == [[5, 6, 2], [7, 2, 0]]
    assert batch["source_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["decoder_input_ids"].tolist() == [[1, 8, 9], [1, 4, 2]]
    assert batch["labels"].tolist() == [[8, 9, 2], [4, 2, 0]]


def test_reversed_sources_read_their_tokens_backwards_and_the_order_is_saved_with_the_tokenizers(
        tmp_path: Path) -> None:
    pairs = [SentencePair(s, t) for s, t in zip(GERMAN, ENGLISH)] * 20
    tokenizers = Seq2SeqTokenizers.train(pairs, vocab_size=400, reverse_source=True)
    words = tokenizers.source.encode("der mann liest ein buch")
    eos = tokenizers.source.eos_id
    assert tokenizers.encode_sources(["der mann liest ein buch"]) == [[*reversed(words), eos]]  # Sutskever's x_n..x_1
    assert tokenizers.encode_targets(["a dog runs"]) == Seq2SeqTokenizers.train(pairs, vocab_size=400).encode_targets(
        ["a dog runs"])  # the targets keep their order
    tokenizers.save(tmp_path / "reversed")
    assert Seq2SeqTokenizers.load(tmp_path / "reversed").encode_sources(["ein hund"]) == [
        [*reversed(tokenizers.source.encode("ein hund")), eos]]
    tokenizers.in_source_order(False).save(tmp_path / "in-order")
    assert not Seq2SeqTokenizers.load(tmp_path / "in-order").reverse_source
    tokenizers.in_source_order(False).save(tmp_path / "reversed")  # over the reversed ones: in order now
    assert not Seq2SeqTokenizers.load(tmp_path / "reversed").reverse_source


def test_an_unreadable_source_order_names_its_file(tmp_path: Path) -> None:
    pairs = [SentencePair(s, t) for s, t in zip(GERMAN, ENGLISH)] * 20
    Seq2SeqTokenizers.train(pairs, vocab_size=400).save(tmp_path)
    (tmp_path / "seq2seq.json").write_text('{"reverse_source": "yes"}', encoding="utf-8")
    with pytest.raises(PLMError, match=r"seq2seq.json: reverse_source must be true or false, got 'yes'"):
        Seq2SeqTokenizers.load(tmp_path)


def test_a_pair_exactly_at_the_budget_is_a_batch_and_one_token_over_is_refused() -> None:
    # 10 + 12 = 22 tokens: a budget of 22 holds it alone; 21 can never hold it, so it must be refused, not
    # silently made a batch over the budget.
    sources, targets = np.array([2, 10]), np.array([3, 12])
    batches = token_budget_batches(sources, targets, max_tokens=22)
    assert [sorted(batch.tolist()) for batch in batches] == [[0], [1]]  # (10 + 12) x 2 rows > 22
    with pytest.raises(PLMError, match=r"pair 2 has 10 \+ 12 tokens, more than the budget of 21"):
        token_budget_batches(sources, targets, max_tokens=21)


def test_the_sampler_draws_a_batch_per_step_and_micro_batch_the_same_on_every_call() -> None:
    from collections import Counter

    from plm.data.sentence_pairs import BudgetSampler

    lengths = np.arange(1, 41)  # 40 pairs of 1..40 tokens a side: 10 batches or so under the budget
    batches = token_budget_batches(lengths, lengths, max_tokens=80)
    sampler = BudgetSampler(batches, seed=3)
    first = {tuple(batch.tolist()) for batch in batches}
    draws = [tuple(sampler.indices(step, micro).tolist()) for step in range(200) for micro in range(2)]
    assert set(draws) <= first  # only whole batches
    # Uniform over the batches, a fresh draw for every (step, micro-batch): each batch is drawn (a batch missed in
    # 400 draws has probability ~ (1 - 1/10)^400), and no batch takes more than a fair share by far.
    counts = Counter(draws)
    assert len(counts) == len(batches) and max(counts.values()) < 3 * len(draws) / len(batches)
    assert len({draws[2 * step] for step in range(200)}) == len(batches)  # the steps vary, not only micro-batches
    # the micro-batches of a step are drawn apart: the same batch twice in a step about 1 step in 10, not always
    assert sum(draws[2 * step] == draws[2 * step + 1] for step in range(200)) < 60
    # Stateless: another sampler with the seed draws the same, in any call order; another seed does not.
    again = BudgetSampler(batches, seed=3)
    assert [tuple(again.indices(step, 1).tolist()) for step in reversed(range(200))] == draws[1::2][::-1]
    other = BudgetSampler(batches, seed=4)
    assert [tuple(other.indices(step, 0).tolist()) for step in range(200)] != draws[::2]
