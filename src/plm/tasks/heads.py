"""Task heads: what fine-tuning puts on a pretrained backbone (BERT section 4, GPT-1 section 3.3).

Each head is a small module over the backbone's hidden states and returns its own
output dataclass:

- [`SequenceClassifier`][plm.tasks.heads.SequenceClassifier] reads one pooled vector per sequence: W C (+ b), one
  logit per label; a single label is a regression's value. Given K sequences per
  example (GPT-1's similarity: both orders of the pair) it adds their vectors first.
- [`TokenClassifier`][plm.tasks.heads.TokenClassifier] reads every token's state: one logit per label per token (NER).
- [`SpanHead`][plm.tasks.heads.SpanHead] scores each token as the start (S . T_i) and end (E . T_i) of an
  answer span (SQuAD); S and E are the two rows of one linear layer.
- [`MultipleChoiceScorer`][plm.tasks.heads.MultipleChoiceScorer] gives each (context, choice) sequence one score from
  its pooled vector; a softmax across the choices makes them a distribution.

Pooling (which vector stands for a sequence) is the task model's choice, not the
head's: see [`plm.tasks.model`][plm.tasks.model].
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import nn

from plm.core.outputs import ModelOutput
from plm.errors import PLMError
from plm.models.pretraining_heads import POOLER_ACTIVATIONS

CLASSIFY, TAG, SPAN, CHOICE = "classify", "tag", "span", "choice"
HEAD_KINDS = (CLASSIFY, TAG, SPAN, CHOICE)
# How a sequence becomes one vector: the [CLS] vector (through a pooler when there is one),
# the last real token (GPT-1's extract token), or the mean over real tokens.
POOLINGS = ("cls", "last", "mean")


@dataclass(frozen=True)
class HeadConfig:
    """What a task model puts on its backbone.

    An unknown task, pooling or pooler activation, fewer than one label, label names that are not one per
    label, a dropout outside [0, 1), ``symmetric`` for a head other than classify, or a pooler of its own for
    anything but a classify or choice head pooling [CLS] is a PLMError.

    Attributes:
        ADDED_FIELDS: fields added since heads were first saved, with the value a head saved before them had.
        task: classify (or regress, with ``labels`` 1), tag, span or choice.
        labels: classes of a classifier or tagger (a span head has start and end, a choice scorer one score per
            choice; both ignore it).
        pooling: see `POOLINGS` (read by classify and choice).
        dropout: the dropout before the output layer.
        bias: the output layer has a bias (GPT-2's classifier in Hugging Face has none).
        pooler_activation: when set, the task model has a pooler of its own, act(W h_[CLS] + b), for a backbone
            without one (DeBERTa's classifier: "gelu").
        label_names: optionally the labels' names, in id order.
        pad_token_id: what batches are padded with, kept for the Hugging Face format (its GPT-2 classifier finds
            the last token by it).
        symmetric: a classifier's pairs are read in both orders and the two pooled vectors added (GPT-1's
            similarity form); kept so that prediction reads pairs as training did.
        null_threshold: a span head's tau for SQuAD v2.0, chosen on the dev set while fine-tuning: a span is
            the answer only when it beats no-answer by more (None: always a span); kept so that predictions on
            other files use it rather than fit one to their answers.
    """

    # Heads saved before these fields read pairs in one order and always answered with a span.
    ADDED_FIELDS: ClassVar[dict[str, object]] = {"symmetric": False, "null_threshold": None}

    task: str
    labels: int = 2
    pooling: str = "cls"
    dropout: float = 0.1
    bias: bool = True
    pooler_activation: str | None = None
    label_names: tuple[str, ...] = ()
    pad_token_id: int | None = None
    symmetric: bool = False
    null_threshold: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "label_names", tuple(self.label_names))  # JSON gives a list back
        if self.task not in HEAD_KINDS:
            raise PLMError(f"unknown task {self.task!r}; choose one of {', '.join(HEAD_KINDS)}")
        if self.labels < 1:
            raise PLMError(f"a {self.task} head needs at least one label, got labels={self.labels}")
        if self.label_names and len(self.label_names) != self.labels:
            raise PLMError(f"{len(self.label_names)} label names for {self.labels} labels")
        if self.pooling not in POOLINGS:
            raise PLMError(f"unknown pooling {self.pooling!r}; choose one of {', '.join(POOLINGS)}")
        if not 0 <= self.dropout < 1:
            raise PLMError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.symmetric and self.task != CLASSIFY:
            raise PLMError(f"a {self.task} head reads no sentence pairs in both orders; symmetric is for classify")
        if self.pooler_activation is not None:
            if self.pooler_activation not in POOLER_ACTIVATIONS:
                raise PLMError(
                    f"unknown pooler activation {self.pooler_activation!r}; "
                    f"choose one of {', '.join(POOLER_ACTIVATIONS)}"
                )
            if self.pooling != "cls" or self.task not in (CLASSIFY, CHOICE):
                raise PLMError(
                    "a task model's own pooler reads the [CLS] vector: pooling 'cls', task classify or choice"
                )


# Outputs ---------------------------------------------------------------------------


@dataclass
class TaskOutput:
    """What every task head's output carries besides its own fields.

    Attributes:
        backbone: the backbone's own output for the same pass (for GPT-1's auxiliary LM loss, its ``logits``);
            with (batch, choices, time) inputs its tensors are (batch * choices, time, ...).
    """

    backbone: ModelOutput | None = field(default=None, kw_only=True)


@dataclass
class SequenceClassifierOutput(TaskOutput):
    """A sequence classifier's output.

    Attributes:
        logits: (batch, labels); with one label, a regression's value.
    """
    logits: torch.Tensor  # (batch, labels)


@dataclass
class TokenClassifierOutput(TaskOutput):
    """A token classifier's output.

    Attributes:
        logits: (batch, time, labels).
    """
    logits: torch.Tensor  # (batch, time, labels)


@dataclass
class SpanOutput(TaskOutput):
    """A span head's output.

    Attributes:
        start_logits: (batch, time), each token's score as the answer's start.
        end_logits: (batch, time), each token's score as the answer's end.
    """
    start_logits: torch.Tensor  # (batch, time)
    end_logits: torch.Tensor  # (batch, time)


@dataclass
class MultipleChoiceOutput(TaskOutput):
    """A multiple-choice scorer's output.

    Attributes:
        logits: (batch, choices).
    """
    logits: torch.Tensor  # (batch, choices)


# Heads -----------------------------------------------------------------------------


class LinearHead(nn.Module):
    """Dropout, then one linear layer: the scores of each vector the backbone gives (what three heads share).

    Args:
        config: the head's config (its labels, dropout and bias).
        dim: H, the backbone's width.

    Attributes:
        pools: the head reads pooled vectors (B, K, H), not every token's state (B, T, H).
        scores_per_vector: the linear layer's outputs; None for one per label.
    """

    pools: ClassVar[bool]
    scores_per_vector: ClassVar[int | None] = None

    def __init__(self, config: HeadConfig, dim: int) -> None:
        super().__init__()
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(dim, self.scores_per_vector or config.labels, bias=config.bias)

    def scores(self, vectors: torch.Tensor) -> torch.Tensor:
        """The linear layer's outputs after dropout: (..., H) -> (..., outputs).

        Args:
            vectors: (..., H) the backbone's vectors.

        Returns:
            (..., outputs) the scores.
        """
        return self.classifier(self.dropout(vectors))


class SequenceClassifier(LinearHead):
    """Logits (B, labels) from the pooled vectors (B, K, H) of an example's K sequences, added.

    Its arguments are [`LinearHead`][plm.tasks.heads.LinearHead]'s.
    """

    pools = True

    def forward(self, pooled: torch.Tensor) -> SequenceClassifierOutput:
        """Classify each example from the sum of its sequences' pooled vectors.

        Args:
            pooled: (B, K, H), K pooled vectors per example.

        Returns:
            Logits (B, labels).
        """
        return SequenceClassifierOutput(logits=self.scores(pooled.sum(dim=1)))


class TokenClassifier(LinearHead):
    """Logits (B, T, labels) from every token's final state (B, T, H).

    Its arguments are [`LinearHead`][plm.tasks.heads.LinearHead]'s.
    """

    pools = False

    def forward(self, hidden: torch.Tensor) -> TokenClassifierOutput:
        """Classify every token.

        Args:
            hidden: (B, T, H) final states.

        Returns:
            Logits (B, T, labels).
        """
        return TokenClassifierOutput(logits=self.scores(hidden))


class SpanHead(nn.Module):
    """Start and end logits (B, T): S . T_i and E . T_i, S and E the rows of ``start_end``.

    Args:
        config: the head's config (its bias; a span head has no dropout and two outputs whatever its labels).
        dim: H, the backbone's width.
    """

    pools: ClassVar[bool] = False

    def __init__(self, config: HeadConfig, dim: int) -> None:
        super().__init__()
        self.start_end = nn.Linear(dim, 2, bias=config.bias)

    def forward(self, hidden: torch.Tensor) -> SpanOutput:
        """Score every token as an answer's start and end.

        Args:
            hidden: (B, T, H) final states.

        Returns:
            Start and end logits, each (B, T).
        """
        start, end = self.start_end(hidden).unbind(dim=-1)  # (B, T, 2) -> 2 x (B, T)
        return SpanOutput(start_logits=start, end_logits=end)


class MultipleChoiceScorer(LinearHead):
    """One score per choice (B, C) from the pooled vector of each (context, choice) sequence (B, C, H).

    Its arguments are [`LinearHead`][plm.tasks.heads.LinearHead]'s; ``config.labels`` is not read.
    """

    pools = True
    scores_per_vector = 1

    def forward(self, pooled: torch.Tensor) -> MultipleChoiceOutput:
        """Score every choice.

        Args:
            pooled: (B, C, H), the pooled vector of each (context, choice) sequence.

        Returns:
            Logits (B, C).
        """
        return MultipleChoiceOutput(logits=self.scores(pooled).squeeze(-1))


HEADS: dict[str, type[SequenceClassifier | TokenClassifier | SpanHead | MultipleChoiceScorer]] = {
    CLASSIFY: SequenceClassifier,
    TAG: TokenClassifier,
    SPAN: SpanHead,
    CHOICE: MultipleChoiceScorer,
}


def build_head(config: HeadConfig, dim: int) -> nn.Module:
    """The head module of ``config.task`` over ``dim``-wide states.

    Args:
        config: the head's config.
        dim: H, the backbone's width.

    Returns:
        A [`SequenceClassifier`][plm.tasks.heads.SequenceClassifier],
        [`TokenClassifier`][plm.tasks.heads.TokenClassifier], [`SpanHead`][plm.tasks.heads.SpanHead] or
        [`MultipleChoiceScorer`][plm.tasks.heads.MultipleChoiceScorer].
    """
    return HEADS[config.task](config, dim)
