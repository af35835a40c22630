"""The shared Transformer core: every family builds on these pieces."""

from plm.core.attention import KVCache, MultiHeadAttention
from plm.core.block import BlockConfig, FeedForward, TransformerBlock
from plm.core.embeddings import LearnedPositions, SinusoidalPositions, build_position_ids
from plm.core.linear import Linear, linear
from plm.core.masks import build_attention_mask
from plm.core.outputs import CausalLMOutput, ModelOutput

__all__ = [
    "BlockConfig",
    "CausalLMOutput",
    "FeedForward",
    "KVCache",
    "LearnedPositions",
    "Linear",
    "ModelOutput",
    "MultiHeadAttention",
    "SinusoidalPositions",
    "TransformerBlock",
    "build_attention_mask",
    "build_position_ids",
    "linear",
]
