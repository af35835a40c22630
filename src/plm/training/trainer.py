"""The training loop: accumulation, clipping, schedule, evaluation, checkpoints, resume.

It knows nothing about a family or an objective: the objective draws batches and
sums losses, the model is any ``PretrainedModel``. One optimizer step consumes
``grad_accum`` micro-batches on every process; the loss of each is divided by the
number of targets of the whole step, so the gradient equals that of one big batch.
Over torchrun's processes the model is replicated (DDP) or sharded (FSDP, see
[`plm.training.parallel`][plm.training.parallel]); a sharded run checkpoints in shards
([`plm.storage.sharded_checkpoint`][plm.storage.sharded_checkpoint]) and may resume on another number of processes.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

import torch
from torch.nn.parallel import DistributedDataParallel

from plm.config import knob
from plm.cpu.int8 import check_trainable
from plm.device import autocast, resolve_device, resolve_precision
from plm.errors import PLMError, RunStopped
from plm.models import PretrainedModel
from plm.models.recipe import OPTIMIZERS, SCHEDULES, Hyperparameters
from plm.objectives import Objective
from plm.objectives.base import loss_weights, perplexity_terms, selection
from plm.progress import progress_bar
from plm.storage.atomic_files import atomic_open, make_directory, read_json, staging_directory, write_json
from plm.storage.checkpoint import (
    CHECKPOINT_DIR,
    TRAINING_CONFIG_FILE,
    Saveable,
    drop_snapshots,
    load_checkpoint,
    rng_states,
    save_best,
    save_checkpoint,
    save_snapshot,
)
from plm.storage.sharded_checkpoint import save_shards
from plm.training.distributed import Distributed, is_first_process, setup_distributed, teardown_distributed
from plm.training.optim import build_optimizer, decayed, learning_rate
from plm.training.parallel import Parallelism, gradient_sync, prepare_model, reshard, unsharded
from plm.training.run_directory import (
    METRICS_FILE,
    TENSORBOARD_DIR,
    TOKENIZER_DIR,
    check_run_directory,
    claimed,
    remove_leftovers,
    remove_run,
    write_definition,
)
from plm.training.stopping import StopSignals, signal_name
from plm.training.tensorboard import TensorBoardLog, require_tensorboard

HYPERPARAMETERS = tuple(field.name for field in dataclasses.fields(Hyperparameters))
# How a run's schedule goes on when a resume gives it more steps (see Trainer.extend_schedule): "continue" its
# decay from the learning rate reached; or "layout", the learning rates of the schedule laid out over the new steps.
EXTENSIONS = ("continue", "layout")
# What may differ when a run resumes: how long it goes on, where and how it runs, how it reports. Anything
# else defines the run. (The warmup is the run's own: see Trainer.resume. A sharded run resumed on another
# number of processes takes the micro-batches per process that keep its global batch.)
CHANGEABLE_ON_RESUME = ("steps", "epochs", "minutes", "device", "progress", "log_every", "save_every", "keep_last",
                        "compile", "parallelism", "grad_accum", "warmup", "report_to")


@dataclass(frozen=True)
class TrainingConfig:
    """How long and how to train. The optimizer fields left None take the recipe's values.

    Those fields are [`Hyperparameters`][plm.models.recipe.Hyperparameters]' (optimizer, lr, min_lr,
    warmup, schedule, betas, eps, weight_decay); the pre-training recipe fills them
    from the family's recipe, a bare [`Trainer`][plm.training.trainer.Trainer] from ``Hyperparameters()``.
    """

    steps: int = knob(1000, "optimizer steps")
    epochs: float | None = knob(None, "passes over the training data")  # when set, steps = this many passes
    minutes: float | None = knob(None, "stop after M minutes of training (evaluations and saves included), at the "
                                 "first step past them")  # resumed runs' minutes added up
    optimizer: str | None = knob(None, "AdamW, LAMB (ALBERT's) or Adagrad (ELMo's) (default: the recipe's)")
    lr: float | None = knob(None, "peak learning rate, one number (default: the recipe's)")
    min_lr: float | None = knob(None, "learning rate at the end of a cosine or linear decay")
    warmup: int | None = knob(None, "steps of linear warmup from 0 to `lr` (at most `steps`)")
    schedule: str | None = knob(None, "the decay after warmup; inverse-sqrt is the Transformer's")
    betas: tuple[float, float] | None = knob(None, "Adam/LAMB moment decay rates")
    eps: float | None = knob(None, "Adam/LAMB epsilon")
    weight_decay: float | None = knob(None, "decoupled decay of every weight but biases and LayerNorm gains "
                                      "(embeddings included, as in GPT-1 and BERT)")
    grad_accum: int = knob(1, "micro-batches per optimizer step")
    clip: float = knob(1.0, "gradient-norm clipping (0: off)")
    eval_every: int = knob(200, "steps between validation runs")
    save_every: int = knob(500, "steps between checkpoints")
    keep_last: int = knob(0, "besides the run's checkpoint/, keep the models of the last N saves (each `save_every` "
                          "and the last step) in checkpoints/step-NNNNNN/, to average them with plm seq2seq average "
                          "(0: none)")
    log_every: int = knob(10, "steps between lines in metrics.jsonl")
    seed: int = knob(0, "random seed, for runs you can repeat")
    device: str = "auto"
    precision: str = "auto"
    progress: bool = True
    compile: bool = knob(False, "run the model through torch.compile: a slow first step (compiling; on the CPU with "
                         "a C++ compiler), then faster ones")
    parallelism: Parallelism = Parallelism()  # DDP or FSDP over torchrun's processes, activation checkpointing
    report_to: str = "none"  # "tensorboard": the logged metrics in RUN/tensorboard/ too (plm.training.tensorboard)
    extension: str = "continue"  # how more steps on a resume extend the schedule: one of EXTENSIONS

    def with_defaults(self, defaults: Hyperparameters) -> TrainingConfig:
        """This config with every optimizer field left None taken from ``defaults``.

        A default warmup that would fill the whole run (the recipe's 100 steps in a run of 100) is
        cut to a tenth of the steps ([`warmup_note`][plm.training.trainer.TrainingConfig.warmup_note] says so); a warmup
        that was given is checked by [`validate`][plm.training.trainer.TrainingConfig.validate].

        Args:
            defaults: the recipe's optimizer values.

        Returns:
            The filled-in config.
        """
        unset = {name: getattr(defaults, name) for name in HYPERPARAMETERS if getattr(self, name) is None}
        if self.warmup_note(defaults):
            unset["warmup"] = self.steps // 10
        return dataclasses.replace(self, **unset) if unset else self

    def warmup_note(self, defaults: Hyperparameters) -> str | None:
        """What `with_defaults` does to a default warmup that would fill the whole run; None if nothing.

        Args:
            defaults: the recipe's optimizer values.

        Returns:
            A sentence for the user, or None.
        """
        if self.warmup is not None or self.epochs is not None or defaults.warmup < self.steps:
            return None
        return (f"the recipe's warmup of {defaults.warmup} steps would fill the whole run of {self.steps}; "
                f"warming up over {self.steps // 10} steps instead (`warmup` sets it)")

    @property
    def hyperparameters(self) -> Hyperparameters:
        """The optimizer fields, once `with_defaults` has filled every one."""
        values = {name: getattr(self, name) for name in HYPERPARAMETERS}
        unset = [name for name, value in values.items() if value is None]
        if unset:
            raise PLMError(f"TrainingConfig fields {', '.join(unset)} are unset: see with_defaults")
        return Hyperparameters(**values)

    def validate(self) -> None:
        """Raise a PLMError naming the field of the first value that cannot train; see `with_defaults`.

        A config is checked once: the entry that builds a run checks it before the slow work, and the
        [`Trainer`][plm.training.trainer.Trainer] it builds does not check it again. A config changed after
        (``dataclasses.replace``) is another config, checked again.

        Raises:
            PLMError: the first value that cannot train, by its field.
        """
        if self.__dict__.get("_valid"):
            return
        if self.steps < 1 or self.grad_accum < 1:
            raise PLMError("`steps` and `grad_accum` must be at least 1")
        if self.epochs is not None and not (math.isfinite(self.epochs) and self.epochs > 0):
            raise PLMError(f"`epochs` must be a number above 0, got {self.epochs}")
        if self.keep_last < 0:
            raise PLMError(f"`keep_last` must be >= 0, got {self.keep_last}")
        if self.minutes is not None and not self.minutes > 0:
            raise PLMError(f"`minutes` must be above 0, got {self.minutes}")
        if self.extension not in EXTENSIONS:
            raise PLMError(f"unknown extension {self.extension!r}; choose one of {', '.join(EXTENSIONS)}")
        h = self.hyperparameters
        if h.optimizer not in OPTIMIZERS:
            raise PLMError(f"unknown optimizer {h.optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
        if h.schedule not in SCHEDULES:
            raise PLMError(f"unknown schedule {h.schedule!r}; choose one of {', '.join(SCHEDULES)}")
        for field, value in (("lr", h.lr), ("min_lr", h.min_lr), ("weight_decay", h.weight_decay), ("clip", self.clip)):
            if not math.isfinite(value) or value < 0:
                raise PLMError(f"`{field}` must be a finite number >= 0, got {value}")
        if h.lr == 0:
            raise PLMError("`lr` must be above 0")
        if h.min_lr > h.lr:
            raise PLMError(f"`min_lr` {h.min_lr} is above `lr` {h.lr}; the schedule decays from lr to min_lr")
        if h.warmup < 0:
            raise PLMError(f"`warmup` must be >= 0, got {h.warmup}")
        if self.epochs is None and h.warmup > self.steps:
            raise PLMError(f"`warmup` {h.warmup} is more than `steps` {self.steps}: the whole run would be warmup, "
                           "the learning rate never reaching `lr`")
        if len(h.betas) != 2 or not all(0 <= beta < 1 for beta in h.betas):
            raise PLMError(f"`betas` must be two numbers in [0, 1), got {' '.join(map(str, h.betas))}")
        if not (math.isfinite(h.eps) and h.eps > 0):
            raise PLMError(f"`eps` must be a finite number above 0, got {h.eps}")
        device = resolve_device(self.device)
        self.parallelism.validate(device, resolve_precision(self.precision, device))
        object.__setattr__(self, "_valid", True)  # frozen: a mark of this instance, not a field (asdict skips it)


class Trainer:
    """Trains ``model`` on ``objective`` and keeps its run directory ``out`` up to date.

    Args:
        model: the model to train.
        objective: what it is trained on: its batches and its loss.
        config: how long and how to train (optimizer fields left None take ``Hyperparameters()``'s).
        out: the run directory.
        tokenizer: saved with every checkpoint when given.
        distributed: the processes of the run (default: set up from torchrun's environment, or one).

    Raises:
        PLMError: a config value that cannot train, or a model that cannot be trained (an int8 one).
    """

    def __init__(
        self,
        model: PretrainedModel,
        objective: Objective,
        config: TrainingConfig,
        out: str | Path,
        tokenizer: Saveable | None = None,
        distributed: Distributed | None = None,
    ) -> None:
        config = config.with_defaults(Hyperparameters())
        config.validate()
        check_trainable(model, "the model to train")
        self.config = config
        self.out = Path(out)
        self.device = resolve_device(config.device)
        self.dtype = resolve_precision(config.precision, self.device)
        self.parallelism = config.parallelism
        self.distributed = distributed or setup_distributed(self.device, group_of_one=self.parallelism.sharded)
        if self.device.type == "cuda" and self.distributed.enabled:
            self.device = torch.device("cuda", self.distributed.local_rank)
        # FSDP swaps in sharded parameters (of a model another process may have built on the meta
        # device): the optimizer is built on them, after.
        self.model = prepare_model(model, self.parallelism, self.device, self.dtype)
        self.objective = objective
        self.loss_weights = loss_weights(objective)
        self.selection = selection(objective)
        self.best: float | None = None  # the selection metric's best value so far
        self.elapsed = 0.0  # seconds spent training in this run directory, over all resumes
        if config.epochs is not None:
            self.config = config = dataclasses.replace(config, steps=self.steps_for_epochs(config.epochs))
        self.tokenizer = tokenizer
        self.tensorboard: TensorBoardLog | None = None  # opened by start(), on the first process
        if config.report_to == "tensorboard":
            require_tensorboard()  # before anything is written to the run directory
        h = config.hyperparameters
        self.optimizer = build_optimizer(h.optimizer, self.model, h.lr, h.weight_decay, h.betas, h.eps)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.dtype == torch.float16)
        self.step = 0
        self.decay_start: tuple[int, float] | None = None  # (step, lr) from which an extended run decays

    def steps_for_epochs(self, epochs: float) -> int:
        """Optimizer steps that read ``epochs`` passes over the training data (at least one step).

        Args:
            epochs: passes over the training data.

        Returns:
            The number of optimizer steps.

        Raises:
            PLMError: an objective without a fixed training set.
        """
        per_epoch = getattr(self.objective, "batches_per_epoch", None)
        if per_epoch is None:
            raise PLMError("`epochs` needs a task with a fixed training set; give `steps` instead")
        return steps_for_epochs(epochs, per_epoch, self.config.grad_accum * self.distributed.world_size)

    def train(self, resume: bool = False, overwrite: bool = False,
              definition: dict[str, Any] | None = None) -> dict[str, float]:
        """Run until ``config.steps``.

        A new run refuses a run directory that holds another run or other files, unless
        ``overwrite`` (which deletes that run's files first); ``resume`` continues the run
        directory's checkpoint. ``definition`` (what defines the run, see
        [`plm.training.run_directory`][plm.training.run_directory]) is written to ``run.json`` before the first step.

        The first process holds the run directory's lock throughout. SIGTERM or SIGINT
        ends the run after the step in flight, with a checkpoint of that step: a
        [`RunStopped`][plm.errors.RunStopped] saying how to resume. A resumed run that had reached
        ``config.steps`` already trains and writes nothing: one line on stderr says so.

        Args:
            resume: continue the run directory's checkpoint.
            overwrite: replace a run (or other files) in the run directory.
            definition: what defines the run, written to ``run.json``.

        Returns:
            The last metrics (with validation loss); for a run complete already, those it logged at its last step.

        Raises:
            PLMError: a run directory that cannot take this run, or a checkpoint that does not fit it.
            RunStopped: SIGTERM or SIGINT stopped the run after saving its checkpoint.
        """
        check = partial(check_run_directory, self.out, resume, overwrite)
        with claimed(self.out, check, enabled=self.distributed.is_main), StopSignals() as signals:
            try:
                self.start(resume, overwrite, definition)
                if resume and self.step >= self.config.steps:
                    return self.completed()
                return self.run(signals)
            finally:
                if self.tensorboard is not None:
                    self.tensorboard.close()

    def start(self, resume: bool, overwrite: bool, definition: dict[str, Any] | None) -> None:
        """Check and prepare the run directory, restore the checkpoint when resuming, write what defines the run.

        Args:
            resume: as for [`train`][plm.training.trainer.Trainer.train].
            overwrite: as for [`train`][plm.training.trainer.Trainer.train].
            definition: as for [`train`][plm.training.trainer.Trainer.train].
        """
        main = self.distributed.is_main
        if main:
            remove_leftovers(self.out)  # never read: a save that did not finish
            if overwrite and not resume:
                remove_run(self.out)
        torch.manual_seed(self.config.seed + self.distributed.rank)  # kept by a process the run did not have
        if resume:
            self.resume()
            if self.step >= self.config.steps:
                return  # complete already: nothing to write (see completed)
        if main:
            self.out.mkdir(parents=True, exist_ok=True)
            if not resume:
                (self.out / METRICS_FILE).unlink(missing_ok=True)
                shutil.rmtree(self.out / TENSORBOARD_DIR, ignore_errors=True)  # a new run's curves start empty
            if self.config.report_to == "tensorboard":
                self.tensorboard = TensorBoardLog(self.out, self.step if resume else None)
            drop_snapshots(self.out, after=self.step)
            write_json(self.out / TRAINING_CONFIG_FILE, asdict(self.config))
            if definition is not None:
                write_definition(self.out, definition)
            if not resume and self.tokenizer is not None:
                self.tokenizer.save(self.out / TOKENIZER_DIR)
            if self.config.precision == "auto" and self.dtype != torch.float32:
                print(f"precision \"auto\": {str(self.dtype).removeprefix('torch.')} autocast on this "
                      f"{self.device.type} (fp32 master weights and optimizer state; precision \"fp32\" computes in "
                      "fp32 throughout)",
                      file=sys.stderr)

    def completed(self) -> dict[str, float]:
        """Say (on stderr) that a resumed run had reached its steps already.

        Returns:
            The metrics the run logged at its last step (empty on the processes after the first, or without them).
        """
        if not self.distributed.is_main:
            return {}
        print(f"{self.out}: the run was complete already, at step {self.step} of {self.config.steps}; nothing "
              "trained (resume it with more steps to extend it)", file=sys.stderr)
        path = self.out / METRICS_FILE
        lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
        last = json.loads(lines[-1]) if lines else {}
        return last if last.get("step") == self.step else {}

    def resume(self) -> None:
        """Restore the checkpoint: weights, optimizer, RNG states, step, schedule."""
        saved_config = self.out / TRAINING_CONFIG_FILE
        saved = read_json(saved_config) if saved_config.is_file() else None
        if saved is not None:
            check_same_run(saved, self.config, self.out)
            # The warmup was laid out at the run's start (a default one fitted to its steps): it stays.
            self.config = dataclasses.replace(self.config, warmup=saved["warmup"])
        state = load_checkpoint(self.out, self.model, self.optimizer, self.distributed.rank,
                                self.distributed.world_size, sharded=self.parallelism.sharded)
        self.keep_global_batch(state.get("micro_batches"))
        self.step = state["step"]
        self.best = state.get("best")
        self.elapsed = state.get("elapsed", 0.0)
        self.decay_start = state.get("decay_start")
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.truncate_metrics(self.step)
        if state.get("steps", self.config.steps) != self.config.steps:
            self.extend_schedule(state["steps"])

    def extend_schedule(self, saved_steps: int) -> None:
        """Lay the rest of a resumed run's decay over its new ``steps``, as the config's ``extension`` says.

        Warmup, inverse-sqrt and constant schedules do not depend on the steps. With ``extension``
        "continue" (pre-training's), a cosine or linear decay continues from where it is, without a
        jump, to ``min_lr`` at the new last step. With "layout" (fine-tuning's, whose recipe lays its
        decay over the run, down to 0), the steps left take the learning rates of the schedule laid out
        over the new steps (its warmup kept), from wherever the old one had reached.

        Args:
            saved_steps: the steps the run's schedule was laid out over.

        Raises:
            PLMError: the run has reached the new ``steps`` already, or (extension "continue") its learning
                rate decayed to 0.
        """
        config, h = self.config, self.config.hyperparameters
        if self.step >= config.steps:
            raise PLMError(f"{self.out}: the run is at step {self.step} already; `steps` {config.steps} would not "
                           "train it further")
        if h.schedule not in ("cosine", "linear") or self.step < h.warmup:
            return
        if config.extension == "layout":
            self.decay_start = None
            if self.distributed.is_main:
                print(f"extending the run from {saved_steps} to {config.steps} steps: its {config.schedule} "
                      f"schedule laid out over {config.steps} steps, lr {self.learning_rate(self.step):.3g} at step "
                      f"{self.step}", file=sys.stderr)
            return
        reached = self.learning_rate(self.step, total=saved_steps)
        if reached <= h.min_lr == 0:
            raise PLMError(f"{self.out}: the run's learning rate decayed to 0 at its last step ({saved_steps}), so "
                           f"`steps` {config.steps} would train at lr 0; start a new run from its model instead "
                           f"(`model` {self.out}/checkpoint)")
        self.decay_start = (self.step, reached)
        if self.distributed.is_main:
            print(f"extending the run from {saved_steps} to {config.steps} steps: its {config.schedule} decay goes on "
                  f"from lr {reached:.3g} at step {self.step} to {config.min_lr:.3g} at step {config.steps}",
                  file=sys.stderr)

    def learning_rate(self, step: int, total: int | None = None) -> float:
        """The learning rate of optimizer step ``step`` (0-based).

        Args:
            step: the optimizer step.
            total: the run's number of steps (default: the config's).

        Returns:
            The learning rate.
        """
        h = self.config.hyperparameters
        total = self.config.steps if total is None else total
        if self.decay_start is not None and step >= self.decay_start[0]:  # a run extended (see extend_schedule)
            first, start = self.decay_start
            return decayed(h.schedule, (step - first) / max(1, total - 1 - first), start, h.min_lr)
        return learning_rate(h.schedule, step, h.lr, h.warmup, total, h.min_lr)

    def run(self, signals: StopSignals) -> dict[str, float]:
        """The training loop, from ``self.step`` to the config's steps (or its time limit, or a signal).

        Args:
            signals: the stop signals received so far.

        Returns:
            The last metrics.

        Raises:
            RunStopped: a signal stopped the run after saving its checkpoint.
        """
        config = self.config
        wrapped = self.wrap(self.model)
        if config.compile:  # the same parameters, run through a compiled graph (a module: torch's stubs say callable)
            wrapped = cast(torch.nn.Module, torch.compile(wrapped))
        bar = progress_bar(
            total=config.steps,
            initial=self.step,
            disable=not (config.progress and self.distributed.is_main),
            desc="train",
            dynamic_ncols=True,
        )
        metrics: dict[str, float] = {}
        started, tokens_seen, elapsed_before = time.perf_counter(), 0, self.elapsed
        try:
            while self.step < config.steps:
                lr = self.learning_rate(self.step)
                for group in self.optimizer.param_groups:
                    group["lr"] = lr
                losses, tokens = self.optimizer_step(wrapped)
                self.step += 1
                tokens_seen += tokens
                running = time.perf_counter() - started
                self.elapsed = elapsed_before + running
                # Every process stops at the same step: the first one's clock decides.
                out_of_time = config.minutes is not None and bool(
                    self.distributed.broadcast(self.elapsed >= config.minutes * 60)
                )
                last = self.step == config.steps or out_of_time
                metrics = {"step": self.step, **losses, "lr": lr, "tokens_per_second": tokens_seen / running,
                           "elapsed": self.elapsed}
                evaluated = self.step % config.eval_every == 0 or last
                if evaluated:
                    metrics.update(self.evaluate(sample=not last))  # the run's last evaluation reads it all
                    self.keep_if_best(metrics)
                if self.step % config.log_every == 0 or evaluated:
                    self.log(metrics)
                bar.set_postfix(loss=f"{losses['loss']:.3f}", lr=f"{lr:.2e}", tok_s=f"{tokens_seen / running:,.0f}",
                                refresh=False)
                bar.update(1)
                saved = self.step % config.save_every == 0 or last
                if saved:
                    self.save()
                # Any process's signal stops them all at this step (torchrun passes a SIGTERM to each). At the
                # last step too: a caller with more to do (a sweep's next run) must not start it.
                stop = self.distributed.max(signals.received, self.device)
                if stop:
                    if not saved:
                        self.save()
                    raise RunStopped(f"stopped by {signal_name(stop)} at step {self.step}, saved to "
                                     f"{self.out}/{CHECKPOINT_DIR}", stop)
                if out_of_time:
                    break
        finally:
            bar.close()
        return metrics

    def keep_global_batch(self, micro_batches: int | None) -> None:
        """On resuming a sharded run on another number of processes, keep the run's global batch.

        Each process takes as many micro-batches as keeps the run's global batch (its ``micro_batches``
        over all processes).

        Args:
            micro_batches: the run's global batch in micro-batches (None: not saved).

        Raises:
            PLMError: a global batch the processes cannot share evenly.
        """
        world = self.distributed.world_size
        if micro_batches is None or micro_batches == self.config.grad_accum * world:
            return
        if micro_batches % world:
            raise PLMError(f"{self.out}: the run's global batch is {micro_batches} micro-batches, which {world} "
                           "processes cannot share evenly; resume it on a number of processes that divides it")
        self.config = dataclasses.replace(self.config, grad_accum=micro_batches // world)
        if self.distributed.is_main:
            print(f"resumed on {world} process(es): {self.config.grad_accum} micro-batch(es) each keep the run's "
                  f"global batch of {micro_batches}", file=sys.stderr)

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The module a training step runs: DDP around the model, or the model itself (one process, FSDP).

        Args:
            model: the model being trained.

        Returns:
            The module to run.
        """
        if not self.distributed.enabled or self.parallelism.sharded:
            return model
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=device_ids)

    def optimizer_step(self, wrapped: torch.nn.Module) -> tuple[dict[str, float], int]:
        """Accumulate ``grad_accum`` micro-batches, clip, step.

        Args:
            wrapped: the module a training step runs (see [`wrap`][plm.training.trainer.Trainer.wrap]).

        Returns:
            The mean losses and the tokens read.
        """
        config, world = self.config, self.distributed
        self.model.train()
        # Micro-batch m of process r is the objective's batch m * world + r, so 2 processes
        # with 1 micro-batch each see exactly what 1 process with 2 micro-batches sees.
        batches = [
            to_device(self.objective.batch(self.step, index), self.device)
            for index in range(world.rank, config.grad_accum * world.world_size, world.world_size)
        ]
        terms = list(self.objective.target_counts(batches[0]))
        local_counts = torch.tensor(
            [[self.objective.target_counts(b)[t] for t in terms] for b in batches], dtype=torch.float64
        ).sum(0)
        counts = world.all_reduce_sum(local_counts.to(self.device)).clamp(min=1).tolist()
        sums = torch.zeros(len(terms), device=self.device)
        for index, batch in enumerate(batches):
            with gradient_sync(wrapped, sync=index == len(batches) - 1):
                with autocast(self.device, self.dtype):
                    losses = self.objective.loss(wrapped, batch)
                # Each term is a mean over the whole step's targets. DDP and FSDP average gradients over
                # processes; multiplying by the world size turns that average into the sum.
                total = sum(
                    losses[t] * (self.loss_weights.get(t, 1.0) * world.world_size / count)
                    for t, count in zip(terms, counts)
                )
                self.scaler.scale(total).backward()
            sums += torch.stack([losses[t].detach().float() for t in terms])
        self.scaler.unscale_(self.optimizer)
        if config.clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), config.clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        means = (world.all_reduce_sum(sums) / torch.tensor(counts, device=self.device)).tolist()
        tokens = sum(self.objective.size(b) for b in batches) * world.world_size
        return named_losses(terms, means, self.loss_weights), tokens

    @torch.no_grad()
    def evaluate(self, sample: bool = False) -> dict[str, float]:
        """Mean losses over the objective's fixed validation batches, and perplexities.

        The perplexity of the first term (and of each) where it is a log-likelihood (see
        [`plm.objectives.base`][plm.objectives.base]). An objective with ``validation_metrics`` adds its task metrics,
        as ``val_<name>``.

        Args:
            sample: read only the objective's sample of its validation batches, where it has one
                (``validation_sample_batches``, see [`plm.objectives.base`][plm.objectives.base]); its losses and
                perplexities
                are then named for it: ``val_loss_sample``, ``val_perplexity_sample`` ...

        Returns:
            The metrics by name, each prefixed ``val_``.
        """
        self.model.eval()
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        batches = self.objective.validation_batches()
        sampled = getattr(self.objective, "validation_sample_batches", None) if sample else None
        if sampled is not None:
            batches = itertools.islice(batches, sampled)
        for batch in batches:
            batch = to_device(batch, self.device)
            with autocast(self.device, self.dtype):
                for term, value in self.objective.loss(self.model, batch).items():
                    sums[term] = sums.get(term, 0.0) + value.item()
            for term, count in self.objective.target_counts(batch).items():
                counts[term] = counts.get(term, 0) + count
        metrics: dict[str, float] = {}
        if counts:
            terms = list(counts)
            means = [sums[t] / max(1, counts[t]) for t in terms]
            metrics = {f"val_{k}": v for k, v in named_losses(terms, means, self.loss_weights).items()}
            likelihoods = perplexity_terms(self.objective, terms)
            if terms[0] in likelihoods:
                metrics["val_perplexity"] = math.exp(min(means[0], 50.0))
            if len(terms) > 1:  # e.g. ELMo's forward and backward LMs
                metrics |= {
                    f"val_perplexity_{t}": math.exp(min(mean, 50.0))
                    for t, mean in zip(terms, means)
                    if t in likelihoods
                }
            if sampled is not None:  # not the whole validation text: a number of its own
                metrics = {f"{name}_sample": value for name, value in metrics.items()}
        reshard(self.model)
        task_metrics = getattr(self.objective, "validation_metrics", None)
        if task_metrics is not None:
            with unsharded(self.model) as model:  # decoding, say, is more than one forward pass
                metrics.update({f"val_{name}": value for name, value in task_metrics(model).items()})
        self.model.train()
        return metrics

    def keep_if_best(self, metrics: dict[str, float]) -> None:
        """Save the model to ``best/`` when the objective's selection metric improved.

        Args:
            metrics: the validation metrics.

        Raises:
            PLMError: the validation did not report the selection metric.
        """
        if self.selection is None:
            return
        if self.selection.metric not in metrics:
            raise PLMError(
                f"the task selects its best model by {self.selection.metric}, which its validation did not report"
            )
        value = metrics[self.selection.metric]
        if self.selection.better(value, self.best):
            self.best = value
            weights = self.whole_weights()
            if self.distributed.is_main:
                save_best(self.out, self.model, self.tokenizer, weights)

    def whole_weights(self) -> dict[str, torch.Tensor] | None:
        """A sharded model's whole tensors, on the first process (every process takes part); None when unsharded."""
        if not self.parallelism.sharded:
            return None
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict  # see parallel.py

        whole = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return cast(dict[str, torch.Tensor], whole)  # a full state dict holds whole tensors

    def save(self) -> None:
        """Save the checkpoint (and a snapshot, with ``keep_last``) of the current step; every process takes part."""
        world = self.distributed
        rng = world.all_gather_object(rng_states())  # each process resumes its own dropout masks
        state = {
            "step": self.step,
            "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else None,
            "best": self.best,
            "elapsed": self.elapsed,
            "micro_batches": self.config.grad_accum * world.world_size,
            "steps": self.config.steps,  # the steps the schedule is laid out over
            "decay_start": self.decay_start,
        }
        shards = None
        if self.parallelism.sharded:  # every process writes its own shards into the staging directory
            staging = str(staging_directory(make_directory(self.out), ".checkpoint-")) if world.is_main else ""
            shards = Path(world.broadcast(staging))
            state |= save_shards(shards, self.model, self.optimizer)
        snapshot = self.whole_weights() if self.config.keep_last else None
        if world.is_main:
            if self.config.keep_last:  # before the checkpoint: a run resumed from the one before writes it again
                save_snapshot(self.out, self.model, self.step, self.config.keep_last, self.tokenizer, snapshot)
            save_checkpoint(self.out, self.model, self.optimizer, state, self.tokenizer, rng, shards)
        world.barrier()

    def log(self, metrics: dict[str, float]) -> None:
        """Append ``metrics`` to the run's metrics.jsonl, and to TensorBoard's files if asked (on the first process).

        Args:
            metrics: one line's metrics.
        """
        if self.distributed.is_main:
            with open(self.out / METRICS_FILE, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(metrics) + "\n")
            if self.tensorboard is not None:
                self.tensorboard.write(metrics)

    def truncate_metrics(self, step: int) -> None:
        """Drop log lines written after the checkpoint a resumed run starts from.

        Args:
            step: the checkpoint's step.
        """
        path = self.out / METRICS_FILE
        if not self.distributed.is_main or not path.exists():
            return
        written = path.read_text(encoding="utf-8").splitlines()
        lines = [line for line in written if json.loads(line)["step"] <= step]
        if lines != written:
            with atomic_open(path) as file:  # a crash here leaves the whole log, never a part of it
                file.write("".join(line + "\n" for line in lines).encode("utf-8"))


