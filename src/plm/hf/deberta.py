"""DeBERTa checkpoints of Hugging Face transformers, in both their layouts.

``deberta`` (``DebertaModel``, ``DebertaForMaskedLM``) and ``deberta-v2``, the layout of the 1.5B model
(``DebertaV2Model``, ``DebertaV2ForMaskedLM``).

v1's ``in_proj`` stacks W_Q, W_K, W_V head by head (rows q_0, k_0, v_0, q_1, ...),
plm's in whole matrices (Q, K, V); the rows are reordered both ways. ``pos_proj`` is
W_k,r (c2p) and ``pos_q_proj`` W_q,r (p2c). v2 keeps ``query_proj``, ``key_proj`` and
``value_proj`` apart, each with a bias (plm's ``key_bias``), ``pos_key_proj`` and
``pos_query_proj`` unless ``share_att_key``, the LayerNorm of P (``norm_rel_ebd``) and
nGiE (``conv_kernel_size``) in ``encoder``; ``position_buckets`` changes only P's rows.
plm writes a model with ``key_bias`` as v2, any other as v1. The MLM head is read in
both layouts (``cls.predictions`` when ``legacy``, ``lm_predictions.lm_head``
otherwise, the same computation) and written in the second, the original one.
Hugging Face has no enhanced mask decoder and computes p2c with the released
code's distance, so such plm models have no equivalent there.
"""

from __future__ import annotations

from typing import Any

import torch

from plm.config import config_from_dict
from plm.errors import PLMError
from plm.hf.io import Converter, HFWeights, activation_from_hf, check_expressible, check_positive, register
from plm.models.deberta import DebertaConfig

V1_ATTENTION = {  # HF name in encoder.layer.{i} -> plm name in blocks.{i}
    "attention.self.q_bias": "attention.query_bias",
    "attention.self.v_bias": "attention.value_bias",
    "attention.self.pos_proj.weight": "attention.position_key_proj.weight",
    "attention.self.pos_q_proj.weight": "attention.position_query_proj.weight",
    "attention.self.pos_q_proj.bias": "attention.position_query_proj.bias",
}
V2_ATTENTION = {  # the weights of query_proj, key_proj and value_proj are in_proj's thirds
    "attention.self.query_proj.bias": "attention.query_bias",
    "attention.self.key_proj.bias": "attention.key_bias",
    "attention.self.value_proj.bias": "attention.value_bias",
    "attention.self.pos_key_proj.weight": "attention.position_key_proj.weight",
    "attention.self.pos_key_proj.bias": "attention.position_key_proj.bias",
    "attention.self.pos_query_proj.weight": "attention.position_query_proj.weight",
    "attention.self.pos_query_proj.bias": "attention.position_query_proj.bias",
}
V2_PROJECTIONS = ("query_proj", "key_proj", "value_proj")  # in in_proj's order
BLOCK_NAMES = {  # both layouts
    "attention.output.dense.weight": "attention.out_proj.weight",
    "attention.output.dense.bias": "attention.out_proj.bias",
    "attention.output.LayerNorm.weight": "attention_norm.weight",
    "attention.output.LayerNorm.bias": "attention_norm.bias",
    "intermediate.dense.weight": "feed_forward.fc_in.weight",
    "intermediate.dense.bias": "feed_forward.fc_in.bias",
    "output.dense.weight": "feed_forward.fc_out.weight",
    "output.dense.bias": "feed_forward.fc_out.bias",
    "output.LayerNorm.weight": "feed_forward_norm.weight",
    "output.LayerNorm.bias": "feed_forward_norm.bias",
}
TERM_OF = {  # the position term a block tensor belongs to (there are none with share_att_key)
    "attention.self.pos_proj.weight": "c2p",
    "attention.self.pos_q_proj.weight": "p2c",
    "attention.self.pos_q_proj.bias": "p2c",
    "attention.self.pos_key_proj.weight": "c2p",
    "attention.self.pos_key_proj.bias": "c2p",
    "attention.self.pos_query_proj.weight": "p2c",
    "attention.self.pos_query_proj.bias": "p2c",
}
ENCODER_V2 = {  # v2's tensors in encoder. -> plm's, and the config field that makes them
    "LayerNorm.weight": ("relative_norm.weight", "relative_embedding_norm"),
    "LayerNorm.bias": ("relative_norm.bias", "relative_embedding_norm"),
    "conv.conv.weight": ("ngram.conv.weight", "ngram_kernel"),
    "conv.conv.bias": ("ngram.conv.bias", "ngram_kernel"),
    "conv.LayerNorm.weight": ("ngram.norm.weight", "ngram_kernel"),
    "conv.LayerNorm.bias": ("ngram.norm.bias", "ngram_kernel"),
}

