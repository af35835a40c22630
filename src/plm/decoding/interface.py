"""The one interface every decoder offers to greedy search, sampling and beam search.

A decoding loop owns the tokens; the model owns its state. The loop asks the model to
``start_decoding`` (run the encoder over the source, if there is one, and allocate
caches), then calls ``decode_step`` with the tokens decoded so far and gets the logits
of the next token, and, for beam search, calls ``reorder_state`` to keep the state of
the beams it chose. Whether the state is a key/value cache per layer (GPT, the
Transformer) or an LSTM's (h, c) is the model's business, not the loop's (fairseq's
``FairseqIncrementalDecoder`` and ``reorder_incremental_state``).
"""

from __future__ import annotations

from typing import Any, Protocol

import torch


class Decoder(Protocol):
    """What a decoding loop needs from a model (``CausalLM`` and the encoder-decoders implement it)."""

    training: bool

    def context_length(self) -> int:
        """The most target positions the decoder can take (prompt and new tokens together)."""

    def start_decoding(
        self,
        prompt: torch.Tensor,
        prompt_mask: torch.Tensor | None,
        max_length: int,
        *,
        use_cache: bool = True,
        compile: bool = False,
        source_ids: torch.Tensor | None = None,
        source_mask: torch.Tensor | None = None,
    ) -> Any:
        """The state before the first step, for a batch of ``prompt`` rows (batch, prompt_length).

        ``prompt_mask`` (batch, prompt_length) is 0 at left padding; ``max_length`` is the
        longest history the steps will pass (prompt + new tokens). An encoder-decoder
        encodes ``source_ids`` (batch, source_length) with ``source_mask`` (0 = padding)
        here, once; a decoder-only model takes no source. ``use_cache`` False recomputes
        the whole history at every step; ``compile`` runs the model through torch.compile.
        """

    def decode_step(self, history: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """``history`` (batch, length): every token so far -> (batch, vocab) next-token logits, new state.

        A decoder with a cache reads only the tokens its state has not seen yet (the
        whole prompt at the first step, then the newest token).
        """

    def reorder_state(self, state: Any, order: torch.Tensor) -> Any:
        """The state whose row i is row ``order[i]`` of ``state``; ``order`` may repeat and drop rows.

        Beam search calls it at every step (the beams chosen, less the rows of sentences that are done),
        so it should copy no more than it must: ``state`` is not used after, and its memory may be reused.
        """

    def eval(self) -> Any: ...

    def train(self, mode: bool = True) -> Any: ...
