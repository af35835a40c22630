"""Sequence to sequence: label-smoothed cross entropy under teacher forcing, translation metrics on held-out pairs.

The decoder reads the reference target shifted right (``<s> y_1 .. y_m``, teacher
forcing) and every position predicts the next token (``y_1 .. y_m </s>``). The loss is
label-smoothed cross entropy (Szegedy et al. 2016; the Transformer used epsilon 0.1):
the target distribution puts 1 - epsilon on the reference token and epsilon spread
evenly over the whole vocabulary, so the loss per target is
(1 - epsilon) * -log p(y) + epsilon * mean_v -log p(v). Padding is no target.

Two terms are logged: ``label_smoothed``, the loss that is trained, and ``nll``, the
plain negative log-likelihood -log p(y) (weight 0: logged, not trained), which is the
one a perplexity is the exp of. ``nll`` comes first because the trainer reports the
first term's perplexity as ``val_perplexity``.

``validation_metrics`` translates held-out sources greedily and scores them against
their references (exact match, BLEU, chrF): the numbers a loss cannot show.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from plm.data.sentence_pairs import (
    BudgetSampler,
    PairRows,
    SentencePair,
    Seq2SeqTokenizers,
    collate,
    token_budget_batches,
)
from plm.decoding import GenerationConfig
from plm.errors import PLMError
from plm.models.base import Seq2SeqModel
from plm.models.recipe import TRANSLATION
from plm.objectives.base import Selection
from plm.objectives.translation import score_translations, translate

NLL, SMOOTHED = "nll", "label_smoothed"  # the logged likelihood, the trained loss


def cross_entropies(logits: torch.Tensor, labels: torch.Tensor, epsilon: float,
                    ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed negative log-likelihood and label-smoothed cross entropy of ``logits`` against ``labels``.

    Args:
        logits: (N, V).
        labels: (N,) target ids.
        epsilon: the label smoothing.
        ignore_index: the label of a position that is no target (padding).

    Returns:
        The summed -log p(y), and the summed (1 - epsilon) * -log p(y) + epsilon * mean_v -log p(v).
    """
    # One log-softmax serves both, and no (N, V) copy of the kept rows is made: the padding's rows are
    # masked out of the sums instead (a boolean index of the log-probabilities cost ~10% of an RNN's step).
    log_probs = logits.float().log_softmax(-1)
    keep = labels != ignore_index
    nll = F.nll_loss(log_probs, labels, ignore_index=ignore_index, reduction="sum")  # sum of -log p(y)
    uniform = -(log_probs.mean(-1) * keep).sum()  # the mean over the vocabulary of -log p(v), summed over targets
    return nll, (1.0 - epsilon) * nll + epsilon * uniform


