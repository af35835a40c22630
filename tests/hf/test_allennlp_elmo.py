"""AllenNLP's released ELMo (options.json + weights.hdf5) read into plm, checked against a reference of its own.

Each test writes a small biLM in AllenNLP's layout with random weights, loads it through plm, and compares
with :func:`reference_layers`, written here from the file alone with numpy in bilm-tf's formulas (the code
whose weights AllenNLP publishes, and which AllenNLP's ``_ElmoCharacterEncoder``, ``ElmoLstm`` and
``LstmCellWithProjection`` re-implement), never through plm.

What the reference assumes of AllenNLP's files and model, read from its ``modules/elmo.py``,
``modules/elmo_lstm.py``, ``data/token_indexers/elmo_indexer.py`` and bilm-tf's ``training.py`` (neither
is installed here, so neither is run):

- characters: UTF-8 bytes 0-255, 256 begin of sentence, 257 end of sentence, 258 begin of word, 259 end of
  word, 260 padding; a word is [258, its first 48 bytes, 259] padded with 260 to 50; ``<S>`` is [258, 256,
  259] and ``</S>`` [258, 257, 259], padded; ``batch_to_ids`` adds 1 to every id, so 0 pads the tensor;
- ``char_embed`` holds 261 rows, those of the ids 1..261; id 0 reads zeros;
- ``CNN/W_cnn_{i}`` is a TF conv2d kernel (1, width, char_dim, count): out[s, c] = sum_{k, d} x[s + k, d] *
  W[0, k, d, c] + b[c], max-pooled over every position s of the 50, then relu;
- ``CNN_high_{k}``: g = sigmoid(x W_carry + b_carry), y = g * relu(x W_transform + b_transform) + (1 - g) * x;
- ``CNN_proj``: x W_proj + b_proj;
- the LSTM cell (TF's ``LSTMCell`` with num_proj, cell_clip, proj_clip and forget_bias 1):
  [i, j, f, o] = [x, h_prev] W_0 + B; c = sigmoid(f + 1) * c_prev + sigmoid(i) * tanh(j), clipped to
  +-cell_clip; h = (sigmoid(o) * tanh(c)) W_P_0, clipped to +-proj_clip; states start at zero;
- ``RNN_0`` runs forward and ``RNN_1`` backward; from the second layer on each layer's input is added to its
  output; ``<S>`` and ``</S>`` are added around each sentence and their positions dropped from every layer;
  layer 0 is [token; token], each other [forward; backward];
- a kept softmax would be ``softmax/W`` (vocabulary, projection) and ``softmax/b``: logits h W^T + b.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

import plm
from plm.cli.main import main
from plm.errors import PLMError
from plm.hf.allennlp_elmo import load_allennlp_elmo
from plm.models.elmo import Elmo
from plm.storage.checkpoint import CONFIG_FILE
from plm.tokenization.characters import (
    CHARACTERS,
    PADDING,
    add_sentence_boundaries,
    allennlp_character_id,
    batch_to_ids,
    character_ids,
)

OPTIONS = {
    "lstm": {"use_skip_connections": True, "projection_dim": 8, "cell_clip": 0.5, "proj_clip": 0.5, "dim": 16,
             "n_layers": 2},
    "char_cnn": {"activation": "relu", "filters": [[1, 4], [3, 6]], "n_highway": 1, "embedding": {"dim": 4},
                 "n_characters": 262, "max_characters_per_token": 50},
}
SENTENCES = [["The", "cat", "sat", "."], ["Héllo", "x" * 60], ["a"]]


def tf_shapes(options: dict, vocabulary: int | None = None) -> dict[str, tuple[int, ...]]:
    """Every dataset of bilm-tf's dump for ``options``, with its TF shape."""
    cnn, lstm = options["char_cnn"], options["lstm"]
    char_dim, filters = cnn["embedding"]["dim"], sum(count for _, count in cnn["filters"])
    dim, units = lstm["projection_dim"], lstm["dim"]
    shapes: dict[str, tuple[int, ...]] = {"char_embed": (261, char_dim)}
    for i, (width, count) in enumerate(cnn["filters"]):
        shapes |= {f"CNN/W_cnn_{i}": (1, width, char_dim, count), f"CNN/b_cnn_{i}": (count,)}
    for k in range(cnn["n_highway"]):
        for part in ("carry", "transform"):
            shapes |= {f"CNN_high_{k}/W_{part}": (filters, filters), f"CNN_high_{k}/b_{part}": (filters,)}
    shapes |= {"CNN_proj/W_proj": (filters, dim), "CNN_proj/b_proj": (dim,)}
    for direction in range(2):
        for layer in range(lstm["n_layers"]):
            cell = f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            shapes |= {f"{cell}/W_0": (2 * dim, 4 * units), f"{cell}/B": (4 * units,), f"{cell}/W_P_0": (units, dim)}
    if vocabulary is not None:
        shapes |= {"softmax/W": (vocabulary, dim), "softmax/b": (vocabulary,)}
    return shapes


