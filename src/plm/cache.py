"""Where plm keeps what it can rebuild (prepared corpora, the default corpus, built kernels)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Where plm keeps what it can rebuild: ``$PLM_CACHE``, else ``~/.cache/plm``.

    Returns:
        The directory, which may not exist yet.
    """
    return Path(os.environ.get("PLM_CACHE") or Path.home() / ".cache" / "plm")
