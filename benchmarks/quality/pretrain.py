"""Pre-training rows of the quality suite: plm's default recipes against references, on WikiText-2.

    python benchmarks/quality/pretrain.py [--scale 0.1] [--rows gpt2-mini,bert-mini,elmo-mini] [--threads N] [--out DIR]

Every row trains on WikiText-2's valid.txt (214k words) and validates on test.txt
(which it never trains on), as ``plm pretrain --model NAME --train valid.txt
--validation test.txt --steps N`` does: this calls ``plm.training.pretrain.prepare``
with the family's default recipe (its tokenizer trained on valid.txt, its preset, its
objective, batch size, block size, optimizer and schedule as they are at run time) and
runs that Trainer's own ``train``, whose ``optimizer_step`` and ``evaluate`` are
wrapped to time each step, to evaluate at ten points, and to train the reference on
the same batch right after plm's step. The two take turns step by step, so a change in
the machine's load slows both alike; the reference draws its dropout masks from a
random stream of its own, so plm's run is the one it would be alone.

- ``gpt2-mini``: plm's GPT (``clm``) against transformers' ``GPT2LMHeadModel`` loaded
  from plm's initial weights (``plm.hf.save_hf``), so at step 0 the two validation
  losses agree (printed); same dropout (the exported config's).
- ``bert-mini``: plm's BERT with its default objective (MLM + NSP) against
  transformers' ``BertForPreTraining`` (the masked-LM and next-sentence heads) loaded
  from plm's initial weights; both read the MLM objective's batches (the same masks)
  and minimise mean MLM loss + mean NSP loss. The curve and metric are the MLM term.
- ``albert-mini``: plm's ALBERT with its default objective (MLM over n-grams + SOP) against
  transformers' ``AlbertForPreTraining`` loaded from plm's initial weights, on the same
  batches, minimising mean MLM loss + mean SOP loss with LAMB written here
  (``common.ReferenceLamb``). The curve is the MLM term; each evaluation prints both sides'
  masked-LM and SOP accuracies too.
- ``elmo-mini``: plm's ELMo (char-CNN token encoder, ``bilm``) against a word-level
  biLM written here on torch.nn: word embeddings of the projection size (the same word
  vocabulary, rare words as ``<UNK>``), a forward and a backward 2-layer ``nn.LSTM``
  with the preset's cell and projection sizes and dropout, and one shared softmax.
  Same blocks of words, same targets. Curve and metric: the mean of the two directions.
  The note adds the loss at the validation words outside the vocabulary, where the
  reference reads ``<UNK>`` and the char-CNN the spelling (the issue expects the
  characters to help there).

Each reference is a plain PyTorch loop: ``torch.optim.AdamW`` (LAMB for ALBERT) with the recipe's lr,
betas, eps and weight decay (on every weight but biases and LayerNorm gains, embeddings included,
as plm's recipe does), the recipe's learning rate at every step (from
``plm.training.optim.learning_rate``), gradients clipped at the Trainer's norm. Seconds
per step time the whole step (drawing the batch, forward, backward, update), not the
evaluations.

For gpt2-mini, bert-mini and albert-mini the two sides compute the same function from the same
weights: given the same dropout stream (``build_reference(trainer, seed)`` with plm's
seed) they give identical validation losses, so any gap in these rows is the noise of
different dropout masks, or a change in plm's recipe that the reference does not follow.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

HERE = Path(__file__).resolve().parent
for folder in (HERE, HERE.parent):  # common.py, and bench_common.py
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from common import (  # noqa: E402
    Curve,
    OwnRandomStream,
    Row,
    Settings,
    StepTimer,
    group_main,
    reference_optimizer,
    reference_step,
)

from bench_common import quiet_transformers  # noqa: E402
from plm.hf import save_hf  # noqa: E402
from plm.objectives import BiLMObjective  # noqa: E402
from plm.tokenization.characters import UNKNOWN  # noqa: E402
from plm.training.pretrain import PretrainSetup, prepare  # noqa: E402
from plm.training.trainer import Trainer, TrainingConfig  # noqa: E402

GROUP = "pretrain"
STEPS = {"gpt2-mini": 300, "bert-mini": 400, "elmo-mini": 800, "albert-mini": 800}  # at scale 1
EVALUATIONS = 10  # validation points after step 0

Batch = dict[str, torch.Tensor]
Sums = dict[str, tuple[torch.Tensor, int]]  # loss term -> (summed loss, targets); accuracy_* terms: (hits, targets)
ACCURACY = "accuracy_"  # the terms that are counted, not trained


# The references ------------------------------------------------------------------------------------------


class WordBiLM(nn.Module):
    """A forward and a backward LSTM language model over word embeddings, sharing the embeddings and the softmax.

    The textbook word-level biLM of ELMo's size: the token layer is a lookup table
    instead of a char-CNN; each direction is one ``nn.LSTM`` of ``layers`` layers with
    projections (dropout between layers), without ELMo's residual connection.
    """

    def __init__(self, vocab: int, dim: int, hidden: int, layers: int, dropout: float) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.forward_lm, self.backward_lm = (
            nn.LSTM(dim, hidden, num_layers=layers, proj_size=dim, dropout=dropout, batch_first=True) for _ in range(2)
        )
        self.dropout = nn.Dropout(dropout)
        self.softmax = nn.Linear(dim, vocab)

    def directions(self, words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """words (B, T) -> the top states of the forward and the backward LM at each word, (B, T, dim) each."""
        x = self.dropout(self.embedding(words))  # (B, T, dim)
        forward, _ = self.forward_lm(x)
        backward, _ = self.backward_lm(x.flip(1))  # reads from the last word
        return forward, backward.flip(1)

    def forward(self, words: torch.Tensor, next_words: torch.Tensor, previous_words: torch.Tensor) -> Sums:
        """words, next_words, previous_words: (B, T) ids -> summed NLL of each direction."""
        forward, backward = self.directions(words)
        return {
            "forward": (self.nll(forward, next_words), next_words.numel()),
            "backward": (self.nll(backward, previous_words), previous_words.numel()),
        }

    def nll(self, states: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.softmax(self.dropout(states))  # (B, T, vocab)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum")




@dataclass
class Reference:
    """A plain training loop around ``model``: ``losses`` sums each term over a batch, ``draw`` gives step n's batch."""

    model: nn.Module
    losses: Callable[[nn.Module, Batch], Sums]
    draw: Callable[[int], Batch]
    validation: Callable[[], Iterator[Batch]]
    config: TrainingConfig
    seed: int

    def __post_init__(self) -> None:
        config = self.config
        self.optimizer = reference_optimizer(self.model, config)
        self.random = OwnRandomStream(self.seed)
        self.timer = StepTimer()

    def train_step(self, step: int) -> None:
        config = self.config
        with self.timer, self.random:
            reference_step(self.model, self.optimizer, config, step, lambda: sum(
                total / max(1, count) for term, (total, count) in self.losses(self.model, self.draw(step)).items()
                if not term.startswith(ACCURACY)))

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Each term's mean loss per target over the validation batches."""
        self.model.eval()
        sums: dict[str, list[float]] = {}
        for batch in self.validation():
            for term, (total, count) in self.losses(self.model, batch).items():
                tally = sums.setdefault(term, [0.0, 0])
                tally[0] += total.item()
                tally[1] += count
        return {term: total / max(1, count) for term, (total, count) in sums.items()}


