"""Sequence-to-sequence rows of the quality suite: plm's encoder-decoders against torch.nn references, Multi30k de->en.

Each row trains plm's model the way ``plm seq2seq train`` does (its family's default
recipe, through ``plm.training.train_seq2seq.prepare_seq2seq``) and a reference written here
on plain ``torch.nn`` with its textbook recipe, on the same joint BPE (trained once on
the training pairs), the same batches (``Seq2SeqObjective.batch(step, 0)``, which the
trainer draws too) and the same number of steps, both models initialised after
``torch.manual_seed(seed)``. Both are scored the same way: the plain negative
log-likelihood per target token (no label smoothing) on the validation batches every
tenth of the run, and greedy sacreBLEU (13a, detokenised) on test_2016_flickr.

The references:

- ``rnn``: Cho et al. (2014) as tutorials write it: the encoder's final state c is read at
  every decoder step beside the previous word, and the output layer reads [s_t; c; y_{t-1}];
- ``rnn-bahdanau``: Bahdanau et al. (2015): s_{t-1} scores the source states additively,
  the context c_t is read with y_{t-1}, the output layer reads [s_t; c_t; y_{t-1}];
- ``rnn-luong``: Luong et al. (2015), general score s_t^T W h_j, attentional state
  h~_t = tanh(W_c [c_t; s_t]) fed back as input at step t + 1;
- ``transformer-small``: bench_seq2seq's same-shape ``torch.nn.Transformer`` model, with the
  preset's dropout and the source padding masked.

The RNN references share one encoder: the bidirectional LSTM of plm's preset (same
layers and sizes), whose two directions' final states, side by side, start the decoder
(OpenNMT's bidirectional encoder); PyTorch's default initialisation. They train with
Adam 1e-3, constant, plain cross entropy, gradients clipped at norm 1 (as common tutorials
do). The Transformer reference trains as the paper: Adam (0.9, 0.98, 1e-9), label smoothing
0.1, no clipping, on the inverse-sqrt schedule lr = peak min(n / warmup, sqrt(warmup / n))
with the peak 1e-3 and warmup 200 of plm's CPU recipe (written here, not read from plm).

    python benchmarks/quality/seq2seq.py --scale 0.1 --threads 1
"""

from __future__ import annotations

import math
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import sacrebleu
import torch
import torch.nn.functional as F
from torch import nn

HERE = Path(__file__).resolve().parent
for folder in (HERE, HERE.parent):  # common.py, and references.py
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from common import Curve, Row, Settings, StepTimer, group_main  # noqa: E402

from plm.data.sentence_pairs import SentencePair, Seq2SeqTokenizers, read_parallel, right_pad  # noqa: E402
from plm.models.recipe import TRANSLATION  # noqa: E402
from plm.objectives.teacher_forcing import Seq2SeqObjective  # noqa: E402
from plm.objectives.translation import translate  # noqa: E402
from plm.training.train_seq2seq import Seq2SeqSetup, prepare_seq2seq  # noqa: E402
from plm.training.trainer import TrainingConfig  # noqa: E402
from references import build_reference  # noqa: E402

GROUP = "seq2seq"
STEPS = {"rnn": 1000, "rnn-bahdanau": 600, "rnn-luong": 1500, "transformer-small": 800}  # at scale 1
# Luong past its alignment phase: around step 600 the attention starts to align and one seed is 0.2 nats from
# the next, plm ahead at one seed and behind at the other; by step 1,200 the curves have settled.
EVALUATIONS = 10  # validation points per run
VOCABULARY = 8000  # plm seq2seq train's default for the user's text
TEST_SENTENCES = 1000  # all of test_2016_flickr at scale 1; the first 100 at scale 0.1
MAX_LEN_A, MAX_LEN_B = 1.5, 10  # longest output: a * source length + b, plm translate's default


@dataclass(frozen=True)
class ReferenceRecipe:
    """How a reference trains: Adam, a schedule, clipping (0: none), label smoothing."""

    schedule: Callable[[int], float]
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    clip: float = 1.0
    label_smoothing: float = 0.0


def inverse_sqrt(peak: float, warmup: int) -> Callable[[int], float]:
    """The Transformer's d^-0.5 min(n^-0.5, n warmup^-1.5), n = step + 1, with its peak written as ``peak``."""
    return lambda step: peak * min((step + 1) / warmup, math.sqrt(warmup / (step + 1)))


