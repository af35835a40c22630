"""The HTTP API and the page: a Starlette app over loaded models ([`create_app`][plm.serve.app.create_app]).

JSON in, JSON out. Every request is checked before any model work ([`plm.serve.requests`][plm.serve.requests]);
a request the server refuses is answered with its status (400, 413 for a body over
``max_body``, 404 for an unknown path) and ``{"error": "one line"}``. Model work runs on one
thread of its own, never on the event loop, so the server answers /health while a model
works, and requests to the models take their turn: they share that thread because a
request may switch a model's attention layers to record their weights
([`attention_weights`][plm.core.attention.attention_weights]), which no other request may see. Generation requests
are batched as they arrive ([`plm.serve.batching`][plm.serve.batching]). Beside plm's own endpoints, /v1 speaks
OpenAI's protocol over the same models and batcher ([`plm.serve.openai_api`][plm.serve.openai_api]). With an API key,
every request but /health and the page's files needs ``Authorization: Bearer KEY``
([`RequireKey`][plm.serve.app.RequireKey]).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from plm.errors import PLMError
from plm.serve.batching import Batcher, GenerationJob
from plm.serve.limits import MAX_BATCH, MAX_BODY
from plm.serve.openai_api import OPENAI_PREFIX, openai_error, openai_routes
from plm.serve.requests import RequestError, answering_errors, model_name, read_body, read_fields, refusal
from plm.serve.served_models import ENDPOINTS, CausalLMService, Service, choose

STATIC = Path(__file__).with_name("static")
BATCH_WINDOW = 0.005  # seconds an idle server waits for more requests to batch with the first
PUBLIC_PATHS = ("/", "/health")  # answered without the API key, with the page's files under /static/


def create_app(
    services: Sequence[Service],
    max_body: int = MAX_BODY,
    max_batch: int = MAX_BATCH,
    batch_window: float = BATCH_WINDOW,
    api_key: str | None = None,
) -> Starlette:
    """The app serving ``services`` (see [`load_service`][plm.serve.served_models.load_service]).

    Args:
        services: the models to serve.
        max_body: the most bytes of a request body (413 beyond).
        max_batch: generation requests decoded together; 1 turns batching off.
        batch_window: seconds an idle server waits for more requests to batch with the first.
        api_key: the key every request but /health and the page's must bring (``Authorization: Bearer KEY``),
            or None for none.

    Returns:
        The Starlette app: ``/`` (the page), ``/static``, ``/health``, ``/models``, a POST endpoint per entry of
        `ENDPOINTS`, and OpenAI's ``/v1`` endpoints
        ([`openai_routes`][plm.serve.openai_api.openai_routes]).

    Raises:
        PLMError: no services, ``max_body``, ``max_batch`` below 1 or ``batch_window`` below 0, or an empty
            ``api_key``.
    """
    if not services:
        raise PLMError("give at least one model to serve")
    if max_body < 1 or max_batch < 1 or batch_window < 0:
        raise PLMError(f"max_body and max_batch must be at least 1 and batch_window at least 0, got {max_body}, "
                       f"{max_batch} and {batch_window}")
    if api_key == "":
        raise PLMError("the API key is empty; give a key, or None to serve without one")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        app.state.worker = ThreadPoolExecutor(1, thread_name_prefix="plm-model")
        app.state.batcher = Batcher(app.state.worker, max_batch, batch_window)
        batching = asyncio.create_task(app.state.batcher.run())
        try:
            yield
        finally:
            batching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await batching
            app.state.worker.shutdown(wait=True)

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "models": [service.name for service in services]})

    async def models(request: Request) -> Response:
        return JSONResponse({"models": [service.describe() for service in services]})

    async def generate(request: Request) -> Response:
        body = await read_body(request, max_body)
        service = choose(services, model_name(body), "generate")
        assert isinstance(service, CausalLMService)  # the one kind that serves /generate
        fields = read_fields(body, "generate")
        stream = fields.pop("stream")
        job = await run_in_threadpool(partial(service.generation, **fields))  # tokenizing a long prompt takes a while
        request.app.state.batcher.submit(job)
        if stream:
            return StreamingResponse(server_sent_events(job), media_type="text/event-stream")
        return JSONResponse(await job.result())

    def endpoint(name: str) -> Callable[[Request], Awaitable[Response]]:
        """The handler of a model endpoint: the chosen model's method of that name, on the model thread."""

        async def handle(request: Request) -> Response:
            body = await read_body(request, max_body)
            service = choose(services, model_name(body), name)
            work = partial(getattr(service, name.replace("-", "_")), **read_fields(body, name))
            return JSONResponse(await asyncio.get_running_loop().run_in_executor(request.app.state.worker, work))

        return handle

    async def page(request: Request) -> Response:
        return FileResponse(STATIC / "index.html")

    plm_errors = partial(answering_errors, refuse=refused)
    routes = [
        Route("/", page),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
        Route("/health", plm_errors(health)),
        Route("/models", plm_errors(models)),
        Route("/generate", plm_errors(generate), methods=["POST"]),
        *(Route(f"/{name}", plm_errors(endpoint(name)), methods=["POST"]) for name in ENDPOINTS if name != "generate"),
        *openai_routes(services, max_body),
    ]
    middleware = [Middleware(RequireKey, key=api_key)] if api_key is not None else []
    return Starlette(routes=routes, lifespan=lifespan, middleware=middleware,
                     exception_handlers={HTTPException: http_error})