MLM_HEAD_NAMES = {  # plm name in mlm_head -> (legacy HF name, HF name)
    "dense.weight": ("cls.predictions.transform.dense.weight", "lm_predictions.lm_head.dense.weight"),
    "dense.bias": ("cls.predictions.transform.dense.bias", "lm_predictions.lm_head.dense.bias"),
    "norm.weight": ("cls.predictions.transform.LayerNorm.weight", "lm_predictions.lm_head.LayerNorm.weight"),
    "norm.bias": ("cls.predictions.transform.LayerNorm.bias", "lm_predictions.lm_head.LayerNorm.bias"),
    "bias": ("cls.predictions.bias", "lm_predictions.lm_head.bias"),
}

ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}

# transformers' defaults, for fields a config.json leaves out.
DEFAULTS = {
    "vocab_size": 50265,
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 512,
    "type_vocab_size": 0,
    "layer_norm_eps": 1e-7,
    "relative_attention": False,
    "max_relative_positions": -1,
    "position_biased_input": True,
    "pos_att_type": None,
    "legacy": True,
    "tie_word_embeddings": True,
}
V2_DEFAULTS = {
    **DEFAULTS,
    "vocab_size": 128100,
    "hidden_size": 1536,
    "num_hidden_layers": 24,
    "num_attention_heads": 24,
    "intermediate_size": 6144,
    "share_att_key": False,
    "position_buckets": -1,
    "norm_rel_ebd": "none",
    "conv_kernel_size": 0,
    "conv_act": "tanh",
    "conv_groups": 1,
}
ARCHITECTURES = {  # model_type -> (bare model, masked LM)
    "deberta": ("DebertaModel", "DebertaForMaskedLM"),
    "deberta-v2": ("DebertaV2Model", "DebertaV2ForMaskedLM"),
}