def write_allennlp_elmo(directory: Path, options: dict = OPTIONS, vocabulary: int | None = None,
                        weights_options: dict | None = None) -> tuple[Path, Path]:
    """``options.json`` and ``weights.hdf5`` in AllenNLP's layout, random weights; the weights may follow other
    options than the file's (``weights_options``), to make the two disagree."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    options_path, weights_path = directory / "options.json", directory / "weights.hdf5"
    options_path.write_text(json.dumps(options))
    with h5py.File(weights_path, "w") as file:
        for name, shape in tf_shapes(weights_options or options, vocabulary).items():
            file.create_dataset(name, data=rng.normal(0.0, 0.7, shape).astype(np.float32))
    return options_path, weights_path


@pytest.fixture
def allennlp_files(tmp_path: Path) -> tuple[Path, Path]:
    return write_allennlp_elmo(tmp_path / "allennlp")


# The reference: AllenNLP's scheme and bilm-tf's formulas, from the file ----------------------------------------


def allennlp_ids(word: str) -> list[int]:
    """AllenNLP's ``batch_to_ids`` row of ``word``, from its documented scheme."""
    bos, eos, bow, eow, padding = 256, 257, 258, 259, 260
    inner = {"<S>": [bos], "</S>": [eos]}.get(word) or list(word.encode("utf-8")[:48])
    ids = [bow, *inner, eow]
    return [i + 1 for i in ids + [padding] * (50 - len(ids))]


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def run_cell(cell: h5py.Group, inputs: np.ndarray, options: dict, clipped: dict[str, int]) -> np.ndarray:
    """TF's LSTMCell over (time, dim) from zero states; counts in ``clipped`` the values each clip changed."""
    kernel, bias, projection = (cell[name][...].astype(np.float64) for name in ("W_0", "B", "W_P_0"))
    cell_clip, proj_clip = options["lstm"]["cell_clip"], options["lstm"]["proj_clip"]
    h, c = np.zeros(projection.shape[1]), np.zeros(projection.shape[0])
    states = []
    for x in inputs:
        i, j, f, o = np.split(np.concatenate([x, h]) @ kernel + bias, 4)
        c = sigmoid(f + 1.0) * c + sigmoid(i) * np.tanh(j)
        clipped["cell"] += int((np.abs(c) > cell_clip).sum())
        c = np.clip(c, -cell_clip, cell_clip)
        h = (sigmoid(o) * np.tanh(c)) @ projection
        clipped["projection"] += int((np.abs(h) > proj_clip).sum())
        h = np.clip(h, -proj_clip, proj_clip)
        states.append(h)
    return np.stack(states)


