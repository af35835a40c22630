"""One attention hook for every family: a variant given by `build_attention` runs in every block of GPT, an
encoder and the Transformer, and `build_cross_attention` gives the Transformer's encoder-decoder attention."""

from __future__ import annotations

import math

import pytest
import torch

from plm.core import BlockConfig, MultiHeadAttention, TransformerBlock
from plm.errors import PLMError
from plm.models import GPT, Albert, Bert, Transformer, from_preset
from tests.hf.random_weights import randomized


class SharperAttention(MultiHeadAttention):
    """A stand-in variant: scores Q K^T scaled by 2 / sqrt(d_k) instead of 1 / sqrt(d_k); it counts its calls."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__(dim, heads)
        self.calls = 0

    def attend(self, queries, keys, values, mask, is_causal):
        self.calls += 1
        return self.scaled_dot_product(queries, keys, values, mask, is_causal, 2 / math.sqrt(self.head_dim))


class SharperGPT(GPT):
    def build_attention(self, config):
        return SharperAttention(config.dim, config.heads)


class SharperBert(Bert):
    def build_attention(self, config):
        return SharperAttention(config.dim, config.heads)


class SharperTransformer(Transformer):
    def build_attention(self, config):
        return SharperAttention(config.dim, config.heads)


class SharperCrossAttentionTransformer(Transformer):
    def build_cross_attention(self, config):
        return SharperAttention(config.dim, config.heads)


def blocks(model: torch.nn.Module) -> list[TransformerBlock]:
    return [module for module in model.modules() if isinstance(module, TransformerBlock)]


def hidden_states(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    if isinstance(model, Transformer):
        return model(ids, ids[:, :4]).last_hidden_state  # source (2, 6), target (2, 4): the decoder's output
    return model(ids).last_hidden_state


def variant_of(preset: str, variant: type[torch.nn.Module]) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The preset's model, its weights drawn large enough for the scores to matter, and ``variant`` with the same
    weights; both in eval mode."""
    plain = randomized(from_preset(preset))
    model = variant(plain.config).eval()
    model.load_state_dict(plain.state_dict())  # strict: the variant keeps every state-dict key
    return plain, model


@pytest.mark.parametrize(("preset", "variant"), [
    ("gpt2-micro", SharperGPT), ("bert-micro", SharperBert), ("transformer-micro", SharperTransformer),
])
def test_build_attention_gives_every_block_of_every_family_its_self_attention(preset, variant):
    plain, model = variant_of(preset, variant)
    ids = torch.randint(3, 512, (2, 6), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        changed, before = hidden_states(model, ids), hidden_states(plain, ids)
    assert blocks(model) and all(isinstance(block.attention, SharperAttention) for block in blocks(model))
    assert [block.attention.calls for block in blocks(model)] == [1] * len(blocks(model))  # once per layer
    assert not torch.allclose(changed, before, atol=1e-4)


def test_build_cross_attention_gives_the_decoder_blocks_their_encoder_decoder_attention():
    plain, model = variant_of("transformer-micro", SharperCrossAttentionTransformer)
    ids = torch.randint(3, 512, (2, 6), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        changed, before = hidden_states(model, ids), hidden_states(plain, ids)
    assert [type(block.attention) for block in blocks(model)] == [MultiHeadAttention] * 4  # self-attention as it was
    assert [block.cross_attention.calls for block in model.decoder_blocks] == [1, 1]
    assert not torch.allclose(changed, before, atol=1e-4)


def test_a_decoder_s_attention_variant_runs_with_the_kv_cache_too():
    _, model = variant_of("gpt2-micro", SharperGPT)
    ids = torch.randint(3, 512, (2, 6), generator=torch.Generator().manual_seed(1))
    cache = model.new_cache(batch=2, max_length=6)
    with torch.no_grad():
        whole = model(ids).logits
        model(ids[:, :4], cache=cache)
        last = model(ids[:, 4:], cache=cache).logits  # the new tokens' queries against 6 cached keys
    torch.testing.assert_close(last, whole[:, 4:])
    assert [block.attention.calls for block in model.blocks] == [3, 3]


def test_a_cross_attention_module_for_a_block_without_one_is_refused():
    with pytest.raises(PLMError, match="cross-attention module for a block whose shape has none"):
        TransformerBlock(BlockConfig(dim=8, heads=2, ffn_dim=16), cross_attention=MultiHeadAttention(8, 2))


class SharperAlbert(Albert):
    def build_attention(self, config):
        return SharperAttention(config.dim, config.heads)


@pytest.mark.parametrize("sharing", ["all", "attention", "ffn", "none"])
def test_albert_takes_the_hook_whichever_sublayers_its_layers_share(sharing):
    plain = randomized(from_preset("albert-micro", sharing=sharing))
    model = SharperAlbert(plain.config).eval()
    model.load_state_dict(plain.state_dict())
    ids = torch.randint(3, 512, (2, 6), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        changed, before = hidden_states(model, ids), hidden_states(plain, ids)
    attentions = {id(block.attention): block.attention for block in blocks(model)}.values()
    assert all(isinstance(attention, SharperAttention) for attention in attentions)
    assert sum(attention.calls for attention in attentions) == model.config.layers  # every layer, shared or not
    assert not torch.allclose(changed, before, atol=1e-4)
