"""What every row of the quality suite shares: a learning curve, a row (plm beside its reference), the results.

A row trains plm's default recipe and an independent reference implementation of the
same model on the same data, tokenization, batches and steps, and records for each:
the validation loss at the same steps (a negative log-likelihood per target token, so
the two are on one scale), the final task metric, and the seconds one training step
takes. ``write_results`` turns the rows into ``results.md``, ``results.json`` and one
plot of both curves per row.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn

from plm.training.optim import learning_rate


@dataclass(frozen=True)
class Settings:
    """What every row is run with. ``scale`` multiplies each row's own number of steps (0.1 for a quick look)."""

    data: Path = Path(__file__).resolve().parents[2].parent / "shared" / "data"
    out: Path = Path("runs/quality")
    scale: float = 1.0
    seed: int = 0
    threads: int = 2
    only: tuple[str, ...] = ()  # row names to run; empty: all of the group

    def steps(self, full: int) -> int:
        return max(1, round(full * self.scale))

    def wants(self, name: str) -> bool:
        return not self.only or name in self.only


@dataclass
class Curve:
    """One implementation's run: validation loss at ``steps``, the final metric, seconds per training step."""

    name: str
    steps: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    metric: float = float("nan")
    seconds_per_step: float = float("nan")

    def record(self, step: int, loss: float) -> None:
        self.steps.append(step)
        self.val_loss.append(loss)


@dataclass
class Row:
    """plm against its reference on one task. ``higher_is_better`` says which way ``metric`` points."""

    task: str
    metric: str
    plm: Curve
    reference: Curve
    higher_is_better: bool = True
    note: str = ""
    metric_noise: float = 0.0  # how far apart two equally good runs' metrics fall (one standard error, say)

    def verdict(self, loss_noise: float = 0.02) -> str:
        """'ok' when plm's final validation loss is no higher (beyond ``loss_noise`` nats) and its metric no
        worse (beyond ``metric_noise``)."""
        loss_ok = self.plm.val_loss[-1] <= self.reference.val_loss[-1] + loss_noise
        gap = self.plm.metric - self.reference.metric
        metric_ok = (gap >= -self.metric_noise) if self.higher_is_better else (gap <= self.metric_noise)
        return "ok" if loss_ok and metric_ok else "behind"


class StepTimer:
    """Seconds per training step, excluding evaluation: wrap each step in ``with timer:``."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.steps = 0

    def __enter__(self) -> "StepTimer":
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds += time.perf_counter() - self.start
        self.steps += 1

    @property
    def per_step(self) -> float:
        return self.seconds / max(1, self.steps)


def slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")


def plot_row(row: Row, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(5, 3.2))
    for curve, style in ((row.plm, "-o"), (row.reference, "--s")):
        axis.plot(
            curve.steps, curve.val_loss, style, markersize=3, label=f"{curve.name} ({row.metric} {curve.metric:.3g})"
        )
    axis.set_xlabel("step")
    axis.set_ylabel("validation loss (nats per token)")
    axis.set_title(row.task, fontsize=10)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def markdown_table(rows: list[Row]) -> str:
    lines = [
        "| task | metric | plm | reference | plm val loss | reference val loss | plm s/step | reference s/step "
        "| speed | verdict |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in rows:
        p, r = row.plm, row.reference
        lines.append(
            f"| {row.task} | {row.metric} | {p.metric:.4g} | {r.metric:.4g} ({r.name}) | {p.val_loss[-1]:.3f} | "
            f"{r.val_loss[-1]:.3f} | {p.seconds_per_step:.3f} | {r.seconds_per_step:.3f} | "
            f"{r.seconds_per_step / p.seconds_per_step:.2f}x | {row.verdict()} |"
        )
    return "\n".join(lines) + "\n"


def write_results(rows: list[Row], out: Path, settings: dict[str, object]) -> None:
    """``results.md`` (the table), ``results.json`` (curves and settings) and ``<task>.png`` per row in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    for row in rows:
        plot_row(row, out / f"{slug(row.task)}.png")
    (out / "results.md").write_text(markdown_table(rows))
    payload = {
        "settings": settings,
        "torch": torch.__version__,
        "rows": [asdict(row) | {"verdict": row.verdict()} for row in rows],
    }
    (out / "results.json").write_text(json.dumps(payload, indent=1))


