"""Checkpoint averaging: the mean of the last N checkpoints' weights (Vaswani et al. 2017, section 6.1).

The Transformer's base models were evaluated with the average of the last 5
checkpoints, written at 10-minute intervals; averaging smooths the noise of the last
updates and usually gains a little BLEU for free.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

from plm.checkpoint import load_model
from plm.errors import PLMError
from plm.models import PretrainedModel


def average_state_dicts(states: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The element-wise mean of state dicts with the same keys and shapes (accumulated in float64)."""
    if not states:
        raise PLMError("nothing to average: give at least one checkpoint")
    keys = list(states[0])
    for index, state in enumerate(states[1:], 2):
        if list(state) != keys or any(state[k].shape != states[0][k].shape for k in keys):
            raise PLMError(f"checkpoint {index} does not have the weights of checkpoint 1; only one model's can be averaged")
    averaged = {}
    for key in keys:
        first = states[0][key]
        if not first.is_floating_point():  # counters and the like: take the last checkpoint's
            averaged[key] = states[-1][key].clone()
            continue
        total = sum(state[key].to(torch.float64) for state in states)
        averaged[key] = (total / len(states)).to(first.dtype)
    return averaged


def average_checkpoints(paths: Sequence[str | os.PathLike[str]]) -> PretrainedModel:
    """A model whose weights are the mean of the models saved in ``paths`` (same family and config)."""
    models = [load_model(path) for path in paths]
    for path, model in zip(paths[1:], models[1:]):
        if model.config != models[0].config:
            raise PLMError(f"{path}: a model of another config than {paths[0]}; only one model's checkpoints average")
    models[0].load_state_dict(average_state_dicts([model.state_dict() for model in models]))
    return models[0]