def reference_layers(weights_path: Path, sentence: list[str], options: dict = OPTIONS,
                     clipped: dict[str, int] | None = None) -> np.ndarray:
    """(L + 1, words, 2 * projection): the biLM's layers of one sentence, from the file by bilm-tf's formulas."""
    clipped = {"cell": 0, "projection": 0} if clipped is None else clipped
    cnn = options["char_cnn"]
    with h5py.File(weights_path, "r") as f:
        table = np.concatenate([np.zeros((1, cnn["embedding"]["dim"])), f["char_embed"][...]])  # id 0: zeros
        x = table[np.array([allennlp_ids(word) for word in ["<S>", *sentence, "</S>"]])]  # (T, 50, char_dim)
        pooled = []
        for i, (width, _) in enumerate(cnn["filters"]):
            windows = np.stack([x[:, s : s + width] for s in range(50 - width + 1)], axis=1)  # (T, S, width, dim)
            convolved = np.einsum("tskd,kdc->tsc", windows, f[f"CNN/W_cnn_{i}"][0]) + f[f"CNN/b_cnn_{i}"][...]
            pooled.append(np.maximum(convolved.max(axis=1), 0.0))
        token = np.concatenate(pooled, axis=-1)
        for k in range(cnn["n_highway"]):
            layer = f[f"CNN_high_{k}"]
            carry = sigmoid(token @ layer["W_carry"][...] + layer["b_carry"][...])
            transform = np.maximum(token @ layer["W_transform"][...] + layer["b_transform"][...], 0.0)
            token = carry * transform + (1 - carry) * token
        token = token @ f["CNN_proj/W_proj"][...] + f["CNN_proj/b_proj"][...]  # (T, projection)
        layers = [np.concatenate([token, token], axis=-1)]
        forward, backward = token, token[::-1]
        for j in range(options["lstm"]["n_layers"]):
            cells = [f[f"RNN_{d}/RNN/MultiRNNCell/Cell{j}/LSTMCell"] for d in range(2)]
            new_forward, new_backward = (run_cell(cell, inputs, options, clipped)
                                         for cell, inputs in zip(cells, (forward, backward)))
            forward, backward = (new_forward + forward, new_backward + backward) if j > 0 else (new_forward,
                                                                                                new_backward)
            layers.append(np.concatenate([forward, backward[::-1]], axis=-1))
    return np.stack(layers)[:, 1:-1]  # <S> and </S> dropped


# The tests -----------------------------------------------------------------------------------------------------


def test_character_ids_map_onto_allennlps_written_out_by_hand() -> None:
    by_hand = {  # AllenNLP's batch_to_ids rows: its ids + 1 (begin of word 259, end of word 260, padding 261)
        "<S>": [259, 257, 260] + [261] * 47,
        "</S>": [259, 258, 260] + [261] * 47,
        "Hi": [259, 73, 106, 260] + [261] * 46,  # H = 72, i = 105
        "wö": [259, 120, 196, 183, 260] + [261] * 45,  # w = 119, ö = 0xC3 0xB6
        "x" * 60: [259] + [121] * 48 + [260],  # cut to 48 bytes, the word marks kept
    }
    for word, ids in by_hand.items():
        assert [allennlp_character_id(c) + 1 for c in character_ids(word)] == ids, word

    # A batch between sentence boundaries, as AllenNLP's add_sentence_boundary_token_ids makes it.
    chars, mask = batch_to_ids([["Hi", "wö"], ["Hi"]])
    bounded, lengths = add_sentence_boundaries(chars, mask.sum(dim=1))
    as_allennlp = torch.tensor([allennlp_character_id(c) + 1 for c in range(CHARACTERS)])[bounded]
    assert lengths.tolist() == [4, 3] and bounded.shape == (2, 4, 50)
    assert as_allennlp[0].tolist() == [by_hand[w] for w in ("<S>", "Hi", "wö", "</S>")]
    assert as_allennlp[1, :3].tolist() == [by_hand[w] for w in ("<S>", "Hi", "</S>")]
    assert (bounded[1, 3] == PADDING).all()  # a padding word (AllenNLP's is 0s; neither reaches a real word)