@register
class DebertaConverter(Converter):
    """DeBERTa, both layouts: ``deberta`` (``DebertaModel``, ``DebertaForMaskedLM``) and ``deberta-v2``.

    The latter is ``DebertaV2Model`` and ``DebertaV2ForMaskedLM``, the 1.5B model's.
    """
    family = "deberta"
    model_types = ("deberta", "deberta-v2")

    def model_type(self, config: DebertaConfig) -> str:
        """``deberta-v2`` for a model whose keys have a bias (v2's layout gives every projection one), else ``deberta``.

        Args:
            config: the plm config.

        Returns:
            The model_type.
        """
        return "deberta-v2" if config.key_bias else "deberta"

    def config_from_hf(self, hf: dict[str, Any], source: str) -> DebertaConfig:
        """The plm config of ``config.json``; a PLMError naming ``source`` if plm cannot reproduce it.

        p2c takes the released code's distance, as in transformers, and there is no enhanced mask decoder.

        Args:
            hf: the contents of ``config.json``; missing fields take transformers' defaults.
            source: the file, for the error messages.

        Returns:
            The plm config.

        Raises:
            PLMError: a size that is not a positive integer, an embedding size other than the hidden size,
                talking heads, an unsupported activation, position term or architecture, position terms without
                relative attention, a v2 attention head size other than hidden size / heads, grouped or
                unsupported nGiE, or a field the plm config refuses.
        """
        v2 = hf.get("model_type") == "deberta-v2"
        hf = {**(V2_DEFAULTS if v2 else DEFAULTS), **hf}
        sizes = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
        check_positive(hf, sizes, source)
        if hf.get("embedding_size", hf["hidden_size"]) != hf["hidden_size"]:
            raise PLMError(f"{source}: embedding_size {hf['embedding_size']} != hidden_size is not supported by plm")
        if hf.get("talking_head", False):
            raise PLMError(f"{source}: talking_head is a DeBERTa variant that plm does not implement")
        activation = activation_from_hf(hf, "hidden_act", ACTIVATIONS, source)
        terms = hf["pos_att_type"] or []
        if isinstance(terms, str):  # the old "c2p|p2c" form
            terms = [term.strip() for term in terms.lower().split("|")]
        unknown = [term for term in terms if term not in ("c2p", "p2c")]
        if unknown:
            # transformers computes no such term, yet counts it in the scale 1/sqrt(d (1 + terms)).
            raise PLMError(f"{source}: pos_att_type {unknown[0]!r} is not supported; plm reads c2p and p2c")
        if terms and not hf["relative_attention"]:
            raise PLMError(
                f"{source}: pos_att_type {terms} without relative_attention scales plain attention by "
                f"1/sqrt({1 + len(terms)}d); plm does not implement that"
            )
        bare, masked_lm = ARCHITECTURES["deberta-v2" if v2 else "deberta"]
        architectures = hf.get("architectures") or [bare]
        if architectures[0] not in (bare, masked_lm):
            raise PLMError(f"{source}: {architectures[0]} is not supported; plm reads {bare} and {masked_lm}")
        relative = hf["max_relative_positions"]
        values = dict(
            vocab_size=hf["vocab_size"],
            context_length=hf["max_position_embeddings"],
            dim=hf["hidden_size"],
            layers=hf["num_hidden_layers"],
            heads=hf["num_attention_heads"],
            ffn_dim=hf["intermediate_size"],
            segments=hf["type_vocab_size"],
            absolute_positions=hf["position_biased_input"],
            activation=activation,
            norm_eps=hf["layer_norm_eps"],
            dropout=hf["hidden_dropout_prob"],
            attention_dropout=hf["attention_probs_dropout_prob"],
            pooler=False,
            pretraining_heads=("mlm",) if architectures[0] == masked_lm else (),
            max_relative_positions=relative if relative >= 1 else hf["max_position_embeddings"],
            position_terms=tuple(terms),
            p2c_distance="released",
            enhanced_mask_decoder=False,
        )
        if v2:
            values.update(v2_fields(hf, source))
        return config_from_dict(DebertaConfig, values, source)

    def config_to_hf(self, config: DebertaConfig) -> dict[str, Any]:
        """``config.json`` with ``model_type`` and ``architectures``; a PLMError if HF has no equivalent.

        Args:
            config: the plm config.

        Returns:
            The contents of ``config.json`` (the MLM head in the non-legacy layout).

        Raises:
            PLMError: an enhanced mask decoder, the paper's p2c distance, a pooler, a sentence-pair head,
                pre-LN blocks, or a feature of the 1.5B model without ``key_bias`` (transformers has it in v2's
                layout alone, whose keys have a bias).
        """
        v2 = self.model_type(config) == "deberta-v2"
        no_equivalent = {
            "an enhanced mask decoder": config.uses_mask_decoder,
            "p2c_distance 'paper' (transformers computes p2c with delta(i, j))": config.p2c_distance == "paper",
            "a pooler": config.pooler,
            "a sentence-pair head": config.pair_head is not None,
            "pre-LN blocks": config.norm_first,
        }
        if not v2:
            v2_only = ("share_position_projections", "position_buckets", "relative_embedding_norm", "ngram_kernel")
            no_equivalent.update({f"{field} but no key_bias (transformers' deberta-v2 gives the keys a bias)":
                                  bool(getattr(config, field)) for field in v2_only})
        check_expressible("a DeBERTa", no_equivalent)
        activation = next(hf for hf, plm in ACTIVATIONS.items() if plm == config.activation)
        mlm = "mlm" in config.pretraining_heads
        bare, masked_lm = ARCHITECTURES[self.model_type(config)]
        return {
            "model_type": self.model_type(config),
            "architectures": [masked_lm if mlm else bare],
            "vocab_size": config.vocab_size,
            "hidden_size": config.dim,
            "num_hidden_layers": config.layers,
            "num_attention_heads": config.heads,
            "intermediate_size": config.ffn_dim,
            "hidden_act": activation,
            "hidden_dropout_prob": config.dropout,
            "attention_probs_dropout_prob": config.attention_dropout,
            "max_position_embeddings": config.context_length,
            "type_vocab_size": config.segments,
            "layer_norm_eps": config.norm_eps,
            "relative_attention": bool(config.position_terms),
            "max_relative_positions": config.max_relative_positions,
            "position_biased_input": config.absolute_positions,
            "pos_att_type": list(config.position_terms),
            "legacy": False,
            "tie_word_embeddings": True,
            **(v2_fields_to_hf(config) if v2 else {}),
        }

    def weights_from_hf(self, weights: HFWeights, config: DebertaConfig) -> dict[str, torch.Tensor]:
        """The plm state dict from HF tensors; takes (or discards) every tensor it understands.

        Args:
            weights: the checkpoint's tensors.
            config: the plm config.

        Returns:
            The plm state dict.

        Raises:
            PLMError: a tensor missing, or a saved MLM decoder that differs from the tensors plm ties it to.
        """
        weights.strip_prefix("deberta.")  # DebertaForMaskedLM has it, DebertaModel not
        if not config.absolute_positions:
            # Checkpoints from microsoft/DeBERTa keep the table their EMD used; transformers ignores it, so does plm.
            weights.discard(r"embeddings\.position_embeddings\.weight")
        if not config.position_terms:
            # relative_attention with no term: the table (and v2's LayerNorm of it) is unused
            weights.discard(r"encoder\.(rel_embeddings|LayerNorm)\.(weight|bias)")
        weights.discard(r"embeddings\.position_ids")  # a buffer of older checkpoints
        if "mlm" not in config.pretraining_heads:  # as from_pretrained, a bare model ignores the head
            weights.discard(r"(cls|lm_predictions)\..*")
        state = {plm: weights.take(hf) for hf, plm in name_pairs(config)}
        for index in range(config.layers):
            prefix = f"encoder.layer.{index}.attention.self"
            if config.key_bias:
                fused = torch.cat([weights.take(f"{prefix}.{name}.weight") for name in V2_PROJECTIONS])
            else:
                fused = swap_row_groups(weights.take(f"{prefix}.in_proj.weight"), config.heads, 3)
            state[f"blocks.{index}.attention.in_proj.weight"] = fused
        if "mlm" in config.pretraining_heads:
            state.update(take_mlm_head(weights, state["embeddings.word.weight"]))
        return state

    def weights_to_hf(self, state: dict[str, torch.Tensor], config: DebertaConfig) -> dict[str, torch.Tensor]:
        """HF tensors, named as ``save_pretrained`` names them, from a plm state dict.

        Args:
            state: the plm state dict.
            config: the plm config.

        Returns:
            The tensors by Hugging Face name.
        """
        prefix = "deberta." if "mlm" in config.pretraining_heads else ""
        tensors = {prefix + hf: state[plm] for hf, plm in name_pairs(config)}
        for index in range(config.layers):
            fused = state[f"blocks.{index}.attention.in_proj.weight"]
            name = f"{prefix}encoder.layer.{index}.attention.self"
            if config.key_bias:
                tensors.update({f"{name}.{part}.weight": weight
                                for part, weight in zip(V2_PROJECTIONS, fused.chunk(3), strict=True)})
            else:
                tensors[f"{name}.in_proj.weight"] = swap_row_groups(fused, 3, config.heads)
        if prefix:
            tensors.update({hf: state[f"mlm_head.{plm}"] for plm, (_, hf) in MLM_HEAD_NAMES.items()})
        return tensors


