"""The feature-based model of every task (BERT section 5.3; ELMo sections 3.3 and 5), as a model of its own.

A frozen encoder (BERT, ALBERT, DeBERTa, e.g. all-MiniLM-L6-v2) gives chosen layers of
each word's first sub-word, combined (``concat``, ``sum`` or ELMo's scalar ``mix``); with a
frozen plm ELMo beside it, ELMo's layers of the same words are scalar-mixed and
concatenated to them: [x_k; ELMo_k], the input of the task's own model. That model is a
[`BiLSTMTagger`][plm.tasks.bilstm.BiLSTMTagger] over the words and an end per kind of task (``TaggerConfig.task``):

- ``tag``: each word's logits at its first piece, zero at every other token, so the
  batches, the loss and the predictions of the ``tag`` task
  ([`Tagging`][plm.tasks.task_objective.Tagging]) serve it unchanged;
- ``classify`` (tasks classify, pair and regress): the BiLSTM's states max- and
  mean-pooled over the words ([`max_mean_pool`][plm.tasks.bilstm.max_mean_pool]), then a linear
  layer to the classes (one value for a regression). A pair is one sequence, A's words
  then B's, in the order of ``[CLS] A [SEP] B [SEP]``; the encoder's features carry each
  word's segment (its token-type embedding);
- ``span`` (task qa): each word's start logit at its first piece and its end logit at its
  last, so that the ``qa`` task's windows, span search and metrics serve it unchanged;
  every other token scores `NO_BOUNDARY` (no span starts or ends inside a word)
  but [CLS], the null answer, which scores 0: Levy et al.'s (2017) learned no-answer
  score, since the linear layer's bias moves every word's score against it.

With ``elmo_output``, ELMo's layers are mixed a second time, with weights of their own,
and concatenated to the BiLSTM's states before the end: [h_k; ELMo_k], as ELMo's SNLI
and SQuAD models do. Only the BiLSTM, its end and the mixes train: the encoder and ELMo
have no gradient, stay in eval mode (no dropout) and run under ``torch.no_grad``, so
their forward pass is all they cost, and only once per sequence:
[`FeatureTagger.cache_features`][plm.tasks.feature_based.FeatureTagger.cache_features] keeps each sequence's features
(up to a memory budget), so the epochs after the first run the BiLSTM alone.

A [`FeatureTagger`][plm.tasks.feature_based.FeatureTagger] is a [`PretrainedModel`][plm.models.base.PretrainedModel] of
family ``feature-tagger`` (the name it had when it only tagged, kept so that the models saved then still load):
``save_model``/``load_model``, the Trainer, ``plm predict`` and ``plm eval task`` take it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import torch

from plm.config import config_from_dict
from plm.errors import PLMError, with_article
from plm.models import FAMILIES, CausalLM, PretrainedModel
from plm.tasks.bilstm import (
    BERT_LSTM_DIM,
    COMBINATIONS,
    BiLSTMTagger,
    MixOptions,
    first_piece_positions,
    gather_words,
    scatter_words,
)
from plm.tasks.heads import CLASSIFY, SPAN, TAG, SequenceClassifierOutput, SpanOutput, TaskOutput, TokenClassifierOutput
from plm.tasks.model import TaskModel, WrappingConfig

FAMILY = "feature-tagger"
ELMO_FAMILY = "elmo"
NOT_ENCODERS = (ELMO_FAMILY, TaskModel.family, FAMILY)  # families with no encoder layers to read
ENDS = (TAG, CLASSIFY, SPAN)  # what the BiLSTM's states become: logits per word, per sequence, span boundaries
NO_BOUNDARY = -1e4  # a span model's score where no span starts or ends (as the QA loss scores padding)


@dataclass(frozen=True)
class TaggerConfig:
    """What the encoder's features are, and the BiLSTM model that reads them for its task.

    Its checks make an unknown ``combine`` or ``task``, fewer than one label, hidden unit or LSTM layer, label
    names that are not one per label, a span model without two outputs, or mix options out of range a PLMError.

    Attributes:
        ADDED_FIELDS: what a config without a field means: the fields added since models were first saved, with the
            value a model saved before them had, and ``hidden``, whose default changed.
        features: the layers read, indices into the embedding output followed by every block's (-1 the last).
        labels: the end's outputs: the tags or classes, 1 for a regression, 2 (start and end) for a span.
        label_names: the tags' (classes') names, one per label (or none).
        combine: how the layers combine: concat, sum or mix.
        hidden: the BiLSTM's units per direction; BERT's 768 (`BERT_LSTM_DIM`) by default.
        lstm_layers: the BiLSTM's layers.
        dropout: the BiLSTM model's dropout (on its input and its states).
        mix_layer_norm: the scalar mixes (``combine`` mix and ELMo's) normalise each layer first.
        mix_dropout: the dropout on the scalar mixes.
        mix_l2: lambda of the scalar mixes' L2 penalty (see [`MixOptions`][plm.tasks.bilstm.MixOptions]).
        task: the end (one of `ENDS`): tag, classify or span.
        elmo_output: ELMo at the BiLSTM's output too, through a second scalar mix: [h_k; ELMo_k].
        null_threshold: a span model's tau for SQuAD v2.0, chosen on the dev set while fine-tuning (see
            [`HeadConfig`][plm.tasks.heads.HeadConfig]); None: always a span.
    """

    # Models saved before these fields had plain mixes, tagged, and read ELMo at the input alone. Every model plm
    # saved holds its ``hidden``; a config without it (one written by hand) means the 256 that was the default
    # before BERT's 768, not the default of today.
    ADDED_FIELDS: ClassVar[dict[str, object]] = {
        "mix_layer_norm": False, "mix_dropout": 0.0, "mix_l2": 0.0, "task": TAG, "elmo_output": False,
        "null_threshold": None, "hidden": 256,
    }

    features: tuple[int, ...]
    labels: int
    label_names: tuple[str, ...] = ()
    combine: str = "concat"
    hidden: int = BERT_LSTM_DIM  # per direction
    lstm_layers: int = 2
    dropout: float = 0.1
    mix_layer_norm: bool = False
    mix_dropout: float = 0.0
    mix_l2: float = 0.0
    task: str = TAG
    elmo_output: bool = False
    null_threshold: float | None = None

    def __post_init__(self) -> None:
        MixOptions(self.mix_layer_norm, self.mix_dropout, self.mix_l2)  # raises on a dropout or lambda out of range
        if self.combine not in COMBINATIONS:
            raise PLMError(f"unknown layer combination {self.combine!r}; choose one of {', '.join(COMBINATIONS)}")
        if self.task not in ENDS:
            raise PLMError(f"unknown feature-based task {self.task!r}; choose one of {', '.join(ENDS)}")
        if min(self.labels, self.hidden, self.lstm_layers) < 1:
            raise PLMError("the BiLSTM model needs at least 1 label, 1 hidden unit and 1 LSTM layer")
        if self.task == SPAN and self.labels != 2:
            raise PLMError(f"a span model scores each word as a start and an end: 2 labels, got {self.labels}")
        if self.label_names and len(self.label_names) != self.labels:
            raise PLMError(f"{len(self.label_names)} label names for {self.labels} labels")

    @property
    def mix(self) -> MixOptions:
        """The scalar mixes' options."""
        return MixOptions(self.mix_layer_norm, self.mix_dropout, self.mix_l2)


