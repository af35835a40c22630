"""GPT-1 (``openai-gpt``) and GPT-2 (``gpt2``) checkpoints of Hugging Face transformers.

Both keep every linear layer as a ``Conv1D`` whose weight is (in, out), the transpose
of ``nn.Linear``'s, and fuse Q, K, V in ``c_attn`` in the order of plm's ``in_proj``.
Their block names agree: ``ln_1`` and ``ln_2`` are the norms of the attention and MLP
sub-layers, applied before them in GPT-2 (pre-LN) and after them in GPT-1 (post-LN).
"""

from __future__ import annotations

from typing import Any

import torch

from plm.config import config_from_dict
from plm.errors import PLMError
from plm.hf.io import Converter, HFWeights, activation_from_hf, check_positive, register
from plm.models.gpt import GPTConfig

BLOCK_NAMES = {  # HF name in h.{i} -> plm name in blocks.{i}
    "ln_1": "attention_norm",
    "attn.c_attn": "attention.in_proj",
    "attn.c_proj": "attention.out_proj",
    "ln_2": "feed_forward_norm",
    "mlp.c_fc": "feed_forward.fc_in",
    "mlp.c_proj": "feed_forward.fc_out",
}
CONV1D = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"}

# HF activation -> plm activation; saving writes the first HF name of a plm activation.
GPT2_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}
OPENAI_ACTIVATIONS = {"gelu": "gelu_tanh", "relu": "relu"}  # openai-gpt's "gelu" is the tanh approximation

# transformers' defaults, for fields a config.json leaves out.
DEFAULTS = {
    "n_embd": 768,
    "n_layer": 12,
    "n_head": 12,
    "layer_norm_epsilon": 1e-5,
    "resid_pdrop": 0.1,
    "embd_pdrop": 0.1,
    "attn_pdrop": 0.1,
}
GPT2_DEFAULTS = {**DEFAULTS, "vocab_size": 50257, "n_positions": 1024, "activation_function": "gelu_new"}
OPENAI_DEFAULTS = {**DEFAULTS, "vocab_size": 40478, "n_positions": 512, "afn": "gelu"}

# GPT-2 options that change the computation in ways plm does not implement, with the value plm matches.
GPT2_VARIANTS = {
    "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False,
    "reorder_and_upcast_attn": False,
    "add_cross_attention": False,
}


