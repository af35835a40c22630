"""The HTTP API and the page: a Starlette app over loaded models (:func:`create_app`).

JSON in, JSON out. Every request is checked before any model work (:mod:`plm.serve.requests`);
a request the server refuses is answered with its status (400, 413 for a body over
``max_body``, 404 for an unknown path) and ``{"error": "one line"}``. Model work runs on one
thread of its own, never on the event loop, so the server answers /health while a model
works, and requests to the models take their turn: they share that thread because a
request may switch a model's attention layers to record their weights
(:func:`plm.core.attention_weights`), which no other request may see. Generation requests
are batched as they arrive (:mod:`plm.serve.batching`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from plm.errors import PLMError
from plm.serve.batching import Batcher, GenerationJob
from plm.serve.requests import RequestError, model_name, parse_body, read_fields
from plm.serve.served_models import ENDPOINTS, CausalLMService, Service, choose

STATIC = Path(__file__).with_name("static")
MAX_BODY = 1 << 20  # bytes: a megabyte of text is far more than any model here reads at once
MAX_BATCH = 16  # generation requests decoded together
BATCH_WINDOW = 0.005  # seconds an idle server waits for more requests to batch with the first

log = logging.getLogger(__name__)


def create_app(
    services: Sequence[Service],
    max_body: int = MAX_BODY,
    max_batch: int = MAX_BATCH,
    batch_window: float = BATCH_WINDOW,
) -> Starlette:
    """The app serving ``services`` (see :func:`plm.serve.served_models.load_service`).

    Args:
        services: the models to serve.
        max_body: the most bytes of a request body (413 beyond).
        max_batch: generation requests decoded together; 1 turns batching off.
        batch_window: seconds an idle server waits for more requests to batch with the first.

    Returns:
        The Starlette app: ``/`` (the page), ``/static``, ``/health``, ``/models``, and a POST endpoint per
        entry of :data:`plm.serve.served_models.ENDPOINTS`.

    Raises:
        PLMError: no services, or ``max_body``, ``max_batch`` below 1 or ``batch_window`` below 0.
    """
    if not services:
        raise PLMError("give at least one model to serve")
    if max_body < 1 or max_batch < 1 or batch_window < 0:
        raise PLMError(f"max_body and max_batch must be at least 1 and batch_window at least 0, got {max_body}, "
                       f"{max_batch} and {batch_window}")

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

    async def read_json(request: Request) -> dict[str, Any]:
        """The request's JSON object, read up to ``max_body`` bytes (the rest is not read: 413)."""
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_body:
            raise RequestError(f"the body is {declared} bytes; this server takes at most {max_body}", 413)
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_body:
                raise RequestError(f"the body is over {max_body} bytes, the most this server takes", 413)
            chunks.append(chunk)
        return parse_body(b"".join(chunks))

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "models": [service.name for service in services]})

    async def models(request: Request) -> Response:
        return JSONResponse({"models": [service.describe() for service in services]})

    async def generate(request: Request) -> Response:
        body = await read_json(request)
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
            body = await read_json(request)
            service = choose(services, model_name(body), name)
            work = partial(getattr(service, name.replace("-", "_")), **read_fields(body, name))
            return JSONResponse(await asyncio.get_running_loop().run_in_executor(request.app.state.worker, work))

        return handle

    async def page(request: Request) -> Response:
        return FileResponse(STATIC / "index.html")

    routes = [
        Route("/", page),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
        Route("/health", answering_errors(health)),
        Route("/models", answering_errors(models)),
        Route("/generate", answering_errors(generate), methods=["POST"]),
        *(Route(f"/{name}", answering_errors(endpoint(name)), methods=["POST"])
          for name in ENDPOINTS if name != "generate"),
    ]
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error})


def answering_errors(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """``handler`` with its errors answered as ``{"error": "one line"}``.

    The request's errors are answered with 400 (or a RequestError's own status); last, one the server did not
    foresee with 500, its traceback going to the server's log.

    Args:
        handler: an endpoint's handler.

    Returns:
        The wrapped handler.
    """

    async def handle(request: Request) -> Response:
        try:
            return await handler(request)
        except RequestError as error:
            return error_response(one_line(error), error.status)
        except PLMError as error:
            return error_response(one_line(error), 400)
        except Exception as error:
            log.exception("%s %s failed", request.method, request.url.path)
            return error_response(unforeseen(error), 500)

    return handle


async def server_sent_events(job: GenerationJob) -> AsyncIterator[str]:
    """A generation as server-sent events: ``token`` per token, then ``done`` with the whole text, or ``error``.

    Args:
        job: the generation, submitted to the batcher.

    Yields:
        Each event, ``event: KIND`` and ``data: JSON`` lines.
    """
    async for kind, value in job.stream():
        if kind == "error":
            if not isinstance(value, PLMError):
                log.error("generation failed", exc_info=value)
            value = {"error": one_line(value) if isinstance(value, PLMError) else unforeseen(value)}
        yield f"event: {kind}\ndata: {json.dumps(value)}\n\n"


async def http_error(request: Request, error: Exception) -> Response:
    """Starlette's own refusals (an unknown path, a GET where only POST goes) in the API's form.

    Args:
        request: the request refused.
        error: Starlette's HTTPException.

    Returns:
        The JSON error response, with the exception's status and headers.
    """
    assert isinstance(error, HTTPException)
    return error_response(error.detail, error.status_code, error.headers)


def error_response(message: str, status: int, headers: Mapping[str, str] | None = None) -> Response:
    """The API's answer to a refused request: ``{"error": message}``.

    Args:
        message: the one-line reason.
        status: the HTTP status.
        headers: extra headers, or None.

    Returns:
        The JSON response.
    """
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def one_line(error: BaseException) -> str:
    """An exception's message on one line (its line breaks turned into spaces).

    Args:
        error: the exception.

    Returns:
        The message.
    """
    return " ".join(str(error).split("\n"))


def unforeseen(error: BaseException) -> str:
    """The message for an error the server did not foresee: its type and message, and where the traceback is.

    Args:
        error: the exception.

    Returns:
        The message.
    """
    return f"internal error ({type(error).__name__}: {one_line(error)}); the server's log has the traceback"
