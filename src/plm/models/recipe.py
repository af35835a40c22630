"""Recipes: how each family is pre-trained, declared next to the family.

A family module (``plm.models.gpt``, ``plm.models.bert`` ...) declares one
[`PretrainingRecipe`][plm.models.recipe.PretrainingRecipe]: the small preset that ``--model FAMILY`` stands for, the
tokenizer its paper used, its objective and masking, and two sets of
[`Hyperparameters`][plm.models.recipe.Hyperparameters]: the CPU-scale defaults plm trains with, and the paper's own
values, kept beside them as data so that a test can hold them to the paper and ``--hyperparameters paper`` can use them,
with the size of the paper's run ([`PaperScale`][plm.models.recipe.PaperScale]); an encoder-decoder family adds how it
decodes (a [`GenerationConfig`][plm.decoding.generation_config.GenerationConfig]). Where a family's papers trained its
sizes differently (GPT-1 and GPT-2; the Transformer's base and big models), the recipe's ``paper_by_size`` gives the
[`PaperSettings`][plm.models.recipe.PaperSettings] of a model's size, and
[`PretrainingRecipe.for_model`][plm.models.recipe.PretrainingRecipe.for_model] is the recipe of that model. The
pre-training entry point (``plm.training.pretrain``), ``plm translate`` and ``plm eval bleu`` read the recipe and have
no per-family code, so a new family adds a recipe and nothing else.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from plm.decoding.generation_config import GenerationConfig
from plm.errors import PLMError

OPTIMIZERS = ("adamw", "lamb", "adagrad")
SCHEDULES = ("cosine", "linear", "inverse-sqrt", "constant")
TOKENIZER_KINDS = ("bpe", "wordpiece", "unigram", "words")
HYPERPARAMETER_SETS = ("cpu", "paper")  # a recipe's CPU-scale values, or its paper's (see PretrainingRecipe.defaults)


@dataclass(frozen=True)
class Hyperparameters:
    """The optimizer and its learning-rate schedule.

    Every schedule warms up linearly from 0 to ``lr`` over ``warmup`` steps, then
    ``cosine`` and ``linear`` decay to ``min_lr`` at the last step, ``inverse-sqrt``
    decays as lr * sqrt(warmup / step) (the Transformer's), ``constant`` stays at lr.

    Attributes:
        optimizer: one of `OPTIMIZERS`.
        lr: the peak learning rate.
        min_lr: where ``cosine`` and ``linear`` end.
        warmup: the steps of the linear warmup.
        schedule: one of `SCHEDULES`.
        betas: Adam's (and LAMB's) betas.
        eps: the optimizer's epsilon.
        weight_decay: the decoupled weight decay.
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
class PaperScale:
    """The size of the paper's pre-training run: its batch, its sequences and how long it ran.

    A run is given in ``steps`` or in ``epochs``, whichever the paper gives (one of the two).
    BERT trained its first steps on shorter sequences, for speed, and the rest at full
    length: ``short_block_size`` and ``short_fraction`` say how.

    Attributes:
        batch_size: sequences per optimizer step, over all processes and accumulated micro-batches.
        block_size: tokens per sequence (words, for ELMo's biLM).
        source: where the numbers come from.
        steps: optimizer steps; None when the paper counts epochs.
        epochs: passes over the training text; None when the paper counts steps.
        short_block_size: the tokens per sequence of the first steps; None: one length throughout.
        short_fraction: the share of the steps at ``short_block_size``.

    Raises:
        ValueError: neither or both of ``steps`` and ``epochs``, or a short phase that is not shorter.
    """

    batch_size: int
    block_size: int
    source: str
    steps: int | None = None
    epochs: float | None = None
    short_block_size: int | None = None
    short_fraction: float = 0.0

    def __post_init__(self) -> None:
        if (self.steps is None) == (self.epochs is None):
            raise ValueError(f"{self.source}: a paper's run is given in steps or in epochs, not {self.steps=}, "
                             f"{self.epochs=}")
        if self.short_block_size is not None and not (self.short_block_size < self.block_size
                                                      and 0 < self.short_fraction < 1):
            raise ValueError(f"{self.source}: a short phase is shorter than block_size and a share of the steps")


@dataclass(frozen=True)
class TranslationScale:
    """The size of an encoder-decoder paper's training run, whose batches are counted in tokens.

    Attributes:
        batch_tokens: source and target tokens per optimizer step, over all processes and accumulated
            micro-batches (plm's ``--max-tokens`` counts both sides, padding included).
        steps: optimizer steps.
        source: where the numbers come from.
    """

    batch_tokens: int
    steps: int
    source: str


