"""The model families and their named presets."""

from __future__ import annotations

import dataclasses
from typing import Any

from plm.errors import PLMError
from plm.models import albert, bert, deberta, gpt
from plm.models.albert import Albert, AlbertConfig
from plm.models.base import CausalLM, PretrainedModel
from plm.models.bert import Bert, BertConfig
from plm.models.deberta import Deberta, DebertaConfig
from plm.models.encoder import Encoder, EncoderConfig, with_heads
from plm.models.gpt import GPT, GPTConfig

FAMILIES: dict[str, type[PretrainedModel]] = {model.family: model for model in (GPT, Bert, Albert, Deberta)}
PRESETS: dict[str, Any] = {**gpt.PRESETS, **bert.PRESETS, **albert.PRESETS, **deberta.PRESETS}


def preset_config(name: str, **overrides: Any) -> Any:
    """The config of preset ``name``, with fields replaced by ``overrides``."""
    if name not in PRESETS:
        raise PLMError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}")
    return dataclasses.replace(PRESETS[name], **overrides)


def model_class(config: Any) -> type[PretrainedModel]:
    for model in FAMILIES.values():
        if isinstance(config, model.config_class):
            return model
    raise PLMError(f"no model family takes a {type(config).__name__}")


def from_config(config: Any) -> PretrainedModel:
    """A freshly initialised model of the family that ``config`` belongs to."""
    return model_class(config)(config)


def from_preset(name: str, **overrides: Any) -> PretrainedModel:
    """A freshly initialised model from a named preset; works under ``torch.device("meta")``."""
    return from_config(preset_config(name, **overrides))


__all__ = [
    "FAMILIES",
    "PRESETS",
    "Albert",
    "AlbertConfig",
    "Bert",
    "BertConfig",
    "CausalLM",
    "Deberta",
    "DebertaConfig",
    "Encoder",
    "EncoderConfig",
    "GPT",
    "GPTConfig",
    "PretrainedModel",
    "from_config",
    "from_preset",
    "model_class",
    "preset_config",
    "with_heads",
]
