"""Text in, text out: a model and its tokenizer used together."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Sequence

import torch

from plm.apps.perplexity import Perplexity, perplexity
from plm.apps.zeroshot.detokenize import DETOKENIZERS
from plm.data.corpus import read_text
from plm.data.encoded import encode_texts, token_dtype
from plm.data.sources import iter_documents
from plm.decoding.generation import decode_steps, generate, row_generator
from plm.decoding.generation_config import GenerationConfig, StopStrings, configured, stop_prefix
from plm.errors import PLMError
from plm.models import CausalLM, Encoder
from plm.models.pretraining_heads import sentence_embeddings
from plm.progress import progress_bar
from plm.tokenization.tokenizer import Tokenizer

DEFAULT_NEW_TOKENS = 64  # a continuation's length when none is asked for (plm generate, plm serve)


def left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts of different lengths as one (batch, time) tensor, padded on the left, and its mask.

    Args:
        rows: each prompt's token ids.
        pad_id: the id that fills the padding.

    Returns:
        The (batch, time) ids and the mask, 0 at padding.
    """
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for index, row in enumerate(rows):
        ids[index, width - len(row) :] = torch.tensor(row, dtype=torch.long)
        mask[index, width - len(row) :] = 1
    return ids, mask


@dataclass(frozen=True)
class Continuation:
    """A prompt's continuation, and where the model ended it.

    Attributes:
        text: the new text (without the prompt), cut before any stop string.
        ended_after: how many tokens the model wrote before its end-of-text token, which ended the
            continuation there; None where it wrote none (it ran to ``max_new_tokens`` or a stop string).
    """

    text: str
    ended_after: int | None


def continue_prompts(
    model: CausalLM,
    tokenizer: Tokenizer,
    prompts: Sequence[str],
    max_new_tokens: int = 64,
    stop: Sequence[str] = (),
    *,
    batch_size: int | None = None,
    progress: bool = False,
    stream: Callable[[str], None] | None = None,
    **options,
) -> list[Continuation]:
    """The continuation of each prompt (without the prompt), cut before any stop string, and where it ended.

    ``options`` are those of [`generate`][plm.decoding.generation.generate] (temperature, top_k,
    top_p, repetition_penalty, seed, keep_last, compile, ...). A continuation ends where the
    model writes the tokenizer's end-of-text token, unless ``ignore_eos`` asks for all
    ``max_new_tokens``. An empty prompt starts from the tokenizer's beginning-of-text token.

    Prompts of similar lengths are decoded together, ``batch_size`` at a time, so that memory holds one
    batch's cache however many prompts there are. A sampled prompt draws from its own generator, seeded by
    ``seed`` and its position ([`row_generator`][plm.decoding.generation.row_generator]), so that its
    continuation does not depend on the batch size or on the other prompts.

    With ``stream``, one prompt's text is handed over as it is decoded, a piece a token (none for a token that
    ends inside a character, or that may begin a stop string): the pieces add up to the continuation's text.

    Args:
        model: the causal language model.
        tokenizer: its tokenizer.
        prompts: the prompts.
        max_new_tokens: the most new tokens per prompt.
        stop: strings that end a continuation.
        batch_size: the prompts decoded at once (None: all of them).
        progress: show a progress bar over the prompts.
        stream: called with each new piece of the text of a single prompt's continuation (beam search: the
            whole text, once).
        **options (Any): as for [`generate`][plm.decoding.generation.generate].

    Returns:
        Each prompt's continuation, in the order of ``prompts``.

    Raises:
        PLMError: an empty prompt and no beginning-of-text token, an option out of range, a prompt
            that does not fit the context with the new tokens, or ``stream`` for more than one prompt.
    """
    if stream is not None and len(prompts) != 1:
        raise PLMError(f"a stream takes one prompt's text; {len(prompts)} prompts were given")
    rows = encode_prompts(tokenizer, prompts)
    pad = prompt_padding(tokenizer)
    device = next(model.parameters()).device
    stop_strings = StopStrings(stop, tokenizer.decode) if stop else None
    config = configured(None, max_new_tokens, {"eos_token_id": tokenizer.eos_id, "pad_token_id": pad,
                                               "stop": stop_strings, **options})
    seed = config.seed if config.sampling and not config.searches_beams else None
    order = sorted(range(len(rows)), key=lambda index: len(rows[index]))  # similar lengths: little padding
    size = batch_size or len(rows)
    new: list[list[int]] = [[] for _ in rows]
    with progress_bar(total=len(rows), disable=not progress, desc="generate", unit=" prompts", leave=False) as bar:
        for start in range(0, len(order), size):
            batch = order[start : start + size]
            ids, mask = left_pad([rows[index] for index in batch], pad)
            generators = None if seed is None else [row_generator(seed, index, device) for index in batch]
            if stream is not None and not config.searches_beams:
                new[0] = streamed(model, tokenizer, ids.to(device), config, generators, stream)
                bar.update(1)
                continue
            output = generate(model, ids.to(device), attention_mask=mask.to(device) if len(batch) > 1 else None,
                              config=config, generators=generators)
            kept = min(ids.shape[1], config.keep_last or ids.shape[1])  # generate cut the prompt to keep_last
            for index, row in zip(batch, output[:, kept:].tolist()):
                new[index] = row
            bar.update(len(batch))
    texts = tokenizer.decode_batch(new, skip_special_tokens=True)
    if stream is not None and config.searches_beams:  # no text is settled before the search ends
        stream(stop_strings.cut(texts[0]) if stop_strings else texts[0])
    eos = None if config.ignore_eos else tokenizer.eos_id
    return [Continuation(stop_strings.cut(text) if stop_strings else text, ended_after(row, eos, stop_strings))
            for text, row in zip(texts, new)]


