"""What a backbone's forward pass returns; each head adds its own fields in a subclass."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from plm.core.attention import KVCache


@dataclass
class ModelOutput:
    """The backbone's part of a forward pass's outputs.

    Heads do not add fields here: a model with a head returns a subclass that holds
    the head's outputs ([`CausalLMOutput`][plm.core.outputs.CausalLMOutput], the encoders' ``PretrainingOutput``,
    the task heads' outputs in [`plm.tasks.heads`][plm.tasks.heads]).

    Attributes:
        last_hidden_state: (batch, time, hidden) the last layer's hidden states.
        hidden_states: every layer's hidden states, when asked for.
        cache: the per-layer key/value caches after this step, when decoding with a cache.
    """

    last_hidden_state: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...] | None = None
    cache: list[KVCache] | None = None


@dataclass
class CausalLMOutput(ModelOutput):
    """A language model's outputs.

    Attributes:
        logits: (batch, time, vocab) the scores of the next token at each position.
        loss: the summed next-token cross-entropy, when the model was given targets (and then no logits).
    """

    logits: torch.Tensor | None = None
    loss: torch.Tensor | None = None
