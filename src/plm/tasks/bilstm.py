"""The feature-based approach (BERT section 5.3, ELMo section 3.3): frozen per-word features, a BiLSTM over them.

BERT's NER experiment takes, for each word, the first sub-word's vectors from
chosen layers of the frozen model and combines them (the last four concatenated,
their sum, or ELMo's learned scalar mix), then a two-layer BiLSTM and a linear
layer tag the words. The BiLSTM reads any number of feature *sources*, each a
(batch, layers, words, dim) tensor: BERT's layers from
[`encoder_word_features`][plm.tasks.bilstm.encoder_word_features], ELMo's ``model.embed(sentences)`` (batch, L+1, words,
dim), or per-word features of any other kind with one layer; each source is combined on its own and the results are
concatenated. ELMo's tasks use the same reader with other ends: a sequence's states max- and mean-pooled for a class
([`max_mean_pool`][plm.tasks.bilstm.max_mean_pool]), and ELMo again at the BiLSTM's output, [h_k; ELMo_k], through a
scalar mix of its own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast

import torch
from torch import nn

from plm.errors import PLMError
from plm.models.pretraining_heads import mean_pool
from plm.models.scalar_mix import ScalarMix
from plm.tasks.encoding import first_pieces

COMBINATIONS = ("concat", "sum", "mix")
# BERT section 5.3's BiLSTM: "randomly initialised, 768-dimensional, 2 layers". The paper does not say per direction
# or both; read here as each direction's hidden size (nn.LSTM's hidden_size; the states are 2 x 768 wide), the way
# the seed sizes ELMo's biLSTM (4096 units, a 512-dimensional projection), whose sizes are each direction's (plm's
# ElmoConfig: its layers' outputs are 2 x projection_dim wide).
BERT_LSTM_DIM = 768


@dataclass(frozen=True)
class MixOptions:
    """ELMo's options for a scalar mix (Peters et al., 2018, section 3.2).

    A dropout outside [0, 1) or an ``l2`` that is negative or not finite is a PLMError.

    Attributes:
        layer_norm: normalise each layer before the mix.
        dropout: the dropout on the mix.
        l2: lambda of the penalty lambda * ||s||^2 added to the task loss (0: none).
    """

    layer_norm: bool = False
    dropout: float = 0.0
    l2: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.dropout < 1:
            raise PLMError(f"the scalar mix's dropout must be in [0, 1), got {self.dropout}")
        if not (math.isfinite(self.l2) and self.l2 >= 0):
            raise PLMError(f"the scalar mix's L2 weight lambda must be a finite number >= 0, got {self.l2}")


class LayerCombination(nn.Module):
    """One source's layers as one vector per word: concatenated (L * D), summed (D) or scalar-mixed (D).

    Args:
        layers: L, the source's layers.
        dim: D, the width of each layer.
        how: concat, sum or mix.
        mix: the scalar mix's options (for ``how`` mix).

    Raises:
        PLMError: an unknown ``how``.
    """

    def __init__(self, layers: int, dim: int, how: str, mix: MixOptions = MixOptions()) -> None:
        super().__init__()
        if how not in COMBINATIONS:
            raise PLMError(f"unknown layer combination {how!r}; choose one of {', '.join(COMBINATIONS)}")
        self.how = how
        self.mix = ScalarMix(layers, mix.layer_norm, mix.dropout, mix.l2) if how == "mix" else None
        self.width = layers * dim if how == "concat" else dim

    def forward(self, layered: torch.Tensor) -> torch.Tensor:
        """Combine the layers of each word.

        Args:
            layered: (batch, L, words, D) features.

        Returns:
            (batch, words, L * D) for concat, (batch, words, D) for sum and mix.
        """
        if self.how == "concat":
            return layered.permute(0, 2, 1, 3).flatten(2)  # (B, L, W, D) -> (B, W, L * D)
        if self.how == "sum":
            return layered.sum(1)
        assert self.mix is not None  # how is "mix"
        return self.mix(layered)


class BiLSTMTagger(nn.Module):
    """A BiLSTM over per-word features and a linear layer: scores per word (tag, span) or per sequence (classify).

    Each source's layers are combined and the results concatenated (ELMo's [x_k; ELMo_k]) before the BiLSTM.
    With ``output_source``, that source's layers get a second scalar mix of their own, concatenated to the
    BiLSTM's states ([h_k; ELMo_k], ELMo section 3.3: its SNLI and SQuAD models); with ``pool``, the states are
    max- and mean-pooled over the words before the linear layer.

    Args:
        sources: (layers, dim) of each feature source, in the order forward receives them.
        labels: the scores per word (per sequence with ``pool``): the tags, the classes, 1 value, or start and end.
        combine: how every source's layers are combined, or one way per source (ELMo's own scalar mix beside
            a BERT's concatenated layers).
        hidden: the LSTM's units per direction (BERT's 768, `BERT_LSTM_DIM`).
        lstm_layers: the LSTM's layers.
        dropout: the dropout on the LSTM's input and output (and between its layers).
        mix: the options of every scalar mix.
        pool: score each sequence from its pooled states (see [`max_mean_pool`][plm.tasks.bilstm.max_mean_pool]), not
            each word.
        output_source: the index of the source mixed again at the BiLSTM's output, or None.

    Raises:
        PLMError: not one way of combining per source, an unknown one, or an ``output_source`` out of range.
    """

    def __init__(
        self, sources: Sequence[tuple[int, int]], labels: int, combine: str | Sequence[str] = "concat",
        hidden: int = BERT_LSTM_DIM, lstm_layers: int = 2, dropout: float = 0.1, mix: MixOptions = MixOptions(),
        pool: bool = False, output_source: int | None = None,
    ) -> None:
        super().__init__()
        ways = [combine] * len(sources) if isinstance(combine, str) else list(combine)
        if len(ways) != len(sources):
            raise PLMError(f"{len(sources)} feature sources need as many layer combinations, got {len(ways)}")
        if output_source is not None and not 0 <= output_source < len(sources):
            raise PLMError(f"output_source {output_source} is not one of the {len(sources)} feature sources")
        combinations = [LayerCombination(layers, dim, how, mix) for (layers, dim), how in zip(sources, ways)]
        self.combinations = nn.ModuleList(combinations)
        width = sum(c.width for c in combinations)
        self.dropout = nn.Dropout(dropout)
        self.lstm = nn.LSTM(width, hidden, num_layers=lstm_layers, batch_first=True, bidirectional=True,
                            dropout=dropout if lstm_layers > 1 else 0.0)
        self.output_source = output_source
        self.output_mix = None if output_source is None else LayerCombination(*sources[output_source], "mix", mix)
        states = 2 * hidden + (self.output_mix.width if self.output_mix is not None else 0)
        self.pool = pool
        self.classifier = nn.Linear(2 * states if pool else states, labels)  # pooled: [max; mean]

    def penalty(self) -> torch.Tensor:
        """The scalar mixes' L2 terms lambda * ||s||^2 added up (0 without a mix): what training adds to the loss.

        Returns:
            The penalty, a scalar.
        """
        combinations = cast(Iterable[LayerCombination], self.combinations)  # a ModuleList does not type its modules
        mixes = [c.mix for c in [*combinations, self.output_mix] if c is not None and c.mix is not None]
        return sum((mix.penalty() for mix in mixes), torch.zeros(()))

    def forward(self, sources: Sequence[torch.Tensor], word_mask: torch.Tensor) -> torch.Tensor:
        """Score the words, or with ``pool`` each sequence.

        Args:
            sources: the feature sources, each (batch, L, words, D) as declared in ``sources``.
            word_mask: (batch, words), 1 for words, 0 for padding.

        Returns:
            Scores (batch, words, labels), or with ``pool`` (batch, labels).

        Raises:
            PLMError: not as many sources as declared, or features of another width.
        """
        if len(sources) != len(self.combinations):
            raise PLMError(f"the tagger reads {len(self.combinations)} feature sources, got {len(sources)}")
        features = torch.cat([c(s) for c, s in zip(self.combinations, sources)], dim=-1)  # (B, W, width)
        if features.shape[-1] != self.lstm.input_size:  # nn.LSTM does not check a packed input's width
            raise PLMError(f"the sources give {features.shape[-1]} features per word, the tagger was built for "
                           f"{self.lstm.input_size}; give (batch, layers, words, dim) tensors as declared")
        lengths = word_mask.sum(1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(self.dropout(features), lengths.clamp(min=1), batch_first=True,
                                                   enforce_sorted=False)
        states, _ = self.lstm(packed)
        states, _ = nn.utils.rnn.pad_packed_sequence(states, batch_first=True, total_length=features.shape[1])
        if self.output_mix is not None and self.output_source is not None:
            elmo = self.output_mix(sources[self.output_source])  # (B, W, D): the second mix's
            states = torch.cat([states, elmo], dim=-1)  # [h_k; ELMo_k]: (B, W, 2 * hidden + D)
        if self.pool:
            states = max_mean_pool(states, word_mask)  # (B, 2 * width)
        return self.classifier(self.dropout(states))


def max_mean_pool(states: torch.Tensor, word_mask: torch.Tensor) -> torch.Tensor:
    """Each sequence's states max-pooled and mean-pooled over its words, concatenated: [max; mean].

    ESIM's pooling (Chen et al., 2017, eq. 14-15; ELMo's SNLI model): the max keeps the strongest sign of each
    feature wherever it occurs (one word may decide a class), the mean how much of it there is (a count, a
    degree), so the one pooling serves a classifier and a regression.

    Args:
        states: (batch, words, width).
        word_mask: (batch, words), 1 for words, 0 for padding.

    Returns:
        (batch, 2 * width); a sequence without words gives zeros.
    """
    real = word_mask[..., None].bool()  # (B, W, 1)
    most = states.masked_fill(~real, float("-inf")).amax(1).masked_fill(~real.any(1), 0.0)  # (B, width)
    return torch.cat([most, mean_pool(states, word_mask)], dim=-1)


LAST_FOUR = (-4, -3, -2, -1)


@torch.no_grad()
def encoder_word_features(
    encoder: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, word_ids: Sequence[Sequence[int | None]],
    layers: Sequence[int] = LAST_FOUR,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The frozen encoder's states at each word's first sub-word, for ``layers``.

    The encoder runs in eval mode without gradients, and goes back to its mode after.

    Args:
        encoder: the encoder; its forward takes ``output_hidden_states``.
        input_ids: (batch, time).
        attention_mask: (batch, time), 1 = token, 0 = padding.
        word_ids: each row's tokens' word indices, None for special tokens (see
            [`encode_words`][plm.tasks.encoding.encode_words]).
        layers: indices into the embedding output followed by every block's (-1 is the last layer).

    Returns:
        Features (batch, len(layers), W, dim) and the word mask (batch, W); W is the most words in a row.
    """
    was_training = encoder.training
    encoder.eval()
    states = encoder(input_ids, attention_mask, output_hidden_states=True).hidden_states
    encoder.train(was_training)
    chosen = torch.stack([states[i] for i in layers], dim=1)  # (B, L, T, D)
    width = chosen.shape[2]
    starts = torch.tensor([[int(f) for f in first_pieces(row)] + [0] * (width - len(row)) for row in word_ids])
    index, mask = first_piece_positions(starts.to(chosen.device))
    return gather_words(chosen, index), mask


