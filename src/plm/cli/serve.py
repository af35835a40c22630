"""plm serve: an HTTP API and a web page over one or more models, until Ctrl-C."""

from __future__ import annotations

import argparse
import ipaddress
import os

from plm.cli.common import HelpFormatter, add_device, add_weights, inference_device, positive_int
from plm.errors import PLMError
from plm.serve.limits import MAX_BATCH, MAX_BODY

EXAMPLES = """examples:
  plm serve --model runs/gpt --model runs/bert --model runs/dates    # then open http://127.0.0.1:8000/
  curl -s localhost:8000/models
  curl -s localhost:8000/generate -d '{"model": "gpt", "prompt": "The list", "max_new_tokens": 20}'
  curl -sN localhost:8000/generate -d '{"model": "gpt", "prompt": "The list", "stream": true}'   # token by token
  curl -s localhost:8000/fill-mask -d '{"text": "The capital of France is [MASK].", "guesses": 3}'
  curl -s localhost:8000/embed -d '{"texts": ["A man plays a guitar.", "Someone plays music."]}'
  curl -s localhost:8000/translate -d '{"text": "the fifth of May, nineteen ninety-nine", "beam": 4}'
  curl -s localhost:8000/attention -d '{"model": "bert", "text": "The cat sat.", "layer": 1, "head": 0}'
  PLM_API_KEY=secret plm serve --model runs/gpt --host 0.0.0.0 --port 8080   # reachable from other machines, with a key
  curl -s localhost:8080/v1/completions -H "Authorization: Bearer secret" -d '{"model": "gpt", "prompt": "The list"}'

endpoints (JSON in, JSON out; "model" may be left out where one model serves the endpoint):
  GET  /health  /models                        POST /generate  /fill-mask  /embed  /translate  /classify  /attention
  OpenAI's (base URL http://HOST:PORT/v1):     GET /v1/models   POST /v1/completions  /v1/embeddings
"""


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "serve",
        help="serve models over HTTP, with a web page",
        description="Load each --model once and serve it over HTTP: a JSON API (generation with per-token "
        "log-probabilities and streaming, fill-mask, sentence embeddings, translation with its attention, "
        "task predictions, attention maps) and, at /, a page with a tab for each. Concurrent generation requests "
        "are decoded together in one batch. Listens on this machine only unless --host says otherwise; "
        "Ctrl-C stops it after answering the requests in flight.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--model", action="append", required=True, metavar="DIR",
                        help="model directory, training run or Hugging Face Hub id; repeat for several. Its name in "
                        "the API is the "
                        "directory's name (a second of the same name gets -2)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on: 127.0.0.1 answers this machine only, 0.0.0.0 every network")
    parser.add_argument("--port", type=port, default=8000, help="port to listen on (0: a free one)")
    parser.add_argument("--max-body", type=positive_int, default=MAX_BODY, metavar="BYTES",
                        help="the largest request body; a larger one is answered with 413")
    parser.add_argument("--max-batch", type=positive_int, default=MAX_BATCH, metavar="N",
                        help="generation requests decoded together in one batch (1: one at a time)")
    parser.add_argument("--api-key", type=api_key, metavar="KEY",
                        help="require 'Authorization: Bearer KEY' on every request but /health and the page (which "
                        "asks for the key). Without it, the environment's PLM_API_KEY, which other users do not see "
                        "in the process list")
    add_weights(parser)
    add_device(parser)
    parser.set_defaults(run=run)


def port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be between 0 and 65535, got {value}")
    return value


def api_key(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def run(args: argparse.Namespace) -> None:
    try:  # starlette and uvicorn are the serve extra's
        from plm.serve.app import create_app
        from plm.serve.served_models import load_service, service_names
        from plm.serve.server import address, listen, serve
    except ImportError as missing:
        package = (missing.name or "starlette").split(".")[0]
        raise PLMError(f"plm serve needs {package}: pip install 'plm[serve]'") from None
    device = inference_device(args)
    services = [load_service(path, name, device, args.quantize, args.precision)
                for path, name in zip(args.model, service_names(args.model))]
    key = args.api_key or os.environ.get("PLM_API_KEY") or None  # read here: --help shows no key
    app = create_app(services, args.max_body, args.max_batch, api_key=key)
    sock = listen(args.host, args.port)
    for service in services:
        endpoints = " ".join(f"/{endpoint}" for endpoint in service.capabilities)
        print(f"{service.name}: {service.kind} ({service.model.family}): {endpoints}")
    if not is_loopback(args.host) and key is None:
        print(f"plm serve: note: listening on {args.host} without --api-key: whoever reaches this machine can use "
              "the models; give --api-key KEY (or set PLM_API_KEY) to require a key")
    print(f"plm serve: {address(sock)}/ (Ctrl-C to stop)", flush=True)
    serve(app, sock)


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
