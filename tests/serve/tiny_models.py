"""The tiny random models the server tests serve, saved as plm saves them."""

from __future__ import annotations

from pathlib import Path

import torch

import plm
from plm.models import PretrainedModel, from_preset
from plm.tokenization.tokenizer import Tokenizer
from tests.conftest import synthetic_text


def save_gpt_and_bert(root: Path, bert_heads: tuple[str, ...] = ()) -> tuple[PretrainedModel, Tokenizer]:
    """A GPT (context 64) in ``root/gpt`` and a BERT in ``root/bert``, each with its tokenizer.

    The GPT's weights are drawn far from uniform (std 0.3): clear-cut greedy choices, continuations that vary.

    Returns:
        The BERT and its tokenizer, for models built on it.
    """
    torch.manual_seed(0)
    text = synthetic_text(50)
    bpe = Tokenizer.train_bpe([text], 300)
    gpt = from_preset("gpt2-micro", vocab_size=len(bpe))
    gpt.init_weights(std=0.3)
    plm.save(gpt, root / "gpt", bpe)
    wordpiece = Tokenizer.train_wordpiece([text], 200)
    bert = from_preset("bert-micro", vocab_size=len(wordpiece), pretraining_heads=bert_heads)
    plm.save(bert, root / "bert", wordpiece)
    return bert, wordpiece