RNN_RECIPE = ReferenceRecipe(schedule=lambda step: 1e-3)
TRANSFORMER_RECIPE = ReferenceRecipe(schedule=inverse_sqrt(1e-3, 200), betas=(0.9, 0.98), eps=1e-9, clip=0.0,
                                     label_smoothing=0.1)


# Training and scoring --------------------------------------------------------------------------------------


def logits_of(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """(B, T, V) teacher-forced logits of plm's model (a ModelOutput) or a reference (a tensor); same arguments."""
    output = model(batch["source_ids"], batch["decoder_input_ids"], batch["source_mask"])
    return getattr(output, "logits", output)


@torch.no_grad()
def validation_nll(model: nn.Module, objective: Seq2SeqObjective) -> float:
    """Plain negative log-likelihood per target token over the objective's validation batches."""
    model.eval()
    total, count = 0.0, 0
    for batch in objective.validation_batches():
        labels = batch["labels"].flatten()
        total += F.cross_entropy(logits_of(model, batch).flatten(0, 1).float(), labels,
                                 ignore_index=objective.target_pad, reduction="sum").item()
        count += int((labels != objective.target_pad).sum())
    model.train()
    return total / count


def evaluation_steps(steps: int) -> set[int]:
    every = max(1, steps // EVALUATIONS)
    return {step for step in range(every, steps + 1, every)} | {steps}


def train_plm(name: str, steps: int, files: dict[str, Path], tokenizer: Path, settings: Settings,
              out: Path) -> tuple[Curve, nn.Module, Seq2SeqObjective, Seq2SeqTokenizers]:
    """plm seq2seq train --model NAME --src .. --tgt .. --validation-src .. --validation-tgt .. --tokenizer ..
    --steps STEPS.

    The trainer is plm's own; its ``optimizer_step`` is timed and its ``evaluate`` also
    records the plain validation NLL, so the run is exactly the command's.
    """
    setup = Seq2SeqSetup(model=name, source=str(files["train.de"]), target=str(files["train.en"]),
                         validation_source=str(files["val.de"]), validation_target=str(files["val.en"]),
                         tokenizer=str(tokenizer), metric_examples=0)
    every = max(1, steps // EVALUATIONS)
    training = TrainingConfig(steps=steps, eval_every=every, save_every=steps, seed=settings.seed, progress=False)
    trainer, tokenizers = prepare_seq2seq(setup, training, out, overwrite=True)
    curve, timer = Curve(f"plm {name}"), StepTimer()
    curve.record(0, validation_nll(trainer.model, trainer.objective))
    optimizer_step, evaluate = trainer.optimizer_step, trainer.evaluate

    def timed_step(wrapped: nn.Module) -> tuple[dict[str, float], int]:
        with timer:
            return optimizer_step(wrapped)

    def evaluate_and_record(sample: bool = False) -> dict[str, float]:
        metrics = evaluate(sample)
        curve.record(trainer.step, validation_nll(trainer.model, trainer.objective))
        print(f"  plm {name} step {trainer.step}: val nll {curve.val_loss[-1]:.3f} "
              f"(plm's own: {', '.join(f'{k} {v:.3f}' for k, v in metrics.items() if k.startswith('val_'))})",
              flush=True)
        return metrics

    trainer.optimizer_step, trainer.evaluate = timed_step, evaluate_and_record
    trainer.train(overwrite=True)
    curve.seconds_per_step = timer.per_step
    return curve, trainer.model, trainer.objective, tokenizers


def train_reference(name: str, model: nn.Module, recipe: ReferenceRecipe, objective: Seq2SeqObjective,
                    steps: int, seed: int) -> Curve:
    """The textbook loop on the batches plm's trainer drew: objective.batch(step, 0) at step ``step``."""
    curve, timer = Curve(f"torch.nn {name}"), StepTimer()
    curve.record(0, validation_nll(model, objective))
    optimizer = torch.optim.Adam(model.parameters(), lr=recipe.schedule(0), betas=recipe.betas, eps=recipe.eps)
    evaluations = evaluation_steps(steps)
    torch.manual_seed(seed)  # dropout
    model.train()
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = recipe.schedule(step)
        with timer:
            batch = objective.batch(step, 0)
            loss = F.cross_entropy(logits_of(model, batch).flatten(0, 1), batch["labels"].flatten(),
                                   ignore_index=objective.target_pad, label_smoothing=recipe.label_smoothing)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if recipe.clip:
                nn.utils.clip_grad_norm_(model.parameters(), recipe.clip)
            optimizer.step()
        if step + 1 in evaluations:
            curve.record(step + 1, validation_nll(model, objective))
            print(f"  reference {name} step {step + 1}: val nll {curve.val_loss[-1]:.3f}", flush=True)
    curve.seconds_per_step = timer.per_step
    return curve


@torch.no_grad()
def greedy(model: nn.Module, tokenizers: Seq2SeqTokenizers, sentences: list[str], batch_size: int = 64) -> list[str]:
    """A reference's greedy translations: the likeliest next token until </s> or a * source length + b tokens."""
    model.eval()
    sources = tokenizers.encode_sources(sentences)
    bos, eos, pad = tokenizers.target.bos_id, tokenizers.target.eos_id, tokenizers.target.pad_id
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    translations = [""] * len(sources)
    for first in range(0, len(order), batch_size):
        rows = order[first : first + batch_size]
        source, mask = right_pad([sources[i] for i in rows], tokenizers.source.pad_id)
        limit = math.floor(MAX_LEN_A * mask.sum(1).max().item() + MAX_LEN_B)
        state = model.start(source, mask)
        prefix = torch.full((len(rows), 1), bos)
        finished = torch.zeros(len(rows), dtype=torch.bool)
        for _ in range(limit):
            logits, state = model.step(prefix, state)
            token = logits.argmax(-1).masked_fill(finished, pad)
            prefix = torch.cat([prefix, token[:, None]], 1)
            finished |= token == eos
            if finished.all():
                break
        for row, text in zip(rows, tokenizers.decode_targets(prefix[:, 1:].tolist())):
            translations[row] = text
    return translations


def bleu(hypotheses: list[str], pairs: list[SentencePair]) -> float:
    return sacrebleu.corpus_bleu(hypotheses, [[pair.target for pair in pairs]]).score


def run_row(name: str, files: dict[str, Path], tokenizer: Path, settings: Settings) -> Row:
    steps = settings.steps(STEPS[name])
    test = read_parallel(files["test_2016_flickr.de"], files["test_2016_flickr.en"])[: settings.steps(TEST_SENTENCES)]
    print(f"{name}: {steps} steps", flush=True)
    plm_curve, plm_model, objective, tokenizers = train_plm(name, steps, files, tokenizer, settings,
                                                            settings.out / GROUP / name)
    plm_curve.metric = bleu(translate(plm_model.eval(), tokenizers, [p.source for p in test], TRANSLATION),
                            test)
    torch.manual_seed(settings.seed)
    reference = build_reference(name, len(tokenizers.target))
    recipe = TRANSFORMER_RECIPE if name.startswith("transformer") else RNN_RECIPE
    reference_curve = train_reference(name, reference, recipe, objective, steps, settings.seed)
    reference_curve.metric = bleu(greedy(reference, tokenizers, [p.source for p in test]), test)
    print(f"{name}: BLEU plm {plm_curve.metric:.2f}, reference {reference_curve.metric:.2f}; s/step plm "
          f"{plm_curve.seconds_per_step:.3f}, reference {reference_curve.seconds_per_step:.3f}", flush=True)
    # BLEU's bootstrap standard error on a few hundred to 1,000 sentences is about half a point
    return Row(task=f"Multi30k de-en {name}", metric="BLEU", plm=plm_curve, reference=reference_curve,
               metric_noise=0.5,
               note=f"{steps} steps, greedy BLEU on the first {len(test)} sentences of test_2016_flickr")


def run(settings: Settings) -> list[Row]:
    """Every seq2seq row ``settings`` asks for, in order; the joint BPE is trained once for all."""
    torch.set_num_threads(settings.threads)
    folder = settings.data / "multi30k"
    files = {name: folder / name for name in ("train.de", "train.en", "val.de", "val.en", "test_2016_flickr.de",
                                              "test_2016_flickr.en")}
    names = [name for name in STEPS if settings.wants(name)]
    if not names:
        return []
    with tempfile.TemporaryDirectory() as tokenizer:
        pairs = read_parallel(files["train.de"], files["train.en"])
        Seq2SeqTokenizers.train(pairs, vocab_size=VOCABULARY).save(tokenizer)
        return [run_row(name, files, Path(tokenizer), settings) for name in names]



if __name__ == "__main__":
    group_main(GROUP, __doc__.splitlines()[0], list(STEPS), run)