def from_plm_weights(model: nn.Module, hf_class: type, dropout: dict[str, float]) -> nn.Module:
    """transformers' ``hf_class`` holding plm ``model``'s weights (through plm's Hugging Face export)."""
    with tempfile.TemporaryDirectory() as directory:
        save_hf(model, directory)
        return hf_class.from_pretrained(directory, attn_implementation="sdpa", **dropout)


# The rows: what each side's curve reads, and how the reference is built ---------------------------------


@dataclass(frozen=True)
class PretrainRow:
    name: str  # the preset, and the --rows key
    title: str
    metric: str
    reference_name: str
    terms: tuple[str, ...]  # the loss terms whose mean per target is the curve (several: their average)
    build_reference: Callable[[Trainer, int], Reference]
    analysis: Callable[[Trainer, Reference], str] | None = None  # more for the row's note, after training


def gpt2_reference(trainer: Trainer, seed: int) -> Reference:
    from transformers import GPT2LMHeadModel

    config = trainer.model.config
    model = from_plm_weights(trainer.model, GPT2LMHeadModel, {
        "resid_pdrop": config.dropout, "embd_pdrop": config.embedding_dropout, "attn_pdrop": config.attention_dropout})
    objective = trainer.objective

    def losses(model: nn.Module, batch: Batch) -> Sums:
        tokens = batch["tokens"]  # (B, T + 1)
        targets = batch.get("targets", tokens[:, 1:])  # a validation window's context is -100: not scored
        logits = model(tokens[:, :-1]).logits
        return {"lm": (F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum"),
                       int((targets != -100).sum()))}

    return Reference(model, losses, lambda step: objective.batch(step, 0), objective.validation_batches,
                     trainer.config, seed)


