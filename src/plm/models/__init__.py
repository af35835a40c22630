"""The model families and their named presets."""

from __future__ import annotations

import dataclasses
from typing import Any

from plm.errors import PLMError
from plm.models import albert, bert, deberta, elmo, gpt, rnn, transformer
from plm.models.albert import Albert, AlbertConfig
from plm.models.base import CausalLM, PretrainedModel, Seq2SeqModel
from plm.models.bert import Bert, BertConfig
from plm.models.deberta import Deberta, DebertaConfig
from plm.models.elmo import Elmo, ElmoConfig
from plm.models.encoder import Encoder, EncoderConfig, with_heads
from plm.models.gpt import GPT, GPTConfig
from plm.models.pretraining_heads import sentence_embeddings
from plm.models.recipe import PretrainingRecipe
from plm.models.rnn import RNNConfig, RNNSeq2Seq
from plm.models.scalar_mix import ScalarMix
from plm.models.transformer import Transformer, TransformerConfig

# Each family: its model class, its named presets and its pre-training recipe.
_FAMILIES = (
    (GPT, gpt), (Bert, bert), (Albert, albert), (Deberta, deberta), (Elmo, elmo), (Transformer, transformer),
    (RNNSeq2Seq, rnn),
)
FAMILIES: dict[str, type[PretrainedModel]] = {model.family: model for model, _ in _FAMILIES}
PRESETS: dict[str, Any] = {name: config for _, module in _FAMILIES for name, config in module.PRESETS.items()}
RECIPES: dict[str, PretrainingRecipe] = {model.family: module.RECIPE for model, module in _FAMILIES}


def recipe_of(config: Any) -> PretrainingRecipe:
    """The pre-training recipe of a model: its family's, with the paper settings of the model's size.

    Args:
        config: a family's config.

    Returns:
        The recipe (see [`PretrainingRecipe.for_model`][plm.models.recipe.PretrainingRecipe.for_model]).

    Raises:
        PLMError: a config no family takes.
    """
    return RECIPES[model_class(config).family].for_model(config)


def preset_config(name: str, **overrides: Any) -> Any:
    """The config of preset ``name``, with fields replaced by ``overrides``.

    Args:
        name: a key of `PRESETS`.
        **overrides: config fields to replace.

    Returns:
        The config.

    Raises:
        PLMError: an unknown preset, or a field the preset's config does not have.
    """
    if name not in PRESETS:
        raise PLMError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}")
    unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(PRESETS[name])})
    if unknown:
        raise PLMError(f"preset {name!r} has no field {', '.join(unknown)}")
    return dataclasses.replace(PRESETS[name], **overrides)


def model_class(config: Any) -> type[PretrainedModel]:
    """The model class of the family that ``config`` belongs to.

    Args:
        config: a family's config.

    Returns:
        The class.

    Raises:
        PLMError: a config no family takes.
    """
    for model in FAMILIES.values():
        if isinstance(config, model.config_class):
            return model
    raise PLMError(f"no model family takes a {type(config).__name__}")


def from_config(config: Any) -> PretrainedModel:
    """A freshly initialised model of the family that ``config`` belongs to.

    Args:
        config: a family's config.

    Returns:
        The model.

    Raises:
        PLMError: a config no family takes.
    """
    return model_class(config)(config)


def from_preset(name: str, **overrides: Any) -> PretrainedModel:
    """A freshly initialised model from a named preset; works under ``torch.device("meta")``.

    Args:
        name: a key of `PRESETS`.
        **overrides: config fields to replace.

    Returns:
        The model.

    Raises:
        PLMError: an unknown preset, or a field its config does not have.
    """
    return from_config(preset_config(name, **overrides))


__all__ = [
    "FAMILIES",
    "PRESETS",
    "RECIPES",
    "Albert",
    "AlbertConfig",
    "Bert",
    "BertConfig",
    "CausalLM",
    "Deberta",
    "DebertaConfig",
    "Elmo",
    "ElmoConfig",
    "Encoder",
    "EncoderConfig",
    "GPT",
    "GPTConfig",
    "PretrainedModel",
    "RNNConfig",
    "RNNSeq2Seq",
    "ScalarMix",
    "Seq2SeqModel",
    "Transformer",
    "TransformerConfig",
    "from_config",
    "from_preset",
    "model_class",
    "preset_config",
    "recipe_of",
    "sentence_embeddings",
    "with_heads",
]
