"""BERT checkpoints (``bert``) of Hugging Face transformers, and the mapping ALBERT's reuses.

Hugging Face keeps Q, K and V in three Linear layers; plm fuses them, stacked in
that order, in ``attention.in_proj``. The tied MLM decoder is not stored (the word
embeddings are), nor its bias (the head's ``bias`` is). The heads of a checkpoint
follow its architecture: ``BertModel`` is the encoder with its pooler, stored without
the ``bert.`` prefix; ``BertForMaskedLM`` the encoder without pooler plus the MLM
head; ``BertForPreTraining`` the encoder with pooler, MLM and NSP heads. As
``from_pretrained`` does, loading one architecture ignores the heads of the others
(``bert-base-uncased`` says ``BertForMaskedLM`` but also holds its pooler and NSP).
Saving picks the architecture from the heads present; a model with the MLM head
alone is written as ``BertForMaskedLM``, without its pooler (MLM never trains it).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, ClassVar, Generic

import torch

from plm.config import config_from_dict
from plm.errors import PLMError, with_article
from plm.hf.io import Converter, HFWeights, activation_from_hf, check_positive, register
from plm.models.bert import BertConfig
from plm.models.encoder import ConfigT, EncoderConfig

# HF activation -> plm activation; saving writes the first HF name of a plm activation.
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}

# HF config field -> plm field, for the fields that BERT and ALBERT share.
CONFIG_FIELDS = {
    "vocab_size": "vocab_size",
    "max_position_embeddings": "context_length",
    "hidden_size": "dim",
    "num_hidden_layers": "layers",
    "num_attention_heads": "heads",
    "intermediate_size": "ffn_dim",
    "type_vocab_size": "segments",
    "hidden_act": "activation",
    "hidden_dropout_prob": "dropout",
    "attention_probs_dropout_prob": "attention_dropout",
    "layer_norm_eps": "norm_eps",
}
POSITIVE = ("vocab_size", "max_position_embeddings", "hidden_size", "num_hidden_layers", "num_attention_heads",
            "intermediate_size", "type_vocab_size")

# Options that change the computation in ways plm does not implement, with the value plm matches.
VARIANTS = {"position_embedding_type": "absolute", "is_decoder": False, "add_cross_attention": False}


def linear(hf: str, plm: str) -> list[tuple[str, str]]:
    """Name pairs of a Linear or LayerNorm: its weight and its bias.

    Args:
        hf: the layer's Hugging Face name.
        plm: its plm name.

    Returns:
        The (HF name, plm name) pairs of the weight and the bias.
    """
    return [(f"{hf}.weight", f"{plm}.weight"), (f"{hf}.bias", f"{plm}.bias")]


class EncoderConverter(Converter, Generic[ConfigT]):
    """The mapping of a BERT-style encoder; a subclass names its tensors and architectures.

    Every HF name below is the one in a model with heads (``bert.`` / ``albert.``
    prefix on the encoder); the bare architecture stores the encoder without it.

    Attributes:
        config_class: the plm config class.
        defaults: transformers' defaults, for the fields a ``config.json`` leaves out.
        architectures: architecture name -> (pooler, pre-training heads); the bare one first.
        base_prefix: the prefix of the encoder's tensors in a model with heads (``bert.``).
        layer_prefix: one block's prefix, formatted with its HF index.
        qkv: the query, key and value Linears in a block.
        block_names: HF Linear/LayerNorm in a block -> plm one in ``blocks.{i}``.
        pooler: the pooler's Linear.
        mlm_names: HF Linear/LayerNorm of the MLM head -> plm one in ``mlm_head``.
        mlm_bias: the MLM decoder's bias.
        mlm_decoder: the tied MLM decoder Linear, not saved.
        pair_head: the sentence-pair (NSP or SOP) classifier.
    """

    config_class: ClassVar[type[EncoderConfig]]
    defaults: ClassVar[dict[str, Any]]  # transformers' defaults, for fields a config.json leaves out
    architectures: ClassVar[dict[str, tuple[bool, tuple[str, ...]]]]  # name -> (pooler, heads); the bare one first
    base_prefix: ClassVar[str]
    layer_prefix: ClassVar[str]  # one block, formatted with its HF index
    qkv: ClassVar[tuple[str, str, str]]  # query, key and value Linears in a block
    block_names: ClassVar[dict[str, str]]  # HF Linear/LayerNorm in a block -> plm one in blocks.{i}
    pooler: ClassVar[str]
    mlm_names: ClassVar[dict[str, str]]  # HF Linear/LayerNorm -> plm one in mlm_head
    mlm_bias: ClassVar[str]
    mlm_decoder: ClassVar[str]  # the tied decoder Linear, not saved
    pair_head: ClassVar[str]

    # Configs --------------------------------------------------------------------------

    def config_from_hf(self, hf: dict[str, Any], source: str) -> EncoderConfig:
        """The plm config of ``config.json``; a PLMError naming ``source`` if plm cannot reproduce it.

        The architecture (the first of ``architectures``, default the bare one) sets the pooler and heads.

        Args:
            hf: the contents of ``config.json``; missing fields take transformers' defaults.
            source: the file, for the error messages.

        Returns:
            The plm config.

        Raises:
            PLMError: a size that is not a positive integer, a variant plm does not implement, an unsupported
                activation or architecture, or a field the plm config refuses.
        """
        hf = {**self.defaults, **hf}
        check_positive(hf, POSITIVE, source)
        for key, value in VARIANTS.items():
            if hf.get(key, value) != value:
                raise PLMError(
                    f"{source}: {key}={hf[key]!r} is {with_article(self.family)} variant that plm does not implement"
                )
        activation = activation_from_hf(hf, "hidden_act", ACTIVATIONS, source)
        architecture = (hf.get("architectures") or [next(iter(self.architectures))])[0]
        if architecture not in self.architectures:
            raise PLMError(
                f"{source}: architecture {architecture} is not supported; plm reads {', '.join(self.architectures)}"
            )
        pooler, heads = self.architectures[architecture]
        values = {plm: hf[key] for key, plm in CONFIG_FIELDS.items()}
        values.update(activation=activation, pooler=pooler, pretraining_heads=heads)
        values.update(self.family_config_from_hf(hf, source))
        return config_from_dict(self.config_class, values, source)

    def config_to_hf(self, config: ConfigT) -> dict[str, Any]:
        """``config.json`` with ``model_type`` and ``architectures``; a PLMError if HF has no equivalent.

        Args:
            config: the plm config.

        Returns:
            The contents of ``config.json``.

        Raises:
            PLMError: a pre-LN encoder, one without absolute positions or segments, heads without a Hugging Face
                architecture, or a family option Hugging Face lacks.
        """
        if config.norm_first or not config.absolute_positions or not config.segments:
            raise PLMError(
                f"{with_article(self.family)} encoder with norm_first={config.norm_first}, absolute_positions="
                f"{config.absolute_positions}, segments={config.segments} has no Hugging Face equivalent"
            )
        values = {key: getattr(config, plm) for key, plm in CONFIG_FIELDS.items()}
        values["hidden_act"] = next(hf for hf, plm in ACTIVATIONS.items() if plm == config.activation)
        return {
            "model_type": self.model_types[0],
            "architectures": [self.architecture(config)],
            **values,
            **self.family_config_to_hf(config),
        }

    def architecture(self, config: ConfigT) -> str:
        """The architecture with exactly the heads of ``config``; the bare one needs the pooler.

        Args:
            config: the plm config.

        Returns:
            The architecture's name.

        Raises:
            PLMError: no architecture has those heads.
        """
        for name, (pooler, heads) in self.architectures.items():
            if set(heads) == set(config.pretraining_heads) and (heads or config.pooler):
                return name
        raise PLMError(
            f"{with_article(self.family)} encoder with pooler={config.pooler} and heads {config.pretraining_heads} "
            f"has no Hugging Face architecture ({', '.join(self.architectures)})"
        )

    def family_config_from_hf(self, hf: dict[str, Any], source: str) -> dict[str, Any]:
        """The plm config fields of a family's own, read from ``config.json``; none by default.

        Args:
            hf: the contents of ``config.json``, defaults filled in.
            source: the file, for the error messages.

        Returns:
            plm field -> value.
        """
        return {}

    def family_config_to_hf(self, config: ConfigT) -> dict[str, Any]:
        """The ``config.json`` fields of a family's own; none by default.

        Args:
            config: the plm config.

        Returns:
            HF field -> value.
        """
        return {}

    # Weights --------------------------------------------------------------------------

    def block_indices(self, config: ConfigT) -> list[tuple[int, ...]]:
        """What ``layer_prefix`` is formatted with for plm's blocks 0, 1, ...

        Args:
            config: the plm config.

        Returns:
            One tuple of format arguments per plm block: by default its own index.
        """
        return [(index,) for index in range(config.layers)]

    def embedding_pairs(self, config: ConfigT) -> list[tuple[str, str]]:
        """(HF name, plm name) of the embeddings' tensors: word, position, segment and their LayerNorm.

        Args:
            config: the plm config.

        Returns:
            The name pairs.
        """
        prefix = f"{self.base_prefix}embeddings."
        return [
            (f"{prefix}word_embeddings.weight", "embeddings.word.weight"),
            (f"{prefix}position_embeddings.weight", "embeddings.position.weight"),
            (f"{prefix}token_type_embeddings.weight", "embeddings.segment.weight"),
            *linear(f"{prefix}LayerNorm", "embeddings.norm"),
        ]

    def name_pairs(self, config: ConfigT) -> list[tuple[list[str], str]]:
        """([HF names], plm name) of every tensor; Q, K and V are three HF names for one plm one.

        Args:
            config: the plm config; without pre-training heads the HF names lose ``base_prefix``.

        Returns:
            The name pairs.
        """
        pairs = [([hf], plm) for hf, plm in self.embedding_pairs(config)]
        for index, hf_index in enumerate(self.block_indices(config)):
            prefix = f"{self.base_prefix}{self.layer_prefix.format(*hf_index)}"
            for kind in ("weight", "bias"):
                pairs.append(([f"{prefix}{hf}.{kind}" for hf in self.qkv], f"blocks.{index}.attention.in_proj.{kind}"))
            for hf, plm in self.block_names.items():
                pairs += [([h], p) for h, p in linear(prefix + hf, f"blocks.{index}.{plm}")]
        pairs += [([hf], plm) for hf, plm in self.head_pairs(config)]
        if not config.pretraining_heads:  # the bare architecture
            pairs = [([name.removeprefix(self.base_prefix) for name in hf], plm) for hf, plm in pairs]
        return pairs

    def head_pairs(self, config: ConfigT) -> list[tuple[str, str]]:
        """(HF name, plm name) of the pooler's and the pre-training heads' tensors that ``config`` has.

        Args:
            config: the plm config.

        Returns:
            The name pairs.
        """
        pairs = linear(f"{self.base_prefix}{self.pooler}", "pooler.dense") if config.pooler else []
        if "mlm" in config.pretraining_heads:
            for hf, plm in self.mlm_names.items():
                pairs += linear(hf, f"mlm_head.{plm}")
            pairs.append((self.mlm_bias, "mlm_head.bias"))
        if config.pair_head:
            pairs += linear(self.pair_head, "pair_head.classifier")
        return pairs

    def weights_from_hf(self, weights: HFWeights, config: ConfigT) -> dict[str, torch.Tensor]:
        """The plm state dict from HF tensors; takes (or discards) every tensor it understands.

        The heads of the family's other architectures are discarded, and the tied MLM decoder, where
        saved, must equal the tensors plm ties it to.

        Args:
            weights: the checkpoint's tensors.
            config: the plm config.

        Returns:
            The plm state dict.

        Raises:
            PLMError: a tensor missing, or a saved MLM decoder that differs from the tensors plm ties it to.
        """
        if not config.pretraining_heads:  # from_pretrained reads the bare encoder out of a model with heads too
            weights.strip_prefix(self.base_prefix)
        weights.discard(r"(.*\.)?embeddings\.position_ids")  # a buffer that older transformers saved
        self.discard_other_heads(weights, config)
        state = {plm: torch.cat([weights.take(name) for name in hf]) if len(hf) > 1 else weights.take(hf[0])
                 for hf, plm in self.name_pairs(config)}
        if "mlm" in config.pretraining_heads:
            weights.take_tied(f"{self.mlm_decoder}.weight", state["embeddings.word.weight"])
            weights.take_tied(f"{self.mlm_decoder}.bias", state["mlm_head.bias"])
        return state

    def weights_to_hf(self, state: dict[str, torch.Tensor], config: ConfigT) -> dict[str, torch.Tensor]:
        """HF tensors, named as ``save_pretrained`` names them, from a plm state dict.

        Q, K and V are split out of the fused projection; a model with heads is written with its
        architecture's pooler, a bare encoder as it is.

        Args:
            state: the plm state dict.
            config: the plm config.

        Returns:
            The tensors by Hugging Face name.

        Raises:
            PLMError: heads without a Hugging Face architecture.
        """
        # A bare encoder is written as it is (a task checkpoint's backbone may have no pooler).
        pooler = config.pooler if not config.pretraining_heads else self.architectures[self.architecture(config)][0]
        tensors: dict[str, torch.Tensor] = {}
        for hf, plm in self.name_pairs(dataclasses.replace(config, pooler=pooler)):
            parts = [part.clone() for part in state[plm].chunk(len(hf))] if len(hf) > 1 else [state[plm]]
            tensors.update(zip(hf, parts))
        return tensors

    def discard_other_heads(self, weights: HFWeights, config: ConfigT) -> None:
        """Drop the pooler and heads that this architecture lacks but others of the family have.

        Args:
            weights: the checkpoint's tensors, changed in place.
            config: the plm config.
        """
        prefix = self.base_prefix if config.pretraining_heads else ""  # a bare encoder's names lost it already
        unused = [] if config.pooler else [f"{prefix}{self.pooler}"]
        if "mlm" not in config.pretraining_heads:
            unused += [*self.mlm_names, self.mlm_bias, self.mlm_decoder]
        if config.pair_head is None:
            unused.append(self.pair_head)
        for name in unused:
            weights.discard(re.escape(name) + r"(\.weight|\.bias)?")


@register
class BertConverter(EncoderConverter[BertConfig]):
    """BERT (``bert``): ``BertModel``, ``BertForMaskedLM`` and ``BertForPreTraining``."""
    family = "bert"
    model_types = ("bert",)
    config_class = BertConfig
    defaults = {
        "vocab_size": 30522,
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
        "layer_norm_eps": 1e-12,
    }
    architectures = {
        "BertModel": (True, ()),
        "BertForMaskedLM": (False, ("mlm",)),
        "BertForPreTraining": (True, ("mlm", "nsp")),
    }
    base_prefix = "bert."
    layer_prefix = "encoder.layer.{}."
    qkv = ("attention.self.query", "attention.self.key", "attention.self.value")
    block_names = {
        "attention.output.dense": "attention.out_proj",
        "attention.output.LayerNorm": "attention_norm",
        "intermediate.dense": "feed_forward.fc_in",
        "output.dense": "feed_forward.fc_out",
        "output.LayerNorm": "feed_forward_norm",
    }
    pooler = "pooler.dense"
    mlm_names = {"cls.predictions.transform.dense": "dense", "cls.predictions.transform.LayerNorm": "norm"}
    mlm_bias = "cls.predictions.bias"
    mlm_decoder = "cls.predictions.decoder"
    pair_head = "cls.seq_relationship"

    def family_config_to_hf(self, config: BertConfig) -> dict[str, Any]:
        """No fields of BERT's own; refuses what Hugging Face's BERT lacks.

        Args:
            config: the plm config.

        Returns:
            An empty dict.

        Raises:
            PLMError: factorized embeddings, or dropout before the NSP classifier.
        """
        if config.embedding_dim is not None:
            raise PLMError("a BERT with factorized embeddings (embedding_dim) has no Hugging Face equivalent")
        if config.pair_head_dropout:
            raise PLMError("Hugging Face's BERT has no dropout before the NSP classifier; set pair_head_dropout=0")
        return {}