def check_same_run(saved: dict[str, Any], config: TrainingConfig, out: Path) -> None:
    """Refuse to resume a run with training options other than those it was started with.

    Those in `CHANGEABLE_ON_RESUME` may change.

    Args:
        saved: the run's saved training config.
        config: the resumed run's.
        out: the run directory, for the message.

    Raises:
        PLMError: naming the first option that differs.
    """
    current = json.loads(json.dumps(asdict(config)))
    for name, value in current.items():
        if name not in CHANGEABLE_ON_RESUME and name in saved and saved[name] != value:
            raise PLMError(f"{out}: the run was started with `{name}` {saved[name]}, not {value}; a "
                           "resumed run keeps what defines it (start a new run to change it)")


def steps_for_epochs(epochs: float, per_epoch: int, per_step: int) -> int:
    """The optimizer steps that read ``epochs`` passes over the training data (at least one): the one rule.

    An epoch and a step are counted in the same unit: micro-batches (a task's, a sentence-pair corpus') or
    tokens (a pre-training corpus'). An epoch need not end on a step: the objectives number their batches on
    across epochs, so 2 processes read 9 batches an epoch in 4.5 steps, and 3 epochs in 14.

    Args:
        epochs: the passes over the training data.
        per_epoch: one pass's size.
        per_step: what one optimizer step reads, over all processes and micro-batches, in the same unit.

    Returns:
        The steps.
    """
    return max(1, math.ceil(epochs * per_epoch / per_step))


