"""A fine-tuned model and the task that reads its data: what predict, eval and serve load.

A ``plm finetune`` run, or a Hugging Face task model, knows its task from its head (a classifier, a tagger,
a span or choice head, a feature-based model), and reads its data with the task built for it here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from plm.device import resolve_device
from plm.errors import PLMError, with_article
from plm.loading import load_pretrained
from plm.tasks.feature_based import FeatureTagger
from plm.tasks.model import TaskModel
from plm.tasks.task_objective import Task, build_task
from plm.tokenization.tokenizer import Tokenizer


def task_name(head: Any) -> str:
    """The task a fine-tuned model's head was trained for (a one-output classifier without names regresses).

    Args:
        head: the task model's head config, or a feature-based model's
            [`TaggerConfig`][plm.tasks.feature_based.TaggerConfig].

    Returns:
        classify, regress, tag, qa or choice.
    """
    if head.task == "classify":
        return "regress" if head.labels == 1 and not head.label_names else "classify"
    return {"tag": "tag", "span": "qa", "choice": "choice"}[head.task]


def load_task_model(
    path: str | Path, device: str = "cpu", max_length: int | None = None, revision: str | None = None,
    **options: Any
) -> tuple[Any, Task]:
    """A fine-tuned model in eval mode and the task that reads its data.

    The model is ``plm finetune``'s run or model directory, or a Hugging Face task model
    (``XForSequenceClassification``, ``XForTokenClassification``, ``XForQuestionAnswering``, ...) by directory or
    Hub id, with its label names.

    Args:
        path: the model's directory or run, or a Hub id.
        device: where the weights go ("auto" picks one).
        max_length: tokens per sequence; None: the task's default (see
            [`build_task`][plm.tasks.task_objective.build_task]).
        revision: for a Hub id, the branch, tag or commit to fetch.
        **options: further options of the task (see [`model_task`][plm.tasks.fine_tuned.model_task]).

    Returns:
        The model and its task.

    Raises:
        PLMError: a model that cannot be loaded, or one without a task head.
    """
    model, tokenizer = load_pretrained(path, resolve_device(device), revision)
    if not isinstance(model, (TaskModel, FeatureTagger)):
        raise PLMError(
            f"{path}: {with_article(model.family)} model has no task head; fine-tune it first (plm finetune)"
        )
    return model, model_task(model, tokenizer, max_length, **options)


def model_task(model: TaskModel | FeatureTagger, tokenizer: Tokenizer, max_length: int | None = None,
               **options: Any) -> Task:
    """The task a fine-tuned model was trained for, reading with ``tokenizer`` (see `load_task_model`).

    A QA model answers with the no-answer threshold its dev set chose; a symmetric pair head reads pairs in both
    orders; a feature-based model reads words (and their characters, with an ELMo).

    Args:
        model: the fine-tuned model.
        tokenizer: its tokenizer.
        max_length: tokens per sequence; None: the task's default.
        **options: further options of a QA task (its ``threshold`` and ``fit_threshold`` are the model's); other
            tasks take none.

    Returns:
        The task.
    """
    if isinstance(model, FeatureTagger):
        head, reading = model.config.tagger, {"words": True, "characters": model.elmo is not None}
    else:
        head, reading = model.config.head, {"symmetric": True} if model.config.head.symmetric else {}
    name = task_name(head)
    # A fine-tuned QA model answers with the tau its dev set chose, never one fitted to the file it is scored on.
    positions = model.config.context_length
    if max_length is not None and max_length > positions:  # never cut silently to the positions it has
        raise PLMError(f"max_length {max_length} exceeds the model's {positions} positions")
    qa = options | {"threshold": head.null_threshold, "fit_threshold": False} if name == "qa" else {}
    return build_task(name, tokenizer, model, head.label_names, max_length, **qa, **reading)
