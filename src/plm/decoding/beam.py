"""Beam search for any [`Decoder`][plm.decoding.interface.Decoder], batched: all sentences and beams in one step.

Each step scores every one-token extension of the live beams (beam_size per
sentence), keeps the best ``2 * beam_size`` candidates, moves those among the best
``beam_size`` that end (EOS, or the sentence's last allowed token) into the
sentence's finished hypotheses, and continues with the best ``beam_size`` that do
not end, all as tensor operations over (sentences, beams): the model sees one batch of
sentences x beams rows per step and never a single sentence. A sentence is done
once it has enough finished hypotheses or reaches its length limit; it then leaves
the batch (its best hypothesis is kept, its rows go out of the tokens and of the
model's state), so the steps after it cost only what the sentences still searching
need (fairseq's ``SequenceGenerator`` does the same). Finished hypotheses are
ranked by GNMT's length-normalised score log P(Y) / lp(Y), lp(Y) = ((5 + |Y|) / 6)^alpha
(Wu et al., 2016), where |Y| counts the new tokens, EOS included.

The first step runs on one row per sentence (the prompt, or the start token after
the encoder) and its best ``beam_size`` tokens seed the beams; the state is then
copied to the beams with ``reorder_state``, so an encoder runs once per sentence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, overload

import torch
import torch.nn.functional as F

from plm.decoding.generation_config import GenerationConfig, configured, cut_to_last, fit_prompt
from plm.decoding.interface import Decoder, DecodingRequest
from plm.errors import PLMError


@dataclass
class BeamSearchOutput:
    """The best hypothesis of each sentence."""

    sequences: torch.Tensor  # (batch, prompt_length + longest hypothesis): prompt, hypothesis, then padding
    scores: torch.Tensor  # (batch,) log P(hypothesis) / lp(hypothesis)
    lengths: torch.Tensor  # (batch,) new tokens in the hypothesis, EOS included


@overload
def length_penalty(length: int, alpha: float) -> float: ...


@overload
def length_penalty(length: torch.Tensor, alpha: float) -> torch.Tensor: ...


def length_penalty(length: int | torch.Tensor, alpha: float) -> float | torch.Tensor:
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^alpha: 1 for one token, growing with the length when alpha > 0.

    Args:
        length: |Y|, the new tokens (EOS included); a tensor of them gives a tensor of penalties.
        alpha: the exponent.

    Returns:
        lp(Y), of the type of ``length``'s (a float for an int).
    """
    return ((5 + length) / 6) ** alpha


@dataclass
class Finished:
    """The best ``beam_size`` finished hypotheses of each sentence still searching, best first."""

    scores: torch.Tensor  # (A, K) log P / lp, -inf where there is none yet
    tokens: torch.Tensor  # (A, K, steps) the new tokens, then padding
    lengths: torch.Tensor  # (A, K) new tokens, EOS included

    @classmethod
    def none(cls, sentences: int, beam_size: int, steps: int, pad: int, like: torch.Tensor) -> Finished:
        """No finished hypothesis yet; ``like`` gives the token dtype and the device.

        Args:
            sentences: the sentences (A).
            beam_size: the hypotheses kept per sentence (K).
            steps: the new tokens at most.
            pad: the token that fills the hypotheses.
            like: a tensor of the token dtype, on the device.

        Returns:
            Scores of -inf, tokens of ``pad`` and lengths of 0.
        """
        return cls(
            torch.full((sentences, beam_size), -math.inf, device=like.device),
            like.new_full((sentences, beam_size, steps), pad),
            torch.zeros(sentences, beam_size, dtype=torch.long, device=like.device),
        )

    def add(self, scores: torch.Tensor, tokens: torch.Tensor, length: int) -> Finished:
        """The best ``beam_size`` of these and the new hypotheses.

        The new hypotheses are ``tokens`` (A, C, steps), all ``length`` tokens long, with ``scores`` (A, C)
        (-inf for a candidate that does not end).

        Args:
            scores: (A, C) the new hypotheses' scores.
            tokens: (A, C, steps) the new hypotheses' tokens.
            length: the new hypotheses' length.

        Returns:
            The best ``beam_size`` of each sentence, best first.
        """
        sentences, beam_size, steps = self.tokens.shape
        best, keep = torch.cat([self.scores, scores], 1).topk(beam_size)  # (A, K)
        tokens = torch.cat([self.tokens, tokens], 1).gather(1, keep[:, :, None].expand(sentences, beam_size, steps))
        lengths = torch.cat([self.lengths, self.lengths.new_full(scores.shape, length)], 1).gather(1, keep)
        return Finished(best, tokens, lengths)

    def rows(self, index: torch.Tensor) -> Finished:
        """The hypotheses of the sentences ``index`` (A',).

        Args:
            index: (A',) the rows kept (indices or a boolean mask).

        Returns:
            Those sentences' hypotheses.
        """
        return Finished(self.scores[index], self.tokens[index], self.lengths[index])

    def keep_best(self, best: Finished, sentences: torch.Tensor) -> None:
        """Write each sentence's best hypothesis into row ``sentences`` (A,) of ``best``, the whole batch's.

        Args:
            best: the best hypothesis of each sentence of the batch, written in place.
            sentences: (A,) the row of ``best`` of each of these sentences.
        """
        best.scores[sentences] = self.scores[:, :1]
        best.tokens[sentences] = self.tokens[:, :1]
        best.lengths[sentences] = self.lengths[:, :1]


