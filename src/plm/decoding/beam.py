"""Beam search for any :class:`plm.decoding.Decoder`, batched: all sentences and beams in one step.

Each step scores every one-token extension of the live beams (beam_size per
sentence), keeps the best ``2 * beam_size`` candidates, moves those among the best
``beam_size`` that end (EOS, or the sentence's last allowed token) into the
sentence's finished hypotheses, and continues with the best ``beam_size`` that do
not end, all as tensor operations over (batch, beams): the model sees one batch of
batch x beams rows per step and never a single sentence. Finished hypotheses are
ranked by GNMT's length-normalised score log P(Y) / lp(Y), lp(Y) = ((5 + |Y|) / 6)^alpha
(Wu et al., 2016), where |Y| counts the new tokens, EOS included.

The first step runs on one row per sentence (the prompt, or the start token after
the encoder) and its best ``beam_size`` tokens seed the beams; the state is then
copied to the beams with ``reorder_state``, so an encoder runs once per sentence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from plm.decoding.interface import Decoder
from plm.errors import PLMError
from plm.generation import fit_prompt


@dataclass
class BeamSearchOutput:
    """The best hypothesis of each sentence."""

    sequences: torch.Tensor  # (batch, prompt_length + longest hypothesis): prompt, hypothesis, then padding
    scores: torch.Tensor  # (batch,) log P(hypothesis) / lp(hypothesis)
    lengths: torch.Tensor  # (batch,) new tokens in the hypothesis, EOS included


def length_penalty(length: int | torch.Tensor, alpha: float) -> float | torch.Tensor:
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^alpha: 1 for one token, growing with the length when alpha > 0."""
    return ((5 + length) / 6) ** alpha


