"""A model by name: a local path, else a Hugging Face Hub id fetched into huggingface_hub's own cache.

A local path always wins over a Hub id of the same spelling. Only the files a model needs are
fetched (its config, safetensors weights and tokenizer files; PyTorch's ``.bin`` weights only where a
repository has no safetensors, read with torch's weights-only loader), through ``huggingface_hub``, which
shows a progress bar on large files and resumes an interrupted download. ``HF_HUB_OFFLINE=1``
uses the cache alone, and ``HF_ENDPOINT`` names another Hub (a mirror, or a test's stand-in); both are read at
each call. Every way this can fail is one PLMError that names the id.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

from plm.errors import PLMError, PLMWarning

# What a plm or Hugging Face model directory holds that plm reads: never the other frameworks' weights.
MODEL_FILES = [
    "config.json", "*.safetensors", "*.safetensors.index.json", "generation_config.json",
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "vocab.json", "merges.txt",
    "modules.json", "*/config.json", "tokenizer/*", "best/*",
    "*.spm", "vocab-src.json", "vocab-tgt.json",  # Marian's SentencePiece models, fairseq's vocabularies
]
# A repository without safetensors weights: PyTorch's, read with torch's weights-only loader (plm.hf.io).
PYTORCH_WEIGHTS = ["pytorch_model.bin", "pytorch_model-*.bin", "pytorch_model.bin.index.json"]
# Released models that the Hub still answers by their first names, without an owner; some are plm's preset names too.
LEGACY_IDS = {name: f"openai-community/{name}"
              for name in ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "openai-gpt")}
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")  # "gpt2" or "owner/name"


def is_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` asks for the cache alone (read at each call, not when huggingface_hub loads).

    Returns:
        True for 1, ON, YES or TRUE.
    """
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"}


def local_or_hub(name: str | os.PathLike[str], revision: str | None = None) -> Path:
    """The directory ``name`` stands for: a local path when one exists, else a Hub id's files in the cache.

    Args:
        name: a local directory, or a Hub id such as ``openai-community/gpt2``.
        revision: the Hub revision (a branch, tag or commit) to fetch; None: the default branch.

    Returns:
        The directory that holds the model's files.

    Raises:
        PLMError: no such local directory and no such Hub id (or no network for it, or not cached offline),
            a revision the repository lacks, a revision for a local directory, or a download that failed.
    """
    path = Path(name)
    if path.exists():
        if revision is not None:
            raise PLMError(f"{name}: a local directory has no revisions; `revision` is for Hub ids")
        return path
    # A name that cannot be an id, or whose folder exists here (runs/gpt with a runs/ beside it), is a local
    # path mistyped: the Hub is not asked about it.
    if not HUB_ID.fullmatch(str(name)) or (path.parent != Path(".") and path.parent.is_dir()):
        raise PLMError(f"{name}: no such model directory")
    try:  # imported here: most commands never fetch a model, and huggingface_hub is an extra
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import (
            EntryNotFoundError,
            HfHubHTTPError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError:
        raise PLMError(f"{name}: no such local directory; to fetch it from the Hugging Face Hub, pip install "
                       "'plm[hub]'") from None

    def fetched(patterns: list[str]) -> Path:
        return Path(snapshot_download(str(name), revision=revision, allow_patterns=patterns,
                                      cache_dir=os.environ.get("HF_HUB_CACHE"), local_files_only=is_offline(),
                                      endpoint=os.environ.get("HF_ENDPOINT")))

    try:
        directory = fetched(MODEL_FILES)
        if any(directory.rglob("*.safetensors")):
            return directory
        directory = fetched(PYTORCH_WEIGHTS)
    except RevisionNotFoundError:
        raise PLMError(f"{name}: the Hugging Face Hub repository has no revision {revision!r}") from None
    except RepositoryNotFoundError:
        raise PLMError(f"{name}: no such local directory, and no such model on the Hugging Face Hub "
                       "(or it is private or gated)") from None
    except (LocalEntryNotFoundError, EntryNotFoundError):
        where = "HF_HUB_OFFLINE=1 is set" if is_offline() else "the Hugging Face Hub cannot be reached"
        raise PLMError(f"{name}: no such local directory, not in the Hugging Face cache, and {where}") from None
    except (HfHubHTTPError, OSError) as error:
        raise PLMError(f"{name}: the download from the Hugging Face Hub failed ({type(error).__name__})") from None
    if not any(directory.glob("pytorch_model*.bin")):
        raise PLMError(f"{name}: the Hugging Face Hub repository has no weights plm reads (*.safetensors or "
                       "pytorch_model.bin)")
    warnings.warn(f"{name}: the repository has no safetensors weights; reading its pytorch_model.bin with torch's "
                  "weights-only loader", PLMWarning, stacklevel=2)
    return directory
