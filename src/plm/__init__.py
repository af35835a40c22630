"""plm: the pretrained-language-model lineage, from scratch on PyTorch.

```python
import plm
model = plm.from_preset("gpt2-mini")            # a fresh model from a named preset
model = plm.load("runs/demo")                   # a saved model, a training run or a Hugging Face directory
model, tokenizer = plm.load_pretrained("runs/demo")   # the same, with the tokenizer beside it
out = model(input_ids, attention_mask)          # out.logits: (batch, time, vocab)
ids = model.generate(input_ids, max_new_tokens=20)
bert = plm.from_preset("bert-base", pretraining_heads=("mlm", "nsp"))
out = bert(input_ids, attention_mask, token_type_ids)   # .last_hidden_state, .logits, .pair_logits
classifier = plm.task_model(bert, "classify", labels=3)  # out.logits: (batch, 3)
fast = plm.quantize(plm.load("runs/demo"), "int8")   # int8 weights for CPU inference
```
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _installed_version

from plm.apps.perplexity import perplexity
from plm.apps.text_pipelines import embed_texts, file_perplexity, fill_mask, generate_text
from plm.cpu.int8 import quantize
from plm.decoding.generation import generate
from plm.errors import PLMError
from plm.hf import save_hf
from plm.loading import load, load_pretrained
from plm.models import PRESETS, from_config, from_preset, with_heads
from plm.models.pretraining_heads import sentence_embeddings
from plm.storage.checkpoint import save_model as save
from plm.tasks import TaskModel, task_model
from plm.tokenization.tokenizer import Tokenizer
from plm.training.pretrain import PretrainSetup, pretrain
from plm.training.trainer import Trainer, TrainingConfig

try:  # the version is pyproject.toml's, as the installed package's metadata holds it
    __version__ = _installed_version("plm")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "PRESETS",
    "PLMError",
    "PretrainSetup",
    "Tokenizer",
    "TaskModel",
    "Trainer",
    "TrainingConfig",
    "embed_texts",
    "file_perplexity",
    "fill_mask",
    "from_config",
    "from_preset",
    "generate",
    "generate_text",
    "load",
    "load_pretrained",
    "perplexity",
    "pretrain",
    "quantize",
    "save",
    "save_hf",
    "task_model",
    "sentence_embeddings",
    "with_heads",
]
