"""fairseq's WMT19 translation models as Hugging Face ports them (``fsmt``, ``FSMTForConditionalGeneration``).

The blocks and shared fields are mapped as Marian's ([`plm.hf.marian`][plm.hf.marian]). What fairseq does its own
way: positions are numbered from the padding index + 1 (``first_position``) in tensor2tensor's table
of sine and cosine halves, which transformers saves (with the padding index's row zero), and counted over
the ids that are not the padding index, wherever it stands (a left-padded source starts at the first
position too; the decoder's self-attention hides the padding index; see
[`Transformer.real_tokens`][plm.models.transformer.Transformer.real_tokens]); the source
and the target have a vocabulary each (``src_vocab_size``, ``tgt_vocab_size``), and the decoder an
``output_projection`` of its own; ``tie_word_embeddings`` ties all three matrices into one (a joint
vocabulary). Decoding starts from ``</s>`` (``decoder_start_token_id``); there is no logits bias.
"""

from __future__ import annotations

from typing import Any

import torch

from plm.errors import PLMError
from plm.hf.io import HFWeights, check_expressible, check_positive, register
from plm.hf.marian import TransformerConverter, position_table
from plm.models.transformer import TransformerConfig


@register
class FSMTConverter(TransformerConverter):
    """fairseq's Transformer (``fsmt``): ``FSMTForConditionalGeneration`` and the bare ``FSMTModel``."""

    model_types = ("fsmt",)
    name = "an FSMT"
    defaults = {
        "src_vocab_size": 42024,
        "tgt_vocab_size": 42024,
        "activation_function": "relu",
        "d_model": 1024,
        "max_position_embeddings": 1024,
        "encoder_ffn_dim": 4096,
        "encoder_layers": 12,
        "encoder_attention_heads": 16,
        "decoder_ffn_dim": 4096,
        "decoder_layers": 12,
        "decoder_attention_heads": 16,
        "attention_dropout": 0.0,
        "dropout": 0.1,
        "decoder_start_token_id": 2,
        "scale_embedding": True,
        "tie_word_embeddings": False,
        "pad_token_id": 1,
    }

    def family_config_from_hf(self, hf: dict[str, Any], source: str) -> dict[str, Any]:
        """The vocabularies, output projection and positions of fairseq's config.

        Args:
            hf: the contents of ``config.json``, defaults filled in.
            source: the file, for the error messages.

        Returns:
            plm field -> value.

        Raises:
            PLMError: a vocabulary size that is not a positive integer, tied embeddings of two vocabulary sizes,
                or a padding index that is not a token id.
        """
        check_positive(hf, ("src_vocab_size", "tgt_vocab_size"), source)
        tied = hf["tie_word_embeddings"]
        if tied and hf["src_vocab_size"] != hf["tgt_vocab_size"]:
            raise PLMError(f"{source}: tie_word_embeddings ties vocabularies of {hf['src_vocab_size']} and "
                           f"{hf['tgt_vocab_size']} tokens")
        if not isinstance(hf["pad_token_id"], int) or hf["pad_token_id"] < 0:
            raise PLMError(f"{source}: pad_token_id must be a token id, got {hf['pad_token_id']!r}")
        return dict(
            vocab_size=hf["tgt_vocab_size"],
            source_vocab_size=None if tied else hf["src_vocab_size"],
            tied_output=tied,
            sinusoids="tensor2tensor",
            first_position=hf["pad_token_id"] + 1,
        )

    def family_config_to_hf(self, config: TransformerConfig) -> dict[str, Any]:
        """The vocabularies and special ids of fairseq's config: the padding index precedes the first position.

        Args:
            config: the plm config.

        Returns:
            HF field -> value.

        Raises:
            PLMError: positions from 0, a logits bias, suppressed ids, or an output projection tied to a
                separate target vocabulary (or untied from a joint one).
        """
        check_expressible(self.name, {
            "positions from 0 (fairseq's follow its padding index)": config.first_position < 1,
            "a logits bias": config.logits_bias,
            f"suppressed_ids {config.suppressed_ids}": bool(config.suppressed_ids),
            "a joint vocabulary and an output projection of its own": config.joint_vocabulary
            and not config.tied_output,
            "separate vocabularies and the target embedding as output projection": not config.joint_vocabulary
            and config.tied_output,
        })
        start = config.decoder_start_id
        return {
            "model_type": "fsmt",
            "architectures": ["FSMTForConditionalGeneration"],
            "src_vocab_size": config.source_vocab_size or config.vocab_size,
            "tgt_vocab_size": config.vocab_size,
            "tie_word_embeddings": config.tied_output,
            "pad_token_id": config.first_position - 1,
            "eos_token_id": start,  # fairseq's decoder starts from the end of the previous sentence
            "forced_eos_token_id": start,
        }

    def embeddings_from_hf(self, weights: HFWeights, config: TransformerConfig) -> dict[str, torch.Tensor]:
        """The decoder's ``embed_tokens`` (all three matrices, where tied), or each side's and ``output_projection``.

        Args:
            weights: the checkpoint's tensors.
            config: the plm config.

        Returns:
            plm name -> tensor.

        Raises:
            PLMError: a tensor missing, or a tied copy that differs from the matrix plm ties it to.
        """
        target = weights.take("decoder.embed_tokens.weight")
        if config.tied_output:
            for name in ("encoder.embed_tokens.weight", "decoder.output_projection.weight"):
                weights.take_tied(name, target, "decoder.embed_tokens.weight; plm ties them")
            return {"target_embedding.weight": target}
        return {
            "source_embedding.weight": weights.take("encoder.embed_tokens.weight"),
            "target_embedding.weight": target,
            "output_projection.weight": weights.take("decoder.output_projection.weight"),
        }

    def embeddings_to_hf(self, state: dict[str, torch.Tensor], config: TransformerConfig) -> dict[str, torch.Tensor]:
        """The embeddings as ``FSMTForConditionalGeneration`` saves them, with its position tables.

        Args:
            state: the plm state dict.
            config: the plm config.

        Returns:
            HF name -> tensor.
        """
        table = position_table(config)
        tensors = {"model.encoder.embed_positions.weight": table, "model.decoder.embed_positions.weight": table.clone(),
                   "model.decoder.embed_tokens.weight": state["target_embedding.weight"]}
        if not config.tied_output:
            tensors["model.encoder.embed_tokens.weight"] = state["source_embedding.weight"]
            tensors["model.decoder.output_projection.weight"] = state["output_projection.weight"]
        return tensors