@register
class GPTConverter(Converter):
    """GPT-1 (``openai-gpt``, ``OpenAIGPTLMHeadModel``) and GPT-2 (``gpt2``, ``GPT2LMHeadModel``)."""
    family = "gpt"
    model_types = ("gpt2", "openai-gpt")

    def model_type(self, config: GPTConfig) -> str:
        """"gpt2" for a pre-LN config with a final norm, "openai-gpt" for a post-LN one without.

        Args:
            config: the plm config.

        Returns:
            The model_type.

        Raises:
            PLMError: a config between the two (see [`is_gpt2`][plm.hf.gpt.is_gpt2]).
        """
        return "gpt2" if is_gpt2(config) else "openai-gpt"

    def config_from_hf(self, hf: dict[str, Any], source: str) -> GPTConfig:
        """The plm config of ``config.json``; a PLMError naming ``source`` if plm cannot reproduce it.

        Args:
            hf: the contents of ``config.json`` (its ``model_type`` picks GPT-2 or GPT-1); missing fields take
                transformers' defaults.
            source: the file, for the error messages.

        Returns:
            The plm config.

        Raises:
            PLMError: a size that is not a positive integer, a GPT-2 variant plm does not implement, an
                unsupported activation, or a field the plm config refuses.
        """
        gpt2 = hf["model_type"] == "gpt2"
        hf = {**(GPT2_DEFAULTS if gpt2 else OPENAI_DEFAULTS), **hf}
        check_positive(hf, ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head"), source)
        if gpt2:
            for key, value in GPT2_VARIANTS.items():
                if hf.get(key, value) != value:
                    raise PLMError(f"{source}: {key}={hf[key]} is a GPT-2 variant that plm does not implement")
        key, activations = ("activation_function", GPT2_ACTIVATIONS) if gpt2 else ("afn", OPENAI_ACTIVATIONS)
        activation = activation_from_hf(hf, key, activations, source)
        inner = hf.get("n_inner") if gpt2 else None  # GPT-1's MLP is always 4 * n_embd wide
        values = dict(
            vocab_size=hf["vocab_size"],
            context_length=hf["n_positions"],
            dim=hf["n_embd"],
            layers=hf["n_layer"],
            heads=hf["n_head"],
            ffn_dim=4 * hf["n_embd"] if inner is None else inner,
            activation=activation,
            norm_first=gpt2,
            final_norm=gpt2,
            scaled_residual_init=gpt2,
            dropout=hf["resid_pdrop"],
            attention_dropout=hf["attn_pdrop"],
            embedding_dropout=hf["embd_pdrop"],
            norm_eps=hf["layer_norm_epsilon"],
        )
        return config_from_dict(GPTConfig, values, source)

    def config_to_hf(self, config: GPTConfig) -> dict[str, Any]:
        """``config.json`` with ``model_type`` and ``architectures``; a PLMError if HF has no equivalent.

        Args:
            config: the plm config.

        Returns:
            The contents of ``config.json``.

        Raises:
            PLMError: a config between GPT-1 and GPT-2, an activation HF's model lacks, or a GPT-1 whose
                ``ffn_dim`` is not 4 * dim.
        """
        gpt2 = is_gpt2(config)
        activations = GPT2_ACTIVATIONS if gpt2 else OPENAI_ACTIVATIONS
        activation = next((hf for hf, plm in activations.items() if plm == config.activation), None)
        if activation is None:
            name = "GPT-2" if gpt2 else "GPT-1"
            raise PLMError(f"a {name} with activation {config.activation!r} has no Hugging Face equivalent")
        common = {
            "vocab_size": config.vocab_size,
            "n_positions": config.context_length,
            "n_embd": config.dim,
            "n_layer": config.layers,
            "n_head": config.heads,
            "resid_pdrop": config.dropout,
            "embd_pdrop": config.embedding_dropout,
            "attn_pdrop": config.attention_dropout,
            "layer_norm_epsilon": config.norm_eps,
        }
        if not gpt2:
            if config.ffn_dim != 4 * config.dim:
                raise PLMError(f"a GPT-1 with ffn_dim {config.ffn_dim} != 4 * dim has no Hugging Face equivalent")
            return {"model_type": "openai-gpt", "architectures": ["OpenAIGPTLMHeadModel"], **common, "afn": activation}
        # <|endoftext|> (50256) is GPT-2's bos and eos only with GPT-2's own vocabulary.
        end_of_text = 50256 if config.vocab_size == 50257 else None
        return {
            "model_type": "gpt2",
            "architectures": ["GPT2LMHeadModel"],
            **common,
            "n_inner": None if config.ffn_dim == 4 * config.dim else config.ffn_dim,
            "activation_function": activation,
            "bos_token_id": end_of_text,
            "eos_token_id": end_of_text,
        }

    def weights_from_hf(self, weights: HFWeights, config: GPTConfig) -> dict[str, torch.Tensor]:
        """The plm state dict from HF tensors; takes (or discards) every tensor it understands.

        Conv1D weights are transposed to ``nn.Linear``'s layout; a saved ``lm_head`` must equal the token embedding.

        Args:
            weights: the checkpoint's tensors.
            config: the plm config.

        Returns:
            The plm state dict.

        Raises:
            PLMError: a tensor missing, or an ``lm_head`` that differs from the token embedding.
        """
        weights.strip_prefix("transformer.")  # GPT2LMHeadModel has it, GPT2Model not
        weights.discard(r"h\.\d+\.attn\.(bias|masked_bias)")  # causal-mask buffers of older checkpoints
        state = {}
        for hf, plm, conv1d in name_pairs(config):
            tensor = weights.take(hf)
            state[plm] = tensor.t().contiguous() if conv1d else tensor
        weights.take_tied("lm_head.weight", state["token_embedding.weight"], "the token embedding; plm ties the two")
        return state

    def weights_to_hf(self, state: dict[str, torch.Tensor], config: GPTConfig) -> dict[str, torch.Tensor]:
        """HF tensors, named as ``save_pretrained`` names them (``transformer.`` prefix), from a plm state dict.

        Args:
            state: the plm state dict.
            config: the plm config.

        Returns:
            The tensors by Hugging Face name, Conv1D weights transposed.
        """
        return {f"transformer.{hf}": state[plm].t() if conv1d else state[plm] for hf, plm, conv1d in name_pairs(config)}


def is_gpt2(config: GPTConfig) -> bool:
    """Whether ``config`` is GPT-2's kind: GPT-2 is pre-LN with a final norm, GPT-1 post-LN without one.

    Args:
        config: the plm config.

    Returns:
        True for GPT-2, False for GPT-1.

    Raises:
        PLMError: a config between the two, which HF has no model for.
    """
    if config.norm_first != config.final_norm:
        raise PLMError(
            f"a GPT with norm_first={config.norm_first} and final_norm={config.final_norm} has no Hugging Face "
            "equivalent (GPT-2 is pre-LN with a final norm, GPT-1 post-LN without)"
        )
    return config.norm_first


def name_pairs(config: GPTConfig) -> list[tuple[str, str, bool]]:
    """(HF name without ``transformer.``, plm name, whether the HF weight is a transposed Conv1D one).

    Args:
        config: the plm config.

    Returns:
        The triples, one per tensor.

    Raises:
        PLMError: a config between GPT-1 and GPT-2.
    """
    gpt2 = is_gpt2(config)
    pairs = [
        ("wte.weight" if gpt2 else "tokens_embed.weight", "token_embedding.weight", False),
        ("wpe.weight" if gpt2 else "positions_embed.weight", "position_embedding.weight", False),
    ]
    for index in range(config.layers):
        for hf, plm in BLOCK_NAMES.items():
            for kind in ("weight", "bias"):
                conv1d = hf in CONV1D and kind == "weight"
                pairs.append((f"h.{index}.{hf}.{kind}", f"blocks.{index}.{plm}.{kind}", conv1d))
    if config.final_norm:
        pairs += [("ln_f.weight", "final_norm.weight", False), ("ln_f.bias", "final_norm.bias", False)]
    return pairs