@dataclass(frozen=True)
class PaperSettings:
    """What a paper trained one size of its models with: the optimizer, its schedule and the size of the run.

    Attributes:
        paper: the published hyperparameters (the peak learning rate of this size).
        source: where ``paper`` comes from.
        paper_scale: the size of the pre-training run; None where the paper gives none that plm can train.
        translation_scale: an encoder-decoder paper's run; None where it gives none.
    """

    paper: Hyperparameters
    source: str
    paper_scale: PaperScale | None = None
    translation_scale: TranslationScale | None = None


TRANSLATION = GenerationConfig(max_len_a=1.5, max_new_tokens=10)
"""How an encoder-decoder family translates unless its recipe says otherwise: greedy, at most 1.5 target tokens
per source token and 10 more."""


@dataclass(frozen=True)
class PretrainingRecipe:
    """A family's pre-training choices.

    Attributes:
        preset: the small preset that ``--model FAMILY`` stands for.
        tokenizer: the kind of tokenizer its paper used (one of `TOKENIZER_KINDS`).
        objective: the objective a plain ``--model FAMILY`` run uses.
        objectives: those its models accept.
        hyperparameters: the CPU-scale defaults plm trains with.
        paper: the published hyperparameters, of the sizes ``paper_by_size`` gives none for.
        source: where ``paper`` comes from.
        paper_scale: the size of the paper's pre-training run (batch, sequence length, steps or epochs); None
            where the papers give none that plm can train (DeBERTa) or the family does not pre-train.
        translation_scale: an encoder-decoder paper's run (tokens per batch, steps); None where the seeds give
            none (the RNNs).
        paper_by_size: the paper settings of a model, from its config, where the family's papers trained its sizes
            differently; it returns None for a model that takes the four fields above. None: every size takes them.
        max_ngram: the longest masked span, in words.
        block_size: the training sequences' tokens; None means the model's context.
        decoding: how an encoder-decoder family translates by default.
        label_smoothing: the epsilon its ``seq2seq`` objective trains with (the Transformer's paper smooths
            labels; the RNN papers do not).
    """

    preset: str
    tokenizer: str
    objective: str
    objectives: tuple[str, ...]
    hyperparameters: Hyperparameters
    paper: Hyperparameters
    source: str
    paper_scale: PaperScale | None = None
    translation_scale: TranslationScale | None = None
    max_ngram: int = 1
    block_size: int | None = None
    decoding: GenerationConfig = TRANSLATION
    label_smoothing: float = 0.0
    paper_by_size: Callable[[Any], PaperSettings | None] | None = None

    def for_model(self, config: Any) -> PretrainingRecipe:
        """The recipe of a model of ``config``: the family's, with the paper settings of the model's size.

        Args:
            config: the model's config (a preset's, or one read from a model directory).

        Returns:
            This recipe, its ``paper``, ``source``, ``paper_scale`` and ``translation_scale`` replaced by those
            ``paper_by_size`` gives for ``config``, where it gives any, and ``paper_by_size`` None: the recipe is
            the one size's, plain data (``dataclasses.asdict`` of it is JSON).
        """
        if self.paper_by_size is None:
            return self
        settings = self.paper_by_size(config)
        if settings is None:
            return dataclasses.replace(self, paper_by_size=None)
        return dataclasses.replace(self, paper=settings.paper, source=settings.source, paper_scale=settings.paper_scale,
                                   translation_scale=settings.translation_scale, paper_by_size=None)

    def defaults(self, hyperparameters: str) -> Hyperparameters:
        """The optimizer values a run takes where it gives none: the CPU-scale ones, or the paper's.

        The paper's are those of this recipe; [`for_model`][plm.models.recipe.PretrainingRecipe.for_model]'s recipe
        holds a model size's own.

        Args:
            hyperparameters: one of `HYPERPARAMETER_SETS`: "cpu" or "paper".

        Returns:
            ``hyperparameters`` or ``paper``.

        Raises:
            PLMError: an unknown set.
        """
        check_hyperparameter_set(hyperparameters)
        return self.paper if hyperparameters == "paper" else self.hyperparameters


def check_hyperparameter_set(name: str) -> None:
    """Refuse a name that is not one of `HYPERPARAMETER_SETS`.

    Args:
        name: the set a run asks for.

    Raises:
        PLMError: an unknown set.
    """
    if name not in HYPERPARAMETER_SETS:
        raise PLMError(f"unknown hyperparameters {name!r}; choose {' or '.join(HYPERPARAMETER_SETS)}")
