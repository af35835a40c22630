"""Dynamic batching of generation requests: those that arrive together decode as one batch.

A request waits in [`Batcher`][plm.serve.batching.Batcher] until the model thread is free; then it and the requests
that arrived with it (within ``window`` seconds of an idle server's first request, or while
the last batch ran), up to ``max_batch``, are left-padded into one batch and decoded with the
KV cache, one forward pass per step for all of them ([`decode_steps`][plm.decoding.generation.decode_steps]).
Only requests that decode alone as they would together share a batch: the same model and
sampling options, and a length that fits the context beside the others. Padding changes
nothing, so a greedy request gets the tokens it gets alone, and each sampled request draws
from a random generator of its own (seeded with its seed), so that a seed gives the same
text alone or batched. Each request's tokens go to it as they are chosen, which is
what streaming reads; ``max_batch`` 1 serves one request at a time. What only reads the
tokens is a request's own, and its neighbours do not wait for it: its stop strings end
its row alone, and the alternatives it asks for are read from the step's logits. A request's
failure is its own too: the others of its batch go on ([`decode_batch`][plm.serve.batching.decode_batch]).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

import torch

from plm.apps.text_pipelines import left_pad, prompt_padding
from plm.decoding.generation import Step, decode_steps
from plm.decoding.generation_config import GenerationConfig
from plm.models import CausalLM
from plm.tokenization.tokenizer import Tokenizer


@dataclass(eq=False)
class GenerationJob:
    """One request: its prompt ids and options, and what it has generated so far.

    Its events (``("token", {...})`` per token, then ``("done", {...})`` or ``("error", exception)``)
    are put on ``events`` from the model thread through the event loop it was submitted on.

    Attributes:
        model: the model that generates.
        tokenizer: its tokenizer.
        ids: the prompt's token ids.
        max_new_tokens: the most tokens to generate.
        options: the decoding options (sampling, temperature, top-k, top-p ...).
        seed: a sampled request's seed, or None.
        stop: strings that end the job once its text holds one (the text keeps it; the request cuts it).
        top_logprobs: how many of each step's most likely tokens to report beside the chosen one (0: none).
        events: the job's events, read by [`stream`][plm.serve.batching.GenerationJob.stream].
        loop: the event loop the job was submitted on (set by [`Batcher.submit`][plm.serve.batching.Batcher.submit]).
        new_ids: the tokens generated so far.
        tokens: each generated token's ``id``, ``text`` (its piece) and ``logprob``, and with ``top_logprobs``
            the step's most likely tokens (``top_logprobs``: their ``id``, ``text`` and ``logprob``).
        text: the decoded text of ``new_ids``, up to the last complete character.
        done: the job has finished (or failed).
    """

    model: CausalLM
    tokenizer: Tokenizer
    ids: list[int]
    max_new_tokens: int
    options: GenerationConfig
    seed: int | None = None
    stop: tuple[str, ...] = ()
    top_logprobs: int = 0
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    loop: asyncio.AbstractEventLoop | None = None
    new_ids: list[int] = field(default_factory=list)
    tokens: list[dict[str, Any]] = field(default_factory=list)
    text: str = ""  # the decoded text of new_ids, up to the last complete character
    done: bool = False

    def batch_key(self) -> tuple[Any, ...]:
        """Jobs with equal keys may share a batch: one model, one way of choosing tokens (each draws its own).

        Returns:
            The model's identity and the options.
        """
        return id(self.model), self.options

    def generator(self) -> torch.Generator | None:
        """The random generator a sampled job draws from, seeded with its seed, whatever its neighbours.

        Returns:
            The generator on the model's device; None for a job without a seed (torch's global one) or a greedy one.

        Raises:
            ValueError: a seed torch cannot take (requests check theirs before).
        """
        if self.seed is None or not self.options.sampling:
            return None
        return torch.Generator(self.model.device).manual_seed(self.seed)

    def add(self, token: int, logprob: float, finished: bool, alternatives: list[tuple[int, float]]) -> None:
        """Take the next token (model thread): its piece of text is what it adds to the decoded continuation.

        A byte-level token can end inside a character, which decodes as U+FFFD until the
        next tokens complete it; its piece is empty and the character goes with the token
        that completes it (or with the last token, as U+FFFD), so the pieces add up to the text.
        Emits a ``token`` event, and a ``done`` event with the whole text once the job is done.

        Args:
            token: the token's id.
            logprob: its log-probability.
            finished: the model ended the row (end of text).
            alternatives: the step's most likely tokens and their log-probabilities, most likely first (at least
                ``top_logprobs`` of them).
        """
        self.new_ids.append(token)
        text = self.tokenizer.decode(self.new_ids, skip_special_tokens=True)
        self.done = (finished or len(self.new_ids) == self.max_new_tokens
                     or any(stop in text for stop in self.stop))
        piece = "" if text.endswith("\ufffd") and not self.done else text[len(self.text):]
        self.text += piece
        self.tokens.append({"id": token, "text": piece, "logprob": logprob})
        if self.top_logprobs:  # each alternative's text as the token reads alone
            self.tokens[-1]["top_logprobs"] = [{"id": other, "text": self.tokenizer.decode([other]), "logprob": p}
                                               for other, p in alternatives[: self.top_logprobs]]
        self.emit("token", self.tokens[-1])
        if self.done:
            self.emit("done", {"text": text, "tokens": self.tokens})

    def fail(self, error: BaseException) -> None:
        """End the job with an error, which its request answers (model thread).

        Args:
            error: what went wrong.
        """
        self.done = True
        self.emit("error", error)

    def emit(self, kind: str, value: Any) -> None:
        """Put an event on ``events``, through the job's event loop (safe from the model thread).

        Args:
            kind: "token", "done" or "error".
            value: the event's value.
        """
        assert self.loop is not None  # set when the job was submitted
        self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))

    async def stream(self) -> AsyncIterator[tuple[str, Any]]:
        """The job's events as they come, up to its last ("done" or "error").

        Yields:
            (kind, value) for each event.
        """
        while True:
            kind, value = await self.events.get()
            yield kind, value
            if kind != "token":
                return

    async def result(self) -> dict[str, Any]:
        """The whole continuation, once done; a failure is raised here, in the request's handler.

        Returns:
            The ``done`` event's value: ``text`` and ``tokens``.

        Raises:
            Exception: the error the job failed with, whatever its type.
        """
        async for kind, value in self.stream():
            if kind == "error":
                raise value
            if kind == "done":
                return value
        raise AssertionError("a job's events end with done or error")


def decode_batch(jobs: list[GenerationJob]) -> None:
    """Decode jobs of one batch key together, handing each its tokens as they are chosen (on the model thread).

    The prompts are left-padded into one batch. A failure is the request's that caused it, and the server goes
    on: an error while a job takes its token fails that job alone; one the batch raises before any job has a
    token (a prompt the model cannot read, say) sends each job through again alone, so that only the one at
    fault fails; one later fails the jobs not yet done.

    Args:
        jobs: the jobs, all of one batch key (see
            [`GenerationJob.batch_key`][plm.serve.batching.GenerationJob.batch_key]).
    """
    try:
        decode_together(jobs)
    except Exception as error:  # the requests answer it; the server goes on
        if len(jobs) > 1 and not any(job.new_ids for job in jobs):
            for job in jobs:
                decode_batch([job])
            return
        for job in jobs:
            if not job.done:
                job.fail(error)


def decode_together(jobs: list[GenerationJob]) -> None:
    """The decoding of `decode_batch`: one left-padded batch, each row drawing from its job's generator.

    Args:
        jobs: the jobs, all of one batch key.

    Raises:
        Exception: whatever the batch's decoding raises (a job's own error while it takes a token fails it).
    """
    first = jobs[0]
    model, tokenizer, options = first.model, first.tokenizer, first.options
    pad = prompt_padding(tokenizer)
    ids, mask = left_pad([job.ids for job in jobs], pad)  # (batch, longest prompt)
    config = dataclasses.replace(options, max_new_tokens=max(job.max_new_tokens for job in jobs),
                                 eos_token_id=tokenizer.eos_id, pad_token_id=pad)
    generators = [job.generator() for job in jobs]
    steps = decode_steps(model, ids.to(model.device), config, mask.to(model.device), generators=generators)
    alternatives = max(job.top_logprobs for job in jobs)
    for step in steps:
        rows = zip(jobs, step.tokens.tolist(), step.logprobs.tolist(), step.finished.tolist(),
                   most_likely(step, alternatives))
        for job, token, logprob, finished, likely in rows:
            if job.done:
                continue
            try:
                job.add(token, logprob, finished, likely)
            except Exception as error:  # the job's own (its text, its stop strings): it alone fails
                job.fail(error)
        if all(job.done for job in jobs):
            steps.close()  # no row wants more tokens
            break


def most_likely(step: Step, k: int) -> list[list[tuple[int, float]]]:
    """Each row's ``k`` most likely next tokens under the model, with their log-probabilities (none for k = 0).

    Args:
        step: a decoding step of the batch.
        k: how many tokens per row.

    Returns:
        Per row, (token id, log-probability) pairs, most likely first.
    """
    if k == 0:
        return [[] for _ in range(len(step.tokens))]
    logprobs, ids = step.logits.float().log_softmax(-1).topk(min(k, step.logits.shape[-1]))  # (batch, k) each
    return [list(zip(row_ids, row_logprobs)) for row_ids, row_logprobs in zip(ids.tolist(), logprobs.tolist())]


class Batcher:
    """Collects generation jobs and decodes them in batches on ``executor`` (the server's one model thread).

    Args:
        executor: the model thread.
        max_batch: the most jobs decoded together.
        window: seconds an idle batcher waits for more jobs after the first.
    """

    def __init__(self, executor: Executor, max_batch: int, window: float) -> None:
        self.executor = executor
        self.max_batch = max_batch
        self.window = window
        self.pending: list[GenerationJob] = []
        self.arrived = asyncio.Event()

    def submit(self, job: GenerationJob) -> None:
        """Queue a job for the next batch it fits in (on the event loop).

        Args:
            job: the job; its events go through the running event loop.
        """
        job.loop = asyncio.get_running_loop()
        self.pending.append(job)
        self.arrived.set()

    async def run(self) -> None:
        """Forever: wait for a job, let others join it for ``window`` seconds, decode a batch."""
        loop = asyncio.get_running_loop()
        while True:
            await self.arrived.wait()
            if len(self.pending) < self.max_batch:
                await asyncio.sleep(self.window)
            batch = self.take()
            if not self.pending:
                self.arrived.clear()
            await loop.run_in_executor(self.executor, decode_batch, batch)

    def take(self) -> list[GenerationJob]:
        """The oldest job and, up to ``max_batch``, the later ones that can share its batch; the rest wait.

        A job joins when it has the first's batch key and the longest prompt and longest continuation of the
        batch still fit the model's context.

        Returns:
            The batch, oldest first.
        """
        first = self.pending[0]
        batch, waiting = [first], []
        context = first.model.context_length()
        longest, most = len(first.ids), first.max_new_tokens
        for job in self.pending[1:]:
            fits = max(longest, len(job.ids)) + max(most, job.max_new_tokens) <= context
            if len(batch) < self.max_batch and job.batch_key() == first.batch_key() and fits:
                batch.append(job)
                longest, most = max(longest, len(job.ids)), max(most, job.max_new_tokens)
            else:
                waiting.append(job)
        self.pending = waiting
        return batch
