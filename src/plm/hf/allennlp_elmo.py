"""AllenNLP's released ELMo biLMs (``options.json`` + ``weights.hdf5``) as a plm [`Elmo`][plm.models.elmo.Elmo].

AllenNLP publishes the biLMs of Peters et al. (2018) as bilm-tf dumped them: the options of
its training and each TensorFlow variable as one HDF5 dataset.

- ``char_embed`` (261, char_dim): the characters AllenNLP numbers 0..260 (its ``batch_to_ids``
  adds 1, so that 0 pads its tensors, and reads a zero row there).
- ``CNN/W_cnn_{i}`` (1, width, char_dim, count) and ``CNN/b_cnn_{i}``: filter i, a TF conv2d kernel.
- ``CNN_high_{k}/W_carry``, ``b_carry``, ``W_transform``, ``b_transform``: highway layer k, which
  computes g * relu(x W_transform + b_transform) + (1 - g) * x with g = sigmoid(x W_carry + b_carry).
- ``CNN_proj/W_proj`` (filters, projection_dim) and ``b_proj``: the projection.
- ``RNN_{d}/RNN/MultiRNNCell/Cell{j}/LSTMCell/W_0`` (2 * projection_dim, 4 * dim), ``B`` (4 * dim) and
  ``W_P_0`` (dim, projection_dim): layer j of direction d (0 forward, 1 backward), TF's ``LSTMCell``:
  the input then the previous state times ``W_0``, gates in the order i, j (= g), f, o, and 1 added to
  the forget gate at run time.
- ``softmax/W`` (vocabulary, projection_dim) and ``softmax/b``: only where a file kept them; bilm-tf's
  ``dump_weights`` leaves them out, so the released files have none and convert to a biLM that embeds
  but has no language-model loss.

[`load_allennlp_elmo`][plm.hf.allennlp_elmo.load_allennlp_elmo] maps all of it onto plm's layout: the transposes, the
gate order, the forget bias, the highway gate (plm's carries x where TF's carries the transform) and the character rows
(plm numbers the marks otherwise, see [`allennlp_character_id`][plm.tokenization.characters.allennlp_character_id]). The
converted config clips as bilm-tf did and adds ``<S>`` and ``</S>`` around each sentence, as AllenNLP's biLM does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from plm.config import config_from_dict
from plm.errors import PLMError
from plm.models.elmo import Elmo, ElmoConfig
from plm.storage.atomic_files import read_json
from plm.storage.checkpoint import load_weights
from plm.tokenization.characters import CHARACTERS, MAX_CHARACTERS, allennlp_character_id

TF_TO_TORCH_GATES = [0, 2, 1, 3]  # TF's gate blocks i, j, f, o, taken in torch's order i, f, g (= j), o
TF_FORGET_GATE = 2  # the block TF's LSTMCell adds its forget_bias of 1 to


def allennlp_elmo_files(directory: str | Path) -> tuple[Path, Path] | None:
    """The options and weights files of an AllenNLP ELMo in ``directory``: ``*options.json`` and ``*.hdf5``.

    AllenNLP names them after the model (``elmo_2x4096_512_2048cnn_2xhighway_options.json`` and
    ``..._weights.hdf5``); any names that end so are found.

    Args:
        directory: the directory to look in.

    Returns:
        The options file and the weights file, or None when ``directory`` holds no ``.hdf5`` file.

    Raises:
        PLMError: more than one ``.hdf5`` file, or not exactly one options file beside it.
    """
    directory = Path(directory)
    weights = sorted(directory.glob("*.hdf5"))
    if not weights:
        return None
    options = sorted(directory.glob("*options.json"))
    if len(weights) != 1 or len(options) != 1:
        found = ", ".join(path.name for path in [*options, *weights])
        raise PLMError(f"{directory}: an AllenNLP ELMo is one *options.json and one *.hdf5 file; found {found}")
    return options[0], weights[0]


def load_allennlp_elmo(options_path: str | Path, weights_path: str | Path, device: str | torch.device = "cpu") -> Elmo:
    """AllenNLP's ELMo from its two files, as a plm biLM in eval mode.

    Args:
        options_path: ``options.json``, the biLM's shape as bilm-tf saved it.
        weights_path: ``weights.hdf5``, its weights in bilm-tf's layout (see the module's description).
        device: where the weights go.

    Returns:
        The biLM; without ``softmax/W`` in the file (the released files) it has no softmax and computes no
        language-model loss.

    Raises:
        PLMError: no h5py (``pip install 'plm[elmo]'``), a missing or unreadable file, an option plm cannot
            express or that is missing, or a dataset that is missing, of another shape than the options give, or
            left over; the message names the file and the option or dataset.
    """
    options = read_json(options_path)
    with open_hdf5(weights_path) as file:
        datasets = Datasets(file, str(weights_path))
        vocabulary = datasets.shape("softmax/W")[0] if "softmax/W" in datasets else None
        config = elmo_config(options, str(options_path), vocabulary)
        weights = converted_weights(datasets, config)
        datasets.check_all_read()
    with torch.device("meta"):
        model = Elmo(config)
    load_weights(model, weights, str(weights_path))
    return model.to(device).eval()


def open_hdf5(path: str | Path) -> Any:
    """``path`` opened for reading with h5py, which is imported here: only this reader needs it.

    Args:
        path: the HDF5 file.

    Returns:
        The open ``h5py.File``; use it in a ``with`` block.

    Raises:
        PLMError: no h5py, or a file that is missing or not HDF5.
    """
    try:
        import h5py
    except ImportError:
        raise PLMError("reading AllenNLP's weights.hdf5 needs h5py: pip install 'plm[elmo]'") from None
    if not Path(path).is_file():
        raise PLMError(f"{path}: file not found")
    try:
        return h5py.File(path, "r")
    except OSError as error:
        raise PLMError(f"{path}: not an HDF5 file ({error})") from None


class Datasets:
    """The datasets of an open HDF5 file by path (``CNN/W_cnn_0``), each read once and checked for its shape.

    Args:
        file: the open ``h5py.File``.
        source: the file's path, for the messages.
    """

    def __init__(self, file: Any, source: str) -> None:
        self.file, self.source = file, source
        self.unread: set[str] = set()
        file.visititems(self._note)

    def _note(self, name: str, item: Any) -> None:
        if hasattr(item, "shape"):  # a dataset; a group has no shape
            self.unread.add(name)

    def __contains__(self, name: str) -> bool:
        return name in self.unread

    def shape(self, name: str) -> tuple[int, ...]:
        """The shape of the dataset ``name``.

        Args:
            name: the dataset's path in the file.

        Returns:
            Its shape.
        """
        return tuple(self.file[name].shape)

    def read(self, name: str, shape: tuple[int, ...]) -> torch.Tensor:
        """The dataset ``name`` as a float32 tensor, checked to be ``shape``.

        Args:
            name: the dataset's path in the file.
            shape: the shape the options give it.

        Returns:
            The tensor.

        Raises:
            PLMError: no such dataset (or one read already), or one of another shape.
        """
        if name not in self.unread:
            raise PLMError(f"{self.source}: no dataset {name}, which the options call for")
        if self.shape(name) != shape:
            raise PLMError(f"{self.source}: dataset {name} is {self.shape(name)}, the options make it {shape}")
        self.unread.remove(name)
        return torch.from_numpy(np.asarray(self.file[name][...], dtype=np.float32))

    def check_all_read(self) -> None:
        """Raise a PLMError for datasets the options left unread: the two files do not belong together.

        Raises:
            PLMError: datasets left unread, some named.
        """
        if self.unread:
            names = sorted(self.unread)
            raise PLMError(f"{self.source}: datasets the options do not account for: {', '.join(names[:3])}"
                           f"{' ...' if len(names) > 3 else ''}")


def elmo_config(options: Any, source: str, vocabulary: int | None) -> ElmoConfig:
    """The plm config of the biLM that bilm-tf's ``options`` describe.

    Args:
        options: the options as read from JSON.
        source: the options file, for the messages.
        vocabulary: the rows of the file's softmax, or None when it has none.

    Returns:
        The config, with the clips of ``options`` and sentence boundaries.

    Raises:
        PLMError: a missing option, or one plm cannot express (no skip connections, an activation other than
            relu, another word length than `MAX_CHARACTERS`).
    """
    lstm, cnn = option(options, "lstm", source), option(options, "char_cnn", source)
    if option(lstm, "use_skip_connections", source, "lstm") is not True:
        raise PLMError(f"{source}: lstm.use_skip_connections is not true; plm's biLM, as AllenNLP's, adds each "
                       "layer's input to its output from the second layer on")
    if option(cnn, "activation", source, "char_cnn") != "relu":
        raise PLMError(f"{source}: char_cnn.activation {cnn['activation']!r}; plm's char-CNN takes relu")
    if option(cnn, "max_characters_per_token", source, "char_cnn") != MAX_CHARACTERS:
        raise PLMError(f"{source}: char_cnn.max_characters_per_token {cnn['max_characters_per_token']!r}; plm's "
                       f"words are {MAX_CHARACTERS} characters")
    values = {
        "char_dim": option(option(cnn, "embedding", source, "char_cnn"), "dim", source, "char_cnn.embedding"),
        "filters": option(cnn, "filters", source, "char_cnn"),
        "highway_layers": option(cnn, "n_highway", source, "char_cnn"),
        "projection_dim": option(lstm, "projection_dim", source, "lstm"),
        "lstm_dim": option(lstm, "dim", source, "lstm"),
        "layers": option(lstm, "n_layers", source, "lstm"),
        "cell_clip": lstm.get("cell_clip"),  # bilm-tf's LSTMCell clips nothing without them
        "projection_clip": lstm.get("proj_clip"),
        "sentence_boundaries": True,
        "softmax": vocabulary is not None,
        **({"vocab_size": vocabulary} if vocabulary is not None else {}),
    }
    return config_from_dict(ElmoConfig, values, f"{source} (read as a plm ElmoConfig)")


def option(section: Any, key: str, source: str, where: str = "") -> Any:
    """``section[key]``, or a PLMError naming the option.

    Args:
        section: a JSON object of the options.
        key: the option.
        source: the options file, for the message.
        where: the path of ``section`` in the options (``lstm``), for the message.

    Returns:
        The option's value.

    Raises:
        PLMError: no such option, or ``section`` not an object.
    """
    if not isinstance(section, dict) or key not in section:
        raise PLMError(f"{source}: no option {where + '.' if where else ''}{key}")
    return section[key]


def converted_weights(datasets: Datasets, config: ElmoConfig) -> dict[str, torch.Tensor]:
    """The file's weights under plm's names, in plm's layout.

    Args:
        datasets: the weights file's datasets.
        config: the config its options give.

    Returns:
        The tensors of ``Elmo(config).state_dict()``, contiguous.

    Raises:
        PLMError: a dataset that is missing or of another shape than ``config`` gives it.
    """
    dim, filters = config.projection_dim, sum(count for _, count in config.filters)
    char_embed = datasets.read("char_embed", (CHARACTERS, config.char_dim))
    # plm's character c reads the row AllenNLP gives the same character: plm numbers the marks otherwise.
    weights = {"token_encoder.embedding.weight": char_embed[[allennlp_character_id(c) for c in range(CHARACTERS)]]}
    for i, (width, count) in enumerate(config.filters):
        kernel = datasets.read(f"CNN/W_cnn_{i}", (1, width, config.char_dim, count))
        weights[f"token_encoder.convolutions.{i}.weight"] = kernel[0].permute(2, 1, 0)  # (count, char_dim, width)
        weights[f"token_encoder.convolutions.{i}.bias"] = datasets.read(f"CNN/b_cnn_{i}", (count,))
    for k in range(config.highway_layers):
        layer = f"CNN_high_{k}"
        # plm's highway computes gate * x + (1 - gate) * relu(transform): its gate is TF's 1 - g, sigmoid(-carry).
        weights[f"token_encoder.highway.layers.{k}.weight"] = torch.cat([
            datasets.read(f"{layer}/W_transform", (filters, filters)).t(),
            -datasets.read(f"{layer}/W_carry", (filters, filters)).t(),
        ])
        weights[f"token_encoder.highway.layers.{k}.bias"] = torch.cat([
            datasets.read(f"{layer}/b_transform", (filters,)), -datasets.read(f"{layer}/b_carry", (filters,))
        ])
    weights["token_encoder.projection.weight"] = datasets.read("CNN_proj/W_proj", (filters, dim)).t()
    weights["token_encoder.projection.bias"] = datasets.read("CNN_proj/b_proj", (dim,))
    for direction, stack in enumerate(("forward_lstms", "backward_lstms")):
        for j in range(config.layers):
            weights |= lstm_weights(datasets, f"RNN_{direction}/RNN/MultiRNNCell/Cell{j}/LSTMCell",
                                    f"{stack}.{j}.", config)
    if config.softmax:
        weights["softmax.weight"] = datasets.read("softmax/W", (config.vocab_size, dim))
        weights["softmax.bias"] = datasets.read("softmax/b", (config.vocab_size,))
    return {name: tensor.contiguous() for name, tensor in weights.items()}


def lstm_weights(datasets: Datasets, cell: str, prefix: str, config: ElmoConfig) -> dict[str, torch.Tensor]:
    """One TF ``LSTMCell`` with a projection as the parameters of a one-layer ``nn.LSTM`` with ``proj_size``.

    Args:
        datasets: the weights file's datasets.
        cell: the cell's path in the file (``RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell``).
        prefix: the layer's name in plm's state dict (``forward_lstms.0.``).
        config: the biLM's config.

    Returns:
        ``weight_ih_l0``, ``weight_hh_l0``, ``bias_ih_l0``, ``bias_hh_l0`` and ``weight_hr_l0`` under ``prefix``.
    """
    dim, units = config.projection_dim, config.lstm_dim
    kernel = datasets.read(f"{cell}/W_0", (2 * dim, 4 * units)).t()  # (4 * units, input + state)
    bias = datasets.read(f"{cell}/B", (4 * units,))
    bias[TF_FORGET_GATE * units : (TF_FORGET_GATE + 1) * units] += 1  # TF's LSTMCell adds it to f as it runs
    # the four gate blocks of rows, (4, units, ...), taken in torch's order
    kernel, bias = (x.view(4, units, *x.shape[1:])[TF_TO_TORCH_GATES].flatten(0, 1) for x in (kernel, bias))
    return {
        f"{prefix}weight_ih_l0": kernel[:, :dim],
        f"{prefix}weight_hh_l0": kernel[:, dim:],
        f"{prefix}bias_ih_l0": bias,
        f"{prefix}bias_hh_l0": torch.zeros_like(bias),  # TF's cell has one bias, torch's two
        f"{prefix}weight_hr_l0": datasets.read(f"{cell}/W_P_0", (units, dim)).t(),
    }
