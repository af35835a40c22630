"""The pre-training recipe: corpus -> tokenizer -> examples -> model -> trainer.

Every step has a default that works with no input at all (the embedded corpus, a
tokenizer trained on it, a small model of the family, the family's own objective),
and each can be replaced: the user's files, an existing tokenizer, any preset or a
saved model to continue, another objective.

The family decides the defaults the papers use:

| family  | tokenizer (trained)       | objective | optimizer | masking     |
| ------- | ------------------------- | --------- | --------- | ----------- |
| gpt     | byte-level BPE            | clm       | AdamW     |             |
| bert    | WordPiece                 | mlm+nsp   | AdamW     | tokens      |
| albert  | Unigram (SentencePiece)   | mlm+sop   | LAMB      | n-grams <= 3 |
| deberta | WordPiece                 | mlm       | AdamW     | tokens      |
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from plm.checkpoint import CHECKPOINT_DIR, CONFIG_FILE, has_checkpoint, load_model, model_directory
from plm.data.corpus import Corpus, default_corpus, read_corpus
from plm.data.tokens import cached_token_ids
from plm.device import resolve_device
from plm.errors import PLMError
from plm.files import cache_dir, read_json
from plm.models import PRESETS, Encoder, PretrainedModel, from_config, model_class, preset_config, with_heads
from plm.objectives import CausalLMObjective, MaskedLMObjective, Objective
from plm.tokenizer import Tokenizer
from plm.training.distributed import Distributed, setup_distributed, teardown_distributed
from plm.training.trainer import Trainer, TrainingConfig

# `--model bert` and friends: a family name stands for its small CPU preset.
FAMILY_PRESETS = {"gpt": "gpt2-mini", "bert": "bert-mini", "albert": "albert-mini", "deberta": "deberta-mini"}
TOKENIZER_DIR = "tokenizer"
OBJECTIVES = ("auto", "clm", "mlm", "mlm+nsp", "mlm+sop")
DEFAULT_OBJECTIVES = {"gpt": "clm", "bert": "mlm+nsp", "albert": "mlm+sop", "deberta": "mlm"}


@dataclass(frozen=True)
class PretrainSetup:
    """What a run trains: the model (or preset), its data, objective and batch shape."""

    model: str = "gpt2-mini"
    train_files: tuple[str, ...] = ()
    validation_files: tuple[str, ...] = ()
    tokenizer: str | None = None
    vocab_size: int = 8192
    objective: str = "auto"
    whole_word: bool = False
    max_ngram: int | None = None  # None: 3 for ALBERT (its n-gram masking), else 1
    block_size: int | None = None  # None: the context for GPT, 128 for encoders
    batch_size: int = 16
    validation_blocks: int = 64
    dropout: float | None = None  # None: the preset's own


def check_model_name(name: str) -> str:
    """The preset ``name`` stands for, or ``name`` itself when it is a model directory."""
    name = FAMILY_PRESETS.get(name, name)
    if name not in PRESETS and not Path(name).exists():
        families = ", ".join(FAMILY_PRESETS)
        raise PLMError(f"unknown preset {name!r} and no such model directory; the presets are: {families}, {', '.join(PRESETS)}")
    return name


def load_corpus(setup: PretrainSetup) -> Corpus:
    if setup.train_files:
        return read_corpus(list(setup.train_files), list(setup.validation_files) or None)
    if setup.validation_files:
        raise PLMError("--validation needs --train files as well")
    return default_corpus()


def model_family(name: str) -> str:
    """The family of a preset or of a saved plm model directory."""
    if name in PRESETS:
        return model_class(PRESETS[name]).family
    family = read_json(model_directory(name) / CONFIG_FILE).get("family")
    if family not in DEFAULT_OBJECTIVES:
        raise PLMError(f"{name}: not a plm model directory (convert a Hugging Face one with plm convert first)")
    return family


def train_tokenizer(family: str, corpus: Corpus, vocab_size: int) -> Tokenizer:
    """The tokenizer each paper used, trained on the training documents."""
    texts = (document.text for document in corpus.train)
    if family == "gpt":
        return Tokenizer.train_bpe(texts, vocab_size=vocab_size)
    if family == "albert":
        return Tokenizer.train_unigram(texts, vocab_size=vocab_size)
    return Tokenizer.train_wordpiece(texts, vocab_size=vocab_size)


def resolve_tokenizer(
    setup: PretrainSetup, model: str, family: str, corpus: Corpus, out: Path, resume: bool, world: Distributed
) -> Tokenizer:
    """The run's own tokenizer when resuming, else the one given, the model's, or a new one.

    A new one is trained by the first process only and saved in ``out/tokenizer``;
    the others load it, since Unigram training is not deterministic across processes.
    """
    if resume and (out / CHECKPOINT_DIR / "tokenizer.json").is_file():
        return Tokenizer.load(out / CHECKPOINT_DIR)
    if setup.tokenizer:
        return Tokenizer.load(setup.tokenizer)
    if model not in PRESETS and (model_directory(model) / "tokenizer.json").is_file():
        return Tokenizer.load(model_directory(model))
    if world.is_main:
        train_tokenizer(family, corpus, setup.vocab_size).save(out / TOKENIZER_DIR)
    world.barrier()
    return Tokenizer.load(out / TOKENIZER_DIR)


def heads_for(objective: str) -> tuple[str, ...]:
    return tuple(objective.split("+")) if objective != "clm" else ()


def build_model(setup: PretrainSetup, model: str, objective: str, tokenizer: Tokenizer) -> PretrainedModel:
    """A fresh preset sized to the tokenizer with the objective's heads, or a saved model to continue."""
    if model in PRESETS:
        config = preset_config(model, vocab_size=len(tokenizer))
        if setup.dropout is not None:  # every dropout rate of the family: embeddings, attention, residuals, heads
            rates = {f.name: setup.dropout for f in dataclasses.fields(config) if f.name.endswith("dropout")}
            config = dataclasses.replace(config, **rates)
        if objective != "clm":
            config = with_heads(config, *heads_for(objective))
            if "+" in objective and not config.segments:  # NSP/SOP tell A from B by segment (DeBERTa has none)
                config = dataclasses.replace(config, segments=2)
        return from_config(config)
    loaded = load_model(model)
    if loaded.config.vocab_size < len(tokenizer):
        raise PLMError(
            f"{model}: the model has {loaded.config.vocab_size} embeddings but the tokenizer {len(tokenizer)} tokens"
        )
    if isinstance(loaded, Encoder) and set(loaded.config.pretraining_heads) != set(heads_for(objective)):
        have = "+".join(loaded.config.pretraining_heads) or "none"
        raise PLMError(f"{model}: the model's pretraining heads are {have}; --objective {objective} needs {objective}")
    return loaded