def test_the_layers_are_the_reference_s_with_both_clips_active(allennlp_files: tuple[Path, Path]) -> None:
    model = load_allennlp_elmo(*allennlp_files)
    config = model.config
    assert (config.cell_clip, config.projection_clip, config.sentence_boundaries, config.softmax) == (
        0.5, 0.5, True, False)
    layers = model.embed(SENTENCES)
    assert layers.shape == (3, 3, 4, 16)
    clipped = {"cell": 0, "projection": 0}
    for row, sentence in enumerate(SENTENCES):
        expected = reference_layers(allennlp_files[1], sentence, clipped=clipped)
        np.testing.assert_allclose(layers[row, :, : len(sentence)].numpy(), expected, rtol=1e-4, atol=1e-5)
        assert not layers[row, :, len(sentence) :].any()  # padding stays zero
    assert clipped["cell"] > 50 and clipped["projection"] > 50  # the clips change many values: both are tested


def test_the_lm_loss_uses_a_kept_softmax_and_is_refused_without_one(tmp_path: Path,
                                                                    allennlp_files: tuple[Path, Path]) -> None:
    chars, mask = batch_to_ids(SENTENCES[:1])
    targets = torch.tensor([[3, 1, 4, 1]])
    without = load_allennlp_elmo(*allennlp_files)
    with pytest.raises(PLMError, match="no softmax") as refused:
        without(chars, mask, next_words=targets)
    assert without.softmax is None and "\n" not in str(refused.value)

    options_path, weights_path = write_allennlp_elmo(tmp_path / "with-softmax", vocabulary=11)
    model = load_allennlp_elmo(options_path, weights_path)
    assert model.config.vocab_size == 11
    with torch.no_grad():
        loss = model(chars, mask, next_words=targets).forward_loss
    top_forward = reference_layers(weights_path, SENTENCES[0])[-1, :, :8]
    with h5py.File(weights_path, "r") as f:
        logits = top_forward @ f["softmax/W"][...].T + f["softmax/b"][...]
    log_probabilities = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
    expected = -log_probabilities[np.arange(4), targets[0].numpy()].sum()
    assert loss.item() == pytest.approx(expected, rel=1e-4)


def test_clipped_lstm_without_effective_clips_is_nn_lstm() -> None:
    """The step-by-step cell is torch's: clips too wide to bind give nn.LSTM's states on the same weights."""
    torch.manual_seed(0)
    plain = plm.from_preset("elmo-micro").eval()
    wide = plm.from_preset("elmo-micro", cell_clip=1e6, projection_clip=1e6).eval()
    wide.load_state_dict(plain.state_dict())
    assert type(wide.forward_lstms[0]).__name__ == "ClippedLSTM" and type(plain.forward_lstms[0]) is torch.nn.LSTM
    torch.testing.assert_close(wide.embed(SENTENCES), plain.embed(SENTENCES))


