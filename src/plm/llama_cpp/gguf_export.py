"""A GPT model and its tokenizer as a GGUF file, in the layout of llama.cpp's ``gpt2`` architecture.

llama.cpp's ``gpt2`` graph is GPT-2's: pre-LN blocks with a final norm, learned positions, GELU's tanh
approximation, Q, K and V in one ``attn_qkv`` matrix, and the output layer tied to the token embedding
unless an ``output`` tensor is given. Its weights are read as ggml's (in, out) = PyTorch's (out, in), the
layout of plm's ``nn.Linear``, so plm's tensors are written as they are, under the names llama.cpp's own
converter gives GPT-2's Hugging Face tensors (the ``gguf`` package's ``TensorNameMap``).

Which tensors are stored in the chosen type follows llama.cpp's converter, so a plm file and one that
``convert_hf_to_gguf.py`` writes from the same weights hold the same bytes: matrices take ``f16`` or
``q8_0``; vectors (norms, biases) and the position table stay f32, and a matrix whose rows do not split
into ``q8_0``'s blocks of 32 falls back to f16.

GPT-1 is post-LN, and llama.cpp has no architecture with post-LN blocks and learned positions, so a GPT-1
is refused rather than written as a file that llama.cpp would run as something else.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import models, pre_tokenizers

from plm.errors import PLMError
from plm.models.base import PretrainedModel
from plm.models.gpt import GPT, GPTConfig
from plm.storage.atomic_files import atomic_path
from plm.tokenization.tokenizer import Tokenizer

GGUF_TYPES = ("f32", "f16", "q8_0")  # the tensor types a matrix is stored in; llama.cpp's converter's names
ARCHITECTURE = "gpt2"
PRE_TOKENIZER = "gpt-2"  # llama.cpp's name for GPT-2's split of text before BPE (plm's byte-level BPE uses it)
PLM_TO_HF = {  # plm's name in a block -> GPT-2's Hugging Face name, which gguf's TensorNameMap knows
    "attention_norm": "ln_1",
    "attention.in_proj": "attn.c_attn",
    "attention.out_proj": "attn.c_proj",
    "feed_forward_norm": "ln_2",
    "feed_forward.fc_in": "mlp.c_fc",
    "feed_forward.fc_out": "mlp.c_proj",
}
OUTSIDE_BLOCKS = {"token_embedding": "wte", "position_embedding": "wpe", "final_norm": "ln_f"}


def gguf_module() -> Any:
    """The ``gguf`` package, or a PLMError that says how to install it.

    Returns:
        The module.

    Raises:
        PLMError: the package is not installed.
    """
    try:
        import gguf
    except ImportError:
        raise PLMError("writing GGUF needs llama.cpp's gguf package: pip install 'plm[gguf]'") from None
    return gguf


def check_exportable(model: PretrainedModel) -> GPTConfig:
    """Refuse a model that llama.cpp's ``gpt2`` graph would compute differently.

    Args:
        model: the model.

    Returns:
        Its config.

    Raises:
        PLMError: not a GPT, a post-LN (GPT-1) layout, a norm layout between GPT-1's and GPT-2's, or an activation
            other than GELU's tanh approximation.
    """
    if not isinstance(model, GPT):
        raise PLMError(f"GGUF export writes GPT models; this is a {model.family} model")
    config: GPTConfig = model.config
    if not config.norm_first:
        raise PLMError("llama.cpp has no architecture with GPT-1's post-LN blocks and learned positions; GGUF "
                       "export writes pre-LN GPT-2 models (norm_first and final_norm)")
    if not config.final_norm:
        raise PLMError("llama.cpp's gpt2 architecture has a final norm, and this model (final_norm=False) none")
    if config.activation != "gelu_tanh":
        raise PLMError(f"llama.cpp's gpt2 architecture computes GELU's tanh approximation (activation "
                       f"'gelu_tanh'); this model's activation is {config.activation!r}")
    return config


def byte_level_vocabulary(tokenizer: Tokenizer, vocab_size: int) -> tuple[list[str], list[str], list[int]]:
    """The tokens, merges and llama.cpp token types of a byte-level BPE tokenizer, padded to the model's vocabulary.

    Args:
        tokenizer: a byte-level BPE tokenizer (GPT-2's kind).
        vocab_size: the model's token embedding rows; rows past the tokenizer's vocabulary get unused tokens.

    Returns:
        (tokens by id, merges as "left right", a ``gguf.TokenType`` value per token).

    Raises:
        PLMError: another kind of tokenizer, or one with more tokens than the model has rows.
    """
    gguf = gguf_module()
    backend = tokenizer.backend
    if not isinstance(backend.model, models.BPE) or not isinstance(backend.pre_tokenizer, pre_tokenizers.ByteLevel):
        raise PLMError("llama.cpp's gpt2 tokenizer is GPT-2's byte-level BPE; this model's tokenizer is "
                       f"{type(backend.model).__name__}")
    vocabulary = backend.get_vocab(with_added_tokens=True)
    if len(vocabulary) > vocab_size:
        raise PLMError(f"the tokenizer has {len(vocabulary)} tokens and the model's embedding only {vocab_size} "
                       "rows (vocab_size)")
    by_id = {index: token for token, index in vocabulary.items()}
    special = set(tokenizer.special_ids)
    tokens, types = [], []
    for index in range(vocab_size):
        if index in by_id:
            tokens.append(by_id[index])
            types.append(gguf.TokenType.CONTROL if index in special else gguf.TokenType.NORMAL)
        else:  # as llama.cpp's converter pads a vocabulary to the embedding's rows
            tokens.append(f"[PAD{index}]")
            types.append(gguf.TokenType.UNUSED)
    # tokenizers writes a merge as "a b" (before 0.20) or ["a", "b"]
    merges = [merge if isinstance(merge, str) else " ".join(merge)
              for merge in json.loads(backend.to_str())["model"]["merges"]]
    return tokens, merges, [int(kind) for kind in types]


def gguf_tensors(model: PretrainedModel) -> dict[str, torch.Tensor]:
    """The model's weights by llama.cpp's names (``token_embd.weight``, ``blk.0.attn_qkv.weight``, ...), fp32.

    Args:
        model: a GPT-2-layout model.

    Returns:
        The tensors, in plm's (out, in) layout.
    """
    gguf = gguf_module()
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GPT2, model.config.layers)
    tensors = {}
    for name, tensor in model.state_dict().items():
        module, _, kind = name.rpartition(".")
        if module.startswith("blocks."):
            _, index, inner = module.split(".", 2)
            hf = f"h.{index}.{PLM_TO_HF[inner]}"
        else:
            hf = OUTSIDE_BLOCKS[module]
        tensors[f"{names.get_name(hf)}.{kind}"] = tensor.detach().float().cpu()
    return tensors


def stored_type(name: str, tensor: torch.Tensor, tensor_type: str) -> str:
    """The type a tensor is stored in, as llama.cpp's converter chooses it (see the module docstring).

    Args:
        name: llama.cpp's name of the tensor.
        tensor: the tensor.
        tensor_type: the file's type for matrices, one of `GGUF_TYPES`.

    Returns:
        ``f32``, ``f16`` or ``q8_0``.
    """
    if tensor.dim() < 2 or not name.endswith(".weight") or name.startswith("position_embd."):
        return "f32"
    if tensor_type == "q8_0" and tensor.shape[-1] % 32:
        return "f16"
    return tensor_type


def write_gguf(model: PretrainedModel, tokenizer: Tokenizer, path: str | os.PathLike[str], tensor_type: str = "f16",
               name: str | None = None) -> Path:
    """Write ``model`` and ``tokenizer`` as a GGUF file for llama.cpp (architecture ``gpt2``).

    The file is written whole or not at all: a failure leaves ``path`` as it was.

    Args:
        model: a GPT-2-layout GPT (pre-LN, final norm, ``gelu_tanh``).
        tokenizer: its byte-level BPE tokenizer; its eos (and bos) are the file's end- and beginning-of-text.
        path: the file to write.
        tensor_type: the matrices' type, one of `GGUF_TYPES` (vectors and positions stay f32).
        name: the model's name in the file's metadata (default: the file's stem).

    Returns:
        The file's path.

    Raises:
        PLMError: no ``gguf`` package, a model or tokenizer llama.cpp's ``gpt2`` cannot run, an unknown
            ``tensor_type``, or a file that cannot be written.
    """
    if tensor_type not in GGUF_TYPES:
        raise PLMError(f"unknown GGUF tensor type {tensor_type!r}; choose one of {', '.join(GGUF_TYPES)}")
    gguf = gguf_module()
    config = check_exportable(model)
    tokens, merges, token_types = byte_level_vocabulary(tokenizer, config.vocab_size)
    path = Path(path)
    file_types = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
                  "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}
    quantization = {"f32": gguf.GGMLQuantizationType.F32, "f16": gguf.GGMLQuantizationType.F16,
                    "q8_0": gguf.GGMLQuantizationType.Q8_0}
    with atomic_path(path) as temporary:
        writer = gguf.GGUFWriter(temporary, ARCHITECTURE)
        writer.add_name(name or path.stem)
        writer.add_context_length(config.context_length)
        writer.add_embedding_length(config.dim)
        writer.add_feed_forward_length(config.ffn_dim)
        writer.add_block_count(config.layers)
        writer.add_head_count(config.heads)
        writer.add_layer_norm_eps(config.norm_eps)
        writer.add_file_type(file_types[tensor_type])
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(PRE_TOKENIZER)
        writer.add_token_list(tokens)
        writer.add_token_types(token_types)
        writer.add_token_merges(merges)
        for role, add in (("bos", writer.add_bos_token_id), ("eos", writer.add_eos_token_id),
                          ("pad", writer.add_pad_token_id)):
            if (token := tokenizer.id_of(role)) is not None:
                add(token)
        writer.add_add_bos_token(False)  # plm's GPT reads a text as it is, as GPT-2 was trained
        for tensor_name, tensor in gguf_tensors(model).items():
            kind = quantization[stored_type(tensor_name, tensor, tensor_type)]
            data = gguf.quants.quantize(tensor.numpy().astype(np.float32), kind)
            writer.add_tensor(tensor_name, data, raw_dtype=kind)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    return path
