"""Reproducible runs: the same text and seed give the same tokenizer and the same losses in every process.

Each run is a process of its own, because what differs between runs of the
``tokenizers`` trainers (the seeds of Rust's hash maps) is drawn once per process. Two processes do the same
work side by side: train every kind of tokenizer, then pre-train ALBERT, which trains its own Unigram tokenizer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tokenizers
from tokenizers import models, trainers

from plm.tokenization.tokenizer import UNIGRAM_SPECIALS, Tokenizer
from tests.conftest import SHARED_DATA

WIKITEXT = SHARED_DATA / "wikitext-2" / "valid.txt"
SRC = Path(__file__).resolve().parents[2] / "src"
KINDS = ("bpe", "wordpiece", "unigram")
VOCAB_SIZE = 500

pytestmark = pytest.mark.skipif(not WIKITEXT.is_file(), reason=f"{WIKITEXT} is not here")

# Every kind of tokenizer trained on argv[1] into OUT/KIND, then 3 steps of ALBERT (MLM+SOP) on argv[2] into
# OUT/albert, OUT being argv[3].
TRAIN_EVERY_KIND_AND_ALBERT = f"""
import sys
from pathlib import Path
from plm.cli.main import main
from plm.tokenization.tokenizer import Tokenizer
text, pretraining_text, out = sys.argv[1:]
lines = [line for line in Path(text).read_text(encoding="utf-8").splitlines() if line.strip()]
for kind in {KINDS!r}:
    getattr(Tokenizer, "train_" + kind)(lines, vocab_size={VOCAB_SIZE}).save(Path(out, kind))
sys.exit(main(["pretrain", "--model", "albert-micro", "--seed", "1", "--steps", "3", "--vocab-size", "300",
               "--block-size", "32", "--batch-size", "4", "--log-every", "1", "--no-progress", "--device", "cpu",
               "--train", pretraining_text, "--out", str(Path(out, "albert"))]))
"""


def wikitext(path: Path, characters: int) -> Path:
    path.write_text(WIKITEXT.read_text(encoding="utf-8")[:characters], encoding="utf-8")
    return path


def run_side_by_side(*commands: list[str]) -> None:
    """Run the commands as processes at the same time, and check that each succeeded."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    processes = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for command in commands
    ]
    for process in processes:
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, err[-2000:]


@pytest.fixture(scope="module")
def trained_twice(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two processes, each training every kind of tokenizer on the same 100 kB of WikiText, then ALBERT on 30 kB."""
    folder = tmp_path_factory.mktemp("reproducible")
    # Enough for every way the trainers differ: Unigram's output has characters that EM
    # dropped and characters of equal score, both in hash order.
    text = wikitext(folder / "wikitext.txt", 100_000)
    pretraining_text = wikitext(folder / "train.txt", 30_000)
    first, second = folder / "first", folder / "second"
    run_side_by_side(*([sys.executable, "-c", TRAIN_EVERY_KIND_AND_ALBERT, str(text), str(pretraining_text), str(out)]
                       for out in (first, second)))
    return first, second


@pytest.mark.parametrize("kind", KINDS)
def test_the_same_text_trains_a_byte_identical_tokenizer_in_every_process(trained_twice, kind):
    first, second = (Path(out, kind) for out in trained_twice)
    assert Tokenizer.load(first).vocab_size == VOCAB_SIZE  # a real tokenizer, not two empty ones
    assert (first / "tokenizer.json").read_bytes() == (second / "tokenizer.json").read_bytes()
    assert (first / "tokenizer_config.json").read_bytes() == (second / "tokenizer_config.json").read_bytes()


def test_a_unigram_is_what_its_trainer_learned_in_a_canonical_form():
    """plm rounds the trainer's scores and orders them; the pieces, and the way text is cut, stay the trainer's."""
    text = WIKITEXT.read_text(encoding="utf-8")
    lines, held_out = [line for line in text[:100_000].splitlines() if line.strip()], text[100_000:200_000]
    ours = Tokenizer.train_unigram(lines, vocab_size=VOCAB_SIZE)
    theirs = tokenizers.Tokenizer(models.Unigram())
    theirs.normalizer, theirs.pre_tokenizer = ours.backend.normalizer, ours.backend.pre_tokenizer
    specials = list(UNIGRAM_SPECIALS.values())
    theirs.train_from_iterator(lines, trainers.UnigramTrainer(vocab_size=VOCAB_SIZE, special_tokens=specials,
                                                              unk_token="<unk>", show_progress=False))
    our_vocab, their_vocab = (json.loads(t.to_str())["model"]["vocab"] for t in (ours.backend, theirs))
    our_scores, their_scores = dict(our_vocab), dict(their_vocab)
    assert list(our_scores)[:5] == specials and our_scores.keys() == their_scores.keys()
    assert sorted(our_scores.values()) == pytest.approx(sorted(their_scores.values()), abs=1e-6)
    moved = [piece for piece in our_scores if abs(our_scores[piece] - their_scores[piece]) > 1e-6]
    lowest = min(their_scores.values())
    assert all(len(piece) == 1 and their_scores[piece] < lowest + 0.01 for piece in moved)  # given back in hash order
    # Held-out text is cut as the trainer's model cuts it, up to ties: 000 is 0 00 or 00 0, as rounding falls.
    cuts = [(ours.backend.encode(held_out, add_special_tokens=False).ids, our_vocab),
            (theirs.encode(held_out).ids, their_vocab)]
    log_likelihood = [sum(their_scores[vocab[i][0]] for i in ids) for ids, vocab in cuts]  # by the trainer's scores
    assert log_likelihood[0] == pytest.approx(log_likelihood[1], rel=1e-9)


def test_two_pretraining_runs_with_one_seed_log_the_same_losses(trained_twice):
    """ALBERT trains its own Unigram tokenizer, then 3 steps of MLM+SOP: twice, in two processes."""
    runs = [Path(out, "albert") for out in trained_twice]
    losses = []
    for run in runs:
        lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        losses.append([{key: value for key, value in line.items() if "loss" in key} for line in lines])
    assert [len(run) for run in losses] == [3, 3] and all("loss_mlm" in step for step in losses[0])
    assert losses[0] == losses[1]
    first, second = (run / "tokenizer" / "tokenizer.json" for run in runs)
    assert first.read_bytes() == second.read_bytes()
