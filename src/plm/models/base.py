"""What all plm models share: a config, a family name, weight init, save and load."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import torch
from torch import nn

from plm.core import KVCache
from plm.errors import PLMError


class PretrainedModel(nn.Module):
    """Base of every family's model. Subclasses set ``family`` and ``config_class``."""

    family: ClassVar[str]
    config_class: ClassVar[type]
    # How a task model (plm.tasks) pools this backbone's states into one vector per sequence by
    # default: "cls", the [CLS] vector (through the pooler when there is one), or "last", the last real token.
    task_pooling: ClassVar[str] = "cls"

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.config = config

    @classmethod
    def config_with_heads(cls, config: Any, heads: tuple[str, ...]) -> Any:
        """``config`` with the pre-training heads an objective trains (e.g. "mlm", "nsp").

        A model with its head built in (a causal LM's tied output layer) takes none.
        """
        if heads:
            raise PLMError(f"a {cls.family} model has no pre-training heads; {'+'.join(heads)} needs an encoder")
        return config

    def init_weights(self, std: float = 0.02, root: nn.Module | None = None) -> None:
        """N(0, std) for every weight matrix and embedding, zero biases, unit LayerNorms.

        ``root`` limits it to one submodule (a task head put on a pretrained backbone).
        """
        for module in (root or self).modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=std)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def scale_residual_init(self, blocks: nn.ModuleList, std: float = 0.02) -> None:
        """GPT-2: weights of the layers that write into the residual stream get std / sqrt(N).

        N = 2 * layers residual layers (attention and MLP of each block), so the
        variance of the residual stream does not grow with depth.
        """
        scaled = std / math.sqrt(2 * len(blocks))
        for block in blocks:
            nn.init.normal_(block.attention.out_proj.weight, std=scaled)
            nn.init.normal_(block.feed_forward.fc_out.weight, std=scaled)

    def word_embeddings(self) -> nn.Embedding:
        """The token embedding table (a task resizes it when it adds tokens)."""
        raise NotImplementedError

    def resize_token_embeddings(self, vocab_size: int, std: float = 0.02) -> None:
        """Grow the token embeddings to ``vocab_size`` rows: old rows unchanged, new ones N(0, std).

        GPT-1 adds its task tokens (start, delimiter, extract) this way. A tied output
        layer reads the same matrix, so it grows with it.
        """
        embedding = self.word_embeddings()
        old = embedding.weight
        if vocab_size < old.shape[0]:
            raise PLMError(f"cannot shrink the token embeddings from {old.shape[0]} to {vocab_size} rows")
        new = old.new_empty(vocab_size, old.shape[1])
        with torch.no_grad():
            new[: old.shape[0]] = old
            nn.init.normal_(new[old.shape[0] :], std=std)
        embedding.weight = nn.Parameter(new, requires_grad=old.requires_grad)
        embedding.num_embeddings = vocab_size
        self.config = dataclasses.replace(self.config, vocab_size=vocab_size)

    def num_parameters(self) -> int:
        """Distinct parameters (a tied embedding counts once)."""
        return sum(p.numel() for p in self.parameters())

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device


class CausalLM(PretrainedModel):
    """A decoder-only language model: it can make a KV cache and generate."""

    task_pooling = "last"  # only the last token has seen the whole sequence (GPT-1's extract token)

    def context_length(self) -> int:
        raise NotImplementedError

    def new_cache(self, batch: int, max_length: int) -> list[KVCache]:
        raise NotImplementedError

    @torch.inference_mode()
    def generate(self, input_ids: torch.Tensor, max_new_tokens: int = 32, attention_mask: torch.Tensor | None = None, **options: Any) -> torch.Tensor:
        """Greedy unless sampling options are given; returns prompt + new tokens (batch, time + N).

        See :func:`plm.generation.generate` for the options.
        """
        from plm.generation import generate

        return generate(self, input_ids, max_new_tokens=max_new_tokens, attention_mask=attention_mask, **options)
