"""GPT-1's task-specific input transformations (Radford et al., 2018, section 3.3 and Figure 1).

A left-to-right model reads one contiguous sequence, so structured inputs are
written as one: every sequence starts with a learned start token, the parts of a
pair are joined by a learned delimiter ($), and a learned extract token at the end
is where the classifier reads the final state (the task model's "last" pooling):

- classification: ``start text extract``;
- entailment: ``start premise $ hypothesis extract``;
- similarity: both orders, ``start a $ b extract`` and ``start b $ a extract``, whose
  two final states are added (a classifier given (batch, 2, time) adds them);
- multiple choice (QA, commonsense reasoning): ``start z q $ a_k extract`` for each
  answer a_k, scored separately and normalised with a softmax across the answers.

The three tokens are added to the tokenizer and the embeddings grow by as many rows,
initialised N(0, 0.02); the pretrained rows stay as they are. Together with the
classifier's W_y these are the only new parameters of fine-tuning.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch

from plm.errors import PLMError
from plm.models import PretrainedModel
from plm.tokenization.tokenizer import Tokenizer

# The names of the original code (openai/finetune-transformer-lm).
START, DELIMITER, EXTRACT = "_start_", "_delimiter_", "_classify_"


@dataclass(frozen=True)
class TaskTokens:
    """The ids of the start, delimiter and extract tokens.

    Attributes:
        start: the start token's id.
        delimiter: the delimiter's ($) id.
        extract: the extract token's id.
    """

    start: int
    delimiter: int
    extract: int


def add_task_tokens(model: PretrainedModel, tokenizer: Tokenizer, std: float = 0.02) -> TaskTokens:
    """Add the three task tokens to ``tokenizer`` and grow ``model``'s embeddings to fit; idempotent.

    The new rows are N(0, std) (GPT-1 initialises its weights N(0, 0.02)); the tied
    output layer of a GPT grows with them.

    Args:
        model: the model, whose embeddings grow when the tokenizer outgrows them.
        tokenizer: the tokenizer, which gets the tokens (if it lacks them).
        std: the standard deviation of the new rows.

    Returns:
        The tokens' ids.
    """
    start, delimiter, extract = tokenizer.add_special_tokens([START, DELIMITER, EXTRACT])
    if len(tokenizer) > model.config.vocab_size:
        model.resize_token_embeddings(len(tokenizer), std)
    return TaskTokens(start, delimiter, extract)


def task_tokens(tokenizer: Tokenizer) -> TaskTokens:
    """The task tokens of a tokenizer that has them (one saved after `add_task_tokens`).

    Args:
        tokenizer: the tokenizer.

    Returns:
        The tokens' ids.

    Raises:
        PLMError: a tokenizer without them.
    """
    start, delimiter, extract = (tokenizer.token_to_id(token) for token in (START, DELIMITER, EXTRACT))
    if start is None or delimiter is None or extract is None:
        raise PLMError(f"{tokenizer!r} has no GPT-1 task tokens; add them with add_task_tokens(model, tokenizer)")
    return TaskTokens(start, delimiter, extract)


class TaskInputs:
    """Token ids of each input form; ``max_length`` (the model's context) is never exceeded.

    A form too long loses tokens at the end of its longest part, one at a time, so a
    short hypothesis or answer is kept whole while a long premise or context is cut.

    Args:
        tokenizer: a tokenizer with the task tokens (see [`add_task_tokens`][plm.tasks.gpt_inputs.add_task_tokens]).
        max_length: the most tokens of a sequence.

    Raises:
        PLMError: a tokenizer without the task tokens.
    """

    def __init__(self, tokenizer: Tokenizer, max_length: int) -> None:
        self.tokenizer = tokenizer
        self.tokens = task_tokens(tokenizer)
        self.max_length = max_length

    def classification(self, text: str) -> list[int]:
        """``start text extract``.

        Args:
            text: the text.

        Returns:
            The ids.

        Raises:
            PLMError: as [`join`][plm.tasks.gpt_inputs.TaskInputs.join].
        """
        return self.join([self.tokenizer.encode(text)])

    def entailment(self, premise: str, hypothesis: str) -> list[int]:
        """``start premise $ hypothesis extract``.

        Args:
            premise: the premise.
            hypothesis: the hypothesis.

        Returns:
            The ids.

        Raises:
            PLMError: as [`join`][plm.tasks.gpt_inputs.TaskInputs.join].
        """
        return self.join([self.tokenizer.encode(premise), self.tokenizer.encode(hypothesis)])

    def similarity(self, a: str, b: str) -> list[list[int]]:
        """Both orders, ``start a $ b extract`` and ``start b $ a extract``: no order is imposed on the pair.

        Args:
            a: the first text.
            b: the second text.

        Returns:
            The ids of the two sequences.

        Raises:
            PLMError: as [`join`][plm.tasks.gpt_inputs.TaskInputs.join].
        """
        first, second = self.tokenizer.encode(a), self.tokenizer.encode(b)
        return [self.join([first, second]), self.join([second, first])]

    def choice(self, context: str, answers: Sequence[str], question: str | None = None) -> list[list[int]]:
        """``start z q $ a_k extract`` for each answer a_k (z the document, q the question, if any).

        Args:
            context: z, the document.
            answers: the answers.
            question: q, or None.

        Returns:
            The ids of one sequence per answer.

        Raises:
            PLMError: no answers, or as [`join`][plm.tasks.gpt_inputs.TaskInputs.join].
        """
        if not answers:
            raise PLMError("a multiple-choice example needs at least one answer")
        context_ids = self.tokenizer.encode(context) + (self.tokenizer.encode(question) if question else [])
        return [self.join([context_ids, self.tokenizer.encode(answer)]) for answer in answers]

    def join(self, parts: list[list[int]]) -> list[int]:
        """Start, the parts separated by the delimiter, extract; cut to ``max_length``.

        Args:
            parts: the parts' ids.

        Returns:
            The ids.

        Raises:
            PLMError: a ``max_length`` that leaves no room for a token of each part beside the task tokens.
        """
        budget = self.max_length - len(parts) - 1  # start, extract and a delimiter between parts
        if budget < len(parts):
            raise PLMError(f"max_length {self.max_length} leaves no room for the text beside the task tokens")
        parts = [list(part) for part in parts]
        while sum(map(len, parts)) > budget:
            max(parts, key=len).pop()
        ids = [self.tokens.start]
        for index, part in enumerate(parts):
            ids += ([self.tokens.delimiter] if index else []) + part
        return ids + [self.tokens.extract]


def pad_batch(examples: Sequence[list[int]] | Sequence[list[list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """``input_ids`` and ``attention_mask`` (1 = token), padded on the right with ``pad_id``.

    One sequence per example gives (batch, time); several (similarity's two orders, the
    answers of a multiple-choice example, as many for every example) give (batch, K, time).

    Args:
        examples: one id list per example, or K id lists per example.
        pad_id: the padding id.

    Returns:
        The int64 tensors.

    Raises:
        PLMError: examples with different numbers of sequences.
    """
    several = bool(examples) and isinstance(examples[0][0], list)
    # Which of the two shapes the examples have is read from the first one, here at run time.
    rows = cast(list[list[int]], [seq for example in examples for seq in example] if several else list(examples))
    width = max(map(len, rows), default=0)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for row, ids in enumerate(rows):
        input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention_mask[row, : len(ids)] = 1
    if several:
        counts = {len(example) for example in examples}
        if len(counts) != 1:
            raise PLMError(f"examples have different numbers of sequences ({sorted(counts)}); a batch needs the same")
        shape = (len(examples), counts.pop(), width)
        input_ids, attention_mask = input_ids.view(shape), attention_mask.view(shape)
    return {"input_ids": input_ids, "attention_mask": attention_mask}
