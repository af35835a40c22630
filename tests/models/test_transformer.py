"""The Transformer: torch.nn.Transformer's outputs on the same weights, causality, the caches, the paper's sizes."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from plm.core import MultiHeadAttention
from plm.decoding import DecodingRequest, beam_search
from plm.decoding.generation import generate
from plm.models import RECIPES, Transformer, from_preset
from plm.storage.checkpoint import load_model, save_model
from plm.training.optim import learning_rate

BOS = 1


def micro(**overrides) -> Transformer:
    torch.manual_seed(0)
    model = from_preset("transformer-micro", **overrides).eval()  # vocabulary 512, d_model 32, 2 + 2 layers
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("bias"):  # zero at init; a bias lost on the way must show
                parameter.normal_(std=0.1)
    return model


def padded_sources() -> tuple[torch.Tensor, torch.Tensor]:
    lengths = [7, 4, 6]
    ids = torch.randint(3, 512, (3, 7), generator=torch.Generator().manual_seed(1))
    mask = torch.tensor([[1] * n + [0] * (7 - n) for n in lengths])
    return ids * mask, mask  # padding id 0 on the right


def sinusoid(length: int, dim: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)), from section 3.5."""
    return torch.tensor(
        [[math.sin(p / 10000 ** (i / dim)) if i % 2 == 0 else math.cos(p / 10000 ** ((i - 1) / dim))
          for i in range(dim)] for p in range(length)]
    )


def torch_transformer_with_weights_of(model: Transformer) -> nn.Transformer:
    config = model.config
    reference = nn.Transformer(
        config.dim, config.heads, config.encoder_layers, config.decoder_layers, config.ffn_dim,
        dropout=0.0, activation="relu", batch_first=True, norm_first=False,
    ).eval()
    reference.encoder.norm = None  # nn.Transformer adds a final LayerNorm; the paper's post-LN stacks have none
    reference.decoder.norm = None
    reference.encoder.use_nested_tensor = False  # the plain path (the nested-tensor one only warns and skips padding)

    def attention(theirs: nn.MultiheadAttention, ours: MultiHeadAttention) -> dict:
        return {theirs.in_proj_weight: ours.in_proj.weight, theirs.in_proj_bias: ours.in_proj.bias,
                theirs.out_proj.weight: ours.out_proj.weight, theirs.out_proj.bias: ours.out_proj.bias}

    def norm(theirs: nn.LayerNorm, ours: nn.LayerNorm) -> dict:
        return {theirs.weight: ours.weight, theirs.bias: ours.bias}

    def feed_forward(theirs: nn.Module, ours: nn.Module) -> dict:
        fc_in, fc_out = ours.feed_forward.fc_in, ours.feed_forward.fc_out
        return {theirs.linear1.weight: fc_in.weight, theirs.linear1.bias: fc_in.bias,
                theirs.linear2.weight: fc_out.weight, theirs.linear2.bias: fc_out.bias}

    pairs = {}
    for theirs, ours in zip(reference.encoder.layers, model.encoder_blocks):
        pairs |= attention(theirs.self_attn, ours.attention) | norm(theirs.norm1, ours.attention_norm)
        pairs |= norm(theirs.norm2, ours.feed_forward_norm)
        pairs |= feed_forward(theirs, ours)
    for theirs, ours in zip(reference.decoder.layers, model.decoder_blocks):
        pairs |= attention(theirs.self_attn, ours.attention) | attention(theirs.multihead_attn, ours.cross_attention)
        pairs |= norm(theirs.norm1, ours.attention_norm) | norm(theirs.norm2, ours.cross_attention_norm)
        pairs |= norm(theirs.norm3, ours.feed_forward_norm)
        pairs |= feed_forward(theirs, ours)
    assert len(pairs) == sum(1 for _ in reference.parameters())  # every parameter of theirs gets ours
    with torch.no_grad():
        for theirs, ours in pairs.items():
            theirs.copy_(ours)
    return reference


