"""Task models ([`plm.tasks`][plm.tasks]) as Hugging Face's ``XFor{Task}`` checkpoints, both ways.

A task checkpoint is the family's backbone under a prefix (``bert.``, ``albert.``,
``deberta.``, ``transformer.``), converted by the family's own converter, plus one
head layer at the top level: ``classifier`` (sequence and token classification,
multiple choice; GPT's sequence classifier calls it ``score`` and has no bias) or
``qa_outputs`` (the span head's S and E). The pooling follows the class:

- BERT and ALBERT classify and score choices from the backbone's tanh pooler; their
  token classifiers and span heads are built without one;
- DeBERTa's sequence classifier pools [CLS] with a ContextPooler of its own
  (``pooler.dense``, then ``pooler_hidden_act``): the task model's own pooler;
- GPT's classifier reads the last real token.

Hugging Face has no multiple-choice DeBERTa (v1) class, nor task classes for GPT
other than the sequence classifier; such plm models have no equivalent there.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from plm.errors import PLMError
from plm.hf.io import BY_FAMILY, BY_MODEL_TYPE, Converter, HFWeights, check_expressible, register
from plm.tasks.heads import CHOICE, CLASSIFY, SPAN, TAG, HeadConfig
from plm.tasks.model import TaskConfig

# The plm head layer of each task, and its usual Hugging Face name.
HEAD_LAYERS = {CLASSIFY: "head.classifier", TAG: "head.classifier", SPAN: "head.start_end", CHOICE: "head.classifier"}
HF_HEAD_LAYERS = {CLASSIFY: "classifier", TAG: "classifier", SPAN: "qa_outputs", CHOICE: "classifier"}


@dataclass(frozen=True)
class Layout:
    """How one model_type's task checkpoints are laid out.

    Attributes:
        prefix: the prefix of the backbone's tensors (``bert.``, ``transformer.``, ...).
        bare: the architecture of the backbone alone.
        classes: plm task -> HF class.
        dropout_field: the head's dropout in ``config.json`` (None there: ``hidden_dropout_prob``); None: the
            head has no dropout.
        pooling: "cls" or "last".
        pooler: what classify and choice read [CLS] through: the "backbone"'s pooler, an "own" one, or None.
        score: the classifier is ``score``, without bias (GPT).
    """

    prefix: str  # of the backbone's tensors
    bare: str  # the architecture of the backbone alone
    classes: dict[str, str]  # plm task -> HF class
    dropout_field: str | None  # the head's dropout in config.json (None there: hidden_dropout_prob); None: no dropout
    pooling: str  # "cls" or "last"
    pooler: str | None  # what classify/choice read [CLS] through: the "backbone"'s pooler, an "own" one, or none
    score: bool = False  # the classifier is ``score``, without bias (GPT)

    def own_pooler(self, task: str) -> bool:
        """Whether the task model has a pooler of its own (DeBERTa's ContextPooler) for ``task``.

        Args:
            task: the plm task.

        Returns:
            True when it has one.
        """
        return self.pooler == "own" and task == CLASSIFY

    def head_layer(self, task: str) -> str:
        """The HF name of the head layer for ``task``: ``score`` for GPT, else ``classifier`` or ``qa_outputs``.

        Args:
            task: the plm task.

        Returns:
            The layer's name.
        """
        return "score" if self.score else HF_HEAD_LAYERS[task]


def classes(name: str, tasks: tuple[str, ...]) -> dict[str, str]:
    """The HF task classes of a family, as transformers names them: ``{name}For{Task}``.

    Args:
        name: the class names' stem (``Bert``, ``GPT2``, ...).
        tasks: the plm tasks the family has a class for.

    Returns:
        plm task -> HF class.
    """
    suffixes = {
        CLASSIFY: "SequenceClassification",
        TAG: "TokenClassification",
        SPAN: "QuestionAnswering",
        CHOICE: "MultipleChoice",
    }
    return {task: f"{name}For{suffixes[task]}" for task in tasks}


ALL_TASKS = (CLASSIFY, TAG, SPAN, CHOICE)
LAYOUTS = {  # by model_type
    "bert": Layout("bert.", "BertModel", classes("Bert", ALL_TASKS), "classifier_dropout", "cls", "backbone"),
    "albert": Layout(
        "albert.", "AlbertModel", classes("Albert", ALL_TASKS), "classifier_dropout_prob", "cls", "backbone"
    ),
    "deberta": Layout(
        "deberta.", "DebertaModel", classes("Deberta", (CLASSIFY, TAG, SPAN)), "cls_dropout", "cls", "own"
    ),
    "gpt2": Layout("transformer.", "GPT2Model", classes("GPT2", (CLASSIFY,)), None, "last", None, score=True),
    "openai-gpt": Layout(
        "transformer.", "OpenAIGPTModel", classes("OpenAIGPT", (CLASSIFY,)), None, "last", None, score=True
    ),
}
TASK_OF = {  # HF class -> (model_type, plm task)
    architecture: (model_type, task)
    for model_type, layout in LAYOUTS.items()
    for task, architecture in layout.classes.items()
}


@register
class TaskConverter(Converter):
    """Task models, whatever their backbone: the ``XFor{Task}`` classes of `TASK_OF`."""
    family = "task"
    model_types = ()
    claims = tuple(TASK_OF)

    # Configs --------------------------------------------------------------------------

    def config_from_hf(self, hf: dict[str, Any], source: str) -> TaskConfig:
        """The plm task config of a task checkpoint's ``config.json``; the backbone's by the family's converter.

        Args:
            hf: the contents of ``config.json``.
            source: the file, for the error messages.

        Returns:
            The task config.

        Raises:
            PLMError: a class of another model_type, a backbone the family's converter refuses, bad labels
                (a span head's other than 2), or a DeBERTa pooler plm cannot be.
        """
        model_type, task = TASK_OF[hf["architectures"][0]]
        if hf["model_type"] != model_type:
            raise PLMError(f"{source}: architecture {hf['architectures'][0]} with model_type {hf['model_type']!r}")
        layout, family = LAYOUTS[model_type], BY_MODEL_TYPE[model_type]
        backbone = family.config_from_hf({**hf, "architectures": [layout.bare]}, source)
        if layout.pooler == "backbone":
            backbone = dataclasses.replace(backbone, pooler=task in (CLASSIFY, CHOICE))
        names = label_names(hf, source)
        if task == SPAN and len(names) != 2:
            raise PLMError(f"{source}: a question-answering model has 2 labels (start and end), got {len(names)}")
        labels = len(names) if task in (CLASSIFY, TAG) else 2  # span: start and end; choice: unused
        if task in (SPAN, CHOICE) or names == default_names(len(names)):  # only names of one's own are kept
            names = ()
        dropout = 0.0
        if layout.dropout_field is not None:
            given = hf.get(layout.dropout_field)
            dropout = hf.get("hidden_dropout_prob", 0.1) if given is None else given
        own_pooler = self.context_pooler(hf, backbone.dim, source) if layout.own_pooler(task) else None
        head = HeadConfig(
            task,
            labels=labels,
            pooling=layout.pooling,
            dropout=dropout,
            bias=not layout.score,
            pooler_activation=own_pooler,
            label_names=names,
            pad_token_id=hf.get("pad_token_id"),
        )
        return TaskConfig(family.family, backbone, head)

    @staticmethod
    def context_pooler(hf: dict[str, Any], dim: int, source: str) -> str:
        """The activation of DeBERTa's ContextPooler; what plm's pooler cannot be is an error.

        Args:
            hf: the contents of ``config.json``.
            dim: the backbone's hidden size.
            source: the file, for the error messages.

        Returns:
            "gelu", "tanh" or "relu".

        Raises:
            PLMError: a pooler size other than the hidden size, pooler dropout, or another activation.
        """
        if hf.get("pooler_hidden_size", dim) != dim:
            raise PLMError(
                f"{source}: pooler_hidden_size {hf['pooler_hidden_size']} != hidden_size is not supported by plm"
            )
        if hf.get("pooler_dropout", 0):
            raise PLMError(
                f"{source}: pooler_dropout {hf['pooler_dropout']} is not supported by plm (its pooler has none)"
            )
        activation = hf.get("pooler_hidden_act", "gelu")
        if activation not in ("gelu", "tanh", "relu"):
            raise PLMError(f"{source}: pooler_hidden_act {activation!r} is not supported; plm reads gelu, tanh, relu")
        return activation

    def config_to_hf(self, config: TaskConfig) -> dict[str, Any]:
        """``config.json`` of the task class, the backbone's fields by the family's converter.

        Args:
            config: the task config.

        Returns:
            The contents of ``config.json``, with the labels, the head's dropout and its pooler.

        Raises:
            PLMError: a backbone family without task checkpoints, a backbone config Hugging Face cannot express, or a
                task model Hugging Face's class does not compute.
        """
        head, layout = config.head, self.layout(config)
        self.check_equivalent(config, layout)
        backbone_hf = BY_FAMILY[config.backbone_family].config_to_hf(self.bare_backbone(config, layout))
        labels = head.label_names or default_names(head.labels)
        if head.task in (SPAN, CHOICE):
            labels = default_names(2)  # what transformers builds: qa_outputs has num_labels = 2 rows
        hf = {
            **backbone_hf,
            "architectures": [layout.classes[head.task]],
            "id2label": {str(index): name for index, name in enumerate(labels)},
            "label2id": {name: index for index, name in enumerate(labels)},
            "pad_token_id": head.pad_token_id,
        }
        if layout.dropout_field is not None:
            hf[layout.dropout_field] = head.dropout
        if head.pooler_activation is not None:
            hf.update(
                pooler_hidden_act=head.pooler_activation, pooler_hidden_size=config.backbone.dim, pooler_dropout=0.0
            )
        return hf

    @staticmethod
    def bare_backbone(config: TaskConfig, layout: Layout) -> Any:
        """The backbone config that the family converter writes as the bare architecture (BertModel has a pooler).

        Args:
            config: the task config.
            layout: its model_type's layout.

        Returns:
            The backbone config.
        """
        return dataclasses.replace(config.backbone, pooler=True) if layout.pooler == "backbone" else config.backbone

    @staticmethod
    def check_equivalent(config: TaskConfig, layout: Layout) -> None:
        """Raise a PLMError unless Hugging Face's class computes what this task model computes.

        Args:
            config: the task config.
            layout: its model_type's layout.

        Raises:
            PLMError: no class for the task, or a difference in pooling, bias, pooler, dropout or pair order.
        """
        head = config.head
        if head.task not in layout.classes:
            known = ", ".join(layout.classes.values())
            raise PLMError(
                f"Hugging Face has no {config.backbone_family} class for the {head.task} task (only {known})"
            )
        reads_pooler = head.task in (CLASSIFY, CHOICE)
        has_pooler = getattr(config.backbone, "pooler", False)
        differences = {
            f"pooling {head.pooling!r} (Hugging Face's is {layout.pooling!r})": (
                reads_pooler and head.pooling != layout.pooling
            ),
            "an output layer without bias" if head.bias else "an output layer with a bias": head.bias == layout.score,
            "a backbone pooler where Hugging Face's class has none, or none where it has one": (
                has_pooler != (layout.pooler == "backbone" and reads_pooler)
            ),
            "a pooler of its own where Hugging Face's class has none, or none where it has one": (
                (head.pooler_activation is not None) != layout.own_pooler(head.task)
            ),
            "dropout before the classifier (Hugging Face's has none)": (
                layout.dropout_field is None and head.dropout > 0
            ),
            "pairs read in both orders (GPT-1's similarity form)": head.symmetric,
        }
        check_expressible("a task model", differences)

    # Weights --------------------------------------------------------------------------

    @staticmethod
    def head_pairs(config: TaskConfig, layout: Layout) -> list[tuple[str, str]]:
        """(HF name, plm name) of the head's tensors (and of the task model's own pooler).

        Args:
            config: the task config.
            layout: its model_type's layout.

        Returns:
            The name pairs.
        """
        hf, plm = layout.head_layer(config.head.task), HEAD_LAYERS[config.head.task]
        kinds = ("weight", "bias") if config.head.bias else ("weight",)
        pairs = [(f"{hf}.{kind}", f"{plm}.{kind}") for kind in kinds]
        if config.head.pooler_activation is not None:
            pairs += [(f"pooler.dense.{kind}", f"pooler.dense.{kind}") for kind in ("weight", "bias")]
        return pairs

    @staticmethod
    def layout(config: TaskConfig) -> Layout:
        """The layout of the task checkpoints of ``config``'s backbone.

        Args:
            config: the task config.

        Returns:
            The layout.

        Raises:
            PLMError: a backbone family without task checkpoints in Hugging Face.
        """
        model_type = BY_FAMILY[config.backbone_family].model_type(config.backbone)
        if model_type not in LAYOUTS:
            raise PLMError(f"plm has no Hugging Face format for {model_type} task models")
        return LAYOUTS[model_type]

    def weights_from_hf(self, weights: HFWeights, config: TaskConfig) -> dict[str, torch.Tensor]:
        """The plm state dict from HF tensors: the head's, and the backbone's by the family's converter.

        Args:
            weights: the checkpoint's tensors.
            config: the task config.

        Returns:
            The plm state dict, the backbone's under ``backbone.``.

        Raises:
            PLMError: a tensor missing, or one the family's converter refuses.
        """
        state = {plm: weights.take(hf) for hf, plm in self.head_pairs(config, self.layout(config))}
        backbone = BY_FAMILY[config.backbone_family].weights_from_hf(weights, config.backbone)
        return {**state, **{f"backbone.{name}": tensor for name, tensor in backbone.items()}}

    def weights_to_hf(self, state: dict[str, torch.Tensor], config: TaskConfig) -> dict[str, torch.Tensor]:
        """HF tensors, named as ``save_pretrained`` names them, from a plm state dict.

        Args:
            state: the plm state dict.
            config: the task config.

        Returns:
            The tensors by Hugging Face name: the backbone's under the layout's prefix, and the head's.

        Raises:
            PLMError: a backbone family without task checkpoints in Hugging Face.
        """
        layout = self.layout(config)
        backbone_state = {
            name.removeprefix("backbone."): t for name, t in state.items() if name.startswith("backbone.")
        }
        backbone = BY_FAMILY[config.backbone_family].weights_to_hf(backbone_state, config.backbone)
        tensors = {layout.prefix + name.removeprefix(layout.prefix): tensor for name, tensor in backbone.items()}
        tensors.update({hf: state[plm] for hf, plm in self.head_pairs(config, layout)})
        return tensors


def label_names(hf: dict[str, Any], source: str) -> tuple[str, ...]:
    """The labels of ``id2label`` in id order, else ``num_labels`` of them as transformers names them, else 2.

    Args:
        hf: the contents of ``config.json``.
        source: the file, for the error messages.

    Returns:
        The label names.

    Raises:
        PLMError: a ``num_labels`` that is not a positive integer, or an ``id2label`` that is not a non-empty
            object numbering the labels from 0.
    """
    id2label = hf.get("id2label")
    if id2label is None:
        count = hf.get("num_labels", 2)
        if not isinstance(count, int) or count < 1:
            raise PLMError(f"{source}: num_labels must be a positive integer, got {count!r}")
        return default_names(count)
    if not isinstance(id2label, dict) or not id2label:
        raise PLMError(f"{source}: id2label should be a non-empty JSON object")
    try:
        by_id = {int(key): str(name) for key, name in id2label.items()}
    except ValueError:
        raise PLMError(f"{source}: id2label has keys that are not label ids: {', '.join(map(str, id2label))}") from None
    if sorted(by_id) != list(range(len(by_id))):
        raise PLMError(f"{source}: id2label should number the labels 0 to {len(by_id) - 1}, got {sorted(by_id)}")
    return tuple(by_id[i] for i in range(len(by_id)))


def default_names(count: int) -> tuple[str, ...]:
    """What transformers calls labels that were given no names.

    Args:
        count: the number of labels.

    Returns:
        ``LABEL_0``, ``LABEL_1``, ...
    """
    return tuple(f"LABEL_{i}" for i in range(count))
