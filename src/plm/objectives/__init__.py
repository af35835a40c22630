"""Pre-training objectives: how a batch is drawn and how its loss is summed.

An objective is separate from the model, so any model of a matching kind can
use any objective. ``loss`` returns the *sum* of per-target losses and the number
of targets; the trainer divides by the targets of the whole optimizer step
(all micro-batches, all processes), so gradient accumulation and data
parallelism give the same loss as one big batch.
"""

from plm.objectives.clm import CausalLMObjective, Objective

__all__ = ["CausalLMObjective", "Objective"]