def streamed(model: CausalLM, tokenizer: Tokenizer, ids: torch.Tensor, config: GenerationConfig,
             generators: list[torch.Generator] | None, stream: Callable[[str], None]) -> list[int]:
    """One prompt's new tokens, decoded step by step, each step's settled text handed to ``stream``.

    The text is settled up to a stop string where one is reached; before that, up to any end of it that
    may be the start of a stop string, and up to a last character a byte-level token has not completed
    (decoded as U+FFFD). What is settled is never taken back: the pieces add up to the text
    [`continue_prompts`][plm.apps.text_pipelines.continue_prompts] gives.

    Args:
        model: the causal language model.
        tokenizer: its tokenizer.
        ids: (1, time) the prompt.
        config: how to continue it.
        generators: the row's random generator, or None.
        stream: called with each new piece of settled text.

    Returns:
        The new tokens, as [`generate`][plm.decoding.generation.generate] writes them.
    """
    stop = config.stop
    new: list[int] = []
    text, handed = "", 0  # the decoded continuation, and how many of its characters were handed over
    for step in decode_steps(model, ids, config, generators=generators):
        new.append(int(step.tokens[0]))
        text = tokenizer.decode(new, skip_special_tokens=True)
        settled = len(stop.cut(text)) if stop is not None else len(text)  # up to a stop string reached
        if settled == len(text):
            if text.endswith("\ufffd") and not bool(step.finished[0]):
                settled -= 1
            if stop is not None:  # an end a later token may make a stop string
                settled = min(settled, len(text) - stop_prefix(text, stop.strings))
        if settled > handed:
            stream(text[handed:settled])
            handed = settled
    text = stop.cut(text) if stop is not None else text
    if len(text) > handed:  # what the last step held back: the decoding ended there
        stream(text[handed:])
    return new


def ended_after(new: list[int], eos: int | None, stop: StopStrings | None) -> int | None:
    """How many tokens a row wrote before the end-of-text token that ended it, or None where none did.

    The row's first ``eos`` ended it, unless a stop string did before: then that ``eos`` is the padding
    after it (the padding id is the eos id where the tokenizer has no pad token).

    Args:
        new: the row's new tokens, as [`generate`][plm.decoding.generation.generate] wrote them.
        eos: the end-of-text id (None: nothing ends a row at a token).
        stop: the stop strings, or None.

    Returns:
        The tokens before the row's end-of-text token, or None.
    """
    if eos is None or eos not in new:
        return None
    before = new.index(eos)
    if stop is not None and any(s in stop.decode(new[:before]) for s in stop.strings):
        return None
    return before


def generate_text(
    model: CausalLM,
    tokenizer: Tokenizer,
    prompts: Sequence[str],
    max_new_tokens: int = 64,
    stop: Sequence[str] = (),
    **options,
) -> list[str]:
    """The continuation of each prompt (without the prompt), cut before any stop string.

    The texts of [`continue_prompts`][plm.apps.text_pipelines.continue_prompts] (its arguments, its errors),
    which also says where the model ended each; ``stream=callback`` hands over one prompt's text as it is
    decoded.

    Returns:
        Each prompt's continuation.
    """
    return [c.text for c in continue_prompts(model, tokenizer, prompts, max_new_tokens, stop, **options)]