def settings_parser(description: str, rows: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The flags the suite (``run.py``) and every group's own script share."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every row's steps (0.1: a quick look)")
    parser.add_argument("--rows", default="", help="comma-separated rows to run (default: all"
                        + (f" of {', '.join(rows)})" if rows else ")"))
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", type=Path, default=Settings.data, help="the shared data sets")
    parser.add_argument("--out", type=Path, default=Settings.out, help="where results, plots and runs go")
    return parser


def settings_from(args: argparse.Namespace) -> Settings:
    torch.set_num_threads(args.threads)
    only = tuple(name for name in args.rows.split(",") if name)
    return Settings(data=args.data, out=args.out, scale=args.scale, seed=args.seed, threads=args.threads, only=only)


def report(rows: list[Row], out: Path, args: argparse.Namespace) -> None:
    """Print the table and each row's note; write the results to ``out``."""
    print(markdown_table(rows))
    for row in rows:
        if row.note:
            print(f"{row.task}: {row.note}")
    write_results(rows, out, {name: value if isinstance(value, (int, float)) else str(value)
                              for name, value in vars(args).items()})
    print(f"results in {out}/results.md, curves in {out}/*.png")


def group_main(group: str, description: str, rows: Sequence[str], run: Callable[[Settings], list[Row]]) -> None:
    """A group's script: ``python benchmarks/quality/GROUP.py [--scale S] [--rows A,B] ...``; results in OUT/GROUP."""
    parser = settings_parser(description, rows)
    args = parser.parse_args()
    settings = settings_from(args)
    unknown = sorted(set(settings.only) - set(rows))
    if unknown:
        parser.error(f"unknown rows {', '.join(unknown)}; choose from {', '.join(rows)}")
    report(run(settings), settings.out / group, args)


def decay_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on every weight but biases and LayerNorm gains, embeddings included (GPT-1's "all non bias or
    gain weights"; BERT's optimizer excludes "LayerNorm" and "bias"): the tensors of two or more dimensions."""
    matrices = {id(p) for p in model.parameters() if p.dim() >= 2}
    parameters = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in parameters if id(p) in matrices], "weight_decay": weight_decay},
            {"params": [p for p in parameters if id(p) not in matrices], "weight_decay": 0.0}]


class ReferenceLamb(torch.optim.Optimizer):
    """LAMB as You et al. (2019, Algorithm 2) write it, with phi the identity, apart from plm's own: Adam's
    bias-corrected step r plus decoupled weight decay, scaled per tensor by ||w|| / ||r|| (1 where a norm is
    0). Groups with ``adapt=False`` take that step unscaled (AdamW's), as ALBERT's code does for biases and
    norms."""

    def __init__(self, groups: list[dict], lr: float, betas: tuple[float, float], eps: float) -> None:
        super().__init__(groups, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": 0.0, "adapt": True})

    @torch.no_grad()
    def step(self, closure: None = None) -> None:
        for group in self.param_groups:
            (beta1, beta2), eps = group["betas"], group["eps"]
            for w in group["params"]:
                if w.grad is None:
                    continue
                state = self.state[w]
                if not state:
                    state.update(t=0, m=torch.zeros_like(w), v=torch.zeros_like(w))
                state["t"] += 1
                t, m, v = state["t"], state["m"], state["v"]
                m.mul_(beta1).add_(w.grad, alpha=1 - beta1)
                v.mul_(beta2).add_(w.grad.square(), alpha=1 - beta2)
                r = (m / (1 - beta1**t)) / ((v / (1 - beta2**t)).sqrt() + eps) + group["weight_decay"] * w
                ratio = 1.0
                if group["adapt"]:
                    w_norm, r_norm = w.norm().item(), r.norm().item()
                    ratio = w_norm / r_norm if w_norm > 0 and r_norm > 0 else 1.0
                w.sub_(group["lr"] * ratio * r)


def reference_optimizer(model: nn.Module, config: object) -> torch.optim.Optimizer:
    """The optimizer plm's recipe names (``config`` is plm's ``TrainingConfig``), written apart from plm's:
    torch's AdamW, or :class:`ReferenceLamb` with biases and norms unadapted."""
    groups = decay_groups(model, config.weight_decay)
    if config.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=config.lr, betas=config.betas, eps=config.eps)
    if config.optimizer == "lamb":
        # the trust ratio on matrices and embeddings; biases and norms (the vectors) take AdamW's step
        adapted = [{**group, "params": [p for p in group["params"] if p.dim() >= 2]} for group in groups]
        vectors = [p for group in groups for p in group["params"] if p.dim() < 2]
        return ReferenceLamb([*adapted, {"params": vectors, "weight_decay": 0.0, "adapt": False}], lr=config.lr,
                             betas=config.betas, eps=config.eps)
    raise SystemExit(f"no reference for the optimizer {config.optimizer!r}")


class OwnRandomStream:
    """The reference's own CPU random state: dropout inside ``with stream:`` draws from it; plm's is left alone."""

    def __init__(self, seed: int) -> None:
        self.state = torch.Generator().manual_seed(seed).get_state()

    def __enter__(self) -> None:
        self.outer = torch.get_rng_state()
        torch.set_rng_state(self.state)

    def __exit__(self, *exc: object) -> None:
        self.state = torch.get_rng_state()
        torch.set_rng_state(self.outer)


def reference_step(model: nn.Module, optimizer: torch.optim.Optimizer, config: object, step: int,
                   loss_of: Callable[[], torch.Tensor]) -> None:
    """One step of a reference's plain loop: plm's learning rate for ``step`` (``config`` is plm's
    ``TrainingConfig``), the loss, backward, clipping, the optimizer."""
    model.train()
    lr = learning_rate(config.schedule, step, config.lr, config.warmup, config.steps, config.min_lr)
    for group in optimizer.param_groups:
        group["lr"] = lr
    loss_of().backward()
    if config.clip > 0:
        nn.utils.clip_grad_norm_(model.parameters(), config.clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
