"""The validation pairs held out of a seq2seq run's training files: the last fraction, never trained on."""

from __future__ import annotations

from pathlib import Path

from plm.data.sentence_pairs import SentencePair
from plm.training.train_seq2seq import Seq2SeqSetup, read_pairs


def test_the_held_out_pairs_are_the_nearest_count_to_the_fraction_at_the_end_and_leave_training(
        tmp_path: Path) -> None:
    # 38 pairs x 0.05 = 1.9: the nearest whole count is 2 (a floor would hold out 1). Built by hand, not by plm.
    sources, targets = [f"quelle {i}" for i in range(38)], [f"target {i}" for i in range(38)]
    (tmp_path / "src.txt").write_text("\n".join(sources) + "\n", encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("\n".join(targets) + "\n", encoding="utf-8")
    setup = Seq2SeqSetup(source=str(tmp_path / "src.txt"), target=str(tmp_path / "tgt.txt"), validation_fraction=0.05)
    train, validation = read_pairs(setup)
    pairs = [SentencePair(s, t) for s, t in zip(sources, targets)]
    assert validation == pairs[36:]  # the last two, in order
    assert train == pairs[:36]  # and none of them trains
    assert not set(train) & set(validation)
