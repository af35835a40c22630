"""``plm plan``: the memory one training process needs, before any is spent.

Parameters are counted exactly: the model that pre-trains (the preset with the heads of
its recipe's objective) is built on the ``meta`` device, so gpt2-xl costs nothing, and
``parameters()`` yields a shared tensor once (ALBERT's one block, a tied output layer).
Gradients are the same bytes; the optimizer keeps ``OPTIMIZER_STATES`` fp32 tensors per
parameter. Everything is fp32, as plm trains on the CPU.

Activations are an analytic count, not a measurement: every family the planner takes is
a stack of the one core block ([`TransformerBlock`][plm.core.block.TransformerBlock]), whose shape
(``BlockConfig.of``: dim, heads, ffn_dim, dropout) says what backward keeps. A family
whose paper changes what a block keeps, or runs blocks more often, says by how much
([`extra_activations`][plm.models.base.PretrainedModel.extra_activations]); the planner names none.
Measuring a scaled-down model would need a synthetic batch per objective; the block is
shared, so its count is written once. Per token, in fp32 values:

- each block pass keeps about 10 dim-wide tensors (its input, the LayerNorm outputs,
  queries, keys and values, the heads' output, the residual sums, the residual dropouts'
  masks: 8 without dropout) and 2 ffn-wide ones (the feed-forward layer before and after
  its activation); with attention dropout on the CPU, SDPA takes its plain path and keeps
  3 time-long rows per head (probabilities, dropout mask, dropped probabilities), the
  T^2 term; the fused kernels (CUDA's always, the CPU's without dropout) keep none, or
  one row when the scores get a bias that needs a gradient;
- what a family adds to that: DeBERTa's c2p and p2c products keep their operands in
  every pass (dim, and dim * 2k / T for the relative positions expanded over the
  batch), their sum is a score bias, and its enhanced mask decoder makes 2 more passes
  through the last block, attending to the encoder output, which stays (dim);
- outside the blocks, the embeddings (3 dim-wide) and, per token the objective predicts
  (all for a causal LM, 15% for a masked LM), 4 vocabulary-wide rows: logits,
  log-probabilities and their gradients.

The peak comes at one of three moments of backward, and the count takes the largest:
as it starts, with the 4 vocabulary rows beside all that was kept; in the last block's
backward, where the logits alone are left of those rows, beside the block's gradients
(2 dim-wide, 1 ffn-wide) and the output layer's gradient of the tied word embeddings
(V x E per step, waiting for the lookup's own); at the lookup, last, where the two
gradients of that table meet. Activation checkpointing keeps only each block pass's
input (dim per token) and recomputes one block during backward, in the second moment:
the first stays the peak only when the vocabulary rows outweigh a block (gpt2-mini's),
the third in steps of few tokens. tests/training/test_plan.py checks the count, with and
without checkpointing, against torch.profiler's peak for a real step (forward, loss,
backward) of small presets, DeBERTa's included. CUDA's counts are read off the kernels'
saved tensors, not measured.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass
from typing import Any

import torch

from plm.core.block import BlockConfig, TransformerBlock
from plm.device import DEVICES, available_memory
from plm.errors import PLMError
from plm.models import RECIPES, from_config, model_class, preset_config
from plm.objectives import objective_spec
from plm.objectives.masking import MLM_PROBABILITY
from plm.training.parallel import STRATEGIES

FP32 = 4
OPTIMIZER_STATES = {"adamw": 2, "lamb": 2, "adagrad": 1}  # fp32 tensors per parameter: moments, or Adagrad's sum
ROWS = ("parameters", "gradients", "optimizer state", "gradient buckets", "all-gather (one block)", "activations")
BLOCK_FIELDS = ("dim", "heads", "ffn_dim", "layers", "vocab_size", "context_length")
UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
         "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


@dataclass(frozen=True)
class PlanSetup:
    """What to plan: a preset, its batch shape, and how the processes share the work.

    Attributes:
        model: the preset.
        processes: the training processes (one per GPU on CUDA).
        batch: the sequences per process and micro-batch.
        block: the tokens per sequence; None: the recipe's block size, at most the context.
        strategy: "ddp" or "fsdp".
        offload: FSDP: keep parameter and optimizer shards in CPU memory.
        checkpoint_activations: keep only each block's input for backward.
        optimizer: "adamw", "lamb" or "adagrad", for its state's size; None: the family recipe's.
        device: where it trains: "cuda" or "cpu"; "auto": CUDA when present, as training picks.
    """

    model: str
    processes: int = 1
    batch: int = 8
    block: int | None = None  # None: the recipe's block size, at most the context
    strategy: str = "ddp"
    offload: bool = False
    checkpoint_activations: bool = False
    optimizer: str | None = None  # None: the family recipe's
    device: str = "auto"  # where it trains: "cuda" or "cpu"; auto: CUDA when present, as training picks

    def validate(self) -> None:
        """Raise a PLMError naming the field of the first value that cannot be planned.

        Raises:
            PLMError: processes, batch or block below 1, an unknown strategy or optimizer, or offload without FSDP.
        """
        if self.processes < 1 or self.batch < 1 or (self.block is not None and self.block < 1):
            raise PLMError("`processes`, `batch` and `block` must be at least 1")
        if self.strategy not in STRATEGIES:
            raise PLMError(f"unknown strategy {self.strategy!r}; choose one of {', '.join(STRATEGIES)}")
        if self.optimizer is not None and self.optimizer not in OPTIMIZER_STATES:
            raise PLMError(f"unknown optimizer {self.optimizer!r}; choose one of {', '.join(OPTIMIZER_STATES)}")
        if self.offload and self.strategy != "fsdp":
            raise PLMError("`offload` moves FSDP's shards to CPU memory; it needs `strategy` fsdp")


@dataclass(frozen=True)
class Memory:
    """The bytes one process may use, and where the number comes from.

    Attributes:
        bytes: the bytes.
        source: where the number comes from, for the report ("free on ...", "available RAM", or the user's).
    """

    bytes: int
    source: str


@dataclass(frozen=True)
class Plan:
    """Bytes per process, each kind on the accelerator (``device``) or in CPU memory (``cpu``).

    Attributes:
        setup: what was planned.
        target: the device it trains on: "cuda" or "cpu".
        block: the tokens per sequence.
        parameters: the model's distinct parameters.
        device: row name (see ``ROWS``) -> bytes on the device it trains on.
        cpu: row name -> bytes in CPU memory (FSDP's offloaded shards).
        activations: one step's activation bytes, "without" and "with" activation checkpointing.
        memory: the bytes one process may use.
    """

    setup: PlanSetup
    target: str  # the device it trains on: "cuda" or "cpu"
    block: int
    parameters: int  # the model's distinct parameters
    device: dict[str, int]
    cpu: dict[str, int]
    activations: dict[str, int]  # one step's, "without" and "with" activation checkpointing
    memory: Memory

    @property
    def device_total(self) -> int:
        """The bytes per process on the device it trains on."""
        return sum(self.device.values())

    @property
    def cpu_total(self) -> int:
        """The bytes per process offloaded to CPU memory."""
        return sum(self.cpu.values())

    @property
    def fits(self) -> bool:
        """Whether the device's bytes fit in ``memory``."""
        return self.device_total <= self.memory.bytes

    def as_dict(self) -> dict:
        """The plan as JSON-ready values, with the totals and the verdict.

        Returns:
            The fields, and ``device_total``, ``cpu_total`` and ``fits``.
        """
        return {**dataclasses.asdict(self), "device_total": self.device_total, "cpu_total": self.cpu_total,
                "fits": self.fits}


def parse_bytes(text: str) -> int:
    """Read a byte count: ``16GB``, ``1.5GiB``, ``2e9`` (decimal and binary units, any case).

    Args:
        text: the count, as ``--memory`` takes it.

    Returns:
        The bytes.

    Raises:
        PLMError: text that is not a number with an optional known unit.
    """
    match = re.fullmatch(r"\s*([0-9.]+(?:e[0-9]+)?)\s*([a-z]*)\s*", text, re.IGNORECASE)
    unit = match and match.group(2).upper()
    if not match or unit not in UNITS:
        raise PLMError(f"`memory` must be auto or a size like 16GB or 12GiB, got {text!r}")
    try:
        return int(float(match.group(1)) * UNITS[unit])
    except ValueError:
        raise PLMError(f"`memory` must be auto or a size like 16GB or 12GiB, got {text!r}") from None


def planned_device(name: str) -> str:
    """"cuda" or "cpu": auto is CUDA when this machine has it; a plan for a GPU may be made without one.

    Args:
        name: a device name of `DEVICES`.

    Returns:
        The device type the plan is for.

    Raises:
        PLMError: an unknown device name.
    """
    if name not in DEVICES:
        raise PLMError(f"unknown device {name!r}; choose one of {', '.join(DEVICES)}")
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def auto_memory(device: str, processes: int) -> Memory:
    """A GPU's free memory (one GPU per process), or the available RAM that the processes share.

    Args:
        device: "cuda" or "cpu".
        processes: the processes that share the RAM on the CPU.

    Returns:
        The bytes one process may use.

    Raises:
        PLMError: a plan for CUDA on a machine without a CUDA GPU.
    """
    if device == "cuda":
        if not torch.cuda.is_available():
            raise PLMError("no CUDA GPU here to read free memory from; give `memory` (e.g. 80GB) to plan for one")
        free, _ = torch.cuda.mem_get_info()
        return Memory(free, f"free on {torch.cuda.get_device_name()}")
    available = available_memory()
    if available is None:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    shared = f" / {processes} processes" if processes > 1 else ""
    return Memory(available // processes, f"available RAM{shared}")


def activation_bytes(config: Any, predicted: float, batch: int, block: int, checkpoint: bool,
                     device: str = "cpu") -> int:
    """One training step's activations on ``device`` (see the module docstring for what is counted and why).

    ``config`` is the one the model is built from, with its objective's heads (DeBERTa's
    enhanced mask decoder runs only under an MLM head).

    Args:
        config (Any): the model's config, heads included.
        predicted: the fraction of tokens the objective predicts (1 for a causal LM, 0.15 for a masked LM).
        batch: the sequences per process.
        block: the tokens per sequence.
        checkpoint: with activation checkpointing.
        device: "cuda" or "cpu".

    Returns:
        The bytes at the step's peak.
    """
    shape = BlockConfig.of(config)
    extra = model_class(config).extra_activations(config, batch, block, device)
    per_block = block_values(shape, block, device, extra.score_bias) + extra.per_pass
    passes = config.layers + extra.passes
    embeddings = 3 * shape.dim
    # Kept from forward to backward: the embeddings', the family's own, and every block
    # pass's count, or only its input when the pass is recomputed in backward.
    kept = embeddings + extra.kept + passes * (shape.dim if checkpoint else per_block)
    row = predicted * config.vocab_size  # one vocabulary row per token, for the tokens the objective predicts
    table = word_table_values(config, shape) / (batch * block)  # the tied word embeddings, per token
    peaks = (  # the step's peak is at one of three moments of backward
        kept + 4 * row,  # the loss's: logits, log-probabilities and their gradients
        # the last block's: the logits alone left of the rows (the caller may hold them), the
        # block recomputed when checkpointing, its gradients, the output layer's of the table
        kept + row + (per_block if checkpoint else 0) + gradient_values(shape) + table,
        embeddings + row + 2 * table,  # the lookup's, last: its gradient of the table beside the output layer's
    )
    return int(FP32 * batch * block * max(peaks))


def block_values(shape: BlockConfig, block: int, device: str, score_bias: bool = False) -> float:
    """Per token, what one block pass keeps for backward: 10 dim-wide (8 without dropout), 2 ffn-wide, the scores.

    Args:
        shape: the block's shape.
        block: the tokens per sequence (the length of a score row).
        device: "cuda" or "cpu".
        score_bias: the scores get a bias that needs a gradient (DeBERTa's).

    Returns:
        The fp32 values per token.
    """
    dim_wide = 10 if shape.dropout > 0 else 8  # two are the residual dropouts' masks
    return dim_wide * shape.dim + 2 * shape.ffn_dim + score_rows(shape, device, score_bias) * shape.heads * block


def score_rows(shape: BlockConfig, device: str, score_bias: bool) -> int:
    """Time-long rows per head and token that SDPA keeps for backward.

    With attention dropout on the CPU it takes its plain path and keeps the
    probabilities, the dropout's mask and the dropped probabilities. Otherwise the
    fused kernels keep none, unless the scores get a bias that needs a gradient: the
    CPU's fused kernel gives it none, so the plain path runs and keeps the
    probabilities; CUDA's memory-efficient kernel keeps the bias to recompute them.

    Args:
        shape: the block's shape.
        device: "cuda" or "cpu".
        score_bias: the scores get a bias that needs a gradient.

    Returns:
        3, 1 or 0.
    """
    if device == "cpu" and shape.attention_dropout > 0:
        return 3
    return 1 if score_bias else 0


def gradient_values(shape: BlockConfig) -> float:
    """Per token, the gradients live at once in a block's backward: the arriving one, the residual dropout's, FFN's.

    Args:
        shape: the block's shape.

    Returns:
        The fp32 values per token.
    """
    return 2 * shape.dim + shape.ffn_dim


def word_table_values(config: Any, shape: BlockConfig) -> int:
    """V x E, E = ``embedding_dim`` or dim: the word embeddings, which every family plm plan takes ties to its output.

    Their gradient from the output layer, made as backward starts, waits in autograd
    until the embedding lookup, the last step of backward, adds its own: one table from
    the end of the head's backward on, two at the lookup (three when autograd sums them
    out of place, which it does or not by whether it may reuse the first: not counted).

    Args:
        config (Any): the model's config.
        shape: its block's shape.

    Returns:
        The values of the table.
    """
    return config.vocab_size * (getattr(config, "embedding_dim", None) or shape.dim)


def plan(setup: PlanSetup, memory: Memory | None = None) -> Plan:
    """The bytes each process of ``setup`` holds, against ``memory`` (None: what this machine has free).

    Args:
        setup: what to plan.
        memory: the bytes one process may use (default: [`auto_memory`][plm.training.plan.auto_memory]).

    Returns:
        The plan.

    Raises:
        PLMError: a setup [`PlanSetup.validate`][plm.training.plan.PlanSetup.validate] refuses, an unknown preset or
            device, a model that is not a stack of Transformer blocks, a block longer than the context, or no CUDA GPU
            to read free memory from.
    """
    setup.validate()
    config = preset_config(setup.model)
    missing = [name for name in BLOCK_FIELDS if not hasattr(config, name)]
    if missing:
        family = model_class(config).family
        raise PLMError(f"plm plan does not plan the {family} family yet: it counts the decoder-only and encoder "
                       "stacks of GPT, BERT, ALBERT and DeBERTa")
    recipe = RECIPES[model_class(config).family]
    optimizer = setup.optimizer or recipe.hyperparameters.optimizer
    setup = dataclasses.replace(setup, optimizer=optimizer)
    objective = objective_spec(recipe.objective)
    block = setup.block or min(recipe.block_size or config.context_length, config.context_length)
    if block > config.context_length:
        raise PLMError(f"`block_size` {block} exceeds {setup.model}'s context of {config.context_length} tokens")
    trained = model_class(config).config_with_heads(config, objective.heads)
    with torch.device("meta"):
        model = from_config(trained)
    count = sum(p.numel() for p in model.parameters())
    weights = FP32 * count
    state = OPTIMIZER_STATES[optimizer] * weights
    device_type = planned_device(setup.device)
    predicted = MLM_PROBABILITY if objective.masks_words else 1.0
    activations = {
        name: activation_bytes(trained, predicted, setup.batch, block, checkpoint, device_type)
        for name, checkpoint in (("without", False), ("with", True))
    }
    device: dict[str, int] = {}
    cpu: dict[str, int] = {}
    if setup.strategy == "ddp":
        device |= {"parameters": weights, "gradients": weights, "optimizer state": state, "gradient buckets": weights}
    else:  # each process keeps 1/N of everything, and gathers one whole block's parameters and gradients at a time
        shard = math.ceil(count / setup.processes) * FP32
        largest = max(
            sum(p.numel() for p in b.parameters()) for b in model.modules() if isinstance(b, TransformerBlock)
        )
        (cpu if setup.offload else device)["parameters"] = shard
        device["gradients"] = shard
        (cpu if setup.offload else device)["optimizer state"] = OPTIMIZER_STATES[optimizer] * shard
        device["all-gather (one block)"] = 2 * FP32 * largest
    device["activations"] = activations["with" if setup.checkpoint_activations else "without"]
    memory = memory or auto_memory(device_type, setup.processes)
    return Plan(setup, device_type, block, count, device, cpu, activations, memory)


def human_bytes(count: float) -> str:
    """Write a byte count as ``1.23 GiB``: binary units, three significant digits.

    Args:
        count: the bytes.

    Returns:
        The text.
    """
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024:
            return f"{count:.3g} {unit}" if unit != "B" else f"{int(count)} B"
        count /= 1024
    return f"{count:,.2f} TiB"


def report(result: Plan) -> str:
    """The table of bytes per process and the verdict, as ``plm plan`` prints them.

    Args:
        result: the plan.

    Returns:
        The report, one line per row.
    """
    setup = result.setup
    lines = [
        f"{setup.model}: {result.parameters:,} parameters; {setup.processes} process(es), {setup.strategy}"
        f"{' + CPU offload' if setup.offload else ''}, {setup.optimizer}, batch {setup.batch} x {result.block} "
        f"tokens per process, activation checkpointing {'on' if setup.checkpoint_activations else 'off'}",
        f"{'per process (fp32)':<26}{'on ' + result.target:>14}{'CPU offload':>14}",
    ]
    for name in (row for row in ROWS if row in result.device or row in result.cpu):
        device, cpu = result.device.get(name), result.cpu.get(name)
        lines.append(f"  {name:<24}{human_bytes(device) if device else '-':>14}{human_bytes(cpu) if cpu else '-':>14}")
    lines.append(f"  {'total':<24}{human_bytes(result.device_total):>14}{human_bytes(result.cpu_total):>14}")
    other = "with" if not setup.checkpoint_activations else "without"
    lines.append(f"(activations {other} checkpointing: {human_bytes(result.activations[other])})")
    verdict = "fits" if result.fits else "does NOT fit"
    lines.append(f"{verdict}: {human_bytes(result.device_total)} per process against "
                 f"{human_bytes(result.memory.bytes)} ({result.memory.source})")
    return "\n".join(lines)