@torch.inference_mode()
def beam_search(
    model: Decoder,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    config: GenerationConfig | None = None,
    source_ids: torch.Tensor | None = None,
    source_mask: torch.Tensor | None = None,
    **options: Any,
) -> BeamSearchOutput:
    """The best continuation of each row of ``input_ids`` (batch, time) found with ``config.num_beams`` beams.

    A sentence gets at most ``floor(max_len_a * source_length + max_new_tokens)`` new tokens
    (its real source tokens; 0 for a decoder-only model, so ``max_new_tokens`` alone), and
    never more than the decoder's context leaves. ``length_penalty`` is GNMT's alpha (0: raw
    log-probabilities; the Transformer used 0.6). With ``early_stopping`` a sentence is done
    once it has ``num_beams`` finished hypotheses (GNMT, fairseq); without, once no live beam
    can still beat the worst of them, which is exact for the beams searched. One beam is
    greedy search.

    Args:
        model: the decoder.
        input_ids: (batch, time) the prompts (an encoder-decoder's: its start tokens).
        attention_mask: (batch, time), 0 at left padding, or None.
        config: the search (None: the defaults of [`GenerationConfig`][plm.decoding.generation_config.GenerationConfig],
            one beam). Its ``num_beams``, ``length_penalty``, ``max_len_a``, ``max_new_tokens``, ``early_stopping``,
            ``eos_token_id``, ``ignore_eos``, ``pad_token_id``, ``use_cache`` and ``keep_last`` apply.
        source_ids: an encoder-decoder's (batch, source_length) source; None for a decoder-only model.
        source_mask: 0 at the padding of ``source_ids``.
        **options (Any): fields of [`GenerationConfig`][plm.decoding.generation_config.GenerationConfig] that replace
            the config's, as in ``beam_search(model, ids, num_beams=4, max_new_tokens=20)``.

    Returns:
        Each row's prompt (cut to ``keep_last``) followed by its best hypothesis, with its score and length.

    Raises:
        PLMError: an unknown option or one out of range, a sampling, repetition or stop-string option (beam
            search has none), or ``input_ids`` that are not (batch, time) with at least one token.
    """
    config = configured(config, None, options)
    config.validate()
    if config.sampling or config.repetition_penalty != 1.0 or config.stop is not None:
        raise PLMError("beam search neither samples, penalises repetition nor stops at strings; give num_beams=1 "
                       "and max_len_a=0 for those")
    if input_ids.dim() != 2 or input_ids.shape[1] == 0:
        raise PLMError(f"input_ids must be (batch, time) with at least one token, got shape {tuple(input_ids.shape)}")
    input_ids, attention_mask = cut_to_last(input_ids, attention_mask, config.keep_last)
    batch, prompt_length = input_ids.shape
    limits = config.new_token_limits(batch, source_ids, source_mask, input_ids.device)  # (B,) new tokens at most
    limits = limits.clamp(max=max(0, model.context_length() - prompt_length))
    steps = int(limits.max())
    input_ids, attention_mask = fit_prompt(input_ids, attention_mask, steps, model.context_length(), None)
    if attention_mask is not None and bool(attention_mask.all()):
        attention_mask = None
    eos_token_id, pad_token_id = config.eos_token_id, config.pad_token_id
    pad = pad_token_id if pad_token_id is not None else (eos_token_id if eos_token_id is not None else 0)

    # Each sentence's best hypothesis, written as it leaves the search. A limit of 0 leaves the empty one
    # (score 0), and such a sentence never enters the search.
    best = Finished.none(batch, 1, steps, pad, input_ids)
    best.scores.masked_fill_(limits[:, None] == 0, 0.0)
    sentences = (limits > 0).nonzero()[:, 0]  # (A,) the sentences searching, by their row in the batch
    was_training = model.training
    model.eval()
    try:
        if len(sentences):
            state = model.start_decoding(DecodingRequest(
                input_ids[sentences], prompt_length + steps, rows(attention_mask, sentences),
                rows(source_ids, sentences), rows(source_mask, sentences), config.use_cache,
            ))
            search = Search(config.num_beams, config.length_penalty, config.early_stopping, config.finishing_token_id,
                            pad, steps)
            search.run(model, state, input_ids[sentences], limits[sentences], sentences, best)
    finally:
        model.train(was_training)
    lengths = best.lengths[:, 0]
    width = int(lengths.max()) if batch else 0
    return BeamSearchOutput(torch.cat([input_ids, best.tokens[:, 0, :width]], 1), best.scores[:, 0], lengths)


