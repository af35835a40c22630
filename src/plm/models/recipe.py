"""Recipes: how each family is pre-trained, declared next to the family.

A family module (``plm.models.gpt``, ``plm.models.bert`` ...) declares one
:class:`PretrainingRecipe`: the small preset that ``--model FAMILY`` stands for, the tokenizer
its paper used, its objective and masking, and two sets of :class:`Hyperparameters`:
the CPU-scale defaults plm trains with, and the paper's own values, kept beside them
as data so that a test can hold them to the paper and ``--hyperparameters paper``
can use them; an encoder-decoder family adds how it decodes (:class:`Decoding`). The
pre-training entry point (``plm.training.pretrain``), ``plm translate`` and ``plm eval
bleu`` read the recipe and have no per-family code, so a new family adds a recipe and
nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

OPTIMIZERS = ("adamw", "lamb", "adagrad")
SCHEDULES = ("cosine", "linear", "inverse-sqrt", "constant")
TOKENIZER_KINDS = ("bpe", "wordpiece", "unigram", "words")


@dataclass(frozen=True)
class Hyperparameters:
    """The optimizer and its learning-rate schedule.

    Every schedule warms up linearly from 0 to ``lr`` over ``warmup`` steps, then
    ``cosine`` and ``linear`` decay to ``min_lr`` at the last step, ``inverse-sqrt``
    decays as lr * sqrt(warmup / step) (the Transformer's), ``constant`` stays at lr.
    """

    optimizer: str = "adamw"
    lr: float = 6e-4
    min_lr: float = 6e-5
    warmup: int = 100
    schedule: str = "cosine"
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.01


@dataclass(frozen=True)
class Decoding:
    """How ``plm translate`` and ``plm eval bleu`` search for a family's translations unless a flag says otherwise.

    ``beam`` 1 is greedy search; ``length_penalty`` is GNMT's alpha, used by beam search
    only; a translation has at most ``max_len_a`` * source tokens + ``max_len_b`` tokens.
    """

    beam: int = 1
    length_penalty: float = 0.6
    max_len_a: float = 1.5
    max_len_b: int = 10


@dataclass(frozen=True)
class PretrainingRecipe:
    """A family's pre-training choices.

    ``objectives`` are those its models accept (the first one a plain ``--model
    FAMILY`` run uses unless ``objective`` says otherwise); ``max_ngram`` is the
    longest masked span in words; ``block_size`` None means the model's context.
    ``paper`` holds the published hyperparameters, ``source`` says where they come from;
    ``decoding`` is how an encoder-decoder family translates by default, and
    ``label_smoothing`` the epsilon its ``seq2seq`` objective trains with (the
    Transformer's paper smooths labels; the RNN papers do not).
    """

    preset: str
    tokenizer: str
    objective: str
    objectives: tuple[str, ...]
    hyperparameters: Hyperparameters
    paper: Hyperparameters
    source: str
    max_ngram: int = 1
    block_size: int | None = None
    decoding: Decoding = Decoding()
    label_smoothing: float = 0.0
