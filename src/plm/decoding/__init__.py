"""Decoding: one model interface (:mod:`plm.decoding.interface`) and batched beam search.

Greedy search and sampling are :func:`plm.decoding.generation.generate`.
"""

from plm.decoding.beam import BeamSearchOutput, beam_search, length_penalty
from plm.decoding.generation import GenerationConfig
from plm.decoding.interface import Decoder, DecodingRequest

__all__ = ["BeamSearchOutput", "Decoder", "DecodingRequest", "GenerationConfig", "beam_search", "length_penalty"]
