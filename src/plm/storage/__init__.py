"""What plm keeps on disk.

Model directories and training checkpoints (atomic, safetensors with checksums), FSDP's sharded
checkpoints, and the Hub's files. Opening any model directory, plm's or Hugging Face's, with its
tokenizer is [`plm.loading`][plm.loading]'s, a layer above this one, the Hugging Face formats and the tokenizers.
"""

from typing import TYPE_CHECKING

from plm.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from plm.storage.checkpoint import load_model, save_model

# Imported at first use: checkpoint imports the model families, and the data and the tokenizers, which write
# through plm.storage.atomic_files, import neither.
_EXPORTS = dict.fromkeys(("load_model", "save_model"), "plm.storage.checkpoint")

__all__ = ["load_model", "save_model"]


__getattr__ = lazy_getattr(globals(), _EXPORTS)
