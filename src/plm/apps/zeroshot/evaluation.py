"""What every zero-shot evaluation shares: the model and how to run it, and a result that prints as JSON.

Each task's ``evaluate_*`` function takes a [`ZeroShotOptions`][plm.apps.zeroshot.evaluation.ZeroShotOptions]
first and its own parameters beside it, and returns a
[`ZeroShotResult`][plm.apps.zeroshot.evaluation.ZeroShotResult]::

    options = ZeroShotOptions(model, tokenizer, batch_size=16, limit=500)
    print(evaluate_lambada(options, "lambada_test.jsonl", stop_words=True).as_dict())
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from plm.errors import PLMError
from plm.models import CausalLM
from plm.tokenization.tokenizer import Tokenizer


@dataclass(frozen=True)
class ZeroShotOptions:
    """The model a zero-shot task evaluates, and how: in batches, on all items or the first few, with a bar.

    Attributes:
        model: the causal LM (plm's own or one loaded from Hugging Face), on the device it runs on.
        tokenizer: its tokenizer.
        batch_size: the prompts decoded, or continuations scored, together.
        limit: evaluate only the first ``limit`` items of the file (after the examples a prompt shows); None: all.
        progress: show a progress bar.

    Raises:
        PLMError: a ``batch_size`` or ``limit`` below 1.
    """

    model: CausalLM
    tokenizer: Tokenizer
    batch_size: int = 8
    limit: int | None = None
    progress: bool = False

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise PLMError(f"`batch_size` must be at least 1, got {self.batch_size}")
        if self.limit is not None and self.limit < 1:
            raise PLMError(f"`limit` must be at least 1, got {self.limit}")


@dataclass(frozen=True)
class ZeroShotResult:
    """The base of the zero-shot results: the scores as JSON values, without the per-item lists.

    A result lists in ``per_item`` the fields that hold one entry per item (the predictions, the choices),
    which [`as_dict`][plm.apps.zeroshot.evaluation.ZeroShotResult.as_dict] leaves out.
    """

    per_item: ClassVar[tuple[str, ...]] = ()

    def as_dict(self) -> dict[str, Any]:
        """The scores and counts as JSON values, as `plm eval` prints them and writes them to JSON.

        Returns:
            Every field but those in ``per_item``, in the order the class declares them.
        """
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)
                if field.name not in self.per_item}
