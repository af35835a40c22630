"""The published sizes' presets, shape by shape, against the seeds and the released checkpoints' configs.

Parameter counts (tests/core/test_core.py, tests/models/test_encoders.py) cannot see the number of attention heads:
splitting H into more or fewer heads keeps every weight's shape. These tests hold the heads (and the rest of each
shape) to numbers written here, never to numbers plm produced.
"""

from __future__ import annotations

import pytest

from plm.models import preset_config

# (layers, hidden, heads, feed-forward) of each published size.
SHAPES = {
    # Seed 000 (GPT-2's section 3 table): 117M 12/768, 345M 24/1024, 762M 36/1280, 1542M 48/1600 (layers, d_model).
    # Heads and the 4H feed-forward: the released openai-community/gpt2{,-medium,-large,-xl} config.json
    # (n_head 12, 16, 20, 25; n_inner null = 4 * n_embd).
    "gpt2": (12, 768, 12, 3072),
    "gpt2-medium": (24, 1024, 16, 4096),
    "gpt2-large": (36, 1280, 20, 5120),
    "gpt2-xl": (48, 1600, 25, 6400),
    # Seed 000 (GPT-1): a 12-layer decoder, 768-dim states, 12 heads, 3072-dim feed-forward.
    "gpt1": (12, 768, 12, 3072),
    # Seed 000 (BERT, lines 345-346): BERT_base L=12, H=768, A=12; BERT_large L=24, H=1024, A=16; d_ff = 4H.
    "bert-base": (12, 768, 12, 3072),
    "bert-large": (24, 1024, 16, 4096),
    # Seed 002 (ALBERT, lines 162-166): base H=768 12 layers, large H=1024 24, xlarge H=2048 24, xxlarge H=4096 12.
    # Heads: the released albert-*-v2 config.json (num_attention_heads 12, 16, 16, 64; intermediate_size 4H).
    "albert-base": (12, 768, 12, 3072),
    "albert-large": (24, 1024, 16, 4096),
    "albert-xlarge": (24, 2048, 16, 8192),
    "albert-xxlarge": (12, 4096, 64, 16384),
    # DeBERTa-base and -large: BERT's shapes (the paper's section 5.1 / 5.2; microsoft/deberta-{base,large} configs).
    "deberta-base": (12, 768, 12, 3072),
    "deberta-large": (24, 1024, 16, 4096),
}


@pytest.mark.parametrize("name", list(SHAPES))
def test_published_presets_have_the_published_shapes(name):
    config = preset_config(name)
    assert (config.layers, config.dim, config.heads, config.ffn_dim) == SHAPES[name]


def test_gpt2_presets_have_the_vocabulary_and_context_of_the_seed():
    # Seed 000 (GPT-2 section 2.3): the vocabulary grew to 50,257 and the context from 512 to 1024 tokens.
    for name in ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"):
        config = preset_config(name)
        assert (config.vocab_size, config.context_length) == (50_257, 1024), name
    # GPT-1: 40,478 BPE tokens (its paper's section 4.1), 512-token context (seed 000: "512~1024").
    gpt1 = preset_config("gpt1")
    assert (gpt1.vocab_size, gpt1.context_length, gpt1.norm_first, gpt1.scaled_residual_init) == (40_478, 512, False,
                                                                                                 False)
