"""Marian checkpoints (``marian``, ``MarianMTModel``), and the mapping of encoder-decoders that FSMT's reuses.

Hugging Face's ports of Marian and of fairseq's WMT19 models ([`plm.hf.fsmt`][plm.hf.fsmt]), both modelled on
BART, name the layers of a post-LN Transformer alike: ``{encoder,decoder}.layers.{i}`` hold
``self_attn`` (Q, K and V in three Linears, which plm fuses, stacked in that order, in ``in_proj``),
``encoder_attn`` in the decoder, ``fc1`` and ``fc2``, and a LayerNorm after each sub-layer.
[`TransformerConverter`][plm.hf.marian.TransformerConverter] maps those and the fields the two configs share; each
family's converter maps its config and embeddings. Both read into plm's ``transformer`` family, and a plm Transformer is
written as the one whose position table it has: Marian's sine and cosine halves ("concatenated") or fairseq's
("tensor2tensor"); the paper's interleaved table is neither.

Marian: swish activations ("silu"), a position table transformers builds (not saved),
embeddings scaled by sqrt(d_model) where ``scale_embedding``, one ``shared`` matrix for both sides
and the output (``share_encoder_decoder_embeddings``, ``tie_word_embeddings``) or one per side,
and ``final_logits_bias``, a fixed buffer added to the logits. Decoding starts from the padding
token (``decoder_start_token_id``), which the conversion from Marian's own format added with a
zero embedding: the released generation configs ban it (``bad_words_ids``), and plm suppresses it.
A Marian written by plm has Marian's usual end of sentence, id 0.
"""

from __future__ import annotations

from typing import Any, ClassVar, cast

import torch

from plm.config import config_from_dict
from plm.core.embeddings import SinusoidalPositions
from plm.errors import PLMError
from plm.hf.io import (
    BY_MODEL_TYPE,
    Converter,
    HFWeights,
    activation_from_hf,
    check_expressible,
    check_positive,
    register,
)
from plm.models.transformer import TransformerConfig

# HF activation -> plm activation; saving writes the first HF name of a plm activation.
ACTIVATIONS = {"swish": "silu", "silu": "silu", "relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh",
               "gelu_pytorch_tanh": "gelu_tanh"}
LAYOUTS = {"concatenated": "marian", "tensor2tensor": "fsmt"}  # plm's sinusoid layout -> the model_type it is
POSITIVE = ("d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads", "decoder_attention_heads",
            "encoder_ffn_dim", "decoder_ffn_dim", "max_position_embeddings")
# Options that change the computation in ways plm does not implement, with the value plm matches: dropout
# inside the feed-forward layer, LayerDrop, and the BART-era switches older Marian configs still carry.
VARIANTS = {
    "activation_dropout": 0.0,
    "encoder_layerdrop": 0.0,
    "decoder_layerdrop": 0.0,
    "normalize_before": False,
    "normalize_embedding": False,
    "add_final_layer_norm": False,
    "add_bias_logits": False,
    "static_position_embeddings": True,
}
# A block's sub-layers: HF name in layers.{i} -> plm name in {encoder,decoder}_blocks.{i}. An attention's
# q_proj, k_proj and v_proj are plm's in_proj, its out_proj plm's, and {hf}_layer_norm plm's {plm}_norm.
ATTENTIONS = {"self_attn": "attention", "encoder_attn": "cross_attention"}  # the encoder's blocks lack the second
FEED_FORWARD = {"fc1": "feed_forward.fc_in", "fc2": "feed_forward.fc_out", "final_layer_norm": "feed_forward_norm"}


