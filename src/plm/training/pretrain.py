"""The pre-training recipe: corpus -> tokenizer -> examples -> model -> trainer.

Every step has a default that works with no input at all (the embedded corpus, a
tokenizer trained on it, a small model of the family, the family's own objective),
and each can be replaced: the user's files, an existing tokenizer, any preset or a
saved model to continue, another objective.

What a family's paper chose (its tokenizer, objective, masking, optimizer and
schedule) is its [`PretrainingRecipe`][plm.models.recipe.PretrainingRecipe], declared in the family's module; this
module reads it and holds nothing per family. Every argument is checked before
anything is written.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch

from plm.config import knob
from plm.data.corpus import default_corpus
from plm.data.prepare import PrepareOptions, cached_corpus, cached_documents, corpus_texts
from plm.data.prepared import PreparedCorpus
from plm.device import resolve_device
from plm.errors import PLMError, PLMWarning, with_article
from plm.models import PRESETS, RECIPES, PretrainedModel, model_class, recipe_of
from plm.models.recipe import Hyperparameters, PretrainingRecipe, check_hyperparameter_set
from plm.objectives import OBJECTIVES as OBJECTIVE_SPECS
from plm.objectives import Objective, ObjectiveData, ObjectiveSpec, objective_spec, phased_objective
from plm.objectives.masking import MASK_RATIOS, check_mask_ratios
from plm.storage.checkpoint import CHECKPOINT_DIR, model_directory
from plm.tokenization.tokenizer import TOKENIZER_TRAINERS, Tokenizer
from plm.training.distributed import Distributed, setup_distributed
from plm.training.dry_run import DryRun, Phase, dry_run
from plm.training.parallel import built_on_first_process
from plm.training.run_directory import check_run_directory
from plm.training.starting_model import build_model, check_dropout, check_model_name, model_config
from plm.training.trainer import Trainer, TrainingConfig, steps_for_epochs, train_run

OBJECTIVES = ("auto", *OBJECTIVE_SPECS)  # auto: the recipe's


@dataclass(frozen=True)
class PretrainSetup:
    """What a run trains: the model (or preset), its data, objective and batch shape.

    Fields left None take the family recipe's value.
    """

    model: str = "gpt2-mini"
    data: str | None = None  # a prepared corpus (plm.data.prepare); else train_files, else the embedded corpus
    train_files: tuple[str, ...] = ()
    validation_files: tuple[str, ...] = ()
    tokenizer: str | None = None
    vocab_size: int = 8192
    tokenizer_sample: int | None = None  # characters a new tokenizer learns from (None: all the training text)
    text_field: str = "text"  # the field (JSONL) or column (Parquet, datasets) of the training files' text
    objective: str = knob("auto", "auto: the family's own (gpt clm, bert mlm+nsp, albert mlm+sop, deberta mlm, "
                          "elmo bilm)")
    whole_word: bool = knob(False, "mask whole words, not sub-word tokens (masked-LM objectives)")
    max_ngram: int | None = knob(None, "mask spans of up to n words, p(n) ~ 1/n (default: 3 for ALBERT, else 1)")
    mask_ratios: tuple[float, float, float] = knob(
        MASK_RATIOS, "fractions of the selected tokens that become [MASK], a random token, or stay (BERT's "
        "0.8,0.1,0.1; its Appendix C.2 compares others, see examples/compare/masking-ratios.toml)")
    block_size: int | None = None  # None: the recipe's (128 for encoders), at most the context
    # A short first phase (BERT's 90% of the steps at 128 tokens), then block_size (see plm.objectives.phased).
    short_block_size: int | None = knob(None, "with `short_steps` S: the first S steps read sequences of N tokens, "
                                        "the rest `block_size` (BERT's 90%% of the steps at 128 tokens, then 512)")
    short_steps: int = knob(0, "the steps at `short_block_size`")
    batch_size: int = 16
    validation_blocks: int = 64  # the validation examples (masked LM) or blocks (biLM) an evaluation reads
    # A causal LM scores every token of its validation text; the evaluations before the run's last, only about the
    # first this many (None: all of it every time), logged as val_loss_sample (see plm.objectives.clm).
    validation_sample_tokens: int | None = 262_144
    dropout: float | None = None  # None: the preset's own
    hyperparameters: str = "cpu"  # "cpu": the recipe's CPU-scale values; "paper": the paper's
    model_overrides: dict[str, Any] = field(default_factory=dict)  # preset config fields to change (ablations)

    def validate(self) -> None:
        """Raise a PLMError naming the field of the first value that cannot train.

        What depends on the model (the block size against its context) is checked by
        [`checked_block_size`][plm.training.pretrain.checked_block_size].

        Raises:
            PLMError: a dropout, hyperparameter set or size that cannot train, validation files without training
                files, a prepared corpus with text files, or a short phase without its steps.
        """
        check_dropout(self.dropout)
        check_hyperparameter_set(self.hyperparameters)
        if self.validation_files and not self.train_files:
            raise PLMError("`validation_files` need `train_files` as well")
        if self.data is not None and self.train_files:
            raise PLMError("`data` is a prepared corpus, `train_files` text files: give one of them")
        for name in ("vocab_size", "batch_size", "validation_blocks", "validation_sample_tokens", "max_ngram"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise PLMError(f"`{name}` must be at least 1, got {getattr(self, name)}")
        if self.short_steps < 0 or (self.short_block_size is None) != (self.short_steps == 0):
            raise PLMError("`short_block_size` N and `short_steps` S go together (S at least 1): the first S steps "
                           "read sequences of N tokens")


def choose_objective(setup: PretrainSetup, family: str, recipe: PretrainingRecipe) -> tuple[str, ObjectiveSpec]:
    """The objective a run of ``setup`` trains with: the one asked for, else the recipe's.

    Args:
        setup: the run's setup.
        family: the model's family.
        recipe: the family's recipe.

    Returns:
        The objective's name and spec.

    Raises:
        PLMError: an unknown objective, one that does not fit the family, or word masking options for an
            objective that masks no words.
    """
    if setup.objective not in OBJECTIVES:
        raise PLMError(f"unknown objective {setup.objective!r}; choose one of {', '.join(OBJECTIVES)}")
    name = recipe.objective if setup.objective == "auto" else setup.objective
    if name not in recipe.objectives:
        raise PLMError(f"`objective` {name} does not fit {with_article(family)} model; "
                       f"it trains with {', '.join(recipe.objectives)}")
    spec = objective_spec(name)
    check_mask_ratios(setup.mask_ratios)
    if not spec.masks_words and (setup.whole_word or setup.max_ngram is not None
                                 or tuple(setup.mask_ratios) != MASK_RATIOS):
        field = "whole_word" if setup.whole_word else "max_ngram" if setup.max_ngram is not None else "mask_ratios"
        raise PLMError(f"`{field}` chooses how a masked-LM objective masks; {name} ({family}) masks none")
    return name, spec


def checked_block_size(setup: PretrainSetup, context: int, recipe: PretrainingRecipe) -> int:
    """The block size a run of ``setup`` trains on: the one given, else the recipe's, at most ``context``.

    Args:
        setup: the run's setup, valid (see [`PretrainSetup.validate`][plm.training.pretrain.PretrainSetup.validate]).
        context: the model's context length.
        recipe: the family's recipe.

    Returns:
        The block size.

    Raises:
        PLMError: a block size (or the short phase's) longer than the context.
    """
    block_size = setup.block_size or min(recipe.block_size or context, context)
    if block_size > context:
        raise PLMError(f"`block_size` {block_size} exceeds the model's context of {context} tokens")
    if setup.short_block_size is not None and not 1 <= setup.short_block_size <= block_size:
        raise PLMError(f"`short_block_size` {setup.short_block_size} must be between 1 and the block size, "
                       f"{block_size}")
    return block_size


def training_texts(setup: PretrainSetup) -> Iterator[str]:
    """The training text a new tokenizer learns from, document by document: the user's files, or the embedded corpus.

    The files are streamed; a sample of about ``tokenizer_sample`` characters of them, when it is given.

    Args:
        setup: the run's setup.

    Yields:
        Each training document's text; not those held out for validation.
    """
    if setup.train_files:
        fraction = None if setup.validation_files else PrepareOptions.validation_fraction
        yield from corpus_texts(setup.train_files, setup.text_field, setup.tokenizer_sample, fraction)
    else:
        yield from (document.text for document in default_corpus().train)


def prepared_corpus(setup: PretrainSetup, tokenizer: Tokenizer, world: Distributed, progress: bool) -> PreparedCorpus:
    """The run's corpus, tokenized: the prepared directory given, else its text prepared in plm's cache.

    The first process prepares the text (the user's files or the embedded corpus); the others map what it wrote.

    Args:
        setup: the run's setup.
        tokenizer: the run's tokenizer.
        world: the processes of the run.
        progress: show a progress bar while preparing.

    Returns:
        The prepared corpus.

    Raises:
        PLMError: an unreadable input, or a prepared corpus of another tokenizer.
    """
    if setup.data is not None:
        corpus = PreparedCorpus.open(setup.data)
        corpus.check_tokenizer(tokenizer)
        return corpus
    path: Path | None = None
    if world.is_main:
        if setup.train_files:
            options = PrepareOptions(text_field=setup.text_field, progress=progress)
            path = cached_corpus(setup.train_files, tokenizer, setup.validation_files, options).path
        else:
            embedded = default_corpus()
            path = cached_documents(embedded.train, embedded.validation, tokenizer, progress).path
    path = world.broadcast(path)
    assert path is not None  # the first process's, on every process
    return PreparedCorpus.open(path)


def resolve_tokenizer(
    setup: PretrainSetup,
    model: str,
    recipe: PretrainingRecipe,
    out: Path,
    resume: bool,
    world: Distributed,
) -> Tokenizer:
    """The run's own tokenizer when resuming, else the one given, the prepared corpus', the model's, or a new one.

    A new one, of the recipe's kind, is trained on the training text (streamed: see
    [`training_texts`][plm.training.pretrain.training_texts]) by the first process and handed to the others, so that
    every process of a distributed run encodes with the same vocabulary.

    Args:
        setup: the run's setup.
        model: the preset or model directory (see [`check_model_name`][plm.training.starting_model.check_model_name]).
        recipe: the family's recipe.
        out: the run directory.
        resume: the run continues the one in ``out``.
        world: the processes of the run.

    Returns:
        The tokenizer.
    """
    if resume and (out / CHECKPOINT_DIR / "tokenizer.json").is_file():
        return Tokenizer.load(out / CHECKPOINT_DIR)
    if setup.tokenizer:
        return Tokenizer.load(setup.tokenizer)
    if setup.data is not None:
        return PreparedCorpus.open(setup.data).tokenizer()
    if model not in PRESETS and (model_directory(model) / "tokenizer.json").is_file():
        return Tokenizer.load(model_directory(model))
    trained = None
    if world.is_main:
        trained = TOKENIZER_TRAINERS[recipe.tokenizer](training_texts(setup), vocab_size=setup.vocab_size)
    trained = world.broadcast(trained)
    assert trained is not None  # the first process's, on every process
    return trained


def block_size_of(setup: PretrainSetup) -> int:
    """The block size a run of ``setup`` trains on: the one given, else the recipe's, at most the context.

    Args:
        setup: the run's setup.

    Returns:
        The block size.

    Raises:
        PLMError: an unknown model, or a setup that cannot train (see
            [`PretrainSetup.validate`][plm.training.pretrain.PretrainSetup.validate] and
            [`checked_block_size`][plm.training.pretrain.checked_block_size]).
    """
    setup.validate()
    config = model_config(check_model_name(setup.model), setup.model_overrides)
    return checked_block_size(setup, config.context_length, RECIPES[model_class(config).family])


def warn_if_too_little_data(objective: Objective, setup: PretrainSetup, block_size: int) -> None:
    """Warn (PLMWarning) when one batch holds more tokens than the training data.

    Args:
        objective: the run's objective.
        setup: the run's setup.
        block_size: the tokens per block.
    """
    wanted = setup.batch_size * block_size
    if wanted > objective.train_tokens:
        warnings.warn(
            f"a batch of {setup.batch_size} x {block_size} tokens is more than the {objective.train_tokens:,} training "
            f"tokens: blocks repeat within a step",
            PLMWarning,
            stacklevel=2,
        )


def with_recipe_values(training: TrainingConfig, defaults: Hyperparameters) -> tuple[TrainingConfig, str | None]:
    """``training`` with the recipe's value for every optimizer field left None, checked.

    Args:
        training: how long and how to train.
        defaults: the recipe's optimizer values (its CPU-scale ones or the paper's).

    Returns:
        The filled-in config, and what became of a default warmup that would fill the whole run (None: nothing).

    Raises:
        PLMError: a value that cannot train.
    """
    note = training.warmup_note(defaults)
    training = training.with_defaults(defaults)
    training.validate()
    return training, note


def prepare(
    setup: PretrainSetup,
    training: TrainingConfig,
    out: str | Path,
    resume: bool = False,
    overwrite: bool = False,
) -> tuple[Trainer, Tokenizer]:
    """Build the trainer for ``setup`` (without training), so callers can evaluate first.

    Every argument is checked before the first (slow) step; nothing is written here. The run directory is
    [`train_run`][plm.training.trainer.train_run]'s to check and lock.

    Args:
        setup: what the run trains: the model, its data, objective and batch shape.
        training: how long and how to train.
        out: the run directory.
        resume: continue the run in ``out``.
        overwrite: let a new run replace the run (or other files) in ``out``.

    Returns:
        The trainer and the run's tokenizer.

    Raises:
        PLMError: an argument that cannot train.
    """
    out = Path(out)
    setup.validate()
    model_name = check_model_name(setup.model)
    config = model_config(model_name, setup.model_overrides)
    family = model_class(config).family
    recipe = recipe_of(config)  # with the paper settings of the model's size
    objective_name, spec = choose_objective(setup, family, recipe)
    if spec.parallel_text:
        raise PLMError(
            f"`model` {setup.model} is an encoder-decoder: train it on sentence pairs with plm seq2seq train"
        )
    block_size = checked_block_size(setup, config.context_length, recipe)
    defaults = recipe.defaults(setup.hyperparameters)
    requested = training  # as given: a run in epochs is filled in again once its steps are known
    training, warmup_note = with_recipe_values(requested, defaults)  # every value checked before the slow work
    world = setup_distributed(resolve_device(training.device), group_of_one=training.parallelism.sharded)
    tokenizer = resolve_tokenizer(setup, model_name, recipe, out, resume, world)
    torch.manual_seed(training.seed)
    with built_on_first_process(training.parallelism, world):
        model = build_model(model_name, {"vocab_size": len(tokenizer)}, setup.dropout, setup.model_overrides,
                            spec.heads)
    data = ObjectiveData(
        prepared=prepared_corpus(setup, tokenizer, world, training.progress),
        tokenizer=tokenizer,
        block_size=block_size,
        batch_size=setup.batch_size,
        seed=training.seed,
        validation_blocks=setup.validation_blocks,
        validation_sample_tokens=setup.validation_sample_tokens,
        whole_word=setup.whole_word,
        max_ngram=setup.max_ngram or recipe.max_ngram,
        mask_ratios=setup.mask_ratios,
    )
    if setup.short_block_size is None:
        objective: Objective = spec.build(data)
    else:
        objective = phased_objective(spec, data, setup.short_block_size, setup.short_steps)
    if world.is_main:
        warn_if_too_little_data(objective, setup, block_size)
    if requested.epochs is not None:  # their steps, now that the data's size is known
        tokens_per_step = setup.batch_size * block_size * requested.grad_accum * world.world_size
        steps = steps_for_epochs(requested.epochs, objective.train_tokens, tokens_per_step)  # in tokens
        training, warmup_note = with_recipe_values(dataclasses.replace(requested, steps=steps, epochs=None), defaults)
    trainer = Trainer(model, objective, training, out, tokenizer, world)
    if warmup_note and world.is_main and not resume:  # a resumed run keeps its own warmup
        warnings.warn(warmup_note, PLMWarning, stacklevel=2)
    return trainer, tokenizer


def pretrain(
    setup: PretrainSetup = PretrainSetup(),
    training: TrainingConfig = TrainingConfig(),
    out: str | Path = "runs/pretrain",
    resume: bool = False,
    overwrite: bool = False,
    definition: dict[str, Any] | None = None,
) -> tuple[PretrainedModel, Tokenizer, dict[str, float]]:
    """Pre-train with the family's recipe.

    The run directory is locked from the start, so that a second process is refused before any work.

    Args:
        setup: what the run trains: the model, its data, objective and batch shape.
        training: how long and how to train.
        out: the run directory.
        resume: continue the run in ``out``.
        overwrite: let a new run replace the run (or other files) in ``out``.
        definition: saved in ``out/run.json`` (see [`train`][plm.training.trainer.Trainer.train]).

    Returns:
        The model, tokenizer and last metrics.

    Raises:
        PLMError: an argument that cannot train, or a run directory that cannot take this run.
        RunStopped: SIGTERM or SIGINT stopped the run after saving its checkpoint.
    """
    trainer, tokenizer, metrics = train_run(out, resume, overwrite, definition,
                                            partial(prepare, setup, training, out, resume, overwrite))
    return trainer.model, tokenizer, metrics


def pretrain_dry_run(
    setup: PretrainSetup,
    training: TrainingConfig,
    out: str | Path,
    resume: bool = False,
    overwrite: bool = False,
) -> DryRun:
    """Build the run as `pretrain` would, time a few of its steps at each length, and project it.

    Each sequence length the run trains at (BERT's short phase, then the long one) is timed (see
    [`plm.training.dry_run`][plm.training.dry_run]). Nothing is written to ``out``.

    Args:
        setup: what the run trains.
        training: how long and how to train.
        out: the run directory, checked as the run would check it.
        resume: the run would continue the one in ``out`` (its tokenizer is read).
        overwrite: the run would replace the run (or other files) in ``out``.

    Returns:
        The measurements and the projection.

    Raises:
        PLMError: an argument that cannot train, or a run directory that cannot take this run.
    """
    def phases(trainer: Trainer) -> list[Phase]:
        steps, block_size = trainer.config.steps, block_size_of(setup)
        if setup.short_block_size is None:
            return [Phase(block_size, 0, steps)]
        switch = min(setup.short_steps, steps)
        return [Phase(setup.short_block_size, 0, switch), Phase(block_size, switch, steps)]

    check_run_directory(Path(out), resume, overwrite)
    return dry_run(lambda: prepare(setup, training, out, resume, overwrite)[0], phases)
