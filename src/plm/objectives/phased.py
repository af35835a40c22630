"""Two objectives one after the other: BERT's short sequences first, then full-length ones.

BERT pre-trained 90% of its steps on 128-token sequences and the rest on 512, because
attention costs the square of the length and the long sequences are needed only to learn
the positions beyond 128 (appendix A.2). [`PhasedObjective`][plm.objectives.phased.PhasedObjective] gives the first
objective's batches before a switch step and the second's from it on; which one a batch
comes from depends on its step alone, so a run resumed after the switch goes on with the
long sequences. Validation, sizes, losses and metrics are the second objective's: both are
the same objective at two lengths, and the run is scored at the length it ends with.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from plm.objectives.base import Objective
from plm.objectives.builders import ObjectiveData, ObjectiveSpec


class PhasedObjective:
    """The ``first`` objective's batches before step ``switch``, the ``second``'s from it on.

    The optional hooks ([`plm.objectives.base`][plm.objectives.base]: loss weights, validation metrics ...) are the
    second's.

    Args:
        first: the objective of steps 0 to ``switch`` - 1.
        second: the objective of the steps from ``switch`` on, which also validates.
        switch: the first step of ``second``.
    """

    def __init__(self, first: Objective, second: Objective, switch: int) -> None:
        self.first = first
        self.second = second
        self.switch = switch
        self.train_tokens = second.train_tokens

    def __getattr__(self, name: str) -> Any:
        # Only what the class does not define arrives here: the second objective's optional hooks, or an
        # AttributeError where it has none, as the trainer's getattr(objective, hook, default) expects.
        if name in ("first", "second"):  # not set yet (a copy being built): no recursion
            raise AttributeError(name)
        return getattr(self.second, name)

    def batch(self, step: int, index: int) -> dict[str, torch.Tensor]:
        """Micro-batch ``index`` of step ``step``: the first objective's before the switch, else the second's.

        Args:
            step: the optimizer step.
            index: the micro-batch within the step.

        Returns:
            The batch's tensors by name.
        """
        return (self.first if step < self.switch else self.second).batch(step, index)

    def size(self, batch: dict[str, torch.Tensor]) -> int:
        """The tokens a batch reads (the second objective counts either phase's: both are of one kind).

        Args:
            batch: a batch of either phase.

        Returns:
            The count.
        """
        return self.second.size(batch)

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        """The targets each loss term of a batch of either phase is summed over.

        Args:
            batch: a batch of either phase.

        Returns:
            The count of each term.
        """
        return self.second.target_counts(batch)

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Each loss term of a batch of either phase, summed over its targets.

        Args:
            model: the model (or its DDP or FSDP wrapper).
            batch: a batch of either phase.

        Returns:
            The summed loss of each term, by name.
        """
        return self.second.loss(model, batch)

    def validation_batches(self) -> Iterator[dict[str, torch.Tensor]]:
        """The second objective's validation batches, at the length the run ends with.

        Returns:
            An iterator over the batches.
        """
        return self.second.validation_batches()


def phased_objective(spec: ObjectiveSpec, data: ObjectiveData, short_block_size: int, switch: int) -> PhasedObjective:
    """Objective ``spec`` on sequences of ``short_block_size`` before step ``switch``, of ``data.block_size`` after.

    Args:
        spec: the objective.
        data: the run's data, at the long block size.
        short_block_size: the tokens per sequence of the first phase.
        switch: the first step at ``data.block_size``.

    Returns:
        The objective.
    """
    short = spec.build(dataclasses.replace(data, block_size=short_block_size))
    return PhasedObjective(short, spec.build(data), switch)
