"""ELMo: the char-CNN biLM, its features, the scalar mix, the biLM objective and `plm elmo`."""

from __future__ import annotations

import json
import math
import signal
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import plm
from plm.cli.main import main
from plm.data.prepare import PrepareOptions, prepare_corpus
from plm.errors import PLMError
from plm.models.scalar_mix import ScalarMix
from plm.objectives.bilm import BiLMObjective, word_streams
from plm.tokenization.characters import MAX_CHARACTERS, PADDING, character_ids, split_words
from plm.tokenization.tokenizer import train_words
from plm.training.pretrain import PretrainSetup, prepare, pretrain
from plm.training.trainer import TrainingConfig
from tests.conftest import synthetic_text
from tests.training.test_resume import PLM, RUN, stopped_and_resumed_like_straight

STEPS_TO_LEARN = 80
SENTENCES = [["The", "cat", "sat", "on", "the", "mat", "."], ["Dogs", "bark", "."]]



def micro(**overrides) -> plm.models.Elmo:
    torch.manual_seed(0)
    return plm.from_preset("elmo-micro", **overrides).eval()


def test_embed_packs_the_token_layer_then_forward_and_backward_states_of_each_layer() -> None:
    model = micro()
    layers = model.embed(SENTENCES)
    dim, depth = model.config.projection_dim, model.config.layers
    assert layers.shape == (2, depth + 1, 7, 2 * dim) and layers.dtype == torch.float32

    # The oracle: one sentence at a time, no padding, the LSTMs called by hand, the backward one on reversed words.
    for row, sentence in enumerate(SENTENCES):
        chars = torch.tensor([[character_ids(word) for word in sentence]])
        with torch.no_grad():
            token = model.token_encoder(chars)[0]  # (words, dim)
            forward, backward = token, token.flip(0)
            for index, (f_lstm, b_lstm) in enumerate(zip(model.forward_lstms, model.backward_lstms)):
                f_out, b_out = f_lstm(forward)[0], b_lstm(backward)[0]
                forward, backward = (f_out + forward, b_out + backward) if index > 0 else (f_out, b_out)
                expected = torch.cat([forward, backward.flip(0)], dim=-1)
                torch.testing.assert_close(layers[row, index + 1, : len(sentence)], expected)
        torch.testing.assert_close(layers[row, 0, : len(sentence)], torch.cat([token, token], dim=-1))


def changed_positions(before: torch.Tensor, after: torch.Tensor) -> list[int]:
    """Positions whose states moved by more than rounding: a word the LM sees moves them by 1e-4 or more,
    while a batch's other rows may move the last bits of a product (1e-9 on AVX2 machines)."""
    return [t for t in range(before.shape[0]) if not torch.allclose(before[t], after[t], rtol=0, atol=1e-6)]


@pytest.mark.parametrize("padded", [False, True])
def test_the_forward_lm_never_sees_later_words_and_the_backward_lm_never_sees_earlier_ones(padded: bool) -> None:
    model, dim = micro(), micro().config.projection_dim
    sentence = "one two three four five six seven eight".split()
    longer = [["a"] * 12] if padded else []  # the sentence then sits in a batch padded to 12 words
    t = 3
    changed = [*sentence[:t], "zebra", *sentence[t + 1 :]]
    before, after = model.embed([sentence, *longer])[0], model.embed([changed, *longer])[0]
    for layer in range(1, model.config.layers + 1):
        assert changed_positions(before[layer, :8, :dim], after[layer, :8, :dim]) == list(range(t, 8))
        assert changed_positions(before[layer, :8, dim:], after[layer, :8, dim:]) == list(range(0, t + 1))


def test_padding_positions_are_zero_and_padding_changes_no_other_row() -> None:
    model = micro()
    alone = model.embed([SENTENCES[1]])
    batched = model.embed([SENTENCES[1], SENTENCES[0], []])
    torch.testing.assert_close(batched[0, :, :3], alone[0], rtol=1e-5, atol=1e-6)
    assert batched[0, :, 3:].abs().max() == 0 and batched[2].abs().max() == 0
    assert model.embed([[], []]).shape == (2, model.config.layers + 1, 0, 2 * model.config.projection_dim)


