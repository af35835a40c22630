"""Decoding: one model interface (`plm.decoding.interface`), one `GenerationConfig`, and the searches.

Greedy search and sampling are [`generate`][plm.decoding.generation.generate] (which runs beam search when the config
asks for beams); batched beam search is [`beam_search`][plm.decoding.beam.beam_search].
"""

from plm.decoding.beam import BeamSearchOutput, beam_search, length_penalty
from plm.decoding.generation import decode_steps, generate, row_generator
from plm.decoding.generation_config import GenerationConfig, StopStrings
from plm.decoding.interface import Decoder, DecodingRequest

__all__ = [
    "BeamSearchOutput", "Decoder", "DecodingRequest", "GenerationConfig", "StopStrings", "beam_search",
    "decode_steps", "generate", "length_penalty", "row_generator",
]
