"""The sequence-to-sequence recipe: parallel text -> tokenizers -> encoder-decoder -> trainer.

Like [`plm.training.pretrain`][plm.training.pretrain], every step has a default that works with no input
(the dates task of [`plm.data.dates`][plm.data.dates], BPE trained on it, the family's small preset)
and reads the family's [`PretrainingRecipe`][plm.models.recipe.PretrainingRecipe] for the optimizer and schedule, with
no per-family code: any family whose recipe trains the ``seq2seq`` objective works.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from plm.config import knob
from plm.data.dates import date_pairs
from plm.data.prepared import PreparedPairs
from plm.data.sentence_pairs import EncodedPairs, PairRows, SentencePair, Seq2SeqTokenizers, read_parallel, read_tsv
from plm.device import resolve_device
from plm.errors import PLMError, PLMWarning, with_article
from plm.models import PRESETS, RECIPES, PretrainedModel, Seq2SeqModel, model_class, recipe_of
from plm.models.recipe import TRANSLATION, check_hyperparameter_set
from plm.objectives.teacher_forcing import Seq2SeqObjective
from plm.storage.checkpoint import CHECKPOINT_DIR, model_directory
from plm.training.distributed import setup_distributed
from plm.training.dry_run import DryRun, Phase, dry_run
from plm.training.parallel import built_on_first_process
from plm.training.run_directory import check_run_directory
from plm.training.starting_model import build_model, check_dropout, check_model_name, model_config
from plm.training.trainer import Trainer, TrainingConfig, train_run

OBJECTIVE = "seq2seq"
SELECTABLE = ("bleu", "chrf", "exact_match")
DEFAULT_TASK_PAIRS = (20_000, 500)  # generated training and held-out pairs of the dates task
DEFAULT_TASK_VOCABULARY = 400  # the dates task needs few tokens beyond BPE's 256 bytes
# The model a run with no --model trains: one that learns the dates task within the default run's 1,000
# steps. Held-out exact match (docs/seq2seq.md, the four models at equal CPU time): transformer-small 98% at step 500,
# rnn-bahdanau 100% at step 500, rnn 98.5% at step 1,000; rnn-luong needs 2,000 (93.5%). The Transformer
# is the default as the model most users of the lineage come for.
DEFAULT_MODEL = "transformer-small"


@dataclass(frozen=True)
class Seq2SeqSetup:
    """What a run trains on. No files: the dates task. ``tsv`` or ``source`` + ``target``: the user's pairs.

    ``data``: pairs prepared once ([`prepare_pairs`][plm.data.prepare.prepare_pairs]), mapped from disk, of any size.
    Validation pairs come from ``validation_source`` + ``validation_target`` (or
    ``validation_tsv``), else the last ``validation_fraction`` of the training pairs; a prepared
    corpus holds its own.

    Attributes:
        model: a family, preset or model directory (an encoder-decoder's).
        data: a prepared corpus of sentence pairs, instead of the files; its tokenizers are the run's.
        source: the file of source sentences, one per line.
        target: the file of their translations, line for line.
        tsv: a file of ``source<TAB>target`` lines, instead of ``source`` and ``target``.
        validation_source: the file of validation source sentences.
        validation_target: the file of their translations.
        validation_tsv: a TSV file of validation pairs.
        validation_fraction: the part of the training pairs held out when no validation files are given.
        tokenizer: a saved tokenizer directory to use (default: the model's, or new ones trained on the pairs).
        vocab_size: the size of new vocabularies; None: 8000 for the user's text, 400 for the dates task.
        joint_vocabulary: one vocabulary for both sides.
        max_tokens: the budget of padded tokens per batch.
        label_smoothing: None: the family's recipe (the Transformer's 0.1, the RNNs' 0).
        metric_examples: how many validation pairs are translated for the metrics at each evaluation (0: none).
        select_by: the metric that picks the best checkpoint ("bleu", "chrf" or "exact_match"); None: the loss.
        dropout: every dropout of a new preset's config; None: the preset's own.
        hyperparameters: "cpu": the recipe's CPU-scale values; "paper": the paper's.
        beam: the beam size of the validation metrics' decoding (1: greedy).
        reverse_source: read each source reversed (Sutskever et al.); kept with the model's tokenizers, so that
            ``translate`` and ``eval bleu`` reverse too.
    """

    model: str = DEFAULT_MODEL
    data: str | None = None
    source: str | None = None
    target: str | None = None
    tsv: str | None = None
    validation_source: str | None = None
    validation_target: str | None = None
    validation_tsv: str | None = None
    validation_fraction: float = 0.05
    tokenizer: str | None = None
    vocab_size: int | None = None  # None: 8000 for the user's text, 400 for the dates task
    joint_vocabulary: bool = True
    max_tokens: int = 2048
    label_smoothing: float | None = knob(
        None, "epsilon of label-smoothed cross entropy (default: the family's recipe: 0.1 for the Transformer, as its "
        "paper; 0 for the RNNs, whose papers do not smooth)")
    metric_examples: int = knob(200, "held-out pairs translated at each evaluation (0: none)")
    select_by: str | None = knob(None, "keep the model with the best such validation score in the run's best/")
    dropout: float | None = None
    hyperparameters: str = "cpu"
    beam: int = 1  # for the validation metrics
    reverse_source: bool = knob(False, "read each source sentence backwards, as Sutskever et al. (2014) do for the "
                                "RNN without attention; kept with the model, so that translate and eval bleu "
                                "reverse too")

    def validate(self) -> None:
        """Raise a PLMError naming the field of the first value that cannot train.

        Raises:
            PLMError: a dropout or label smoothing outside [0, 1), an unknown hyperparameter set or metric,
                ``max_tokens``, ``beam``, ``vocab_size`` below 1 or ``metric_examples`` below 0, or a prepared corpus
                given with files of pairs.
        """
        files = (self.source, self.target, self.tsv, self.validation_source, self.validation_target,
                 self.validation_tsv)
        if self.data is not None and any(files):
            raise PLMError("`data` is a prepared corpus of pairs, `source`/`target` and `tsv` files of them: give "
                           "one of them")
        check_dropout(self.dropout)
        check_hyperparameter_set(self.hyperparameters)
        if self.select_by is not None and self.select_by not in SELECTABLE:
            raise PLMError(f"`select_by` takes {', '.join(SELECTABLE)}, got {self.select_by!r}")
        if self.label_smoothing is not None and not (math.isfinite(self.label_smoothing)
                                                      and 0 <= self.label_smoothing < 1):
            raise PLMError(f"`label_smoothing` must be in [0, 1), got {self.label_smoothing}")
        for name in ("max_tokens", "beam"):
            if getattr(self, name) < 1:
                raise PLMError(f"`{name}` must be at least 1, got {getattr(self, name)}")
        if self.vocab_size is not None and self.vocab_size < 1:
            raise PLMError(f"`vocab_size` must be at least 1, got {self.vocab_size}")
        if self.metric_examples < 0:
            raise PLMError(f"`metric_examples` must be >= 0, got {self.metric_examples}")


def read_pairs(setup: Seq2SeqSetup) -> tuple[list[SentencePair], list[SentencePair]]:
    """Training and validation pairs, checked.

    Args:
        setup: the files to read, or none for the dates task.

    Returns:
        The training pairs and the validation pairs.

    Raises:
        PLMError: files given in a combination that does not go together, a file
            [`read_tsv`][plm.data.sentence_pairs.read_tsv] or
            [`read_parallel`][plm.data.sentence_pairs.read_parallel] refuses, or too few pairs to hold out validation.
    """
    if setup.tsv and (setup.source or setup.target):
        raise PLMError("give either `tsv` or `source` and `target`, not both")
    if bool(setup.source) != bool(setup.target):
        raise PLMError("`source` and `target` go together: one file of source sentences, one of their translations")
    if setup.validation_tsv:
        validation = read_tsv(setup.validation_tsv)
    elif setup.validation_source or setup.validation_target:
        if not (setup.validation_source and setup.validation_target):
            raise PLMError("`validation_source` and `validation_target` go together")
        validation = read_parallel(setup.validation_source, setup.validation_target)
    else:
        validation = None
    if setup.tsv:
        train = read_tsv(setup.tsv)
    elif setup.source and setup.target:  # checked above: both or neither
        train = read_parallel(setup.source, setup.target)
    elif validation is not None:
        raise PLMError("validation files need training files (`source`/`target` or `tsv`) as well")
    else:
        train_count, held_out_count = DEFAULT_TASK_PAIRS
        return date_pairs(train_count, seed=0), date_pairs(held_out_count, seed=1, held_out=True)
    if validation is None:
        if not 0 < setup.validation_fraction < 1:
            raise PLMError(f"`validation_fraction` must be in (0, 1), got {setup.validation_fraction}")
        count = max(1, round(len(train) * setup.validation_fraction))
        if count >= len(train):
            raise PLMError(f"{len(train)} pairs are too few to hold out validation pairs; give "
                           "`validation_source`/`validation_target`")
        train, validation = train[:-count], train[-count:]
    return train, validation


def resolve_tokenizers(setup: Seq2SeqSetup, model: str, train: list[SentencePair] | PreparedPairs, out: Path,
                       resume: bool) -> Seq2SeqTokenizers:
    """The run's own tokenizers when resuming, else the ones given, the model's, a prepared corpus', or new ones.

    Args:
        setup: the run's setup.
        model: the preset or model directory.
        train: the training pairs (new tokenizers are trained on them), or the prepared corpus.
        out: the run directory.
        resume: continue the run in ``out``.

    Returns:
        The tokenizers.

    Raises:
        PLMError: a tokenizer directory that cannot be loaded.
    """
    if resume and (out / CHECKPOINT_DIR / "tokenizer.json").is_file():
        return Seq2SeqTokenizers.load(out / CHECKPOINT_DIR)
    if setup.tokenizer:
        return Seq2SeqTokenizers.load(setup.tokenizer).in_source_order(setup.reverse_source)
    if model not in PRESETS:
        tokenizers = Seq2SeqTokenizers.load(model_directory(model))
        if setup.reverse_source != tokenizers.reverse_source:  # the model's weights learnt one order
            learnt = "reversed" if tokenizers.reverse_source else "in order"
            raise PLMError(f"`model` {model} reads its sources {learnt}; continue it "
                           f"{'with' if tokenizers.reverse_source else 'without'} `reverse_source`")
        return tokenizers
    if isinstance(train, PreparedPairs):  # its order of the sources, unless the setup asks to reverse them
        tokenizers = train.tokenizers()
        return tokenizers.in_source_order(True) if setup.reverse_source else tokenizers
    default_size = 8000 if setup.source or setup.tsv else DEFAULT_TASK_VOCABULARY
    return Seq2SeqTokenizers.train(train, vocab_size=setup.vocab_size or default_size, joint=setup.joint_vocabulary,
                                   reverse_source=setup.reverse_source)


def encoded_pairs(setup: Seq2SeqSetup, model: str, out: Path,
                  resume: bool) -> tuple[PairRows, PairRows, Sequence[SentencePair], Seq2SeqTokenizers]:
    """The run's training and validation pairs, encoded, the validation pairs' text, and the tokenizers.

    A prepared corpus is mapped, not read: only the lengths of its pairs are in memory.

    Args:
        setup: the run's setup.
        model: the preset or model directory.
        out: the run directory.
        resume: continue the run in ``out``.

    Returns:
        The training pairs, the validation pairs, the text of the first validation pairs, and the tokenizers.

    Raises:
        PLMError: unreadable pairs, or a prepared corpus of other tokenizers than the run's.
    """
    if setup.data is None:
        train, validation = read_pairs(setup)
        tokenizers = resolve_tokenizers(setup, model, train, out, resume)
        return EncodedPairs.of(train, tokenizers), EncodedPairs.of(validation, tokenizers), validation, tokenizers
    corpus = PreparedPairs.open(setup.data)
    tokenizers = resolve_tokenizers(setup, model, corpus, out, resume)
    corpus.check_tokenizers(tokenizers)
    return corpus.train, corpus.validation, corpus.validation_text(), tokenizers


def prepare_seq2seq(
    setup: Seq2SeqSetup, training: TrainingConfig, out: str | Path, resume: bool = False, overwrite: bool = False
) -> tuple[Trainer, Seq2SeqTokenizers]:
    """Build the trainer (without training); every argument is checked first and nothing is written.

    Args:
        setup: what the run trains on.
        training: how long and how to train (optimizer fields left None take the recipe's).
        out: the run directory.
        resume: continue the run in ``out``.
        overwrite: let a new run replace the run (or other files) in ``out``.

    Returns:
        The trainer and the tokenizers.

    Raises:
        PLMError: an argument that cannot train, a model that is not an encoder-decoder, unreadable pairs,
            or a run directory that cannot take this run.
    """
    out = Path(out)
    setup.validate()
    model_name = check_model_name(setup.model)
    config = model_config(model_name)
    family = model_class(config).family
    recipe = recipe_of(config)  # with the paper settings of the model's size
    if OBJECTIVE not in recipe.objectives:
        seq2seq = [name for name, r in RECIPES.items() if OBJECTIVE in r.objectives]
        raise PLMError(f"`model` {setup.model}: {with_article(family)} model is not an encoder-decoder; seq2seq trains "
                       f"{', '.join(seq2seq)} models")
    defaults = recipe.defaults(setup.hyperparameters)
    warmup_note = training.warmup_note(defaults)  # said once everything is checked
    training = training.with_defaults(defaults)
    training.validate()
    world = setup_distributed(resolve_device(training.device), group_of_one=training.parallelism.sharded)
    train, validation, validation_text, tokenizers = encoded_pairs(setup, model_name, out, resume)
    torch.manual_seed(training.seed)
    with built_on_first_process(training.parallelism, world):
        # Every encoder-decoder config names the target (or joint) vocabulary vocab_size, a separate source one
        # source_vocab_size (None: joint).
        vocabulary = {"vocab_size": len(tokenizers.target),
                      "source_vocab_size": None if tokenizers.joint else len(tokenizers.source)}
        model = build_model(model_name, vocabulary, setup.dropout)
    assert isinstance(model, Seq2SeqModel)  # check_model_name lets only an encoder-decoder through
    objective = Seq2SeqObjective(
        train, validation, tokenizers, validation_text, max_tokens=setup.max_tokens,
        label_smoothing=recipe.label_smoothing if setup.label_smoothing is None else setup.label_smoothing,
        seed=training.seed, metric_examples=setup.metric_examples,
        decoding=dataclasses.replace(TRANSLATION, num_beams=setup.beam),
        select_by=setup.select_by, max_positions=model.context_length(),
    )
    trainer = Trainer(model, objective, training, out, tokenizers, world)
    if warmup_note and world.is_main and not resume:  # a resumed run keeps its own warmup
        warnings.warn(warmup_note, PLMWarning, stacklevel=2)
    return trainer, tokenizers


def seq2seq_dry_run(
    setup: Seq2SeqSetup, training: TrainingConfig, out: str | Path, resume: bool = False, overwrite: bool = False
) -> DryRun:
    """Build the run as `train_seq2seq` would, time a few of its steps, and project it.

    A step's batches hold as many sentence pairs as fit the token budget (see
    [`plm.training.dry_run`][plm.training.dry_run]). Nothing is written to ``out``.

    Args:
        setup: what the run trains on.
        training: how long and how to train.
        out: the run directory, checked as the run would check it.
        resume: the run would continue the one in ``out``.
        overwrite: the run would replace the run (or other files) in ``out``.

    Returns:
        The measurements and the projection.

    Raises:
        PLMError: an argument that cannot train, or a run directory that cannot take this run.
    """
    check_run_directory(Path(out), resume, overwrite)
    return dry_run(lambda: prepare_seq2seq(setup, training, out, resume, overwrite)[0],
                   lambda trainer: [Phase(None, 0, trainer.config.steps)])


def train_seq2seq(
    setup: Seq2SeqSetup = Seq2SeqSetup(),
    training: TrainingConfig = TrainingConfig(),
    out: str | Path = "runs/seq2seq",
    resume: bool = False,
    overwrite: bool = False,
    definition: dict[str, Any] | None = None,
) -> tuple[PretrainedModel, Seq2SeqTokenizers, dict[str, float]]:
    """Train an encoder-decoder with its family's recipe; returns the model, tokenizers and last metrics.

    The run directory is locked from the start, so that a second process is refused before any work.

    Args:
        setup: what the run trains on.
        training: how long and how to train.
        out: the run directory.
        resume: continue the run in ``out``.
        overwrite: let a new run replace the run (or other files) in ``out``.
        definition: saved in ``out/run.json`` (see [`train`][plm.training.trainer.Trainer.train]).

    Returns:
        The model, tokenizers and last metrics.

    Raises:
        PLMError: an argument that cannot train, or a run directory that cannot take this run.
        RunStopped: SIGTERM or SIGINT stopped the run after saving its checkpoint.
    """
    trainer, tokenizers, metrics = train_run(out, resume, overwrite, definition,
                                             partial(prepare_seq2seq, setup, training, out, resume, overwrite))
    return trainer.model, tokenizers, metrics
