"""The Transformer (Vaswani et al., 2017): an encoder-decoder built from attention alone.

What the paper specifies, and all this module holds (the blocks are the core's):

- an encoder of N blocks (self-attention, feed-forward) and a decoder of N blocks
  (masked self-attention, encoder-decoder attention over the encoder's output, then
  feed-forward); post-LN: every sub-layer is LayerNorm(x + Dropout(Sublayer(x)));
  FFN(x) = max(0, x W_1 + b_1) W_2 + b_2;
- fixed sinusoidal positions added to the embeddings, which are multiplied by
  sqrt(d_model) first; dropout on that sum;
- with a joint (shared BPE) vocabulary, one matrix is the source embedding, the
  target embedding and the pre-softmax projection (``source_vocab_size`` None);
  with separate vocabularies the source has its own embedding and the target
  embedding still serves as the pre-softmax projection.

Sizes (Table 3): base N = 6, d_model 512, d_ff 2048, h = 8, P_drop 0.1; big d_model
1024, d_ff 4096, h = 16, P_drop 0.3. With the 37,000-token joint vocabulary of WMT
English-German, base has 63.1M parameters and big 214.2M (the paper rounds them
to 65M and 213M).

Released translation models change a few of these choices, each a field of
[`TransformerConfig`][plm.models.transformer.TransformerConfig] whose default is the paper's: Marian (``MarianMTModel``)
has swish feed-forward layers, sines and cosines in two halves of its position table, a fixed bias on the logits and
starts decoding from its padding token; fairseq's models (``FSMTForConditionalGeneration``) number positions from the
padding index + 1 with tensor2tensor's frequencies, and have separate source and target vocabularies and an output
projection of their own. [`plm.hf.marian`][plm.hf.marian] and [`plm.hf.fsmt`][plm.hf.fsmt] read and write them.

Decoding implements [`Decoder`][plm.decoding.interface.Decoder]: the encoder runs once per source
sentence, each decoder layer's encoder-decoder attention computes the keys and values
of its output once, and the masked self-attention keeps a KV cache.

A variant with another attention overrides the hooks every family's blocks share:
[`build_attention`][plm.models.base.PretrainedModel.build_attention] for the self-attention of both stacks,
[`build_cross_attention`][plm.models.base.PretrainedModel.build_cross_attention] for the decoder's
encoder-decoder attention.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar, cast

import torch
from torch import nn

from plm.core import (
    BlockConfig,
    CausalLMOutput,
    KVCache,
    SinusoidalPositions,
    TransformerBlock,
    build_attention_mask,
    run_blocks,
)
from plm.core.embeddings import check_context
from plm.cpu.linear import Linear, linear
from plm.decoding.generation_config import GenerationConfig
from plm.errors import PLMError
from plm.models.base import Seq2SeqModel
from plm.models.recipe import Hyperparameters, PaperSettings, PretrainingRecipe, TranslationScale


@dataclass(frozen=True)
class TransformerConfig:
    """Transformer-base by default.

    The paper's dropout is on sub-layer outputs and embeddings (``dropout``); it names none inside attention
    (``attention_dropout`` 0). The fields from ``sinusoids`` on are the paper's by default; released
    translation models set them otherwise (Marian, fairseq: see the module's docstring).

    Attributes:
        vocab_size: the target vocabulary, or the joint one when ``source_vocab_size`` is None.
        source_vocab_size: the source vocabulary, or None for one joint vocabulary (one shared matrix).
        context_length: the longest source or target sentence (the sinusoid table's rows from ``first_position``).
        dim: d_model.
        encoder_layers: N of the encoder.
        decoder_layers: N of the decoder.
        heads: h, attention heads per layer.
        ffn_dim: d_ff.
        activation: the feed-forward activation (the paper's "relu"; Marian's swish is "silu").
        norm_first: pre-LN blocks (with a final LayerNorm per stack); False: the paper's post-LN.
        norm_eps: the LayerNorms' epsilon.
        dropout: P_drop, on sub-layer outputs and embeddings.
        attention_dropout: the dropout on attention weights.
        sinusoids: the position table's layout (`SINUSOID_LAYOUTS`): the paper's
            "interleaved" sines and cosines, Marian's "concatenated" halves, or fairseq's "tensor2tensor" halves.
        first_position: the position of a sentence's first token (fairseq: its padding index + 1; the table
            holds ``context_length + first_position`` rows). Above 0, the id ``first_position - 1`` is padding
            wherever it stands, as in fairseq: positions count the other tokens only, and the decoder does not
            attend to it.
        scale_embeddings: multiply the token embeddings by sqrt(d_model) before adding the positions.
        tied_output: the pre-softmax projection is the target embedding; False: a matrix of its own (fairseq's
            ``output_projection``).
        logits_bias: add a fixed bias (a buffer, not trained) to the logits, as Marian's ``final_logits_bias``.
        decoder_start_id: the target token decoding starts from (Marian: its padding token; fairseq: ``</s>``);
            None: the target tokenizer's ``bos``.
        suppressed_ids: target tokens decoding never chooses (their logits are -inf at every decoding step, not
            in training): Marian's padding token, which its conversion added with a zero embedding.
        ADDED_FIELDS: fields added since models were first saved, with the value a model saved before them had.
    """

    ADDED_FIELDS: ClassVar[dict[str, object]] = {
        "sinusoids": "interleaved",
        "first_position": 0,
        "scale_embeddings": True,
        "tied_output": True,
        "logits_bias": False,
        "decoder_start_id": None,
        "suppressed_ids": (),
    }

    vocab_size: int = 37000
    source_vocab_size: int | None = None
    context_length: int = 1024
    dim: int = 512
    encoder_layers: int = 6
    decoder_layers: int = 6
    heads: int = 8
    ffn_dim: int = 2048
    activation: str = "relu"
    norm_first: bool = False
    norm_eps: float = 1e-5
    dropout: float = 0.1
    attention_dropout: float = 0.0
    sinusoids: str = "interleaved"
    first_position: int = 0
    scale_embeddings: bool = True
    tied_output: bool = True
    logits_bias: bool = False
    decoder_start_id: int | None = None
    suppressed_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.first_position < 0:
            raise PLMError(f"first_position must be >= 0, got {self.first_position}")

    @property
    def joint_vocabulary(self) -> bool:
        """Whether source and target share one vocabulary (and one embedding matrix)."""
        return self.source_vocab_size is None

    @property
    def encoder_block(self) -> BlockConfig:
        """The shape of an encoder block."""
        return BlockConfig.of(self)

    @property
    def decoder_block(self) -> BlockConfig:
        """The shape of a decoder block: an encoder block's, with encoder-decoder attention."""
        return dataclasses.replace(BlockConfig.of(self), cross_attention=True)


BIG = TransformerConfig(dim=1024, ffn_dim=4096, heads=16, dropout=0.3)

PRESETS = {
    "transformer-base": TransformerConfig(),
    "transformer-big": BIG,
    # Small ones for CPU work; the vocabulary follows the tokenizer they are trained with.
    "transformer-small": TransformerConfig(
        vocab_size=8000, context_length=256, dim=256, encoder_layers=3, decoder_layers=3, heads=4, ffn_dim=1024
    ),
    "transformer-micro": TransformerConfig(
        vocab_size=512, context_length=64, dim=32, encoder_layers=2, decoder_layers=2, heads=2, ffn_dim=128
    ),
}

WARMUP = 4000  # the paper's warmup_steps (section 5.3; seed 000, the Transformer's section 5 table)


def paper_by_size(config: TransformerConfig) -> PaperSettings:
    """The paper's training of a model: its learning rate from the model's own d_model, and base's or big's steps.

    Adam, beta1 0.9, beta2 0.98, eps 1e-9; lrate = d_model^-0.5 min(step^-0.5, step warmup^-1.5) with warmup 4000
    (section 5.3), which peaks at d_model^-0.5 4000^-0.5 at step 4000: 6.99e-4 for base's d_model of 512, 4.94e-4
    for big's 1024 (Table 3). No weight decay is mentioned. Batches of about 25,000 source and 25,000 target tokens
    (section 5.1; the seed's "Batch size 25000"); base trained for 100,000 steps and big for 300,000 (section 5.2;
    seed 000's table in the Transformer's section 5 says the same). A model as wide as big takes big's steps, any
    other base's.

    Args:
        config: the model's config.

    Returns:
        The optimizer, its schedule and the run of a model of ``config``.
    """
    return PaperSettings(
        paper=Hyperparameters(lr=config.dim**-0.5 * WARMUP**-0.5, min_lr=0.0, warmup=WARMUP, schedule="inverse-sqrt",
                              betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0),
        source="Attention Is All You Need (Vaswani et al., 2017) section 5.3",
        translation_scale=TranslationScale(batch_tokens=2 * 25_000, steps=300_000 if config.dim >= BIG.dim else 100_000,
                                           source="Attention Is All You Need sections 5.1-5.2"),
    )


_BASE = paper_by_size(PRESETS["transformer-base"])

RECIPE = PretrainingRecipe(
    preset="transformer-small",
    tokenizer="bpe",
    objective="seq2seq",
    objectives=("seq2seq",),
    # CPU scale: a short warmup to the peak that d_model = 256 and 4000 warmup steps would reach.
    hyperparameters=Hyperparameters(
        lr=1e-3, min_lr=0.0, warmup=200, schedule="inverse-sqrt", betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0
    ),
    paper=_BASE.paper,  # base's; every model takes those of its own d_model and size (paper_by_size)
    source=_BASE.source,
    translation_scale=_BASE.translation_scale,
    paper_by_size=paper_by_size,
    # Section 6.1: beam search with a beam of 4 and length penalty alpha 0.6, at most input length + 50 tokens.
    decoding=GenerationConfig(num_beams=4, length_penalty=0.6, max_len_a=1.0, max_new_tokens=50),
    label_smoothing=0.1,  # section 5.4: epsilon_ls = 0.1
)


@dataclass
class TransformerState:
    """The decoding state of a batch of sources.

    Beams of one sentence share its memory: ``sources`` says which source each row decodes.

    Attributes:
        memory_mask: (B, 1, 1, S), None when no source is padded.
        memory: the encoder's output (B, S, dim), or each decoder layer's keys and values of it.
        caches: one self-attention cache per decoder block; None: every step reruns the whole target.
        sources: (B,) the source sentence of each row.
    """

    memory_mask: torch.Tensor | None  # (B, 1, 1, S), None when no source is padded
    memory: torch.Tensor | list[KVCache]  # the encoder's output (B, S, dim), or each layer's keys/values of it
    caches: list[KVCache] | None  # one per decoder block; None: every step reruns the whole target
    sources: torch.Tensor  # (B,) the source sentence of each row


class Transformer(Seq2SeqModel):
    """The Transformer encoder-decoder (family ``transformer``).

    Args:
        config: the model's config.
    """
    family = "transformer"
    config_class = TransformerConfig

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__(config)
        self.target_embedding = nn.Embedding(config.vocab_size, config.dim)
        self.source_embedding = (
            None if config.source_vocab_size is None else nn.Embedding(config.source_vocab_size, config.dim)
        )
        self.output_projection = None if config.tied_output else Linear(config.dim, config.vocab_size, bias=False)
        self.logits_bias: torch.Tensor | None
        self.register_buffer("logits_bias", torch.zeros(config.vocab_size) if config.logits_bias else None)
        self.positions = SinusoidalPositions(
            config.first_position + config.context_length, config.dim, config.sinusoids
        )
        self.embedding_dropout = nn.Dropout(config.dropout)
        self.encoder_blocks = nn.ModuleList(
            self.build_block(config, config.encoder_block) for _ in range(config.encoder_layers)
        )
        self.decoder_blocks = nn.ModuleList(
            self.build_block(config, config.decoder_block) for _ in range(config.decoder_layers)
        )
        # Pre-LN stacks end in a LayerNorm; the paper's post-LN blocks already end in one.
        self.encoder_norm = nn.LayerNorm(config.dim, eps=config.norm_eps) if config.norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(config.dim, eps=config.norm_eps) if config.norm_first else nn.Identity()
        self.init_transformer_weights()

    def init_transformer_weights(self) -> None:
        """Glorot-uniform matrices and zero biases (as tensor2tensor, fairseq and torch.nn.Transformer).

        Embeddings are N(0, d^-0.5), so that after the sqrt(d) scaling their entries have unit variance.
        """
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=self.config.dim**-0.5)

    def vocabulary_embeddings(self) -> list[nn.Embedding]:
        """The token tables: the target embedding (the pre-softmax matrix too, when tied), and the source's if any.

        Returns:
            The tables.
        """
        return [self.target_embedding] + ([self.source_embedding] if self.source_embedding is not None else [])

    def context_length(self) -> int:
        """The most target positions: the sinusoid table's rows from ``first_position``.

        Returns:
            ``config.context_length``.
        """
        return self.config.context_length

    def hypothesis_bytes(self, source_length: int, target_length: int) -> int:
        """About the bytes one hypothesis holds (fp32), to bound a search by free memory.

        That is the encoder's output and, per decoder layer, the encoder-decoder attention's keys and values of it
        and the self-attention's cache of the target.

        Args:
            source_length: the source tokens.
            target_length: the target tokens at most.

        Returns:
            The bytes.
        """
        # The encoder's output, and per decoder layer the cross-attention's keys and values of it and the
        # self-attention's cache of the target.
        config = self.config
        return 4 * config.dim * (source_length + 2 * config.decoder_layers * (source_length + target_length))

    def embed(self, ids: torch.Tensor, embedding: nn.Embedding, start: int) -> torch.Tensor:
        """Dropout(sqrt(d) E[ids] + PE[first + start .. first + start + T - 1]): (B, T) -> (B, T, dim).

        Without ``scale_embeddings`` the factor is 1; ``first`` is ``config.first_position``. A pass over whole
        sentences (``start`` 0) of a model with a padding index numbers them as fairseq does instead (see
        [`real_tokens`][plm.models.transformer.Transformer.real_tokens]): the n-th token that is not the padding
        index takes PE[first + n - 1], and the padding index a zero vector, wherever it stands, so that a
        left-padded sentence starts at ``first`` too. Decoding steps after the first are numbered by place, as
        fairseq's incremental decoding numbers them.

        Args:
            ids: (B, T) token ids.
            embedding: the source or target embedding.
            start: the index of the first id in its sentence.

        Returns:
            (B, T, dim).

        Raises:
            PLMError: positions past the context.
        """
        config = self.config
        check_context(start + ids.shape[1], config.context_length)
        first = config.first_position + start
        real = self.real_tokens(ids) if not start else None
        if real is None:
            positions = self.positions.table[first : first + ids.shape[1]]  # (T, dim), the same for every row
        else:
            counted = (real.cumsum(dim=1) - 1).clamp(min=0)  # (B, T): how many real tokens precede each one
            positions = self.positions.table[first + counted] * real[..., None]  # (B, T, dim)
        scale = config.dim**0.5 if config.scale_embeddings else 1.0
        return self.embedding_dropout(embedding(ids) * scale + positions)

    def real_tokens(self, ids: torch.Tensor) -> torch.Tensor | None:
        """(B, T) True where ``ids`` holds no padding index; None for a model without one.

        fairseq numbers positions from its padding index + 1 (``first_position`` above 0) and takes that index
        for padding wherever it stands in a sentence: it is not counted as a position, and the decoder's
        self-attention hides it.

        Args:
            ids: (B, T) token ids.

        Returns:
            The mask, or None when ``first_position`` is 0.
        """
        return ids != self.config.first_position - 1 if self.config.first_position else None

    def encode(
        self, source_ids: torch.Tensor, source_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The encoder's output (B, S, dim) and the mask (B, 1, 1, S) that hides the source's padding from attention.

        Args:
            source_ids: (B, S) source ids.
            source_mask: (B, S), 1 for tokens and 0 for padding (on the right); or None.

        Returns:
            The encoder's output and the mask (None when nothing is padded).

        Raises:
            PLMError: a source longer than the context.
        """
        time = source_ids.shape[1]
        embedding = self.source_embedding if self.source_embedding is not None else self.target_embedding
        mask, _ = build_attention_mask(source_mask, time, time, causal=False)
        memory = self.encoder_norm(run_blocks(self.encoder_blocks, self.embed(source_ids, embedding, 0), mask))
        memory_mask, _ = build_attention_mask(source_mask, 1, time, causal=False)  # broadcasts over queries
        return memory, memory_mask

    def decode(
        self,
        target_ids: torch.Tensor,
        memory: torch.Tensor | list[KVCache],
        memory_mask: torch.Tensor | None,
        caches: list[KVCache] | None = None,
    ) -> torch.Tensor:
        """The decoder's output (B, T, dim) for ``target_ids`` (B, T), each position seeing only earlier ones.

        With ``caches`` the ids are the newest tokens after those already cached. A pass over whole sentences of
        a model with a padding index hides that index from the self-attention, as fairseq does
        ([`real_tokens`][plm.models.transformer.Transformer.real_tokens]).

        Args:
            target_ids: (B, T) target ids.
            memory: the encoder's output (B, S, dim), or each layer's keys and values of it.
            memory_mask: (B, 1, 1, S), or None.
            caches: one self-attention cache per decoder block, or None.

        Returns:
            (B, T, dim).

        Raises:
            PLMError: positions past the context.
        """
        past = caches[0].length if caches else 0
        time = target_ids.shape[1]
        padding = self.real_tokens(target_ids) if not past else None
        mask, is_causal = build_attention_mask(padding, time, past + time, causal=True)
        hidden = run_blocks(
            self.decoder_blocks,
            self.embed(target_ids, self.target_embedding, past),
            mask,
            is_causal=is_causal,
            caches=caches,
            memory=memory,
            memory_mask=memory_mask,
        )
        return self.decoder_norm(hidden)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The next-token logits of the decoder's output: (..., dim) -> (..., V).

        Args:
            hidden: (..., dim) the decoder's output.

        Returns:
            (..., V) the logits: the pre-softmax projection (the target embedding when tied), plus the fixed bias.
        """
        if self.output_projection is None:
            logits = linear(hidden, self.target_embedding.weight)
        else:
            logits = self.output_projection(hidden)
        return logits if self.logits_bias is None else logits + self.logits_bias

    def forward(
        self,
        source_ids: torch.Tensor,
        target_ids: torch.Tensor,
        source_mask: torch.Tensor | None = None,
    ) -> CausalLMOutput:
        """Teacher forcing: source (B, S) with ``source_mask`` (0 = padding), target input (B, T) -> logits (B, T, V).

        ``target_ids`` starts with the start token; logits at position t predict token t + 1.
        Padding at the end of a target changes no earlier position.

        Args:
            source_ids: (B, S) source ids.
            target_ids: (B, T) the target shifted right.
            source_mask: (B, S), 1 = token, 0 = padding; or None.

        Returns:
            The decoder's output (B, T, dim) as ``last_hidden_state`` and the logits (B, T, V).

        Raises:
            PLMError: a source or target longer than the context.
        """
        memory, memory_mask = self.encode(source_ids, source_mask)
        hidden = self.decode(target_ids, memory, memory_mask)
        return CausalLMOutput(last_hidden_state=hidden, logits=self.logits(hidden))

    # plm.decoding.Decoder -----------------------------------------------------------------

    def start_from_source(
        self, source_ids: torch.Tensor, source_mask: torch.Tensor | None, max_length: int, *, use_cache: bool,
        compile: bool,
    ) -> TransformerState:
        """The decoding state of a batch of sources: the encoder runs here, once.

        With ``use_cache``, each decoder layer's encoder-decoder keys and values are computed here and an empty
        self-attention cache of ``max_length`` positions is made per layer.

        Args:
            source_ids: (batch, source_length) the sources.
            source_mask: 0 at the padding of ``source_ids``, or None.
            max_length: the longest target history the steps will pass.
            use_cache: False recomputes the whole history at every step.
            compile: must be False: the Transformer decodes eagerly.

        Returns:
            The decoding state.

        Raises:
            PLMError: ``compile``, or a ``max_length`` or source past the context.
        """
        if compile:
            raise PLMError("compile is for decoder-only models; the Transformer decodes eagerly")
        check_context(max_length, self.config.context_length)
        memory, memory_mask = self.encode(source_ids, source_mask)
        sources = torch.arange(source_ids.shape[0], device=source_ids.device)
        if not use_cache:
            return TransformerState(memory_mask, memory, None, sources)
        weight = self.target_embedding.weight
        head_dim = self.config.dim // self.config.heads
        caches = [
            KVCache.empty(source_ids.shape[0], self.config.heads, max_length, head_dim, weight.dtype, weight.device)
            for _ in self.decoder_blocks
        ]
        memory_caches = []
        for block in cast(Iterable[TransformerBlock], self.decoder_blocks):  # a ModuleList does not type its modules
            assert block.cross_attention is not None  # a decoder block attends to the encoder's output
            memory_caches.append(block.cross_attention.memory_cache(memory))
        return TransformerState(memory_mask, memory_caches, caches, sources)

    def decode_step(self, history: torch.Tensor, state: TransformerState) -> tuple[torch.Tensor, TransformerState]:
        """The next-token logits after the target ``history``, reading only the tokens not yet cached.

        The ``suppressed_ids`` get -inf, so that no search chooses them.

        Args:
            history: (B, length) every target token so far.
            state: the decoding state (its caches grow in place).

        Returns:
            The next-token logits (B, V) and the state.
        """
        start = state.caches[0].length if state.caches is not None else 0
        hidden = self.decode(history[:, start:], state.memory, state.memory_mask, state.caches)
        logits = self.logits(hidden[:, -1])  # (B, V)
        if self.config.suppressed_ids:
            logits[:, list(self.config.suppressed_ids)] = -torch.inf
        return logits, state

    def reorder_state(self, state: TransformerState, order: torch.Tensor) -> TransformerState:
        """The state whose row i is row ``order[i]`` of ``state``.

        When every row still decodes the source it did (beams reordered within each sentence), only the
        self-attention caches are copied.

        Args:
            state: the decoding state.
            order: (B,) the row of ``state`` each new row takes.

        Returns:
            The reordered state.
        """
        sources = state.sources[order]
        caches = [layer.reorder(order) for layer in state.caches] if state.caches is not None else None
        if torch.equal(sources, state.sources):
            # Every row still decodes the source it did (beam search reordering the beams of each sentence):
            # its memory and mask are already in place, so the step copies only the self-attention caches.
            return TransformerState(state.memory_mask, state.memory, caches, sources)
        memory = state.memory
        return TransformerState(
            state.memory_mask.index_select(0, order) if state.memory_mask is not None else None,
            [layer.reorder(order) for layer in memory] if isinstance(memory, list) else memory.index_select(0, order),
            caches,
            sources,
        )