class Seq2SeqObjective:
    """Teacher-forced batches of similar lengths under a token budget, the label-smoothed loss and the likelihood.

    The pairs are encoded already, in memory ([`EncodedPairs`][plm.data.sentence_pairs.EncodedPairs]) or mapped from a
    prepared corpus ([`PreparedPairs`][plm.data.prepared.PreparedPairs]' splits): the objective reads their lengths, as
    arrays, to group them, and the ids of the pairs of each batch it draws.

    Args:
        train: the training pairs.
        validation: the validation pairs.
        tokenizers: the source and target tokenizers.
        validation_text: the text of the first validation pairs (or of all), in order, for the metrics.
        max_tokens: the padded tokens of a batch at most.
        label_smoothing: epsilon.
        seed: the seed of the batches' draw.
        metric_examples: how many validation pairs ``validation_metrics`` translates (0: none), of those
            ``validation_text`` holds.
        decoding: how ``validation_metrics`` translates.
        select_by: "bleu", "exact_match" or "chrf": the trainer keeps the model with the best such validation
            score in ``best/``; None: no selection.
        max_positions: the model's context (a Transformer's position table); pairs whose source (with
            ``</s>``) or decoder input (``<s> y``) is longer are left out, and counted in ``dropped``.

    Raises:
        PLMError: tokenizers without padding, no training or no validation pair that fits, or a pair longer than
            ``max_tokens`` on its own.
    """

    def __init__(
        self,
        train: PairRows,
        validation: PairRows,
        tokenizers: Seq2SeqTokenizers,
        validation_text: Sequence[SentencePair] = (),
        max_tokens: int = 2048,
        label_smoothing: float = 0.1,
        seed: int = 0,
        metric_examples: int = 200,
        decoding: GenerationConfig = TRANSLATION,
        select_by: str | None = None,
        max_positions: int | None = None,
    ) -> None:
        self.tokenizers = tokenizers
        self.source_pad, self.target_pad = tokenizers.source.required_id("pad"), tokenizers.target.required_id("pad")
        train_kept, validation_kept = fitting(train, max_positions), fitting(validation, max_positions)
        self.dropped = {"train": len(train) - len(train_kept), "validation": len(validation) - len(validation_kept)}
        if not len(train_kept):
            raise PLMError(f"no training pair fits the model's context of {max_positions} tokens")
        if not len(validation_kept):
            raise PLMError(f"no validation pair fits the model's context of {max_positions} tokens")
        self.train_data, self.validation_data = train, validation
        self.sampler = BudgetSampler(
            token_budget_batches(train.source_lengths, train.target_lengths, max_tokens, among=train_kept), seed)
        self.validation_groups = token_budget_batches(validation.source_lengths, validation.target_lengths,
                                                      max_tokens, among=validation_kept)
        self.max_tokens = max_tokens
        self.label_smoothing = label_smoothing
        with_text = validation_kept[validation_kept < len(validation_text)]
        self.metric_pairs = [validation_text[i] for i in with_text[:metric_examples]]
        self.decoding = decoding
        self.selection = Selection(f"val_{select_by}", maximize=True) if select_by else None
        self.train_tokens = int(train.target_lengths[train_kept].sum(dtype=np.int64))
        self.batches_per_epoch = len(self.sampler)
        self.loss_weights = {NLL: 0.0}
        self.perplexity_terms = (NLL,)

    def batch(self, step: int, index: int) -> dict[str, torch.Tensor]:
        """Micro-batch ``index`` of step ``step``: a random group of similar lengths (the same on every call).

        Args:
            step: the optimizer step.
            index: the micro-batch within the step.

        Returns:
            ``source_ids``, ``source_mask``, ``decoder_input_ids`` and ``labels`` (see
            [`collate`][plm.data.sentence_pairs.collate]).
        """
        return collate(self.train_data, self.sampler.indices(step, index), self.source_pad, self.target_pad)

    def size(self, batch: dict[str, torch.Tensor]) -> int:
        """The target tokens of a batch, padding not counted.

        Args:
            batch: a batch of this objective.

        Returns:
            The count.
        """
        return int((batch["labels"] != self.target_pad).sum())

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        """The targets both terms are summed over: the target tokens.

        Args:
            batch: a batch of this objective.

        Returns:
            ``nll`` and ``label_smoothed``.
        """
        targets = self.size(batch)
        return {NLL: targets, SMOOTHED: targets}

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The summed likelihood and label-smoothed loss of a batch under teacher forcing.

        Args:
            model: the encoder-decoder (or its DDP wrapper).
            batch: a batch of this objective.

        Returns:
            ``nll`` (logged, weight 0) and ``label_smoothed`` (trained).
        """
        logits = model(batch["source_ids"], batch["decoder_input_ids"], batch["source_mask"]).logits  # (B, T, V)
        nll, smoothed = cross_entropies(logits.flatten(0, 1), batch["labels"].flatten(), self.label_smoothing,
                                        self.target_pad)
        return {NLL: nll, SMOOTHED: smoothed}

    def validation_batches(self) -> Iterator[dict[str, torch.Tensor]]:
        """The validation pairs in groups under the token budget, the same every time.

        Yields:
            The batches, as [`batch`][plm.objectives.teacher_forcing.Seq2SeqObjective.batch] gives them.
        """
        for group in self.validation_groups:
            yield collate(self.validation_data, group, self.source_pad, self.target_pad)

    def validation_metrics(self, model: nn.Module) -> dict[str, float]:
        """Translate the first ``metric_examples`` validation sources and score them against their references.

        Args:
            model: the encoder-decoder.

        Returns:
            ``bleu``, ``chrf`` and ``exact_match``; none when ``metric_examples`` is 0.
        """
        if not self.metric_pairs:
            return {}
        assert isinstance(model, Seq2SeqModel)  # what this objective trains
        hypotheses = translate(model, self.tokenizers, [p.source for p in self.metric_pairs], self.decoding)
        return score_translations(hypotheses, [[p.target for p in self.metric_pairs]]).as_dict()


def fitting(data: PairRows, max_positions: int | None) -> np.ndarray:
    """Indices of the pairs whose source and decoder input each fit in ``max_positions`` (None: all).

    Args:
        data: the encoded pairs.
        max_positions: the model's context, or None.

    Returns:
        (kept pairs,) int64, the indices, in order.
    """
    if max_positions is None:
        return np.arange(len(data))
    return np.flatnonzero((data.source_lengths <= max_positions) & (data.target_lengths - 1 <= max_positions))