def test_embed_is_the_frozen_biLM_even_in_training_mode() -> None:
    model = micro(dropout=0.5).train()
    first, second = model.embed(SENTENCES), model.embed(SENTENCES)
    assert torch.equal(first, second) and not first.requires_grad
    assert model.training  # and the mode is left as it was


def test_unseen_words_get_distinct_vectors_and_long_words_are_cut() -> None:
    model = micro()
    unseen = ["blorptastic", "Blorptastic", "zqxj", "zqxjj", "über", "uber"]
    vectors = model.token_vectors(unseen)
    distances = torch.cdist(vectors, vectors) + torch.eye(len(unseen))
    assert distances.min() > 1e-4
    # Only the first MAX_CHARACTERS - 2 bytes count: two words that differ after them are one word to ELMo.
    stem = "x" * (MAX_CHARACTERS - 2)
    cut = model.token_vectors([stem + "a", stem + "b", stem[:-1] + "ab"])
    assert torch.equal(cut[0], cut[1]) and not torch.equal(cut[0], cut[2])


def test_character_ids_are_utf8_bytes_between_word_marks() -> None:
    ids = character_ids("né")
    assert ids[:5] == [256, ord("n"), 0xC3, 0xA9, 257] and ids[5:] == [PADDING] * (MAX_CHARACTERS - 5)
    assert len(character_ids("w" * 100)) == MAX_CHARACTERS
    assert character_ids("<S>") != character_ids("</S>") != character_ids("<")


def test_the_word_vocabulary_keeps_the_most_frequent_words() -> None:
    tokenizer = train_words(["b a a c b a, d"], vocab_size=6)  # 3 specials + 3 words: a (3), b (2), then "," < c < d
    vocab = tokenizer.backend.get_vocab()
    assert [vocab[w] for w in ("a", "b", ",")] == [3, 4, 5] and "c" not in vocab
    unknown = tokenizer.id_of("unk")
    assert tokenizer.encode("a c b zebra") == [3, unknown, 4, unknown]
    assert split_words("don't stop, ok?") == ["don", "'", "t", "stop", ",", "ok", "?"]


