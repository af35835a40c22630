"""Fine-tuning: task heads on any backbone, GPT-1's input transforms (and the tasks' data, metrics, objectives)."""

from plm.tasks.feature_based import FeatureTagger, FeatureTaggerConfig, feature_tagger
from plm.tasks.gpt_inputs import TaskInputs, add_task_tokens, pad_batch
from plm.tasks.heads import (
    HeadConfig,
    MultipleChoiceOutput,
    SequenceClassifierOutput,
    SpanOutput,
    TaskOutput,
    TokenClassifierOutput,
)
from plm.tasks.model import TaskConfig, TaskModel, task_model

__all__ = [
    "FeatureTagger",
    "FeatureTaggerConfig",
    "HeadConfig",
    "MultipleChoiceOutput",
    "SequenceClassifierOutput",
    "SpanOutput",
    "TaskConfig",
    "TaskInputs",
    "TaskModel",
    "TaskOutput",
    "TokenClassifierOutput",
    "add_task_tokens",
    "feature_tagger",
    "pad_batch",
    "task_model",
]
