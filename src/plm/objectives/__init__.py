"""Pre-training objectives: how a batch is drawn and how its loss is summed.

An objective is separate from the model, so any model of a matching kind can
use any objective. ``loss`` returns, for each term (``lm``, ``mlm``, ``nsp`` ...),
the *sum* of its per-target losses, and ``target_counts`` the number of targets;
the trainer divides each term by its targets over the whole optimizer step (all
micro-batches, all processes), so gradient accumulation and data parallelism give
the same loss as one big batch, and adds the terms (weighted by ``loss_weights``).
Task objectives add optional hooks: see [`plm.objectives.base`][plm.objectives.base].
"""

from plm.objectives.base import Objective, Selection
from plm.objectives.bilm import BiLMObjective
from plm.objectives.builders import OBJECTIVES, ObjectiveData, ObjectiveSpec, objective_spec
from plm.objectives.clm import CausalLMObjective
from plm.objectives.mlm import MaskedLMObjective
from plm.objectives.phased import PhasedObjective, phased_objective

__all__ = [
    "OBJECTIVES",
    "BiLMObjective",
    "CausalLMObjective",
    "MaskedLMObjective",
    "Objective",
    "ObjectiveData",
    "ObjectiveSpec",
    "PhasedObjective",
    "Selection",
    "objective_spec",
    "phased_objective",
]
