"""BERT: a post-LN Transformer encoder pretrained with masked-token and next-sentence prediction.

Everything BERT is lives in [`plm.models.encoder`][plm.models.encoder] (its defaults are BERT's:
learned absolute positions, segment embeddings, exact GELU, LayerNorm eps 1e-12,
dropout 0.1, a tanh pooler over [CLS]) and [`plm.models.pretraining_heads`][plm.models.pretraining_heads] (the MLM head
tied to the word embeddings, the NSP classifier). This module names the family and its sizes: BERT-base L=12, H=768,
A=12 (110M) and BERT-large L=24, H=1024, A=16 (340M).
"""

from __future__ import annotations

from dataclasses import dataclass

from plm.models.encoder import Encoder, EncoderConfig
from plm.models.recipe import Hyperparameters, PaperScale, PretrainingRecipe


@dataclass(frozen=True)
class BertConfig(EncoderConfig):
    """BERT-base by default; see [`EncoderConfig`][plm.models.encoder.EncoderConfig] for the fields."""


PRESETS = {
    "bert-base": BertConfig(),
    "bert-large": BertConfig(dim=1024, layers=24, heads=16, ffn_dim=4096),
    # Small ones for CPU work; the vocabulary follows the tokenizer they are trained with.
    "bert-mini": BertConfig(vocab_size=8192, context_length=256, dim=256, layers=4, heads=4, ffn_dim=1024),
    "bert-micro": BertConfig(vocab_size=512, context_length=64, dim=32, layers=2, heads=2, ffn_dim=128),
}

RECIPE = PretrainingRecipe(
    preset="bert-mini",
    tokenizer="wordpiece",
    objective="mlm+nsp",
    objectives=("mlm", "mlm+nsp", "mlm+sop"),
    block_size=128,  # BERT trained 90% of its steps on 128-token sequences
    hyperparameters=Hyperparameters(lr=6e-4, min_lr=0.0, warmup=100, schedule="linear", betas=(0.9, 0.999), eps=1e-6),
    # BERT: Adam with lr 1e-4, beta1 0.9, beta2 0.999, L2 weight decay 0.01, warmup over the first 10,000
    # steps and linear decay (eps 1e-6 is the released code's).
    paper=Hyperparameters(lr=1e-4, min_lr=0.0, warmup=10_000, schedule="linear", betas=(0.9, 0.999), eps=1e-6),
    source="BERT (Devlin et al., 2019) appendix A.2",
    # Seed 000 line 551: "128k words/batch * 1M steps", which appendix A.2 gives as 256 sequences x 512 tokens
    # (256 x 512 = 131,072) for 1,000,000 steps, 90% of them on 128-token sequences (attention is quadratic in
    # the length) and the last 10% at 512, to learn the positions beyond 128.
    paper_scale=PaperScale(batch_size=256, block_size=512, steps=1_000_000, short_block_size=128,
                           short_fraction=0.9, source="BERT appendix A.2"),
)


class Bert(Encoder):
    """BERT: the encoder of [`plm.models.encoder`][plm.models.encoder] with BERT's config (family ``bert``)."""
    family = "bert"
    config_class = BertConfig