@dataclass(frozen=True)
class FeatureTaggerConfig(WrappingConfig):
    """The frozen encoder's family and config, optionally a frozen ELMo's config, and the BiLSTM model's.

    Layer indices the encoder does not have, or ELMo at the output without an ELMo, are a PLMError.

    Attributes:
        encoder_family: the encoder's family.
        encoder: the encoder's config.
        tagger: the BiLSTM model's config (the field's name from when it only tagged).
        elmo: an ElmoConfig, whose layers, scalar-mixed, join the encoder's features; or None.
    """

    WRAPPED = "encoder"
    DESCRIPTION = "a feature-based model"
    NOT_WRAPPED = NOT_ENCODERS

    encoder_family: str
    encoder: Any
    tagger: TaggerConfig
    elmo: Any = None  # an ElmoConfig: its layers, scalar-mixed, join the encoder's features

    def __post_init__(self) -> None:
        states = self.encoder.layers + 1  # the embedding output, then each block's
        features = self.tagger.features
        if not features or any(not -states <= i < states for i in features):
            raise PLMError(f"the encoder has {states} layers of features (0 = embeddings, -1 = last): layer "
                           f"indices from {-states} to {states - 1}, got {','.join(map(str, features)) or 'none'}")
        if self.tagger.elmo_output and self.elmo is None:
            raise PLMError("ELMo at the BiLSTM's output (elmo_output) needs an ELMo")

    @classmethod
    def _with_parts(cls, family: str, wrapped: Any, values: dict[str, Any], source: str, complete: bool) -> Self:
        """The encoder's config, the BiLSTM model's and the ELMo's (or None), read from ``values``."""
        tagger = config_from_dict(TaggerConfig, values["tagger"], f"{source}: tagger", complete)
        elmo = values["elmo"]
        if elmo is not None:
            elmo = config_from_dict(FAMILIES[ELMO_FAMILY].config_class, elmo, f"{source}: elmo", complete)
        return cls(family, wrapped, tagger, elmo)


