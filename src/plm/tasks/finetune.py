"""Fine-tune a pretrained model on a task: what ``plm finetune`` does, as one function call.

BERT's recipe (section 4 and A.3): batch 32, 3 epochs, Adam with a linear warmup
over the first 10% of the steps and linear decay, the learning rate chosen on the
dev set among a few (``lrs``), and on small sets the best of several restarts
(``restarts`` seeds); for SWAG (choice, section 4.4) batch 16 and lr 2e-5. GPT-1's
(section 4.1): lr 6.25e-5, batch 32, 3 epochs, warmup over 0.2% of training, and the
auxiliary LM loss with lambda 0.5 (see
[`finetuning_recipe`][plm.tasks.task_objective.finetuning_recipe]). Each run keeps its
best model by the task's dev metric; with several runs, the best of them is copied
to ``OUT/best`` and ``OUT/summary.json`` lists them all.

``steps`` sets each run's length instead of the epochs (the schedule is laid out over them), and
extends finished runs on a resume; ``minutes`` cuts each run short (the schedule not squeezed into
it). A sentence-transformers checkpoint is read through the pooling it was trained with
([`trained_pooling`][plm.tasks.finetune.trained_pooling]).

``features`` turns to the feature-based approach (BERT section 5.3, ELMo section 3.3) for
every task but choice: the model stays frozen and a BiLSTM (BERT's: 2 layers of 768 units
per direction, ``lstm_dim``) learns over the chosen layers of each word (and, with ``elmo``,
over a frozen ELMo's scalar mix as well, and with ``elmo_output`` at the BiLSTM's output too);
see [`plm.tasks.feature_based`][plm.tasks.feature_based]. BERT's NER reads each sentence in
its document (``document_context``).
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from plm.config import knob
from plm.cpu.int8 import check_trainable
from plm.device import resolve_device
from plm.errors import PLMError
from plm.loading import load_pretrained
from plm.models import CausalLM, from_preset
from plm.storage.atomic_files import read_json, staging_directory, write_json
from plm.storage.checkpoint import (
    BEST_DIR,
    has_checkpoint,
    is_training_run,
    load_model,
    real_number,
    swap_in,
    whole_number,
)
from plm.tasks import readers
from plm.tasks.bilstm import BERT_LSTM_DIM, COMBINATIONS, MixOptions
from plm.tasks.feature_based import FeatureTagger, feature_tagger
from plm.tasks.gpt_inputs import add_task_tokens
from plm.tasks.heads import POOLINGS
from plm.tasks.model import TaskModel, require_task_backbone, task_model
from plm.tasks.readers import read_examples
from plm.tasks.sift_fine_tuning import SiFT, normalised_embeddings
from plm.tasks.synthetic import synthetic_task
from plm.tasks.task_objective import GPT_TASKS, TASKS, Task, TaskObjective, build_task, finetuning_recipe
from plm.tokenization.tokenizer import Tokenizer
from plm.training.distributed import Distributed, setup_distributed
from plm.training.parallel import Parallelism, built_on_first_process
from plm.training.run_directory import (
    RESULT_FILE,
    SUMMARY_FILE,
    SWEEP_DIR,
    check_run_directory,
    remove_leftovers,
    remove_run,
    write_definition,
)
from plm.training.trainer import Trainer, TrainingConfig, steps_for_epochs, train_run

# The built-in task's fresh model. BERT's N(0, 0.02) suits 768-wide layers (about 0.55 / sqrt(768)); in a
# 32-wide model it leaves the sublayers' outputs so small that [CLS] hardly depends on the input (its spread
# across inputs is 0.002 of the hidden state's), a saddle that qa and choice took hundreds of steps to leave.
# N(0, 1 / dim) and no dropout learn every toy task within the default 96 steps (measured; see docs/finetuning.md).
SYNTHETIC_PRESET = "bert-micro"
SYNTHETIC_OVERRIDES = {"dropout": 0.0, "attention_dropout": 0.0}
SYNTHETIC_LR = 3e-3  # a fresh model needs a larger step than a pretrained one
FEATURE_TAGGER_LR = 1e-3  # the feature-based model's BiLSTM trains from scratch over a frozen encoder
FEATURE_TASKS = ("classify", "pair", "regress", "tag", "qa")  # a BiLSTM over one sequence of words per example


@dataclass(frozen=True)
class FinetuneData:
    """What a fine-tuning reads: its files, and how its examples become sequences.

    Attributes:
        train: the training file; None (with ``validation`` None): the built-in synthetic task.
        validation: the dev file, which picks the best model.
        tag_column: tag: the CoNLL column of the tags (1: the word); None: the layout's last.
        document_context: tag: read each sentence within its CoNLL document (BERT 5.3), whose words around it fill
            the rest of ``max_length`` as context that is read, not tagged (see
            [`read_conll_layout`][plm.tasks.readers.read_conll_layout]).
        labels: classify, pair: names for the classes that the data writes as 0, 1, ... (SST-2's: negative,
            positive), the model's classes in their place, so that it predicts the names (see
            [`named_classes`][plm.tasks.finetune.named_classes]); None: the data's labels are the classes.
        synthetic_size: the built-in task's training examples (a quarter as many for validation).
        max_length: tokens per sequence; None: 128, or QA's 384-token windows (BERT's SQuAD).
        stride: QA: tokens between the starts of a long context's windows.
    """

    train: str | None = knob(None, "training file")
    validation: str | None = knob(None, "dev file: picks the best model, the learning rate and tau")
    tag_column: int | None = None
    document_context: bool = knob(
        False, "tag: read each sentence within its document (CoNLL's -DOCSTART- lines separate them), as BERT's NER "
        "did: the words around it, as many as `max_length` leaves room for (centred on it), are context the model "
        "reads but does not tag or score")
    labels: tuple[str, ...] | None = knob(
        None, "classify, pair: names for the classes that the data writes as 0, 1, ... (SST-2: negative,positive), "
        "kept in the model, so that plm predict and plm serve say the names; a file labelled 0, 1, ... still trains "
        "and scores it")
    synthetic_size: int = knob(1024, "built-in task: training examples (a quarter as many for validation)")
    max_length: int | None = None
    stride: int = 128

    def validate(self) -> None:
        """Raise a PLMError naming the field of the first value out of its range.

        Raises:
            PLMError: ``train`` without ``validation`` or the reverse, ``document_context`` without them, a class
                named twice, or a number below its least (``stride``, ``max_length``, ``synthetic_size``).
        """
        if (self.train is None) != (self.validation is None):
            raise PLMError("give both `train` and `validation`, or neither (the built-in synthetic task)")
        if self.document_context and self.train is None:
            raise PLMError("`document_context` reads the documents of CoNLL files; the built-in task has none: give "
                           "`train` and `validation`")
        if self.labels is not None and len(set(self.labels)) != len(self.labels):
            raise PLMError(f"`labels` {','.join(self.labels)}: a name given twice; give each class its own")
        check_least(self, {"stride": 1, "max_length": 8, "synthetic_size": 4})


@dataclass(frozen=True)
class FinetuneHead:
    """What is trained on the model: a task head, or (``features``) the feature-based model over its frozen layers.

    Attributes:
        features: the frozen encoder's layers a BiLSTM reads (BERT 5.3, ELMo 3.3), for every task of
            `FEATURE_TASKS`; None: fine-tune the model.
        combine: how those layers combine: concat, sum or mix.
        lstm_dim: with ``features``, the BiLSTM's units per direction (BERT 5.3's 768, `BERT_LSTM_DIM`).
        elmo: a plm ELMo run whose scalar-mixed layers join the features.
        elmo_output: ELMo at the BiLSTM's output too, through a second scalar mix ([h_k; ELMo_k]).
        mix: with ``features``, the scalar mixes' options (ELMo's layer norm, dropout, L2 on s).
        symmetric: GPT pairs without an order, read in both (GPT-1's similarity form).
        pooling: classify, pair, regress, choice: cls, last or mean; None: see
            [`trained_pooling`][plm.tasks.finetune.trained_pooling].
    """

    features: tuple[int, ...] | None = knob(
        None, "tag, classify, pair, regress, qa: keep the model frozen and train a 2-layer BiLSTM over these of its "
        "layers of each word, comma-separated (0 = the token embeddings, -1 = the last layer; BERT's -4,-3,-2,-1); a "
        "class is read from its states max- and mean-pooled")
    combine: str = knob("concat", "`features`: concatenate, sum or scalar-mix (ELMo's) the layers of each word")
    lstm_dim: int = knob(BERT_LSTM_DIM, "`features`: the BiLSTM's units per direction (BERT 5.3: a 768-dimensional "
                         "BiLSTM)")
    elmo: str | None = knob(None, "`features`: a plm ELMo (model or run) whose scalar-mixed layers join the features")
    elmo_output: bool = knob(False, "`elmo`: ELMo at the BiLSTM's output too, [h_k; ELMo_k] through a second scalar "
                             "mix (ELMo 3.3, its SNLI and SQuAD models)")
    mix: MixOptions = MixOptions()
    symmetric: bool = knob(False, "pair, regress on a GPT: the two sentences have no order (QQP, MRPC, STS-B); read "
                           "both orders and add the two final states (GPT-1's similarity form)")
    pooling: str | None = knob(
        None, "classify, pair, regress, choice: the vector the head reads: [CLS] (through the model's pooler), the "
        "last token or the mean of the tokens (default: the model's own: [CLS] for an encoder, the last token for a "
        "GPT, the mean for a sentence-transformers model such as all-MiniLM-L6-v2, whose [CLS] pooler was never "
        "trained)")

    def validate(self) -> None:
        """Raise a PLMError naming the field of the first value that cannot train.

        The values that depend on the task are `FinetuneSetup.validate`'s to check.

        Raises:
            PLMError: ``elmo`` without ``features``, ``elmo_output`` without ``elmo``, ``pooling`` with ``features``,
                an unknown ``combine`` or ``pooling``, ``mix`` options without a scalar mix, or an ``lstm_dim`` below 1
                or without ``features``.
        """
        check_least(self, {"lstm_dim": 1})
        if self.lstm_dim != BERT_LSTM_DIM and self.features is None:
            raise PLMError("`lstm_dim` sizes the feature-based model's BiLSTM: give `features` too")
        if self.elmo is not None and self.features is None:
            raise PLMError("`elmo` joins the features of the feature-based model: give `features` too (e.g. 0)")
        if self.elmo_output and self.elmo is None:
            raise PLMError("`elmo_output` adds ELMo at the BiLSTM's output too: give `elmo`")
        if self.features is not None and self.pooling is not None:
            raise PLMError("`pooling` picks the fine-tuned model's vector; the feature-based model max- and "
                           "mean-pools its BiLSTM's states")
        if self.combine not in COMBINATIONS:
            raise PLMError(f"`combine` must be one of {', '.join(COMBINATIONS)}, got {self.combine!r}")
        if self.pooling is not None and self.pooling not in POOLINGS:
            raise PLMError(f"`pooling` must be one of {', '.join(POOLINGS)}, got {self.pooling!r}")
        if self.mix != MixOptions() and not (self.features is not None and (self.combine == "mix" or self.elmo)):
            raise PLMError("`mix` sets the feature-based model's scalar mixes: give `features` with `combine` mix or "
                           "`elmo`")


@dataclass(frozen=True)
class FinetuneOptimization:
    """How each run trains, and how many runs the sweep trains; None fields take the paper's recipe.

    Attributes:
        lrs: the learning rates to try; None: the recipe's (a fresh model's or the feature-based model's own).
        restarts: the seeds tried per learning rate (``seed``, ``seed + 1`` ...).
        seed: the first run's seed.
        epochs: passes over the training set.
        steps: each run's optimizer steps, instead of ``epochs``' (the schedule is laid out over them); on a resume,
            more steps than a finished run took extend it.
        minutes: each run stops at the first step past this many minutes of training.
        batch_size: examples per batch (each process's, under torchrun); None: the recipe's, 32 (BERT's classification
            and GPT-1's) or for choice on an encoder 16 (BERT's SWAG).
        warmup_fraction: the share of the steps that warms the learning rate up; None: the recipe's.
        lm_weight: GPT-1's lambda; 0 turns the auxiliary LM loss off.
        sift: add DeBERTa's SiFT term.
        save_every: steps between checkpoints within an epoch (and at its end), so that a stop loses little.
    """

    lrs: tuple[float, ...] | None = None
    restarts: int = knob(1, "seeds per learning rate; the best is kept")
    seed: int = 0
    epochs: float = 3.0
    steps: int | None = None
    minutes: float | None = None
    batch_size: int | None = knob(None, "examples per step (default: the recipe's, 32; choice on an encoder 16, as "
                                 "BERT's SWAG)")
    warmup_fraction: float | None = knob(None, "linear warmup over this fraction of the steps (default 0.1; GPT "
                                         "0.002)")
    lm_weight: float = knob(0.5, "GPT: lambda of the auxiliary LM loss; 0 = off")
    sift: bool = knob(False, "encoders: DeBERTa's SiFT adversarial term")
    save_every: int = 500

    def validate(self) -> None:
        """Raise a PLMError naming the field of the first value out of its range.

        Raises:
            PLMError: a learning rate, ``restarts``, ``batch_size``, ``save_every``, ``epochs``, ``lm_weight``,
                ``warmup_fraction``, ``minutes`` or ``steps`` out of its range.
        """
        if self.lrs is not None and not all(math.isfinite(lr) and lr > 0 for lr in self.lrs):
            raise PLMError(f"`lrs` must be above 0, got {','.join(map(str, self.lrs))}")
        check_least(self, {"restarts": 1, "batch_size": 1, "save_every": 1, "steps": 1})
        if not (math.isfinite(self.epochs) and self.epochs > 0):
            raise PLMError(f"`epochs` must be above 0, got {self.epochs}")
        if not (math.isfinite(self.lm_weight) and self.lm_weight >= 0):
            raise PLMError(f"`lm_weight` must be >= 0, got {self.lm_weight}")
        if self.warmup_fraction is not None and not 0 <= self.warmup_fraction < 1:
            raise PLMError(f"`warmup_fraction` must be in [0, 1), got {self.warmup_fraction}")
        if self.minutes is not None and not (math.isfinite(self.minutes) and self.minutes > 0):
            raise PLMError(f"`minutes` must be a number above 0, got {self.minutes}")


def check_least(config: Any, least: dict[str, int]) -> None:
    """Refuse a field of ``config`` below its least value (a None field: unset, not checked).

    Args:
        config: a config.
        least: each field's least value.

    Raises:
        PLMError: the first field below its least.
    """
    for name, lowest in least.items():
        value = getattr(config, name)
        if value is not None and value < lowest:
            raise PLMError(f"`{name}` must be at least {lowest}, got {value}")


@dataclass(frozen=True)
class FinetuneSetup:
    """What to fine-tune on what: the task and model, then its data, head and optimisation, each a config of its own.

    Attributes:
        task: the task, one of `TASKS`.
        model: a plm or Hugging Face directory (or training run), or a Hugging Face Hub id; None: a fresh model on
            the built-in task.
        revision: for a Hub id, the branch, tag or commit to fetch.
        data: what it reads ([`FinetuneData`][plm.tasks.finetune.FinetuneData]).
        head: what is trained on the model ([`FinetuneHead`][plm.tasks.finetune.FinetuneHead]).
        optimization: how each run trains ([`FinetuneOptimization`][plm.tasks.finetune.FinetuneOptimization]).
        device: "auto", "cpu", "cuda" or "cuda:N".
        precision: autocast precision of training ([`resolve_precision`][plm.device.resolve_precision]): "auto", "fp32",
            "bf16" or "fp16".
        progress: show progress bars.
        parallelism: DDP or FSDP, activation checkpointing.
        report_to: "tensorboard" writes each run's logged metrics to its ``tensorboard/`` too; "none" does not.
    """

    task: str
    model: str | None = None  # a plm or Hugging Face directory, or a Hub id; None: a fresh model on the built-in task
    revision: str | None = None
    data: FinetuneData = FinetuneData()
    head: FinetuneHead = FinetuneHead()
    optimization: FinetuneOptimization = FinetuneOptimization()
    device: str = "auto"
    precision: str = "auto"
    progress: bool = True
    parallelism: Parallelism = Parallelism()  # DDP or FSDP, activation checkpointing
    report_to: str = "none"  # "tensorboard": each run's logged metrics in its tensorboard/ too

    def validate(self) -> None:
        """Check the setup before anything is read or written: each part, then what depends on the task.

        Raises:
            PLMError: an unknown task; a value its part refuses (see
                [`FinetuneData.validate`][plm.tasks.finetune.FinetuneData.validate],
                [`FinetuneHead.validate`][plm.tasks.finetune.FinetuneHead.validate],
                [`FinetuneOptimization.validate`][plm.tasks.finetune.FinetuneOptimization.validate]); or options
                that do not go together with the task or each other (``features`` for choice, with FSDP or
                ``sift``; ``symmetric`` for a task other than pair or regress; ``pooling`` for a task that does not
                pool; ``labels`` for a task without classes; ``document_context`` for a task other than tag).
        """
        if self.task not in TASKS:
            raise PLMError(f"unknown task {self.task!r}; choose one of {', '.join(TASKS)}")
        self.data.validate()
        self.head.validate()
        self.optimization.validate()
        head, task = self.head, self.task
        if head.features is not None and task not in FEATURE_TASKS:
            raise PLMError(f"`features` is for `task` {', '.join(FEATURE_TASKS)}: the feature-based model reads one "
                           f"sequence per example, and {task} scores several; fine-tune the model instead")
        if head.features is not None and self.parallelism.sharded:
            # Each process runs the frozen models only for its sentences not yet in the feature cache, so one
            # process would gather their shards while the other waits in another collective: a hang.
            raise PLMError("`features` with `strategy` fsdp is not supported: each process runs the frozen model "
                           "only for its sentences not yet cached, and FSDP needs every process in each of its "
                           "gathers; use `strategy` ddp")
        if head.features is not None and self.optimization.sift:
            raise PLMError("`sift` perturbs a model being fine-tuned; the feature-based model keeps it frozen")
        if self.data.document_context and task != "tag":
            raise PLMError(f"`document_context` reads CoNLL documents: it is for `task` tag, not {task}")
        if self.data.labels is not None and task not in ("classify", "pair"):
            raise PLMError(f"`labels` names a classifier's classes: it is for `task` classify or pair, not {task}")
        if head.symmetric and task not in ("pair", "regress"):
            raise PLMError(f"`symmetric` reads sentence pairs: it is for `task` pair or regress, not {task}")
        if head.pooling is not None and task not in POOLED_TASKS:
            raise PLMError(f"`pooling` is for `task` {', '.join(POOLED_TASKS)}: a {task} head reads every token")


POOLED_TASKS = ("classify", "pair", "regress", "choice")  # one vector per sequence
SENTENCE_TRANSFORMERS_POOLING = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls"}


def trained_pooling(model: str | Path | None) -> str | None:
    """The pooling a sentence-transformers checkpoint (all-MiniLM-L6-v2) was trained with, or None for any other model.

    Read from its ``modules.json`` and pooling config; for any other model the family's pooling applies ([CLS] or
    last). Such a model learnt to make the mean of its token states the sentence's vector, while its BERT
    pooler never got a gradient (all-MiniLM-L6-v2's: bias all 0, weights of std 0.009). A classifier
    reading [CLS] through that pooler (as transformers' BertForSequenceClassification does) gets tiny
    gradients and sits on the 0.69 loss plateau for the first ~30 of the 96 steps that 1,000 SST-2
    sentences give; whether it leaves it in time is float noise (issue 20: dev accuracy 0.50 on one
    thread, 0.79 on two). Mean pooling leaves the plateau within 15 steps (see docs/finetuning.md).

    Args:
        model: the model's directory, or None (a fresh model).

    Returns:
        "mean" or "cls" when the checkpoint's pooling config chooses exactly one of them; else None.
    """
    if model is None or not (Path(model) / "modules.json").is_file():
        return None
    modules = json.loads((Path(model) / "modules.json").read_text(encoding="utf-8"))
    for module in modules:
        config = Path(model) / module.get("path", "") / "config.json"
        if module.get("type", "").endswith(".Pooling") and config.is_file():
            modes = json.loads(config.read_text(encoding="utf-8"))
            chosen = [pooling for key, pooling in SENTENCE_TRANSFORMERS_POOLING.items() if modes.get(key)]
            return chosen[0] if len(chosen) == 1 else None
    return None


def task_labels(task: str, train: Sequence[Any], validation: Sequence[Any] = (),
                validation_file: str | Path | None = None) -> tuple[str, ...]:
    """The classes of the training examples (tags: ``O`` first), in a fixed order: the head's label ids.

    A class that only the validation examples (read from ``validation_file``) hold would be one the
    head never trains on (issue 33: a dev file's one extra label made a 4-class model with 3 trained
    classes), so it is refused. Without ``validation_file`` (the built-in task) both sets come from one
    generator, whose classes they share, and the validation examples' classes count too.

    Args:
        task: the task; only classify, pair and tag have classes.
        train: the training examples.
        validation: the validation examples.
        validation_file: the file ``validation`` was read from; None for the built-in task.

    Returns:
        The sorted class names (tags: ``O`` first, if any); empty for a task without classes.

    Raises:
        PLMError: a validation label (or tag) that no training example holds, with its file and line
            (a tag's: the line of the word it tags).
    """
    if validation_file is None:
        train, validation = [*train, *validation], ()
    if task in ("classify", "pair"):
        labels = tuple(sorted({str(e.label) for e in train if e.label is not None}))
        held = [(e.line, str(e.label)) for e in validation if e.label is not None]
    elif task == "tag":
        tags = {t for e in train for t in e.tags}
        labels = ("O",) * ("O" in tags) + tuple(sorted(tags - {"O"}))
        held = [(None if e.line is None else e.line + i, t) for e in validation for i, t in enumerate(e.tags)]
    else:
        return ()
    for line, label in held:
        if label not in labels:
            where = validation_file if line is None else f"{validation_file}:{line}"
            kind = "tag" if task == "tag" else "label"
            raise PLMError(f"{where}: {kind} {label!r} is in no training example (their {kind}s: "
                           f"{', '.join(labels) or 'none'}); the model would have a class it never trains on: "
                           "add training examples of it or remove it from the validation file")
    return labels


def named_classes(labels: tuple[str, ...], names: Sequence[str], source: str | Path) -> tuple[str, ...]:
    """``names`` for the classes that the data writes as their ids, 0, 1, ...: the model's classes.

    The model predicts the names, and reads a file's label as a name or as its id
    ([`class_of`][plm.tasks.task_objective.Classification.class_of]), so that SST-2's files, labelled 0 and 1,
    train and score a model that says negative and positive.

    Args:
        labels: the data's classes (see [`task_labels`][plm.tasks.finetune.task_labels]).
        names: one name per class, in the order of their ids.
        source: where the data was read from, for messages.

    Returns:
        The names, in id order.

    Raises:
        PLMError: not one name per class, or data whose labels are not the ids 0 to N - 1.
    """
    if len(names) != len(labels):
        raise PLMError(f"`labels` gives {len(names)} names ({', '.join(names)}) for the {len(labels)} classes of "
                       f"{source} ({', '.join(labels)}): give one name per class, in the order of their ids")
    if set(labels) != {str(i) for i in range(len(labels))}:
        raise PLMError(f"`labels` names the classes that the data writes as 0 to {len(labels) - 1}, and the labels "
                       f"of {source} are {', '.join(labels)}: leave `labels` out and its labels name the classes")
    return tuple(names)


@dataclass
class FinetuneResult:
    """What [`finetune`][plm.tasks.finetune.finetune] returns.

    Attributes:
        model: the best run's model (see [`load_model`][plm.storage.checkpoint.load_model]), from ``out``.
        tokenizer: the tokenizer the model reads with (with GPT-1's task tokens added, for a GPT).
        runs: one dict per (lr, seed) run: its lr, seed, directory, steps, last validation metrics, and its best
            value of the task's selection metric.
        best: the run of ``runs`` with the best selection metric.
        main_process: under torchrun, whether this is the process that writes and reports.
    """
    model: Any
    tokenizer: Tokenizer
    runs: list[dict[str, Any]]  # one per (lr, seed): its directory and best dev metric
    best: dict[str, Any]
    main_process: bool = True  # under torchrun, the process that writes and reports


def finetune(setup: FinetuneSetup, out: str | Path, overwrite: bool = False, resume: bool = False,
             definition: dict[str, Any] | None = None) -> FinetuneResult:
    """Fine-tune ``setup.model`` on ``setup.task`` for every lr and restart; keep the best on the dev set.

    Each run writes ``result.json`` when it has finished. ``resume`` keeps those (or, when
    ``setup.optimization.steps`` is more than one of them took, extends it from its checkpoint, its schedule laid
    out over the new steps),
    continues the run that was interrupted from its checkpoint (bit for bit, as
    [`Trainer.train`][plm.training.trainer.Trainer.train] does) and starts the rest; when there was nothing to train,
    one line on stderr says the fine-tuning was complete. The sweep runs as every trainer does
    ([`train_run`][plm.training.trainer.train_run]): ``out`` is checked and locked before anything is read, and
    ``definition`` is saved in ``out/run.json`` (see [`plm.training.run_directory`][plm.training.run_directory]).

    Args:
        setup: what to fine-tune on what.
        out: the run directory; with several runs, each is in a subdirectory and the best is copied to
            ``out/best``.
        overwrite: replace a run already in ``out``.
        resume: continue the runs in ``out``.
        definition: the command's definition, for ``out/run.json``; None writes none.

    Returns:
        The best model, its tokenizer and every run's result.

    Raises:
        PLMError: an invalid ``setup`` (see [`FinetuneSetup.validate`][plm.tasks.finetune.FinetuneSetup.validate]), data
            files that cannot be read or whose validation labels no training example holds, a model that cannot be
            loaded or fine-tuned, or an ``out`` that cannot take the run (see
            [`check_finetune_directory`][plm.tasks.finetune.check_finetune_directory]).
        RunStopped: SIGTERM or SIGINT stopped a run after saving its checkpoint.
    """
    setup.validate()
    sweep, _, _ = train_run(out, resume, overwrite, definition, partial(prepare_sweep, setup, Path(out)),
                            check=check_finetune_directory)
    assert sweep.result is not None  # set by its train
    return sweep.result


def check_finetune_directory(out: Path, resume: bool, overwrite: bool) -> None:
    """Refuse an ``out`` that cannot take the fine-tuning, before anything is written.

    Args:
        out: the run directory.
        resume: the runs continue those in ``out``.
        overwrite: the runs may replace what ``out`` holds.

    Raises:
        PLMError: both ``resume`` and ``overwrite``; without ``resume``, a directory that
            [`check_run_directory`][plm.training.run_directory.check_run_directory] refuses; with it, an ``out`` that
            holds no fine-tuning run (neither itself nor a run of its sweep).
    """
    if resume and overwrite:
        raise PLMError("`resume` continues the run in `out` and `overwrite` replaces it: give one of them")
    if not resume:
        check_run_directory(out, resume=False, overwrite=overwrite)
    elif not (is_training_run(out) or any(is_training_run(run) for run in (out / SWEEP_DIR).glob("*"))):
        raise PLMError(f"{out}: no fine-tuning run to resume (drop `resume` to start one)")


def prepare_sweep(setup: FinetuneSetup, out: Path) -> tuple[Sweep, Tokenizer]:
    """Read the data, load the model and build the task of [`finetune`][plm.tasks.finetune.finetune]'s runs.

    Args:
        setup: what to fine-tune on what, valid.
        out: the run directory, checked and locked.

    Returns:
        The sweep, ready to train, and the tokenizer its models read with.

    Raises:
        PLMError: data files that cannot be read or whose validation labels no training example holds, or a model
            that cannot be loaded or fine-tuned as ``setup`` asks.
    """
    if setup.data.train is not None and setup.data.validation is not None:  # both or neither: see validate
        train, validation = (
            read_examples(setup.task, path, setup.data.tag_column, document_context=setup.data.document_context)
            for path in (setup.data.train, setup.data.validation)
        )
    else:
        sizes = (setup.data.synthetic_size, setup.data.synthetic_size // 4)
        train, validation = (synthetic_task(setup.task, n, setup.optimization.seed + k) for k, n in enumerate(sizes))
    labels = task_labels(setup.task, train, validation, setup.data.validation)
    if setup.data.labels is not None:
        labels = named_classes(labels, setup.data.labels, setup.data.train or "the built-in task")
    world = setup_distributed(resolve_device(setup.device), group_of_one=setup.parallelism.sharded)
    with built_on_first_process(setup.parallelism, world):
        backbone, tokenizer = load_backbone(setup, train)
        elmo = load_model(setup.head.elmo) if setup.head.elmo is not None else None  # a plm ELMo's directory or run
    causal = isinstance(backbone, CausalLM)
    if causal and setup.task in GPT_TASKS:
        torch.manual_seed(setup.optimization.seed)  # the task tokens' new rows are drawn: the same run, the same rows
        add_task_tokens(backbone, tokenizer)
    options: dict[str, Any] = {"stride": setup.data.stride} if setup.task == "qa" else {}
    if setup.head.features is not None:
        options |= {"words": True, "characters": elmo is not None}
    if setup.head.symmetric:
        options["symmetric"] = True
    task = build_task(setup.task, tokenizer, backbone, labels, setup.data.max_length, **options)
    if setup.optimization.sift:
        normalised_embeddings(backbone)  # an encoder has them; anything else fails here, before a run is written
    return Sweep(setup, out, world, backbone, elmo, tokenizer, task, (train, validation, labels)), tokenizer


class Sweep:
    """[`finetune`][plm.tasks.finetune.finetune]'s runs, one per (lr, restart), in one run directory.

    Args:
        setup: what to fine-tune on what.
        out: the run directory; with several runs, each in a subdirectory of it.
        world: the processes of the run.
        backbone: the pretrained model (each run trains a copy).
        elmo: a plm ELMo whose layers join the feature-based model's, or None.
        tokenizer: what the models read with.
        task: the task.
        data: the training examples, the validation examples and the labels.

    Attributes:
        recipe: the paper's recipe for the task and backbone (see
            [`finetuning_recipe`][plm.tasks.task_objective.finetuning_recipe]).
        lrs: the learning rates tried: ``lrs``, or the recipe's (a fresh model's or the feature-based model's own).
        batch_size: each run's batch size: ``batch_size``, or the recipe's.
        warmup: the warmup fraction: ``warmup_fraction``, or the recipe's.
    """

    def __init__(self, setup: FinetuneSetup, out: Path, world: Distributed, backbone: Any, elmo: Any,
                 tokenizer: Tokenizer, task: Task, data: tuple[list[Any], list[Any], tuple[str, ...]]) -> None:
        self.setup, self.out, self.world, self.task = setup, out, world, task
        self.backbone, self.elmo, self.tokenizer = backbone, elmo, tokenizer
        self.train_examples, self.validation_examples, self.labels = data
        recipe = finetuning_recipe(setup.task, isinstance(backbone, CausalLM))
        if setup.head.features is not None:
            default_lr = FEATURE_TAGGER_LR
        else:
            default_lr = SYNTHETIC_LR if setup.model is None else recipe.lr
        self.recipe = recipe
        self.lrs = setup.optimization.lrs or (default_lr,)
        self.batch_size = setup.optimization.batch_size or recipe.batch_size
        warmup = setup.optimization.warmup_fraction
        self.warmup = recipe.warmup_fraction if warmup is None else warmup
        pooled = setup.task in POOLED_TASKS and setup.head.features is None
        self.pooling = setup.head.pooling or (trained_pooling(setup.model) if pooled else None)
        self.sift = SiFT() if setup.optimization.sift else None
        self.several = len(self.lrs) * setup.optimization.restarts > 1
        self.result: FinetuneResult | None = None  # set by train

    def train(self, resume: bool = False, overwrite: bool = False,
              definition: dict[str, Any] | None = None) -> dict[str, float]:
        """Train every run (keeping, extending, continuing or starting each, see `finetune`); copy the best.

        Args:
            resume: continue the runs in the run directory.
            overwrite: replace what the run directory holds.
            definition: the command's definition: the sweep's (in the run directory) or the single run's (written
                by its trainer).

        Returns:
            The best run's result: its lr, seed, directory, steps and last validation metrics.
        """
        out, world, setup = self.out, self.world, self.setup
        if world.is_main:
            remove_leftovers(out)
            if overwrite:
                remove_run(out)
            if definition is not None and self.several:  # a single run's trainer writes it, in the same directory
                write_definition(out, definition)
        runs = []
        trained = False  # on a resume: whether any run had steps left
        for lr in self.lrs:
            for restart in range(setup.optimization.restarts):
                seed = setup.optimization.seed + restart
                directory = out / SWEEP_DIR / f"lr{lr:g}-seed{seed}" if self.several else out
                if resume and (directory / RESULT_FILE).is_file():
                    finished = read_result(directory / RESULT_FILE, self.task.selection)
                    if setup.optimization.steps is None or finished["steps"] >= setup.optimization.steps:
                        runs.append(finished)
                        continue
                trained = True
                runs.append(self.train_one(lr, setup.optimization.seed + restart, directory, resume, overwrite,
                                           None if self.several else definition))
        if resume and not trained and world.is_main:
            reached = ", ".join(map(str, sorted({run["steps"] for run in runs})))
            print(f"{out}: {'every run of the sweep' if self.several else 'the run'} was complete already, at step "
                  f"{reached}; nothing trained (resume it with more steps to extend it)", file=sys.stderr)
        best = max(runs, key=lambda run: run[self.task.selection])
        if self.several and world.is_main:  # the others would copy over the same files at once
            staging = staging_directory(out, f".{BEST_DIR}-")  # swapped in whole: a kill leaves the old best or new
            shutil.copytree(Path(best["directory"]) / BEST_DIR, staging, dirs_exist_ok=True)
            swap_in(staging, out, BEST_DIR)
            write_json(out / SUMMARY_FILE, {"selection": self.task.selection, "best": best, "runs": runs})
        world.barrier()  # the best model is in place before any process reads it
        self.result = FinetuneResult(load_model(out), self.tokenizer, runs, best, world.is_main)
        return best

    def train_one(self, lr: float, seed: int, directory: Path, resume: bool, overwrite: bool,
                  definition: dict[str, Any] | None) -> dict[str, Any]:
        """One run of the sweep, trained (or continued) in ``directory``.

        Args:
            lr: its peak learning rate.
            seed: its seed: the head's initialisation and the order of the batches.
            directory: its run directory.
            resume: the sweep resumes: continue the run's checkpoint when it has one.
            overwrite: replace what ``directory`` holds.
            definition: the run's definition, for its ``run.json`` (a single run's), or None.

        Returns:
            Its result: lr, seed, directory, steps, last validation metrics and its best selection metric.
        """
        setup, world = self.setup, self.world
        torch.manual_seed(seed)
        with built_on_first_process(setup.parallelism, world):
            model = run_model(setup.head, self.backbone, self.elmo, self.task, self.labels, self.pooling)
        mix_penalty = model.penalty if isinstance(model, FeatureTagger) and setup.head.mix.l2 > 0 else None
        # Under torchrun each process takes one batch a step (batch m * processes + rank of the
        # epoch's order), so an epoch is a processes-th of the batches in optimizer steps.
        objective = TaskObjective(
            self.task, self.train_examples, self.validation_examples, self.batch_size, seed,
            lm_weight=setup.optimization.lm_weight, sift=self.sift, mix_penalty=mix_penalty,
            micro_batches_per_step=world.world_size,
        )
        per_epoch = steps_for_epochs(1, objective.batches_per_epoch, world.world_size)
        # Steps given win over the epochs (so that a resume with more extends a finished run); the schedule's
        # warmup and decay fit the steps that run.
        if setup.optimization.steps is None:
            steps = steps_for_epochs(setup.optimization.epochs, objective.batches_per_epoch, world.world_size)
        else:
            steps = setup.optimization.steps
        minutes = setup.optimization.minutes
        config = TrainingConfig(
            steps=steps, lr=lr, min_lr=0.0, schedule="linear", warmup=round(self.warmup * steps), optimizer="adamw",
            betas=self.recipe.betas, weight_decay=0.01, eval_every=per_epoch,
            save_every=min(per_epoch, setup.optimization.save_every), log_every=max(1, per_epoch // 10), seed=seed,
            device=setup.device, precision=setup.precision, progress=setup.progress,
            minutes=minutes, parallelism=setup.parallelism,
            report_to=setup.report_to, extension="layout",
        )
        continuing = resume and has_checkpoint(directory)
        trainer = Trainer(model, objective, config, directory, tokenizer=self.tokenizer, distributed=world)
        metrics = trainer.train(resume=continuing, overwrite=overwrite or (resume and not continuing),
                                definition=definition)
        last = {k: v for k, v in metrics.items() if k.startswith("val_")}
        result = {"lr": lr, "seed": seed, "directory": str(directory), "steps": trainer.step, **last,
                  self.task.selection: trainer.best}
        if world.is_main:
            write_json(directory / RESULT_FILE, result)
        return result


def read_result(path: Path, selection: str) -> dict[str, Any]:
    """A finished run's ``result.json``, refused where it is not the object plm writes.

    Args:
        path: the file.
        selection: the task's selection metric, which the result holds.

    Returns:
        The result.

    Raises:
        PLMError: a result that is not an object with its steps (a whole number) and its selection metric.
    """
    result = read_json(path)
    steps = result.get("steps") if isinstance(result, dict) else None
    metric = result.get(selection) if isinstance(result, dict) else None
    if not whole_number(steps, 0) or not (metric is None or real_number(metric)):
        raise PLMError(f"{path}: not the result of a finished run (an object with its steps and {selection}); it is "
                       "damaged: delete it, and resuming trains that run again from its checkpoint")
    return result


def run_model(head: FinetuneHead, backbone: Any, elmo: Any, task: Task, labels: tuple[str, ...],
              pooling: str | None) -> TaskModel | FeatureTagger:
    """A run's fresh model on copies of ``backbone`` (and ``elmo``): a task head, or the feature-based model.

    Args:
        head: what to train on the model (``features`` chooses the feature-based model).
        backbone: the pretrained model.
        elmo: a plm ELMo whose layers join the BiLSTM's features, or None.
        task: the task, for the head and its outputs.
        labels: the class names.
        pooling: "cls", "last" or "mean"; None: the backbone's own.

    Returns:
        The model to train.
    """
    names = labels if task.head != "span" else ()
    if head.features is not None:
        model = feature_tagger(backbone, head.features, task.outputs, names, head.combine, elmo, task=task.head,
                               hidden=head.lstm_dim, elmo_output=head.elmo_output, mix_layer_norm=head.mix.layer_norm,
                               mix_dropout=head.mix.dropout, mix_l2=head.mix.l2)
        model.cache_features()  # frozen features: each sentence's computed once, not every epoch
        return model
    return task_model(backbone, task.head, task.outputs, label_names=names, symmetric=head.symmetric, pooling=pooling)


def load_backbone(setup: FinetuneSetup, train: list[Any]) -> tuple[Any, Tokenizer]:
    """The pretrained model and its tokenizer; for the built-in task, a fresh small BERT and a tokenizer of its text.

    Args:
        setup: the fine-tuning's setup (its ``model``, ``seed`` and ``max_length``).
        train: the training examples, whose text a fresh model's tokenizer is trained on.

    Returns:
        The backbone (a task model's backbone, for a fine-tuned model) and its tokenizer.

    Raises:
        PLMError: a model that cannot be loaded, is not trainable (int8), or takes no task head.
    """
    if setup.model is not None:
        model, tokenizer = load_pretrained(setup.model, revision=setup.revision)
        check_trainable(model, setup.model)
        if isinstance(model, TaskModel):
            model = model.backbone
        require_task_backbone(model, setup.model)
        return model, tokenizer
    tokenizer = Tokenizer.train_wordpiece(synthetic_texts(train), vocab_size=200, min_frequency=1)
    torch.manual_seed(setup.optimization.seed)
    model = from_preset(
        SYNTHETIC_PRESET,
        vocab_size=len(tokenizer),
        context_length=max(128, setup.data.max_length or 0),
        **SYNTHETIC_OVERRIDES,
    )
    model.init_weights(std=model.config.dim ** -0.5)
    return model, tokenizer


def synthetic_texts(examples: list[Any]) -> list[str]:
    """The texts of ``examples``, for training a tokenizer on them.

    Args:
        examples: text examples, tagged sentences, QA or choice examples.

    Returns:
        Their texts: a sentence's words joined, a question and its context, a context, its prefix and
        endings, or a text and its pair (empty when there is none).
    """
    texts = []
    for e in examples:
        if isinstance(e, readers.TaggedSentence):
            texts.append(" ".join(e.words))
        elif isinstance(e, readers.QAExample):
            texts += [e.question, e.context]
        elif isinstance(e, readers.ChoiceExample):
            texts += [e.context, e.prefix, *e.endings]
        else:
            texts += [e.text, e.text_pair or ""]
    return texts
