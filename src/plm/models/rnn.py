"""The RNN encoder-decoder (Sutskever et al. 2014, Cho et al. 2014) and its attention (Bahdanau 2015, Luong 2015).

The encoder (GRU or LSTM, optionally bidirectional) reads the source; its final states,
bridged to the decoder's width, start the decoder. Three forms differ in what the
decoder reads of the source at each step:

- ``attention="none"``: the final encoder state c is the only context vector, read
  at every step beside the previous target token (the context-vector bottleneck);
- ``"bahdanau"``: the previous decoder state s_{t-1} scores every encoder state with a
  learned additive score, and the context c_t is read with the previous target token;
- ``"dot" | "general" | "concat"`` (Luong): the new decoder state s_t scores the encoder
  states; with ``input_feeding`` the attentional state of step t-1 is read at step t.

What feeds the output layer p(y_t) = softmax(W_s r_t) is each paper's own. Luong's forms
read the attentional state r_t = h~_t = tanh(W_c [c_t; s_t]) (which input feeding passes
on). Cho et al.'s and Bahdanau et al.'s read a deep output over the decoder state, the
previous target word and the context, a maxout of pairs of units:
r_t = maxout(W_o [s_t; E y_{t-1}; c_t]). Without the word and the direct path from the
state, the two learned far more slowly than a textbook model of the same size
(benchmarks/quality/seq2seq.py). A bidirectional encoder runs hidden_dim / 2 units each
way, so its states are hidden_dim wide like the decoder's.

[`RNNSeq2Seq.encode`][plm.models.rnn.RNNSeq2Seq.encode] reads the source once,
[`RNNSeq2Seq.decode`][plm.models.rnn.RNNSeq2Seq.decode] any number of target tokens from a state,
[`RNNState.reorder`][plm.models.rnn.RNNState.reorder] picks rows for beams; on these the model implements
[`Decoder`][plm.decoding.interface.Decoder], so greedy, sampling and beam search work.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from plm.errors import PLMError
from plm.models.base import Seq2SeqModel
from plm.models.recipe import Hyperparameters, PretrainingRecipe
from plm.models.rnn_attention import ALIGNMENTS, build_attention

CELLS = ("gru", "lstm")
EMBEDDING_INITS = ("normal", "uniform")
LUONG_SCORES = ("dot", "general", "concat")
ATTENTIONS = ("none", "bahdanau", *LUONG_SCORES)


@dataclass(frozen=True)
class RNNConfig:
    """The RNN encoder-decoder's shape and form.

    An unknown cell, embedding init or attention, input feeding without a Luong score, an odd ``hidden_dim``
    for a bidirectional encoder, or a size below 1 are a PLMError.

    Attributes:
        ADDED_FIELDS: fields added since models were first saved, with the value a model saved before them had.
        vocab_size: the target vocabulary, or the joint one when ``source_vocab_size`` is None.
        source_vocab_size: the source vocabulary, or None for one joint vocabulary.
        cell: "gru" or "lstm".
        embedding_dim: the width of the token embeddings.
        hidden_dim: the width of the encoder's (both directions together) and the decoder's states.
        layers: the layers of the encoder and of the decoder.
        bidirectional: the encoder reads both ways, hidden_dim / 2 units each.
        attention: "none", "bahdanau", or a Luong score: "dot", "general" or "concat".
        alignment: Luong's "global" attention over the whole source, or local over a window: "local-m" (at
            p_t = t) or "local-p" (at a predicted p_t, Gaussian-weighted); local only with a Luong score.
        window: D of local attention, the source words on each side of p_t (Luong et al.: 10).
        input_feeding: Luong's input feeding; only with a Luong score.
        dropout: the dropout on embeddings, between layers and before the output layer.
        embedding_init: "uniform": Luong et al.'s U(-0.1, 0.1), like every other parameter; "normal": N(0, 1),
            torch's default for a token table, which learns much faster with Adam at CPU budgets.
    """
    # How models saved before these fields existed were built.
    ADDED_FIELDS: ClassVar[dict[str, object]] = {"embedding_init": "uniform", "alignment": "global", "window": 10}

    vocab_size: int = 8192  # the target vocabulary, or the joint one when source_vocab_size is None
    source_vocab_size: int | None = None
    cell: str = "lstm"
    embedding_dim: int = 128
    hidden_dim: int = 256
    layers: int = 2
    bidirectional: bool = True
    attention: str = "general"
    alignment: str = "global"  # Luong's global, or local-m / local-p over a window of 2 * window + 1 words
    window: int = 10
    input_feeding: bool = True  # Luong's; only with a Luong score
    dropout: float = 0.1
    # "uniform": Luong et al.'s U(-0.1, 0.1), like every other parameter; "normal": N(0, 1), torch's default for
    # a token table. At CPU budgets the larger tables learn much faster with Adam: rnn on Multi30k at step 1,000,
    # validation NLL 3.49 against 3.62 and greedy BLEU 9.4 against 6.0 (benchmarks/quality/seq2seq.py).
    embedding_init: str = "normal"

    def __post_init__(self) -> None:
        if self.cell not in CELLS:
            raise PLMError(f"unknown RNN cell {self.cell!r}; choose one of {', '.join(CELLS)}")
        if self.embedding_init not in EMBEDDING_INITS:
            raise PLMError(
                f"unknown embedding_init {self.embedding_init!r}; choose one of {', '.join(EMBEDDING_INITS)}"
            )
        if self.attention not in ATTENTIONS:
            raise PLMError(f"unknown attention {self.attention!r}; choose one of {', '.join(ATTENTIONS)}")
        if self.input_feeding and self.attention not in LUONG_SCORES:
            raise PLMError(f"input feeding is Luong's; {self.attention!r} attention takes none")
        if self.alignment not in ALIGNMENTS:
            raise PLMError(f"unknown alignment {self.alignment!r}; choose one of {', '.join(ALIGNMENTS)}")
        if self.alignment != "global" and self.attention not in LUONG_SCORES:
            raise PLMError(f"local attention is Luong's; {self.attention!r} attention is global only")
        if self.window < 1:
            raise PLMError(f"window should be positive, got {self.window}")
        if self.bidirectional and self.hidden_dim % 2:
            raise PLMError(f"a bidirectional encoder splits hidden_dim in two; {self.hidden_dim} is odd")
        for name in ("embedding_dim", "hidden_dim"):
            if getattr(self, name) < 1:
                raise PLMError(f"{name} should be positive, got {getattr(self, name)}")


FORMS: dict[str, dict[str, Any]] = {
    "rnn": dict(attention="none", input_feeding=False),
    "rnn-bahdanau": dict(attention="bahdanau", input_feeding=False),
    "rnn-luong": dict(attention="general", input_feeding=True),
    # Luong et al.'s dot score, s_t . h_s: nothing learned in the score (their best global model scored "general").
    "rnn-luong-dot": dict(attention="dot", input_feeding=True),
    "rnn-luong-local-m": dict(attention="general", alignment="local-m", input_feeding=True),
    "rnn-luong-local-p": dict(attention="general", alignment="local-p", input_feeding=True),
}
# CPU presets, one per form and size: 2 LSTM layers of 128 (64 each way in the encoder) and embeddings of 64
# for quick runs; -base, 2 layers of 512 and embeddings of 256, for a data set such as Multi30k (the papers'
# own are 1,000 wide). The vocabularies follow the tokenizer they are trained with.
SIZES: dict[str, dict[str, Any]] = {
    "": dict(embedding_dim=64, hidden_dim=128, layers=2),
    "-base": dict(embedding_dim=256, hidden_dim=512, layers=2),
}
PRESETS = {name + size: RNNConfig(**form, **dims) for name, form in FORMS.items() for size, dims in SIZES.items()}

RECIPE = PretrainingRecipe(
    preset="rnn",
    tokenizer="bpe",
    objective="seq2seq",
    objectives=("seq2seq",),
    # CPU scale: Adam at a constant 1e-3 after a short warmup; no weight decay, as in both papers. An RNN
    # with attention sits on a loss plateau for 1,000 steps or more before it learns to align (reversing 4-9
    # digits); a decay (cosine to 1e-4: 0-15% exact match at step 1,500, against 100% at a constant rate) ends
    # the run before it leaves the plateau, so the rate stays up (Luong et al. only halved theirs late).
    hyperparameters=Hyperparameters(lr=1e-3, min_lr=1e-3, warmup=50, schedule="constant", betas=(0.9, 0.999),
                                    weight_decay=0.0),
    # Luong et al. trained with plain SGD (lr 1, halved every epoch after the fifth), which plm's optimizers do
    # not include; Bahdanau et al. used Adadelta. The Adam values are GNMT's (Wu et al. 2016), for the same models.
    paper=Hyperparameters(lr=2e-4, min_lr=2e-4, warmup=0, schedule="constant", betas=(0.9, 0.999), weight_decay=0.0),
    source="Luong et al. (2015) section 4.1; Adam values of GNMT (Wu et al. 2016) section 8.1",
    label_smoothing=0.0,  # neither Bahdanau et al. nor Luong et al. smooth labels (Szegedy et al. came a year later)
    translation_scale=None,  # the seed (004) gives no batch or length of the RNN papers' runs
)


@dataclass
class RNNState:
    """The decoder's state after the tokens read so far, and the source it attends to.

    Attributes:
        hidden: (h,) for a GRU or (h, c) for an LSTM, each (layers, B, H).
        memory: (B, S, H) the encoder states.
        keys: what the attention's score reads of them (its projection, computed once per source).
        mask: (B, S), True at real source tokens.
        summary: (B, H) the final encoder state (the no-attention form's context).
        feed: (B, H) the attentional state of the last step (Luong's input feeding).
        read: how many target tokens the state has read.
    """

    hidden: tuple[torch.Tensor, ...]
    memory: torch.Tensor
    keys: torch.Tensor
    mask: torch.Tensor
    summary: torch.Tensor
    feed: torch.Tensor
    read: int = 0

    def reorder(self, index: torch.Tensor) -> RNNState:
        """The state of rows ``index`` (new_B,): beams that survive, or each sentence repeated per beam.

        Args:
            index: (new_B,) the row each new row takes.

        Returns:
            The new state.
        """
        return RNNState(
            hidden=tuple(h.index_select(1, index) for h in self.hidden),
            memory=self.memory.index_select(0, index),
            keys=self.keys.index_select(0, index),
            mask=self.mask.index_select(0, index),
            summary=self.summary.index_select(0, index),
            feed=self.feed.index_select(0, index),
            read=self.read,
        )


@dataclass
class Seq2SeqOutput:
    """What the decoder gives for the target tokens it read.

    Attributes:
        logits: (B, T, target vocab), each position's next-token logits.
        attentions: (B, T, S) the attention weights, None without attention.
        state: the decoder's state after the last token.
    """

    logits: torch.Tensor
    attentions: torch.Tensor | None
    state: RNNState


class RNNSeq2Seq(Seq2SeqModel):
    """The RNN encoder-decoder (family ``rnn``), in the form its config names.

    Every parameter starts uniform in [-0.1, 0.1] (Luong et al.), the token tables N(0, 1) with
    ``embedding_init`` "normal".

    Args:
        config: the model's config.
    """
    family = "rnn"
    config_class = RNNConfig

    def __init__(self, config: RNNConfig) -> None:
        super().__init__(config)
        rnn = {"gru": nn.GRU, "lstm": nn.LSTM}[config.cell]
        hidden, directions = config.hidden_dim, 2 if config.bidirectional else 1
        between_layers = config.dropout if config.layers > 1 else 0.0
        self.source_embedding = nn.Embedding(config.source_vocab_size or config.vocab_size, config.embedding_dim)
        self.target_embedding = nn.Embedding(config.vocab_size, config.embedding_dim)
        self.dropout = nn.Dropout(config.dropout)
        self.encoder = rnn(config.embedding_dim, hidden // directions, config.layers, batch_first=True,
                           dropout=between_layers, bidirectional=config.bidirectional)
        states = 2 if config.cell == "lstm" else 1
        # s_0 = tanh(W [forward; backward final state]), per layer, for h (and c); a one-way encoder hands its over.
        self.bridge = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(states)) if config.bidirectional else None
        reads_context = config.attention not in LUONG_SCORES or config.input_feeding
        self.decoder = rnn(config.embedding_dim + (hidden if reads_context else 0), hidden, config.layers,
                           batch_first=True, dropout=between_layers)
        self.attention = (
            build_attention(config.attention, hidden, hidden, hidden, config.alignment, config.window)
            if config.attention != "none" else None
        )
        if config.attention in LUONG_SCORES:
            self.combine = nn.Linear(2 * hidden, hidden, bias=False)  # W_c over [c_t; s_t]
        else:  # W_o over [s_t; E y_{t-1}; c_t], two units per maxout
            self.deep_output = nn.Linear(2 * hidden + config.embedding_dim, 2 * hidden)
        self.output = nn.Linear(hidden, config.vocab_size)  # W_s
        for parameter in self.parameters():  # Luong et al.: every parameter uniform in [-0.1, 0.1]
            nn.init.uniform_(parameter, -0.1, 0.1)
        if config.embedding_init == "normal":
            for table in (self.source_embedding, self.target_embedding):
                nn.init.normal_(table.weight)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> RNNState:
        """Read the source (B, S), right-padded where ``attention_mask`` is 0; the state to decode from.

        The source is packed, so padding changes no state: the backward direction starts
        at each row's last real token and the final states are those of the real tokens.

        Args:
            input_ids: (B, S) source ids.
            attention_mask: (B, S), 1 = token, 0 = padding; or None.

        Returns:
            The decoder's initial state, with the encoder states to attend to.
        """
        batch, length = input_ids.shape
        mask = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
        lengths = mask.sum(1).clamp(min=1).cpu()  # an all-padding row reads one pad; its mask stays empty
        embedded = self.dropout(self.source_embedding(input_ids))
        packed, final = self.encoder(pack_padded_sequence(embedded, lengths, batch_first=True, enforce_sorted=False))
        memory = pad_packed_sequence(packed, batch_first=True, total_length=length)[0]  # (B, S, H)
        hidden = self.bridged(final if isinstance(final, tuple) else (final,))
        summary = hidden[0][-1]  # the top layer's final state, (B, H)
        keys = memory if self.attention is None else self.attention.project(memory)
        return RNNState(hidden, memory, keys, mask, summary, feed=torch.zeros_like(summary))

    def bridged(self, final: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """The encoder's final (h[, c]) as the decoder's initial state, each (layers, B, H).

        A bidirectional encoder's two directions are joined and mapped by tanh(W [forward; backward]); a one-way
        encoder's states are handed over as they are.

        Args:
            final: the encoder's final states, each (layers * directions, B, H / directions).

        Returns:
            The decoder's initial states.
        """
        if self.bridge is None:
            return final
        layers = self.config.layers
        joined = [  # (layers * 2, B, H/2) -> (layers, B, H): forward and backward side by side
            state.view(layers, 2, *state.shape[1:]).permute(0, 2, 1, 3).flatten(2) for state in final
        ]
        return tuple(torch.tanh(bridge(state)) for bridge, state in zip(self.bridge, joined))

    def run_decoder(self, inputs: torch.Tensor, hidden: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, tuple]:
        """The decoder RNN over a whole sequence of inputs.

        Args:
            inputs: (B, T, In) the inputs of every step.
            hidden: the state to start from, (h,) or (h, c), each (layers, B, H).

        Returns:
            The top layer's outputs (B, T, H) and the new state, (h,) or (h, c).
        """
        outputs, new = self.decoder(inputs, hidden if self.config.cell == "lstm" else hidden[0])
        return outputs, new if isinstance(new, tuple) else (new,)

    def step_decoder(self, inputs: torch.Tensor, hidden: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, tuple]:
        """One step of the decoder RNN, layer by layer: inputs (B, In) -> the top layer's output (B, H), new state.

        The same weights and arithmetic as ``run_decoder`` over one token (dropout between
        layers included), through torch's fused LSTM/GRU cell: a call of the whole
        ``nn.LSTM`` per token costs a third more in a step loop, backward included.

        Args:
            inputs: (B, In) the step's input.
            hidden: the state, (h,) or (h, c), each (layers, B, H).

        Returns:
            The top layer's output (B, H) and the new state.
        """
        decoder, lstm = self.decoder, self.config.cell == "lstm"
        new_h, new_c = [], []
        for layer in range(decoder.num_layers):
            if layer:
                inputs = nn.functional.dropout(inputs, decoder.dropout, self.training)
            weights = [
                getattr(decoder, f"{name}_l{layer}") for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
            ]
            if lstm:
                h, c = torch.lstm_cell(inputs, (hidden[0][layer], hidden[1][layer]), *weights)
                new_c.append(c)
            else:
                h = torch.gru_cell(inputs, hidden[0][layer], *weights)
            new_h.append(h)
            inputs = h
        return inputs, (torch.stack(new_h), torch.stack(new_c)) if lstm else (torch.stack(new_h),)

    def readout(self, context: torch.Tensor, output: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
        """r_t, what the output layer reads, from c_t, s_t and the previous word's embedding, each (B, T, .).

        Luong's forms read tanh(W_c [c_t; s_t]); the others a maxout over pairs of W_o [s_t; E y_{t-1}; c_t].

        Args:
            context: (B, T, H) the context vectors c_t.
            output: (B, T, H) the decoder states s_t.
            previous: (B, T, E) the embeddings of the previous target words.

        Returns:
            (B, T, H).
        """
        if self.config.attention in LUONG_SCORES:  # h~ = tanh(W_c [c; s]), which input feeding feeds back
            return torch.tanh(self.combine(torch.cat([context, output], dim=-1)))
        units = self.deep_output(torch.cat([output, previous, context], dim=-1))  # (B, T, 2H)
        return units.unflatten(-1, (-1, 2)).amax(-1)  # maxout over pairs: (B, T, H)

    def decode(self, tokens: torch.Tensor, state: RNNState) -> Seq2SeqOutput:
        """Read target tokens (B, T) from ``state``: their next-token logits, attention and the new state.

        Teacher forcing reads the whole shifted target at once; decoding reads one token
        per step. Both take the same path, so they give the same numbers. The forms whose
        step t needs step t-1's attention (Bahdanau, input feeding) run a loop over T;
        the others run the fused RNN over all T.

        Args:
            tokens: (B, T) target ids.
            state: the state to read them from.

        Returns:
            The logits (B, T, V), the attention (B, T, S) (None without attention) and the state after them.
        """
        config, memory, keys, mask = self.config, state.memory, state.keys, state.mask
        embedded = self.dropout(self.target_embedding(tokens))  # (B, T, E)
        time = tokens.shape[1]
        weights = None
        attention = self.attention  # None when config.attention is "none"
        if attention is None:
            contexts = state.summary[:, None].expand(-1, time, -1)  # (B, T, H), the same c at every step
            outputs, hidden = self.run_decoder(torch.cat([embedded, contexts], -1), state.hidden)
            attended, feed = self.readout(contexts, outputs, embedded), state.feed
        elif not (config.attention == "bahdanau" or config.input_feeding):
            outputs, hidden = self.run_decoder(embedded, state.hidden)
            positions = torch.arange(state.read, state.read + time, device=tokens.device)  # local-m's p_t = t
            contexts, weights = attention(outputs, memory, mask, keys, positions)
            attended, feed = self.readout(contexts, outputs, embedded), state.feed
        else:
            hidden, feed, steps, step_weights = state.hidden, state.feed, [], []
            for t in range(time):
                token = embedded[:, t : t + 1]  # (B, 1, E)
                if config.attention == "bahdanau":  # s_{t-1} chooses what to read
                    context, weight = attention(hidden[0][-1][:, None], memory, mask, keys)
                    output, hidden = self.step_decoder(torch.cat([token, context], -1)[:, 0], hidden)
                    output = output[:, None]  # (B, 1, H)
                else:  # Luong: read h~_{t-1}, then s_t chooses
                    output, hidden = self.step_decoder(torch.cat([token[:, 0], feed], -1), hidden)
                    output = output[:, None]
                    position = torch.tensor([state.read + t], device=tokens.device)  # local-m's p_t = t
                    context, weight = attention(output, memory, mask, keys, position)
                step = self.readout(context, output, token)  # (B, 1, H)
                feed = step[:, 0]
                steps.append(step)
                step_weights.append(weight)
            attended, weights = torch.cat(steps, 1), torch.cat(step_weights, 1)
        logits = self.output(self.dropout(attended))  # (B, T, target vocab)
        return Seq2SeqOutput(logits, weights, replace(state, hidden=hidden, feed=feed, read=state.read + time))

    def forward(
        self, source_ids: torch.Tensor, target_ids: torch.Tensor, source_mask: torch.Tensor | None = None
    ) -> Seq2SeqOutput:
        """Teacher forcing: the logits predicting each next token of the target, and the attention.

        Args:
            source_ids: (B, S) source ids.
            target_ids: (B, T) the target shifted right, starting with the start token.
            source_mask: (B, S), 0 at padding; or None.

        Returns:
            Logits (B, T, V), attention (B, T, S) (None without attention) and the final state.
        """
        return self.decode(target_ids, self.encode(source_ids, source_mask))

    # The decoding interface (plm.decoding.Decoder). The state is the RNN's own (h[, c]): there is
    # no cache to turn off and no position limit, so use_cache and compile change nothing here.

    def context_length(self) -> int:
        """The most target positions: unbounded, since an RNN has no positions.

        Returns:
            2**30.
        """
        return 1 << 30  # an RNN has no positions: any target length fits

    def hypothesis_bytes(self, source_length: int, target_length: int) -> int:
        """About the bytes one hypothesis holds (fp32): the encoder states and their keys, (h, c) per layer, the feed.

        Args:
            source_length: the source tokens.
            target_length: the target tokens at most (the state does not grow with them).

        Returns:
            The bytes.
        """
        # The encoder states and what the attention reads of them, the (h, c) of every layer, the feed.
        hidden = self.config.hidden_dim
        return 4 * hidden * (2 * source_length + 2 * self.config.layers + 2)

    def start_from_source(
        self, source_ids: torch.Tensor, source_mask: torch.Tensor | None, max_length: int, *, use_cache: bool,
        compile: bool,
    ) -> RNNState:
        """The decoding state of a batch of sources: [`encode`][plm.models.rnn.RNNSeq2Seq.encode].

        Args:
            source_ids: (batch, source_length) the sources.
            source_mask: 0 at the padding of ``source_ids``, or None.
            max_length: the longest target history (no limit here).
            use_cache: changes nothing: the state is the RNN's own.
            compile: changes nothing here.

        Returns:
            The decoding state.
        """
        return self.encode(source_ids, source_mask)

    def decode_step(self, history: torch.Tensor, state: RNNState) -> tuple[torch.Tensor, RNNState]:
        """Read the tokens of ``history`` (B, length) that ``state`` has not; the next token's logits (B, V).

        Args:
            history: (B, length) every target token so far.
            state: the decoding state.

        Returns:
            The next-token logits (B, V) and the new state.
        """
        step = self.decode(history[:, state.read :], state)
        return step.logits[:, -1], step.state

    def reorder_state(self, state: RNNState, order: torch.Tensor) -> RNNState:
        """The state whose row i is row ``order[i]`` of ``state``.

        Args:
            state: the decoding state.
            order: the row of ``state`` each new row takes.

        Returns:
            The reordered state.
        """
        return state.reorder(order)