class TransformerConverter(Converter):
    """What Marian and FSMT checkpoints share: the blocks, the sizes, and the choice of which one to write.

    A subclass names its ``model_types`` and ``defaults`` and maps its own config fields and embeddings.
    Names are read without the ``model.`` prefix of the ``...ForConditionalGeneration`` classes (the bare
    ``MarianModel`` and ``FSMTModel`` lack it) and written with it.

    Attributes:
        defaults: transformers' defaults, for the fields a ``config.json`` leaves out.
        name: the model, with its article, as error messages name it.
    """

    family = "transformer"
    defaults: ClassVar[dict[str, Any]]
    name: ClassVar[str]

    def model_type(self, config: TransformerConfig) -> str:
        """"marian" for Marian's position table, "fsmt" for fairseq's.

        Args:
            config: the plm config.

        Returns:
            The model_type.

        Raises:
            PLMError: the paper's interleaved table, which neither has.
        """
        check_expressible("a Transformer", {
            "the paper's interleaved sinusoids (Marian's and fairseq's are in halves)": config.sinusoids not in LAYOUTS
        })
        return LAYOUTS[config.sinusoids]

    def writer(self, config: TransformerConfig) -> TransformerConverter:
        """The converter that writes ``config``: Marian's or FSMT's.

        Args:
            config: the plm config.

        Returns:
            The converter.

        Raises:
            PLMError: a config that neither can express.
        """
        return cast(TransformerConverter, BY_MODEL_TYPE[self.model_type(config)])

    # Configs --------------------------------------------------------------------------

    def config_from_hf(self, hf: dict[str, Any], source: str) -> TransformerConfig:
        """The plm config of ``config.json``; a PLMError naming ``source`` if plm cannot reproduce it.

        Args:
            hf: the contents of ``config.json``; missing fields take transformers' defaults.
            source: the file, for the error messages.

        Returns:
            The plm config.

        Raises:
            PLMError: a size that is not a positive integer, encoder and decoder of different shapes, a variant
                plm does not implement, an unsupported activation, or a field the plm config refuses.
        """
        hf = {**self.defaults, **hf}
        check_positive(hf, POSITIVE, source)
        for key, value in VARIANTS.items():
            if hf.get(key, value) != value:
                raise PLMError(f"{source}: {key}={hf[key]!r} is {self.name} variant that plm does not implement")
        for encoder, decoder in (("encoder_attention_heads", "decoder_attention_heads"),
                                 ("encoder_ffn_dim", "decoder_ffn_dim")):
            if hf[encoder] != hf[decoder]:
                raise PLMError(f"{source}: {encoder}={hf[encoder]} but {decoder}={hf[decoder]}; plm's encoder and "
                               "decoder blocks have one shape")
        if not isinstance(hf["decoder_start_token_id"], int):
            raise PLMError(f"{source}: decoder_start_token_id must be a token id, got {hf['decoder_start_token_id']!r}")
        values = dict(
            context_length=hf["max_position_embeddings"],
            dim=hf["d_model"],
            encoder_layers=hf["encoder_layers"],
            decoder_layers=hf["decoder_layers"],
            heads=hf["encoder_attention_heads"],
            ffn_dim=hf["encoder_ffn_dim"],
            activation=activation_from_hf(hf, "activation_function", ACTIVATIONS, source),
            dropout=hf["dropout"],
            attention_dropout=hf["attention_dropout"],
            scale_embeddings=hf["scale_embedding"],
            decoder_start_id=hf["decoder_start_token_id"],
            **self.family_config_from_hf(hf, source),
        )
        return config_from_dict(TransformerConfig, values, source)

    def config_to_hf(self, config: TransformerConfig) -> dict[str, Any]:
        """``config.json`` of Marian or FSMT (by the position table), with ``model_type`` and ``architectures``.

        Args:
            config: the plm config.

        Returns:
            The contents of ``config.json``.

        Raises:
            PLMError: a config that neither Marian nor FSMT can express.
        """
        writer = self.writer(config)
        check_expressible(writer.name, {
            "pre-LN blocks (norm_first)": config.norm_first,
            f"norm_eps {config.norm_eps} (transformers' LayerNorms have 1e-5)": config.norm_eps != 1e-5,
            "no decoder_start_id": config.decoder_start_id is None,
        })
        activation = next((hf for hf, plm in ACTIVATIONS.items() if plm == config.activation), None)
        check_expressible(writer.name, {f"activation {config.activation!r}": activation is None})
        return {
            "d_model": config.dim,
            "encoder_layers": config.encoder_layers,
            "decoder_layers": config.decoder_layers,
            "encoder_attention_heads": config.heads,
            "decoder_attention_heads": config.heads,
            "encoder_ffn_dim": config.ffn_dim,
            "decoder_ffn_dim": config.ffn_dim,
            "activation_function": activation,
            "max_position_embeddings": config.context_length,
            "dropout": config.dropout,
            "attention_dropout": config.attention_dropout,
            "activation_dropout": 0.0,
            "scale_embedding": config.scale_embeddings,
            "decoder_start_token_id": config.decoder_start_id,
            **writer.family_config_to_hf(config),
        }

    def family_config_from_hf(self, hf: dict[str, Any], source: str) -> dict[str, Any]:
        """The plm fields of the family's own: vocabularies, position table, output layer, suppressed ids.

        Args:
            hf: the contents of ``config.json``, defaults filled in.
            source: the file, for the error messages.

        Returns:
            plm field -> value.

        Raises:
            NotImplementedError: in this base class.
        """
        raise NotImplementedError

    def family_config_to_hf(self, config: TransformerConfig) -> dict[str, Any]:
        """The ``config.json`` fields of the family's own, with ``model_type`` and ``architectures``.

        Args:
            config: the plm config.

        Returns:
            HF field -> value.

        Raises:
            NotImplementedError: in this base class.
        """
        raise NotImplementedError

    # Weights --------------------------------------------------------------------------

    def weights_from_hf(self, weights: HFWeights, config: TransformerConfig) -> dict[str, torch.Tensor]:
        """The plm state dict from HF tensors; takes (or discards) every tensor it understands.

        Args:
            weights: the checkpoint's tensors.
            config: the plm config.

        Returns:
            The plm state dict.

        Raises:
            PLMError: a tensor missing, a saved position table that is not plm's, or a tied tensor that differs
                from the one plm ties it to.
        """
        weights.strip_prefix("model.")
        table = position_table(config)
        for stack in ("encoder", "decoder"):  # fixed sinusoids that plm computes; some checkpoints saved them
            name = f"{stack}.embed_positions.weight"
            if name in weights:
                saved = weights.take(name)
                rows = min(len(saved), len(table))
                if saved.shape[1:] != table.shape[1:] or not torch.allclose(saved[:rows].float(), table[:rows],
                                                                            atol=1e-3):
                    raise PLMError(f"{weights.source}: {name} is not the sinusoid table of this config")
        state = {plm: torch.cat([weights.take(name) for name in hf]) if len(hf) > 1 else weights.take(hf[0])
                 for hf, plm in block_pairs(config)}
        return {**state, **self.embeddings_from_hf(weights, config)}

    def weights_to_hf(self, state: dict[str, torch.Tensor], config: TransformerConfig) -> dict[str, torch.Tensor]:
        """HF tensors, named as ``save_pretrained`` names them, from a plm state dict.

        Args:
            state: the plm state dict.
            config: the plm config.

        Returns:
            The tensors by Hugging Face name, Q, K and V split out of the fused projections.

        Raises:
            PLMError: a config that neither Marian nor FSMT can express.
        """
        tensors: dict[str, torch.Tensor] = {}
        for hf, plm in block_pairs(config):
            parts = [part.clone() for part in state[plm].chunk(len(hf))] if len(hf) > 1 else [state[plm]]
            tensors.update(zip((f"model.{name}" for name in hf), parts))
        return {**tensors, **self.writer(config).embeddings_to_hf(state, config)}

    def embeddings_from_hf(self, weights: HFWeights, config: TransformerConfig) -> dict[str, torch.Tensor]:
        """The plm embeddings, output projection and logits bias of the family's tensors (names without ``model.``).

        Args:
            weights: the checkpoint's tensors.
            config: the plm config.

        Returns:
            plm name -> tensor.

        Raises:
            NotImplementedError: in this base class.
        """
        raise NotImplementedError

    def embeddings_to_hf(self, state: dict[str, torch.Tensor], config: TransformerConfig) -> dict[str, torch.Tensor]:
        """The family's tensors of plm's embeddings, output projection and logits bias, by full HF name.

        Args:
            state: the plm state dict.
            config: the plm config.

        Returns:
            HF name -> tensor.

        Raises:
            NotImplementedError: in this base class.
        """
        raise NotImplementedError


