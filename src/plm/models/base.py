"""What all plm models share: a config, a family name, weight init, save and load."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, cast

import torch
from torch import nn

from plm.core import BlockConfig, KVCache, MultiHeadAttention, TransformerBlock
from plm.cpu.native_step import NativeDecoder
from plm.decoding.generation import generate
from plm.decoding.interface import DecodingRequest
from plm.decoding.static_step import StaticStep
from plm.errors import PLMError, with_article


@dataclass(frozen=True)
class ExtraActivations:
    """What a family's training step keeps for backward beyond ``plm plan``'s count of its core blocks.

    ``plm plan`` counts ``config.layers`` passes through the core Transformer block, the
    embeddings and the vocabulary rows (see [`plm.training.plan`][plm.training.plan]); a family whose
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

        Args:
            config: the family's config.
            heads: the heads the objective trains.

        Returns:
            The config with those heads.

        Raises:
            PLMError: heads asked of a model that has none (this default).
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

        Args:
            config: the family's config.
            batch: the sequences of the step.
            block: the tokens of each.
            device: "cpu" or "cuda".

        Returns:
            What the family keeps beyond the core blocks.
        """
        return ExtraActivations()

    # The attention of a family's Transformer blocks --------------------------------------

    def build_attention(self, config: Any) -> MultiHeadAttention | None:
        """The self-attention module of one Transformer block; None for the core's MultiHeadAttention.

        The one place a family says which attention its blocks use, encoder or decoder alike: every block that
        [`build_block`][plm.models.base.PretrainedModel.build_block] makes (an encoder's, GPT's, both stacks of
        the Transformer) calls it once. A variant subclasses
        [`MultiHeadAttention`][plm.core.attention.MultiHeadAttention] and overrides its
        [`attend`][plm.core.attention.MultiHeadAttention.attend] (DeBERTa's
        [`DisentangledAttention`][plm.models.deberta.DisentangledAttention]); the projections it inherits keep
        their state-dict keys.

        Args:
            config: the family's config.

        Returns:
            None here; a family may return its own module.
        """
        return None

    def build_cross_attention(self, config: Any) -> MultiHeadAttention | None:
        """The encoder-decoder attention module of one decoder block; None for the core's MultiHeadAttention.

        Called once per block whose shape has ``cross_attention`` (the Transformer's decoder blocks).

        Args:
            config: the family's config.

        Returns:
            None here; a family may return its own module.
        """
        return None

    def build_block(self, config: Any, block: BlockConfig) -> TransformerBlock:
        """One Transformer block of shape ``block``, with the family's attention modules.

        Args:
            config: the family's config, which the attention hooks read.
            block: the block's shape.

        Returns:
            The block, its self-attention from
            [`build_attention`][plm.models.base.PretrainedModel.build_attention] and its encoder-decoder attention
            (if the shape has one) from
            [`build_cross_attention`][plm.models.base.PretrainedModel.build_cross_attention].
        """
        attention = self.build_attention(config)
        cross_attention = self.build_cross_attention(config) if block.cross_attention else None
        return TransformerBlock(block, attention=attention, cross_attention=cross_attention)

    def init_weights(self, std: float = 0.02, root: nn.Module | None = None) -> None:
        """N(0, std) for every weight matrix and embedding, zero biases, unit LayerNorms.

        ``root`` limits it to one submodule (a task head put on a pretrained backbone).

        Args:
            std: the standard deviation of the weights.
            root: the submodule to initialise; None: the whole model.
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

        Args:
            blocks: the model's Transformer blocks.
            std: the standard deviation before scaling.
        """
        scaled = std / math.sqrt(2 * len(blocks))
        for block in cast(Iterable[TransformerBlock], blocks):  # a ModuleList does not type its modules
            nn.init.normal_(block.attention.out_proj.weight, std=scaled)
            nn.init.normal_(block.feed_forward.fc_out.weight, std=scaled)

    def word_embeddings(self) -> nn.Embedding:
        """The token embedding table (a task resizes it when it adds tokens).

        Returns:
            The embedding.

        Raises:
            NotImplementedError: in this base class; each family implements it.
        """
        raise NotImplementedError

    def vocabulary_embeddings(self) -> list[nn.Embedding]:
        """The token tables, which a tied output layer may read as its matrix; int8 quantization keeps them int8.

        Returns:
            The tables; none by default.
        """
        return []

    def resize_token_embeddings(self, vocab_size: int, std: float = 0.02) -> None:
        """Grow the token embeddings to ``vocab_size`` rows: old rows unchanged, new ones N(0, std).

        GPT-1 adds its task tokens (start, delimiter, extract) this way. A tied output
        layer reads the same matrix, so it grows with it.

        Args:
            vocab_size: the rows wanted.
            std: the standard deviation of the new rows.

        Raises:
            PLMError: ``vocab_size`` below the current rows.
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
        """Distinct parameters (a tied embedding counts once).

        Returns:
            The number of parameter values.
        """
        return sum(p.numel() for p in self.parameters())

    @property
    def device(self) -> torch.device:
        """The device of the model's parameters."""
        return next(self.parameters()).device


def has_hooks(model: nn.Module) -> bool:
    """Whether a forward hook watches ``model`` or one of its modules (a step in C would not call it).

    Args:
        model: the model.

    Returns:
        True when a module of it, or every module (``register_module_forward_hook``), has a forward hook.
    """
    hooked = [nn.modules.module._global_forward_hooks, nn.modules.module._global_forward_pre_hooks]
    hooked += [hooks for module in model.modules() for hooks in (module._forward_hooks, module._forward_pre_hooks)]
    return any(hooked)


@dataclass
class CausalState:
    """A decoder-only model's decoding state: its caches and the padding of the history."""

    forward: Callable[..., Any]  # the model, or the model under torch.compile
    cache: list[KVCache] | None  # None: every step recomputes the whole history
    mask: torch.Tensor | None  # (batch, max_length), 0 at the prompt's left padding; None without padding
    cuda_graph: bool = False  # one-token steps over a static cache, replayed as a CUDA graph on a GPU
    static: StaticStep | None = None  # made at the first one-token step when cuda_graph is set
    native: NativeDecoder | None = None  # a few rows' one-token steps in C on the CPU (CausalLM.native_step)


class CausalLM(PretrainedModel):
    """A decoder-only language model: it can make a KV cache and decode (`Decoder`)."""

    task_pooling = "last"  # only the last token has seen the whole sequence (GPT-1's extract token)

    def context_length(self) -> int:
        """The most positions the model can take (prompt and new tokens together).

        Returns:
            The number of positions.

        Raises:
            NotImplementedError: in this base class; each family implements it.
        """
        raise NotImplementedError

    def new_cache(self, batch: int, max_length: int) -> list[KVCache]:
        """An empty KV cache per layer, for ``batch`` rows of at most ``max_length`` positions.

        Args:
            batch: the rows.
            max_length: the positions at most.

        Returns:
            The caches, one per layer.

        Raises:
            NotImplementedError: in this base class; each family implements it.
        """
        raise NotImplementedError

    def start_decoding(self, request: DecodingRequest) -> CausalState:
        """The state before the first step: a KV cache for ``request.max_length`` positions, the padding mask.

        Args:
            request: the prompt rows and the longest history (see
                [`DecodingRequest`][plm.decoding.interface.DecodingRequest]).

        Returns:
            The decoding state.

        Raises:
            PLMError: a source sentence given to a decoder-only model.
        """
        if request.source_ids is not None or request.source_mask is not None:
            raise PLMError(f"{with_article(self.family)} model continues a prompt; it takes no source sentence")
        prompt, prompt_mask, max_length = request.prompt, request.prompt_mask, request.max_length
        batch, prompt_length = prompt.shape
        mask = None
        if prompt_mask is not None and not bool(prompt_mask.all()):
            mask = prompt_mask.new_ones(batch, max_length)
            mask[:, :prompt_length] = prompt_mask
        cache = self.new_cache(batch, max_length) if request.use_cache else None
        native = None
        if (cache is not None and cache[0].keys.is_cpu and not (self.training or request.compile or request.cuda_graph)
                and not torch.is_autocast_enabled("cpu") and not has_hooks(self)):
            native = self.native_step(cache, mask)
        # compiled code is cached with the model's forward, so later calls reuse it
        return CausalState(torch.compile(self) if request.compile else self, cache, mask,
                           request.cuda_graph and cache is not None, native=native)

    def decode_step(self, history: torch.Tensor, state: CausalState) -> tuple[torch.Tensor, CausalState]:
        """The next-token logits after ``history``, reading only the tokens the cache has not seen yet.

        Args:
            history: (batch, length) every token so far.
            state: the decoding state.

        Returns:
            The (batch, vocab) next-token logits, and the state (its cache now holds ``history``).
        """
        start = state.cache[0].length if state.cache is not None else 0
        one_token = state.cache is not None and start > 0 and history.shape[1] == start + 1  # a step after the prompt's
        if one_token and state.native is not None and state.cache is not None:
            logits = state.native(history[:, start], start)
            for cache in state.cache:
                cache.length = start + 1
            return logits, state
        if one_token and state.cuda_graph and state.cache is not None:
            if state.static is None:
                on_gpu = self.device.type == "cuda"
                state.static = StaticStep(self.one_token_step, state.cache, state.mask, graph=on_gpu)
            return state.static(history[:, start:], start), state
        mask = state.mask[:, : history.shape[1]] if state.mask is not None else None
        logits = state.forward(history[:, start:], mask, cache=state.cache, num_logits=1).logits[:, -1]
        return logits, state

    def native_step(self, cache: list[KVCache], mask: torch.Tensor | None) -> NativeDecoder | None:
        """The model's one-token step in C ([`NativeDecoder`][plm.cpu.native_step.NativeDecoder]), or None.

        Decoding a few rows on the CPU takes it for every step after the prompt's, where it runs the same
        arithmetic as the model's forward without Python between the products; not in training mode (no
        dropout), under autocast, ``compile`` or ``cuda_graph``, nor while a hook watches a module. A family
        whose model the C step describes returns it; this base class has none.

        Args:
            cache: the caches the prompt's pass filled, one per layer.
            mask: (batch, max_length), 0 at the prompts' left padding, or None without padding.

        Returns:
            The step, or None: the model's forward runs every step.
        """
        return None

    def one_token_step(
        self, token: torch.Tensor, mask: torch.Tensor, position_ids: torch.Tensor, cache: Sequence[KVCache]
    ) -> torch.Tensor:
        """The (batch, vocab) logits after ``token`` (batch, 1) over static caches (`StaticStep`).

        Args:
            token: (batch, 1) each row's newest token.
            mask: (batch, max_length) 1 where a position holds a real token.
            position_ids: (batch, 1) the token's position.
            cache: the static caches, one per layer.

        Returns:
            The next token's logits.
        """
        return self(token, mask, position_ids=position_ids, cache=cache, num_logits=1).logits[:, -1]

    def reorder_state(self, state: CausalState, order: torch.Tensor) -> CausalState:
        """The state whose row i is row ``order[i]`` of ``state`` (its caches and padding mask).

        Args:
            state: the decoding state.
            order: the row of ``state`` each new row takes.

        Returns:
            The reordered state.
        """
        return CausalState(  # dynamic caches again: beam search's steps change their rows
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

        See [`generate`][plm.decoding.generation.generate] for the options.

        Args:
            input_ids: (batch, time) the prompts.
            max_new_tokens: the tokens to add.
            attention_mask: (batch, time), 0 at left padding, or None.
            **options: the sampling options.

        Returns:
            The prompts followed by the new tokens.
        """
        return generate(self, input_ids, max_new_tokens=max_new_tokens, attention_mask=attention_mask, **options)


class Seq2SeqModel(PretrainedModel):
    """An encoder-decoder: it encodes a source once and decodes a target ([`Decoder`][plm.decoding.interface.Decoder]).

    A family implements ``context_length``, ``start_decoding`` (which runs the encoder),
    ``decode_step`` and ``reorder_state``; greedy search, sampling and beam search then
    work as for a causal LM, with the source given as ``source_ids`` / ``source_mask``.
    """

    def context_length(self) -> int:
        """The most target positions the decoder can take.

        Returns:
            The number of positions.

        Raises:
            NotImplementedError: in this base class; each family implements it.
        """
        raise NotImplementedError

    def hypothesis_bytes(self, source_length: int, target_length: int) -> int:
        """About the bytes of decoding state one hypothesis holds (fp32), to bound a search by free memory.

        Args:
            source_length: the source tokens.
            target_length: the target tokens at most.

        Returns:
            The bytes.

        Raises:
            NotImplementedError: in this base class; each family implements it.
        """
        raise NotImplementedError

    def start_decoding(self, request: DecodingRequest) -> Any:
        """Check the sources against the target prefixes, then encode them (`start_from_source`).

        Args:
            request: the target prefixes, the longest history and the sources.

        Returns:
            The decoding state.

        Raises:
            PLMError: no sources, not as many sources as target prefixes, or padded target prefixes.
        """
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
        """The decoding state of a batch of sources (batch, source_length): the encoder runs here, once.

        Args:
            source_ids: (batch, source_length) the sources.
            source_mask: 0 at the padding of ``source_ids``, or None.
            max_length: the longest target history the steps will pass.
            use_cache: False recomputes the whole history at every step.
            compile: run the model through torch.compile.

        Returns:
            The decoding state.

        Raises:
            NotImplementedError: in this base class; each family implements it.
        """
        raise NotImplementedError

    def decode_step(self, history: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """The next-token logits after the target ``history`` (see [`Decoder`][plm.decoding.interface.Decoder]).

        Args:
            history: (batch, length) every target token so far.
            state: the decoding state.

        Returns:
            The (batch, vocab) next-token logits, and the new state.

        Raises:
            NotImplementedError: in this base class; each family implements it.
        """
        raise NotImplementedError

    def reorder_state(self, state: Any, order: torch.Tensor) -> Any:
        """The state whose row i is row ``order[i]`` of ``state`` (see [`Decoder`][plm.decoding.interface.Decoder]).

        Args:
            state: the decoding state.
            order: the row of ``state`` each new row takes.

        Returns:
            The reordered state.

        Raises:
            NotImplementedError: in this base class; each family implements it.
        """
        raise NotImplementedError
