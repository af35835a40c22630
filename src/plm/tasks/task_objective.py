"""Fine-tuning as objectives of the existing Trainer (BERT section 4, GPT-1 section 3.2).

A [`Task`][plm.tasks.task_objective.Task] says how its examples become features, what loss its head's output
takes, how predictions are read back and which metrics score them; it serves
training ([`TaskObjective`][plm.tasks.task_objective.TaskObjective]), ``plm predict`` and ``plm eval task`` alike.

- classify: one sentence or a ``[CLS] A [SEP] B [SEP]`` pair, cross-entropy on C;
- regress: the same inputs, one value, squared error (STS-B);
- tag: a label per word on its first sub-word, cross-entropy over those pieces;
- qa: start and end positions per window (SQuAD), cross-entropy of each, halved;
- choice: one score per (context, ending) pair, softmax across the choices (SWAG).

On a GPT backbone, classify and choice read GPT-1's transformed inputs, and the
objective adds the auxiliary LM loss on the task text: L3 = L2 + lambda * L1, with
``lm_weight`` lambda (0.5 as in the paper, 0 turns it off) as the term's loss weight.
For a model over words (the feature-based model), ``words`` adds where each word's pieces
start (and, for qa, end) and ``characters`` their ELMo characters ([`plm.tasks.word_inputs`][plm.tasks.word_inputs]).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from plm.errors import PLMError
from plm.models import CausalLM
from plm.objectives import Selection
from plm.progress import progress_bar
from plm.tasks import metrics
from plm.tasks.encoding import (
    IGNORE,
    Feature,
    collate,
    encode_choice,
    encode_tagged,
    encode_text,
    kept_words,
    width_of,
    word_predictions,
)
from plm.tasks.feature_based import FeatureTagger
from plm.tasks.gpt_inputs import TaskInputs
from plm.tasks.model import TaskModel
from plm.tasks.qa import QAPrediction, best_threshold, encode_windows, predict_answer
from plm.tasks.readers import ChoiceExample, QAExample, TaggedSentence, TextExample
from plm.tasks.sift_fine_tuning import SiFT
from plm.tasks.word_inputs import encode_text_words, window_words, word_inputs
from plm.tokenization.tokenizer import Tokenizer

TASKS = ("classify", "pair", "regress", "tag", "qa", "choice")
GPT_TASKS = ("classify", "pair", "regress", "choice")  # those with a GPT-1 input form


class Task:
    """What one kind of task needs; ``labels`` names the classes (tags for a tagger) in id order.

    Args:
        tokenizer: the model's tokenizer.
        max_length: tokens per sequence (QA: per window).
        labels: the class names (tags), in id order.
        causal: the backbone is a GPT: inputs take GPT-1's forms (see [`plm.tasks.gpt_inputs`][plm.tasks.gpt_inputs]).
        words: every feature marks its words' pieces, for a model over words (the feature-based model of
            [`plm.tasks.feature_based`][plm.tasks.feature_based]; see
            [`plm.tasks.word_inputs`][plm.tasks.word_inputs]).
        characters: and carries those words' ELMo ``char_ids`` (implies ``words``).

    Raises:
        PLMError: ``causal`` with a tokenizer without GPT-1's task tokens, or with ``words``.

    Attributes:
        name: the task's name (see `TASKS`).
        head: the head of [`plm.tasks.heads`][plm.tasks.heads] it trains.
        selection: the validation metric that picks the best model.
        default_length: tokens per sequence when none is given (BERT's fine-tuning length).
    """

    name: str
    head: str  # the head of plm.tasks.heads it trains
    selection: str  # the validation metric that picks the best model
    default_length = 128  # tokens per sequence when none is given (BERT's fine-tuning length)

    def __init__(self, tokenizer: Tokenizer, max_length: int, labels: Sequence[str] = (), causal: bool = False,
                 words: bool = False, characters: bool = False) -> None:
        if causal and (words or characters):
            raise PLMError("a model over words reads an encoder's word pieces; a GPT's task inputs mark no words")
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.labels = tuple(labels)
        self.causal = causal
        self.words, self.characters = words or characters, characters
        self.gpt_inputs = TaskInputs(tokenizer, max_length) if causal else None

    @property
    def outputs(self) -> int:
        """The head's output size."""
        return len(self.labels)

    def encode(self, example: Any) -> list[Feature]:
        """An example's features (several for a QA example's windows); each kind of task implements it.

        Args:
            example: one of the task's examples (see [`plm.tasks.readers`][plm.tasks.readers]).

        Returns:
            The features: token ids and, for a labelled example, its targets.
        """
        raise NotImplementedError

    def loss(self, output: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The task loss of a batch, summed over its targets: by default, cross-entropy of one class per row.

        A classifier's classes are its labels, a multiple-choice scorer's its choices; a task whose targets are
        something else overrides it.

        Args:
            output: the task model's output on the batch, its logits (batch, classes).
            batch: the batch, with its ``labels`` (batch,), each row's class.

        Returns:
            The summed loss, a float32 scalar.
        """
        return F.cross_entropy(output.logits.float(), batch["labels"], reduction="sum")

    def count(self, batch: dict[str, torch.Tensor]) -> int:
        """The number of targets in a batch: its examples (a tagger's: its labelled words).

        Args:
            batch: the batch.

        Returns:
            The count the summed loss is divided by.
        """
        return len(batch["input_ids"])

    def logits(self, output: Any) -> torch.Tensor:
        """What SiFT compares: the class logits (the last axis is the distribution).

        Args:
            output: the task model's output.

        Returns:
            The logits.
        """
        return output.logits

    def predict(
        self, outputs: list[tuple[Any, dict[str, torch.Tensor]]], features: list[Feature], examples: Sequence[Any]
    ) -> list[Any]:
        """One prediction per example from the model's outputs over ``features``, batch by batch.

        Each kind of task implements it.

        Args:
            outputs: the model's output on each batch of ``features``, with the batch (see
                [`model_outputs`][plm.tasks.task_objective.model_outputs]).
            features: the examples' features, in order, each with its example's index (see
                [`encode_all`][plm.tasks.task_objective.encode_all]).
            examples: the examples.

        Returns:
            The predictions, one per example.
        """
        raise NotImplementedError

    def probabilities(self, outputs: list[tuple[Any, dict[str, torch.Tensor]]]) -> list[Any] | None:
        """Each example's probabilities over its answers, where the task has a softmax over them; None otherwise.

        Args:
            outputs: the model's output on each batch (see [`model_outputs`][plm.tasks.task_objective.model_outputs]).

        Returns:
            None here; a classifier's and a multiple-choice task's give one row per example.
        """
        return None

    def score(self, predictions: Sequence[Any], examples: Sequence[Any]) -> dict[str, float]:
        """The task's metrics of ``predictions`` against the labelled ``examples``; each kind of task implements it.

        Args:
            predictions: one per example (see [`predict`][plm.tasks.task_objective.Task.predict]).
            examples: the labelled examples.

        Returns:
            The metrics by name (``accuracy``, ``f1`` ...), without the ``val_`` prefix.
        """
        raise NotImplementedError

    def calibrate(self, model: torch.nn.Module) -> None:
        """Write into ``model``'s config what the last `predict` on the dev set chose (none by default).

        Args:
            model: the model being fine-tuned (or its DDP wrapper).
        """


class Classification(Task):
    """Classification of a sentence or a pair: one logit per label, cross-entropy.

    ``symmetric`` (a GPT only): every example is a pair without an order, read in both (GPT-1's similarity
    form: QQP, MRPC, STS-B); otherwise a pair is GPT-1's entailment form or BERT's ``[CLS] A [SEP] B [SEP]``.

    Args:
        *args: [`Task`][plm.tasks.task_objective.Task]'s arguments.
        symmetric: read every pair in both orders.
        **kwargs: [`Task`][plm.tasks.task_objective.Task]'s keyword arguments.

    Raises:
        PLMError: ``symmetric`` for an encoder, or as [`Task`][plm.tasks.task_objective.Task].
    """

    name, head, selection = "classify", "classify", "val_accuracy"

    def __init__(self, *args: Any, symmetric: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if symmetric and self.gpt_inputs is None:
            raise PLMError("`symmetric` is GPT-1's similarity form; an encoder reads a pair as [CLS] A [SEP] B [SEP]")
        self.symmetric = symmetric

    def encode(self, example: TextExample) -> list[Feature]:
        """The example's ids (GPT-1's form on a GPT, ``[CLS] A [SEP] B [SEP]`` otherwise) and its target if labelled.

        Args:
            example: the sentence or pair.

        Returns:
            One feature: ``input_ids`` (two rows for a symmetric pair), ``token_type_ids`` on an encoder, and
            ``labels``; with ``words``, the words' inputs too (see
            [`encode_text_words`][plm.tasks.word_inputs.encode_text_words]).

        Raises:
            PLMError: a ``symmetric`` task's example without a pair, a label that is not the task's, or (GPT) a
                ``max_length`` too small for the task tokens.
        """
        if self.symmetric and example.text_pair is None:
            raise PLMError(f"`symmetric` reads sentence pairs; {example.text!r} has no second sentence")
        if self.gpt_inputs is not None:
            ids: list[int] | list[list[int]]
            if example.text_pair is None:
                ids = self.gpt_inputs.classification(example.text)
            elif self.symmetric:
                ids = self.gpt_inputs.similarity(example.text, example.text_pair)
            else:
                ids = self.gpt_inputs.entailment(example.text, example.text_pair)
            feature: Feature = {"input_ids": ids}
        elif self.words:
            feature = encode_text_words(self.tokenizer, example, self.max_length, self.characters)
        else:
            feature = encode_text(self.tokenizer, example, self.max_length)
        if example.label is not None:
            feature["labels"] = self.target(example.label)
        return [feature]

    def target(self, label: Any) -> Any:
        """The label's class id.

        Args:
            label: the example's label.

        Returns:
            Its index in ``labels``.

        Raises:
            PLMError: a label that is not one of the task's (see
                [`class_of`][plm.tasks.task_objective.Classification.class_of]).
        """
        return self.labels.index(self.class_of(label))

    def class_of(self, label: Any) -> str:
        """The class an example's label stands for: the label itself, or the class of that id.

        Where the classes have names (``plm finetune --labels negative,positive``, a Hugging Face model's
        ``id2label``) and none of them is a number, a label may also be written as its class id, 0, 1, ...,
        as GLUE's files write SST-2's classes.

        Args:
            label: the example's label.

        Returns:
            The class, one of ``labels``.

        Raises:
            PLMError: a label that is neither one of the task's nor, where those are names, a class id.
        """
        label = str(label)
        if label in self.labels:
            return label
        named = not any(name.lstrip("-").isdigit() for name in self.labels)
        if named and label.isdigit() and int(label) < len(self.labels):
            return self.labels[int(label)]
        ids = f", or their ids 0 to {len(self.labels) - 1}" if named else ""
        raise PLMError(f"label {label!r} is not one of the task's labels ({', '.join(self.labels)}{ids})")

    def predict(self, outputs, features, examples):
        """The most likely class of each example.

        Args:
            outputs (list[tuple[Any, dict[str, torch.Tensor]]]): the model's output on each batch of ``features``,
                with the batch (see [`model_outputs`][plm.tasks.task_objective.model_outputs]).
            features (list[Feature]): the examples' features, in order.
            examples (Sequence[TextExample]): the examples.

        Returns:
            (list[str]): the predicted labels, one per example.
        """
        return [self.labels[i] for i in most_likely(outputs)]

    def probabilities(self, outputs):
        """Each example's probability of each label.

        Args:
            outputs (list[tuple[Any, dict[str, torch.Tensor]]]): the model's output on each batch.

        Returns:
            (list[dict[str, float]]): label -> probability, one mapping per example.
        """
        return [dict(zip(self.labels, row)) for row in softmax_rows(outputs)]

    def score(self, predictions, examples):
        """Accuracy and Matthews correlation, and with two labels the second one's F1.

        Args:
            predictions (Sequence[str]): the predicted labels.
            examples (Sequence[TextExample]): the labelled examples.

        Returns:
            (dict[str, float]): ``accuracy``, ``matthews`` and, for two labels, ``f1``.
        """
        gold = [self.class_of(e.label) for e in examples]
        scores = {"accuracy": metrics.accuracy(predictions, gold),
                  "matthews": metrics.matthews_correlation(predictions, gold)}
        if len(self.labels) == 2:
            scores["f1"] = metrics.f1(predictions, gold, positive=self.labels[1])
        return scores


class Regression(Classification):
    """Regression of one value (STS-B) from a sentence or pair, read as `Classification` reads them.

    The loss is the squared error.
    """
    name, head, selection = "regress", "classify", "val_pearson"

    @property
    def outputs(self) -> int:
        """One output: the value."""
        return 1

    def target(self, label: Any) -> float:
        """The label as a number.

        Args:
            label: the example's score.

        Returns:
            The score as a float.
        """
        return float(label)

    def probabilities(self, outputs):
        """None: a score has no softmax.

        Args:
            outputs (list[tuple[Any, dict[str, torch.Tensor]]]): the model's output on each batch.

        Returns:
            (None): nothing to show.
        """
        return None

    def loss(self, output, batch):
        """Squared error of the values, summed over the batch.

        Args:
            output (SequenceClassifierOutput): the head's output, its logits (batch, 1).
            batch (dict[str, torch.Tensor]): the batch the output is of.

        Returns:
            (torch.Tensor): the summed loss.
        """
        return F.mse_loss(output.logits.float().squeeze(-1), batch["labels"], reduction="sum")

    def logits(self, output):
        """Refuse SiFT, which compares class distributions: a regression has none.

        Args:
            output (SequenceClassifierOutput): the head's output.

        Raises:
            PLMError: always.
        """
        raise PLMError("SiFT compares class distributions; a regression has none")

    def predict(self, outputs, features, examples):
        """The predicted value of each example.

        Args:
            outputs (list[tuple[Any, dict[str, torch.Tensor]]]): the model's output on each batch of ``features``,
                with the batch (see [`model_outputs`][plm.tasks.task_objective.model_outputs]).
            features (list[Feature]): the examples' features, in order.
            examples (Sequence[TextExample]): the examples.

        Returns:
            (list[float]): the values, one per example.
        """
        return [v for output, _ in outputs for v in output.logits.squeeze(-1).tolist()]

    def score(self, predictions, examples):
        """Pearson and Spearman correlation of the values with the gold scores.

        Args:
            predictions (Sequence[float]): the predicted values.
            examples (Sequence[TextExample]): the labelled examples.

        Returns:
            (dict[str, float]): ``pearson`` and ``spearman``.
        """
        gold = [float(e.label) for e in examples]
        return {"pearson": metrics.pearson(predictions, gold), "spearman": metrics.spearman(predictions, gold)}


class Tagging(Task):
    """Tagging: a label per word, on its first sub-word.

    Every feature marks its words' first pieces (``word_starts``, what a tagger over words reads), ``words`` or
    not; with ``characters`` (a feature-based tagger with ELMo) it also carries those words' ELMo ``char_ids``.
    """

    name, head, selection = "tag", "tag", "val_f1"

    def encode(self, example: TaggedSentence) -> list[Feature]:
        """The sentence's ids, each word's tag id on its first piece, ``word_ids`` and ``word_starts``.

        Args:
            example: the sentence.

        Returns:
            One feature (see [`encode_tagged`][plm.tasks.encoding.encode_tagged]), with ``char_ids`` when
            ``characters``.

        Raises:
            PLMError: tags that are not the task's, or a ``max_length`` that leaves no room for the words.
        """
        unknown = set(example.tags) - set(self.labels)
        if unknown:
            raise PLMError(f"tags {', '.join(sorted(unknown))} are not among the task's ({', '.join(self.labels)})")
        feature = encode_tagged(self.tokenizer, example, {t: i for i, t in enumerate(self.labels)}, self.max_length)
        words = kept_words(example, feature["word_ids"]) if self.characters else None
        return [feature | word_inputs(feature["word_ids"], words)]

    def loss(self, output, batch):
        """Cross-entropy over the labelled pieces (the words' first), summed.

        Args:
            output (TokenClassifierOutput): the head's output, its logits (batch, time, labels).
            batch (dict[str, torch.Tensor]): the batch the output is of.

        Returns:
            (torch.Tensor): the summed loss.
        """
        logits, labels = output.logits.float().flatten(0, 1), batch["labels"].flatten()
        return F.cross_entropy(logits, labels, ignore_index=IGNORE, reduction="sum")

    def count(self, batch):
        """The labelled pieces of a batch: one per word.

        Args:
            batch (dict[str, torch.Tensor]): the batch.

        Returns:
            (int): the count.
        """
        return int((batch["labels"] != IGNORE).sum())

    def predict(self, outputs, features, examples):
        """Each word's tag, read at its first piece; a word cut off by truncation gets ``O`` (or the first tag).

        Args:
            outputs (list[tuple[Any, dict[str, torch.Tensor]]]): the model's output on each batch of ``features``,
                with the batch (see [`model_outputs`][plm.tasks.task_objective.model_outputs]).
            features (list[Feature]): the examples' features, in order.
            examples (Sequence[TaggedSentence]): the sentences.

        Returns:
            (list[list[str]]): one tag per word of each sentence.
        """
        tokens = most_likely(outputs)  # each sentence's: one class per token
        outside = self.labels.index("O") if "O" in self.labels else 0
        return [
            [self.labels[i] for i in word_predictions(row, feature["word_ids"], len(example.words), outside)]
            for row, feature, example in zip(tokens, features, examples)
        ]

    def score(self, predictions, examples):
        """Entity-level F1, precision and recall, micro-averaged (see `entity_scores`).

        Args:
            predictions (Sequence[Sequence[str]]): each sentence's predicted tags.
            examples (Sequence[TaggedSentence]): the tagged sentences.

        Returns:
            (dict[str, float]): ``f1``, ``precision`` and ``recall``, in [0, 1].
        """
        total = metrics.entity_scores([e.tags for e in examples], predictions)["micro avg"]
        return {"f1": total["f1"], "precision": total["precision"], "recall": total["recall"]}


class QuestionAnswering(Task):
    """SQuAD; ``threshold`` (tau) is v2.0's margin a span must beat null by (None: always a span).

    ``fit_threshold``: choose tau on the labelled examples being predicted, as fine-tuning does on the
    dev set ([`calibrate`][plm.tasks.task_objective.QuestionAnswering.calibrate] then writes it into the model); a
    fine-tuned model's task keeps its saved tau.

    Args:
        *args: [`Task`][plm.tasks.task_objective.Task]'s arguments.
        stride: context tokens between the starts of two windows.
        max_answer_length: the most tokens of an answer.
        threshold: tau, or None.
        fit_threshold: choose tau on the examples predicted when some are unanswerable.
        **kwargs: [`Task`][plm.tasks.task_objective.Task]'s keyword arguments.

    Raises:
        PLMError: a GPT backbone (``causal``).
    """

    name, head, selection = "qa", "span", "val_exact_match"
    default_length = 384  # BERT's SQuAD windows, 128 tokens apart

    def __init__(self, *args: Any, stride: int = 128, max_answer_length: int = 30, threshold: float | None = None,
                 fit_threshold: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.causal:
            raise PLMError("extractive QA is for encoders (BERT, ALBERT, DeBERTa)")
        self.stride, self.max_answer_length = stride, max_answer_length
        self.threshold, self.fit_threshold = threshold, fit_threshold

    @property
    def outputs(self) -> int:
        """Two outputs: start and end."""
        return 2

    def encode(self, example: QAExample) -> list[Feature]:
        """The question's windows (see [`encode_windows`][plm.tasks.qa.encode_windows]).

        Args:
            example: the question.

        Returns:
            One feature per window; with ``words``, with its words' inputs and the answer widened to whole words
            (see [`window_words`][plm.tasks.word_inputs.window_words]).

        Raises:
            PLMError: as [`encode_windows`][plm.tasks.qa.encode_windows].
        """
        windows = encode_windows(self.tokenizer, example, self.max_length, self.stride)
        if self.words:
            windows = [w | window_words(self.tokenizer, example, w, self.characters) for w in windows]
        return windows

    def loss(self, output, batch):
        """Cross-entropy of the start positions plus that of the end positions, halved, summed over the windows.

        Padding positions are masked out.

        Args:
            output (SpanOutput): the head's output, its start and end logits (batch, time).
            batch (dict[str, torch.Tensor]): the batch, with ``attention_mask``, ``start_positions`` and
                ``end_positions``.

        Returns:
            (torch.Tensor): the summed loss.
        """
        padding = batch["attention_mask"] == 0  # no answer starts or ends in the padding
        start = output.start_logits.float().masked_fill(padding, -1e4)
        end = output.end_logits.float().masked_fill(padding, -1e4)
        loss = F.cross_entropy(start, batch["start_positions"], reduction="sum")
        loss = loss + F.cross_entropy(end, batch["end_positions"], reduction="sum")
        return loss / 2

    def logits(self, output):
        """Refuse SiFT, which is for classification and multiple choice.

        Args:
            output (SpanOutput): the head's output.

        Raises:
            PLMError: always.
        """
        raise PLMError("SiFT is for classification and multiple choice")

    def spans(self, outputs, features, examples) -> list[QAPrediction]:
        """Each question's best span, merged over its windows (see [`predict_answer`][plm.tasks.qa.predict_answer]).

        Args:
            outputs (list[tuple[Any, dict[str, torch.Tensor]]]): the model's output on each batch of ``features``,
                with the batch (see [`model_outputs`][plm.tasks.task_objective.model_outputs]).
            features (list[Feature]): the examples' features, in order.
            examples (Sequence[QAExample]): the questions.

        Returns:
            One prediction per question.
        """
        # The span search is many small ops per window: on the CPU, after one copy per batch.
        starts = [row for output, _ in outputs for row in output.start_logits.float().cpu()]
        ends = [row for output, _ in outputs for row in output.end_logits.float().cpu()]
        by_example: dict[int, list[int]] = {}
        for k, feature in enumerate(features):
            by_example.setdefault(feature["example"], []).append(k)
        return [
            predict_answer(example.context, [features[k] for k in by_example[i]], [starts[k] for k in by_example[i]],
                           [ends[k] for k in by_example[i]], self.max_answer_length)
            for i, example in enumerate(examples)
        ]

    def predict(self, outputs, features, examples):
        """Each question's answer; "" where the span does not beat null by ``threshold``.

        With ``fit_threshold`` and unanswerable questions among ``examples`` (a v2.0 dev set), ``threshold`` is
        first chosen on them (see [`best_threshold`][plm.tasks.qa.best_threshold]).

        Args:
            outputs (list[tuple[Any, dict[str, torch.Tensor]]]): the model's output on each batch of ``features``,
                with the batch (see [`model_outputs`][plm.tasks.task_objective.model_outputs]).
            features (list[Feature]): the examples' features, in order.
            examples (Sequence[QAExample]): the questions.

        Returns:
            (list[str]): one answer per question.
        """
        spans = self.spans(outputs, features, examples)
        if self.fit_threshold and any(e.impossible for e in examples):  # v2.0 dev: choose tau here
            gold = {i: [a.text for a in e.answers] for i, e in enumerate(examples)}
            self.threshold = best_threshold(dict(enumerate(spans)), gold)
        return [span.answer(self.threshold) for span in spans]

    def calibrate(self, model: torch.nn.Module) -> None:
        """Keep the tau chosen on the dev set in the model's head (a feature-based model's end) config.

        So its saves predict with it.

        Args:
            model: the task model or feature-based model (or its DDP wrapper).
        """
        model = getattr(model, "module", model)  # the model inside a DDP wrapper
        if not (self.fit_threshold and self.threshold is not None):
            return
        tau = float(self.threshold)
        if isinstance(model, FeatureTagger):
            model.config = dataclasses.replace(
                model.config, tagger=dataclasses.replace(model.config.tagger, null_threshold=tau)
            )
        else:
            assert isinstance(model, TaskModel)  # a span head's
            model.config = dataclasses.replace(model.config, head=dataclasses.replace(model.config.head,
                                                                                      null_threshold=tau))

    def score(self, predictions, examples):
        """SQuAD's exact match and F1, as fractions (see [`squad_scores`][plm.tasks.metrics.squad_scores]).

        Args:
            predictions (Sequence[str]): one answer per question.
            examples (Sequence[QAExample]): the labelled questions.

        Returns:
            (dict[str, float]): ``exact_match`` and ``f1``.
        """
        gold = {e.id: [a.text for a in e.answers] for e in examples}
        return metrics.squad_scores({e.id: p for e, p in zip(examples, predictions)}, gold)


class MultipleChoice(Task):
    """Multiple choice (SWAG): one score per (context, ending) sequence, cross-entropy across the choices.

    Args:
        *args: [`Task`][plm.tasks.task_objective.Task]'s arguments.
        **kwargs: [`Task`][plm.tasks.task_objective.Task]'s keyword arguments.

    Raises:
        PLMError: ``words``: a model over words reads one sequence per example, a choice has several.
    """
    name, head, selection = "choice", "choice", "val_accuracy"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.words:
            raise PLMError("multiple choice reads several (context, ending) sequences per example; the "
                           "feature-based model reads one")

    @property
    def outputs(self) -> int:
        """One output: a choice's score."""
        return 1

    def encode(self, example: ChoiceExample) -> list[Feature]:
        """One sequence per ending, each reading the context and the prefix first.

        On a GPT, GPT-1's ``start context prefix $ ending extract``; on an encoder, ``[CLS] context [SEP] prefix
        ending [SEP]``.

        Args:
            example: the context, the prefix and the endings.

        Returns:
            One feature: (choices, time) ids and the right ending's index as ``labels``.

        Raises:
            PLMError: (GPT) no endings, or a ``max_length`` too small for the task tokens.
        """
        if self.gpt_inputs is not None:
            ids = self.gpt_inputs.choice(example.context, example.endings, example.prefix or None)
            feature: Feature = {"input_ids": ids}
        else:
            feature = encode_choice(self.tokenizer, example, self.max_length)
        if example.label is not None:
            feature["labels"] = example.label
        return [feature]

    def predict(self, outputs, features, examples):
        """The best-scoring ending of each example.

        Args:
            outputs (list[tuple[Any, dict[str, torch.Tensor]]]): the model's output on each batch of ``features``,
                with the batch (see [`model_outputs`][plm.tasks.task_objective.model_outputs]).
            features (list[Feature]): the examples' features, in order.
            examples (Sequence[ChoiceExample]): the examples.

        Returns:
            (list[int]): the endings' indices.
        """
        return most_likely(outputs)

    def probabilities(self, outputs):
        """Each example's probability of each ending.

        Args:
            outputs (list[tuple[Any, dict[str, torch.Tensor]]]): the model's output on each batch.

        Returns:
            (list[list[float]]): one probability per ending, per example.
        """
        return softmax_rows(outputs)

    def score(self, predictions, examples):
        """Accuracy of the chosen endings.

        Args:
            predictions (Sequence[int]): the chosen endings' indices.
            examples (Sequence[ChoiceExample]): the labelled examples.

        Returns:
            (dict[str, float]): ``accuracy``.
        """
        return {"accuracy": metrics.accuracy(predictions, [e.label for e in examples])}


