"""What all plm models share: a config, a family name, weight init, save and load."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, cast

import torch
from torch import nn

from plm.core import KVCache, TransformerBlock
from plm.decoding.generation import generate
from plm.decoding.interface import DecodingRequest
from plm.errors import PLMError, with_article


@dataclass(frozen=True)
class ExtraActivations:
    """What a family's training step keeps for backward beyond ``plm plan``'s count of its core blocks.

    ``plm plan`` counts ``config.layers`` passes through the core Transformer block, the
    embeddings and the vocabulary rows (see :mod:`plm.training.plan`); a family whose
    paper changes the attention or runs more passes says here by how much. Values are
    fp32 counts per token of the step.
    """

    passes: int = 0  # block passes beyond config.layers (DeBERTa's enhanced mask decoder)
    per_pass: float = 0.0  # kept by every block pass beyond the core block's count (the recomputed one's alone)
    kept: float = 0.0  # kept once, outside the blocks, with or without activation checkpointing
    score_bias: bool = False  # the attention adds to its scores a bias that needs a gradient


class PretrainedModel(nn.Module):
    """Base of every family's model. Subclasses set ``family`` and ``config_class``."""

    family: ClassVar[str]
    config_class: ClassVar[type[Any]]
    # How a task model (plm.tasks) pools this backbone's states into one vector per sequence by
    # default: "cls", the [CLS] vector (through the pooler when there is one), or "last", the last real token;
    # None: no task head goes on this model (an encoder-decoder, ELMo).
    task_pooling: ClassVar[str | None] = None

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.config = config

    @classmethod
    def config_with_heads(cls, config: Any, heads: tuple[str, ...]) -> Any:
        """``config`` with the pre-training heads an objective trains (e.g. "mlm", "nsp").

        A model with its head built in (a causal LM's tied output layer) takes none.
        """
        if heads:
            raise PLMError(
                f"{with_article(cls.family)} model has no pre-training heads; {'+'.join(heads)} needs an encoder"
            )
        return config

    @classmethod
    def extra_activations(cls, config: Any, batch: int, block: int, device: str) -> ExtraActivations:
        """What a step of ``batch`` x ``block`` tokens on ``device`` ("cpu", "cuda") keeps beyond the core blocks.

        None by default: a family that only stacks the core block (GPT, BERT, ALBERT) is
        counted whole by ``plm plan``; one that changes what a block keeps overrides this.
        """
        return ExtraActivations()

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
        for block in cast(Iterable[TransformerBlock], blocks):  # a ModuleList does not type its modules
            nn.init.normal_(block.attention.out_proj.weight, std=scaled)
            nn.init.normal_(block.feed_forward.fc_out.weight, std=scaled)

    def word_embeddings(self) -> nn.Embedding:
        """The token embedding table (a task resizes it when it adds tokens)."""
        raise NotImplementedError

    def vocabulary_embeddings(self) -> list[nn.Embedding]:
        """The token tables, which a tied output layer may read as its matrix; int8 quantization keeps them int8."""
        return []

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


@dataclass
class CausalState:
    """A decoder-only model's decoding state: its caches and the padding of the history."""

    forward: Callable[..., Any]  # the model, or the model under torch.compile
    cache: list[KVCache] | None  # None: every step recomputes the whole history
    mask: torch.Tensor | None  # (batch, max_length), 0 at the prompt's left padding; None without padding


