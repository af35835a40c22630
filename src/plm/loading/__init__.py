"""Open any model directory, plm's own or Hugging Face's, together with its tokenizer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

import torch

from plm.cpu.huge_pages import into_huge_pages
from plm.cpu.int8 import is_quantized, quantize
from plm.device import PRECISIONS, resolve_precision
from plm.errors import PLMError
from plm.hf import load_hf
from plm.models import PRESETS, PretrainedModel
from plm.storage.checkpoint import CONFIG_FILE, is_training_run, load_model, model_directory
from plm.storage.hub import local_or_hub
from plm.tokenization.tokenizer import Tokenizer

__all__ = ["inference_weights", "load", "load_pretrained"]


def is_plm_directory(path: str | Path) -> bool:
    """True for a plm model directory or training run (its config.json names a family).

    Args:
        path: a directory.

    Returns:
        Whether ``path`` (or the model directory it stands for) is plm's.
    """
    try:
        directory = model_directory(path)
        return "family" in json.loads((directory / CONFIG_FILE).read_text(encoding="utf-8"))
    except (PLMError, ValueError, OSError):
        return False


def find_tokenizer(directory: str | Path) -> Tokenizer | None:
    """tokenizer.json, a BERT vocab.txt, or GPT-2's vocab.json + merges.txt; None when there is none.

    Args:
        directory: the directory to look in.

    Returns:
        The tokenizer of the first of those files found, or None.
    """
    directory = Path(directory)
    if (directory / "tokenizer.json").is_file():
        return Tokenizer.load(directory)
    if (directory / "vocab.txt").is_file():
        return Tokenizer.from_vocab_txt(directory / "vocab.txt")
    if (directory / "vocab.json").is_file() and (directory / "merges.txt").is_file():
        return Tokenizer.from_gpt2_files(directory / "vocab.json", directory / "merges.txt")
    return None


def load(path: str | Path, device: str | torch.device = "cpu", revision: str | None = None) -> PretrainedModel:
    """Open a model, in eval mode: plm's one loader.

    Args:
        path: a plm model directory, a training run (its best model, else its latest checkpoint), a
            Hugging Face directory (``config.json`` and safetensors weights of an architecture plm has), or a
            Hugging Face Hub id of one, fetched into the cache ([`local_or_hub`][plm.storage.hub.local_or_hub]; a local
            path of the same spelling wins).
        device: where the weights go.
        revision: for a Hub id, the branch, tag or commit to fetch; None: the default branch.

    Returns:
        The model.

    Raises:
        PLMError: no such directory or Hub id (or a failed download), a run that saved no model yet, or a
            directory that is neither plm's nor a Hugging Face model plm can read.
    """
    return opened(path, device, revision)[1]


def opened(path: str | Path, device: str | torch.device, revision: str | None = None) -> tuple[Path, PretrainedModel]:
    """The model directory ``path`` stands for, and its model (see [`load`][plm.loading.load]).

    Args:
        path: as for [`load`][plm.loading.load].
        device: where the weights go.
        revision: as for [`load`][plm.loading.load].

    Returns:
        The model directory and the model.

    Raises:
        PLMError: as [`load`][plm.loading.load].
    """
    try:
        path = local_or_hub(path, revision)
    except PLMError as error:
        if str(path) in PRESETS:  # gpt2-mini: a name plm pretrain builds a new model from, not one to load
            raise PLMError(f"{error}; {path} is a preset of plm pretrain (a new, untrained model), not a model to "
                           "load") from None
        raise
    if is_plm_directory(path) or is_training_run(path):  # a run without a model is an error, not a Hugging Face model
        directory = model_directory(path)
        return directory, load_model(directory, device)
    return path, load_hf(path, device).eval()


def load_pretrained(
    path: str | Path, device: str | torch.device = "cpu", revision: str | None = None
) -> tuple[PretrainedModel, Tokenizer]:
    """A model (see [`load`][plm.loading.load]) and the tokenizer saved beside it, checked to belong together.

    Args:
        path: as for [`load`][plm.loading.load].
        device: where the weights go.
        revision: as for [`load`][plm.loading.load].

    Returns:
        The model and its tokenizer.

    Raises:
        PLMError: as [`load`][plm.loading.load], or no tokenizer beside the model, or one with more tokens than the
            model has embeddings.
    """
    directory, model = opened(path, device, revision)
    return model, tokenizer_beside(directory, model)


def tokenizer_beside(directory: Path, model: PretrainedModel) -> Tokenizer:
    """The tokenizer saved beside a model opened from ``directory`` (see `opened`), checked to belong to it.

    Args:
        directory: the model's directory.
        model: the model.

    Returns:
        The tokenizer.

    Raises:
        PLMError: no tokenizer beside the model, or one with more tokens than the model has embeddings.
    """
    tokenizer = find_tokenizer(directory)
    if tokenizer is None:
        raise PLMError(
            f"{directory}: no tokenizer beside the model (tokenizer.json, vocab.txt or vocab.json + merges.txt)"
        )
    check_tokenizer_fits(directory, model, tokenizer)
    return tokenizer


def check_tokenizer_fits(directory: Path, model: PretrainedModel, tokenizer: Tokenizer) -> None:
    """Refuse a tokenizer with more tokens than ``model`` has input embeddings: they do not belong together.

    Args:
        directory: where the two were found, for the message.
        model: the model.
        tokenizer: the tokenizer that reads its input.

    Raises:
        PLMError: a tokenizer with more tokens than the model has embeddings.
    """
    # The tokenizer beside the model reads its input: an encoder-decoder's source side, whose own
    # vocabulary (source_vocab_size) is the target's when it is None (one joint vocabulary).
    embeddings = getattr(model.config, "source_vocab_size", None) or model.config.vocab_size
    if len(tokenizer) > embeddings:
        # Ids past the embedding table would index out of range in the middle of a forward pass.
        raise PLMError(
            f"{directory}: the tokenizer has {len(tokenizer):,} tokens but the model only "
            f"{embeddings:,} embeddings; they do not belong together"
        )


ModelT = TypeVar("ModelT", bound=PretrainedModel)


def inference_weights(model: ModelT, precision: str = "fp32", quantization: str | None = None) -> ModelT:
    """``model`` with the weights inference asks for: fp32, bf16 or fp16 (``precision``), or int8 (``quantization``).

    bf16 weights halve the bytes each token reads, and run fast where the hardware multiplies bf16
    (GPUs; CPUs with AVX512-BF16 or AMX, see [`native_bf16_cpu`][plm.device.native_bf16_cpu]); fp16 weights are for
    GPUs. Outputs are in the weights' format too: a caller that sums many of them (a loss, a perplexity)
    does it in fp32. On the CPU the weights, whatever their format, are then copied into huge pages
    ([`into_huge_pages`][plm.cpu.huge_pages.into_huge_pages]), which a decoding step reads faster.

    Args:
        model: the model.
        precision: ``fp32``, ``bf16``, ``fp16``, or ``auto``: the one
            [`resolve_precision`][plm.device.resolve_precision] picks for the model's device.
        quantization: ``int8`` for int8 linear layers and embeddings on the CPU ([`quantize`][plm.cpu.int8.quantize]),
            which leaves ``precision`` at fp32; None for none.

    Returns:
        The model, cast or quantized in place.

    Raises:
        PLMError: an unknown precision or quantization, both bf16 and int8, or int8 off the CPU.
    """
    if precision not in PRECISIONS:
        raise PLMError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    if quantization is not None or is_quantized(model):  # a model saved quantized is int8 already
        if precision != "fp32":
            raise PLMError(f"int8 weights (`quantization`, or a model saved quantized) are not also {precision} "
                           "(`precision`); choose one")
        if quantization is not None:
            return quantize(model, quantization)  # which puts the int8 weights in huge pages itself
    elif precision != "fp32":  # fp32: as loaded, plm saves fp32 weights
        model = model.to(resolve_precision(precision, next(model.parameters()).device))
    # decoding reads every weight a token: on the CPU, from huge pages (plm.cpu.huge_pages)
    on_cpu = next(iter(model.state_dict().values())).device.type == "cpu"
    return into_huge_pages(model) if on_cpu else model
