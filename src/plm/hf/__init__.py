"""Hugging Face checkpoints in and out: ``load_hf(directory)`` and ``save_hf(model, directory)``.

Each family with a Hugging Face counterpart has its converter in a module here,
registered on import: ``gpt`` reads and writes ``gpt2`` and ``openai-gpt``.
"""

from plm.hf.io import BY_FAMILY, BY_MODEL_TYPE, Converter, HFWeights, load_hf, register, save_hf
from plm.hf import gpt  # noqa: F401,E402  (registers its converter)
from plm.hf import albert, bert  # noqa: F401,E402  (register their converters)
from plm.hf import deberta  # noqa: F401,E402  (registers its converter)

__all__ = ["BY_FAMILY", "BY_MODEL_TYPE", "Converter", "HFWeights", "load_hf", "register", "save_hf"]
