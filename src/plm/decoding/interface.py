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

from dataclasses import dataclass
from typing import Any, Protocol

import torch


@dataclass(frozen=True)
class DecodingRequest:
    """What a decoding starts from, as a decoding loop hands it to `Decoder.start_decoding`.

    Attributes:
        prompt: (batch, prompt_length) the rows to continue (an encoder-decoder's: its start tokens).
        max_length: the longest history the steps will pass (prompt + new tokens).
        prompt_mask: (batch, prompt_length), 0 at left padding, or None.
        source_ids: an encoder-decoder's (batch, source_length) source, encoded once when decoding starts;
            a decoder-only model takes none.
        source_mask: 0 at the padding of ``source_ids``.
        use_cache: False recomputes the whole history at every step.
        compile: run the model through torch.compile.
        cuda_graph: decode one token at a time over a static key/value cache, each step replayed as a
            CUDA graph on a GPU (`plm.decoding.static_step`); a decoder without one ignores it.
    """

    prompt: torch.Tensor
    max_length: int
    prompt_mask: torch.Tensor | None = None
    source_ids: torch.Tensor | None = None
    source_mask: torch.Tensor | None = None
    use_cache: bool = True
    compile: bool = False
    cuda_graph: bool = False


class Decoder(Protocol):
    """What a decoding loop needs from a model (``CausalLM`` and the encoder-decoders implement it)."""

    training: bool

    def context_length(self) -> int:
        """The most target positions the decoder can take (prompt and new tokens together).

        Returns:
            The number of positions.
        """

    def start_decoding(self, request: DecodingRequest) -> Any:
        """The state before the first step, for the batch of prompt rows ``request`` describes.

        Args:
            request: the prompt rows, the longest history and, for an encoder-decoder, the source.

        Returns:
            The decoder's state, which the loop passes to [`decode_step`][plm.decoding.interface.Decoder.decode_step]
            unread.
        """

    def decode_step(self, history: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """``history`` (batch, length): every token so far -> (batch, vocab) next-token logits, new state.

        A decoder with a cache reads only the tokens its state has not seen yet (the
        whole prompt at the first step, then the newest token).

        Args:
            history: (batch, length) every token decoded so far, prompt included.
            state: the state the previous step (or [`start_decoding`][plm.decoding.interface.Decoder.start_decoding])
                returned.

        Returns:
            The (batch, vocab) logits of the next token, and the new state.
        """

    def reorder_state(self, state: Any, order: torch.Tensor) -> Any:
        """The state whose row i is row ``order[i]`` of ``state``; ``order`` may repeat and drop rows.

        Beam search calls it at every step (the beams chosen, less the rows of sentences that are done),
        so it should copy no more than it must: ``state`` is not used after, and its memory may be reused.

        Args:
            state: the state of the rows decoded so far.
            order: (rows,) the row of ``state`` each new row takes.

        Returns:
            The reordered state.
        """

    def eval(self) -> Any:
        """Switch to inference mode (as ``torch.nn.Module.eval``)."""
        ...

    def train(self, mode: bool = True) -> Any:
        """Switch to training mode, or to inference mode when ``mode`` is False (as ``torch.nn.Module.train``)."""
        ...