def named_losses(terms: list[str], means: list[float], weights: dict[str, float]) -> dict[str, float]:
    """``loss`` is the weighted sum of the terms; each term is logged too (unweighted).

    So runs with different terms (MLM alone, MLM + NSP) can be compared on the one they share.

    Args:
        terms: the loss terms' names.
        means: their mean values, in the same order.
        weights: a weight per term (default 1).

    Returns:
        ``loss`` and ``loss_<term>`` for each term.
    """
    named = {"loss": sum(weights.get(term, 1.0) * mean for term, mean in zip(terms, means))}
    return named | {f"loss_{term}": mean for term, mean in zip(terms, means)}


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """``batch`` on ``device``; to a GPU through pinned memory, so that the copy runs beside the work.

    Args:
        batch: tensors by name.
        device: where they go.

    Returns:
        The batch on ``device``.
    """
    if device.type != "cuda":
        return {k: v.to(device) for k, v in batch.items()}
    return {k: v.pin_memory().to(device, non_blocking=True) for k, v in batch.items()}


class Run(Protocol):
    """What [`train_run`][plm.training.trainer.train_run] trains.

    A [`Trainer`][plm.training.trainer.Trainer], or the trainers of a fine-tuning sweep in one run directory.
    """

    def train(self, resume: bool = False, overwrite: bool = False,
              definition: dict[str, Any] | None = None) -> dict[str, float]:
        """Train, as [`Trainer.train`][plm.training.trainer.Trainer.train] does; return the last metrics."""
        ...


