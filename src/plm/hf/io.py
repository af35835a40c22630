"""Reading and writing Hugging Face checkpoint directories.

A directory holds ``config.json`` (with its ``model_type``) and the weights in
``model.safetensors``, in shards listed by ``model.safetensors.index.json``, or in a
``pytorch_model.bin`` (read with ``weights_only=True``, never unpickled freely).
Each plm family with a Hugging Face counterpart registers one [`Converter`][plm.hf.io.Converter],
which maps configs and tensor names both ways; this module finds the converter,
moves the files, and holds the checks that every converter makes alike.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any, ClassVar

import torch

from plm.cpu.int8 import check_trainable
from plm.errors import PLMError
from plm.models import FAMILIES, CausalLM, PretrainedModel
from plm.storage.atomic_files import make_directory, read_json, read_tensors, write_json, write_tensors
from plm.storage.checkpoint import load_weights, reads_no_weights
from plm.tokenization.tokenizer import Tokenizer

CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
# Where transformers looks for weights, in the order it looks.
WEIGHT_FILES = (SAFETENSORS_FILE, "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


class HFWeights:
    """A checkpoint's tensors by Hugging Face name.

    A converter takes each one once; what it neither takes nor discards is unexpected.
    """

    def __init__(self, tensors: dict[str, torch.Tensor], source: str) -> None:
        self.tensors = dict(tensors)
        self.source = source

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def take(self, name: str) -> torch.Tensor:
        """Remove the tensor ``name`` and return it.

        Args:
            name: the tensor's Hugging Face name.

        Returns:
            The tensor.

        Raises:
            PLMError: no such tensor (or one taken already).
        """
        if name not in self.tensors:
            raise PLMError(f"{self.source}: no tensor {name}")
        return self.tensors.pop(name)

    def strip_prefix(self, prefix: str) -> None:
        """Remove ``prefix`` from the start of every tensor name that has it.

        Args:
            prefix: the prefix, as ``bert.`` in a task model's names.
        """
        self.tensors = {name.removeprefix(prefix): tensor for name, tensor in self.tensors.items()}

    def discard(self, pattern: str) -> None:
        """Drop the tensors whose whole name matches the regular expression ``pattern``.

        Args:
            pattern: the regular expression.
        """
        for name in [name for name in self.tensors if re.fullmatch(pattern, name)]:
            del self.tensors[name]

    def take_tied(self, name: str, expected: torch.Tensor, tied_to: str = "the tensor plm ties it to") -> None:
        """Take the tensor ``name`` where the checkpoint saved it, and check that it equals ``expected``.

        plm keeps a tied tensor (an MLM decoder, an LM head) once, as the tensor it is tied to, so a saved
        copy that differs would be lost on loading.

        Args:
            name: the tied tensor's Hugging Face name; nothing is checked when the checkpoint lacks it.
            expected: the tensor plm ties it to.
            tied_to: how the error message names ``expected``.

        Raises:
            PLMError: the two differ.
        """
        if name in self.tensors and not torch.equal(self.take(name), expected):
            raise PLMError(f"{self.source}: {name} differs from {tied_to}")

    def check_all_taken(self) -> None:
        """Refuse tensors that were neither taken nor discarded.

        Raises:
            PLMError: unexpected tensors, the first three named.
        """
        if self.tensors:
            names = sorted(self.tensors)
            more = " ..." if len(names) > 3 else ""
            raise PLMError(f"{self.source}: unexpected tensors {', '.join(names[:3])}{more}")


class Converter:
    """How the Hugging Face ``model_types`` map onto the plm ``family``, both ways."""

    family: ClassVar[str]
    model_types: ClassVar[tuple[str, ...]]
    # Architectures this converter reads whatever their model_type (the task heads' XFor... classes).
    claims: ClassVar[tuple[str, ...]] = ()

    def model_type(self, config: Any) -> str:
        """The Hugging Face model_type that ``config`` is written as.

        Args:
            config: the plm config.

        Returns:
            The model_type; by default the first of ``model_types``.
        """
        return self.model_types[0]

    def config_from_hf(self, hf: dict[str, Any], source: str) -> Any:
        """The plm config of ``config.json``; a PLMError naming ``source`` if plm cannot reproduce it.

        Args:
            hf: the contents of ``config.json``.
            source: the file, for the error messages.

        Returns:
            The plm config.

        Raises:
            NotImplementedError: in this base class; each converter implements it.
        """
        raise NotImplementedError

    def config_to_hf(self, config: Any) -> dict[str, Any]:
        """``config.json`` with ``model_type`` and ``architectures``; a PLMError if HF has no equivalent.

        Args:
            config: the plm config.

        Returns:
            The contents of ``config.json``.

        Raises:
            NotImplementedError: in this base class; each converter implements it.
        """
        raise NotImplementedError

    def weights_from_hf(self, weights: HFWeights, config: Any) -> dict[str, torch.Tensor]:
        """The plm state dict from HF tensors; takes (or discards) every tensor it understands.

        Args:
            weights: the checkpoint's tensors.
            config: the plm config.

        Returns:
            The plm state dict.

        Raises:
            NotImplementedError: in this base class; each converter implements it.
        """
        raise NotImplementedError

    def weights_to_hf(self, state: dict[str, torch.Tensor], config: Any) -> dict[str, torch.Tensor]:
        """HF tensors, named as ``save_pretrained`` names them, from a plm state dict.

        Args:
            state: the plm state dict.
            config: the plm config.

        Returns:
            The tensors by Hugging Face name.

        Raises:
            NotImplementedError: in this base class; each converter implements it.
        """
        raise NotImplementedError


def check_positive(hf: dict[str, Any], keys: tuple[str, ...], source: str) -> None:
    """Refuse a ``config.json`` whose sizes ``keys`` are not all positive integers.

    Args:
        hf: the contents of ``config.json``, defaults filled in.
        keys: the size fields.
        source: the file, for the error message.

    Raises:
        PLMError: the first of ``keys`` that is not a positive integer.
    """
    for key in keys:
        if not isinstance(hf[key], int) or hf[key] <= 0:
            raise PLMError(f"{source}: {key} must be a positive integer, got {hf[key]!r}")


def activation_from_hf(hf: dict[str, Any], key: str, activations: dict[str, str], source: str) -> str:
    """The plm activation of the ``config.json`` field ``key``.

    Args:
        hf: the contents of ``config.json``, defaults filled in.
        key: the activation's field (``hidden_act``, ``activation_function``, ...).
        activations: HF activation -> plm activation, the ones plm reads.
        source: the file, for the error message.

    Returns:
        The plm activation.

    Raises:
        PLMError: an activation not in ``activations``.
    """
    if hf[key] not in activations:
        raise PLMError(f"{source}: {key} {hf[key]!r} is not supported; plm reads {', '.join(activations)}")
    return activations[hf[key]]


def check_expressible(model: str, features: dict[str, bool]) -> None:
    """Refuse a model with a feature that Hugging Face's class lacks.

    Args:
        model: the model, with its article, as the message names it (``a DeBERTa``).
        features: description -> whether the model has it.

    Raises:
        PLMError: the first feature the model has.
    """
    for feature, present in features.items():
        if present:
            raise PLMError(f"{model} with {feature} has no Hugging Face equivalent")


BY_MODEL_TYPE: dict[str, Converter] = {}
BY_FAMILY: dict[str, Converter] = {}
BY_ARCHITECTURE: dict[str, Converter] = {}


def register(converter_class: type[Converter]) -> type[Converter]:
    """Class decorator that makes a converter known to `load_hf` and `save_hf`.

    Args:
        converter_class: the converter.

    Returns:
        ``converter_class`` itself.
    """
    converter = converter_class()
    BY_FAMILY[converter.family] = converter
    BY_MODEL_TYPE.update(dict.fromkeys(converter.model_types, converter))
    BY_ARCHITECTURE.update(dict.fromkeys(converter.claims, converter))
    return converter_class


def load_hf(directory: str | Path, device: str | torch.device = "cpu") -> PretrainedModel:
    """The plm model of a Hugging Face checkpoint directory (as ``save_pretrained`` writes it).

    Under ``torch.device("meta")`` only its shapes are made
    ([`reads_no_weights`][plm.storage.checkpoint.reads_no_weights]).

    Args:
        directory: the checkpoint directory.
        device: where the model goes.

    Returns:
        The model.

    Raises:
        PLMError: no such directory, an unsupported or unreadable config, or missing, unreadable or
            unexpected weights.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise PLMError(f"{directory}: " + ("a file, not a model directory" if directory.exists() else
                                           "no such model directory"))
    config_path = directory / CONFIG_FILE
    hf_config = read_json(config_path)
    model_type = hf_config.get("model_type") if isinstance(hf_config, dict) else None
    if model_type not in BY_MODEL_TYPE:
        supported = ", ".join(BY_MODEL_TYPE)
        raise PLMError(f"{config_path}: model_type {model_type!r} is not supported; plm reads {supported}")
    architectures = hf_config.get("architectures")
    architecture = architectures[0] if isinstance(architectures, list) and architectures else None
    converter = BY_MODEL_TYPE[model_type]
    if isinstance(architecture, str) and architecture in BY_ARCHITECTURE:  # a task model on this family
        converter = BY_ARCHITECTURE[architecture]
    config = converter.config_from_hf(hf_config, str(config_path))
    with torch.device("meta"):
        model = FAMILIES[converter.family](config)
    if reads_no_weights():  # its shapes alone, for an FSDP process that is sent its shards
        return model
    weights = read_weights(directory)
    state = converter.weights_from_hf(weights, config)
    weights.check_all_taken()
    load_weights(model, state, weights.source)
    return model.to(device)


