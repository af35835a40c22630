"""What the trainer asks of an objective, and the optional hooks a task objective adds.

Required: ``batch``, ``size``, ``target_counts``, ``loss``, ``validation_batches`` and
``train_tokens``. Optional, read by the trainer with these defaults:

- ``loss_weights`` (``{}``): a weight per loss term, 1 where absent; GPT-1's
  fine-tuning loss L3 = L2 + lambda * L1 is ``{"lm": lambda}``.
- ``validation_metrics(model)`` (none): task metrics (accuracy, F1, EM, BLEU ...)
  computed at every evaluation, logged as ``val_<name>``.
- ``selection`` (None): the validation metric that picks the best model, which the
  trainer then keeps in ``best/`` of the run directory.
- ``batches_per_epoch`` (None): micro-batches in one pass over the training data,
  so that a run can be given in epochs rather than steps.
- ``perplexity_terms`` (every term): the loss terms that are mean negative
  log-likelihoods, whose exp the trainer logs as a perplexity; a squared error (a
  regression) or a KL term (SiFT) has none. ``val_perplexity`` is the first term's,
  when it is one of these: an objective that trains a surrogate (label smoothing)
  lists the plain likelihood first, with weight 0 in ``loss_weights``.
- ``validation_sample_batches`` (None): the evaluations before a run's last read only
  this many of the first validation batches, for speed, and log their losses and
  perplexities as ``val_loss_sample``, ``val_perplexity_sample`` ...; the run's last
  evaluation reads them all, under the plain names. None: every evaluation reads all.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn


class Objective(Protocol):
    """Draws batches and sums losses; see [`plm.objectives`][plm.objectives].

    Attributes:
        train_tokens: the training text's size, in tokens.
    """

    train_tokens: int

    def batch(self, step: int, index: int) -> dict[str, torch.Tensor]:
        """Micro-batch ``index`` of optimizer step ``step``, the same whenever it is asked for.

        Args:
            step: the optimizer step.
            index: the micro-batch within the step.

        Returns:
            The batch's tensors by name.
        """
        ...

    def size(self, batch: dict[str, torch.Tensor]) -> int:
        """The tokens a batch reads, for the trainer's count of tokens.

        Args:
            batch: a batch of the objective.

        Returns:
            The count.
        """
        ...

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        """The targets each loss term of a batch is summed over.

        Args:
            batch: a batch of the objective.

        Returns:
            The count of each term, by the names [`loss`][plm.objectives.base.Objective.loss] gives.
        """
        ...

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Each loss term of a batch, summed over its targets.

        Args:
            model: the model (or its DDP or FSDP wrapper).
            batch: a batch of the objective.

        Returns:
            The summed loss of each term, by name.
        """
        ...

    def validation_batches(self) -> Iterator[dict[str, torch.Tensor]]:
        """The validation batches, the same at every evaluation.

        Returns:
            An iterator over the batches.
        """
        ...


@dataclass(frozen=True)
class Selection:
    """Which logged validation metric (e.g. ``val_accuracy``) picks the best model, and its direction.

    Attributes:
        metric: the metric's logged name.
        maximize: higher is better; False: lower is.
    """

    metric: str
    maximize: bool = True

    def better(self, value: float, best: float | None) -> bool:
        """Whether ``value`` beats the best so far.

        Args:
            value: the metric's new value.
            best: the best value so far, or None before the first.

        Returns:
            True when there is no best yet, or ``value`` is strictly better.
        """
        if best is None:
            return True
        return value > best if self.maximize else value < best


def loss_weights(objective: Objective) -> dict[str, float]:
    """The objective's weight per loss term (1 where absent).

    Args:
        objective: the objective.

    Returns:
        Its ``loss_weights``, or none.
    """
    return dict(getattr(objective, "loss_weights", None) or {})


def perplexity_terms(objective: Objective, terms: list[str]) -> list[str]:
    """Those of ``terms`` whose exp is a perplexity.

    Args:
        objective: the objective; without ``perplexity_terms`` every term is one.
        terms: the loss terms.

    Returns:
        Those terms, in order.
    """
    declared = getattr(objective, "perplexity_terms", None)
    return list(terms) if declared is None else [t for t in terms if t in declared]


def selection(objective: Objective) -> Selection | None:
    """The validation metric that picks the objective's best model.

    Args:
        objective: the objective.

    Returns:
        Its ``selection``, or None.
    """
    return getattr(objective, "selection", None)