def v2_fields(hf: dict[str, Any], source: str) -> dict[str, Any]:
    """The plm fields of v2's options: the projections' biases, shared projections, buckets, P's LayerNorm, nGiE.

    Args:
        hf: the contents of ``config.json``, v2's defaults filled in.
        source: the file, for the error messages.

    Returns:
        plm field -> value.

    Raises:
        PLMError: an ``attention_head_size`` other than hidden size / heads, grouped nGiE, or an nGiE activation
            plm does not implement.
    """
    head_size = hf["hidden_size"] // hf["num_attention_heads"]
    if hf.get("attention_head_size", head_size) != head_size:
        raise PLMError(f"{source}: attention_head_size {hf['attention_head_size']} != hidden_size / "
                       f"num_attention_heads is not supported by plm")
    kernel = hf["conv_kernel_size"]
    if kernel > 0 and hf["conv_groups"] != 1:
        raise PLMError(f"{source}: conv_groups {hf['conv_groups']} is not supported; plm's nGiE convolution has one")
    norms = [name.strip() for name in str(hf["norm_rel_ebd"]).lower().split("|")]
    return dict(
        key_bias=True,
        share_position_projections=bool(hf["share_att_key"]),
        position_buckets=max(hf["position_buckets"], 0),
        relative_embedding_norm="layer_norm" in norms,
        ngram_kernel=max(kernel, 0),
        ngram_activation=activation_from_hf(hf, "conv_act", ACTIVATIONS, source) if kernel > 0 else "gelu",
    )


