"""Fine-tuning: task heads on any backbone, GPT-1's input transforms (and the tasks' data, metrics, objectives)."""

from plm.tasks.feature_tagger import FeatureTagger, FeatureTaggerConfig, feature_tagger
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
    "TaskModel",
    "TaskOutput",
    "TokenClassifierOutput",
    "feature_tagger",
    "task_model",
]