class CausalLM(PretrainedModel):
    """A decoder-only language model: it can make a KV cache and decode (:class:`plm.decoding.Decoder`)."""

    task_pooling = "last"  # only the last token has seen the whole sequence (GPT-1's extract token)

    def context_length(self) -> int:
        raise NotImplementedError

    def new_cache(self, batch: int, max_length: int) -> list[KVCache]:
        raise NotImplementedError

    def start_decoding(self, request: DecodingRequest) -> CausalState:
        """The state before the first step: a KV cache for ``request.max_length`` positions, the padding mask."""
        if request.source_ids is not None or request.source_mask is not None:
            raise PLMError(f"{with_article(self.family)} model continues a prompt; it takes no source sentence")
        prompt, prompt_mask, max_length = request.prompt, request.prompt_mask, request.max_length
        batch, prompt_length = prompt.shape
        mask = None
        if prompt_mask is not None and not bool(prompt_mask.all()):
            mask = prompt_mask.new_ones(batch, max_length)
            mask[:, :prompt_length] = prompt_mask
        cache = self.new_cache(batch, max_length) if request.use_cache else None
        # compiled code is cached with the model's forward, so later calls reuse it
        return CausalState(torch.compile(self) if request.compile else self, cache, mask)

    def decode_step(self, history: torch.Tensor, state: CausalState) -> tuple[torch.Tensor, CausalState]:
        start = state.cache[0].length if state.cache is not None else 0
        mask = state.mask[:, : history.shape[1]] if state.mask is not None else None
        logits = state.forward(history[:, start:], mask, cache=state.cache, num_logits=1).logits[:, -1]
        return logits, state

    def reorder_state(self, state: CausalState, order: torch.Tensor) -> CausalState:
        return CausalState(
            state.forward,
            [layer.reorder(order) for layer in state.cache] if state.cache is not None else None,
            state.mask.index_select(0, order) if state.mask is not None else None,
        )

    @torch.inference_mode()
    def generate(
        self,
        input_ids: torch.Tensor,
        max_new_tokens: int = 32,
        attention_mask: torch.Tensor | None = None,
        **options: Any,
    ) -> torch.Tensor:
        """Greedy unless sampling options are given; returns prompt + new tokens (batch, time + N).

        See :func:`plm.decoding.generation.generate` for the options.
        """
        return generate(self, input_ids, max_new_tokens=max_new_tokens, attention_mask=attention_mask, **options)


class Seq2SeqModel(PretrainedModel):
    """An encoder-decoder: it encodes a source once and decodes a target (:class:`plm.decoding.Decoder`).

    A family implements ``context_length``, ``start_decoding`` (which runs the encoder),
    ``decode_step`` and ``reorder_state``; greedy search, sampling and beam search then
    work as for a causal LM, with the source given as ``source_ids`` / ``source_mask``.
    """

    def context_length(self) -> int:
        raise NotImplementedError

    def hypothesis_bytes(self, source_length: int, target_length: int) -> int:
        """About the bytes of decoding state one hypothesis holds (fp32), to bound a search by free memory."""
        raise NotImplementedError

    def start_decoding(self, request: DecodingRequest) -> Any:
        """Check the sources against the target prefixes, then encode them (:meth:`start_from_source`)."""
        source_ids, prompt = request.source_ids, request.prompt
        if source_ids is None:
            raise PLMError(f"{with_article(self.family)} model translates a source sentence: pass source_ids")
        if source_ids.shape[0] != prompt.shape[0]:
            raise PLMError(f"{source_ids.shape[0]} source sentences but {prompt.shape[0]} target prefixes")
        if request.prompt_mask is not None and not bool(request.prompt_mask.all()):
            raise PLMError(f"{with_article(self.family)} decoder reads its target prefix from the first token: "
                           "give every row the same prefix length, unpadded")
        return self.start_from_source(source_ids, request.source_mask, request.max_length,
                                      use_cache=request.use_cache, compile=request.compile)

    def start_from_source(
        self, source_ids: torch.Tensor, source_mask: torch.Tensor | None, max_length: int, *, use_cache: bool,
        compile: bool,
    ) -> Any:
        """The decoding state of a batch of sources (batch, source_length): the encoder runs here, once."""
        raise NotImplementedError

    def decode_step(self, history: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        raise NotImplementedError

    def reorder_state(self, state: Any, order: torch.Tensor) -> Any:
        raise NotImplementedError
