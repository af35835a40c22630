"""OpenAI's API beside plm's own, over the same models: /v1/models, /v1/completions, /v1/embeddings.

A client written for OpenAI (its ``openai`` package, or anything that speaks its HTTP API) talks
to plm serve with its base URL set to the server's ``/v1``: the same field names, the same answers,
the same error bodies (``{"error": {"message", "type", "param", "code"}}``). The work is plm's own:
a completion is a generation job of the batcher that /generate feeds ([`plm.serve.batching`][plm.serve.batching]),
so completions and /generate requests decode in one batch, and an embedding is /embed's vector.
OpenAI's legacy completions take text or token ids; plm's models have no chat template, so
/v1/chat/completions answers 404. Of OpenAI's completion options plm takes ``max_tokens``,
``temperature`` (0: greedy), ``top_p``, ``n``, ``stop``, ``seed``, ``logprobs``, ``stream`` and
``echo`` (the prompt's tokens and their log-probabilities before the completion; with ``max_tokens`` 0
the prompt alone: how lm-evaluation-harness scores a text); ``suffix``, ``best_of``, the penalties and
``logit_bias`` only at their defaults.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import struct
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from plm.apps.text_pipelines import encode_prompts
from plm.decoding.generation_config import stop_prefix, until_stop
from plm.serve.batching import GenerationJob
from plm.serve.requests import (
    RequestError,
    answering_errors,
    model_name,
    read_body,
    read_fields,
    refusal,
    token_ids,
)
from plm.serve.served_models import CausalLMService, ElmoService, EncoderService, Service, choose

OPENAI_PREFIX = "/v1/"
OWNER = "plm"  # every model's "owned_by"
MAX_STOPS = 4  # OpenAI's limit on stop strings
DEFAULT_MAX_TOKENS = 16  # OpenAI's, where a request gives none (fewer where the context has less room)
ENCODINGS = ("float", "base64")  # of an embedding: a list of numbers, or base64 of little-endian float32s


def openai_routes(services: Sequence[Service], max_body: int) -> list[Route]:
    """OpenAI's endpoints over ``services``, each answering errors in OpenAI's body.

    Args:
        services: the models served.
        max_body: the most bytes of a request body (413 beyond).

    Returns:
        The routes: GET ``/v1/models`` and ``/v1/models/{model}``, POST ``/v1/completions``, ``/v1/embeddings`` and
        ``/v1/chat/completions`` (404: no chat template). The generation and model work runs on the app's batcher
        and model thread (``app.state.batcher``, ``app.state.worker``; see [`create_app`][plm.serve.app.create_app]).
    """
    created = int(time.time())  # the models' "created": when the server loaded them

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [model_card(service.name, created) for service in services]})

    async def model(request: Request) -> Response:
        name = request.path_params["model"]
        known(services, name)
        return JSONResponse(model_card(name, created))

    async def completions(request: Request) -> Response:
        body = await read_body(request, max_body)
        service = chosen(services, body, "generate")
        assert isinstance(service, CausalLMService)  # the one kind that generates
        completion = Completion.read(service.name, read_fields(body, "v1/completions"))
        prompts = await run_in_threadpool(completion.encode, service)  # tokenizing long prompts takes a while
        echoed: list[list[dict[str, Any]]] = [[] for _ in prompts]
        if completion.echo:  # a forward pass over each prompt, model work
            work = partial(completion.echoes, service, prompts)
            echoed = await asyncio.get_running_loop().run_in_executor(request.app.state.worker, work)
        choices = completion.choices(service, prompts, echoed)
        for choice in choices:
            if choice.job is not None:
                request.app.state.batcher.submit(choice.job)
        if completion.stream:
            return StreamingResponse(completion.events(choices), media_type="text/event-stream")
        return JSONResponse(await completion.answer(choices))

    async def embeddings(request: Request) -> Response:
        body = await read_body(request, max_body)
        service = chosen(services, body, "embed")
        fields = read_fields(body, "v1/embeddings")
        if fields["encoding_format"] not in ENCODINGS:
            raise RequestError(f"'encoding_format' must be 'float' or 'base64', got {fields['encoding_format']!r}",
                               param="encoding_format")
        texts = as_list(fields["input"])
        empty = next((number for number, text in enumerate(texts, 1) if not text), None)
        if empty is not None:
            raise RequestError(f"text {empty} of 'input' is empty: there is nothing to embed", param="input")
        work = partial(embed, service, texts)
        vectors, tokens = await asyncio.get_running_loop().run_in_executor(request.app.state.worker, work)
        if fields["dimensions"] not in (None, len(vectors[0])):
            raise RequestError(f"this model's embeddings have {len(vectors[0])} dimensions, not "
                               f"{fields['dimensions']}; plm does not shorten them", param="dimensions")
        as_base64 = fields["encoding_format"] == "base64"
        data = [{"object": "embedding", "embedding": base64_floats(vector) if as_base64 else vector, "index": index}
                for index, vector in enumerate(vectors)]
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return JSONResponse({"object": "list", "data": data, "model": service.name, "usage": usage})

    async def chat(request: Request) -> Response:
        name = model_name(await read_body(request, max_body))
        known(services, name)
        which = f"model {name!r} has" if name is not None else "the models of this server have"
        raise RequestError(f"{which} no chat template: plm's models continue a text rather than answer messages; "
                           "send the text as the prompt of /v1/completions", 404, param="model")

    answering = partial(answering_errors, refuse=openai_error)
    return [
        Route("/v1/models", answering(models)),
        Route("/v1/models/{model}", answering(model)),
        Route("/v1/completions", answering(completions), methods=["POST"]),
        Route("/v1/embeddings", answering(embeddings), methods=["POST"]),
        Route("/v1/chat/completions", answering(chat), methods=["POST"]),
    ]


@dataclass(frozen=True)
class Prompt:
    """A completion's prompt as the model reads it.

    Attributes:
        ids: its token ids.
        text: its text: as the request gave it, or the text of the token ids it gave.
    """

    ids: list[int]
    text: str


@dataclass(frozen=True)
class Choice:
    """One choice of a completion: its prompt, the prompt's tokens it echoes, and the job that continues it.

    Attributes:
        prompt: the prompt.
        echoed: the prompt's tokens as [`echo`][plm.serve.served_models.CausalLMService.echo] gives them, where the
            request asks for ``echo`` (else none).
        job: the generation job, submitted; None where the choice generates nothing (``max_tokens`` 0).
    """

    prompt: Prompt
    echoed: list[dict[str, Any]]
    job: GenerationJob | None


@dataclass(frozen=True)
class Completion:
    """A checked /v1/completions request: its options, and its answer (whole, or streamed) from its choices.

    The choices go prompt by prompt, ``n`` for each, as OpenAI numbers them.

    Attributes:
        id: the answer's id (``cmpl-...``).
        created: when the request came (Unix seconds).
        model: the model's name.
        prompts: the prompts, each a text or a list of token ids.
        n: the choices per prompt.
        max_tokens: the most new tokens of a choice (0 only with ``echo``); None: `DEFAULT_MAX_TOKENS`,
            fewer where the context has less room.
        temperature: the sampling temperature; 0: greedy.
        top_p: sample among the most likely tokens whose probabilities add up to ``top_p``.
        seed: the sampler's seed (choice ``k`` of a prompt draws with ``seed + k``), or None.
        stop: strings that end a choice, which its text leaves out.
        logprobs: how many of each step's most likely tokens to give beside the chosen one's log-probability;
            None: no log-probabilities.
        stream: answer with server-sent events, a chunk per token.
        usage_chunk: (streaming) end with a chunk of the usage (OpenAI's ``stream_options.include_usage``).
        echo: each choice begins with its prompt, and its ``logprobs`` with the prompt's tokens.
    """

    id: str
    created: int
    model: str
    prompts: list[str | list[int]]
    n: int
    max_tokens: int | None
    temperature: float
    top_p: float
    seed: int | None
    stop: tuple[str, ...]
    logprobs: int | None
    stream: bool
    usage_chunk: bool
    echo: bool

    @classmethod
    def read(cls, model: str, fields: Mapping[str, Any]) -> Completion:
        """The request of a /v1/completions body's fields (see `FIELDS`).

        Args:
            model: the chosen model's name.
            fields: the body's fields, checked.

        Returns:
            The request.

        Raises:
            RequestError: more than `MAX_STOPS` stop strings, ``max_tokens`` 0 without ``echo``, a ``top_p``
                of 0, or an option plm takes only at its default (``suffix``, ``best_of``, the penalties,
                ``logit_bias``) at another value.
        """
        defaults = {"suffix": None, "best_of": fields["n"], "presence_penalty": 0, "frequency_penalty": 0,
                    "logit_bias": {}}
        for name, default in defaults.items():
            if fields[name] not in (None, default):
                raise RequestError(f"plm serve takes {name!r} only as {json.dumps(default)}, got "
                                   f"{json.dumps(fields[name])}", param=name)
        if fields["max_tokens"] == 0 and not fields["echo"]:
            raise RequestError("'max_tokens' 0 generates nothing: it is taken with 'echo' true, for the prompt's own "
                               "log-probabilities", param="max_tokens")
        if fields["top_p"] == 0:
            raise RequestError("'top_p' must be above 0: 0 keeps no token to sample from; for greedy decoding set "
                               "'temperature' to 0", param="top_p")
        stop = as_list(fields["stop"] or [])
        if len(stop) > MAX_STOPS:
            raise RequestError(f"'stop' takes at most {MAX_STOPS} strings, got {len(stop)}", param="stop")
        return cls(f"cmpl-{uuid.uuid4().hex}", int(time.time()), model, as_prompts(fields["prompt"]), fields["n"],
                   fields["max_tokens"], fields["temperature"], fields["top_p"], fields["seed"],
                   tuple(text for text in stop if text),  # an empty stop string would end every choice at once
                   fields["logprobs"], fields["stream"], bool((fields["stream_options"] or {}).get("include_usage")),
                   fields["echo"])

    def encode(self, service: CausalLMService) -> list[Prompt]:
        """Each prompt as the model reads it: a text's token ids as /generate encodes them, or the ids given.

        Args:
            service: the model.

        Returns:
            The prompts.

        Raises:
            RequestError: a token id outside the model's vocabulary, or a prompt longer than the model's context
                (``context_length_exceeded``).
            PLMError: an empty prompt the tokenizer cannot start.
        """
        vocabulary = service.model.word_embeddings().num_embeddings
        context = service.model.context_length()
        texts = [prompt for prompt in self.prompts if isinstance(prompt, str)]
        encoded = iter(encode_prompts(service.tokenizer, texts))
        prompts = []
        for number, prompt in enumerate(self.prompts, 1):
            if isinstance(prompt, str):
                prompts.append(Prompt(next(encoded), prompt))
                continue
            outside = next((token for token in prompt if not 0 <= token < vocabulary), None)
            if outside is not None:
                raise RequestError(f"prompt {number} has the token id {outside}, outside this model's vocabulary "
                                   f"(ids 0 to {vocabulary - 1})", param="prompt")
            prompts.append(Prompt(prompt, service.tokenizer.decode(prompt, skip_special_tokens=True)))
        for number, read in enumerate(prompts, 1):
            if len(read.ids) > context:
                raise RequestError(f"this model's context is {context} tokens and prompt {number} takes "
                                   f"{len(read.ids)}; shorten it", param="prompt", code="context_length_exceeded")
        return prompts

    def echoes(self, service: CausalLMService, prompts: list[Prompt]) -> list[list[dict[str, Any]]]:
        """Each prompt's tokens as its choices echo them, with their log-probabilities (on the model thread).

        Args:
            service: the model.
            prompts: the prompts.

        Returns:
            Per prompt, [`echo`][plm.serve.served_models.CausalLMService.echo]'s tokens.
        """
        return [service.echo(prompt.ids, self.logprobs or 0) for prompt in prompts]

    def choices(self, service: CausalLMService, prompts: list[Prompt],
                echoed: list[list[dict[str, Any]]]) -> list[Choice]:
        """The choices, each with its generation job (as /generate makes them), not yet submitted.

        Args:
            service: the model.
            prompts: the prompts.
            echoed: per prompt, the tokens its choices echo (none without ``echo``).

        Returns:
            ``n`` choices per prompt; choice ``k`` of a prompt samples with ``seed + k``.

        Raises:
            RequestError: a prompt that leaves no room in the context, or a ``max_tokens`` beyond the room it leaves.
        """
        greedy = self.temperature == 0
        context = service.model.context_length()
        choices = []
        for (prompt, echo), choice in itertools.product(zip(prompts, echoed), range(self.n)):
            new_tokens, job = self.new_tokens(len(prompt.ids), context), None
            if new_tokens:
                job = service.job(prompt.ids, new_tokens, temperature=1.0 if greedy else self.temperature, top_k=0,
                                  top_p=1.0 if greedy else self.top_p, sample=not greedy,  # OpenAI samples unless 0
                                  seed=None if self.seed is None else self.seed + choice)
                job.stop, job.top_logprobs = self.stop, self.logprobs or 0
            choices.append(Choice(prompt, echo, job))
        return choices

    def new_tokens(self, prompt_tokens: int, context: int) -> int:
        """How many tokens a choice may generate after a prompt of ``prompt_tokens``.

        Args:
            prompt_tokens: the prompt's length in tokens, at most ``context``.
            context: the model's context.

        Returns:
            ``max_tokens``, or without one `DEFAULT_MAX_TOKENS` within the room left.

        Raises:
            RequestError: a ``max_tokens`` beyond the room the prompt leaves in the context, or (without ``echo``,
                which needs none) a prompt that leaves no room.
        """
        room = context - prompt_tokens
        if self.max_tokens is None:
            if room == 0 and not self.echo:
                raise RequestError(f"this model's context is {context} tokens and the prompt takes all of them, "
                                   "which leaves no room for new ones; shorten it", param="prompt",
                                   code="context_length_exceeded")
            return min(DEFAULT_MAX_TOKENS, room)
        if self.max_tokens > room:
            raise RequestError(f"this model's context is {context} tokens and the prompt takes {prompt_tokens}, "
                               f"which leaves room for {room} new ones, not 'max_tokens' {self.max_tokens}",
                               param="max_tokens", code="context_length_exceeded")
        return self.max_tokens

    async def answer(self, choices: list[Choice]) -> dict[str, Any]:
        """The whole answer, once every choice is done.

        Args:
            choices: the choices, their jobs submitted.

        Returns:
            OpenAI's ``text_completion``: ``choices`` (``text``, ``index``, ``logprobs``, ``finish_reason``) and
            ``usage``.

        Raises:
            Exception: the error a job failed with.
        """
        answers = []
        for index, choice in enumerate(choices):
            tokens, text, reason = list(choice.echoed), echo_text(choice), "length"
            if choice.job is not None:
                done = await choice.job.result()
                generated, stopped = until_stop(done["text"], self.stop)
                tokens, text = tokens + done["tokens"], text + generated
                reason = finish_reason(choice.job, done["tokens"], stopped)
            logprobs = self.logprobs_json(tokens, 0 if self.echo else len(choice.prompt.text))
            answers.append({"text": text, "index": index, "logprobs": logprobs, "finish_reason": reason})
        return {**self.head(), "choices": answers, "usage": usage(choices, self.n)}

    async def events(self, choices: list[Choice]) -> AsyncIterator[str]:
        """The answer as server-sent events: ``data: CHUNK`` per token of each choice in turn, then ``data: [DONE]``.

        With ``echo`` a choice begins with a chunk of its prompt. A chunk holds back the text that may begin a stop
        string until the next tokens tell; each choice ends with a chunk of its ``finish_reason``. A job's failure
        is a last ``data: {"error": ...}``.

        Args:
            choices: the choices, their jobs submitted.

        Yields:
            Each event.
        """
        for index, choice in enumerate(choices):
            prompt_length = len(echo_text(choice)) if self.echo else len(choice.prompt.text)
            if self.echo:
                echoed = self.logprobs_json(choice.echoed, 0)
                yield event({**self.head(), "choices": [self.chunk(index, echo_text(choice), echoed, None)]})
            job = choice.job
            if job is None:
                yield event({**self.head(), "choices": [self.chunk(index, "", None, "length")]})
                continue
            generated = sent = ""  # the pieces so far; the text sent
            async for kind, value in job.stream():
                if kind == "error":
                    yield event({"error": openai_body(refusal(value, "completion"))})
                    return
                if kind == "token":
                    logprobs = self.logprobs_json([value], prompt_length + len(generated))
                    generated += value["text"]
                    text, stopped = until_stop(generated, self.stop)
                    ready = text if stopped else text[: len(text) - stop_prefix(text, self.stop)]
                    yield event({**self.head(), "choices": [self.chunk(index, ready[len(sent):], logprobs, None)]})
                    sent = ready
                else:
                    text, stopped = until_stop(value["text"], self.stop)
                    reason = finish_reason(job, value["tokens"], stopped)
                    yield event({**self.head(), "choices": [self.chunk(index, text[len(sent):], None, reason)]})
        if self.usage_chunk:
            yield event({**self.head(), "choices": [], "usage": usage(choices, self.n)})
        yield "data: [DONE]\n\n"

    def head(self) -> dict[str, Any]:
        """What every chunk and the whole answer begin with.

        Returns:
            ``id``, ``object`` (``text_completion``), ``created`` and ``model``.
        """
        return {"id": self.id, "object": "text_completion", "created": self.created, "model": self.model}

    @staticmethod
    def chunk(index: int, text: str, logprobs: dict[str, Any] | None, reason: str | None) -> dict[str, Any]:
        """A streamed choice's piece, as a chunk's ``choices`` hold it.

        Args:
            index: the choice's index.
            text: the text it adds.
            logprobs: its token's log-probabilities (see
                [`logprobs_json`][plm.serve.openai_api.Completion.logprobs_json]), or None.
            reason: the choice's finish reason in its last chunk, else None.

        Returns:
            ``text``, ``index``, ``logprobs`` and ``finish_reason``.
        """
        return {"text": text, "index": index, "logprobs": logprobs, "finish_reason": reason}

    def logprobs_json(self, tokens: list[dict[str, Any]], offset: int) -> dict[str, Any] | None:
        """Tokens as OpenAI's legacy ``logprobs``, or None where the request asked for none.

        Args:
            tokens: tokens as a job has them (``text``, ``logprob``, ``top_logprobs``), or as a choice echoes them
                (the first with None for both).
            offset: where the first token's text begins in the prompt and completion.

        Returns:
            ``tokens`` (their pieces of text), ``token_logprobs``, ``top_logprobs`` (per token, the text of each of
            the most likely tokens and its log-probability; None for an echoed prompt's first) and ``text_offset``.
        """
        if self.logprobs is None:
            return None
        offsets = itertools.accumulate((len(token["text"]) for token in tokens[:-1]), initial=offset)
        return {"tokens": [token["text"] for token in tokens], "token_logprobs": [token["logprob"] for token in tokens],
                "top_logprobs": [alternatives_json(token) for token in tokens],
                "text_offset": list(offsets)}


def alternatives_json(token: dict[str, Any]) -> dict[str, float] | None:
    """A token's most likely alternatives as OpenAI's ``top_logprobs`` has them: log-probability by text.

    Args:
        token: a token as a job has it, or as a choice echoes it.

    Returns:
        The alternatives (none where none were asked for); None for an echoed prompt's first token.
    """
    alternatives = token.get("top_logprobs", [])
    return None if alternatives is None else {other["text"]: other["logprob"] for other in alternatives}


def echo_text(choice: Choice) -> str:
    """The text a choice echoes: its prompt as the model read it (none without ``echo``).

    Args:
        choice: the choice.

    Returns:
        Its echoed tokens' pieces, joined.
    """
    return "".join(token["text"] for token in choice.echoed)


def finish_reason(job: GenerationJob, tokens: list[dict[str, Any]], stopped: bool) -> str:
    """Why a choice ended: ``stop`` (a stop string, or the end of text), else ``length`` (``max_tokens``).

    Args:
        job: the choice's job.
        tokens: its tokens.
        stopped: its text reached a stop string.

    Returns:
        "stop" or "length".
    """
    return "stop" if stopped or tokens[-1]["id"] == job.tokenizer.eos_id else "length"


def usage(choices: list[Choice], n: int) -> dict[str, int]:
    """OpenAI's ``usage``: the prompts' tokens (once a prompt, whatever ``n``) and the tokens generated.

    Args:
        choices: the choices, done; ``n`` a prompt.
        n: the choices per prompt.

    Returns:
        ``prompt_tokens``, ``completion_tokens`` and ``total_tokens``.
    """
    prompt_tokens = sum(len(choice.prompt.ids) for choice in choices[::n])
    completion_tokens = sum(len(choice.job.new_ids) for choice in choices if choice.job is not None)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def embed(service: Service, texts: list[str]) -> tuple[list[list[float]], int]:
    """/embed's vector of each text, and the tokens the texts came to (on the model thread).

    Args:
        service: a model that embeds.
        texts: the texts.

    Returns:
        The vectors and the number of tokens.
    """
    assert isinstance(service, (EncoderService, ElmoService))  # the kinds that serve /embed
    vectors = service.embed(texts)["vectors"]
    return vectors, sum(len(service.tokenizer.encode(text)) for text in texts)


def base64_floats(vector: list[float]) -> str:
    """A vector as OpenAI's base64 encoding sends it: its float32s, little-endian.

    Args:
        vector: the numbers.

    Returns:
        The base64 text.
    """
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def as_prompts(value: Any) -> list[str | list[int]]:
    """A ``prompt`` field as a list of prompts, each a text or a list of token ids.

    Args:
        value: the field's value, checked: a text, texts, token ids, or lists of token ids.

    Returns:
        The prompts.
    """
    return [value] if isinstance(value, str) or token_ids(value) else list(value)


def as_list(value: str | list[str]) -> list[str]:
    """A field that takes a string or a list of strings, as a list.

    Args:
        value: the field's value.

    Returns:
        The strings.
    """
    return [value] if isinstance(value, str) else value


def model_card(name: str, created: int) -> dict[str, Any]:
    """A model as OpenAI's model list shows it.

    Args:
        name: the model's name.
        created: when it was loaded (Unix seconds).

    Returns:
        ``id``, ``object``, ``created`` and ``owned_by``.
    """
    return {"id": name, "object": "model", "created": created, "owned_by": OWNER}


def known(services: Sequence[Service], name: str | None) -> None:
    """Check that a request's model is one of the server's (None: the request names none).

    Args:
        services: the server's models.
        name: the model's name, or None.

    Raises:
        RequestError: an unknown model (404, ``model_not_found``).
    """
    if name is not None and all(service.name != name for service in services):
        raise RequestError(f"the model {name!r} does not exist; this server has "
                           f"{', '.join(service.name for service in services)}", 404, "model", "model_not_found")


def chosen(services: Sequence[Service], body: dict[str, Any], endpoint: str) -> Service:
    """The model a request's body names (or the one that serves ``endpoint``), as `choose` finds it.

    Args:
        services: the server's models.
        body: the request's body.
        endpoint: the plm endpoint whose work the request asks for ("generate", "embed").

    Returns:
        The service.

    Raises:
        RequestError: an unknown model (404), or one that does not do the work (400).
    """
    name = model_name(body)
    known(services, name)
    return choose(services, name, endpoint)


def event(value: Any) -> str:
    """A server-sent event of OpenAI's streams.

    Args:
        value: the event's data.

    Returns:
        ``data: JSON`` and a blank line.
    """
    return f"data: {json.dumps(value)}\n\n"


def openai_body(error: RequestError) -> dict[str, Any]:
    """A refusal as OpenAI's ``error`` object.

    Args:
        error: the refusal.

    Returns:
        ``message``, ``type`` (``invalid_request_error``, or ``server_error`` for a 500), ``param`` and ``code``.
    """
    kind = "invalid_request_error" if error.status < 500 else "server_error"
    return {"message": str(error), "type": kind, "param": error.param, "code": error.code}


def openai_error(error: RequestError, headers: Mapping[str, str] | None = None) -> Response:
    """OpenAI's answer to a refused request: ``{"error": {...}}`` with the refusal's status.

    Args:
        error: the refusal.
        headers: extra headers, or None.

    Returns:
        The JSON response.
    """
    return JSONResponse({"error": openai_body(error)}, status_code=error.status, headers=headers)
