"""Open any model directory, plm's own or Hugging Face's, together with its tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from plm.errors import PLMError
from plm.hf import load_hf
from plm.models import PretrainedModel
from plm.storage.checkpoint import CONFIG_FILE, is_training_run, load_model, model_directory
from plm.tokenization.tokenizer import Tokenizer


def is_plm_directory(path: str | Path) -> bool:
    """True for a plm model directory or training run (its config.json names a family)."""
    try:
        directory = model_directory(path)
        return "family" in json.loads((directory / CONFIG_FILE).read_text(encoding="utf-8"))
    except (PLMError, ValueError, OSError):
        return False


def find_tokenizer(directory: str | Path) -> Tokenizer | None:
    """tokenizer.json, a BERT vocab.txt, or GPT-2's vocab.json + merges.txt; None when there is none."""
    directory = Path(directory)
    if (directory / "tokenizer.json").is_file():
        return Tokenizer.load(directory)
    if (directory / "vocab.txt").is_file():
        return Tokenizer.from_vocab_txt(directory / "vocab.txt")
    if (directory / "vocab.json").is_file() and (directory / "merges.txt").is_file():
        return Tokenizer.from_gpt2_files(directory / "vocab.json", directory / "merges.txt")
    return None


def load_pretrained(path: str | Path, device: str | torch.device = "cpu") -> tuple[PretrainedModel, Tokenizer]:
    """A model (plm or Hugging Face format, in eval mode) and the tokenizer saved beside it."""
    path = Path(path)
    if not path.exists():
        raise PLMError(f"{path}: no such model directory")
    if is_plm_directory(path) or is_training_run(path):  # a run without a model is an error, not a Hugging Face model
        directory = model_directory(path)
        model = load_model(directory, device)
    else:
        directory, model = path, load_hf(path, device).eval()
    tokenizer = find_tokenizer(directory)
    if tokenizer is None:
        raise PLMError(f"{directory}: no tokenizer beside the model (tokenizer.json, vocab.txt or vocab.json + merges.txt)")
    # The tokenizer beside the model reads its input: an encoder-decoder's source side, whose own
    # vocabulary (source_vocab_size) is the target's when it is None (one joint vocabulary).
    embeddings = getattr(model.config, "source_vocab_size", None) or model.config.vocab_size
    if len(tokenizer) > embeddings:
        # Ids past the embedding table would index out of range in the middle of a forward pass.
        raise PLMError(
            f"{directory}: the tokenizer has {len(tokenizer):,} tokens but the model only "
            f"{embeddings:,} embeddings; they do not belong together"
        )
    return model, tokenizer