def block_pairs(config: TransformerConfig) -> list[tuple[list[str], str]]:
    """([HF names without ``model.``], plm name) of every block tensor; Q, K and V are three HF names for one.

    Args:
        config: the plm config.

    Returns:
        The name pairs.
    """
    pairs = []
    for stack, layers in (("encoder", config.encoder_layers), ("decoder", config.decoder_layers)):
        attentions = list(ATTENTIONS.items())[: 2 if stack == "decoder" else 1]
        for index in range(layers):
            hf, plm = f"{stack}.layers.{index}.", f"{stack}_blocks.{index}."
            for kind in ("weight", "bias"):
                for hf_attention, plm_attention in attentions:
                    qkv = [f"{hf}{hf_attention}.{part}_proj.{kind}" for part in "qkv"]
                    pairs.append((qkv, f"{plm}{plm_attention}.in_proj.{kind}"))
                    pairs.append(([f"{hf}{hf_attention}.out_proj.{kind}"], f"{plm}{plm_attention}.out_proj.{kind}"))
                    pairs.append(([f"{hf}{hf_attention}_layer_norm.{kind}"], f"{plm}{plm_attention}_norm.{kind}"))
                pairs += [([f"{hf}{name}.{kind}"], f"{plm}{ours}.{kind}") for name, ours in FEED_FORWARD.items()]
    return pairs


