"""An encoder-decoder to translate with, and the search its recipe decodes with.

Translating and scoring live in [`plm.objectives.translation`][plm.objectives.translation], which seq2seq training's
validation shares. The model is plm's (a model directory or a training run) or a released one: a Hugging Face
Marian or FSMT directory or Hub id, read into plm's Transformer with its own tokenizers.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from plm.data.sentence_pairs import Seq2SeqTokenizers
from plm.errors import PLMError, with_article
from plm.loading import opened
from plm.models.base import Seq2SeqModel


def load_seq2seq(
    path: str | os.PathLike[str], device: str | torch.device = "cpu", revision: str | None = None
) -> tuple[Seq2SeqModel, Seq2SeqTokenizers]:
    """An encoder-decoder and its tokenizers, in eval mode.

    Args:
        path: a plm model directory or training run (a run's best model first), or a Hugging Face Marian or
            FSMT directory or Hub id ([`local_or_hub`][plm.storage.hub.local_or_hub]; a local path of the same spelling
            wins).
        device: where the model goes.
        revision: for a Hub id, the branch, tag or commit to fetch; None: the default branch.

    Returns:
        The model and its tokenizers.

    Raises:
        PLMError: a model that cannot be loaded, one that is not an encoder-decoder, tokenizers that cannot be
            loaded, or tokenizers with more tokens than the model has embeddings.
    """
    directory, model = opened(str(path), device, revision)
    if not isinstance(model, Seq2SeqModel):
        raise PLMError(
            f"{path}: {with_article(model.family)} model does not translate; "
            "give an encoder-decoder (plm seq2seq train)"
        )
    return model, seq2seq_tokenizers(directory, model)


def seq2seq_tokenizers(directory: Path, model: Seq2SeqModel) -> Seq2SeqTokenizers:
    """The tokenizers saved beside an encoder-decoder opened from ``directory``, checked to belong to it.

    Args:
        directory: the model's directory: plm's tokenizers, or a released Marian or FSMT model's.
        model: the encoder-decoder.

    Returns:
        The tokenizers.

    Raises:
        PLMError: tokenizers that cannot be loaded, or with more tokens than the model has embeddings.
    """
    tokenizers = Seq2SeqTokenizers.load(directory)
    # Ids past an embedding table would index out of range in the middle of a search.
    target_rows = model.config.vocab_size
    source_rows = getattr(model.config, "source_vocab_size", None) or target_rows
    for side, tokenizer, rows in (("source", tokenizers.source, source_rows),
                                  ("target", tokenizers.target, target_rows)):
        if len(tokenizer) > rows:
            raise PLMError(f"{directory}: the {side} tokenizer has {len(tokenizer):,} tokens but the model only "
                           f"{rows:,} embeddings; they do not belong together")
    return tokenizers