def bert_reference(trainer: Trainer, seed: int) -> Reference:
    from transformers import BertForPreTraining

    config, objective = trainer.model.config, trainer.objective
    if objective.pair_task != "nsp":
        raise SystemExit(f"the reference is BertForPreTraining (MLM + NSP); plm's recipe trains {objective.pair_task}")
    model = from_plm_weights(trainer.model, BertForPreTraining, {
        "hidden_dropout_prob": config.dropout, "attention_probs_dropout_prob": config.attention_dropout})

    def losses(model: nn.Module, batch: Batch) -> Sums:
        output = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       token_type_ids=batch["token_type_ids"])
        labels = batch["labels"]  # -100 except at the masked positions
        mlm = F.cross_entropy(output.prediction_logits.flatten(0, 1), labels.flatten(), reduction="sum")
        nsp = F.cross_entropy(output.seq_relationship_logits, batch["pair_labels"], reduction="sum")
        return {"mlm": (mlm, int((labels != -100).sum())), "nsp": (nsp, len(labels))}

    return Reference(model, losses, lambda step: objective.batch(step, 0), objective.validation_batches,
                     trainer.config, seed)


def albert_reference(trainer: Trainer, seed: int) -> Reference:
    from transformers import AlbertForPreTraining

    if trainer.objective.pair_task != "sop":
        raise SystemExit(f"the reference is AlbertForPreTraining (MLM + SOP); plm's recipe trains "
                         f"{trainer.objective.pair_task}")
    config, objective = trainer.model.config, trainer.objective
    model = from_plm_weights(trainer.model, AlbertForPreTraining, {
        "hidden_dropout_prob": config.dropout, "attention_probs_dropout_prob": config.attention_dropout,
        "classifier_dropout_prob": config.dropout})

    def losses(model: nn.Module, batch: Batch) -> Sums:
        output = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       token_type_ids=batch["token_type_ids"])
        labels, pairs = batch["labels"], batch["pair_labels"]  # labels: -100 except at the masked positions
        mlm = F.cross_entropy(output.prediction_logits.flatten(0, 1), labels.flatten(), reduction="sum")
        sop = F.cross_entropy(output.sop_logits, pairs, reduction="sum")
        masked = labels != -100
        hits = (output.prediction_logits.argmax(-1) == labels)[masked].sum()
        return {"mlm": (mlm, int(masked.sum())), "sop": (sop, len(labels)),
                "accuracy_mlm": (hits.float(), int(masked.sum())),
                "accuracy_sop": ((output.sop_logits.argmax(-1) == pairs).sum().float(), len(labels))}

    return Reference(model, losses, lambda step: objective.batch(step, 0), objective.validation_batches,
                     trainer.config, seed)


def vocabulary_ids(objective: BiLMObjective, blocks: torch.Tensor) -> Batch:
    """Type ids (B, T + 2) -> the middle T words and both directions' targets, as vocabulary ids (B, T).

    The word-level reference reads these where plm's ELMo reads the characters of the same words.
    """
    ids = torch.from_numpy(objective.streams.word_ids)[blocks.long()]  # <UNK>'s id for a word outside the vocabulary
    return {"words": ids[:, 1:-1], "next_words": ids[:, 2:], "previous_words": ids[:, :-2]}


def validation_blocks(objective: BiLMObjective) -> Iterator[torch.Tensor]:
    for start in range(0, len(objective.validation), objective.batch_size):
        yield objective.validation[start : start + objective.batch_size]


