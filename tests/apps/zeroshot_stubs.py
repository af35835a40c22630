"""A tokenizer and a causal LM whose next-token preferences a test writes down, for the zero-shot tasks."""

from __future__ import annotations

import math

import torch

import plm
from plm.core import CausalLMOutput
from tests.conftest import StubCausalLM

CORPUS = "The cat reads the book. A dog sees the answer. The list sorts every token. He and she sat down.\n"
FIRST, SECOND = 5.0, 3.0  # logits of a context's first and second choice; every other token has 0


def tokenizer() -> plm.Tokenizer:
    """A byte-level BPE: words of CORPUS are one token each, other words split into characters."""
    return plm.Tokenizer.train_bpe([CORPUS * 20], vocab_size=600, min_frequency=1)


class PreferenceLM(StubCausalLM):
    """After a context (its real tokens, padding masked out), prefers the tokens ``choices[context]``.

    A context not in the table gives a uniform prediction. Because the key is the
    whole context, a wrong mask, padding read as text or a context cut short shows.
    """

    def __init__(self, vocab_size: int, choices: dict[tuple[int, ...], list[int]], context: int = 64) -> None:
        super().__init__(context)
        self.vocab_size = vocab_size
        self.choices = choices
        self.device_marker = torch.nn.Parameter(torch.zeros(1))  # where the task code puts its inputs

    def forward(self, input_ids, attention_mask=None, *, cache=None, num_logits=None) -> CausalLMOutput:
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        logits = torch.zeros(*input_ids.shape, self.vocab_size)
        for row in range(input_ids.shape[0]):
            positions = mask[row].nonzero().flatten().tolist()  # where the real tokens are
            real = input_ids[row, positions].tolist()
            for index, t in enumerate(positions):
                for logit, token in zip((FIRST, SECOND), self.choices.get(tuple(real[: index + 1]), [])):
                    logits[row, t, token] = logit
        return CausalLMOutput(last_hidden_state=logits, logits=logits[:, -(num_logits or input_ids.shape[1]) :])

    def prefer(self, context: list[int], *tokens: int) -> None:
        self.choices[tuple(context)] = list(tokens)

    def logprob(self, context: list[int], token: int) -> float:
        """log p(token | context) written out from the table: the oracle."""
        ranked = self.choices.get(tuple(context), [])
        logits = [FIRST, SECOND][: len(ranked)]
        z = sum(math.exp(logit) for logit in logits) + (self.vocab_size - len(ranked))
        return (logits[ranked.index(token)] if token in ranked else 0.0) - math.log(z)