def position_table(config: TransformerConfig) -> torch.Tensor:
    """The sinusoids transformers keeps as ``embed_positions``: plm's table, with fairseq's padding row zero.

    Args:
        config: the plm config.

    Returns:
        The (first_position + context_length, dim) table.
    """
    table = SinusoidalPositions(config.first_position + config.context_length, config.dim, config.sinusoids).table
    table = table.clone()
    if config.first_position:  # fairseq numbers positions from its padding index + 1, whose own vector is zero
        table[config.first_position - 1] = 0
    return table


@register
class MarianConverter(TransformerConverter):
    """Marian (``marian``): ``MarianMTModel`` and the bare ``MarianModel``."""

    model_types = ("marian",)
    name = "a Marian"
    defaults = {
        "vocab_size": 58101,
        "decoder_vocab_size": None,
        "max_position_embeddings": 1024,
        "encoder_layers": 12,
        "encoder_ffn_dim": 4096,
        "encoder_attention_heads": 16,
        "decoder_layers": 12,
        "decoder_ffn_dim": 4096,
        "decoder_attention_heads": 16,
        "activation_function": "gelu",
        "d_model": 1024,
        "dropout": 0.1,
        "attention_dropout": 0.0,
        "decoder_start_token_id": 58100,
        "scale_embedding": False,
        "pad_token_id": 58100,
        "share_encoder_decoder_embeddings": True,
        "tie_word_embeddings": True,
    }

    def family_config_from_hf(self, hf: dict[str, Any], source: str) -> dict[str, Any]:
        """Marian's vocabularies, position table, logits bias and suppressed padding token.

        Args:
            hf: the contents of ``config.json``, defaults filled in.
            source: the file, for the error messages.

        Returns:
            plm field -> value.

        Raises:
            PLMError: a vocabulary size that is not a positive integer, or no padding token.
        """
        check_positive(hf, ("vocab_size",), source)
        shared = hf["share_encoder_decoder_embeddings"]
        if not isinstance(hf["pad_token_id"], int):
            raise PLMError(f"{source}: pad_token_id must be a token id, got {hf['pad_token_id']!r}")
        return dict(
            vocab_size=hf["vocab_size"] if shared else hf["decoder_vocab_size"] or hf["vocab_size"],
            source_vocab_size=None if shared else hf["vocab_size"],
            tied_output=hf["tie_word_embeddings"],
            sinusoids="concatenated",
            logits_bias=True,
            suppressed_ids=(hf["pad_token_id"],),
        )

    def family_config_to_hf(self, config: TransformerConfig) -> dict[str, Any]:
        """Marian's vocabularies and special ids: its padding token is the one decoding starts from.

        Args:
            config: the plm config.

        Returns:
            HF field -> value.

        Raises:
            PLMError: positions not numbered from 0, or suppressed ids other than the padding token.
        """
        start = config.decoder_start_id
        check_expressible(self.name, {
            f"positions from {config.first_position}": config.first_position != 0,
            f"suppressed_ids {config.suppressed_ids} (Marian suppresses its padding token, the start token {start})":
                config.suppressed_ids not in ((), (start,)),
        })
        return {
            "model_type": "marian",
            "architectures": ["MarianMTModel"],
            "vocab_size": config.source_vocab_size or config.vocab_size,
            "decoder_vocab_size": config.vocab_size,
            "share_encoder_decoder_embeddings": config.joint_vocabulary,
            "tie_word_embeddings": config.tied_output,
            "pad_token_id": start,
        }

    def embeddings_from_hf(self, weights: HFWeights, config: TransformerConfig) -> dict[str, torch.Tensor]:
        """``shared`` (or one matrix per side), ``lm_head`` where untied, and ``final_logits_bias``.

        Args:
            weights: the checkpoint's tensors.
            config: the plm config.

        Returns:
            plm name -> tensor.

        Raises:
            PLMError: a tensor missing, or a tied copy that differs from the matrix plm ties it to.
        """
        state = {}
        if config.joint_vocabulary:
            state["target_embedding.weight"] = shared = weights.take("shared.weight")
            for side in ("encoder", "decoder"):
                weights.take_tied(f"{side}.embed_tokens.weight", shared, "shared.weight; plm ties the two")
        else:
            state["source_embedding.weight"] = weights.take("encoder.embed_tokens.weight")
            state["target_embedding.weight"] = weights.take("decoder.embed_tokens.weight")
        if config.tied_output:
            weights.take_tied("lm_head.weight", state["target_embedding.weight"], "the target embedding; plm ties them")
        else:
            state["output_projection.weight"] = weights.take("lm_head.weight")
        bias = weights.take("final_logits_bias") if "final_logits_bias" in weights else None
        state["logits_bias"] = torch.zeros(config.vocab_size) if bias is None else bias.reshape(-1)  # (1, V) -> (V,)
        return state

    def embeddings_to_hf(self, state: dict[str, torch.Tensor], config: TransformerConfig) -> dict[str, torch.Tensor]:
        """The embeddings as ``MarianMTModel`` saves them, and ``final_logits_bias`` (zero without a bias).

        Args:
            state: the plm state dict.
            config: the plm config.

        Returns:
            HF name -> tensor.
        """
        target = state["target_embedding.weight"]
        tensors: dict[str, torch.Tensor]
        if config.joint_vocabulary:
            tensors = {"model.shared.weight": target}
            if not config.tied_output:  # transformers then ties no embedding to another: each is saved
                tensors |= {f"model.{side}.embed_tokens.weight": target.clone() for side in ("encoder", "decoder")}
        else:
            tensors = {"model.encoder.embed_tokens.weight": state["source_embedding.weight"],
                       "model.decoder.embed_tokens.weight": target}
        if not config.tied_output:
            tensors["lm_head.weight"] = state["output_projection.weight"]
        bias = state.get("logits_bias", torch.zeros(config.vocab_size))
        return {**tensors, "final_logits_bias": bias[None]}  # (V,) -> (1, V)
