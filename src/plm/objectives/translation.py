"""Translating with any encoder-decoder, and scoring translations: BLEU, chrF, exact match.

What seq2seq training's validation ([`plm.objectives.teacher_forcing`][plm.objectives.teacher_forcing]) and the
translation commands
([`plm.apps.translation`][plm.apps.translation]) share. Translation goes through the one decoding interface
([`plm.decoding`][plm.decoding]), so it works for every model that implements it. Sentences are decoded in
batches of similar source lengths, all beams of a batch in one forward pass per step, each
sentence leaving its batch once it is done, and returned in input order. Beam size 1 without a
length penalty is greedy search. A sampling search (temperature, top-k, top-p) draws one translation a
sentence, as back-translation does (Edunov et al., 2018), each sentence from its own random generator
seeded by the search's seed and the sentence's position, so that a sentence gets the same translation
whichever sentences share its batch.

Scores are sacrebleu's (Post, 2018) on detokenised text: the tokenizer's decoding of the
model's output against the raw reference lines, with sacrebleu's own tokenisation
(13a for BLEU), so that they compare with published numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import sacrebleu
import torch

from plm.data.sentence_pairs import Seq2SeqTokenizers, right_pad, token_budget_batches
from plm.decoding import GenerationConfig, beam_search, decode_steps, row_generator
from plm.device import available_memory
from plm.errors import PLMError
from plm.models import RECIPES
from plm.models.base import Seq2SeqModel
from plm.progress import progress_bar


def recipe_decoding(family: str, **given: Any) -> GenerationConfig:
    """The search of ``family``'s recipe (its ``decoding``), with the options ``given`` in its place.

    Args:
        family: the model family.
        **given: fields of [`GenerationConfig`][plm.decoding.generation_config.GenerationConfig] that replace the
            recipe's.

    Returns:
        The search.
    """
    return dataclasses.replace(RECIPES[family].decoding, **given)


def translate(
    model: Seq2SeqModel,
    tokenizers: Seq2SeqTokenizers,
    sentences: Sequence[str],
    config: GenerationConfig | None = None,
    *,
    max_tokens: int = 4096,
    progress: bool = False,
) -> list[str]:
    """The translation of each sentence, in order; ``progress`` shows a bar of the sentences translated.

    Args:
        model: the encoder-decoder.
        tokenizers: its tokenizers.
        sentences: the source sentences.
        config: the search: its beams, length penalty and length limits (None: the family's recipe, as
            [`recipe_decoding`][plm.objectives.translation.recipe_decoding] gives it). The target tokenizer's end and
            padding tokens replace the config's.
        max_tokens: the source tokens per batch, shared by the beams (a beam of k takes ``max_tokens / k``).
        progress: show a progress bar.

    Returns:
        The translations, as text.

    Raises:
        PLMError: options that cannot search, a sentence longer than the model reads, a beam over the
            vocabulary, or a search that would not fit in the memory free.
    """
    searched = translate_ids(model, tokenizers, sentences, config, max_tokens=max_tokens, progress=progress)
    return tokenizers.decode_targets([ids[1:] for ids in searched])


@torch.inference_mode()
def translate_ids(
    model: Seq2SeqModel,
    tokenizers: Seq2SeqTokenizers,
    sentences: Sequence[str],
    config: GenerationConfig | None = None,
    *,
    max_tokens: int = 4096,
    progress: bool = False,
) -> list[list[int]]:
    """Each sentence's translation as the search chose it: target ids ``<s> y_1 .. y_m </s>``.

    ``<s>`` is the model's ``decoder_start_id`` where its config has one (Marian's ``<pad>``, fairseq's ``</s>``),
    else the target tokenizer's ``bos``. There is no ``</s>`` where the length limit ended it; decoding to text
    and encoding again need not give these ids back (see [`translate`][plm.objectives.translation.translate]).

    Args:
        model: the encoder-decoder.
        tokenizers: its tokenizers.
        sentences: the source sentences.
        config: the search (None: the family's recipe); see [`translate`][plm.objectives.translation.translate].
        max_tokens: the source tokens per batch, shared by the beams.
        progress: show a progress bar.

    Returns:
        The target ids of each sentence, in input order.

    Raises:
        PLMError: options that cannot search, a sentence longer than the model reads, a beam over the
            vocabulary, or a search that would not fit in the memory free.
    """
    bos, eos, pad = (tokenizers.target.required_id(role) for role in ("bos", "eos", "pad"))  # checked on loading
    model_start = getattr(model.config, "decoder_start_id", None)  # the Transformer's; other families have none
    start_id = bos if model_start is None else model_start
    config = dataclasses.replace(config or recipe_decoding(model.family), eos_token_id=eos, pad_token_id=pad)
    check_search(config, max_tokens)
    if not sentences:
        return []
    device = next(model.parameters()).device
    sources = tokenizers.encode_sources(sentences)
    for number, source in enumerate(sources, 1):
        if len(source) > model.context_length():
            raise PLMError(f"sentence {number} is {len(source)} tokens long with </s>; the model reads at most "
                           f"{model.context_length()}")
    vocabulary = model.config.vocab_size
    if config.num_beams > vocabulary:
        raise PLMError(f"`num_beams` {config.num_beams} is more than the {vocabulary:,} target tokens a step "
                       "chooses from")
    # Only the sources matter for batching; targets of 0 tokens make each pair's cost its source length. A beam
    # of k decodes k hypotheses a sentence, so the budget is max_tokens / k source tokens: the memory a batch
    # takes does not grow with the beam (past one sentence a batch).
    budget = max(max_tokens // config.num_beams, max(map(len, sources)))
    lengths = np.fromiter(map(len, sources), np.int64, len(sources))
    batches = token_budget_batches(lengths, np.zeros_like(lengths), budget)
    check_search_memory(model, config, [[sources[i] for i in batch] for batch in batches])
    translations: list[list[int]] = [[] for _ in sentences]
    with progress_bar(total=len(sentences), disable=not progress, desc="translate", unit=" sentences",
              dynamic_ncols=True) as bar:
        for batch in batches:
            source_ids, source_mask = right_pad([sources[i] for i in batch], tokenizers.source.required_id("pad"))
            start = torch.full((len(batch), 1), start_id, dtype=torch.long, device=device)
            source_ids, source_mask = source_ids.to(device), source_mask.to(device)
            if config.sampling:
                output = sample_batch(model, start, config, source_ids, source_mask, batch.tolist())
            else:
                best = beam_search(model, start, config=config, source_ids=source_ids, source_mask=source_mask)
                output = [row[: 1 + length] for row, length in zip(best.sequences.tolist(), best.lengths.tolist())]
            for index, row in zip(batch, output):
                translations[index] = row
            bar.update(len(batch))
    return translations


def sample_batch(
    model: Seq2SeqModel,
    start: torch.Tensor,
    config: GenerationConfig,
    source_ids: torch.Tensor,
    source_mask: torch.Tensor,
    sentences: list[int],
) -> list[list[int]]:
    """One sampled translation of each source row: ``<s> y </s>``, or ``<s> y`` cut at the row's own length limit.

    The batch decodes to the longest row's limit (``max_len_a`` x its source tokens + ``max_new_tokens``); a
    row's first tokens depend on nothing after them, so cutting it to its own limit gives what a search
    stopped there would.

    Args:
        model: the encoder-decoder.
        start: (batch, 1) the start token of each row.
        config: the sampling search, one beam.
        source_ids: (batch, source_length) the sources, right-padded.
        source_mask: (batch, source_length), 0 at padding.
        sentences: each row's position among all the sentences translated, which with ``config.seed`` seeds
            its random generator.

    Returns:
        Each row's ids.
    """
    limits = config.new_token_limits(len(start), source_ids, source_mask, start.device)  # (batch,)
    limits = limits.clamp(max=max(0, model.context_length() - 1))
    generators = None if config.seed is None else [row_generator(config.seed, index, start.device)
                                                   for index in sentences]
    steps = decode_steps(model, start, dataclasses.replace(config, max_len_a=0.0, max_new_tokens=int(limits.max())),
                         source_ids=source_ids, source_mask=source_mask, generators=generators)
    rows = torch.cat([start, *(step.tokens[:, None] for step in steps)], 1).tolist()  # (batch, 1 + steps)
    eos = config.finishing_token_id
    cut = [row[: 1 + limit] for row, limit in zip(rows, limits.tolist())]
    return [row[: row.index(eos, 1) + 1] if eos in row[1:] else row for row in cut]


def check_search(config: GenerationConfig, max_tokens: int) -> None:
    """Refuse a search that cannot translate, naming the field of the first option at fault.

    Args:
        config: the search.
        max_tokens: the source tokens per batch.

    Raises:
        PLMError: an option out of range, no room for a single output token, or ``max_tokens`` below 1.
    """
    if config.max_new_tokens < 0:
        raise PLMError(f"`max_new_tokens` must be >= 0, got {config.max_new_tokens}")
    config.validate()
    if config.max_len_a == 0 and config.max_new_tokens == 0:
        raise PLMError("`max_len_a` 0 and `max_new_tokens` 0 leave no room for a single output token")
    if max_tokens < 1:
        raise PLMError(f"`max_tokens` must be at least 1, got {max_tokens}")
    if config.sampling and config.num_beams > 1:
        raise PLMError(f"sampling draws one translation a sentence; give `num_beams` 1, not {config.num_beams}")


def check_search_memory(model: Seq2SeqModel, config: GenerationConfig, batches: list[list[list[int]]]) -> None:
    """Refuse a search whose largest batch would not fit in the memory free now, with the estimate.

    Each of its beam x sentences hypotheses holds a decoding state and a row of scores over the vocabulary.
    Nothing is checked when the free memory is unknown.

    Args:
        model: the encoder-decoder.
        config: the search.
        batches: the source ids of each batch's sentences.

    Raises:
        PLMError: a batch would need more than the memory free.
    """
    free = available_memory()
    if free is None:
        return
    for batch in batches:
        source = max(map(len, batch))
        target = int(config.max_len_a * source + config.max_new_tokens) + 1
        hypotheses = config.num_beams * len(batch)
        # the state, and the step's logits, log-probabilities and candidate scores (fp32)
        needed = hypotheses * (model.hypothesis_bytes(source, target) + 12 * model.config.vocab_size)
        if needed > free:
            raise PLMError(f"`num_beams` {config.num_beams} over {len(batch)} sentence(s) of {source} tokens needs "
                           f"about {needed / 2**30:.1f} GiB for the search, more than the {free / 2**30:.1f} GiB free; "
                           "give a smaller `num_beams` or `max_tokens`")


@dataclass(frozen=True)
class TranslationScores:
    """Corpus BLEU and chrF (0-100, sacrebleu's scale), exact match (the fraction of sentences equal to a reference).

    Attributes:
        bleu: corpus BLEU, 0-100.
        chrf: corpus chrF, 0-100.
        exact_match: the fraction of translations equal to one of their references, in [0, 1].
        sentences: the sentences scored.
    """

    bleu: float
    chrf: float
    exact_match: float
    sentences: int

    def as_dict(self) -> dict[str, float]:
        """The three scores by name.

        Returns:
            ``bleu``, ``chrf`` and ``exact_match``.
        """
        return {"bleu": self.bleu, "chrf": self.chrf, "exact_match": self.exact_match}

    def __str__(self) -> str:
        return (f"BLEU {self.bleu:.2f}  chrF {self.chrf:.2f}  exact match {self.exact_match:.2%} "
                f"({self.sentences} sentences)")


def score_translations(hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> TranslationScores:
    """Score ``hypotheses`` against one or more reference streams (each a list aligned with them, as sacrebleu takes).

    Exact match compares whitespace-stripped strings: a hypothesis counts when it equals
    any of its references.

    Args:
        hypotheses: the translations.
        references: the reference streams, each with one reference per translation.

    Returns:
        The scores.

    Raises:
        PLMError: a stream of another length than ``hypotheses``.
    """
    for stream in references:
        if len(stream) != len(hypotheses):
            raise PLMError(f"{len(hypotheses)} translations but {len(stream)} references; they must be aligned")
    hypotheses = list(hypotheses)
    streams = [list(stream) for stream in references]
    exact = sum(any(h.strip() == stream[i].strip() for stream in streams) for i, h in enumerate(hypotheses))
    return TranslationScores(
        bleu=sacrebleu.corpus_bleu(hypotheses, streams).score,
        chrf=sacrebleu.corpus_chrf(hypotheses, streams).score,
        exact_match=exact / max(1, len(hypotheses)),
        sentences=len(hypotheses),
    )
