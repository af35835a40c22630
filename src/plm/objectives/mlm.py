"""Masked language modelling (BERT, ALBERT, DeBERTa), alone or with NSP or SOP.

L = sum over masked positions of -log P(original token | corrupted sequence), plus,
with a pair task, the cross-entropy of the [CLS] classifier on the pair label.
Each training example is drawn afresh from the prepared split ([`plm.objectives.pairs`][plm.objectives.pairs]),
and so are its masks (RoBERTa's dynamic masking; BERT made 10 static copies instead), so
no two epochs see the same corruption and nothing is built up front.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from plm.data.corpus import Document
from plm.data.prepared import PreparedSplit
from plm.errors import PLMError
from plm.objectives.masking import IGNORE_INDEX, MASK_RATIOS, MLM_PROBABILITY, check_mask_ratios, mask_tokens
from plm.objectives.pairs import Example, PairExamples
from plm.progress import progress_bar

if TYPE_CHECKING:
    from plm.tokenization.tokenizer import Tokenizer

_TRAIN, _VALIDATION = 0, 1  # the first number of a batch's seed, so the two streams never meet


class MaskedLMObjective:
    """Random examples with fresh masks for training; the first examples with fixed masks for validation.

    A batch is a pure function of (seed, step, index): its examples and its masks
    come from generators seeded with those three numbers, so a resumed run sees the
    batches it would have seen, and micro-batch ``index`` is the same on whichever
    process draws it.

    Args:
        train: the training documents: a prepared split, or documents to encode in memory.
        validation: the validation documents, as ``train``.
        tokenizer: the encoder's tokenizer, with mask, [CLS], [SEP] and padding tokens.
        max_length: the most tokens of an example, special tokens included.
        batch_size: examples per micro-batch.
        pair_task: none, nsp or sop.
        whole_word: mask whole words (see [`select_spans`][plm.objectives.masking.select_spans]).
        max_ngram: the longest masked span, in words (ALBERT's n-grams).
        mask_ratios: the shares of the selected tokens that become [MASK], a random token, or stay (80/10/10), in
            training; validation masks with BERT's 80/10/10 whatever they are, so that runs with other ratios
            are scored on the same corrupted text.
        mlm_probability: the share of tokens predicted.
        short_seq_prob: the probability of a shorter example (see [`plm.objectives.pairs`][plm.objectives.pairs]).
        seed: the seed of the examples, the batches and the masks.
        validation_batches_max: the most validation batches, or None for all.

    Raises:
        PLMError: an unknown pair task, a tokenizer without one of those tokens, or documents from which no
            example can be made (see [`PairExamples`][plm.objectives.pairs.PairExamples]).
    """

    def __init__(
        self,
        train: PreparedSplit | Sequence[Document],
        validation: PreparedSplit | Sequence[Document],
        tokenizer: Tokenizer,
        max_length: int = 128,
        batch_size: int = 32,
        pair_task: str = "none",
        whole_word: bool = False,
        max_ngram: int = 1,
        mask_ratios: tuple[float, float, float] = MASK_RATIOS,
        mlm_probability: float = MLM_PROBABILITY,
        short_seq_prob: float = 0.1,
        seed: int = 0,
        validation_batches_max: int | None = 16,
    ) -> None:
        if tokenizer.id_of("mask") is None:
            raise PLMError(f"{tokenizer!r} has no mask token; an encoder needs a WordPiece or Unigram tokenizer")
        options = (tokenizer, pair_task, max_length, short_seq_prob)
        self.train = _examples("training", train, *options)
        self.validation = _examples("validation", validation, *options)
        self.pair_task, self.batch_size, self.seed = pair_task, batch_size, seed
        self.train_tokens = self.train.split.token_count
        self.masking: dict[str, Any] = {  # mask_tokens' options
            "mask_id": tokenizer.mask_id,
            "vocab_size": tokenizer.vocab_size,
            "special_ids": tokenizer.special_ids,
            "mlm_probability": mlm_probability,
            "whole_word": whole_word,
            "max_ngram": max_ngram,
            "ratios": check_mask_ratios(mask_ratios),
        }
        # The first examples of the validation documents, in order (all of them without a maximum).
        count = None if validation_batches_max is None else validation_batches_max * batch_size
        self.validation_examples = list(self.validation.in_order(seed, count))
        self._validation = [
            self._masked(self.validation, self.validation_examples[i : i + batch_size],
                         _generators(_VALIDATION, seed, i)[0], MASK_RATIOS)
            for i in range(0, len(self.validation_examples), batch_size)
        ]

    def batch(self, step: int, index: int) -> dict[str, torch.Tensor]:
        """Micro-batch ``index`` of step ``step``: random training examples, freshly masked.

        Args:
            step: the optimizer step.
            index: the micro-batch within the step.

        Returns:
            ``input_ids`` (masked), ``labels`` (the originals at the targets, -100 elsewhere), ``token_type_ids``
            and ``attention_mask``, each (B, T); ``pair_labels`` (B,) with a pair task.
        """
        generator, rng = _generators(_TRAIN, self.seed, step, index)
        return self._masked(self.train, [self.train.at_random(rng) for _ in range(self.batch_size)], generator)

    def size(self, batch: dict[str, torch.Tensor]) -> int:
        """The tokens of a batch, padding not counted.

        Args:
            batch: a batch of this objective.

        Returns:
            The ones of its attention mask.
        """
        return int(batch["attention_mask"].sum())

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        """The targets each loss term is summed over.

        Args:
            batch: a batch of this objective.

        Returns:
            ``mlm``: the masked positions; with a pair task, ``nsp`` or ``sop``: the examples.
        """
        counts = {"mlm": int((batch["labels"] != IGNORE_INDEX).sum())}
        if self.pair_task != "none":
            counts[self.pair_task] = len(batch["pair_labels"])
        return counts

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Summed cross-entropies: ``mlm`` over the masked positions, ``nsp``/``sop`` over the examples.

        The model gets ``masked_positions`` so that it may project only those onto the
        vocabulary (its ``logits`` then being (n_masked, V) in row-major order); a
        model that returns logits (B, T, V) for every position works as well.

        Args:
            model: the encoder (or its DDP wrapper).
            batch: a batch of this objective.

        Returns:
            ``mlm``, and the pair task's term when there is one.
        """
        logits, pair_logits = self.head_logits(model, batch)
        labels = batch["labels"]
        losses = {"mlm": F.cross_entropy(logits.float(), labels[labels != IGNORE_INDEX], reduction="sum")}
        if pair_logits is not None:
            losses[self.pair_task] = F.cross_entropy(pair_logits.float(), batch["pair_labels"], reduction="sum")
        return losses

    def head_logits(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The masked-LM head's logits at the masked positions (n_masked, V), and the pair head's (B, 2) or None.

        Args:
            model: the encoder (or its DDP wrapper).
            batch: a batch of this objective.

        Returns:
            The two heads' logits.
        """
        targets = batch["labels"] != IGNORE_INDEX
        # A single segment is all type 0, every model's default; DeBERTa has no segment embedding.
        segments = {"token_type_ids": batch["token_type_ids"]} if self.pair_task != "none" else {}
        output = model(batch["input_ids"], attention_mask=batch["attention_mask"], masked_positions=targets, **segments)
        logits = output.logits
        if logits.dim() == 3:  # (B, T, V): keep the masked positions, (n_masked, V)
            logits = logits[targets]
        return logits, output.pair_logits if self.pair_task != "none" else None

    @torch.no_grad()
    def validation_metrics(self, model: nn.Module, progress: bool = False) -> dict[str, float]:
        """Each head's accuracy on the validation batches, as ALBERT's Table 5 reports them.

        ``accuracy_mlm`` is over the masked positions, ``accuracy_nsp`` or ``accuracy_sop`` over the pairs.

        Args:
            model: the encoder.
            progress: show a progress bar over the batches (``plm eval pairs``; training shows its own).

        Returns:
            The accuracies, in [0, 1].
        """
        device = next(model.parameters()).device
        right: dict[str, int] = {}
        seen: dict[str, int] = {}
        batches = progress_bar(self.validation_batches(), total=len(self._validation), disable=not progress,
                               desc="eval pairs", unit=" batches", leave=False)
        for batch in batches:
            batch = {name: value.to(device) for name, value in batch.items()}
            logits, pair_logits = self.head_logits(model, batch)
            labels = batch["labels"][batch["labels"] != IGNORE_INDEX]
            outcomes = {"mlm": logits.argmax(-1) == labels}
            if pair_logits is not None:
                outcomes[self.pair_task] = pair_logits.argmax(-1) == batch["pair_labels"]
            for name, correct in outcomes.items():
                right[name] = right.get(name, 0) + int(correct.sum())
                seen[name] = seen.get(name, 0) + correct.numel()
        return {f"accuracy_{name}": right[name] / max(1, seen[name]) for name in right}

    def validation_batches(self) -> Iterator[dict[str, torch.Tensor]]:
        """The first validation examples (``validation_batches_max`` batches), masked the same way every time.

        Yields:
            The batches, as [`batch`][plm.objectives.mlm.MaskedLMObjective.batch] gives them.
        """
        yield from self._validation

    def _masked(
        self, pairs: PairExamples, examples: Sequence[Example], generator: torch.Generator,
        ratios: tuple[float, float, float] | None = None,
    ) -> dict[str, torch.Tensor]:
        """A batch of ``examples``, masked as training masks, or with other ``ratios`` (validation: BERT's)."""
        batch = pairs.batch(examples)
        word_ids, special = batch.pop("word_ids"), batch.pop("special_tokens_mask")
        options = self.masking if ratios is None else {**self.masking, "ratios": ratios}
        batch["input_ids"], batch["labels"] = mask_tokens(
            batch["input_ids"], special == 0, generator=generator, word_ids=word_ids, **options
        )
        return batch


def _examples(name: str, documents: PreparedSplit | Sequence[Document], tokenizer: Tokenizer,
              *options) -> PairExamples:
    split = documents if isinstance(documents, PreparedSplit) else PreparedSplit.from_documents(documents, tokenizer)
    try:
        return PairExamples(split, tokenizer, *options)
    except PLMError as error:
        raise PLMError(f"{name} text: {error}") from None


def _generators(*numbers: int) -> tuple[torch.Generator, random.Random]:
    """A torch generator (the masks) and a Python one (the examples), both seeded from ``numbers``."""
    entropy = np.random.SeedSequence(list(numbers)).generate_state(2, np.uint64)
    return torch.Generator().manual_seed(int(entropy[0])), random.Random(int(entropy[1]))
