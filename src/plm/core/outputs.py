"""What every model's forward pass returns."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from plm.core.attention import KVCache


@dataclass
class ModelOutput:
    """Outputs of a forward pass; a field is None when the model has no such output.

    ``last_hidden_state`` is (batch, time, hidden); ``logits`` (batch, time, vocab)
    from a language-model head; ``pair_logits`` (batch, 2) from a sentence-pair head
    (NSP/SOP); ``cache`` the per-layer key/value caches after this step.
    """

    last_hidden_state: torch.Tensor
    logits: torch.Tensor | None = None
    pair_logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    cache: list[KVCache] | None = None