def save_hf(model: PretrainedModel, directory: str | Path, tokenizer: Tokenizer | None = None) -> Path:
    """Write ``model`` so that ``transformers`` loads it with ``from_pretrained(directory)``.

    Args:
        model: the model.
        directory: the directory to write, created if missing.
        tokenizer: the model's tokenizer, or None; a causal LM's config gets its beginning- and end-of-text ids,
            where transformers' ``generate`` learns where a text ends. Its files are the caller's to write.

    Returns:
        The directory.

    Raises:
        PLMError: a family without a Hugging Face format, a quantized model, or a config that Hugging Face
            cannot express.
    """
    if model.family not in BY_FAMILY:
        raise PLMError(f"plm has no Hugging Face format for {model.family} models")
    check_trainable(model, "the model")
    converter = BY_FAMILY[model.family]
    hf_config = converter.config_to_hf(model.config)
    if tokenizer is not None and isinstance(model, CausalLM):
        ids = {"bos_token_id": tokenizer.bos_id, "eos_token_id": tokenizer.eos_id}
        hf_config |= {name: token for name, token in ids.items() if token is not None}
    tensors = converter.weights_to_hf(model.state_dict(), model.config)
    directory = make_directory(directory)
    write_tensors(directory / SAFETENSORS_FILE, tensors, metadata={"format": "pt"})
    write_json(directory / CONFIG_FILE, hf_config)
    return directory


