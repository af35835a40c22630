"""Text in, text out: a model and its tokenizer used together."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import torch

from plm.apps.perplexity import Perplexity, perplexity
from plm.apps.zeroshot.detokenize import DETOKENIZERS
from plm.data.corpus import read_text
from plm.decoding.generation import generate
from plm.decoding.generation_config import StopStrings
from plm.errors import PLMError
from plm.models import CausalLM, Encoder
from plm.models.pretraining_heads import sentence_embeddings
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


def generate_text(
    model: CausalLM,
    tokenizer: Tokenizer,
    prompts: Sequence[str],
    max_new_tokens: int = 64,
    stop: Sequence[str] = (),
    **options,
) -> list[str]:
    """The continuation of each prompt (without the prompt), cut before any stop string.

    ``options`` are those of :func:`plm.decoding.generation.generate` (temperature, top_k,
    top_p, repetition_penalty, seed, keep_last, compile, ...). An empty prompt starts from
    the tokenizer's beginning-of-text token.

    Args:
        model: the causal language model.
        tokenizer: its tokenizer.
        prompts: the prompts, decoded as one batch.
        max_new_tokens: the most new tokens per prompt.
        stop: strings that end a continuation.
        **options (Any): as for :func:`plm.decoding.generation.generate`.

    Returns:
        Each prompt's continuation.

    Raises:
        PLMError: an empty prompt and no beginning-of-text token, an option out of range, or a prompt
            that does not fit the context with the new tokens.
    """
    rows = encode_prompts(tokenizer, prompts)
    pad = prompt_padding(tokenizer)
    ids, mask = left_pad(rows, pad)
    device = next(model.parameters()).device
    stop_strings = StopStrings(stop, tokenizer.decode) if stop else None
    output = generate(
        model,
        ids.to(device),
        max_new_tokens,
        mask.to(device) if len(rows) > 1 else None,
        eos_token_id=tokenizer.eos_id,
        pad_token_id=pad,
        stop=stop_strings,
        **options,
    )
    kept = min(ids.shape[1], options.get("keep_last") or ids.shape[1])  # generate cut the prompt to keep_last
    texts = tokenizer.decode_batch(output[:, kept:].tolist(), skip_special_tokens=True)
    return [stop_strings.cut(text) for text in texts] if stop_strings else texts


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
    start = tokenizer.bos_id if tokenizer.bos_id is not None else tokenizer.eos_id
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
) -> Perplexity:
    """Sliding-window perplexity of a UTF-8 text file (see :func:`plm.apps.perplexity.perplexity`).

    ``detokenize`` ("none", "wikitext", "ptb") undoes a benchmark's tokenisation first
    (:mod:`plm.apps.zeroshot.detokenize`). The text is preceded by the beginning-of-text
    token when the tokenizer has one, so that its first token is scored too. The
    result counts the file's words (before detokenising) and the bytes the model read.

    Args:
        model: the causal language model.
        tokenizer: its tokenizer.
        path: the text file.
        window: as for :func:`plm.apps.perplexity.perplexity`.
        stride: as for :func:`plm.apps.perplexity.perplexity`.
        batch_size: as for :func:`plm.apps.perplexity.perplexity`.
        progress: show a progress bar.
        detokenize: "none", "wikitext" or "ptb".

    Returns:
        The perplexity, with the file's words and bytes.

    Raises:
        PLMError: an unknown detokenizer, an unreadable file, or a window, stride or text that
            :func:`plm.apps.perplexity.perplexity` refuses.
    """
    if detokenize not in DETOKENIZERS:
        raise PLMError(f"unknown detokenizer {detokenize!r}; choose one of {', '.join(DETOKENIZERS)}")
    original = read_text(path)
    text = DETOKENIZERS[detokenize](original)
    ids = tokenizer.encode(text)
    start = tokenizer.bos_id if tokenizer.bos_id is not None else tokenizer.eos_id
    if start is not None:
        ids = [start, *ids]
    result = perplexity(model, ids, window, stride, batch_size, progress)
    return replace(result, words=len(original.split()), bytes=len(text.encode("utf-8")))


@torch.inference_mode()
def fill_mask(
    model: Encoder, tokenizer: Tokenizer, text: str, top_k: int = 5
) -> list[list[tuple[str | None, float]]]:
    """The ``top_k`` (token, probability) guesses for each mask token in ``text``, in order.

    A guess beyond the tokenizer's vocabulary (a model with more embedding rows) has no token: None.

    Args:
        model: an encoder with a masked-LM head.
        tokenizer: its tokenizer.
        text: the text, with mask tokens where words are missing.
        top_k: guesses per mask token.

    Returns:
        For each mask token, its ``top_k`` (token, probability) guesses, most likely first.

    Raises:
        PLMError: a model without a masked-LM head, a ``top_k`` out of range, a text without a mask
            token, or one cut before a mask token by the model's context.
    """
    if "mlm" not in model.config.pretraining_heads:
        raise PLMError(f"this {model.family} model has no masked-LM head (it was saved without one)")
    if not 0 < top_k <= model.config.vocab_size:
        raise PLMError(f"top_k must be between 1 and the vocabulary's {model.config.vocab_size:,} tokens, got {top_k}")
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
    best = logits.float().softmax(-1).topk(top_k)
    return [
        [(tokenizer.decode([index]).strip() or tokenizer.backend.id_to_token(index), prob) for prob, index in zip(*row)]
        for row in zip(best.values.tolist(), best.indices.tolist())
    ]


@torch.inference_mode()
def embed_texts(
    model: Encoder, tokenizer: Tokenizer, texts: Sequence[str], batch_size: int = 32, normalize: bool = True
) -> torch.Tensor:
    """Sentence embeddings (len(texts), hidden): mean over real tokens, L2-normalised (Sentence-BERT).

    Args:
        model: the encoder.
        tokenizer: its tokenizer.
        texts: the texts.
        batch_size: texts per forward pass.
        normalize: L2-normalise each embedding.

    Returns:
        The (len(texts), hidden) embeddings, fp32 on the CPU.
    """
    device = next(model.parameters()).device
    model.eval()
    chunks = []
    for start in range(0, len(texts), batch_size):
        batch = tokenizer.encode_batch_pairs(
            list(texts[start : start + batch_size]), max_length=model.config.context_length
        )
        ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
        chunks.append(
            sentence_embeddings(model, ids, mask, normalize=normalize, **segments(model, batch, device)).cpu().float()
        )  # fp32 whatever the weights' precision
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
