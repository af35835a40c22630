"""One task model for every backbone: a head by composition, no class per family per task.

``TaskModel(config)`` builds the backbone of ``config.backbone_family`` (BERT, ALBERT,
DeBERTa, GPT-1/GPT-2) and the head of ``config.head.task`` on it; [`task_model`][plm.tasks.model.task_model]
puts a new head on a pretrained backbone. The model pools as the head asks:

- ``cls``: the [CLS] vector through the backbone's pooler when it has one (BERT,
  ALBERT), else through the task model's own pooler when the head config asks for one
  (DeBERTa's classifier), else the [CLS] state itself (BERT's C);
- ``last``: the state of the last real token, where GPT-1 puts its extract token;
- ``mean``: the mean over real tokens.

Inputs are (batch, time), or (batch, K, time) for a multiple-choice scorer (K choices)
and for a classifier that adds the vectors of K sequences (GPT-1's similarity). A task
model is a [`PretrainedModel`][plm.models.base.PretrainedModel] of family ``task``: ``save_model``/``load_model``,
the Trainer and ``save_hf``/``load_hf`` take it like any other.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import torch

from plm.config import config_from_dict
from plm.errors import PLMError, with_article
from plm.models import FAMILIES, CausalLM, PretrainedModel
from plm.models.pretraining_heads import Pooler, mean_pool
from plm.tasks.heads import CHOICE, HEADS, HeadConfig, TaskOutput, build_head

FAMILY = "task"


@dataclass(frozen=True)
class WrappingConfig:
    """What the config of a model built around another family's model shares: reading that model's config.

    A subclass is a frozen dataclass whose first two fields are ``<WRAPPED>_family`` and ``<WRAPPED>``, the
    wrapped model's family and config; the model's vocabulary and context are the wrapped model's.

    Attributes:
        WRAPPED: the name of the wrapped model's config field ("backbone", "encoder").
        DESCRIPTION: the model, as error messages name it ("a task model").
        NOT_WRAPPED: the families of `FAMILIES` it cannot wrap.
    """

    WRAPPED: ClassVar[str]
    DESCRIPTION: ClassVar[str]
    NOT_WRAPPED: ClassVar[tuple[str, ...]]

    @property
    def vocab_size(self) -> int:
        """The wrapped model's vocabulary size."""
        return getattr(self, self.WRAPPED).vocab_size

    @property
    def context_length(self) -> int:
        """The wrapped model's context length."""
        return getattr(self, self.WRAPPED).context_length

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str, complete: bool = False) -> Self:
        """Read the nested configs, each checked as [`config_from_dict`][plm.config.config_from_dict] checks a family's.

        Args:
            values: the fields as read from JSON.
            source: where ``values`` come from, for the error messages.
            complete: every field must be present, not only those without a default.

        Returns:
            The config.

        Raises:
            PLMError: other fields than the config's, an unknown family of the wrapped model, an invalid nested
                config, or one the config's own checks refuse.
        """
        expected = {field.name for field in dataclasses.fields(cls)}
        if set(values) != expected:
            fields = ", ".join(sorted(values))
            raise PLMError(
                f"{source}: {cls.DESCRIPTION}'s config has the fields {', '.join(sorted(expected))}, got {fields}"
            )
        family = values[f"{cls.WRAPPED}_family"]
        if family not in FAMILIES or family in cls.NOT_WRAPPED:
            raise PLMError(f"{source}: unknown {cls.WRAPPED} family {family!r}")
        wrapped: Any = config_from_dict(  # the wrapped family's config
            FAMILIES[family].config_class, values[cls.WRAPPED], f"{source}: {cls.WRAPPED}", complete
        )
        return cls._with_parts(family, wrapped, values, source, complete)

    @classmethod
    def _with_parts(cls, family: str, wrapped: Any, values: dict[str, Any], source: str, complete: bool) -> Self:
        """The config of the wrapped model and of the parts of the model's own, which it reads from ``values``.

        Args:
            family: the wrapped model's family.
            wrapped: the wrapped model's config.
            values: all the fields as read from JSON.
            source: where ``values`` come from, for the error messages.
            complete: every field must be present, not only those without a default.

        Returns:
            The config.

        Raises:
            NotImplementedError: in this base class; each subclass implements it.
        """
        raise NotImplementedError