def test_a_model_saved_before_the_new_fields_loads_as_before(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = plm.from_preset("elmo-micro").eval()
    plm.save(model, tmp_path / "old")
    description = json.loads((tmp_path / "old" / CONFIG_FILE).read_text())
    for field in ("cell_clip", "projection_clip", "sentence_boundaries", "softmax"):
        del description["config"][field]
    (tmp_path / "old" / CONFIG_FILE).write_text(json.dumps(description))
    loaded = plm.load(tmp_path / "old")
    assert loaded.config == model.config
    torch.testing.assert_close(loaded.embed(SENTENCES), model.embed(SENTENCES))


def without(options: dict, section: str, key: str) -> dict:
    copy = json.loads(json.dumps(options))
    del copy[section][key]
    return copy


def changed(options: dict, section: str, key: str, value: object) -> dict:
    copy = json.loads(json.dumps(options))
    copy[section][key] = value
    return copy


@pytest.mark.parametrize(
    ("options", "weights_options", "message"),
    [
        (without(OPTIONS, "lstm", "dim"), OPTIONS, "options.json: no option lstm.dim"),
        (changed(OPTIONS, "lstm", "dim", 32), OPTIONS,
         "weights.hdf5: dataset RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_0 is (16, 64), the options make it (16, 128)"),
        (changed(OPTIONS, "char_cnn", "n_highway", 2), OPTIONS, "weights.hdf5: no dataset CNN_high_1/W_transform"),
        (changed(OPTIONS, "char_cnn", "n_highway", 0), OPTIONS,
         "weights.hdf5: datasets the options do not account for: CNN_high_0/W_carry"),
        (changed(OPTIONS, "lstm", "use_skip_connections", False), OPTIONS, "lstm.use_skip_connections is not true"),
        (changed(OPTIONS, "char_cnn", "activation", "tanh"), OPTIONS, "char_cnn.activation 'tanh'"),
        (changed(OPTIONS, "lstm", "cell_clip", -1), OPTIONS, "cell_clip should be positive"),
    ],
)
def test_options_and_weights_that_do_not_fit_are_one_line_naming_the_file_and_dataset(
    tmp_path: Path, options: dict, weights_options: dict, message: str
) -> None:
    paths = write_allennlp_elmo(tmp_path, options, weights_options=weights_options)
    with pytest.raises(PLMError) as error:
        load_allennlp_elmo(*paths)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_no_h5py_or_a_file_that_is_not_hdf5_is_one_line(allennlp_files: tuple[Path, Path],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    options_path, weights_path = allennlp_files
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "h5py", None)  # import h5py raises ImportError
        with pytest.raises(PLMError, match=r"needs h5py: pip install 'plm\[elmo\]'"):
            load_allennlp_elmo(options_path, weights_path)
    weights_path.write_bytes(b"not HDF5")
    with pytest.raises(PLMError, match="weights.hdf5: not an HDF5 file"):
        load_allennlp_elmo(options_path, weights_path)


def test_plm_convert_then_elmo_embed_and_finetune_elmo_use_the_converted_model(
    allennlp_files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    source, out = allennlp_files[0].parent, tmp_path / "elmo-plm"
    assert main(["convert", "--model", str(source), "--out", str(out)]) == 0
    assert "plm elmo model" in capsys.readouterr().out
    assert isinstance(plm.load(out), Elmo) and not (out / "tokenizer.json").exists()  # no word vocabulary

    sentences = tmp_path / "sentences.txt"
    sentences.write_text("".join(" ".join(sentence) + "\n" for sentence in SENTENCES))
    vectors = tmp_path / "vectors.npy"
    assert main(["elmo", "embed", "--model", str(out), str(sentences), "--out", str(vectors), "--no-progress"]) == 0
    embedded = np.load(vectors)
    for row, sentence in enumerate(SENTENCES):
        expected = reference_layers(allennlp_files[1], sentence)
        np.testing.assert_allclose(embedded[row, :, : len(sentence)], expected, rtol=1e-4, atol=1e-5)

    # The demo takes its candidate words from the file when the model has no vocabulary.
    plays = tmp_path / "plays.txt"
    plays.write_text("The cat sat .\nThe dog sat down .\n")
    assert main(["elmo", "neighbors", "--model", str(out), "--word", "sat", str(plays)]) == 0
    assert "nearest words to 'sat'" in capsys.readouterr().out

    run = tmp_path / "tagger"
    assert main(["finetune", "--task", "tag", "--features", "0", "--elmo", str(out), "--synthetic-size", "16",
                 "--batch-size", "16", "--epochs", "1", "--lstm-dim", "16", "--no-progress", "--out", str(run)]) == 0
    tagger = plm.load(run)
    assert tagger.elmo.config == plm.load(out).config
    torch.testing.assert_close(tagger.elmo.state_dict(), plm.load(out).state_dict())


def test_plm_convert_refuses_a_directory_of_two_weights_files_in_one_line(
    allennlp_files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    source = allennlp_files[0].parent
    (source / "other_weights.hdf5").write_bytes(allennlp_files[1].read_bytes())
    assert main(["convert", "--model", str(source), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "one *options.json and one *.hdf5 file" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