Trained = TypeVar("Trained", bound=Run)
Prepared = TypeVar("Prepared")


def train_run(
    out: str | Path, resume: bool, overwrite: bool, definition: dict[str, Any] | None,
    prepare: Callable[[], tuple[Trained, Prepared]],
    after: Callable[[Trained, Prepared, dict[str, float]], None] | None = None,
    check: Callable[[Path, bool, bool], None] | None = None,
) -> tuple[Trained, Prepared, dict[str, float]]:
    """Lock the run directory ``out``, ``prepare`` its trainer, train, and leave the process group.

    The one way every trainer runs (pre-training, sequence to sequence, fine-tuning, each run of a comparison):
    ``out`` is checked and locked before ``prepare`` does any work, so that a second process or a wrong
    ``out`` is refused at once and nothing is half-written; what ``prepare`` builds does not check it again
    (see [`claimed`][plm.training.run_directory.claimed]); and the process group is left however the run ends.

    Args:
        out: the run directory.
        resume: continue the run in ``out``.
        overwrite: let a new run replace the run (or other files) in ``out``.
        definition: saved in ``out/run.json``.
        prepare: builds the trainer, with what comes with its model (the tokenizer or tokenizers).
        after: what to do with the trained model while the processes are still together (an FSDP model is
            gathered by all of them), the run directory still locked: report, draw.
        check: refuses an ``out`` that cannot take the run, before anything is written (None:
            [`check_run_directory`][plm.training.run_directory.check_run_directory]).

    Returns:
        The trainer, what ``prepare`` gave with it, and the last metrics.

    Raises:
        PLMError: a run directory that cannot take this run.
        RunStopped: SIGTERM or SIGINT stopped the run after saving its checkpoint.
    """
    try:
        refuse = partial(check or check_run_directory, Path(out), resume, overwrite)
        with claimed(out, refuse, enabled=is_first_process()):
            trainer, prepared = prepare()
            metrics = trainer.train(resume=resume, overwrite=overwrite, definition=definition)
            if after is not None:
                after(trainer, prepared, metrics)
    finally:
        teardown_distributed()
    return trainer, prepared, metrics