@torch.inference_mode()
def beam_search(
    model: Decoder,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    beam_size: int = 4,
    alpha: float = 0.6,
    max_len_a: float = 0.0,
    max_len_b: int = 32,
    eos_token_id: int | None = None,
    pad_token_id: int | None = None,
    early_stopping: bool = True,
    use_cache: bool = True,
    source_ids: torch.Tensor | None = None,
    source_mask: torch.Tensor | None = None,
) -> BeamSearchOutput:
    """The best continuation of each row of ``input_ids`` (batch, time) found with ``beam_size`` beams.

    A sentence gets at most ``floor(max_len_a * source_length + max_len_b)`` new tokens
    (its real source tokens; 0 for a decoder-only model, so ``max_len_b`` alone), and
    never more than the decoder's context leaves. ``alpha`` is the length penalty's
    exponent (0: raw log-probabilities; the Transformer used 0.6). With ``early_stopping``
    a sentence is done once it has ``beam_size`` finished hypotheses (GNMT, fairseq);
    without, once no live beam can still beat the worst of them, which is exact for the
    beams searched. Beam size 1 with alpha 0 is greedy search.
    """
    if beam_size < 1:
        raise PLMError(f"beam_size must be at least 1, got {beam_size}")
    if not math.isfinite(alpha):
        raise PLMError(f"the length penalty alpha must be a finite number, got {alpha}")
    if not (max_len_a >= 0 and math.isfinite(max_len_a)) or max_len_b < 0:
        raise PLMError(f"max_len_a and max_len_b must be >= 0, got {max_len_a} and {max_len_b}")
    if input_ids.dim() != 2 or input_ids.shape[1] == 0:
        raise PLMError(f"input_ids must be (batch, time) with at least one token, got shape {tuple(input_ids.shape)}")
    batch, prompt_length = input_ids.shape
    device = input_ids.device
    if source_ids is None:
        source_lengths = torch.zeros(batch, device=device)
    elif source_mask is not None:
        source_lengths = source_mask.sum(1).to(device)
    else:
        source_lengths = torch.full((batch,), source_ids.shape[1], device=device)
    limits = (max_len_a * source_lengths.double() + max_len_b).floor().long()  # (B,) new tokens at most
    limits = limits.clamp(max=max(0, model.context_length() - prompt_length))
    steps = int(limits.max())
    input_ids, attention_mask = fit_prompt(input_ids, attention_mask, steps, model.context_length(), None)
    if attention_mask is not None and bool(attention_mask.all()):
        attention_mask = None
    pad = pad_token_id if pad_token_id is not None else (eos_token_id if eos_token_id is not None else 0)

    tokens = torch.empty(batch, prompt_length + steps, dtype=input_ids.dtype, device=device)
    tokens[:, :prompt_length] = input_ids
    beam_scores = torch.zeros(batch, 1, device=device)  # log P of the live beams: one per sentence at first
    done = limits == 0
    finished_scores = torch.full((batch, beam_size), -math.inf, device=device)
    finished_scores[:, 0] = torch.where(done, 0.0, -math.inf)  # a limit of 0 leaves the empty hypothesis
    finished_tokens = torch.full((batch, beam_size, steps), pad, dtype=input_ids.dtype, device=device)
    finished_lengths = torch.zeros(batch, beam_size, dtype=torch.long, device=device)
    first_ranks = torch.arange(2 * beam_size, device=device) < beam_size
    was_training = model.training
    model.eval()
    try:
        state = model.start_decoding(
            input_ids, attention_mask, prompt_length + steps, use_cache=use_cache,
            source_ids=source_ids, source_mask=source_mask,
        )
        for t in range(steps):
            live = beam_scores.shape[1]
            logits, state = model.decode_step(tokens[:, : prompt_length + t], state)  # (B * live, V)
            vocab = logits.shape[-1]
            log_probs = logits.float().log_softmax(-1).view(batch, live, vocab)
            candidates = (beam_scores[:, :, None] + log_probs).view(batch, live * vocab)
            count = min(2 * beam_size, live * vocab)
            top_scores, top_index = candidates.topk(count)  # (B, count), best first
            if count < beam_size:  # fewer extensions than beams: the rest are dead beams
                top_scores = F.pad(top_scores, (0, beam_size - count), value=-math.inf)
                top_index = F.pad(top_index, (0, beam_size - count))
                count = beam_size
            origin, token = top_index // vocab, top_index % vocab  # the beam extended, the token added

            # Candidates that end a hypothesis: EOS or the sentence's last token. Only the best
            # beam_size may, as only they would be in the beam (so that one beam is greedy search).
            at_limit = t + 1 >= limits  # (B,)
            ending = at_limit[:, None].expand(batch, count)
            if eos_token_id is not None:
                ending = ending | (token == eos_token_id)
            may_end = ending & first_ranks[:count] & ~done[:, None]
            prefixes = tokens.view(batch, live, -1)[:, :, prompt_length : prompt_length + t]
            hypotheses = torch.full((batch, count, steps), pad, dtype=tokens.dtype, device=device)
            hypotheses[:, :, :t] = prefixes.gather(1, origin[:, :, None].expand(batch, count, t))
            hypotheses[:, :, t] = token
            ended_scores = (top_scores / length_penalty(t + 1, alpha)).masked_fill(~may_end, -math.inf)
            pool_scores = torch.cat([finished_scores, ended_scores], 1)
            finished_scores, keep = pool_scores.topk(beam_size)  # (B, K), best first
            finished_tokens = torch.cat([finished_tokens, hypotheses], 1).gather(
                1, keep[:, :, None].expand(batch, beam_size, steps)
            )
            lengths = torch.cat([finished_lengths, finished_lengths.new_full((batch, count), t + 1)], 1)
            finished_lengths = lengths.gather(1, keep)

            # The live beams: the best beam_size candidates that do not end.
            live_scores = top_scores.masked_fill(ending | done[:, None], -math.inf)
            beam_scores, pick = live_scores.topk(beam_size)  # (B, K)
            order = (torch.arange(batch, device=device)[:, None] * live + origin.gather(1, pick)).view(-1)
            tokens = tokens.index_select(0, order)  # (B * K, prompt + steps)
            tokens[:, prompt_length + t] = token.gather(1, pick).view(-1)
            state = model.reorder_state(state, order)

            best_live = beam_scores[:, 0]
            if early_stopping:
                enough = finished_scores[:, -1] > -math.inf
            else:
                # log P only falls as a beam grows; dividing by the largest penalty it may still get
                # bounds its final score from above (at its limit for alpha >= 0, next step otherwise)
                largest_penalty = length_penalty(limits.double(), alpha).clamp(min=length_penalty(t + 2, alpha))
                enough = finished_scores[:, -1] >= best_live / largest_penalty
            done = done | at_limit | enough | (best_live == -math.inf)
            if bool(done.all()):
                break
    finally:
        model.train(was_training)
    best_lengths = finished_lengths[:, 0]
    width = int(best_lengths.max()) if batch else 0
    sequences = torch.cat([input_ids, finished_tokens[:, 0, :width]], 1)
    return BeamSearchOutput(sequences, finished_scores[:, 0], best_lengths)