def elmo_reference(trainer: Trainer, seed: int) -> Reference:
    config, objective = trainer.model.config, trainer.objective
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = WordBiLM(config.vocab_size, config.projection_dim, config.lstm_dim, config.layers, config.dropout)

    def validation() -> Iterator[Batch]:
        return (vocabulary_ids(objective, blocks) for blocks in validation_blocks(objective))

    def losses(model: nn.Module, batch: Batch) -> Sums:
        return model(batch["words"], batch["next_words"], batch["previous_words"])

    return Reference(model, losses, lambda step: vocabulary_ids(objective, objective.sampler.batch(step, 0)),
                     validation, trainer.config, seed)


@torch.no_grad()
def after_rare_words(trainer: Trainer, reference: Reference) -> str:
    """Validation NLL (both directions) at the words outside the vocabulary: there the reference reads <UNK>,
    plm's char-CNN the word's spelling, and the LMs predict the next (forward) and previous (backward) word."""
    objective, ours, theirs = trainer.objective, trainer.model.eval(), reference.model.eval()
    unknown = trainer.tokenizer.backend.get_vocab()[UNKNOWN]
    sums, rare_words, words = [0.0, 0.0], 0, 0
    for blocks in validation_blocks(objective):
        chars, ids = objective.examples(blocks)["chars"], vocabulary_ids(objective, blocks)
        rare = ids["words"] == unknown  # (B, T)
        output = ours(chars)
        states = ((output.forward[-1], output.backward[-1]), theirs.directions(ids["words"]))
        for index, (loss, (forward, backward)) in enumerate(zip((ours.word_loss, theirs.nll), states)):
            sums[index] += (loss(forward[rare][None], ids["next_words"][rare][None])
                            + loss(backward[rare][None], ids["previous_words"][rare][None])).item()
        rare_words, words = rare_words + int(rare.sum()), words + rare.numel()
    plm_loss, reference_loss = (total / max(1, 2 * rare_words) for total in sums)
    return (f"at the {rare_words / words:.1%} of validation words outside the vocabulary (read as <UNK> by the "
            f"reference) the mean NLL of both directions is plm {plm_loss:.3f}, reference {reference_loss:.3f}")


ROWS = (
    PretrainRow("gpt2-mini", "WikiText-2 gpt2-mini (clm)", "val perplexity", "transformers GPT2LMHeadModel",
                ("lm",), gpt2_reference),
    PretrainRow("bert-mini", "WikiText-2 bert-mini (mlm+nsp)", "MLM val perplexity", "transformers BertForPreTraining",
                ("mlm",), bert_reference),
    PretrainRow("albert-mini", "WikiText-2 albert-mini (mlm+sop)", "MLM val perplexity",
                "transformers AlbertForPreTraining", ("mlm",), albert_reference),
    PretrainRow("elmo-mini", "WikiText-2 elmo-mini (bilm)", "val perplexity (fwd, bwd mean)",
                "torch.nn word-level biLM", ("forward", "backward"), elmo_reference, after_rare_words),
)


# Running a row --------------------------------------------------------------------------------------------


def curve_point(row: PretrainRow, losses: dict[str, float]) -> float:
    return sum(losses[term] for term in row.terms) / len(row.terms)


def plm_losses(metrics: dict[str, float]) -> dict[str, float]:
    """The per-term validation losses in the Trainer's metrics (``val_loss_<term>``)."""
    return {key.removeprefix("val_loss_"): value for key, value in metrics.items() if key.startswith("val_loss_")}


def perplexities(row: PretrainRow, losses: dict[str, float]) -> str:
    return ", ".join(f"{term} {math.exp(losses[term]):.1f}" for term in row.terms)


