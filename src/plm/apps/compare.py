"""Side-by-side runs on an equal budget: the papers' ablations at CPU scale.

A comparison is a TOML spec: a ``[base]`` that every run starts from, a list of
``[[run]]`` tables that each change a few things, and one ``[budget]`` (steps,
tokens or minutes) that every run gets alike. The keys of ``base`` and of a run
are the pre-training options by their Python names (``model``, ``objective``,
``whole_word``, ``batch_size``, ``lr``, ``schedule`` ...), and ``config`` changes
fields of the model's preset (``norm_first``, ``sharing``, ``position_terms`` ...)::

    title = "Pre-LN (GPT-2) vs post-LN (GPT-1)"
    metric = "val_loss"

    [budget]
    steps = 300

    [base]
    model = "gpt2"

    [[run]]
    name = "pre-LN"

    [[run]]
    name = "post-LN"
    config = { norm_first = false, final_norm = false, scaled_residual_init = false }

The runs go one after another, each in its own run directory under the output
directory; a finished run is kept, an interrupted one resumes from its checkpoint, but
only while everything that defines it is unchanged ([`run_definition`][plm.apps.compare.run_definition]: its options,
its model's recipe, the budget and the data files' contents); otherwise it trains again.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import re
import tomllib
import typing
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from plm.config import checked_value
from plm.errors import PLMError
from plm.models import PRESETS, recipe_of
from plm.storage.atomic_files import make_directory, read_json, write_json, write_png
from plm.storage.checkpoint import has_checkpoint
from plm.tokenization.tokenizer import Tokenizer
from plm.training.pretrain import PretrainSetup, block_size_of, prepare
from plm.training.run_directory import METRICS_FILE, RESULT_FILE, changed_fields, file_digest, run_lock
from plm.training.starting_model import check_model_name, model_config
from plm.training.trainer import Trainer, TrainingConfig, train_run

BUDGETS = ("steps", "tokens", "minutes")
DEFINITION_FILE = "definition.json"  # what defined the run (run_definition), written before its first step
SETUP_FIELDS = {f.name: f for f in dataclasses.fields(PretrainSetup) if f.name != "model_overrides"}
TRAINING_FIELDS = {
    f.name: f for f in dataclasses.fields(TrainingConfig) if f.name not in ("steps", "epochs", "minutes")
}
SETUP_HINTS = typing.get_type_hints(PretrainSetup)
TRAINING_HINTS = typing.get_type_hints(TrainingConfig)
# A run's defaults where pre-training's would not suit a comparison: curves need points, and runs are quiet.
COMPARE_DEFAULTS = {"eval_every": 25, "log_every": 5, "progress": True}


@dataclass(frozen=True)
class Budget:
    """What every run gets alike: exactly one of optimizer steps, training tokens or minutes.

    Attributes:
        kind: "steps", "tokens" or "minutes".
        amount: how many.
    """

    kind: str
    amount: float

    def describe(self) -> str:
        """The budget as the progress lines write it: "300 steps".

        Returns:
            The text.
        """
        return f"{self.amount:g} {self.kind}"


@dataclass(frozen=True)
class RunSpec:
    """One run: a name, the pre-training setup and training config it trains with.

    Attributes:
        name: the run's name in the spec.
        setup: what it trains: model, data, objective, batch shape and preset changes.
        training: how long and how to train, the budget's steps and time limit included.
    """

    name: str
    setup: PretrainSetup
    training: TrainingConfig

    @property
    def slug(self) -> str:
        """The run's directory name: its name in lower case, runs of other characters as one dash."""
        return re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-") or "run"


@dataclass(frozen=True)
class CompareSpec:
    """A comparison: its runs, the budget each gets and the metric they are compared on.

    Attributes:
        title: the comparison's title (default: the spec file's name).
        metric: the validation metric the runs are compared on (``val_loss`` by default).
        budget: what every run gets alike.
        runs: the runs, in spec order.
    """
    title: str
    metric: str
    budget: Budget
    runs: tuple[RunSpec, ...]


