"""How well an encoder's pre-training heads do their tasks on a text: ALBERT's intrinsic evaluation (Table 5).

The text becomes pre-training examples as in training (documents separated by blank lines, 15% of the tokens
masked 80/10/10, pairs for NSP or SOP), and each head is scored by its accuracy: the masked-LM head over the
masked positions, the pair head over the pairs. A head trained for one pair task can be scored on the other's
pairs: ALBERT's finding is that an NSP head is at chance on SOP pairs (52.0%), while an SOP head does well on
NSP pairs (78.9%), since sentence order is the harder task and covers topic.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from plm.data.corpus import read_corpus
from plm.errors import PLMError
from plm.models import Encoder
from plm.objectives import MaskedLMObjective
from plm.tokenization.tokenizer import Tokenizer

PAIR_TASKS = ("nsp", "sop")
PRETRAINING_LENGTH = 128  # the recipes' encoder examples (plm pretrain --block-size)


@dataclass(frozen=True)
class HeadAccuracies:
    """The heads' accuracies on one text.

    Attributes:
        task: the pair task whose examples were built: ``nsp`` or ``sop``.
        pair_head: the pair head the model was trained with (``nsp`` or ``sop``), None when it has none.
        mlm: the masked-LM head's accuracy over the masked positions.
        pair: the pair head's accuracy on ``task``'s pairs; None without a pair head.
        examples: the examples scored.
    """

    task: str
    pair_head: str | None
    mlm: float
    pair: float | None
    examples: int

    def as_dict(self) -> dict[str, float | int | str | None]:
        """The fields by name, as ``--json`` writes them.

        Returns:
            ``task``, ``pair_head``, ``accuracy_mlm``, ``accuracy_nsp`` or ``accuracy_sop`` (the task's, the key
            a run logs it under, after ``val_``) and ``examples``.
        """
        return {"task": self.task, "pair_head": self.pair_head, "accuracy_mlm": self.mlm,
                f"accuracy_{self.task}": self.pair, "examples": self.examples}

    def __str__(self) -> str:
        pair = (f"{self.pair_head} head on {self.task} pairs {self.pair:.1%}" if self.pair is not None
                else f"no pair head to score on {self.task} pairs")
        return f"{self.examples:,} examples: masked LM {self.mlm:.1%}, {pair}"


def head_accuracies(model: Encoder, tokenizer: Tokenizer, path: str | os.PathLike[str], task: str,
                    max_length: int | None = None, batch_size: int = 32, seed: int = 0,
                    progress: bool = False) -> HeadAccuracies:
    """Score ``model``'s masked-LM head, and its pair head on ``task``'s pairs, on the text of ``path``.

    Args:
        model: an encoder with a masked-LM head (BERT, ALBERT, DeBERTa).
        tokenizer: its tokenizer.
        path: a UTF-8 text, documents separated by blank lines (NSP draws its random B from another document).
        task: ``nsp`` or ``sop``: the pairs to build.
        max_length: tokens per example (None: 128, as pre-training's examples, or the model's context if shorter).
        batch_size: examples per forward pass.
        seed: the masking and pairing's seed.
        progress: show a progress bar over the batches.

    Returns:
        The accuracies.

    Raises:
        PLMError: an unknown task, a model without a masked-LM head, a text that makes no examples (NSP needs
            two documents), or a file that cannot be read.
    """
    if task not in PAIR_TASKS:
        raise PLMError(f"unknown pair task {task!r}; choose one of {', '.join(PAIR_TASKS)}")
    heads = model.config.pretraining_heads
    if "mlm" not in heads:
        raise PLMError(f"this {model.family} model has no masked-LM head (it was saved without one)")
    pair_head = next((head for head in PAIR_TASKS if head in heads), None)
    documents = read_corpus([path], [path]).validation
    max_length = max_length or min(PRETRAINING_LENGTH, model.config.context_length)
    objective = MaskedLMObjective(documents, documents, tokenizer, max_length=max_length, batch_size=batch_size,
                                  pair_task=task if pair_head else "none", seed=seed, validation_batches_max=None)
    metrics = objective.validation_metrics(model.eval(), progress=progress)
    return HeadAccuracies(task, pair_head, metrics["accuracy_mlm"], metrics.get(f"accuracy_{task}"),
                          len(objective.validation_examples))
