"""The pre-training recipe: corpus -> tokenizer -> token ids -> model -> trainer.

Every step has a default that works with no input at all (the embedded corpus, a
byte-level BPE trained on it, a small GPT-2), and each can be replaced: the
user's files, an existing tokenizer, any preset or a saved model to continue.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from plm.checkpoint import CHECKPOINT_DIR, has_checkpoint, load_model, model_directory
from plm.data.corpus import Corpus, cache_dir, default_corpus, read_corpus
from plm.data.tokens import cached_token_ids
from plm.errors import PLMError
from plm.models import PRESETS, CausalLM, PretrainedModel, from_preset
from plm.objectives import CausalLMObjective
from plm.tokenizer import Tokenizer
from plm.training.distributed import teardown_distributed
from plm.training.trainer import Trainer, TrainingConfig


@dataclass(frozen=True)
class PretrainSetup:
    """What a run trains: the model (or preset), its data and the batch shape."""

    model: str = "gpt2-mini"
    train_files: tuple[str, ...] = ()
    validation_files: tuple[str, ...] = ()
    tokenizer: str | None = None
    vocab_size: int = 8192
    block_size: int | None = None
    batch_size: int = 16
    validation_blocks: int = 64
    dropout: float | None = None  # None: the preset's own


def check_model_name(name: str) -> None:
    if name not in PRESETS and not Path(name).exists():
        raise PLMError(f"unknown preset {name!r} and no such model directory; the presets are: {', '.join(PRESETS)}")


def load_corpus(setup: PretrainSetup) -> Corpus:
    if setup.train_files:
        return read_corpus(list(setup.train_files), list(setup.validation_files) or None)
    if setup.validation_files:
        raise PLMError("--validation needs --train files as well")
    return default_corpus()


def resolve_tokenizer(setup: PretrainSetup, corpus: Corpus, out: Path, resume: bool) -> Tokenizer:
    """The run's own tokenizer when resuming, else the one given, the model's, or a new BPE."""
    if resume and (out / CHECKPOINT_DIR / "tokenizer.json").is_file():
        return Tokenizer.load(out / CHECKPOINT_DIR)
    if setup.tokenizer:
        return Tokenizer.load(setup.tokenizer)
    if setup.model not in PRESETS and (model_directory(setup.model) / "tokenizer.json").is_file():
        return Tokenizer.load(model_directory(setup.model))
    texts = (document.text for document in corpus.train)
    return Tokenizer.train_bpe(texts, vocab_size=setup.vocab_size, show_progress=False)


def build_model(setup: PretrainSetup, tokenizer: Tokenizer) -> PretrainedModel:
    """A fresh preset sized to the tokenizer's vocabulary, or a saved model to continue."""
    if setup.model in PRESETS:
        overrides = {"vocab_size": len(tokenizer)}
        if setup.dropout is not None:
            rate = setup.dropout
            overrides |= {"dropout": rate, "attention_dropout": rate, "embedding_dropout": rate}
        return from_preset(setup.model, **overrides)
    model = load_model(setup.model)
    if model.config.vocab_size < len(tokenizer):
        raise PLMError(
            f"{setup.model}: the model has {model.config.vocab_size} embeddings but the tokenizer {len(tokenizer)} tokens"
        )
    return model


def prepare(
    setup: PretrainSetup,
    training: TrainingConfig,
    out: str | Path,
    resume: bool = False,
) -> tuple[Trainer, Tokenizer]:
    """Build the trainer for ``setup`` (without training), so callers can evaluate first."""
    out = Path(out)
    check_model_name(setup.model)
    if resume and not has_checkpoint(out):
        raise PLMError(f"{out}: no checkpoint to resume from (drop --resume to start a new run)")
    corpus = load_corpus(setup)
    tokenizer = resolve_tokenizer(setup, corpus, out, resume)
    torch.manual_seed(training.seed)
    model = build_model(setup, tokenizer)
    if not isinstance(model, CausalLM):
        raise PLMError(f"{setup.model}: a {model.family} model cannot be pre-trained as a causal language model")
    context = model.context_length()
    block_size = setup.block_size or context
    if block_size > context:
        raise PLMError(f"--block-size {block_size} exceeds the model's context of {context} tokens")
    ids_cache = cache_dir() / "token-ids"
    train_ids = cached_token_ids(corpus.train, tokenizer, ids_cache, "train")
    validation_ids = cached_token_ids(corpus.validation, tokenizer, ids_cache, "validation")
    objective = CausalLMObjective(
        train_ids,
        validation_ids,
        block_size,
        setup.batch_size,
        seed=training.seed,
        validation_blocks_max=setup.validation_blocks,
    )
    return Trainer(model, objective, training, out, tokenizer), tokenizer


def pretrain(
    setup: PretrainSetup = PretrainSetup(),
    training: TrainingConfig = TrainingConfig(),
    out: str | Path = "runs/pretrain",
    resume: bool = False,
) -> tuple[PretrainedModel, Tokenizer, dict[str, float]]:
    """Pre-train with the causal LM objective; returns the model, tokenizer and last metrics."""
    trainer, tokenizer = prepare(setup, training, out, resume)
    try:
        metrics = trainer.train(resume=resume)
    finally:
        teardown_distributed()
    return trainer.model, tokenizer, metrics

