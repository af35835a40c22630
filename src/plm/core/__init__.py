"""The shared Transformer core: every family builds on these pieces."""

from plm.core.attention import KVCache, MultiHeadAttention, attention_weights
from plm.core.block import BlockConfig, FeedForward, TransformerBlock
from plm.core.embeddings import LearnedPositions, SinusoidalPositions, build_position_ids
from plm.core.masks import Packing, build_attention_mask
from plm.core.outputs import CausalLMOutput, ModelOutput
from plm.core.stack import native_layers, run_blocks
from plm.cpu.cross_entropy import linear_cross_entropy
from plm.cpu.linear import Linear, linear

__all__ = [
    "BlockConfig",
    "CausalLMOutput",
    "FeedForward",
    "KVCache",
    "LearnedPositions",
    "Linear",
    "ModelOutput",
    "MultiHeadAttention",
    "Packing",
    "SinusoidalPositions",
    "TransformerBlock",
    "attention_weights",
    "build_attention_mask",
    "build_position_ids",
    "linear",
    "linear_cross_entropy",
    "native_layers",
    "run_blocks",
]
