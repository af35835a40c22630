"""Absolute positions: learned (GPT, BERT) and sinusoidal (the Transformer, Marian, fairseq)."""

from __future__ import annotations

import math

import torch
from torch import nn

from plm.errors import PLMError


def build_position_ids(
    batch: int,
    length: int,
    past_length: int = 0,
    padding_mask: torch.Tensor | None = None,
    device: torch.device | None = None,
) -> torch.Tensor:
    """Positions (batch, length) of the newest ``length`` tokens.

    With a padding mask (batch, past_length + length) a token's position counts only
    the real tokens before it, so a left-padded prompt is encoded exactly as the same
    prompt without padding.

    Args:
        batch: the rows.
        length: the new tokens.
        past_length: the tokens before them (a cache's).
        padding_mask: (batch, past_length + length), 1 for real tokens and 0 for padding; or None.
        device: where the positions are built when there is no padding mask.

    Returns:
        The (batch, length) positions.
    """
    if padding_mask is None:
        return torch.arange(past_length, past_length + length, device=device).expand(batch, length)
    positions = padding_mask.long().cumsum(-1) - 1
    return positions.clamp_(min=0)[:, -length:]


class LearnedPositions(nn.Module):
    """A table of position vectors learned with the model (GPT-1/2, BERT).

    Args:
        max_positions: the positions the table holds.
        dim: the size of each vector.
    """

    def __init__(self, max_positions: int, dim: int) -> None:
        super().__init__()
        self.max_positions = max_positions
        self.weight = nn.Parameter(torch.empty(max_positions, dim))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        """The vectors of ``positions``.

        Args:
            positions: (...) position indices.

        Returns:
            The (..., dim) vectors.
        """
        return nn.functional.embedding(positions, self.weight)

    def span(self, start: int, length: int) -> torch.Tensor:
        """(length, dim) vectors of positions start .. start + length - 1, for every row alike.

        Without padding all rows share their positions, so a slice of the table broadcast
        over the batch replaces building an index tensor and looking it up.

        Args:
            start: the first position.
            length: the number of positions.

        Returns:
            The (length, dim) slice of the table.
        """
        return self.weight[start : start + length]


# The layouts of a sinusoid table: where the sines and cosines go, and how their frequencies fall.
SINUSOID_LAYOUTS = ("interleaved", "concatenated", "tensor2tensor")


class SinusoidalPositions(nn.Module):
    """Fixed sinusoids of the position (the Transformer), in one of three layouts of the same idea.

    - ``interleaved`` (the paper): PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...).
    - ``concatenated`` (Marian): the same d/2 frequencies, all sines first, then all cosines.
    - ``tensor2tensor`` (tensor2tensor, fairseq): sines then cosines, with frequencies
      10000^(-i/(d/2 - 1)), so that the slowest is exactly 1/10000.

    Args:
        max_positions: the positions the table holds.
        dim: the size of each vector, even.
        layout: one of `SINUSOID_LAYOUTS`.

    Raises:
        PLMError: an unknown layout or an odd ``dim``.
    """

    table: torch.Tensor  # (max_positions, dim), a buffer

    def __init__(self, max_positions: int, dim: int, layout: str = "interleaved") -> None:
        super().__init__()
        if layout not in SINUSOID_LAYOUTS:
            raise PLMError(f"unknown sinusoid layout {layout!r}; choose one of {', '.join(SINUSOID_LAYOUTS)}")
        if dim % 2:
            raise PLMError(f"sinusoidal positions need an even size, got {dim}")
        self.max_positions = max_positions
        # Built on the CPU even under torch.device("meta"): the table is computed, not
        # loaded, so a model materialised from a checkpoint must already have it. Each layout
        # is computed as the code it comes from computes it, so that a converted model's table
        # is the same to the bit: Marian's (numpy) in float64, plm's and fairseq's in float32.
        dtype = torch.float64 if layout == "concatenated" else torch.float32
        half = dim // 2
        if layout == "tensor2tensor":
            steps, denominator = torch.arange(half, dtype=dtype, device="cpu"), max(half - 1, 1)
        else:
            steps, denominator = torch.arange(0, dim, 2, dtype=dtype, device="cpu"), dim
        inverse_frequency = torch.exp(steps * (-math.log(10000.0) / denominator))  # (d/2,)
        position = torch.arange(max_positions, dtype=dtype, device="cpu")[:, None]
        angles = position * inverse_frequency  # (max_positions, d/2)
        if layout == "interleaved":  # (max_positions, d/2, 2) -> each frequency's sine, then its cosine
            table = torch.stack([angles.sin(), angles.cos()], dim=-1).view(max_positions, dim)
        else:
            table = torch.cat([angles.sin(), angles.cos()], dim=-1)
        self.register_buffer("table", table.float(), persistent=False)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        """The vectors of ``positions``.

        Args:
            positions: (...) position indices.

        Returns:
            The (..., dim) vectors.
        """
        return self.table[positions]


def check_context(length: int, context: int) -> None:
    """Raise a PLMError when a sequence needs more positions than the model has.

    Models call this with Python integers before embedding, so that the check never
    waits on the device.

    Args:
        length: the positions the sequence needs.
        context: the positions the model has.

    Raises:
        PLMError: ``length`` exceeds ``context``.
    """
    if length > context:
        raise PLMError(f"sequence needs {length} positions but the model's context is {context} tokens")
