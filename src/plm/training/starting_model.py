"""The model a run starts from: a family's small CPU preset, a preset, or a saved model to continue.

Every entry that trains (pre-training, sequence to sequence, comparisons, the paper-scale projection) names its
model the same way, reads its config (without weights) and builds it from here.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from plm.config import config_from_dict
from plm.cpu.int8 import check_trainable
from plm.errors import PLMError
from plm.models import FAMILIES, PRESETS, RECIPES, PretrainedModel, from_config, model_class, preset_config
from plm.storage.atomic_files import read_json
from plm.storage.checkpoint import CONFIG_FILE, load_model, model_directory

# A family's name stands for its recipe's small CPU preset.
FAMILY_PRESETS = {family: recipe.preset for family, recipe in RECIPES.items()}


def check_model_name(name: str) -> str:
    """The preset ``name`` stands for, or ``name`` itself when it is a model directory.

    Args:
        name: a family name (its small CPU preset), a preset or a model directory.

    Returns:
        The preset's name, or ``name`` itself.

    Raises:
        PLMError: neither a family, a preset nor an existing path.
    """
    name = FAMILY_PRESETS.get(name, name)
    if name not in PRESETS and not Path(name).exists():
        families = ", ".join(FAMILY_PRESETS)
        raise PLMError(
            f"unknown preset {name!r} and no such model directory; the presets are: {families}, {', '.join(PRESETS)}"
        )
    return name


def model_config(name: str, overrides: dict[str, Any] | None = None) -> Any:
    """The config of a preset (with ``overrides``), or of a saved plm model directory (read without its weights).

    Args:
        name: a preset or a plm model directory.
        overrides: preset config fields to change.

    Returns:
        The family's config.

    Raises:
        PLMError: ``overrides`` for a saved model, a directory that is not a plm model, or an invalid config.
    """
    if name in PRESETS:
        return preset_config(name, **(overrides or {}))
    if overrides:
        raise PLMError(
            f"{name}: model fields ({', '.join(overrides)}) can be changed only for a preset, not a saved model"
        )
    path = model_directory(name) / CONFIG_FILE
    description = read_json(path)
    family = description.get("family") if isinstance(description, dict) else None
    if family not in FAMILIES:
        raise PLMError(f"{name}: not a plm model directory (convert a Hugging Face one with plm convert first)")
    return config_from_dict(FAMILIES[family].config_class, description.get("config", {}), str(path))


def check_dropout(dropout: float | None) -> None:
    """Refuse a dropout rate [`build_model`][plm.training.starting_model.build_model] cannot give a preset.

    Args:
        dropout: the rate, or None (the preset's own).

    Raises:
        PLMError: a rate outside [0, 1).
    """
    if dropout is not None and not (math.isfinite(dropout) and 0 <= dropout < 1):
        raise PLMError(f"`dropout` must be in [0, 1), got {dropout}")


def build_model(
    name: str, vocabulary: dict[str, int | None], dropout: float | None = None,
    overrides: dict[str, Any] | None = None, heads: tuple[str, ...] = (),
) -> PretrainedModel:
    """A fresh preset sized to the run's tokenizer(s) with the objective's heads, or a saved model to continue.

    Args:
        name: a preset or a model directory (see [`check_model_name`][plm.training.starting_model.check_model_name]).
        vocabulary: the preset's vocabulary fields and the run's sizes: ``vocab_size`` (the target's, for an
            encoder-decoder) and, for an encoder-decoder, ``source_vocab_size`` (None: one joint vocabulary).
        dropout: every dropout rate of a preset (embeddings, attention, residuals, heads); None: the preset's own.
        overrides: preset config fields to change (ablations).
        heads: the pre-training heads the objective needs.

    Returns:
        The model.

    Raises:
        PLMError: a saved model that cannot be loaded or trained (int8), has fewer embeddings than the tokenizer
            has tokens, or other pre-training heads.
    """
    if name in PRESETS:
        config = preset_config(name, **(overrides or {}), **vocabulary)
        if dropout is not None:
            rates = {f.name: dropout for f in dataclasses.fields(config) if f.name.endswith("dropout")}
            config = dataclasses.replace(config, **rates)
        return from_config(model_class(config).config_with_heads(config, heads))
    loaded = load_model(name)
    check_trainable(loaded, name)
    tokens = vocabulary["vocab_size"] or 0
    if loaded.config.vocab_size < tokens:
        raise PLMError(f"{name}: the model has {loaded.config.vocab_size} embeddings but the tokenizer {tokens} tokens")
    have = tuple(getattr(loaded.config, "pretraining_heads", ()))
    if set(have) != set(heads):
        raise PLMError(f"{name}: the model's pretraining heads are {'+'.join(have) or 'none'}; the objective needs "
                       f"{'+'.join(heads) or 'none'}")
    return loaded
