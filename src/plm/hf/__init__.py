"""Hugging Face checkpoints in and out: ``load_hf(directory)`` and ``save_hf(model, directory)``.

Each family with a Hugging Face counterpart has its converter in a module here,
registered on import: ``gpt`` reads and writes ``gpt2`` and ``openai-gpt``; ``marian`` and
``fsmt`` read the released translation models into the ``transformer`` family, and write it
back as the one its position table matches. ``task_models``
reads and writes the task heads' architectures (``BertForSequenceClassification``, ...)
on top of the family converters.
"""

from plm.hf import (  # noqa: F401,E402  (register their converters)
    albert,
    bert,
    deberta,  # noqa: F401,E402  (registers its converter)
    fsmt,  # noqa: F401,E402  (registers its converter)
    gpt,  # noqa: F401,E402  (registers its converter)
    marian,  # noqa: F401,E402  (registers its converter)
    task_models,  # noqa: F401,E402  (registers the task models' converter)
)
from plm.hf.io import BY_ARCHITECTURE, BY_FAMILY, BY_MODEL_TYPE, Converter, HFWeights, load_hf, register, save_hf

__all__ = ["BY_ARCHITECTURE", "BY_FAMILY", "BY_MODEL_TYPE", "Converter", "HFWeights", "load_hf", "register", "save_hf"]
