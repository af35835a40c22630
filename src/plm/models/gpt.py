"""GPT-1 and GPT-2: a decoder-only Transformer language model.

The two papers differ only in configuration, so one class serves both:
GPT-1 is post-LN with no final LayerNorm (vocabulary 40,478, context 512);
GPT-2 moves LayerNorm to the input of each sub-block, adds one after the last
block, and scales the initial weights of residual layers by 1/sqrt(N)
(vocabulary 50,257, context 1024).

A variant of GPT with another attention overrides
[`build_attention`][plm.models.base.PretrainedModel.build_attention], the hook every family's blocks share.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from plm.core import (
    BlockConfig,
    CausalLMOutput,
    KVCache,
    LearnedPositions,
    build_attention_mask,
    build_position_ids,
    native_layers,
    run_blocks,
)
from plm.core.embeddings import check_context
from plm.cpu.cross_entropy import linear_cross_entropy
from plm.cpu.linear import linear
from plm.cpu.native_step import NativeDecoder
from plm.models.base import CausalLM
from plm.models.recipe import Hyperparameters, PaperScale, PaperSettings, PretrainingRecipe


@dataclass(frozen=True)
class GPTConfig:
    """GPT-2 small by default; `GPT1` and `PRESETS` hold the other sizes.

    Attributes:
        vocab_size: the tokens of the vocabulary.
        context_length: the most positions the model takes.
        dim: the hidden size.
        layers: the Transformer blocks.
        heads: the attention heads.
        ffn_dim: the feed-forward layers' inner size.
        activation: the feed-forward activation ("gelu_tanh": GELU's tanh approximation, as GPT-2).
        norm_first: pre-LN (GPT-2) when True, post-LN (GPT-1) when False.
        final_norm: a LayerNorm after the last block (GPT-2).
        scaled_residual_init: scale the initial weights of the residual layers by 1/sqrt(2 * layers) (GPT-2).
        dropout: the dropout on each sub-layer's output.
        attention_dropout: the dropout on the attention weights.
        embedding_dropout: the dropout on the sum of token and position embeddings.
        norm_eps: the LayerNorms' epsilon.
    """
    vocab_size: int = 50257
    context_length: int = 1024
    dim: int = 768
    layers: int = 12
    heads: int = 12
    ffn_dim: int = 3072
    activation: str = "gelu_tanh"
    norm_first: bool = True
    final_norm: bool = True
    scaled_residual_init: bool = True
    dropout: float = 0.1
    attention_dropout: float = 0.1
    embedding_dropout: float = 0.1
    norm_eps: float = 1e-5

    @property
    def block(self) -> BlockConfig:
        """The shape of each Transformer block."""
        return BlockConfig.of(self)


GPT1 = GPTConfig(
    vocab_size=40478,
    context_length=512,
    norm_first=False,
    final_norm=False,
    scaled_residual_init=False,
)
GPT2 = GPTConfig()

PRESETS = {
    "gpt1": GPT1,
    "gpt2": GPT2,
    "gpt2-medium": GPTConfig(dim=1024, layers=24, heads=16, ffn_dim=4096),
    "gpt2-large": GPTConfig(dim=1280, layers=36, heads=20, ffn_dim=5120),
    "gpt2-xl": GPTConfig(dim=1600, layers=48, heads=25, ffn_dim=6400),
    # Small ones for CPU work; the vocabulary follows the tokenizer they are trained with.
    "gpt2-mini": GPTConfig(vocab_size=8192, context_length=256, dim=256, layers=4, heads=4, ffn_dim=1024),
    "gpt2-micro": GPTConfig(vocab_size=512, context_length=64, dim=32, layers=2, heads=2, ffn_dim=128),
}

# GPT-1 (seed 000, GPT-1's section 4.1 table): Adam, lr raised linearly over the first 2000 updates to 2.5e-4, then
# annealed to 0 on a cosine; weight decay w = 0.01 on all non-bias, non-gain weights. (The table's "warmup_steps 4000"
# line contradicts its own "0~2000 step" and GPT-1's paper, which says 2000.)
GPT1_OPTIMIZER = Hyperparameters(lr=2.5e-4, min_lr=0.0, warmup=2000, schedule="cosine", betas=(0.9, 0.999),
                                 weight_decay=0.01)

# GPT-2 (seed 000, GPT-2's section 2.3): the context grew from 512 to 1024 tokens and the batch to 512 (seed 003 says
# the same). Its section 3: each size's learning rate was tuned by hand on 5% of WebText held out, and is not given;
# nor is the length of the run. Where it gives none plm takes GPT-1's (GPT-2 mostly follows GPT-1, section 2.3):
# Adam 2.5e-4, 2000 warmup steps, cosine to 0, and 100 epochs.
GPT2_PAPER = PaperSettings(
    paper=GPT1_OPTIMIZER,
    source="GPT-1 section 4.1, as GPT-2 (section 3) tuned each size's learning rate and gives none",
    paper_scale=PaperScale(batch_size=512, block_size=1024, epochs=100,
                           source="GPT-2 section 2.3; the 100 epochs GPT-1's, as GPT-2 gives no length"),
)


def paper_by_size(config: GPTConfig) -> PaperSettings | None:
    """The paper settings of a model: GPT-2's for a pre-LN one, GPT-1's (the recipe's own) for a post-LN one.

    Args:
        config: the model's config.

    Returns:
        `GPT2_PAPER` for GPT-2's sizes and the small pre-LN presets plm trains; None for GPT-1.
    """
    return GPT2_PAPER if config.norm_first else None


RECIPE = PretrainingRecipe(
    preset="gpt2-mini",
    tokenizer="bpe",
    objective="clm",
    objectives=("clm",),
    # CPU scale: a few hundred steps of a small model want a higher peak, a short warmup and a floor.
    hyperparameters=Hyperparameters(lr=6e-4, min_lr=6e-5, warmup=100, schedule="cosine", betas=(0.9, 0.95)),
    paper=GPT1_OPTIMIZER,
    source="GPT-1 (Radford et al., 2018) section 4.1",
    # Seed 000, GPT-1's section 4.1 table: "Batch size 64 random sample x 512 token/sample", "Schedule 100 epochs".
    paper_scale=PaperScale(batch_size=64, block_size=512, epochs=100, source="GPT-1 section 4.1"),
    paper_by_size=paper_by_size,  # GPT-2's batch and context for its pre-LN models
)


class GPT(CausalLM):
    """GPT-1 and GPT-2 (family ``gpt``): learned positions, causal blocks, the LM head tied to the token embedding.

    Args:
        config: the model's config.
    """
    family = "gpt"
    config_class = GPTConfig

    def __init__(self, config: GPTConfig) -> None:
        super().__init__(config)
        self.token_embedding = nn.Embedding(config.vocab_size, config.dim)
        self.position_embedding = LearnedPositions(config.context_length, config.dim)
        self.embedding_dropout = nn.Dropout(config.embedding_dropout)
        self.blocks = nn.ModuleList(self.build_block(config, config.block) for _ in range(config.layers))
        self.final_norm = nn.LayerNorm(config.dim, eps=config.norm_eps) if config.final_norm else nn.Identity()
        self.init_weights()
        if config.scaled_residual_init:
            self.scale_residual_init(self.blocks)

    def word_embeddings(self) -> nn.Embedding:
        """The token embedding table, which the LM head shares.

        Returns:
            The embedding.
        """
        return self.token_embedding

    def vocabulary_embeddings(self) -> list[nn.Embedding]:
        """The token table, which the tied LM head reads as its matrix.

        Returns:
            The token embedding, alone in the list.
        """
        return [self.token_embedding]

    def context_length(self) -> int:
        """The most positions the model can take (prompt and new tokens together).

        Returns:
            The config's ``context_length``.
        """
        return self.config.context_length

    def new_cache(self, batch: int, max_length: int) -> list[KVCache]:
        """An empty KV cache per block, for ``batch`` rows of at most ``max_length`` positions.

        The caches take the token embedding's dtype and device.

        Args:
            batch: the rows.
            max_length: the positions at most.

        Returns:
            The caches, one per block.
        """
        weight = self.token_embedding.weight
        head_dim = self.config.dim // self.config.heads
        return [
            KVCache.empty(batch, self.config.heads, max_length, head_dim, weight.dtype, weight.device)
            for _ in self.blocks
        ]

    def native_step(self, cache: list[KVCache], mask: torch.Tensor | None) -> NativeDecoder | None:
        """The one-token step in C over ``cache`` (see [`CausalLM.native_step`][plm.models.base.CausalLM.native_step]).

        Args:
            cache: the caches the prompt's pass filled, one per block.
            mask: (batch, max_length), 0 at the prompts' left padding, or None without padding.

        Returns:
            The step, or None where the C step cannot run this model (a variant's attention, fp16 weights, ...).
        """
        layers = native_layers(self.blocks, cache)
        if layers is None:
            return None
        final = self.final_norm
        return NativeDecoder.of(
            layers, heads=self.config.heads, norm_first=self.config.norm_first, activation=self.config.activation,
            norm_eps=self.config.norm_eps, token_embedding=self.token_embedding.weight,
            position_embedding=self.position_embedding.weight,
            final_norm=(final.weight, final.bias) if isinstance(final, nn.LayerNorm) else None,
            head=self.token_embedding.weight,  # tied
            mask=mask,
        )

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        *,
        position_ids: torch.Tensor | None = None,
        cache: list[KVCache] | None = None,
        num_logits: int | None = None,
        targets: torch.Tensor | None = None,
    ) -> CausalLMOutput:
        """Next-token logits of input_ids (batch, time); attention_mask (batch, past + time), 0 marks padding.

        With a cache, ``input_ids`` are only the new tokens and the mask covers the
        cached ones too (a static cache's: all its positions, 0 at those not written
        yet; see [`make_static`][plm.core.attention.KVCache.make_static]). ``num_logits`` computes the LM
        head for the last positions only (generation needs one). ``targets`` gives the
        summed next-token loss instead of the logits, which it never keeps whole
        (`linear_cross_entropy`): the way to train.

        Args:
            input_ids: (batch, time) token ids (with a cache, the new tokens only).
            attention_mask: (batch, past + time), 1 for real tokens and 0 for padding; or None.
            position_ids: (batch, time) positions (default: counted from the mask, or from the cache's length).
            cache: one key/value cache per block, which the new tokens' keys and values are appended to.
            num_logits: compute the logits of only this many last positions (default: all).
            targets: (batch, time) the next token of each position (-100: not scored); with them the output
                holds the summed ``loss`` and no logits.

        Returns:
            The output: the final hidden states (batch, time, dim), the logits (batch, time or num_logits, vocab)
            or the loss, and the cache.

        Raises:
            PLMError: the cached and new tokens need more positions than the context, or do not fit in the cache.
        """
        batch, time = input_ids.shape
        past = cache[0].length if cache else 0
        check_context(past + time, self.config.context_length)
        if position_ids is None and attention_mask is None:
            positions = self.position_embedding.span(past, time)  # (T, dim), the same for every row
        else:
            if position_ids is None:
                position_ids = build_position_ids(batch, time, past, attention_mask, input_ids.device)
            positions = self.position_embedding(position_ids)  # (B, T, dim)
        key_length = cache[0].key_length(time) if cache else time
        mask, is_causal = build_attention_mask(attention_mask, time, key_length, causal=True)
        hidden = self.embedding_dropout(self.token_embedding(input_ids) + positions)
        hidden = self.final_norm(run_blocks(self.blocks, hidden, mask, is_causal=is_causal, caches=cache))
        if targets is not None:
            loss = linear_cross_entropy(hidden, self.token_embedding.weight, targets)  # tied head
            return CausalLMOutput(last_hidden_state=hidden, loss=loss, cache=cache)
        head_input = hidden if num_logits is None else hidden[:, -num_logits:]
        logits = linear(head_input, self.token_embedding.weight)  # tied: (B, T, vocab)
        return CausalLMOutput(last_hidden_state=hidden, logits=logits, cache=cache)