class FeatureTagger(PretrainedModel):
    """Frozen encoder (+ frozen ELMo) features of each word, a BiLSTM over the words, and the task's end.

    Args:
        config: the model's config.
    """

    family = FAMILY
    config_class = FeatureTaggerConfig
    inputs = ("input_ids", "attention_mask", "word_starts", "char_ids", "token_type_ids", "word_ends")

    def __init__(self, config: FeatureTaggerConfig) -> None:
        super().__init__(config)
        self.encoder = FAMILIES[config.encoder_family](config.encoder)
        sources = [(len(config.tagger.features), config.encoder.dim)]
        self.elmo = FAMILIES[ELMO_FAMILY](config.elmo) if config.elmo is not None else None
        if self.elmo is not None:
            sources.append((config.elmo.layers + 1, 2 * config.elmo.projection_dim))
        for frozen in self.frozen():
            frozen.requires_grad_(False)
        self.cache: dict[bytes, list[torch.Tensor]] | None = None  # a sentence's inputs -> its features (L, W, D)
        self.cache_budget = 0  # bytes the cache may still take
        tagger = config.tagger
        combine = [tagger.combine, "mix"][: len(sources)]  # ELMo's layers: always its scalar mix
        self.tagger = BiLSTMTagger(
            sources, tagger.labels, combine, tagger.hidden, tagger.lstm_layers, tagger.dropout, tagger.mix,
            pool=tagger.task == CLASSIFY, output_source=1 if tagger.elmo_output else None,  # ELMo is source 1
        )

    def frozen(self) -> list[PretrainedModel]:
        """The models that give features and never learn.

        Returns:
            The encoder, and the ELMo if there is one.
        """
        return [self.encoder] + ([self.elmo] if self.elmo is not None else [])

    def penalty(self) -> torch.Tensor:
        """The L2 terms of the BiLSTM model's scalar mixes, lambda * ||s||^2, that training adds to the task loss.

        Returns:
            The penalty, a scalar.
        """
        return self.tagger.penalty()

    def train(self, mode: bool = True) -> FeatureTagger:
        """The BiLSTM model's mode; the frozen models stay in eval mode (no dropout in the features).

        Args:
            mode: training (True) or eval (False) mode.

        Returns:
            The model itself.
        """
        super().train(mode)
        for frozen in self.frozen():
            frozen.eval()
        return self

    @torch.no_grad()
    def features(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        word_starts: torch.Tensor,
        char_ids: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
        """The feature sources, the word mask and each word's first piece, computed without gradients.

        Args:
            input_ids: (B, T).
            attention_mask: (B, T), 1 = token, 0 = padding.
            word_starts: (B, T), 1 at each word's first piece.
            char_ids: (B, W, MAX_CHARACTERS), the same words' characters, for ELMo; None without one.
            token_type_ids: (B, T) segments, or None.

        Returns:
            The sources (the encoder's chosen layers (B, layers, W, D), then ELMo's if any, zero at padding words),
            the word mask (B, W) and each word's first piece (B, W).

        Raises:
            PLMError: with an ELMo, no ``char_ids``, or ``char_ids`` for another number of words.
        """
        options = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        states = self.encoder(input_ids, attention_mask, output_hidden_states=True, **options).hidden_states
        chosen = torch.stack([states[i] for i in self.config.tagger.features], dim=1)  # (B, L, T, D)
        positions, word_mask = first_piece_positions(word_starts)
        sources = [gather_words(chosen, positions) * word_mask[:, None, :, None]]
        if self.elmo is not None:
            if char_ids is None or char_ids.shape[1] != word_mask.shape[1]:
                got = "none" if char_ids is None else f"{char_ids.shape[1]} words"
                raise PLMError(f"ELMo needs the char_ids of the {word_mask.shape[1]} words that start a piece, "
                               f"got {got}")
            layers = self.elmo(char_ids, word_mask).layers()  # (B, L + 1, W, 2 * projection)
            sources.append(layers * word_mask[:, None, :, None])
        return sources, word_mask, positions

    def cache_features(self, max_bytes: int = 2 << 30) -> None:
        """Keep each sentence's features once computed, up to ``max_bytes``.

        The models that give them are frozen, so a sentence's features never change, and the epochs after the first
        reuse them.

        Args:
            max_bytes: the most the cached features may take (2 GiB by default); a sentence beyond it is computed
                each time.
        """
        self.cache, self.cache_budget = {}, max_bytes

    def cached_features(
        self, inputs: dict[str, torch.Tensor | None], word_mask: torch.Tensor
    ) -> list[torch.Tensor]:
        """`features`' sources, computed only for the rows not in the cache.

        Each row's are kept trimmed to its words, (L, W_b, D), and padded back to the batch's W with zeros (as the
        features' padding is). Only after [`cache_features`][plm.tasks.feature_based.FeatureTagger.cache_features].

        Args:
            inputs: [`features`][plm.tasks.feature_based.FeatureTagger.features]' arguments by name (None for one not
                given).
            word_mask: (B, W), 1 for words.

        Returns:
            The sources, each (B, L, W, D).
        """
        cache, attention_mask = self.cache, inputs["attention_mask"]
        assert cache is not None and attention_mask is not None  # cache_features turned the cache on
        lengths, words = attention_mask.sum(1).tolist(), word_mask.sum(1).tolist()

        def key(b: int) -> bytes:  # row b's real tokens (characters: real words) of every input
            return b"".join(value[b, : words[b] if name == "char_ids" else lengths[b]].cpu().numpy().tobytes()
                            for name, value in inputs.items() if value is not None)

        keys = [key(b) for b in range(len(lengths))]
        missing = [b for b, key in enumerate(keys) if key not in cache]
        computed: dict[int, list[torch.Tensor]] = {}
        if missing:
            missing_rows = torch.tensor(missing, device=word_mask.device)
            part: dict[str, Any] = {
                name: None if value is None else value[missing_rows] for name, value in inputs.items()
            }
            if part["char_ids"] is not None:  # as wide as the sub-batch's most words, as features() checks
                part["char_ids"] = part["char_ids"][:, : max(words[b] for b in missing)]
            sources = self.features(**part)[0]
            for i, b in enumerate(missing):
                computed[b] = [source[i, :, : words[b]].clone() for source in sources]
                size = sum(t.numel() * t.element_size() for t in computed[b])
                if size <= self.cache_budget:
                    cache[keys[b]], self.cache_budget = computed[b], self.cache_budget - size
        rows = [computed.get(b) or cache[keys[b]] for b in range(len(keys))]
        width = word_mask.shape[1]
        return [torch.stack([torch.nn.functional.pad(row[k], (0, 0, 0, width - row[k].shape[1])) for row in rows])
                for k in range(len(rows[0]))]

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        word_starts: torch.Tensor,
        char_ids: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        word_ends: torch.Tensor | None = None,
    ) -> TaskOutput:
        """Score a batch as the task asks, from the cache after `cache_features`.

        Args:
            input_ids: (B, T).
            attention_mask: (B, T), 1 = token, 0 = padding.
            word_starts: (B, T), 1 at each word's first piece.
            char_ids: (B, W, MAX_CHARACTERS), the words' characters, for ELMo; None without one.
            token_type_ids: (B, T) segments, or None.
            word_ends: (B, T), 1 at each word's last piece: where a span model puts its end logits.

        Returns:
            tag: logits (B, T, labels), each word's at its first piece, zero at every other token; classify: logits
            (B, labels); span: start and end logits (B, T) (see [`span_logits`][plm.tasks.feature_based.span_logits]).

        Raises:
            PLMError: as [`features`][plm.tasks.feature_based.FeatureTagger.features], or a span model without
                ``word_ends``.
        """
        if self.cache is None:
            sources, word_mask, positions = self.features(input_ids, attention_mask, word_starts, char_ids,
                                                          token_type_ids)
        else:
            positions, word_mask = first_piece_positions(word_starts)
            inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "word_starts": word_starts,
                      "char_ids": char_ids, "token_type_ids": token_type_ids}
            sources = self.cached_features(inputs, word_mask)
        scores = self.tagger(sources, word_mask)  # (B, W, labels); pooled: (B, labels)
        task = self.config.tagger.task
        if task == CLASSIFY:
            return SequenceClassifierOutput(scores)
        if task == TAG:
            return TokenClassifierOutput(scatter_words(scores, positions, word_mask, input_ids.shape[1]))
        if word_ends is None:
            raise PLMError("a span model puts each word's end logit at its last piece: give word_ends")
        last_pieces = first_piece_positions(word_ends)[0]  # the same sort finds the ones of word_ends
        return span_logits(scores, word_mask, positions, last_pieces, input_ids.shape[1])