@pytest.mark.parametrize("joint", [True, False])
def test_same_weights_in_torch_nn_transformer_give_the_same_logits(joint):
    model = micro() if joint else micro(source_vocab_size=300)
    reference = torch_transformer_with_weights_of(model)
    source, source_mask = padded_sources()
    source = source % (512 if joint else 300)
    target = torch.randint(3, 512, (3, 5), generator=torch.Generator().manual_seed(2))
    source_table = model.target_embedding if joint else model.source_embedding
    dim = model.config.dim
    with torch.no_grad():
        src = source_table.weight[source] * math.sqrt(dim) + sinusoid(7, dim)
        tgt = model.target_embedding.weight[target] * math.sqrt(dim) + sinusoid(5, dim)
        padding = ~source_mask.bool()
        hidden = reference(src, tgt, tgt_mask=nn.Transformer.generate_square_subsequent_mask(5), tgt_is_causal=True,
                           src_key_padding_mask=padding, memory_key_padding_mask=padding)
        expected = hidden @ model.target_embedding.weight.T
        actual = model(source, target, source_mask).logits
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def test_changing_a_future_target_token_changes_no_earlier_output():
    model = micro()
    source, source_mask = padded_sources()
    target = torch.randint(3, 512, (3, 8), generator=torch.Generator().manual_seed(3))
    changed = target.clone()
    changed[:, 5] = (changed[:, 5] + 1) % 512
    before, after = model(source, target, source_mask).logits, model(source, changed, source_mask).logits
    torch.testing.assert_close(before[:, :5], after[:, :5], atol=0, rtol=0)
    assert (before[:, 5:] - after[:, 5:]).abs().amax(-1).min() > 1e-4  # and it does change the later ones


def test_padding_a_source_changes_nothing():
    model = micro()
    source, source_mask = padded_sources()
    target = torch.randint(3, 512, (3, 4), generator=torch.Generator().manual_seed(4))
    batched = model(source, target, source_mask).logits
    for row in range(3):
        length = int(source_mask[row].sum())
        alone = model(source[row : row + 1, :length], target[row : row + 1]).logits
        torch.testing.assert_close(batched[row : row + 1], alone, atol=1e-5, rtol=1e-5)


def test_cached_step_by_step_decoding_equals_the_full_forward():
    model = micro()
    source, source_mask = padded_sources()
    target = torch.randint(3, 512, (3, 6), generator=torch.Generator().manual_seed(5))
    full = model(source, target, source_mask).logits
    state = model.start_decoding(DecodingRequest(target[:, :1], 6, None, source, source_mask))
    steps = []
    for length in range(1, 7):
        logits, state = model.decode_step(target[:, :length], state)
        steps.append(logits)
    assert state.caches[0].length == 6  # really one token per step through the cache
    torch.testing.assert_close(torch.stack(steps, 1), full, atol=1e-5, rtol=1e-5)


def count_memory_projections(monkeypatch) -> list[int]:
    """Batch sizes of every K/V projection of the encoder's output from now on."""
    calls, project = [], MultiHeadAttention.project_memory

    def counted(self, memory):
        calls.append(memory.shape[0])
        return project(self, memory)

    monkeypatch.setattr(MultiHeadAttention, "project_memory", counted)
    return calls


def test_encoder_decoder_attention_projects_the_memory_once_per_sentence(monkeypatch):
    model = micro()
    source, source_mask = padded_sources()
    start = torch.full((3, 1), BOS)
    calls = count_memory_projections(monkeypatch)
    uncached = generate(model, start, 8, source_ids=source, source_mask=source_mask, use_cache=False)
    assert calls == [3] * (2 * 8)  # without the cache: every layer, every step
    calls.clear()
    cached = generate(model, start, 8, source_ids=source, source_mask=source_mask)
    assert calls == [3, 3]  # once per decoder layer, for the 3 sentences together
    assert torch.equal(cached, uncached)
    calls.clear()
    beams = beam_search(model, start, num_beams=4, max_new_tokens=8, source_ids=source, source_mask=source_mask)
    assert calls == [3, 3]  # the beams get copies of each sentence's keys and values
    slow = beam_search(model, start, num_beams=4, max_new_tokens=8, source_ids=source, source_mask=source_mask,
                       use_cache=False)
    assert torch.equal(beams.sequences, slow.sequences)


def test_batched_beam_search_over_padded_sources_equals_one_sentence_at_a_time():
    model = micro()
    source, source_mask = padded_sources()
    options = dict(num_beams=3, length_penalty=0.6, max_len_a=1.0, max_new_tokens=2, eos_token_id=2)
    batched = beam_search(model, torch.full((3, 1), BOS), source_ids=source, source_mask=source_mask, **options)
    for row in range(3):
        length = int(source_mask[row].sum())
        alone = beam_search(model, torch.full((1, 1), BOS), source_ids=source[row : row + 1, :length], **options)
        assert batched.sequences[row, : alone.sequences.shape[1]].tolist() == alone.sequences[0].tolist()
        assert batched.scores[row].item() == pytest.approx(alone.scores[0].item(), abs=1e-5)