def rows(tensor: torch.Tensor | None, index: torch.Tensor) -> torch.Tensor | None:
    """The rows ``index`` of an optional input (a mask, a source), or None.

    Args:
        tensor: the input, or None.
        index: the rows.

    Returns:
        Those rows, or None when ``tensor`` is None.
    """
    return tensor[index] if tensor is not None else None


@dataclass(frozen=True)
class Search:
    """The search's options, and its loop over steps."""

    beam_size: int
    alpha: float
    early_stopping: bool
    eos_token_id: int | None
    pad: int
    steps: int  # new tokens at most, the longest limit

    def run(
        self, model: Decoder, state: Any, prompts: torch.Tensor, limits: torch.Tensor, sentences: torch.Tensor,
        best: Finished,
    ) -> None:
        """Search from ``state``, the model's state after ``prompts`` (A, P).

        It searches for the batch's sentences ``sentences`` (A,), each with at most ``limits`` (A,) new tokens,
        and writes each one's best hypothesis into ``best`` as it is done, when it leaves the search.

        Args:
            model: the decoder.
            state: the model's state after ``prompts``.
            prompts: (A, P) the prompts of the sentences searching.
            limits: (A,) the new tokens at most of each.
            sentences: (A,) the row of each in the batch.
            best: the best hypothesis of each sentence of the batch, written in place.
        """
        beam_size, prompt_length = self.beam_size, prompts.shape[1]
        tokens = prompts.new_empty(len(sentences), prompt_length + self.steps)
        tokens[:, :prompt_length] = prompts
        beam_scores = torch.zeros(len(sentences), 1, device=prompts.device)  # log P of the live beams: one at first
        finished = Finished.none(len(sentences), beam_size, self.steps, self.pad, prompts)
        first_ranks = torch.arange(2 * beam_size, device=prompts.device) < beam_size
        for t in range(self.steps):
            searching, live = beam_scores.shape
            logits, state = model.decode_step(tokens[:, : prompt_length + t], state)  # (A * live, V)
            log_probs = logits.float().log_softmax(-1).view(searching, live, -1)
            top_scores, origin, token = self.best_extensions(beam_scores, log_probs)  # (A, C): C = 2K at most

            # Candidates that end a hypothesis: EOS or the sentence's last token. Only the best
            # beam_size may, as only they would be in the beam (so that one beam is greedy search).
            at_limit = t + 1 >= limits  # (A,)
            ending = at_limit[:, None].expand_as(token)
            if self.eos_token_id is not None:
                ending = ending | (token == self.eos_token_id)
            may_end = ending & first_ranks[: token.shape[1]]
            prefixes = tokens.view(searching, live, -1)[:, :, prompt_length : prompt_length + t]
            hypotheses = tokens.new_full((*token.shape, self.steps), self.pad)  # (A, C, steps)
            hypotheses[:, :, :t] = prefixes.gather(1, origin[:, :, None].expand(*token.shape, t))
            hypotheses[:, :, t] = token
            ended_scores = (top_scores / length_penalty(t + 1, self.alpha)).masked_fill(~may_end, -math.inf)
            finished = finished.add(ended_scores, hypotheses, t + 1)

            # The live beams: the best beam_size candidates that do not end.
            beam_scores, pick = top_scores.masked_fill(ending, -math.inf).topk(beam_size)  # (A, K)
            order = torch.arange(searching, device=tokens.device)[:, None] * live + origin.gather(1, pick)  # (A, K)
            new_tokens = token.gather(1, pick)
            done = at_limit | self.enough(finished, beam_scores[:, 0], limits, t) | (beam_scores[:, 0] == -math.inf)
            if bool(done.any()):  # they leave: the rest go on with their rows alone
                finished.rows(done).keep_best(best, sentences[done])
                stay = (~done).nonzero()[:, 0]  # (A',)
                if not len(stay):
                    break
                order, new_tokens, beam_scores = order[stay], new_tokens[stay], beam_scores[stay]
                limits, sentences, finished = limits[stay], sentences[stay], finished.rows(stay)
            tokens = tokens.index_select(0, order.view(-1))  # (A' * K, prompt + steps)
            tokens[:, prompt_length + t] = new_tokens.view(-1)
            state = model.reorder_state(state, order.view(-1))

    def best_extensions(
        self, beam_scores: torch.Tensor, log_probs: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The best ``2 * beam_size`` one-token extensions of the live beams.

        The live beams (A, live) have next-token ``log_probs`` (A, live, V); the result is the extensions'
        log P, the beam each extends and the token it adds, each (A, C), best first. Past the extensions
        there are (fewer than beam_size), dead ones with log P -inf.

        Each beam's own best 2K tokens hold every one of the sentence's best 2K extensions, so only those
        are added to the beam's log P: not the whole (A, live, V) vocabulary.

        Args:
            beam_scores: (A, live) the log P of the live beams.
            log_probs: (A, live, V) the next-token log-probabilities.

        Returns:
            The extensions' log P, the beam each extends and the token it adds.
        """
        searching, live, vocab = log_probs.shape
        per_beam = min(2 * self.beam_size, vocab)
        beam_best, beam_tokens = log_probs.topk(per_beam)  # (A, live, per_beam)
        candidates = (beam_scores[:, :, None] + beam_best).view(searching, live * per_beam)
        count = min(2 * self.beam_size, live * per_beam)
        top_scores, top_index = candidates.topk(count)  # (A, count)
        tokens = beam_tokens.view(searching, live * per_beam).gather(1, top_index)
        if count < self.beam_size:
            top_scores = F.pad(top_scores, (0, self.beam_size - count), value=-math.inf)
            top_index = F.pad(top_index, (0, self.beam_size - count))
            tokens = F.pad(tokens, (0, self.beam_size - count))
        return top_scores, top_index // per_beam, tokens

    def enough(self, finished: Finished, best_live: torch.Tensor, limits: torch.Tensor, t: int) -> torch.Tensor:
        """(A,) True for a sentence whose finished hypotheses no live beam should still challenge.

        That is ``beam_size`` of them with early stopping, else none a live beam (best log P ``best_live``)
        can still beat.

        Args:
            finished: the finished hypotheses of the sentences searching.
            best_live: (A,) the log P of each sentence's best live beam.
            limits: (A,) the new tokens at most of each sentence.
            t: the step just taken (0 for the first).

        Returns:
            (A,) whether each sentence is done.
        """
        if self.early_stopping:
            return finished.scores[:, -1] > -math.inf
        # log P only falls as a beam grows; dividing by the largest penalty it may still get
        # bounds its final score from above (at its limit for alpha >= 0, next step otherwise)
        largest_penalty = length_penalty(limits.double(), self.alpha).clamp(min=length_penalty(t + 2, self.alpha))
        return finished.scores[:, -1] >= best_live / largest_penalty