@dataclass(frozen=True)
class TaskConfig(WrappingConfig):
    """The backbone's family and config, and the head's config.

    Attributes:
        backbone_family: the backbone's family (a key of `FAMILIES`).
        backbone: the backbone's config.
        head: the head's config.
    """

    WRAPPED = "backbone"
    DESCRIPTION = "a task model"
    NOT_WRAPPED = (FAMILY,)  # a task model's backbone is no task model

    backbone_family: str
    backbone: Any
    head: HeadConfig

    @classmethod
    def _with_parts(cls, family: str, wrapped: Any, values: dict[str, Any], source: str, complete: bool) -> Self:
        """The backbone's config, and the head's read from ``values["head"]``."""
        return cls(family, wrapped, config_from_dict(HeadConfig, values["head"], f"{source}: head", complete))


class TaskModel(PretrainedModel):
    """A backbone with a task head; forward returns the head's output (see [`plm.tasks.heads`][plm.tasks.heads]).

    Args:
        config: the model's config.

    Raises:
        PLMError: a head config that asks for a pooler of its own on a backbone that has one.
    """

    family = FAMILY
    config_class = TaskConfig
    inputs = ("input_ids", "attention_mask", "token_type_ids")  # the batch keys forward reads

    def __init__(self, config: TaskConfig) -> None:
        super().__init__(config)
        self.backbone = FAMILIES[config.backbone_family](config.backbone)
        dim = config.backbone.dim
        if config.head.pooler_activation and getattr(config.backbone, "pooler", False):
            raise PLMError("the backbone has a pooler; a task model's own pooler is for backbones without one")
        self.pooler = Pooler(dim, config.head.pooler_activation) if config.head.pooler_activation else None
        self.head = build_head(config.head, dim)
        for module in (self.pooler, self.head):
            if module is not None:
                self.init_weights(root=module)

    def word_embeddings(self) -> torch.nn.Embedding:
        """The backbone's token embedding table.

        Returns:
            The embedding.
        """
        return self.backbone.word_embeddings()

    def vocabulary_embeddings(self) -> list[torch.nn.Embedding]:
        """The backbone's token tables.

        Returns:
            The tables.
        """
        return self.backbone.vocabulary_embeddings()

    def resize_token_embeddings(self, vocab_size: int, std: float = 0.02) -> None:
        """Grow the backbone's token embeddings to ``vocab_size`` rows, and the config with them.

        Args:
            vocab_size: the rows wanted.
            std: the standard deviation of the new rows.
        """
        self.backbone.resize_token_embeddings(vocab_size, std)
        self.config = dataclasses.replace(self.config, backbone=self.backbone.config)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        **backbone_options: Any,
    ) -> TaskOutput:
        """input_ids, attention_mask (1 = token, 0 = padding), token_type_ids: (batch, time) or (batch, K, time).

        ``backbone_options`` go to the backbone's forward (e.g. ``output_hidden_states``
        for an encoder).

        Args:
            input_ids: (batch, time), or (batch, K, time) for K sequences per example.
            attention_mask: 1 = token, 0 = padding, shaped as ``input_ids``; or None.
            token_type_ids: the segments, shaped as ``input_ids``; or None.
            **backbone_options: passed to the backbone's forward.

        Returns:
            The head's output, with the backbone's output as ``backbone``.

        Raises:
            PLMError: ``input_ids`` of a shape the head does not read, or ``token_type_ids`` for a backbone
                without segments.
        """
        if input_ids.dim() not in (2, 3):
            shape = tuple(input_ids.shape)
            raise PLMError(f"input_ids should be (batch, time) or (batch, choices, time), got shape {shape}")
        several = input_ids.dim() == 3
        if several and not self.head.pools:
            raise PLMError(f"a {self.config.head.task} head reads one sequence per example: input_ids (batch, time)")
        if self.config.head.task == CHOICE and not several:
            raise PLMError("a multiple-choice model reads input_ids (batch, choices, time)")
        if token_type_ids is not None:
            if isinstance(self.backbone, CausalLM):
                raise PLMError(
                    f"{with_article(self.config.backbone_family)} backbone has no segments; give no token_type_ids"
                )
            backbone_options["token_type_ids"] = flatten(token_type_ids)
        mask = flatten(attention_mask)
        output = self.backbone(flatten(input_ids), mask, **backbone_options)
        if self.head.pools:
            features = self.pool(output, mask).view(len(input_ids), -1, self.config.backbone.dim)  # (B, K, H), K = 1
        else:
            features = output.last_hidden_state
        result = self.head(features)
        result.backbone = output
        return result

    def pool(self, output: Any, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """One vector (N, H) per sequence of the backbone's ``output``, as ``config.head.pooling`` says.

        Args:
            output (Any): the backbone's output (its ``last_hidden_state`` and, if any, ``pooler_output``).
            attention_mask: (N, T), 0 at padding, or None.

        Returns:
            The (N, H) vectors.
        """
        hidden = output.last_hidden_state  # (N, T, H)
        pooling = self.config.head.pooling
        if pooling == "mean":
            return mean_pool(hidden, attention_mask)
        if pooling == "last":
            return hidden[
                torch.arange(hidden.shape[0], device=hidden.device), last_token(attention_mask, hidden.shape[1])
            ]
        backbone_pooled = getattr(output, "pooler_output", None)
        if backbone_pooled is not None:
            return backbone_pooled
        return self.pooler(hidden) if self.pooler is not None else hidden[:, 0]


def flatten(tensor: torch.Tensor | None) -> torch.Tensor | None:
    """(B, K, T) -> (B * K, T); (B, T) as it is.

    Args:
        tensor: the input, or None.

    Returns:
        The flattened input, or None.
    """
    return None if tensor is None else tensor.reshape(-1, tensor.shape[-1])


def last_token(attention_mask: torch.Tensor | None, time: int) -> torch.Tensor | int:
    """The position of each row's last real token: the rightmost 1 of the mask (left or right padding).

    Args:
        attention_mask: (N, T), 0 at padding, or None.
        time: T, the positions per row.

    Returns:
        (N,) the positions, or ``time - 1`` for every row when there is no mask.
    """
    if attention_mask is None:
        return time - 1
    positions = torch.arange(time, device=attention_mask.device)
    return (positions * (attention_mask != 0)).argmax(dim=-1)  # (N,)


def task_model(
    backbone: PretrainedModel,
    task: str,
    labels: int = 2,
    *,
    pooling: str | None = None,
    **head_options: Any,
) -> TaskModel:
    """A new ``task`` head (see [`HeadConfig`][plm.tasks.heads.HeadConfig]) on a copy of the pretrained ``backbone``.

    Pooling defaults to the backbone's own (``backbone.task_pooling``: "cls" for an
    encoder, "last" for GPT). The backbone's pre-training heads are left out, and so is
    its pooler where nothing reads it (a tagger, a span head, mean or last pooling), so
    that every parameter gets a gradient. The head's weights are N(0, 0.02), biases 0.

    Args:
        backbone: the pretrained model (left unchanged).
        task: the head's task (see [`plm.tasks.heads`][plm.tasks.heads]).
        labels: the classes (or outputs) of the head.
        pooling: "cls", "last" or "mean"; None: the backbone's own.
        **head_options: further [`HeadConfig`][plm.tasks.heads.HeadConfig] fields.

    Returns:
        The task model, on the backbone's device.

    Raises:
        PLMError: a backbone that already has a task head, or one that takes none.
    """
    if isinstance(backbone, TaskModel):
        raise PLMError("the backbone already has a task head; give its .backbone for another task")
    require_task_backbone(backbone)
    assert backbone.task_pooling is not None  # require_task_backbone refuses a backbone without
    head = HeadConfig(task, labels, pooling or backbone.task_pooling, **head_options)
    config = type(backbone).config_with_heads(backbone.config, ())
    reads_pooler = HEADS[task].pools and head.pooling == "cls"
    if getattr(config, "pooler", False) and not reads_pooler:
        config = dataclasses.replace(config, pooler=False)
    model = TaskModel(TaskConfig(backbone.family, config, head))
    wanted = model.backbone.state_dict()
    model.backbone.load_state_dict({name: tensor for name, tensor in backbone.state_dict().items() if name in wanted})
    return model.to(backbone.device)


def require_task_backbone(model: PretrainedModel, name: str = "the model") -> None:
    """Refuse a model that takes no task head (``task_pooling`` None): one line naming what it is.

    Args:
        model: the model.
        name: how the message names it.

    Raises:
        PLMError: a model that takes no task head.
    """
    if model.task_pooling is None:
        raise PLMError(f"{name}: {model.family} models take no task head; fine-tuning reads an encoder (BERT, "
                       "ALBERT, DeBERTa, a sentence-transformers model) or a GPT (an ELMo joins a tagger with `elmo`)")


# load_model finds a model class by the family name in its config.json.
FAMILIES[TaskModel.family] = TaskModel