def span_logits(
    scores: torch.Tensor, word_mask: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor, time: int
) -> SpanOutput:
    """The words' start and end logits at their tokens, as a span head over the tokens gives them.

    A word's start logit goes to its first piece and its end logit to its last, so that a span of tokens is a
    span of whole words; [CLS] (position 0), the null answer, scores 0, and every other token
    `NO_BOUNDARY`.

    Args:
        scores: (B, W, 2), each word's start and end logits.
        word_mask: (B, W), 1 for words.
        starts: (B, W), each word's first piece.
        ends: (B, W), each word's last piece.
        time: T, the tokens of a row.

    Returns:
        Start and end logits, (B, T) each.
    """
    null = torch.arange(time, device=scores.device) == 0  # [CLS]
    start, end = (scatter_words(scores[..., k:k + 1], pieces, word_mask, time, NO_BOUNDARY)[..., 0]
                  for k, pieces in enumerate((starts, ends)))  # (B, W, 1) -> (B, T)
    return SpanOutput(start_logits=start.masked_fill(null, 0.0), end_logits=end.masked_fill(null, 0.0))


def feature_tagger(
    encoder: PretrainedModel,
    features: tuple[int, ...],
    labels: int,
    label_names: tuple[str, ...] = (),
    combine: str = "concat",
    elmo: PretrainedModel | None = None,
    **tagger_options: Any,
) -> FeatureTagger:
    """A new feature-based model on copies of the pretrained ``encoder`` and ``elmo``, in training mode.

    A tagger by default; ``task="classify"`` (classify, pair, regress) or ``task="span"`` (qa, ``labels`` 2)
    makes the other ends, ``elmo_output=True`` adds ELMo at the BiLSTM's output. The linear layer's weights are
    N(0, 0.02) and the LSTM has PyTorch's init; the encoder is copied without its pre-training heads and pooler,
    which nothing reads.

    Args:
        encoder: the pretrained encoder (BERT, ALBERT, DeBERTa).
        features: the encoder's layers to read (see [`TaggerConfig`][plm.tasks.feature_based.TaggerConfig]).
        labels: the outputs: tags, classes, 1 for a regression, 2 for a span.
        label_names: the tags' (classes') names.
        combine: concat, sum or mix.
        elmo: a plm ELMo whose scalar-mixed layers join the features, or None.
        **tagger_options: further [`TaggerConfig`][plm.tasks.feature_based.TaggerConfig] fields (``task``,
            ``elmo_output``, ``hidden`` ...).

    Returns:
        The model, on the encoder's device.

    Raises:
        PLMError: an ``elmo`` that is not a plm ELMo, an ``encoder`` that is not an encoder, or an invalid
            config.
    """
    if elmo is not None and elmo.family != ELMO_FAMILY:
        raise PLMError(
            f"the ELMo features need a plm ELMo model, got {with_article(elmo.family)} model"
        )
    if encoder.family in NOT_ENCODERS or isinstance(encoder, CausalLM):
        raise PLMError(f"the feature-based model reads an encoder's layers (BERT, ALBERT, DeBERTa), not a "
                       f"{encoder.family} model")
    config = type(encoder).config_with_heads(encoder.config, ())
    if getattr(config, "pooler", False):
        config = dataclasses.replace(config, pooler=False)
    tagger = TaggerConfig(tuple(features), labels, tuple(label_names), combine, **tagger_options)
    elmo_config = elmo.config if elmo is not None else None
    model = FeatureTagger(FeatureTaggerConfig(encoder.family, config, tagger, elmo_config))
    model.init_weights(root=model.tagger.classifier)
    wanted = model.encoder.state_dict()
    model.encoder.load_state_dict({name: value for name, value in encoder.state_dict().items() if name in wanted})
    if elmo is not None:
        assert model.elmo is not None  # built from elmo's config
        model.elmo.load_state_dict(elmo.state_dict())
    return model.to(encoder.device).train()


# load_model finds a model class by the family name in its config.json.
FAMILIES[FeatureTagger.family] = FeatureTagger
