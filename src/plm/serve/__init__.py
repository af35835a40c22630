"""``plm serve``: an HTTP API and a web page over loaded plm models.

    from plm.serve import BackgroundServer, create_app, load_service
    app = create_app([load_service("runs/gpt", "gpt")])
    with BackgroundServer(app) as server:       # a free port on 127.0.0.1
        httpx.post(f"{server.url}/generate", json={"prompt": "The list"}).json()

``served_models`` decides what each model serves from its class, ``requests`` checks request bodies,
``batching`` decodes concurrent generation requests together, ``app`` is the Starlette app (behind an
API key if given one), ``openai_api`` its OpenAI-compatible ``/v1`` endpoints, and ``server`` runs it;
``static/`` holds the page.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from plm.serve.app import create_app
    from plm.serve.served_models import Service, load_service, service_names
    from plm.serve.server import BackgroundServer, serve

__all__ = ["BackgroundServer", "Service", "create_app", "load_service", "serve", "service_names"]
# Imported on first use: starlette and uvicorn (the serve extra) load only where something is served.
_HOMES = {
    "create_app": "plm.serve.app",
    "Service": "plm.serve.served_models",
    "load_service": "plm.serve.served_models",
    "service_names": "plm.serve.served_models",
    "BackgroundServer": "plm.serve.server",
    "serve": "plm.serve.server",
}


def __getattr__(name: str) -> object:
    """The package's names, each imported from its module on first use.

    Args:
        name: one of `__all__`.

    Returns:
        The object.

    Raises:
        AttributeError: another name.
    """
    if name not in _HOMES:
        raise AttributeError(f"module 'plm.serve' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