TASK_CLASSES: dict[str, type[Task]] = {
    "classify": Classification, "pair": Classification, "regress": Regression,
    "tag": Tagging, "qa": QuestionAnswering, "choice": MultipleChoice,
}


def most_likely(outputs: list[tuple[Any, dict[str, torch.Tensor]]]) -> list[Any]:
    """Each row's most likely class (a tagger's: each token's), batch after batch.

    Args:
        outputs: the model's output on each batch, with the batch (see
            [`model_outputs`][plm.tasks.task_objective.model_outputs]); its logits (batch, classes) or (batch, time,
            classes).

    Returns:
        One class index per row (a list of them per token row), in the batches' order.
    """
    return [row for output, _ in outputs for row in output.logits.argmax(-1).tolist()]


def softmax_rows(outputs: list[tuple[Any, dict[str, torch.Tensor]]]) -> list[list[float]]:
    """Each row's softmax over its logits (batch, classes), batch after batch, in fp32.

    Args:
        outputs: the model's output on each batch, with the batch (see
            [`model_outputs`][plm.tasks.task_objective.model_outputs]).

    Returns:
        One list of probabilities per row.
    """
    return [row for output, _ in outputs for row in output.logits.float().softmax(-1).tolist()]


def encode_all(task: Task, examples: Sequence[Any]) -> list[Feature]:
    """Every example's features, each knowing its example's index (``example``).

    Args:
        task: the task.
        examples: its examples.

    Returns:
        The features, in the examples' order.

    Raises:
        PLMError: an example the task cannot encode.
    """
    return [feature | {"example": i} for i, example in enumerate(examples) for feature in task.encode(example)]


