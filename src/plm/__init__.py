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
from typing import TYPE_CHECKING

from plm.lazy_exports import lazy_getattr

if TYPE_CHECKING:
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

# Each name of the API and the module it lives in, imported at its first use: `import plm`, or a process that
# needs one small module of it (a prepare's worker, which encodes text), does not pay for PyTorch until it needs it.
_EXPORTS = {
    "perplexity": "plm.apps.perplexity",
    **dict.fromkeys(("embed_texts", "file_perplexity", "fill_mask", "generate_text"), "plm.apps.text_pipelines"),
    "quantize": "plm.cpu.int8",
    "generate": "plm.decoding.generation",
    "PLMError": "plm.errors",
    "save_hf": "plm.hf",
    **dict.fromkeys(("load", "load_pretrained"), "plm.loading"),
    **dict.fromkeys(("PRESETS", "from_config", "from_preset", "with_heads"), "plm.models"),
    "sentence_embeddings": "plm.models.pretraining_heads",
    "save": "plm.storage.checkpoint",
    **dict.fromkeys(("TaskModel", "task_model"), "plm.tasks"),
    "Tokenizer": "plm.tokenization.tokenizer",
    **dict.fromkeys(("PretrainSetup", "pretrain"), "plm.training.pretrain"),
    **dict.fromkeys(("Trainer", "TrainingConfig"), "plm.training.trainer"),
}
_RENAMED = {"save": "save_model"}  # the name in its module, where it differs

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


__getattr__ = lazy_getattr(globals(), _EXPORTS, _RENAMED)