def read_weights(directory: Path) -> HFWeights:
    """The weights of a checkpoint directory, from the first of ``WEIGHT_FILES`` it holds.

    Args:
        directory: the checkpoint directory.

    Returns:
        The tensors by Hugging Face name.

    Raises:
        PLMError: none of the weight files, or one that cannot be read.
    """
    for name in WEIGHT_FILES:
        path = directory / name
        if path.is_file():
            tensors = read_shards(path) if name.endswith(".index.json") else read_weight_file(path)
            return HFWeights(tensors, str(path))
    raise PLMError(f"{directory}: no {' or '.join(WEIGHT_FILES)}")


def read_shards(index_path: Path) -> dict[str, torch.Tensor]:
    """The tensors of every shard an index file lists.

    Args:
        index_path: the ``.index.json`` file.

    Returns:
        The tensors by name.

    Raises:
        PLMError: an index without a weight_map, a shard that is not a file name in the directory, or a
            shard that cannot be read.
    """
    index = read_json(index_path)
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        raise PLMError(f"{index_path}: no weight_map")
    tensors: dict[str, torch.Tensor] = {}
    for shard in sorted(set(weight_map.values())):
        if not isinstance(shard, str) or Path(shard).name != shard:
            raise PLMError(f"{index_path}: shard {shard!r} is not a file name in this directory")
        tensors.update(read_weight_file(index_path.parent / shard))
    return tensors


def read_weight_file(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file, or of a ``pytorch_model.bin`` (loaded with ``weights_only=True``).

    Args:
        path: the weights file.

    Returns:
        The tensors by name.

    Raises:
        PLMError: a missing file, one that cannot be read, or one that is not a dictionary of tensors.
    """
    if path.suffix == ".safetensors":
        return read_tensors(path)
    if not path.is_file():
        raise PLMError(f"{path}: file not found")
    try:
        tensors = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError, ValueError, pickle.UnpicklingError) as error:
        raise PLMError(f"{path}: not a readable PyTorch weights file, perhaps truncated ({error})") from None
    if not isinstance(tensors, dict) or not all(torch.is_tensor(value) for value in tensors.values()):
        raise PLMError(f"{path}: not a dictionary of tensors")
    return tensors