def build_objective(
    setup: PretrainSetup, model: PretrainedModel, family: str, objective: str, corpus: Corpus, tokenizer: Tokenizer, seed: int
) -> Objective:
    context = model.config.context_length
    block_size = setup.block_size or (context if objective == "clm" else min(128, context))
    if block_size > context:
        raise PLMError(f"--block-size {block_size} exceeds the model's context of {context} tokens")
    if objective == "clm":
        ids_cache = cache_dir() / "token-ids"
        train_ids = cached_token_ids(corpus.train, tokenizer, ids_cache, "train")
        validation_ids = cached_token_ids(corpus.validation, tokenizer, ids_cache, "validation")
        return CausalLMObjective(train_ids, validation_ids, block_size, setup.batch_size, seed, setup.validation_blocks)
    max_ngram = setup.max_ngram or (3 if family == "albert" else 1)
    pair_task = objective.split("+")[1] if "+" in objective else "none"
    return MaskedLMObjective(
        corpus.train,
        corpus.validation,
        tokenizer,
        max_length=block_size,
        batch_size=setup.batch_size,
        pair_task=pair_task,
        whole_word=setup.whole_word,
        max_ngram=max_ngram,
        seed=seed,
        validation_batches_max=max(1, setup.validation_blocks // setup.batch_size),
    )


def prepare(
    setup: PretrainSetup,
    training: TrainingConfig,
    out: str | Path,
    resume: bool = False,
) -> tuple[Trainer, Tokenizer]:
    """Build the trainer for ``setup`` (without training), so callers can evaluate first."""
    out = Path(out)
    model_name = check_model_name(setup.model)
    if resume and not has_checkpoint(out):
        raise PLMError(f"{out}: no checkpoint to resume from (drop --resume to start a new run)")
    if setup.objective not in OBJECTIVES:
        raise PLMError(f"unknown objective {setup.objective!r}; choose one of {', '.join(OBJECTIVES)}")
    family = model_family(model_name)
    objective = DEFAULT_OBJECTIVES[family] if setup.objective == "auto" else setup.objective
    if (family == "gpt") != (objective == "clm"):
        raise PLMError(f"--objective {objective} does not fit a {family} model (GPT: clm; encoders: mlm, mlm+nsp, mlm+sop)")
    corpus = load_corpus(setup)
    world = setup_distributed(resolve_device(training.device))
    tokenizer = resolve_tokenizer(setup, model_name, family, corpus, out, resume, world)
    torch.manual_seed(training.seed)
    model = build_model(setup, model_name, objective, tokenizer)
    built = build_objective(setup, model, family, objective, corpus, tokenizer, training.seed)
    if training.optimizer == "auto":
        training = dataclasses.replace(training, optimizer="lamb" if family == "albert" else "adamw")
    return Trainer(model, built, training, out, tokenizer, world), tokenizer


def pretrain(
    setup: PretrainSetup = PretrainSetup(),
    training: TrainingConfig = TrainingConfig(),
    out: str | Path = "runs/pretrain",
    resume: bool = False,
) -> tuple[PretrainedModel, Tokenizer, dict[str, float]]:
    """Pre-train with the family's objective; returns the model, tokenizer and last metrics."""
    trainer, tokenizer = prepare(setup, training, out, resume)
    try:
        metrics = trainer.train(resume=resume)
    finally:
        teardown_distributed()
    return trainer.model, tokenizer, metrics
