"""plm: the pretrained-language-model lineage, from scratch on PyTorch.

    import plm
    model = plm.from_preset("gpt2-mini")            # a fresh model from a named preset
    model = plm.load("runs/demo")                   # a saved model or a training run
    model = plm.load_hf("path/to/hf-gpt2")          # a Hugging Face checkpoint
    out = model(input_ids, attention_mask)          # out.logits: (batch, time, vocab)
    ids = model.generate(input_ids, max_new_tokens=20)
"""

from plm.checkpoint import load_model as load
from plm.checkpoint import save_model as save
from plm.errors import PLMError
from plm.evaluation import perplexity
from plm.generation import generate
from plm.hf import load_hf, save_hf
from plm.models import PRESETS, from_config, from_preset
from plm.text import file_perplexity, generate_text
from plm.tokenizer import Tokenizer
from plm.training.pretrain import PretrainSetup, pretrain
from plm.training.trainer import Trainer, TrainingConfig

__all__ = [
    "PRESETS",
    "PLMError",
    "PretrainSetup",
    "Tokenizer",
    "Trainer",
    "TrainingConfig",
    "file_perplexity",
    "from_config",
    "from_preset",
    "generate",
    "generate_text",
    "load",
    "load_hf",
    "perplexity",
    "pretrain",
    "save",
    "save_hf",
]