@dataclass
class RunResult:
    """A finished run: its final metrics and the validation curve, as (step, seconds, value) points.

    Attributes:
        name: the run's name.
        directory: its run directory.
        final: its final metrics, the parameter count among them.
        curve: (step, elapsed seconds, value) of the spec's metric at each evaluation.
    """

    name: str
    directory: Path
    final: dict[str, float]
    curve: list[tuple[int, float, float]]


def read_spec(path: str | Path, budget: Budget | None = None) -> CompareSpec:
    """Parse and check a comparison spec; every mistake is a PLMError naming the file and the run.

    Args:
        path: the TOML file.
        budget: what every run gets instead of the spec's ``[budget]`` (None: the spec's).

    Returns:
        The spec.

    Raises:
        PLMError: a missing or unreadable file, invalid TOML, an unknown key, a bad budget, base or run,
            no runs, two runs with one directory, or a metric that is not a validation metric.
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PLMError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise PLMError(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as error:
        raise PLMError(f"{path}: not valid TOML: {error}") from None
    unknown = sorted(set(data) - {"title", "metric", "budget", "base", "run"})
    if unknown:
        raise PLMError(f"{path}: unknown key(s) {', '.join(unknown)}; a spec has title, metric, budget, base and run")
    budget = budget or read_budget(data.get("budget"), path)
    base = data.get("base", {})
    if not isinstance(base, dict):
        raise PLMError(f"{path}: [base] should be a table")
    runs = data.get("run")
    if not isinstance(runs, list) or not runs:
        raise PLMError(f"{path}: no [[run]] tables; a comparison needs at least one run")
    specs = tuple(run_spec({**base, **run}, budget, path, index) for index, run in enumerate(runs, 1))
    slugs = [run.slug for run in specs]
    repeated = sorted({slug for slug in slugs if slugs.count(slug) > 1})
    if repeated:
        raise PLMError(f"{path}: two runs would share the directory {repeated[0]!r}; give them distinct names")
    metric = data.get("metric", "val_loss")
    if not isinstance(metric, str) or not metric.startswith("val_"):
        raise PLMError(f"{path}: metric should name a validation metric such as \"val_loss\", got {metric!r}")
    return CompareSpec(str(data.get("title", path.stem)), metric, budget, specs)


def read_budget(budget: Any, path: Path) -> Budget:
    """The ``[budget]`` table of a spec, checked.

    Args:
        budget (Any): the table as TOML gave it (anything, if the spec is wrong).
        path: the spec file, for the error messages.

    Returns:
        The budget.

    Raises:
        PLMError: not exactly one of steps, tokens or minutes, or an amount that is not a number above 0.
    """
    if not isinstance(budget, dict) or len(budget) != 1 or next(iter(budget)) not in BUDGETS:
        raise PLMError(f"{path}: [budget] should hold exactly one of {', '.join(BUDGETS)}, e.g. steps = 300")
    kind, amount = next(iter(budget.items()))
    if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not (math.isfinite(amount) and amount > 0):
        raise PLMError(f"{path}: budget {kind} should be a number above 0, got {amount!r}")
    return Budget(kind, float(amount))


def run_spec(values: dict[str, Any], budget: Budget, path: Path, index: int) -> RunSpec:
    """Route each key of a run to the pre-training setup, the training config or the model's preset.

    Args:
        values: the run's keys over the base's.
        budget: the comparison's budget.
        path: the spec file, for the error messages.
        index: the run's number in the spec, from 1.

    Returns:
        The run.

    Raises:
        PLMError: no name, an unknown option, a value of the wrong type, a bad ``config`` table, or a warmup
            longer than the budget's steps.
    """
    name = values.pop("name", None)
    where = f"{path}: run {index}" + (f" ({name})" if isinstance(name, str) else "")
    if not isinstance(name, str) or not name.strip():
        raise PLMError(f"{where}: needs a name")
    overrides = values.pop("config", {})
    if not isinstance(overrides, dict):
        raise PLMError(f"{where}: config should be a table of model fields")
    setup_values: dict[str, Any] = {}
    training_values: dict[str, Any] = {**COMPARE_DEFAULTS}
    for key, value in values.items():
        hints = SETUP_HINTS if key in SETUP_FIELDS else TRAINING_HINTS if key in TRAINING_FIELDS else None
        if hints is None:
            near = difflib.get_close_matches(key, [*SETUP_FIELDS, *TRAINING_FIELDS], n=1)
            raise PLMError(f"{where}: unknown option {key!r}" + (f"; did you mean {near[0]!r}?" if near else "; a "
                           "run takes the fields of PretrainSetup and TrainingConfig"))
        target = setup_values if key in SETUP_FIELDS else training_values
        target[key] = checked_value(value, hints[key], f"{where}: {key}")
    setup = PretrainSetup(
        **setup_values, model_overrides=checked_overrides(setup_values.get("model"), overrides, where)
    )
    steps, minutes = steps_and_minutes(budget, setup, where)
    training = TrainingConfig(**training_values, steps=steps, minutes=minutes)
    if training.warmup is not None and training.warmup > steps:  # checked before any run trains
        raise PLMError(f"{where}: warmup {training.warmup} is more than the budget's {steps} steps; the whole run "
                       "would be warmup (give a smaller one, or none: the recipe's, fitted to the run)")
    return RunSpec(name.strip(), setup, training)


def checked_overrides(model: str | None, overrides: dict[str, Any], where: str) -> dict[str, Any]:
    """The model fields of ``config``, each checked against the preset config's annotation.

    Args:
        model: the run's model (None: the default preset).
        overrides: the ``config`` table.
        where: the run, for the error messages.

    Returns:
        Field -> value.

    Raises:
        PLMError: a saved model instead of a preset, a field the preset's config lacks, or a value of the wrong
            type.
    """
    if not overrides:
        return {}
    preset = check_model_name(model or PretrainSetup.model)
    if preset not in PRESETS:
        raise PLMError(f"{where}: config changes a preset's fields; {preset} is a saved model")
    config_class = type(PRESETS[preset])
    hints = typing.get_type_hints(config_class)
    unknown = sorted(set(overrides) - set(hints))
    if unknown:
        raise PLMError(f"{where}: {config_class.__name__} has no field {', '.join(unknown)}")
    return {key: checked_value(value, hints[key], f"{where}: config.{key}") for key, value in overrides.items()}


def steps_and_minutes(budget: Budget, setup: PretrainSetup, where: str) -> tuple[int, float | None]:
    """Optimizer steps (and a time limit) for ``budget``.

    Tokens become steps of ``batch_size x block_size`` tokens. Minutes become a time
    limit: the run then plans its learning-rate schedule over ``steps`` (10,000 by
    default, or the ``steps`` a spec does not give: the schedule is cut, not squeezed).

    Args:
        budget: the comparison's budget.
        setup: the run's setup, for its tokens per step.
        where: the run, for the error messages.

    Returns:
        The steps, and the minutes of training (None unless the budget is minutes).

    Raises:
        PLMError: a token budget for a setup whose block size cannot be found.
    """
    if budget.kind == "steps":
        return int(budget.amount), None
    if budget.kind == "tokens":
        try:
            per_step = setup.batch_size * block_size_of(setup)
        except PLMError as error:
            raise PLMError(f"{where}: {error}") from None
        return max(1, math.ceil(budget.amount / per_step)), None
    return 10_000, budget.amount


def run_definition(run: RunSpec) -> dict[str, Any]:
    """Everything that defines a run's result.

    Its setup and training options (the budget's steps and time limit among them), its model's recipe as plm
    has it now (the family's, with the paper settings of the model's size), and a SHA-256 of each data file.

    Args:
        run: the run.

    Returns:
        The definition, as JSON values.
    """
    recipe = recipe_of(model_config(check_model_name(run.setup.model), run.setup.model_overrides))
    files = [*run.setup.train_files, *run.setup.validation_files]
    # Progress bars, the device flag (auto finds the same device again) and how the processes share the work
    # (DDP or FSDP, activation checkpointing: the same numbers) change how a run is shown or started.
    training = {k: v for k, v in dataclasses.asdict(run.training).items()
                if k not in ("progress", "device", "parallelism")}
    return json.loads(json.dumps({
        "setup": dataclasses.asdict(run.setup), "training": training, "recipe": dataclasses.asdict(recipe),
        "data": {path: file_digest(path) for path in files},
    }))


def check_metric(spec: CompareSpec, run: RunSpec, trainer: Trainer, where: str) -> None:
    """Refuse a metric the run will not log, before its first step: the loss terms come from one batch.

    Args:
        spec: the comparison.
        run: the run.
        trainer: the run's trainer, prepared.
        where: the spec, for the error messages.

    Raises:
        PLMError: the run does not log the spec's metric.
    """
    objective = trainer.objective
    terms = list(objective.target_counts(objective.batch(0, 0)))
    logged = {"val_loss", "val_perplexity"} | {f"val_{kind}_{t}" for t in terms for kind in ("loss", "perplexity")}
    if spec.metric not in logged:
        raise PLMError(f"{where}: metric {spec.metric!r} is not one run {run.name!r} logs; "
                       f"it logs {', '.join(sorted(logged))}")


def compare(spec: CompareSpec, out: str | Path, progress: Callable[[str], None] = print,
            where: str = "the spec") -> list[RunResult]:
    """Run (or resume, or keep) every run of ``spec`` under ``out``; return their results in spec order.

    A run's directory is kept (finished) or resumed (interrupted) only when its
    [`run_definition`][plm.apps.compare.run_definition] is the one saved there; any change trains it again from the
    start, and the progress line names what changed.

    Args:
        spec: the comparison.
        out: the output directory, one run directory per run.
        progress: called with a line on each run's state.
        where: the spec, for the error messages.

    Returns:
        The results, in spec order.

    Raises:
        PLMError: ``out`` is in use by another comparison, a run cannot train, or it does not log the metric.
        RunStopped: SIGTERM or SIGINT stopped a run after saving its checkpoint.
    """
    out = Path(out)
    results = []
    with run_lock(out):  # one compare per directory; each run's trainer locks the run's own
        for index, run in enumerate(spec.runs, 1):
            directory, label = out / run.slug, f"[{index}/{len(spec.runs)}] {run.name}"
            definition = run_definition(run)
            saved = read_json(directory / DEFINITION_FILE) if (directory / DEFINITION_FILE).is_file() else None
            same = saved == definition
            if same and (directory / RESULT_FILE).is_file():
                progress(f"{label}: finished before with the same options, recipe, budget and data; kept")
            else:
                resume = same and has_checkpoint(directory)
                if directory.exists() and not same:
                    changes = changed_fields(saved, definition) if saved is not None else ["no saved definition"]
                    progress(f"{label}: changed since it ran ({', '.join(changes[:4])}); training again")
                progress(f"{label}: {'resuming' if resume else 'training'} ({spec.budget.describe()}) in {directory}")
                train_run(directory, resume, not resume, None,
                          partial(prepare_run, spec, run, directory, resume, definition, where), keep_result)
            results.append(RunResult(run.name, directory, read_json(directory / RESULT_FILE),
                                     validation_curve(directory, spec.metric)))
    return results


def prepare_run(spec: CompareSpec, run: RunSpec, directory: Path, resume: bool, definition: dict[str, Any],
                where: str) -> tuple[Trainer, Tokenizer]:
    """A run's trainer, its metric checked and its definition written (a new run's), before its first step.

    Args:
        spec: the comparison.
        run: the run.
        directory: its run directory, checked and locked.
        resume: the run continues the one in ``directory``.
        definition: its [`run_definition`][plm.apps.compare.run_definition].
        where: the spec, for the error messages.

    Returns:
        The trainer and the run's tokenizer.

    Raises:
        PLMError: the run cannot train, or does not log the spec's metric.
    """
    trainer, tokenizer = prepare(run.setup, run.training, directory, resume=resume, overwrite=not resume)
    check_metric(spec, run, trainer, where)
    if not resume:
        write_json(make_directory(directory) / DEFINITION_FILE, definition)
    return trainer, tokenizer


def keep_result(trainer: Trainer, tokenizer: Tokenizer, metrics: dict[str, float]) -> None:
    """Write a finished run's last metrics and its parameter count, which mark it finished.

    Args:
        trainer: the run's trainer, trained.
        tokenizer: its tokenizer.
        metrics: its last metrics.
    """
    write_json(trainer.out / RESULT_FILE, metrics | {"parameters": trainer.model.num_parameters()})


def validation_curve(directory: Path, metric: str) -> list[tuple[int, float, float]]:
    """(step, elapsed seconds, value) of ``metric`` at each evaluation logged in the run's metrics.

    Args:
        directory: the run directory.
        metric: the validation metric.

    Returns:
        The points, in step order.
    """
    lines = (directory / METRICS_FILE).read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    return [(r["step"], r.get("elapsed", math.nan), r[metric]) for r in records if metric in r]


def results_table(spec: CompareSpec, results: list[RunResult]) -> str:
    """A Markdown table: one row per run, the spec's metric first (final and best), then size and speed.

    Args:
        spec: the comparison.
        results: its runs' results.

    Returns:
        The table.
    """
    metric = spec.metric
    header = f"| run | final {metric} | best {metric} | steps | minutes | tokens/s | parameters |"
    rows = [header, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for result in results:
        final = result.final
        pick = min if "loss" in metric or "perplexity" in metric else max  # lower is better for losses only
        best = pick((value for _, _, value in result.curve), default=math.nan)
        rows.append(
            f"| {result.name} | {final.get(metric, math.nan):.4f} | {best:.4f} | {final['step']} | "
            f"{final.get('elapsed', math.nan) / 60:.1f} | {final.get('tokens_per_second', math.nan):,.0f} | "
            f"{int(final.get('parameters', 0)):,} |"
        )
    return "\n".join(rows)


def draw_curves(spec: CompareSpec, results: list[RunResult]):
    """A matplotlib figure of every run's validation curve on shared axes: against steps, and against minutes.

    Args:
        spec: the comparison.
        results: its runs' results.

    Returns:
        (matplotlib.figure.Figure): the figure, two panels.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, (by_step, by_time) = pyplot.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for result in results:
        steps, seconds, values = zip(*result.curve) if result.curve else ((), (), ())
        by_step.plot(steps, values, marker=".", label=result.name)
        by_time.plot([s / 60 for s in seconds], values, marker=".", label=result.name)
    by_step.set_xlabel("optimizer step")
    by_time.set_xlabel("wall-clock minutes")
    by_step.set_ylabel(spec.metric)
    for axes in (by_step, by_time):
        axes.grid(alpha=0.3)
    by_step.legend()
    figure.suptitle(f"{spec.title} ({spec.budget.describe()} each)")
    figure.tight_layout()
    return figure


def plot_curves(spec: CompareSpec, results: list[RunResult], path: str | Path) -> Path:
    """Write [`draw_curves`][plm.apps.compare.draw_curves] as a PNG.

    Args:
        spec: the comparison.
        results: its runs' results.
        path: the PNG file, written atomically.

    Returns:
        The path.

    Raises:
        PLMError: the file cannot be written.
    """
    path = Path(path)
    write_png(draw_curves(spec, results), path, dpi=120)
    return path