def test_plm_tokenizer_train_writes_the_word_vocabulary(text_file: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    code, _, _ = run_cli("tokenizer", "train", str(text_file), "--kind", "words", "--vocab-size", "10",
                         "--out", str(tmp_path / "words"), capsys=capsys)
    loaded = plm.Tokenizer.load(tmp_path / "words")
    assert code == 0 and loaded.backend.get_vocab() == train_words([text_file.read_text()], 10).backend.get_vocab()
    assert loaded.special_tokens == {"bos": "<S>", "eos": "</S>", "unk": "<UNK>"}


def test_bilm_batches_read_every_word_as_spelled_and_target_the_next_and_previous_ones(tmp_path: Path) -> None:
    texts = [synthetic_text(paragraphs=3, seed=i).replace("\n\n", " ") for i in range(4)]
    files = [tmp_path / "train.txt", tmp_path / "validation.txt"]
    files[0].write_text("\n\n".join(texts[:3]), encoding="utf-8")
    files[1].write_text(texts[3], encoding="utf-8")
    tokenizer = train_words(texts, vocab_size=20)  # most words are rare: <UNK> to the softmax
    corpus = prepare_corpus([files[0]], tokenizer, tmp_path / "data", [files[1]], PrepareOptions(progress=False))
    objective = BiLMObjective(word_streams(corpus, tokenizer), block_size=6, batch_size=5)
    # The oracle: the documents split into words by hand, each between <S> and </S>.
    stream = [word for text in texts[:3] for word in ("<S>", *split_words(text), "</S>")]
    vocab, unknown = tokenizer.backend.get_vocab(), tokenizer.id_of("unk")
    windows = {tuple(stream[start : start + 8]) for start in range(len(stream) - 7)}
    rare = 0
    for step in range(3):
        batch = objective.batch(step=step, micro=0)
        assert batch["chars"].shape == (5, 6, MAX_CHARACTERS)
        assert objective.target_counts(batch) == {"forward": 30, "backward": 30}
        for row in range(5):
            read = [word_of(chars) for chars in batch["chars"][row]]
            previous = [vocab.get(word, unknown) for word in read]
            assert batch["next_words"][row, :-1].tolist() == previous[1:]
            assert batch["previous_words"][row, 1:].tolist() == previous[:-1]
            assert any(window[1:-1] == tuple(read) for window in windows)
            rare += sum(word not in vocab for word in read)
    assert rare > 0  # and read as spelled, not as <UNK>
    assert objective.train_tokens == len(stream)


def word_of(chars: torch.Tensor) -> str:
    """The word whose character ids these are, read back from its bytes."""
    inner = [c for c in chars.tolist()[1:] if c < 256]
    return bytes(inner).decode() if inner else {258: "<S>", 259: "</S>"}[chars[1].item()]


def test_the_loss_of_each_direction_is_the_summed_negative_log_likelihood() -> None:
    for cutoffs in ((), (10, 100)):  # the full softmax, and the adaptive one
        model = micro(adaptive_cutoffs=cutoffs)
        chars = torch.randint(0, 256, (2, 5, MAX_CHARACTERS))
        next_words, previous_words = torch.randint(0, 512, (2, 5)), torch.randint(0, 512, (2, 5))
        out = model(chars, next_words=next_words, previous_words=previous_words)
        for states, targets, loss in ((out.forward[-1], next_words, out.forward_loss),
                                      (out.backward[-1], previous_words, out.backward_loss)):
            states = states.flatten(0, 1)
            if cutoffs:
                log_probs = model.softmax.log_prob(states)  # the whole distribution, another path than the loss's
            else:
                log_probs = F.log_softmax(states @ model.softmax.weight.T + model.softmax.bias, dim=-1)
            expected = -log_probs.gather(1, targets.flatten()[:, None]).sum()
            torch.testing.assert_close(loss, expected)


def test_the_paper_shape_has_the_published_parameter_count() -> None:
    with torch.device("meta"):
        model = plm.from_preset("elmo-original")
    softmax = sum(p.numel() for p in model.softmax.parameters())
    # By hand: 261 x 16 char embedding, the 7 filter widths, 2 highway layers of 2048 -> 2 x 2048, 2048 -> 512,
    # and 4 LSTMs (2 layers x 2 directions) of 4096 cells projected to 512.
    filters = [(1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024)]
    char_cnn = 261 * 16 + sum(w * 16 * n + n for w, n in filters) + 2 * (2048 * 4096 + 4096) + 2048 * 512 + 512
    lstm = 4 * 4096 * 512 + 4 * 4096 * 512 + 4096 * 512  # input, recurrent, projection weights
    assert model.num_parameters() - softmax == char_cnn + 4 * (lstm + 2 * 4 * 4096)  # torch keeps two bias vectors
    # bilm-tf keeps one bias per LSTM: AllenNLP's published 93.6M parameters for the original ELMo.
    assert round((char_cnn + 4 * (lstm + 4 * 4096)) / 1e6, 1) == 93.6


def test_the_scalar_mix_learns_to_prefer_the_layer_that_carries_the_signal(one_thread: None) -> None:
    generator = torch.Generator().manual_seed(0)
    layers = torch.randn(256, 3, 4, 8, generator=generator)  # (batch, layers, time, dim)
    labels = (layers[:, 1, :, 0] > 0).float()  # only layer 1 knows the answer
    weights = {}
    for l2 in (0.0, 10.0):
        torch.manual_seed(0)
        mix, probe = ScalarMix(3, l2=l2), torch.nn.Linear(8, 1)
        optimizer = torch.optim.Adam([*mix.parameters(), *probe.parameters()], lr=0.05)
        for _ in range(100):
            logits = probe(mix(layers)).squeeze(-1)
            loss = F.binary_cross_entropy_with_logits(logits, labels) + mix.penalty()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        weights[l2] = mix.weights.detach()
    assert weights[0.0].argmax() == 1 and weights[0.0][1] > 0.8
    # A large lambda keeps the weights near the average 1/3.
    assert (weights[10.0] - 1 / 3).abs().max() < (weights[0.0] - 1 / 3).abs().max() / 3


def test_the_scalar_mix_normalises_each_layer_and_keeps_padding_zero() -> None:
    layers = torch.randn(2, 3, 5, 6)
    layers[:, :, 4] = 0  # a padding position
    mix = ScalarMix(3, layer_norm=True)
    with torch.no_grad():
        mix.scalars.copy_(torch.tensor([0.0, 1.0, 2.0]))
        mix.gamma.fill_(2.0)
    normed = torch.nn.LayerNorm(6, elementwise_affine=False)(layers)
    expected = 2.0 * (torch.softmax(torch.tensor([0.0, 1.0, 2.0]), 0)[None, :, None, None] * normed).sum(1)
    torch.testing.assert_close(mix(layers), expected)
    assert mix(layers)[:, 4].abs().max() == 0


def unigram_perplexity(text: str) -> float:
    """The perplexity of the best context-free guess: each word's own frequency."""
    words = split_words(text)
    counts = np.unique(words, return_counts=True)[1] / len(words)
    return math.exp(-(counts * np.log(counts)).sum())


def test_pretraining_learns_from_context_in_both_directions(text_file: Path, tmp_path: Path, one_thread: None) -> None:
    setup = PretrainSetup(model="elmo-micro", train_files=(str(text_file),), vocab_size=100, batch_size=8)
    config = TrainingConfig(steps=STEPS_TO_LEARN, lr=1e-2, warmup=5, eval_every=STEPS_TO_LEARN, progress=False,
                            device="cpu")
    _, tokenizer, metrics = pretrain(setup, config, tmp_path / "run")
    assert type(tokenizer.backend.model).__name__ == "WordLevel"
    assert metrics["val_perplexity_forward"] == pytest.approx(metrics["val_perplexity"])
    assert math.isclose(math.log(metrics["val_perplexity_backward"]), metrics["val_loss_backward"], rel_tol=1e-4)
    # Better than any model that ignores context, in each direction.
    unigram = unigram_perplexity(text_file.read_text())
    assert metrics["val_perplexity_forward"] < 0.6 * unigram and metrics["val_perplexity_backward"] < 0.6 * unigram
    loaded, _ = plm.load_pretrained(tmp_path / "run")
    assert loaded.family == "elmo" and loaded.embed([["The", "cat"]]).shape[-1] == 2 * loaded.config.projection_dim


def test_the_closing_line_names_each_direction_s_perplexity(text_file: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    assert main(["pretrain", "--model", "elmo-micro", "--train", str(text_file), "--vocab-size", "100",
                 "--batch-size", "4", "--steps", "2", "--warmup", "1", "--no-progress", "--device", "cpu",
                 "--out", str(out)]) == 0
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()][-1]
    line = capsys.readouterr().out.splitlines()[0]
    assert line == (f"step 2: validation loss {logged['val_loss']:.4f} (the terms' sum), perplexity "
                    f"forward {logged['val_perplexity_forward']:.2f}, backward {logged['val_perplexity_backward']:.2f}")


def test_a_killed_elmo_run_resumes_bit_exactly(text_file: Path, tmp_path: Path) -> None:
    args = [*RUN, "--model", "elmo-micro", "--train", str(text_file)]
    stopped_and_resumed_like_straight(PLM, ["pretrain"], args, tmp_path, signal.SIGKILL)


# The command line -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def elmo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("elmo")
    tokenizer = train_words([synthetic_text()], vocab_size=60)
    plm.save(micro(vocab_size=len(tokenizer)), root / "elmo", tokenizer)
    (root / "plays.txt").write_text("The cat reads a play .\nA dog likes the play .\n\nThe model sees a value .\n")
    # no empty line, as embed needs
    (root / "lines.txt").write_text("The cat reads a play .\nThe model sees a value .\n")
    return root


def run_cli(*args: str, capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_elmo_embed_writes_each_layer_or_the_mix(elmo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    model = plm.load(elmo_dir / "elmo")
    sentences = [split_words(line) for line in (elmo_dir / "lines.txt").read_text().splitlines()]
    expected = model.embed(sentences).numpy()
    for mix, want in ((None, expected), ("average", expected.mean(axis=1)), ("top", expected[:, -1])):
        out = tmp_path / f"{mix}.npy"
        code, printed, _ = run_cli("elmo", "embed", "--model", str(elmo_dir / "elmo"), str(elmo_dir / "lines.txt"),
                                   "--out", str(out), "--device", "cpu", *(["--mix", mix] if mix else []),
                                   capsys=capsys)
        assert code == 0 and "wrote" in printed
        np.testing.assert_allclose(np.load(out), want, rtol=1e-5, atol=1e-6)


def test_elmo_neighbors_lists_sentences_and_words(elmo_dir: Path, capsys: pytest.CaptureFixture) -> None:
    code, out, _ = run_cli("elmo", "neighbors", "--model", str(elmo_dir / "elmo"), "--word", "play",
                           str(elmo_dir / "plays.txt"), "--neighbors", "2", capsys=capsys)
    assert code == 0
    lines = out.splitlines()
    # The oracle for the words: cosine of the char-CNN's vectors over the vocabulary, by brute force.
    model, tokenizer = plm.load_pretrained(elmo_dir / "elmo")
    vocabulary = [w for w in tokenizer.backend.get_vocab() if w not in ("<S>", "</S>", "<UNK>")]
    with torch.no_grad():
        vectors = F.normalize(
            model.token_encoder(torch.tensor([[character_ids(w) for w in ["play", *vocabulary]]]))[0], dim=-1
        )
    nearest = [vocabulary[i] for i in (vectors[1:] @ vectors[0]).argsort(descending=True)[:2]]
    listed = [pair.split()[0] for pair in lines[0].split(": ", 1)[1].split(", ")]
    assert lines[0].startswith("nearest words to 'play' by the token layer") and listed == nearest
    # each query sentence, then the other sentence holding "play" (the only one it can be)
    assert lines[2:] == ["The cat reads a play .", lines[3], "", "A dog likes the play .", lines[6]]
    assert lines[3].endswith("  A dog likes the play .") and lines[6].endswith("  The cat reads a play .")


@pytest.mark.parametrize(
    "args, message",
    [
        (["embed", "--model", "{dir}/missing", "{dir}/lines.txt", "--out", "{tmp}/x.npy"], "no such model directory"),
        (["embed", "--model", "{dir}/elmo", "{dir}/absent.txt", "--out", "{tmp}/x.npy"], "absent.txt: no such file"),
        (["embed", "--model", "{dir}/elmo", "{dir}/plays.txt", "--out", "{tmp}/no/x.npy"], "no such directory"),
        (["embed", "--model", "{dir}/gpt", "{dir}/lines.txt", "--out", "{tmp}/x.npy"], "gpt model is not a biLM"),
        (["neighbors", "--model", "{dir}/elmo", "--word", "two words", "{dir}/plays.txt"], "is not one word"),
        (["neighbors", "--model", "{dir}/elmo", "--word", "zebra", "{dir}/plays.txt"], "0 sentence(s) hold 'zebra'"),
        (["neighbors", "--model", "{dir}/elmo", "--word", "play", "--query", "No such word", "{dir}/plays.txt"],
         "--query does not contain"),
    ],
)
def test_bad_elmo_inputs_give_one_line_and_exit_code_2(args: list[str], message: str, elmo_dir: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    if not (elmo_dir / "gpt").exists():
        bpe = plm.Tokenizer.train_bpe([synthetic_text()], 300)
        plm.save(plm.from_preset("gpt2-micro", vocab_size=len(bpe)), elmo_dir / "gpt", bpe)
    args = [a.format(dir=elmo_dir, tmp=tmp_path) for a in args]
    code, out, err = run_cli("elmo", *args, capsys=capsys)
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and message in err
    assert not (tmp_path / "x.npy").exists()


def test_bad_python_inputs_and_a_tokenizer_of_subwords_are_refused(elmo_dir: Path, text_file: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    model = micro()
    with pytest.raises(PLMError, match="sentence 1 is a str"):
        model.embed([["fine"], "not split"])
    with pytest.raises(PLMError, match="non-empty string"):
        model.embed([["fine", ""]])
    with pytest.raises(PLMError, match="adaptive_cutoffs"):
        micro(adaptive_cutoffs=(600,))
    bpe = tmp_path / "bpe"
    plm.Tokenizer.train_bpe([synthetic_text()], 300).save(bpe)
    code, _, err = run_cli("pretrain", "--model", "elmo-micro", "--train", str(text_file), "--tokenizer", str(bpe),
                           "--out", str(tmp_path / "run"), "--no-progress", capsys=capsys)
    assert code == 2 and "must be a word vocabulary" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_plm_elmo_help(capsys: pytest.CaptureFixture) -> None:
    for command in (["elmo"], ["elmo", "embed"], ["elmo", "neighbors"]):
        with pytest.raises(SystemExit) as exit:
            main([*command, "--help"])
        assert exit.value.code == 0 and "examples:" in capsys.readouterr().out


def test_the_paper_recipe_trains_with_adagrad(text_file: Path, tmp_path: Path) -> None:
    setup = PretrainSetup(model="elmo-micro", train_files=(str(text_file),), vocab_size=100, hyperparameters="paper")
    trainer, _ = prepare(setup, TrainingConfig(steps=1, device="cpu"), tmp_path / "run")
    group = trainer.optimizer.param_groups[0]
    assert isinstance(trainer.optimizer, torch.optim.Adagrad) and group["initial_accumulator_value"] == 1.0
    assert (trainer.config.lr, trainer.config.schedule, trainer.config.warmup) == (0.2, "constant", 0)


def test_commands_for_other_kinds_of_model_refuse_an_elmo_in_one_line(elmo_dir: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "train.tsv").write_text("sentence\tlabel\nThe cat reads a play .\t1\nA dog .\t0\n")
    elmo = str(elmo_dir / "elmo")
    for argv, message in (
        (["attention", "--model", elmo, "The cat reads a play .", "--out", str(tmp_path / "x.png")],
         "elmo models have no attention layers to draw"),
        (["finetune", "--task", "classify", "--model", elmo, "--train", str(tmp_path / "train.tsv"),
          "--validation", str(tmp_path / "train.tsv"), "--out", str(tmp_path / "ft")], "elmo models take no task head"),
    ):
        code, out, err = run_cli(*argv, capsys=capsys)
        assert code == 2 and len(err.splitlines()) == 1 and message in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.tsv"]


def test_the_softmax_reads_the_top_states_through_dropout_in_training() -> None:
    """Guards the dropout before the softmax (bilm-tf's): with a dropout that drops everything, the softmax sees
    zero states, so each direction's loss is -sum_k log softmax(b)[t_k] of the softmax's bias alone."""
    model = micro().train()
    model.dropout = torch.nn.Dropout(1.0)
    chars = torch.randint(0, 256, (2, 5, MAX_CHARACTERS))
    next_words, previous_words = torch.randint(0, 512, (2, 5)), torch.randint(0, 512, (2, 5))
    out = model(chars, next_words=next_words, previous_words=previous_words)
    log_bias = F.log_softmax(model.softmax.bias.detach(), dim=-1)
    torch.testing.assert_close(out.forward_loss.detach(), -log_bias[next_words.flatten()].sum())
    torch.testing.assert_close(out.backward_loss.detach(), -log_bias[previous_words.flatten()].sum())


def test_each_lstm_layer_reads_its_input_through_dropout_in_training() -> None:
    """Guards the dropout on the LSTMs' inputs: with a dropout that drops everything, every layer reads zeros, so
    its states are the same whatever the words (the residual adds the layer below's, input-free as well)."""
    model = micro().train()
    model.dropout = torch.nn.Dropout(1.0)
    first, second = (model(torch.randint(0, 256, (2, 5, MAX_CHARACTERS))) for _ in range(2))
    assert not torch.equal(first.token, second.token)  # the words differ
    for a, b in zip(first.forward + first.backward, second.forward + second.backward):
        torch.testing.assert_close(a, b)