def first_piece_positions(word_starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Where each word starts, and which words are real.

    A padding word's position is one of the row's other tokens.

    Args:
        word_starts: (batch, time), 1 at a word's first piece.

    Returns:
        The positions (batch, W) and the word mask (batch, W), W the most words in a row.
    """
    counts = word_starts.sum(1)
    words = int(counts.max()) if len(counts) else 0
    # A stable sort of (1 - start) brings each row's first pieces to the front, in their order.
    index = torch.sort(1 - word_starts, dim=1, stable=True).indices[:, :words]  # (B, W)
    mask = (torch.arange(words, device=word_starts.device) < counts[:, None]).long()  # (B, W)
    return index, mask


def gather_words(layered: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The states at each word's position.

    Args:
        layered: (batch, L, time, D) states.
        index: (batch, W) positions.

    Returns:
        (batch, L, W, D).
    """
    index = index[:, None, :, None].expand(-1, layered.shape[1], -1, layered.shape[-1])
    return layered.gather(2, index)


def scatter_words(
    values: torch.Tensor, index: torch.Tensor, word_mask: torch.Tensor, time: int, fill: float = 0.0
) -> torch.Tensor:
    """Each word's values back at its position among the tokens, ``fill`` at every other token: gather's inverse.

    Args:
        values: (batch, W, C), per word.
        index: (batch, W) each word's position (see [`first_piece_positions`][plm.tasks.bilstm.first_piece_positions]).
        word_mask: (batch, W), 1 for words, 0 for padding.
        time: T, the tokens of a row.
        fill: the value of a token where no word sits.

    Returns:
        (batch, T, C).
    """
    values = values.masked_fill(word_mask[..., None] == 0, fill)  # a padding word's position is a token of no word
    tokens = values.new_full((values.shape[0], time, values.shape[-1]), fill)
    return tokens.scatter(1, index[..., None].expand_as(values), values)