def encode_prompts(tokenizer: Tokenizer, prompts: Sequence[str]) -> list[list[int]]:
    """Each prompt's token ids.

    An empty prompt is the tokenizer's beginning-of-text token, for there is nothing else to continue from.

    Args:
        tokenizer: the tokenizer.
        prompts: the prompts.

    Returns:
        Each prompt's token ids.

    Raises:
        PLMError: an empty prompt and a tokenizer without a beginning-of-text (or end-of-text) token.
    """
    rows = [tokenizer.encode(prompt) for prompt in prompts]
    start = tokenizer.start_id
    for index, row in enumerate(rows):
        if not row:
            if start is None:
                raise PLMError(f"prompt {index + 1} is empty and the tokenizer has no beginning-of-text token")
            row.append(start)
    return rows


def prompt_padding(tokenizer: Tokenizer) -> int:
    """The id that left-pads prompts (the attention mask hides it): the pad token, else end-of-text, else 0.

    Args:
        tokenizer: the tokenizer.

    Returns:
        The padding id.
    """
    return tokenizer.padding_id


def room_for_new_tokens(
    model: CausalLM, tokenizer: Tokenizer, prompts: Sequence[str], keep_last: int | None = None
) -> int:
    """How many tokens fit in the model's context after the longest prompt (cut to ``keep_last``).

    Args:
        model: the causal language model.
        tokenizer: its tokenizer.
        prompts: the prompts.
        keep_last: the prompt tokens kept (None: all).

    Returns:
        The number of new tokens that fit.
    """
    longest = max(max(len(tokenizer.encode(prompt)), 1) for prompt in prompts)  # an empty prompt gets a start token
    return model.context_length() - min(longest, keep_last or longest)


def file_perplexity(
    model: CausalLM,
    tokenizer: Tokenizer,
    path: str,
    window: int | None = None,
    stride: int | None = None,
    batch_size: int = 8,
    progress: bool = False,
    detokenize: str = "none",
    one_text: bool = False,
) -> Perplexity:
    """Sliding-window perplexity of a text file (see `perplexity`), every token scored once.

    The file is read as pre-training reads a ``--train`` or ``--validation`` file: its documents
    ([`iter_documents`][plm.data.sources.iter_documents]: paragraphs separated by blank lines, or a JSONL field
    ``text``), each encoded alone and followed by the end-of-text token
    ([`encode_texts`][plm.data.encoded.encode_texts]), and the whole after the tokenizer's start token
    ([`start_id`][plm.tokenization.tokenizer.Tokenizer.start_id]), so that the first token is scored too. So a run's
    final validation perplexity, with windows of its block size, is this number for its validation file. ``one_text``
    scores the file as one text instead, blank lines and all, as GPT-2 scored WikiText and the PTB.

    ``detokenize`` ("none", "wikitext", "ptb") undoes a benchmark's tokenisation first
    ([`plm.apps.zeroshot.detokenize`][plm.apps.zeroshot.detokenize]). The result counts the words of the text (before
    detokenising) and the UTF-8 bytes of the text the model read.

    Args:
        model: the causal language model.
        tokenizer: its tokenizer.
        path: the text file.
        window: as for [`perplexity`][plm.apps.perplexity.perplexity].
        stride: as for [`perplexity`][plm.apps.perplexity.perplexity].
        batch_size: as for [`perplexity`][plm.apps.perplexity.perplexity].
        progress: show a progress bar.
        detokenize: "none", "wikitext" or "ptb".
        one_text: score the file as one text, not as its documents.

    Returns:
        The perplexity, with the text's words and bytes.

    Raises:
        PLMError: an unknown detokenizer, an unreadable file, or a window, stride or text that
            [`perplexity`][plm.apps.perplexity.perplexity] refuses.
    """
    if detokenize not in DETOKENIZERS:
        raise PLMError(f"unknown detokenizer {detokenize!r}; choose one of {', '.join(DETOKENIZERS)}")
    originals = [read_text(path)] if one_text else [document.text for document in iter_documents(path)]
    texts = [DETOKENIZERS[detokenize](text) for text in originals]
    if one_text:
        ids = tokenizer.encode(texts[0])
    else:
        encoded = encode_texts(texts, tokenizer.backend, tokenizer.eos_id, token_dtype(tokenizer.vocab_size),
                               boundaries=False)
        ids = encoded.tokens.tolist()
    if tokenizer.start_id is not None:
        ids = [tokenizer.start_id, *ids]
    result = perplexity(model, ids, window, stride, batch_size, progress)
    return replace(result, words=sum(len(text.split()) for text in originals),
                   bytes=sum(len(text.encode("utf-8")) for text in texts))