def v2_fields_to_hf(config: DebertaConfig) -> dict[str, Any]:
    """v2's ``config.json`` fields of the options in [`v2_fields`][plm.hf.deberta.v2_fields].

    Args:
        config: the plm config.

    Returns:
        HF field -> value.
    """
    fields: dict[str, Any] = {
        "share_att_key": config.share_position_projections,
        "position_buckets": config.position_buckets or -1,
        "norm_rel_ebd": "layer_norm" if config.relative_embedding_norm and config.position_terms else "none",
        "conv_kernel_size": config.ngram_kernel,
    }
    if config.ngram_kernel:
        fields["conv_act"] = next(hf for hf, plm in ACTIVATIONS.items() if plm == config.ngram_activation)
    return fields


def name_pairs(config: DebertaConfig) -> list[tuple[str, str]]:
    """(HF name without ``deberta.``, plm name) of every tensor but the content projections' and the MLM head.

    Args:
        config: the plm config.

    Returns:
        The name pairs.
    """
    pairs = [
        ("embeddings.word_embeddings.weight", "embeddings.word.weight"),
        ("embeddings.LayerNorm.weight", "embeddings.norm.weight"),
        ("embeddings.LayerNorm.bias", "embeddings.norm.bias"),
    ]
    if config.absolute_positions:
        pairs.append(("embeddings.position_embeddings.weight", "embeddings.position.weight"))
    if config.segments:
        pairs.append(("embeddings.token_type_embeddings.weight", "embeddings.segment.weight"))
    if config.position_terms:
        pairs.append(("encoder.rel_embeddings.weight", "relative_embeddings.weight"))
    for hf, (plm, field) in ENCODER_V2.items():
        if getattr(config, field) and (field != "relative_embedding_norm" or config.position_terms):
            pairs.append((f"encoder.{hf}", plm))
    attention = V2_ATTENTION if config.key_bias else V1_ATTENTION
    for index in range(config.layers):
        for hf, plm in {**attention, **BLOCK_NAMES}.items():
            if hf not in TERM_OF or (TERM_OF[hf] in config.position_terms and not config.share_position_projections):
                pairs.append((f"encoder.layer.{index}.{hf}", f"blocks.{index}.{plm}"))
    return pairs


def swap_row_groups(weight: torch.Tensor, outer: int, inner: int) -> torch.Tensor:
    """Reorder the rows of an ``in_proj`` weight from (outer, inner, head_dim) to (inner, outer, head_dim).

    HF's rows are (head, [q k v], head_dim) and plm's ([q k v], head, head_dim): reading swaps
    ``(heads, 3)``, writing ``(3, heads)``.

    Args:
        weight: the (3 * dim, dim) weight.
        outer: how many groups the rows form now (``heads`` in HF's order, 3 in plm's).
        inner: how many groups each of those holds (3 in HF's order, ``heads`` in plm's).

    Returns:
        The (3 * dim, dim) weight, its rows in the other order.
    """
    dim = weight.shape[1]
    return weight.view(outer, inner, -1, dim).transpose(0, 1).reshape(-1, dim)


def take_mlm_head(weights: HFWeights, word_embeddings: torch.Tensor) -> dict[str, torch.Tensor]:
    """The MLM head in either layout; a saved decoder must be the tied word embeddings and bias.

    Args:
        weights: the checkpoint's tensors; the head's are taken.
        word_embeddings: the word embeddings the decoder is tied to.

    Returns:
        The head's tensors by plm name.

    Raises:
        PLMError: a tensor missing, or a saved decoder that differs from the tensors plm ties it to.
    """
    legacy = "cls.predictions.bias" in weights
    head = {f"mlm_head.{plm}": weights.take(names[0 if legacy else 1]) for plm, names in MLM_HEAD_NAMES.items()}
    if legacy:
        weights.take_tied("cls.predictions.decoder.weight", word_embeddings)
        weights.take_tied("cls.predictions.decoder.bias", head["mlm_head.bias"])
    return head
