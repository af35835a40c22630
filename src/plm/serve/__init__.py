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

from plm.serve.app import create_app
from plm.serve.served_models import Service, load_service, service_names
from plm.serve.server import BackgroundServer, serve

__all__ = ["BackgroundServer", "Service", "create_app", "load_service", "serve", "service_names"]
