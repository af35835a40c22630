"""``--hyperparameters paper`` at the paper's scale: its batch, sequence length and steps (or epochs).

A model's recipe carries the size of its paper's run ([`PaperScale`][plm.models.recipe.PaperScale]), the one of the
model's size where the family's papers trained sizes differently (GPT-1's and GPT-2's, the Transformer's base and big:
[`recipe_of`][plm.models.recipe_of]);
[`paper_run`][plm.training.paper_scale.paper_run] turns it into the settings of one run of plm: the batch through
gradient accumulation, so that a micro-batch still fits (micro-batch x accumulation x
processes = the paper's batch), the sequence length at most the model's context, the
steps or epochs, and BERT's short first phase. A setting the user gave explicitly is
kept as given.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from plm.errors import PLMError
from plm.models import model_class, recipe_of
from plm.models.recipe import PaperScale
from plm.training.starting_model import check_model_name, model_config

# The settings a paper's scale gives, by their names in PretrainSetup, TrainingConfig and the CLI.
PAPER_SETTINGS = ("grad_accum", "block_size", "steps", "epochs", "short_block_size", "short_steps")


@dataclass(frozen=True)
class PaperRun:
    """One run's settings at its paper's scale.

    Attributes:
        family: the model's family.
        scale: the paper's run; None where the recipe has none (only the optimizer comes from the paper).
        settings: what the run trains with, by name (see `PAPER_SETTINGS`, and ``batch_size``): the
            micro-batch per process, the accumulation, the tokens per sequence, the steps or the epochs, and a
            short first phase (``short_block_size`` tokens for ``short_steps`` steps).
        processes: the processes the batch is shared by.
        given: the settings the user gave explicitly, which were kept.
        context: the model's context, where the paper's sequences were cut to it; else None.
    """

    family: str
    scale: PaperScale | None
    settings: dict[str, int | float] = field(default_factory=dict)
    processes: int = 1
    given: frozenset[str] = frozenset()
    context: int | None = None

    @property
    def global_batch(self) -> int:
        """The sequences per optimizer step: micro-batch x accumulation x processes."""
        return int(self.settings["batch_size"] * self.settings["grad_accum"]) * self.processes

    def describe(self) -> str:
        """What ``--hyperparameters paper`` set, in one line (two when the sequences were cut to the context).

        Returns:
            The text, for the user.
        """
        if self.scale is None:
            return (f"`hyperparameters` paper: the {self.family} recipe holds no batch, sequence length or steps of "
                    "its paper, so only the optimizer and its schedule come from the paper")
        s, scale = self.settings, self.scale
        processes = f" x {self.processes} processes" if self.processes > 1 else ""
        parts = [f"batch {self.global_batch:,} = {s['batch_size']} x {s['grad_accum']} accumulated{processes}"
                 + ("" if self.global_batch == scale.batch_size else f" (the paper's: {scale.batch_size:,})")]
        parts.append(f"{s['steps']:,} steps" if "steps" in s else f"{s['epochs']:g} epochs")  # given steps win
        if s.get("short_steps"):
            parts.append(f"{s['short_block_size']} tokens per sequence for the first {s['short_steps']:,} steps, "
                         f"then {s['block_size']}")
        else:
            parts.append(f"{s['block_size']} tokens per sequence")
        kept = [f"`{name}`" for name in PAPER_SETTINGS if name in self.given]
        line = (f"`hyperparameters` paper: {', '.join(parts)} ({scale.source})"
                + (f"; {', '.join(kept)} as given" if kept else ""))
        if self.context is not None:
            line += (f"\n`hyperparameters` paper: the paper's {scale.block_size} tokens per sequence are cut to the "
                     f"model's context of {self.context}")
        return line


def accumulation(batch: int, micro_batch: int, processes: int = 1) -> tuple[int, int]:
    """The micro-batch and accumulation that make ``batch``: micro-batch x accumulation x processes = ``batch``.

    The micro-batch is the largest divisor of each process's share not above ``micro_batch``.

    Args:
        batch: the sequences per optimizer step, over all processes.
        micro_batch: the most sequences per micro-batch (what fits in memory).
        processes: the processes that share the batch.

    Returns:
        The micro-batch and the micro-batches per step on each process.

    Raises:
        PLMError: a batch the processes cannot share evenly.
    """
    if batch % processes:
        raise PLMError(f"the paper's batch of {batch:,} sequences cannot be shared evenly by {processes} processes; "
                       "give `grad_accum` (and `batch_size`) for a batch of your own")
    share = batch // processes
    micro = max(size for size in range(1, min(micro_batch, share) + 1) if share % size == 0)
    return micro, share // micro


def paper_run(model: str, batch_size: int, processes: int = 1,
              given: Mapping[str, int | float] | None = None) -> PaperRun:
    """The settings of a run of ``model`` at its paper's scale, but for those ``given``.

    Args:
        model: a family, a preset or a plm model directory.
        batch_size: the most sequences per micro-batch (``--batch-size``).
        processes: the run's processes.
        given: the settings (of `PAPER_SETTINGS`) the user gave explicitly, which are kept.

    Returns:
        The run's settings.

    Raises:
        PLMError: an unknown model, or a batch its processes cannot share evenly.
    """
    given = dict(given or {})
    config = model_config(check_model_name(model))
    family = model_class(config).family
    scale = recipe_of(config).paper_scale  # the run of the model's size
    if scale is None:
        return PaperRun(family, None)
    if "grad_accum" in given:  # the user's accumulation makes the batch: the micro-batch stays as asked
        settings: dict[str, int | float] = {"batch_size": batch_size, "grad_accum": given["grad_accum"]}
    else:
        micro, accumulated = accumulation(scale.batch_size, batch_size, processes)
        settings = {"batch_size": micro, "grad_accum": accumulated}
    context = config.context_length
    settings["block_size"] = given.get("block_size", min(scale.block_size, context))
    cut = "block_size" not in given and scale.block_size > context
    if "steps" in given or "epochs" in given:
        settings |= {name: given[name] for name in ("steps", "epochs") if name in given}
    else:
        length = {"steps": scale.steps, "epochs": scale.epochs}  # the one the paper gives
        settings |= {name: value for name, value in length.items() if value is not None}
    settings |= short_phase(scale, settings, given, context)
    return PaperRun(family, scale, settings, processes, frozenset(given), context if cut else None)


def short_phase(scale: PaperScale, settings: Mapping[str, int | float], given: Mapping[str, int | float],
                context: int) -> dict[str, int | float]:
    """The short first phase of a run (BERT's 90% of the steps at 128 tokens), or none.

    Args:
        scale: the paper's run.
        settings: the run's block size and steps (or epochs).
        given: the settings the user gave explicitly; a short phase given is kept.
        context: the model's context.

    Returns:
        ``short_block_size`` and ``short_steps``, or nothing: the paper has no short phase, its sequences are
        no shorter than the run's (cut to the context), or the run is counted in epochs, whose steps are not known
        before the data is read.
    """
    if "short_block_size" in given or "short_steps" in given:
        return {name: given[name] for name in ("short_block_size", "short_steps") if name in given}
    if scale.short_block_size is None or "steps" not in settings:
        return {}
    short = min(scale.short_block_size, context)
    if short >= settings["block_size"]:
        return {}
    return {"short_block_size": short, "short_steps": round(scale.short_fraction * settings["steps"])}


def translation_run(model: str, max_tokens: int, processes: int = 1,
                    given: Mapping[str, int] | None = None) -> tuple[dict[str, int], str]:
    """The accumulation and steps of an encoder-decoder's run at its paper's scale, but for those ``given``.

    Micro-batches of ``max_tokens`` source and target tokens are accumulated (on every process) up to the
    paper's tokens per batch, rounded up: the Transformer's 50,000 with ``--max-tokens 4096`` on one process
    take 13 micro-batches, 53,248 tokens.

    Args:
        model: a family, a preset or a plm model directory of an encoder-decoder.
        max_tokens: the token budget of one micro-batch (``--max-tokens``).
        processes: the run's processes.
        given: ``grad_accum`` or ``steps`` the user gave explicitly, which are kept.

    Returns:
        The settings (``grad_accum``, ``steps``; none where the recipe has no paper run) and a line that says what
        was set.

    Raises:
        PLMError: an unknown model.
    """
    given = dict(given or {})
    config = model_config(check_model_name(model))
    family = model_class(config).family
    scale = recipe_of(config).translation_scale  # the run of the model's size
    if scale is None:
        return {}, (f"`hyperparameters` paper: the {family} recipe holds no batch or steps of its paper, so only the "
                    "optimizer and its schedule come from the paper")
    settings = {"grad_accum": given.get("grad_accum", math.ceil(scale.batch_tokens / (max_tokens * processes))),
                "steps": given.get("steps", scale.steps)}
    processed = f" x {processes} processes" if processes > 1 else ""
    kept = [f"`{name}`" for name in settings if name in given]
    line = (f"`hyperparameters` paper: batches of {max_tokens * settings['grad_accum'] * processes:,} source and "
            f"target tokens = `max_tokens` {max_tokens:,} x {settings['grad_accum']} accumulated{processed} (the "
            f"paper's: {scale.batch_tokens:,}), {settings['steps']:,} steps ({scale.source})"
            + (f"; {', '.join(kept)} as given" if kept else ""))
    return settings, line
