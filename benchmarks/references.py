"""Reference models the benchmarks compare plm with, written on plain torch.nn: not plm's code, the oracle.

- ``TorchTransformer``: plm's Transformer shape on ``torch.nn.Transformer`` (bench_seq2seq's speed
  comparison), and ``TransformerReference``, the same with dropout and source padding masked, which
  trains in the quality suite;
- the RNN encoder-decoders as the papers and common tutorials write them, one shared bidirectional
  LSTM encoder: ``ContextVector`` (Cho et al. 2014), ``Bahdanau`` (Bahdanau et al. 2015) and
  ``LuongGeneral`` (Luong et al. 2015, general score, input feeding).

``build_reference(name, vocab)`` gives the reference of a plm seq2seq preset, of its sizes.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from plm.models import PRESETS


class TorchTransformer(nn.Module):
    """plm's Transformer shape on torch.nn.Transformer: shared embeddings scaled by sqrt(d), sinusoids, tied output."""

    def __init__(self, vocab: int, dim: int, layers: int, heads: int, ffn: int, context: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.transformer = nn.Transformer(dim, heads, layers, layers, ffn, dropout=0.0, batch_first=True)
        position = torch.arange(context)[:, None]
        frequencies = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))
        table = torch.zeros(context, dim)
        table[:, 0::2], table[:, 1::2] = torch.sin(position * frequencies), torch.cos(position * frequencies)
        self.register_buffer("positions", table)
        self.scale = math.sqrt(dim)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embedding(ids) * self.scale + self.positions[: ids.shape[1]]

    def forward(self, source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        causal = nn.Transformer.generate_square_subsequent_mask(target.shape[1])
        hidden = self.transformer(self.embed(source), self.embed(target), tgt_mask=causal, tgt_is_causal=True)
        return hidden @ self.embedding.weight.T


class BiLSTMEncoder(nn.Module):
    """Embeddings and a bidirectional LSTM over the packed source; H/2 units each way, so its states are H wide."""

    def __init__(self, vocab: int, embedding: int, hidden: int, layers: int, dropout: float) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, embedding)
        self.dropout = nn.Dropout(dropout)
        self.rnn = nn.LSTM(embedding, hidden // 2, layers, batch_first=True, dropout=dropout, bidirectional=True)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """ids, mask (B, S) -> states (B, S, H) and the final (h, c), each (layers, B, H)."""
        packed = pack_padded_sequence(self.dropout(self.embedding(ids)), mask.sum(1).cpu(), batch_first=True,
                                      enforce_sorted=False)
        states, (h, c) = self.rnn(packed)
        states = pad_packed_sequence(states, batch_first=True, total_length=ids.shape[1])[0]

        def both_directions(final: torch.Tensor) -> torch.Tensor:  # (layers * 2, B, H/2) -> (layers, B, H)
            return torch.cat([final[0::2], final[1::2]], dim=-1)

        return states, (both_directions(h), both_directions(c))


@dataclass
class RNNState:
    """hidden: the decoder's (h, c); memory (B, S, H) and mask (B, S) the source; extra: c (none), h~ (Luong)."""

    hidden: tuple[torch.Tensor, torch.Tensor]
    memory: torch.Tensor
    mask: torch.Tensor
    extra: torch.Tensor


class RNNReference(nn.Module):
    """The shared encoder and decoder LSTM; subclasses read the source their way in ``decode``."""

    def __init__(self, vocab: int, embedding: int, hidden: int, layers: int, dropout: float, reads: int) -> None:
        super().__init__()
        self.encoder = BiLSTMEncoder(vocab, embedding, hidden, layers, dropout)
        self.embedding = nn.Embedding(vocab, embedding)
        self.dropout = nn.Dropout(dropout)
        self.rnn = nn.LSTM(embedding + reads, hidden, layers, batch_first=True, dropout=dropout)

    def start(self, source: torch.Tensor, mask: torch.Tensor) -> RNNState:
        memory, hidden = self.encoder(source, mask)
        return RNNState(hidden, memory, mask.bool(), torch.zeros_like(hidden[0][-1]))

    def decode(self, tokens: torch.Tensor, state: RNNState) -> tuple[torch.Tensor, RNNState]:
        raise NotImplementedError

    def step(self, prefix: torch.Tensor, state: RNNState) -> tuple[torch.Tensor, RNNState]:
        """The next token's logits (B, V) after ``prefix`` (B, t), of which ``state`` has read all but the last."""
        logits, state = self.decode(prefix[:, -1:], state)
        return logits[:, -1], state

    def forward(self, source: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: (B, S), (B, T), (B, S) -> logits (B, T, V)."""
        return self.decode(target, self.start(source, mask))[0]


class ContextVector(RNNReference):
    """Cho et al. (2014): the source's one vector c (the encoder's top final state) at every step."""

    def __init__(self, vocab: int, embedding: int, hidden: int, layers: int, dropout: float) -> None:
        super().__init__(vocab, embedding, hidden, layers, dropout, reads=hidden)
        self.out = nn.Linear(2 * hidden + embedding, vocab)

    def start(self, source: torch.Tensor, mask: torch.Tensor) -> RNNState:
        state = super().start(source, mask)
        return dataclasses.replace(state, extra=state.hidden[0][-1])  # c (B, H)

    def decode(self, tokens: torch.Tensor, state: RNNState) -> tuple[torch.Tensor, RNNState]:
        words = self.dropout(self.embedding(tokens))  # (B, T, E)
        context = state.extra[:, None].expand(-1, tokens.shape[1], -1)  # (B, T, H)
        outputs, hidden = self.rnn(torch.cat([words, context], -1), state.hidden)
        logits = self.out(self.dropout(torch.cat([outputs, context, words], -1)))
        return logits, dataclasses.replace(state, hidden=hidden)


class Bahdanau(RNNReference):
    """Bahdanau et al. (2015): e_tj = v^T tanh(W s_{t-1} + U h_j); c_t is read with y_{t-1}."""

    def __init__(self, vocab: int, embedding: int, hidden: int, layers: int, dropout: float) -> None:
        super().__init__(vocab, embedding, hidden, layers, dropout, reads=hidden)
        self.W = nn.Linear(hidden, hidden, bias=False)
        self.U = nn.Linear(hidden, hidden)
        self.v = nn.Linear(hidden, 1, bias=False)
        self.out = nn.Linear(2 * hidden + embedding, vocab)

    def decode(self, tokens: torch.Tensor, state: RNNState) -> tuple[torch.Tensor, RNNState]:
        words = self.dropout(self.embedding(tokens))  # (B, T, E)
        keys = self.U(state.memory)  # (B, S, H), the same at every step
        hidden, outputs = state.hidden, []
        for t in range(tokens.shape[1]):
            scores = self.v(torch.tanh(self.W(hidden[0][-1])[:, None] + keys)).squeeze(-1)  # (B, S)
            weights = scores.masked_fill(~state.mask, -math.inf).softmax(-1)
            context = weights[:, None] @ state.memory  # (B, 1, H)
            output, hidden = self.rnn(torch.cat([words[:, t : t + 1], context], -1), hidden)
            outputs.append(torch.cat([output, context, words[:, t : t + 1]], -1))
        logits = self.out(self.dropout(torch.cat(outputs, 1)))
        return logits, dataclasses.replace(state, hidden=hidden)


class LuongGeneral(RNNReference):
    """Luong et al. (2015): e_tj = s_t^T W h_j, h~_t = tanh(W_c [c_t; s_t]), h~_t fed in at step t + 1."""

    def __init__(self, vocab: int, embedding: int, hidden: int, layers: int, dropout: float) -> None:
        super().__init__(vocab, embedding, hidden, layers, dropout, reads=hidden)
        self.W = nn.Linear(hidden, hidden, bias=False)
        self.W_c = nn.Linear(2 * hidden, hidden, bias=False)
        self.out = nn.Linear(hidden, vocab)

    def decode(self, tokens: torch.Tensor, state: RNNState) -> tuple[torch.Tensor, RNNState]:
        words = self.dropout(self.embedding(tokens))  # (B, T, E)
        keys = self.W(state.memory)  # (B, S, H)
        hidden, feed, attentional = state.hidden, state.extra, []
        for t in range(tokens.shape[1]):
            output, hidden = self.rnn(torch.cat([words[:, t], feed], -1)[:, None], hidden)  # s_t (B, 1, H)
            scores = (output @ keys.transpose(1, 2)).squeeze(1)  # (B, S)
            weights = scores.masked_fill(~state.mask, -math.inf).softmax(-1)
            context = weights[:, None] @ state.memory  # (B, 1, H)
            feed = torch.tanh(self.W_c(torch.cat([context, output], -1))).squeeze(1)  # h~_t (B, H)
            attentional.append(feed)
        logits = self.out(self.dropout(torch.stack(attentional, 1)))
        return logits, dataclasses.replace(state, hidden=hidden, extra=feed)


@dataclass
class TransformerState:
    memory: torch.Tensor  # the encoder's output (B, S, dim)
    padding: torch.Tensor  # (B, S) True at padding


class TransformerReference(TorchTransformer):
    """TorchTransformer with the preset's dropout (sub-layers and embeddings), the
    source padding masked, and embeddings N(0, d^-0.5) as fairseq's (its N(0, 1) times sqrt(d) would start every
    logit at a scale of 16)."""

    def __init__(self, vocab: int, dim: int, layers: int, heads: int, ffn: int, context: int, dropout: float) -> None:
        super().__init__(vocab, dim, layers, heads, ffn, context)
        for module in self.transformer.modules():
            if isinstance(module, nn.Dropout):
                module.p = dropout
        self.dropout = nn.Dropout(dropout)
        nn.init.normal_(self.embedding.weight, std=dim**-0.5)

    def start(self, source: torch.Tensor, mask: torch.Tensor) -> TransformerState:
        padding = mask == 0
        memory = self.transformer.encoder(self.dropout(self.embed(source)), src_key_padding_mask=padding)
        return TransformerState(memory, padding)

    def decode(self, target: torch.Tensor, state: TransformerState) -> torch.Tensor:
        causal = nn.Transformer.generate_square_subsequent_mask(target.shape[1])
        hidden = self.transformer.decoder(self.dropout(self.embed(target)), state.memory, tgt_mask=causal,
                                          tgt_is_causal=True, memory_key_padding_mask=state.padding)
        return hidden @ self.embedding.weight.T  # (B, T, V)

    def step(self, prefix: torch.Tensor, state: TransformerState) -> tuple[torch.Tensor, TransformerState]:
        return self.decode(prefix, state)[:, -1], state  # no cache: the whole prefix again

    def forward(self, source: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.decode(target, self.start(source, mask))


def build_reference(name: str, vocab: int) -> nn.Module:
    """The reference of plm preset ``name``, of the preset's sizes."""
    config = PRESETS[name]
    if name == "transformer-small":
        assert config.encoder_layers == config.decoder_layers, "nn.Transformer's layer counts are one"
        return TransformerReference(vocab, config.dim, config.encoder_layers, config.heads, config.ffn_dim,
                                    config.context_length, config.dropout)
    assert config.cell == "lstm" and config.bidirectional, "the references are bidirectional LSTMs"
    kind = {"rnn": ContextVector, "rnn-bahdanau": Bahdanau, "rnn-luong": LuongGeneral}[name]
    return kind(vocab, config.embedding_dim, config.hidden_dim, config.layers, config.dropout)