class PairedRun:
    """Wraps plm's Trainer: times its optimizer steps, trains the reference on the same step after each,
    and evaluates both at ``evaluations`` points (and at step 0)."""

    def __init__(self, row: PretrainRow, trainer: Trainer, reference: Reference, evaluations: int) -> None:
        self.row, self.trainer, self.reference = row, trainer, reference
        self.timer = StepTimer()
        self.plm = Curve(f"plm {row.name}")
        self.ref = Curve(row.reference_name)
        self.last: tuple[dict[str, float], dict[str, float]] = ({}, {})
        every = max(1, trainer.config.steps // evaluations)
        trainer.config = dataclasses.replace(trainer.config, eval_every=every, save_every=trainer.config.steps,
                                             log_every=every, progress=False)
        self.optimizer_step, self.evaluate = trainer.optimizer_step, trainer.evaluate
        trainer.optimizer_step, trainer.evaluate = self.paired_step, self.paired_evaluate

    def paired_step(self, wrapped: nn.Module) -> tuple[dict[str, float], int]:
        step = self.trainer.step
        with self.timer:
            result = self.optimizer_step(wrapped)
        self.reference.train_step(step)
        return result

    def paired_evaluate(self, sample: bool = False) -> dict[str, float]:
        metrics = self.evaluate(sample)
        ours, theirs = plm_losses(metrics), self.reference.evaluate()
        step = self.trainer.step
        self.plm.record(step, curve_point(self.row, ours))
        self.ref.record(step, curve_point(self.row, theirs))
        self.last = (ours, theirs)
        accuracies = "".join(f"; {term} plm {metrics.get('val_' + term, float('nan')):.3f}, reference "
                             f"{theirs[term]:.3f}" for term in theirs if term.startswith(ACCURACY))
        print(f"  {self.row.name} step {step}: val loss plm {self.plm.val_loss[-1]:.4f}, reference "
              f"{self.ref.val_loss[-1]:.4f} (perplexity plm {perplexities(self.row, ours)}; "
              f"reference {perplexities(self.row, theirs)}){accuracies}", flush=True)
        return metrics

    def run(self) -> None:
        self.paired_evaluate()  # step 0: the same weights give the same loss where the reference is plm's model
        self.trainer.train(overwrite=True)
        self.plm.seconds_per_step, self.ref.seconds_per_step = self.timer.per_step, self.reference.timer.per_step


def run_row(row: PretrainRow, settings: Settings) -> Row:
    steps = settings.steps(STEPS[row.name])
    wikitext = settings.data / "wikitext-2"
    setup = PretrainSetup(model=row.name, train_files=(str(wikitext / "valid.txt"),),
                          validation_files=(str(wikitext / "test.txt"),))
    training = TrainingConfig(steps=steps, seed=settings.seed, device="cpu", progress=False)
    out = settings.out / GROUP / row.name
    trainer, _ = prepare(setup, training, out, overwrite=True)
    config = trainer.config
    if config.grad_accum != 1:
        raise SystemExit("the reference loop takes one micro-batch a step; plm's recipe now accumulates")
    print(f"{row.name}: {steps} steps of {config.optimizer} lr {config.lr} ({config.schedule}, warmup {config.warmup}, "
          f"min {config.min_lr}), batch {setup.batch_size}, {trainer.model.num_parameters():,} parameters", flush=True)
    reference = row.build_reference(trainer, settings.seed + 1)
    paired = PairedRun(row, trainer, reference, EVALUATIONS)
    paired.run()
    (ours, theirs), curves = paired.last, (paired.plm, paired.ref)
    for curve, losses in zip(curves, (ours, theirs)):
        curve.metric = sum(math.exp(losses[term]) for term in row.terms) / len(row.terms)
    print(f"{row.name}: {row.metric} plm {paired.plm.metric:.2f}, reference {paired.ref.metric:.2f}; s/step plm "
          f"{paired.plm.seconds_per_step:.3f}, reference {paired.ref.seconds_per_step:.3f}", flush=True)
    note = (f"{steps} steps, batch {setup.batch_size}; train valid.txt, validate on the start of test.txt; "
            f"perplexity plm {perplexities(row, ours)}, reference {perplexities(row, theirs)}")
    if row.analysis is not None:
        note += "; " + row.analysis(trainer, reference)
        print(f"{row.name}: {note}", flush=True)
    # the loss verdict's 0.02 nats of noise, carried to the perplexity
    noise = paired.ref.metric * (math.exp(0.02) - 1)
    return Row(task=row.title, metric=row.metric, plm=paired.plm, reference=paired.ref, higher_is_better=False,
               note=note, metric_noise=noise)


def run(settings: Settings) -> list[Row]:
    """Every pre-training row ``settings`` asks for, in order."""
    torch.set_num_threads(settings.threads)
    quiet_transformers()
    return [run_row(row, settings) for row in ROWS if settings.wants(row.name)]



if __name__ == "__main__":
    group_main(GROUP, __doc__.splitlines()[0], [row.name for row in ROWS], run)