class RequireKey:
    """ASGI middleware: a request without ``Authorization: Bearer KEY`` is answered with 401.

    The page (``/`` and ``/static/...``) and ``/health`` need no key: the page asks for it once the API answers
    401, and a health check has nothing to hide. Keys are compared in constant time, so that the time of an
    answer does not tell how much of a guess was right.

    Args:
        app: the app behind it.
        key: the key.
    """

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app = app
        self.key = key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, or (without the key, off the public paths) answer 401 in the API's error body."""
        path = scope.get("path", "")
        public = scope["type"] != "http" or path in PUBLIC_PATHS or path.startswith("/static/")
        given = dict(scope.get("headers", [])).get(b"authorization")
        if public or (given is not None and self.matches(given)):
            await self.app(scope, receive, send)
            return
        reason = ("incorrect API key provided" if given is not None else
                  "no API key: send the header 'Authorization: Bearer KEY' with the key plm serve was given")
        respond = openai_error if path.startswith(OPENAI_PREFIX) else refused
        await respond(RequestError(reason, 401, code="invalid_api_key"), {"WWW-Authenticate": "Bearer"})(
            scope, receive, send)

    def matches(self, header: bytes) -> bool:
        """Whether an ``Authorization`` header brings the key (``Bearer KEY``, the scheme in any case).

        Args:
            header: the header's value.

        Returns:
            True when it does.
        """
        scheme, _, given = header.strip().partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.key)


async def server_sent_events(job: GenerationJob) -> AsyncIterator[str]:
    """A generation as server-sent events: ``token`` per token, then ``done`` with the whole text, or ``error``.

    Args:
        job: the generation, submitted to the batcher.

    Yields:
        Each event, ``event: KIND`` and ``data: JSON`` lines.
    """
    async for kind, value in job.stream():
        if kind == "error":
            value = {"error": str(refusal(value, "generation"))}
        yield f"event: {kind}\ndata: {json.dumps(value)}\n\n"


async def http_error(request: Request, error: Exception) -> Response:
    """Starlette's own refusals (an unknown path, a GET where only POST goes) in the API's form (/v1: OpenAI's).

    Args:
        request: the request refused.
        error: Starlette's HTTPException.

    Returns:
        The JSON error response, with the exception's status and headers.
    """
    assert isinstance(error, HTTPException)
    respond = openai_error if request.url.path.startswith(OPENAI_PREFIX) else refused
    return respond(RequestError(error.detail, error.status_code), error.headers)


def refused(error: RequestError, headers: Mapping[str, str] | None = None) -> Response:
    """The answer of plm's own API to a refused request: ``{"error": "one line"}`` with the refusal's status.

    Args:
        error: the refusal.
        headers: extra headers, or None.

    Returns:
        The JSON response.
    """
    return JSONResponse({"error": str(error)}, status_code=error.status, headers=headers)
