"""ALBERT checkpoints (``albert``) of Hugging Face transformers.

The mapping is BERT's ([`plm.hf.bert`][plm.hf.bert]) with ALBERT's names: the embeddings'
E -> H projection sits in the HF encoder (``embedding_hidden_mapping_in``), and the
distinct blocks are ``albert_layer_groups.{g}.albert_layers.{j}``, plm's block
``g * inner_group_layers + j``. Architectures: ``AlbertModel`` (encoder with
pooler), ``AlbertForMaskedLM`` (no pooler, MLM head), ``AlbertForPreTraining``
(pooler, MLM and SOP heads). Sharing only attention or only FFNs has no HF
equivalent; no sharing is written as one group per layer.
"""

from __future__ import annotations

from typing import Any

from plm.errors import PLMError
from plm.hf.bert import EncoderConverter, linear
from plm.hf.io import check_positive, register
from plm.models.albert import AlbertConfig


@register
class AlbertConverter(EncoderConverter[AlbertConfig]):
    """ALBERT (``albert``): ``AlbertModel``, ``AlbertForMaskedLM`` and ``AlbertForPreTraining``."""
    family = "albert"
    model_types = ("albert",)
    config_class = AlbertConfig
    defaults = {
        "vocab_size": 30000,
        "embedding_size": 128,
        "hidden_size": 4096,
        "num_hidden_layers": 12,
        "num_hidden_groups": 1,
        "num_attention_heads": 64,
        "intermediate_size": 16384,
        "inner_group_num": 1,
        "hidden_act": "gelu_new",
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
        "layer_norm_eps": 1e-12,
        "classifier_dropout_prob": 0.1,
    }
    architectures = {
        "AlbertModel": (True, ()),
        "AlbertForMaskedLM": (False, ("mlm",)),
        "AlbertForPreTraining": (True, ("mlm", "sop")),
    }
    base_prefix = "albert."
    layer_prefix = "encoder.albert_layer_groups.{}.albert_layers.{}."
    qkv = ("attention.query", "attention.key", "attention.value")
    block_names = {
        "attention.dense": "attention.out_proj",
        "attention.LayerNorm": "attention_norm",
        "ffn": "feed_forward.fc_in",
        "ffn_output": "feed_forward.fc_out",
        "full_layer_layer_norm": "feed_forward_norm",
    }
    pooler = "pooler"
    mlm_names = {"predictions.dense": "dense", "predictions.LayerNorm": "norm"}
    mlm_bias = "predictions.bias"
    mlm_decoder = "predictions.decoder"
    pair_head = "sop_classifier.classifier"

    def family_config_from_hf(self, hf: dict[str, Any], source: str) -> dict[str, Any]:
        """ALBERT's own fields: the embedding size, the groups of shared blocks, the SOP head's dropout.

        Args:
            hf: the contents of ``config.json``, defaults filled in.
            source: the file, for the error messages.

        Returns:
            plm field -> value.

        Raises:
            PLMError: an embedding size or group count that is not a positive integer.
        """
        check_positive(hf, ("embedding_size", "num_hidden_groups", "inner_group_num"), source)
        return {
            "embedding_dim": hf["embedding_size"],
            "hidden_groups": hf["num_hidden_groups"],
            "inner_group_layers": hf["inner_group_num"],
            "pair_head_dropout": hf["classifier_dropout_prob"],
        }

    def family_config_to_hf(self, config: AlbertConfig) -> dict[str, Any]:
        """ALBERT's own ``config.json`` fields.

        Args:
            config: the plm config.

        Returns:
            HF field -> value.

        Raises:
            PLMError: sharing only attention or only FFNs, or no factorized embeddings.
        """
        if config.sharing not in ("all", "none"):
            raise PLMError(f"an ALBERT that shares only {config.sharing!r} layers has no Hugging Face equivalent")
        if config.embedding_dim is None:
            raise PLMError(
                "an ALBERT without factorized embeddings (embedding_dim=None) has no Hugging Face equivalent"
            )
        groups, inner = self.groups(config)
        return {
            "embedding_size": config.embedding_dim,
            "num_hidden_groups": groups,
            "inner_group_num": inner,
            "classifier_dropout_prob": config.pair_head_dropout,
        }

    @staticmethod
    def groups(config: AlbertConfig) -> tuple[int, int]:
        """HF's (num_hidden_groups, inner_group_num); no sharing is one group of one block per layer.

        Args:
            config: the plm config.

        Returns:
            The groups and the blocks per group.
        """
        if config.sharing == "none":
            return config.layers, 1
        return config.hidden_groups, config.inner_group_layers

    def block_indices(self, config: AlbertConfig) -> list[tuple[int, ...]]:
        """(group, block in the group) of each of plm's distinct blocks, group by group.

        Args:
            config: the plm config.

        Returns:
            The format arguments of ``layer_prefix``, one tuple per distinct block.
        """
        groups, inner = self.groups(config)
        return [(group, index) for group in range(groups) for index in range(inner)]

    def embedding_pairs(self, config: AlbertConfig) -> list[tuple[str, str]]:
        """BERT's embedding names, and the E -> H projection that HF keeps in the encoder.

        Args:
            config: the plm config.

        Returns:
            The (HF name, plm name) pairs.
        """
        projection = linear(f"{self.base_prefix}encoder.embedding_hidden_mapping_in", "embeddings.projection")
        return super().embedding_pairs(config) + projection