def test_beam_search_stops_each_sentence_at_a_times_its_source_length_plus_b():
    model = micro()
    source, source_mask = padded_sources()  # 7, 4 and 6 real tokens
    out = beam_search(model, torch.full((3, 1), BOS), num_beams=2, max_len_a=1.5, max_new_tokens=1,
                      source_ids=source, source_mask=source_mask)  # no EOS: every hypothesis runs to its limit
    assert out.lengths.tolist() == [math.floor(1.5 * n + 1) for n in (7, 4, 6)]  # 11, 7, 10


def expected_parameters(vocab: int, d: int, f: int, layers: int, source_vocab: int = 0) -> int:
    """Counted from the paper's description: embeddings, then per layer attention (4 d x d + biases),
    FFN (d x f, f x d + biases) and one LayerNorm (2d) per sub-layer; the decoder adds a second attention."""
    attention, ffn, norm = 4 * d * d + 4 * d, 2 * d * f + f + d, 2 * d
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    return vocab * d + source_vocab * d + layers * (encoder_layer + decoder_layer)


def test_parameter_counts_are_the_papers():
    with torch.device("meta"):
        base, big = from_preset("transformer-base"), from_preset("transformer-big")
        separate = from_preset("transformer-base", source_vocab_size=30000)
    assert base.num_parameters() == expected_parameters(37000, 512, 2048, 6) == 63_082_496
    assert big.num_parameters() == expected_parameters(37000, 1024, 4096, 6) == 214_245_376
    assert separate.num_parameters() == expected_parameters(37000, 512, 2048, 6, source_vocab=30000)
    # Table 3: 65M (base) and 213M (big) parameters
    assert base.num_parameters() == pytest.approx(65e6, rel=0.04)
    assert big.num_parameters() == pytest.approx(213e6, rel=0.01)
    config = big.config
    assert (config.dim, config.ffn_dim, config.heads, config.dropout) == (1024, 4096, 16, 0.3)
    assert (base.config.dim, base.config.ffn_dim, base.config.heads, base.config.dropout) == (512, 2048, 8, 0.1)


def test_a_joint_vocabulary_is_one_matrix_for_source_target_and_softmax():
    model = micro()
    source, source_mask = padded_sources()
    target = torch.full((3, 1), BOS)
    memory = model.encode(source, source_mask)[0]
    with torch.no_grad():
        model.target_embedding.weight[source[0, 0]] += 1.0  # a source token's row: the encoder reads it
        model.target_embedding.weight[7] += 1.0  # the softmax's row for token 7
    assert (model.encode(source, source_mask)[0][0] - memory[0]).abs().max() > 1e-3
    expected_7 = model.decode(target, *model.encode(source, source_mask)) @ model.target_embedding.weight[7]
    torch.testing.assert_close(model(source, target, source_mask).logits[:, :, 7], expected_7, atol=1e-5, rtol=1e-5)
    # (that the decoder's input embedding is the softmax matrix, the torch.nn.Transformer test shows)
    separate = micro(source_vocab_size=300)
    memory, _ = separate.encode(source % 300, source_mask)
    with torch.no_grad():
        separate.target_embedding.weight.add_(1.0)
    torch.testing.assert_close(separate.encode(source % 300, source_mask)[0], memory, atol=0, rtol=0)


def test_save_and_load_give_the_same_model(tmp_path):
    model = micro(source_vocab_size=300)
    save_model(model, tmp_path / "transformer")
    loaded = load_model(tmp_path / "transformer").eval()
    assert loaded.config == model.config and isinstance(loaded, Transformer)
    source, source_mask = padded_sources()
    target = torch.randint(3, 512, (3, 4), generator=torch.Generator().manual_seed(6))
    torch.testing.assert_close(loaded(source % 300, target, source_mask).logits,
                               model(source % 300, target, source_mask).logits, atol=0, rtol=0)


def test_the_recipe_keeps_the_papers_optimizer_and_schedule():
    paper = RECIPES["transformer"].paper
    assert (paper.betas, paper.eps, paper.warmup, paper.schedule) == ((0.9, 0.98), 1e-9, 4000, "inverse-sqrt")
    # Section 5.4 of the paper (not in the seeds, which list only residual dropout): label smoothing eps_ls = 0.1.
    assert RECIPES["transformer"].label_smoothing == 0.1
    for step_num in (1, 2000, 4000, 4001, 50_000):  # lrate = d_model^-0.5 min(step^-0.5, step warmup^-1.5)
        expected = 512**-0.5 * min(step_num**-0.5, step_num * 4000**-1.5)
        assert learning_rate(paper.schedule, step_num - 1, paper.lr, paper.warmup, 100_000, 0.0) == pytest.approx(
            expected
        )
