"""Request bodies: a JSON object per endpoint, checked field by field, each problem one line.

Every field an endpoint reads is declared here with its JSON type and default, so that a
missing field, a string where a number belongs or a misspelt name is refused before any
model work, with a message that names the field. Whether a value makes sense for the model
(a temperature of 0, a layer it does not have) is the library's to say: it raises
[`PLMError`][plm.errors.PLMError] with the reason, which the server answers with status 400 too.
[`answering_errors`][plm.serve.requests.answering_errors] turns whatever a handler raises into the refusal the client
reads, in the body its API gives errors (plm's own, or OpenAI's: [`plm.serve.openai_api`][plm.serve.openai_api]).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from plm.config import json_type
from plm.errors import FIELD, PLMError

REQUIRED = object()  # a Field's default when the request must give it
SEED_RANGE = (-(2**63), 2**63 - 1)  # a seed is a signed 64-bit integer, as OpenAI takes it (torch takes these)

log = logging.getLogger(__name__)


class RequestError(PLMError):
    """A request the server refuses, with the HTTP status to answer (400: bad input; 413: a body too large).

    Args:
        message: the one-line reason, the answer's ``error``.
        status: the HTTP status.
        param: the body field at fault, or None (OpenAI's error body names it).
        code: a machine-readable reason, or None (OpenAI's ``model_not_found``, ``invalid_api_key`` ...).
    """

    def __init__(self, message: str, status: int = 400, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param
        self.code = code


@dataclass(frozen=True)
class Field:
    """A body field: its JSON type, its default, the range of a number, and whether null is a value.

    Attributes:
        kind: "string", "strings" (a non-empty list of strings), "string or strings", "prompt" (those, a list of
            token ids or a list of such lists), "integer", "number", "boolean" or "object".
        default: the value when the request does not give the field; `REQUIRED`: the request must.
        minimum: the least value a number may take, or None.
        nullable: null is a value of its own; else null is allowed where the default is None, and means the
            default.
        maximum: the largest value a number may take, or None.
    """

    kind: str  # "string", "strings", "string or strings", "prompt", "integer", "number", "boolean", "object"
    default: Any = REQUIRED
    minimum: float | None = None
    nullable: bool = False
    maximum: float | None = None


# The fields of each endpoint besides "model", which every endpoint takes (default: the one model that serves it).
FIELDS: dict[str, dict[str, Field]] = {
    "generate": {
        "prompt": Field("string"),
        "max_new_tokens": Field("integer", None, minimum=1),
        "temperature": Field("number", 1.0),
        "top_k": Field("integer", 0, minimum=0),
        "top_p": Field("number", 1.0),
        "sample": Field("boolean", False),
        "seed": Field("integer", None, minimum=SEED_RANGE[0], maximum=SEED_RANGE[1]),
        "stream": Field("boolean", False),
    },
    "fill-mask": {"text": Field("string"), "guesses": Field("integer", 5, minimum=1)},
    "embed": {"texts": Field("strings")},
    "translate": {"text": Field("string"), "beam": Field("integer", None, minimum=1)},
    "classify": {
        "text": Field("string", None),
        "text_pair": Field("string", None),
        "question": Field("string", None),
        "context": Field("string", None),
        "endings": Field("strings", None),
        "prefix": Field("string", ""),
    },
    "attention": {
        "text": Field("string"),
        "layer": Field("integer", 0),
        "head": Field("integer", 0, minimum=0, nullable=True),  # null: the mean of the layer's heads
        "target": Field("string", None),
    },
    # OpenAI's legacy completions (plm.serve.openai_api); the last five are OpenAI's but plm takes only their
    # defaults, which clients send as they are.
    "v1/completions": {
        "prompt": Field("prompt", ""),  # "": from the start of a text, as OpenAI's default
        "max_tokens": Field("integer", None, minimum=0),  # 0: only with echo
        "temperature": Field("number", 1.0, minimum=0, maximum=2),  # 0: greedy
        "top_p": Field("number", 1.0, minimum=0, maximum=1),
        "n": Field("integer", 1, minimum=1, maximum=128),
        "stop": Field("string or strings", None),
        "seed": Field("integer", None, minimum=SEED_RANGE[0], maximum=SEED_RANGE[1]),
        "logprobs": Field("integer", None, minimum=0, maximum=5),
        "stream": Field("boolean", False),
        "stream_options": Field("object", None),
        "user": Field("string", None),
        "echo": Field("boolean", False),
        "suffix": Field("string", None),
        "best_of": Field("integer", None),
        "presence_penalty": Field("number", 0),
        "frequency_penalty": Field("number", 0),
        "logit_bias": Field("object", None),
    },
    "v1/embeddings": {
        "input": Field("string or strings"),
        "encoding_format": Field("string", "float"),
        "dimensions": Field("integer", None, minimum=1),
        "user": Field("string", None),
    },
}


# Fields renamed where one name meant two things, by endpoint: the old name, the new one, and what the old one means
# elsewhere. A request that still sends the old name is refused with a message that names the new one.
RENAMED: dict[str, dict[str, tuple[str, str]]] = {
    "fill-mask": {"top_k": ("guesses", "'top_k' is /generate's, which samples among the k likeliest tokens")},
}


def parse_body(data: bytes) -> dict[str, Any]:
    """The JSON object of a request body (NaN and Infinity, which JSON does not have, refused).

    Args:
        data: the body's bytes.

    Returns:
        The object.

    Raises:
        RequestError: a body that is not UTF-8, not JSON, or not a JSON object.
    """
    try:
        body = json.loads(data, parse_constant=refuse_constant)
    except UnicodeDecodeError:
        raise RequestError("malformed JSON: the body is not UTF-8") from None
    except ValueError as error:
        raise RequestError(f"malformed JSON: {error}") from None
    if not isinstance(body, dict):
        raise RequestError(f"the body must be a JSON object, got {json_type(body)}")
    return body


async def read_body(request: Request, max_body: int) -> dict[str, Any]:
    """A request's JSON object, read up to ``max_body`` bytes (the rest is not read: 413).

    Args:
        request: the request.
        max_body: the most bytes of a body.

    Returns:
        The object.

    Raises:
        RequestError: a body over ``max_body`` bytes (413), or one [`parse_body`][plm.serve.requests.parse_body]
            refuses.
    """
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


def refuse_constant(name: str) -> None:
    """Refuse NaN, Infinity and -Infinity, which Python's JSON reader would take as numbers.

    Args:
        name: the constant's name.

    Raises:
        ValueError: always.
    """
    raise ValueError(f"{name} is not a JSON number")


def read_fields(body: dict[str, Any], endpoint: str) -> dict[str, Any]:
    """The values of ``endpoint``'s fields (defaults filled in), by name; "model" is read apart.

    Args:
        body: the request's JSON object.
        endpoint: the endpoint's name, a key of `FIELDS`.

    Returns:
        Each field's value.

    Raises:
        RequestError: a field the endpoint does not take (one of `RENAMED`: with its new name), or one refused by
            [`read_field`][plm.serve.requests.read_field].
    """
    fields = FIELDS[endpoint]
    for old, (new, elsewhere) in RENAMED.get(endpoint, {}).items():
        if old in body:
            raise RequestError(f"/{endpoint} has no field {old!r}: it is now {new!r} ({elsewhere})", param=old)
    unknown = sorted(set(body) - set(fields) - {"model"})
    if unknown:
        raise RequestError(f"/{endpoint} has no field {', '.join(map(repr, unknown))}; "
                           f"it takes {', '.join(['model', *fields])}")
    return {name: read_field(body, name, field) for name, field in fields.items()}


def read_field(body: dict[str, Any], name: str, field: Field) -> Any:
    """The value of one field of a request body, checked against its declaration.

    Args:
        body: the request's JSON object.
        name: the field's name.
        field: its declaration.

    Returns:
        The value (a number as a float); the default when the field is missing (or null, where null means the
        default).

    Raises:
        RequestError: a required field missing, a value of another JSON type, or a number out of its range.
    """
    if name not in body:
        if field.default is REQUIRED:
            raise RequestError(f"missing field {name!r} ({a_kind(field.kind)})", param=name)
        return field.default
    value = body[name]
    if value is None and (field.nullable or field.default is None):  # null: not given, or (nullable) a value
        return None
    if not has_kind(value, field.kind):
        got = "a list of token ids" if token_ids(value) else json_type(value)  # ids where only text is read
        raise RequestError(f"{name!r} must be {a_kind(field.kind)}, got {got}", param=name)
    if field.minimum is not None and value < field.minimum:
        raise RequestError(f"{name!r} must be at least {field.minimum}, got {value}", param=name)
    if field.maximum is not None and value > field.maximum:
        raise RequestError(f"{name!r} must be at most {field.maximum}, got {value}", param=name)
    return float(value) if field.kind == "number" else value  # an integer too, as the model's arithmetic takes it


def has_kind(value: Any, kind: str) -> bool:
    """Whether a JSON value is of a field's kind (a boolean is no number; a number is finite, and a float holds it).

    Args:
        value: the value.
        kind: a [`Field`][plm.serve.requests.Field] kind.

    Returns:
        True when it is.
    """
    if kind == "strings":
        return isinstance(value, list) and bool(value) and all(isinstance(item, str) for item in value)
    if kind == "string or strings":
        return isinstance(value, str) or has_kind(value, "strings")
    if kind == "prompt":
        return (has_kind(value, "string or strings") or token_ids(value)
                or isinstance(value, list) and bool(value) and all(token_ids(item) for item in value))
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        try:
            return math.isfinite(value)
        except OverflowError:  # an integer past the largest float
            return False
    return isinstance(value, {"string": str, "boolean": bool, "object": dict}[kind])


def token_ids(value: Any) -> bool:
    """Whether a JSON value is a prompt of token ids: a non-empty list of integers.

    Args:
        value: the value.

    Returns:
        True when it is.
    """
    return isinstance(value, list) and bool(value) and all(has_kind(item, "integer") for item in value)


def a_kind(kind: str) -> str:
    """A field kind as a message names it ("an integer", "a non-empty list of strings" ...).

    Args:
        kind: a [`Field`][plm.serve.requests.Field] kind.

    Returns:
        The words.
    """
    return {"strings": "a non-empty list of strings", "string or strings": "a string or a non-empty list of strings",
            "prompt": "a string, a non-empty list of strings, a list of token ids or a list of lists of token ids",
            "integer": "an integer", "number": "a finite number", "string": "a string", "boolean": "true or false",
            "object": "an object"}[kind]


def model_name(body: dict[str, Any]) -> str | None:
    """The "model" a request names, or None when it leaves the choice to the server.

    Args:
        body: the request's JSON object.

    Returns:
        The name, or None.

    Raises:
        RequestError: a "model" that is not a string.
    """
    name = body.get("model")
    if name is not None and not isinstance(name, str):
        raise RequestError(f"'model' must be a string (a name that GET /models lists), got {json_type(name)}")
    return name


def answering_errors(handler: Callable[[Request], Awaitable[Response]],
                     refuse: Callable[[RequestError], Response]) -> Callable[[Request], Awaitable[Response]]:
    """``handler`` with whatever it raises answered by ``refuse`` (see [`refusal`][plm.serve.requests.refusal]).

    Args:
        handler: an endpoint's handler.
        refuse: the API's error response to a refusal.

    Returns:
        The wrapped handler.
    """

    async def handle(request: Request) -> Response:
        try:
            return await handler(request)
        except Exception as error:
            return refuse(refusal(error, f"{request.method} {request.url.path}"))

    return handle


def refusal(error: BaseException, work: str) -> RequestError:
    """What the server answers to an error: a RequestError as it is, a PLMError with 400, another with 500.

    An error the server did not foresee (not a PLMError) has its traceback go to the server's log.

    Args:
        error: the error.
        work: what failed, for the log ("POST /generate").

    Returns:
        The refusal, its message on one line.
    """
    if isinstance(error, RequestError):
        return RequestError(one_line(error), error.status, error.param, error.code)
    if isinstance(error, PLMError):
        return RequestError(FIELD.sub(request_field, one_line(error)), 400)
    log.error("%s failed", work, exc_info=error)
    return RequestError(unforeseen(error), 500)


REQUEST_FIELDS = {"num_beams": "beam"}  # a library field that a request names otherwise


def request_field(named: re.Match[str]) -> str:
    """A field that a library error names (`FIELD`), as a request names it: ``'beam'``."""
    return f"'{REQUEST_FIELDS.get(named.group(1), named.group(1))}'"


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