def batches(task: Task, features: Sequence[Feature], batch_size: int) -> Iterator[dict[str, torch.Tensor]]:
    """The features as collated batches of ``batch_size``, in order.

    Args:
        task: the task (for its tokenizer's padding id).
        features: the features.
        batch_size: features per batch.

    Yields:
        Each batch (see [`collate`][plm.tasks.encoding.collate]), without the keys kept for reading predictions.
    """
    for first in range(0, len(features), batch_size):
        yield collate([model_inputs(f) for f in features[first:first + batch_size]], task.tokenizer.padding_id)


def model_inputs(feature: Feature) -> Feature:
    """What a batch carries: ids and targets; not the offsets and word numbers kept for reading predictions.

    Args:
        feature: a feature.

    Returns:
        The feature without ``offsets``, ``word_ids`` and ``example``.
    """
    return {k: v for k, v in feature.items() if k not in ("offsets", "word_ids", "example")}


ENCODER_INPUTS = ("input_ids", "attention_mask", "token_type_ids")  # what a model that declares no ``inputs`` reads


def forward(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> Any:
    """``model``'s output on the batch inputs it takes (its ``inputs``; a DDP wrapper's ``module``'s).

    Args:
        model: the model, or its DDP wrapper; one without ``inputs`` reads `ENCODER_INPUTS`.
        batch: the batch.

    Returns:
        The model's output.
    """
    names = getattr(getattr(model, "module", model), "inputs", ENCODER_INPUTS)
    return model(**{k: batch[k] for k in names if k in batch})


@torch.no_grad()
def model_outputs(
    model: torch.nn.Module, task: Task, features: Sequence[Feature], batch_size: int = 32, progress: bool = False
) -> list[tuple[Any, dict[str, torch.Tensor]]]:
    """The model's output (in eval mode) on each batch of ``features``, with the batch.

    What [`Task.predict`][plm.tasks.task_objective.Task.predict] reads, and what a caller that wants more than the
    predictions (their probabilities) reads too. The model goes back to its mode after.

    Args:
        model: the model.
        task: the task.
        features: the features.
        batch_size: features per batch.
        progress: show a progress bar of the batches.

    Returns:
        (output, batch) for each batch, the batch on the model's device.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    outputs = []
    with progress_bar(total=math.ceil(len(features) / batch_size), disable=not progress, desc=task.name,
                      unit=" batches", leave=False) as bar:
        for batch in batches(task, features, batch_size):
            batch = {k: v.to(device) for k, v in batch.items()}
            outputs.append((forward(model, batch), batch))
            bar.update()
    model.train(was_training)
    return outputs


def run(
    model: torch.nn.Module,
    task: Task,
    examples: Sequence[Any],
    batch_size: int = 32,
    features: list[Feature] | None = None,
    progress: bool = False,
) -> tuple[list[Any], dict[str, float] | None]:
    """Predictions for ``examples`` and, when they are labelled, the task's metrics.

    Args:
        model: the task model.
        task: the task.
        examples: the examples.
        batch_size: features per batch.
        features: the examples' features, already encoded (see [`encode_all`][plm.tasks.task_objective.encode_all]);
            None encodes them.
        progress: show a progress bar of the batches.

    Returns:
        The predictions, one per example, and the metrics (None for unlabelled examples).

    Raises:
        PLMError: an example the task cannot encode.
    """
    features = encode_all(task, examples) if features is None else features
    predictions = task.predict(model_outputs(model, task, features, batch_size, progress), features, examples)
    return predictions, task.score(predictions, examples) if labelled(examples) else None


def labelled(examples: Sequence[Any]) -> bool:
    """Whether every example carries its answer: a label, tags, or (SQuAD) answers or v2.0's no-answer mark.

    Args:
        examples: the examples.

    Returns:
        True when all are labelled.
    """
    return all(getattr(e, "label", 0) is not None and (not hasattr(e, "tags") or e.tags)
               and (not hasattr(e, "answers") or e.answers or e.impossible) for e in examples)


class TaskObjective:
    """A labelled training set as batches for the Trainer, and the task's validation metrics.

    Batch m (``step * micro_batches_per_step + index``) is slice m of the epoch's
    order (seeded by ``seed`` and the epoch), so ``batches_per_epoch`` micro-batches
    read every training example once. The order is a shuffle grouped by length
    ([`length_grouped_order`][plm.tasks.task_objective.length_grouped_order]): a batch pads to its longest sequence, and
    SST-2's phrases of 3 to 60 tokens would otherwise pay for the longest in every batch. ``lm_weight`` > 0 on a GPT
    backbone adds GPT-1's auxiliary LM term ``lm``; ``sift`` adds DeBERTa's SiFT term ``sift`` (weight 1);
    ``mix_penalty`` (a feature-based model's ``penalty``) adds ELMo's L2 term on its scalar mixes' weights, lambda *
    ||s||^2, as ``mix_l2`` (once per step, not per target).

    Only ``lm`` is a perplexity: a class, tag, span or choice distribution's exp(loss)
    means nothing next to a language model's, so those runs log no ``val_perplexity``.

    Args:
        task: the task.
        train: the training examples (the unlabelled ones are left out).
        validation: the dev examples.
        batch_size: examples (QA: windows) per micro-batch.
        seed: the seed of the batches' order.
        micro_batches_per_step: micro-batches in an optimizer step (under torchrun, the processes).
        lm_weight: lambda of GPT-1's auxiliary LM loss; 0 (or an encoder) adds none.
        sift: SiFT's settings, or None.
        mix_penalty: returns the scalar mixes' L2 penalty, or None.

    Raises:
        PLMError: a training set without labelled examples, or an example the task cannot encode.
    """

    def __init__(
        self,
        task: Task,
        train: Sequence[Any],
        validation: Sequence[Any],
        batch_size: int = 32,
        seed: int = 0,
        micro_batches_per_step: int = 1,
        lm_weight: float = 0.0,
        sift: SiFT | None = None,
        mix_penalty: Callable[[], torch.Tensor] | None = None,
    ) -> None:
        self.task = task
        self.features = encode_all(task, train)
        self.features = [f for f in self.features if "labels" in f or "start_positions" in f]
        if not self.features:
            raise PLMError("the training set has no labelled examples")
        self.validation = list(validation)
        self.batch_size, self.seed, self.per_step = batch_size, seed, micro_batches_per_step
        self.batches_per_epoch = math.ceil(len(self.features) / batch_size)
        self.lengths = torch.tensor([width_of(f) for f in self.features])
        self.train_tokens = int(self.lengths.sum())
        self.lm = lm_weight > 0 and task.causal
        self.sift = sift
        self.mix_penalty = mix_penalty
        self.loss_weights = {"lm": lm_weight} if self.lm else {}
        self.perplexity_terms = ("lm",)
        self.selection = Selection(task.selection, maximize=True)
        self.validation_features = encode_all(task, self.validation)
        self._order: tuple[int, torch.Tensor] | None = None
        self._validation_outputs: list[tuple[Any, dict[str, torch.Tensor]]] | None = None

    def batch(self, step: int, index: int) -> dict[str, torch.Tensor]:
        """Micro-batch ``index`` of optimizer step ``step``.

        It is slice m of its epoch's order, m = ``step * micro_batches_per_step + index``.

        Args:
            step: the optimizer step.
            index: the micro-batch within the step.

        Returns:
            The collated batch.
        """
        number = step * self.per_step + index
        epoch, position = divmod(number, self.batches_per_epoch)
        if self._order is None or self._order[0] != epoch:
            generator = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
            self._order = (epoch, length_grouped_order(self.lengths, self.batch_size, generator))
        rows = self._order[1][position * self.batch_size:(position + 1) * self.batch_size].tolist()
        return collate([model_inputs(self.features[r]) for r in rows], self.task.tokenizer.padding_id)

    def size(self, batch: dict[str, torch.Tensor]) -> int:
        """The tokens of a batch (padding not counted), for the trainer's count of tokens read.

        Args:
            batch: the batch.

        Returns:
            The number of ones in its attention mask.
        """
        return int(batch["attention_mask"].sum())

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        """The targets each loss term of a batch is summed over.

        Args:
            batch: the batch.

        Returns:
            ``task``: the task's count (see [`Task.count`][plm.tasks.task_objective.Task.count]); ``lm``: the real next
            tokens; ``sift``: the rows; ``mix_l2``: 1; each only for the terms the objective adds.
        """
        counts = {"task": self.task.count(batch)}
        if self.lm:
            counts["lm"] = int(lm_mask(batch["attention_mask"]).sum())
        if self.adversarial():
            counts["sift"] = len(batch["input_ids"])
        if self.mix_penalty is not None:
            counts["mix_l2"] = 1  # one penalty per micro-batch: the step's mean is the penalty itself
        return counts

    def adversarial(self) -> bool:
        """Whether the SiFT term is added: in training only, since its ascent step needs gradients.

        Validation runs without them, and its loss is the task's alone.

        Returns:
            True with SiFT and gradients enabled.
        """
        return self.sift is not None and torch.is_grad_enabled()

    def loss(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The summed loss terms of a batch.

        Without gradients (validation), the output is kept for
        [`validation_metrics`][plm.tasks.task_objective.TaskObjective.validation_metrics] when
        [`validation_batches`][plm.tasks.task_objective.TaskObjective.validation_batches] asked for it.

        Args:
            model: the model (or its DDP wrapper).
            batch: the batch.

        Returns:
            ``task``, and ``lm``, ``sift`` and ``mix_l2`` where the objective adds them; each a sum over its targets
            (see [`target_counts`][plm.tasks.task_objective.TaskObjective.target_counts]).

        Raises:
            PLMError: SiFT on a regression or QA task, or on a model without normalised embeddings.
        """
        output = forward(model, batch)
        if self._validation_outputs is not None and not torch.is_grad_enabled():
            self._validation_outputs.append((output, batch))
        losses = {"task": self.task.loss(output, batch)}
        if self.lm:
            losses["lm"] = auxiliary_lm_loss(output.backbone.logits, batch["input_ids"], batch["attention_mask"])
        if self.sift is not None and self.adversarial():
            def perturbed_logits() -> torch.Tensor:
                return self.task.logits(forward(model, batch))

            losses["sift"] = self.sift.loss(model, perturbed_logits, self.task.logits(output))
        if self.mix_penalty is not None:
            losses["mix_l2"] = self.mix_penalty()
        return losses

    def validation_batches(self) -> Iterator[dict[str, torch.Tensor]]:
        """The labelled dev features in order, as batches.

        When they are all of them, the outputs that their losses compute are kept for
        [`validation_metrics`][plm.tasks.task_objective.TaskObjective.validation_metrics], so an evaluation runs the dev
        set once, not twice.

        Returns:
            The batches.
        """
        labelled_features = [f for f in self.validation_features if "labels" in f or "start_positions" in f]
        self._validation_outputs = [] if len(labelled_features) == len(self.validation_features) else None
        return batches(self.task, labelled_features, self.batch_size)

    def validation_metrics(self, model: torch.nn.Module) -> dict[str, float]:
        """The task's metrics on the dev set; what the dev set calibrates (SQuAD v2.0's tau) goes into the model.

        Args:
            model: the model being fine-tuned.

        Returns:
            The metrics by name (none for an unlabelled dev set).
        """
        outputs, self._validation_outputs = self._validation_outputs, None
        if outputs is None or sum(len(batch["input_ids"]) for _, batch in outputs) != len(self.validation_features):
            scores = run(model, self.task, self.validation, self.batch_size, self.validation_features)[1] or {}
        elif not labelled(self.validation):
            scores = {}
        else:
            predictions = self.task.predict(outputs, self.validation_features, self.validation)
            scores = self.task.score(predictions, self.validation)
        self.task.calibrate(model)
        return scores


def length_grouped_order(
    lengths: torch.Tensor, batch_size: int, generator: torch.Generator, window: int = 50
) -> torch.Tensor:
    """A permutation of the rows whose consecutive ``batch_size`` slices hold similar lengths, still random.

    The rows are shuffled, cut into windows of ``window`` batches, each window sorted by length and cut
    into batches, and the batches shuffled (the last, possibly short one stays last). Every row comes once
    an epoch, and a batch is a random draw among rows of about its length, as with Hugging Face's
    ``group_by_length``.

    Args:
        lengths: (N,) each row's tokens, a multiple-choice row's its longest choice's.
        batch_size: rows per batch.
        generator: the random numbers.
        window: batches per window sorted by length.

    Returns:
        (N,) the rows' order.
    """
    shuffled = torch.randperm(len(lengths), generator=generator)
    span = batch_size * window
    grouped = torch.cat([part[lengths[part].argsort(descending=True, stable=True)] for part in shuffled.split(span)])
    groups = list(grouped.split(batch_size))
    full = len(groups) - (len(groups[-1]) < batch_size)
    order = torch.randperm(full, generator=generator).tolist() + list(range(full, len(groups)))
    return torch.cat([groups[i] for i in order])


def lm_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Which next-token targets are real: positions 1.. of each (flattened) row that are not padding.

    Args:
        attention_mask: (batch, time) or (batch, K, time), 1 = token, 0 = padding.

    Returns:
        (N, time - 1) bool, N = batch (* K).
    """
    return attention_mask.reshape(-1, attention_mask.shape[-1])[:, 1:] != 0


def auxiliary_lm_loss(logits: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """GPT-1's L1 on the task text: the summed next-token loss over every real token after the first.

    Args:
        logits: (N, T, V), the backbone's for the N = batch (* K) sequences.
        input_ids: (batch, T) or (batch, K, T).
        attention_mask: shaped as ``input_ids``, 1 = token, 0 = padding.

    Returns:
        The summed cross-entropy, a scalar.
    """
    targets = input_ids.reshape(-1, input_ids.shape[-1])[:, 1:]  # (N, T - 1)
    mask = lm_mask(attention_mask)
    return F.cross_entropy(logits[:, :-1][mask].float(), targets[mask], reduction="sum")


def build_task(
    name: str,
    tokenizer: Tokenizer,
    model: Any,
    labels: Sequence[str] = (),
    max_length: int | None = None,
    **options: Any,
) -> Task:
    """The task ``name`` (one of `TASKS`) for ``model``'s backbone and ``tokenizer``.

    Args:
        name: the task.
        tokenizer: the model's tokenizer.
        model: the backbone, or a task model (its backbone is read).
        labels: the class names (tags), in id order.
        max_length: tokens per sequence (QA: per window); None takes the task's ``default_length`` (384 for QA,
            128 otherwise); never more than the backbone's context.
        **options: the task class's own options (``symmetric``, ``words``, ``characters``, ``stride`` ...).

    Returns:
        The task.

    Raises:
        PLMError: an unknown task, tag or qa on a GPT, or options the task refuses.
    """
    if name not in TASK_CLASSES:
        raise PLMError(f"unknown task {name!r}; choose one of {', '.join(TASKS)}")
    backbone = getattr(model, "backbone", model)
    causal = isinstance(backbone, CausalLM)
    if causal and name in ("tag", "qa"):
        raise PLMError(f"`task` {name} is for encoders (BERT, ALBERT, DeBERTa); a GPT does {', '.join(GPT_TASKS)}")
    length = min(max_length or TASK_CLASSES[name].default_length, backbone.config.context_length)
    return TASK_CLASSES[name](tokenizer, length, labels, causal=causal, **options)


@dataclass(frozen=True)
class FinetuningRecipe:
    """The papers' fine-tuning learning rate, warmup (a fraction of training) and batch size.

    Every recipe trains 3 epochs (the default of
    [`FinetuneOptimization.epochs`][plm.tasks.finetune.FinetuneOptimization]) with Adam's betas (0.9, 0.999), as in
    pre-training.

    Attributes:
        lr: the learning rate.
        warmup_fraction: the fraction of the steps over which the learning rate warms up.
        batch_size: examples per batch.
        betas: Adam's betas.
    """

    lr: float
    warmup_fraction: float
    batch_size: int = 32
    betas: tuple[float, float] = (0.9, 0.999)


BERT_RECIPE = FinetuningRecipe(lr=5e-5, warmup_fraction=0.1)  # BERT A.3: lr among 5e-5, 3e-5, 2e-5; warmup 10%
BERT_SWAG_RECIPE = FinetuningRecipe(lr=2e-5, warmup_fraction=0.1, batch_size=16)  # BERT 4.4: SWAG's, 3 epochs
GPT1_RECIPE = FinetuningRecipe(lr=6.25e-5, warmup_fraction=0.002)  # GPT-1 4.1: warmup over 0.2% of training


def finetuning_recipe(task: str, causal: bool) -> FinetuningRecipe:
    """The paper's recipe for ``task`` on a GPT (``causal``) or an encoder.

    A GPT takes GPT-1's for every task (its section 4.1 fine-tunes every task, multiple choice included, alike); an
    encoder takes BERT's, SWAG's own (section 4.4: batch 16, lr 2e-5) for choice and the classification recipe
    (appendix A.3) for the rest.

    Args:
        task: the task, one of `TASKS`.
        causal: the backbone is a GPT.

    Returns:
        The recipe.
    """
    if causal:
        return GPT1_RECIPE
    return BERT_SWAG_RECIPE if task == "choice" else BERT_RECIPE
