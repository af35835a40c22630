r"""Tasks that prompt and read the answer (GPT-2 §3.5, §3.7, §3.8): the prompt, fitted; greedy answers; examples.

A [`Prompt`][plm.apps.zeroshot.prompting.Prompt] is a context (the document, the conversation so far, the example
pairs) followed by a query that must stay whole (``Q: ...\nA:``, ``sentence =``). A
prompt too long for the model's context loses the beginning of its context, never
its query. The model continues it greedily until a new line (or end of text), and
[`greedy_answers`][plm.apps.zeroshot.prompting.greedy_answers] returns the text up to the new line with the probability
the model gave each token it chose: GPT-2 §3.8 ranks answers by that probability.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, TypeVar

from plm.apps.text_pipelines import left_pad, prompt_padding
from plm.apps.zeroshot.scoring import split_whitespace
from plm.decoding.generation import decode_steps
from plm.decoding.generation_config import GenerationConfig, StopStrings
from plm.errors import PLMError
from plm.models import CausalLM
from plm.progress import progress_bar
from plm.tokenization.tokenizer import Tokenizer

Item = TypeVar("Item")


@dataclass(frozen=True)
class Prompt:
    """A prompt in two parts: a context that may lose its beginning to fit the model, then a query that may not.

    Attributes:
        context: the document, the conversation so far, or the example pairs.
        query: what follows the context and is kept whole: the question and ``A:``, the sentence and `` =``.
        where: how an error names the prompt ("coqa.json: story 'x', turn 2").
    """

    context: str
    query: str
    where: str

    @property
    def text(self) -> str:
        """The whole prompt, as the model reads it when it fits."""
        return self.context + self.query


@dataclass(frozen=True)
class GreedyAnswer:
    """The model's answer to a prompt: what greedy decoding wrote, and how sure it was.

    A dataset's gold answers, by contrast, are [`Answer`][plm.tasks.readers.Answer]s.

    Attributes:
        text: the continuation up to the first new line, without the whitespace around it.
        logprobs: log p of each token chosen, in nats, the one that ended the answer (new line, end of text)
            included: an answer the model is sure of is also one it is sure has ended.
        cut: the prompt lost the beginning of its context to fit the model.
    """

    text: str
    logprobs: list[float]
    cut: bool

    @property
    def logprob(self) -> float:
        """Log p of the answer, the sum over its tokens, in nats."""
        return sum(self.logprobs)


def qa_turns(pairs: Sequence[tuple[str, str]]) -> str:
    r"""Questions and their answers as the prompts write them: ``Q: question\nA: answer\n\n`` each.

    Args:
        pairs: the (question, answer) pairs.

    Returns:
        The text, empty for no pairs.
    """
    return "".join(f"Q: {question}\nA: {answer}\n\n" for question, answer in pairs)


def qa_query(question: str) -> str:
    r"""The end of a question-answering prompt, which the model continues with its answer: ``Q: question\nA:``.

    Args:
        question: the question.

    Returns:
        The query.
    """
    return f"Q: {question}\nA:"


def split_examples(
    items: Sequence[Item], shots: int, examples: Sequence[Item] | None, source: str
) -> tuple[list[Item], list[Item]]:
    """The example items a prompt shows, and the items to evaluate.

    The examples are the first ``shots`` of ``examples`` when given; else the first ``shots``
    of ``items``, which are then left out of the evaluation (a model is not scored on a
    question whose answer its prompt shows).

    Args:
        items: the items of the file evaluated.
        shots: how many examples.
        examples: the items of a file of examples, or None.
        source: the file the examples come from, for messages.

    Returns:
        The examples and the items to evaluate.

    Raises:
        PLMError: a negative ``shots``, fewer examples than ``shots``, or nothing left to evaluate.
    """
    if shots < 0:
        raise PLMError(f"the number of examples must be >= 0, got {shots}")
    if examples is None:
        chosen, evaluated = list(items[:shots]), list(items[shots:])
        if not evaluated:
            raise PLMError(f"{source}: {len(items)} items, none left to evaluate after the {shots} examples")
    else:
        chosen, evaluated = list(examples[:shots]), list(items)
    if len(chosen) < shots:
        raise PLMError(f"{source}: {shots} examples asked for, the file holds {len(chosen)}")
    return chosen, evaluated


def encode_prompt(tokenizer: Tokenizer, prompt: Prompt, room: int) -> tuple[list[int], bool]:
    """The prompt's ids, at most ``room`` of them: the context's last tokens, then all of the query's.

    Context and query are tokenized apart, whitespace at the end of the context moved to
    the start of the query (as [`split_whitespace`][plm.apps.zeroshot.scoring.split_whitespace] does for
    scoring), so that the query's tokens are the same whatever is cut before it.

    Args:
        tokenizer: the model's tokenizer.
        prompt: the prompt.
        room: the tokens the prompt may take.

    Returns:
        The ids, and whether the context lost its beginning.

    Raises:
        PLMError: a query that alone takes more than ``room`` tokens.
    """
    context, query = split_whitespace(prompt.context, prompt.query)
    kept = tokenizer.encode(query)
    if len(kept) > room:
        raise PLMError(
            f"{prompt.where}: the prompt's end {query.strip()[:40]!r} alone takes {len(kept)} tokens, and the "
            f"model's context leaves {room} for the prompt"
        )
    before = tokenizer.encode(context)
    fits = room - len(kept)
    cut = len(before) > fits
    return (before[len(before) - fits :] if cut else before) + kept, cut


def greedy_answers(
    model: CausalLM,
    tokenizer: Tokenizer,
    prompts: Sequence[Prompt],
    max_new_tokens: int = 32,
    batch_size: int = 8,
    progress: bool = False,
    desc: str = "answering",
) -> list[GreedyAnswer]:
    """Continue each prompt greedily until a new line, end of text or ``max_new_tokens``.

    Each prompt is cut ([`encode_prompt`][plm.apps.zeroshot.prompting.encode_prompt]) to leave ``max_new_tokens`` of the
    model's context for the answer.

    Args:
        model: the causal LM.
        tokenizer: its tokenizer.
        prompts: the prompts.
        max_new_tokens: the most tokens of an answer (the new line included).
        batch_size: the prompts decoded together.
        progress: show a progress bar.
        desc: the progress bar's label.

    Returns:
        The answers, in the order of ``prompts``.

    Raises:
        PLMError: ``max_new_tokens`` that leave no room for a prompt, or a prompt whose query does not fit.
    """
    room = model.context_length() - max_new_tokens
    if room < 1:
        raise PLMError(
            f"{max_new_tokens} new tokens leave no room for the prompt in a context of {model.context_length()}"
        )
    encoded = [encode_prompt(tokenizer, prompt, room) for prompt in prompts]
    pad = prompt_padding(tokenizer)
    stop = StopStrings(["\n"], tokenizer.decode)
    config = GenerationConfig(max_new_tokens=max_new_tokens, eos_token_id=tokenizer.eos_id, pad_token_id=pad,
                              stop=stop)
    device = next(model.parameters()).device
    answers = []
    for start in progress_bar(range(0, len(encoded), batch_size), disable=not progress, desc=desc):
        chunk = encoded[start : start + batch_size]
        ids, mask = left_pad([row for row, _ in chunk], pad)
        tokens: list[list[int]] = [[] for _ in chunk]
        logprobs: list[list[float]] = [[] for _ in chunk]
        finished = [False] * len(chunk)
        for step in decode_steps(model, ids.to(device), config, mask.to(device)):
            for row, (token, logprob, done) in enumerate(
                zip(step.tokens.tolist(), step.logprobs.tolist(), step.finished.tolist())
            ):
                if not finished[row]:  # a finished row's later columns are padding
                    tokens[row].append(token)
                    logprobs[row].append(logprob)
                    finished[row] = done
        texts = tokenizer.decode_batch(tokens, skip_special_tokens=True)
        answers += [
            GreedyAnswer(stop.cut(text).strip(), row_logprobs, cut)
            for text, row_logprobs, (_, cut) in zip(texts, logprobs, chunk)
        ]
    return answers