@torch.inference_mode()
def fill_mask(
    model: Encoder, tokenizer: Tokenizer, text: str, guesses: int = 5
) -> list[list[tuple[str | None, float]]]:
    """The ``guesses`` likeliest (token, probability) pairs for each mask token in ``text``, in order.

    A guess beyond the tokenizer's vocabulary (a model with more embedding rows) has no token: None.

    Args:
        model: an encoder with a masked-LM head.
        tokenizer: its tokenizer.
        text: the text, with mask tokens where words are missing.
        guesses: how many guesses per mask token.

    Returns:
        For each mask token, its ``guesses`` (token, probability) pairs, most likely first.

    Raises:
        PLMError: a model without a masked-LM head, ``guesses`` out of range, a text without a mask
            token, or one cut before a mask token by the model's context.
    """
    if "mlm" not in model.config.pretraining_heads:
        raise PLMError(f"this {model.family} model has no masked-LM head (it was saved without one)")
    if not 0 < guesses <= model.config.vocab_size:
        raise PLMError(f"`guesses` must be between 1 and the vocabulary's {model.config.vocab_size:,} tokens, "
                       f"got {guesses}")
    mask_token = tokenizer.special_tokens.get("mask")
    masks = tokenizer.encode(text).count(tokenizer.required_id("mask")) if mask_token is not None else 0
    if not masks:
        raise PLMError(f"the text has no mask token; write {mask_token or '[MASK]'} where a word is missing")
    context = model.config.context_length
    batch = tokenizer.encode_batch_pairs([text], max_length=context)
    positions = batch["input_ids"][0] == tokenizer.required_id("mask")
    kept = int(positions.sum())
    if kept < masks:
        lost = "its mask token" if masks == 1 else f"{masks - kept} of its {masks} mask tokens"
        raise PLMError(
            f"the text is longer than the model's context of {context} tokens and is cut before {lost}; shorten it"
        )
    device = next(model.parameters()).device
    model.eval()
    logits = model(
        batch["input_ids"].to(device),
        attention_mask=batch["attention_mask"].to(device),
        **segments(model, batch, device),
    ).logits[0, positions.to(device)]  # (masks, vocab)
    best = logits.float().softmax(-1).topk(guesses)
    return [
        [(tokenizer.decode([index]).strip() or tokenizer.backend.id_to_token(index), prob) for prob, index in zip(*row)]
        for row in zip(best.values.tolist(), best.indices.tolist())
    ]


@torch.inference_mode()
def embed_texts(
    model: Encoder, tokenizer: Tokenizer, texts: Sequence[str], batch_size: int = 32, normalize: bool = True,
    progress: bool = False,
) -> torch.Tensor:
    """Sentence embeddings (len(texts), hidden): mean over real tokens, L2-normalised (Sentence-BERT).

    Args:
        model: the encoder.
        tokenizer: its tokenizer.
        texts: the texts.
        batch_size: texts per forward pass.
        normalize: L2-normalise each embedding.
        progress: show a progress bar of the texts embedded.

    Returns:
        The (len(texts), hidden) embeddings, fp32 on the CPU.
    """
    device = next(model.parameters()).device
    model.eval()
    chunks = []
    with progress_bar(total=len(texts), disable=not progress, desc="embed", unit=" texts", leave=False) as bar:
        for start in range(0, len(texts), batch_size):
            batch = tokenizer.encode_batch_pairs(
                list(texts[start : start + batch_size]), max_length=model.config.context_length
            )
            ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
            chunks.append(sentence_embeddings(
                model, ids, mask, normalize=normalize, **segments(model, batch, device)
            ).cpu().float())  # fp32 whatever the weights' precision
            bar.update(len(ids))
    return torch.cat(chunks)


def segments(model: Encoder, batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """token_type_ids for models with segment embeddings (DeBERTa has none).

    Args:
        model: the encoder.
        batch: the tokenizer's batch.
        device: where the ids go.

    Returns:
        ``token_type_ids`` as a keyword argument, or nothing.
    """
    return {"token_type_ids": batch["token_type_ids"].to(device)} if model.config.segments else {}
