"""GPT-1 and GPT-2 checkpoints of Hugging Face transformers, read and written by plm.hf.

transformers is the oracle: a model it builds and saves must give the same logits and
the same greedy continuations once loaded into plm, and a plm model saved for it must
load there without missing or unexpected keys and give the same logits.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

import plm
import plm.hf
from plm.cli.main import main
from plm.decoding import generate
from plm.errors import PLMError
from plm.models import PRESETS, GPTConfig, from_config, from_preset
from plm.tokenization.tokenizer import Tokenizer
from tests.conftest import synthetic_text
from tests.hf.random_weights import randomized

transformers = pytest.importorskip("transformers")

TINY = dict(vocab_size=101, n_positions=32, n_embd=32, n_layer=2, n_head=4)



def hf_model(kind: str):
    if kind == "gpt2":  # no bos/eos: nothing may stop generation early
        config = transformers.GPT2Config(**TINY, n_inner=48, bos_token_id=None, eos_token_id=None)
        return randomized(transformers.GPT2LMHeadModel(config), std=0.5)
    return randomized(transformers.OpenAIGPTLMHeadModel(transformers.OpenAIGPTConfig(**TINY)), std=0.5)


def plm_model(kind: str):
    config = GPTConfig(vocab_size=101, context_length=32, dim=32, layers=2, heads=4, ffn_dim=128)
    if kind == "openai-gpt":
        config = dataclasses.replace(config, norm_first=False, final_norm=False, scaled_residual_init=False)
    return randomized(from_config(config), std=0.5)


def hf_logits(model, input_ids, attention_mask):
    # transformers' forward does not derive positions from the mask; plm does it this way.
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits


def padded_batch(padding: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts of 7 and 4 tokens, the short one padded with id 0 on the ``padding`` side."""
    long, short = [5, 17, 42, 8, 99, 3, 61], [12, 7, 7, 80]
    if padding == "none":
        return torch.tensor([long, short + [1, 2, 3]]), torch.ones(2, 7, dtype=torch.long)
    left = padding == "left"
    ids = [long, [0, 0, 0] + short if left else short + [0, 0, 0]]
    mask = [[1] * 7, [0, 0, 0, 1, 1, 1, 1] if left else [1, 1, 1, 1, 0, 0, 0]]
    return torch.tensor(ids), torch.tensor(mask)


def save_pytorch_model_bin(model, directory):
    """The format of older transformers, with lm_head.weight and the causal-mask buffers saved too."""
    model.config.save_pretrained(directory)
    state = model.state_dict()
    n = model.config.n_positions
    for index in range(model.config.n_layer):
        state[f"transformer.h.{index}.attn.bias"] = torch.ones(n, n).tril().view(1, 1, n, n)
    torch.save(state, directory / "pytorch_model.bin")


KINDS = ["gpt2", "openai-gpt"]


# --- Hugging Face -> plm ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("padding", ["none", "right", "left"])
def test_loaded_model_gives_the_logits_of_transformers(kind, padding, tmp_path):
    reference = hf_model(kind)
    reference.save_pretrained(tmp_path)
    model = plm.hf.load_hf(tmp_path).eval()

    input_ids, mask = padded_batch(padding)
    with torch.no_grad():
        expected = hf_logits(reference, input_ids, mask)
        logits = model(input_ids, attention_mask=mask).logits
    real = mask.bool()
    # fp32 rounding grows with the hidden states' size (logits up to about 10 with these random weights)
    torch.testing.assert_close(logits[real], expected[real], atol=3e-5, rtol=0)


@pytest.mark.parametrize("kind", KINDS)
def test_pytorch_model_bin_loads_like_safetensors(kind, tmp_path):
    reference = hf_model(kind)
    reference.save_pretrained(tmp_path / "safetensors")
    save_pytorch_model_bin(reference, tmp_path / "bin")

    from_bin = plm.hf.load_hf(tmp_path / "bin").state_dict()
    from_safetensors = plm.hf.load_hf(tmp_path / "safetensors").state_dict()
    assert from_bin.keys() == from_safetensors.keys()
    assert all(torch.equal(from_bin[key], from_safetensors[key]) for key in from_bin)


def test_sharded_checkpoint_loads_like_a_single_file(tmp_path):
    reference = hf_model("gpt2")
    reference.save_pretrained(tmp_path / "single")
    reference.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()

    sharded = plm.hf.load_hf(tmp_path / "sharded").state_dict()
    single = plm.hf.load_hf(tmp_path / "single").state_dict()
    assert all(torch.equal(sharded[key], single[key]) for key in single)


@pytest.mark.parametrize("kind", KINDS)
def test_greedy_generation_matches_transformers(kind, tmp_path):
    reference = hf_model(kind)
    reference.save_pretrained(tmp_path)
    model = plm.hf.load_hf(tmp_path)

    prompt = torch.tensor([[5, 17, 42, 8]])
    expected = reference.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=12)
    assert expected.shape == (1, 16) and len(set(expected[0, 4:].tolist())) > 2  # worth comparing
    assert torch.equal(model.generate(prompt, max_new_tokens=12), expected)

    input_ids, mask = padded_batch("left")  # transformers' generate derives positions from the mask
    expected = reference.generate(input_ids, attention_mask=mask, do_sample=False, max_new_tokens=12, pad_token_id=0)
    assert torch.equal(model.generate(input_ids, max_new_tokens=12, attention_mask=mask), expected)


def test_convert_writes_the_end_of_text_so_that_transformers_stops_where_plm_does(tmp_path):
    """A GPT-2 of its own vocabulary: config.json names its tokenizer's <|endoftext|> as bos and eos, which
    transformers' generate stops at, as plm generate does."""
    bpe = Tokenizer.train_bpe([synthetic_text(50)], 300)
    eos = bpe.eos_id
    torch.manual_seed(0)
    gpt = from_preset("gpt2-micro", vocab_size=len(bpe))
    gpt.init_weights(std=0.1)
    with torch.no_grad():  # the last norm's bias b adds b . e_eos to the logit of <|endoftext|>: about 2 more
        row = gpt.token_embedding.weight[eos]
        gpt.final_norm.bias += 2.0 * row / row.dot(row)
    plm.save(gpt, tmp_path / "gpt", bpe)
    assert main(["convert", "--model", str(tmp_path / "gpt"), "--out", str(tmp_path / "hf")]) == 0
    config = json.loads((tmp_path / "hf" / "config.json").read_text(encoding="utf-8"))
    assert config["bos_token_id"] == config["eos_token_id"] == eos == bpe.bos_id
    reference = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "hf")
    lengths = []
    for prompt in ("The cat", "My friend", "the list"):
        ids = torch.tensor([bpe.encode(prompt)])
        ours = generate(gpt.eval(), ids, 40, eos_token_id=eos)[0, ids.shape[1]:].tolist()
        theirs = reference.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=40,
                                    pad_token_id=eos)[0, ids.shape[1]:].tolist()
        assert theirs == ours
        lengths.append(len(ours))
    assert min(lengths) < max(lengths) == 40 and sorted(lengths)[1] > 1  # one stops at once, one later, one never


def test_bare_gpt2model_checkpoint_loads_like_the_lm_one(tmp_path):
    reference = hf_model("gpt2")
    reference.save_pretrained(tmp_path / "lm")
    reference.transformer.save_pretrained(tmp_path / "bare")  # GPT2Model: no "transformer." prefix

    bare = plm.hf.load_hf(tmp_path / "bare").state_dict()
    lm = plm.hf.load_hf(tmp_path / "lm").state_dict()
    assert all(torch.equal(bare[key], lm[key]) for key in lm)


def test_presets_are_the_default_hf_configs():
    converter = plm.hf.BY_MODEL_TYPE["gpt2"]  # one converter serves gpt2 and openai-gpt
    for preset, hf_config in (("gpt2", transformers.GPT2Config()), ("gpt1", transformers.OpenAIGPTConfig())):
        assert converter.config_from_hf(hf_config.to_dict(), "config.json") == PRESETS[preset]
        written = converter.config_to_hf(PRESETS[preset])
        assert {k: v for k, v in written.items() if k != "architectures"}.items() <= hf_config.to_dict().items()
    assert converter.config_from_hf({"model_type": "gpt2"}, "config.json") == PRESETS["gpt2"]  # defaults filled in


# --- plm -> Hugging Face ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_saved_model_loads_in_transformers_with_the_same_logits(kind, tmp_path):
    model = plm_model(kind)
    plm.hf.save_hf(model, tmp_path)
    reference, info = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert type(reference).__name__ == ("GPT2LMHeadModel" if kind == "gpt2" else "OpenAIGPTLMHeadModel")
    assert not any(info.values()), info

    input_ids, mask = padded_batch("left")
    with torch.no_grad():
        expected = hf_logits(reference.eval(), input_ids, mask)
        logits = model(input_ids, attention_mask=mask).logits
    real = mask.bool()
    torch.testing.assert_close(logits[real], expected[real], atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_keeps_config_and_weights(kind, tmp_path):
    model = plm_model(kind)
    loaded = plm.hf.load_hf(plm.hf.save_hf(model, tmp_path / "out"))
    assert loaded.config == model.config
    assert loaded.state_dict().keys() == model.state_dict().keys()
    assert all(torch.equal(loaded.state_dict()[key], value) for key, value in model.state_dict().items())


def dropout_rates(model) -> tuple[float, float, float]:
    """(embeddings, attention weights, residual branches) as the model's own dropout modules apply them."""
    if isinstance(model, transformers.PreTrainedModel):
        block = model.transformer.h[0]
        assert block.attn.resid_dropout.p == block.mlp.dropout.p
        return model.transformer.drop.p, block.attn.attn_dropout.p, block.attn.resid_dropout.p
    return model.embedding_dropout.p, model.blocks[0].attention.dropout, model.blocks[0].dropout.p


@pytest.mark.parametrize("kind", KINDS)
def test_each_dropout_rate_keeps_its_place_both_ways(kind, tmp_path):
    """Three different rates, so that swapping resid_pdrop and attn_pdrop (or embd_pdrop) when reading or writing
    shows; the tests above compare in eval mode, where dropout does nothing. transformers' modules are the oracle."""
    hf_config = transformers.GPT2Config if kind == "gpt2" else transformers.OpenAIGPTConfig
    reference = transformers.AutoModelForCausalLM.from_config(hf_config(**TINY, embd_pdrop=0.1, attn_pdrop=0.2,
                                                                         resid_pdrop=0.3))
    assert dropout_rates(reference) == (0.1, 0.2, 0.3)
    reference.save_pretrained(tmp_path / "hf")
    model = plm.hf.load_hf(tmp_path / "hf")
    assert (model.config.embedding_dropout, model.config.attention_dropout, model.config.dropout) == (0.1, 0.2, 0.3)
    assert dropout_rates(model) == (0.1, 0.2, 0.3)

    config = dataclasses.replace(plm_model(kind).config, embedding_dropout=0.15, attention_dropout=0.25, dropout=0.35)
    plm.hf.save_hf(from_config(config), tmp_path / "plm")
    written = json.loads((tmp_path / "plm" / "config.json").read_text())
    assert (written["embd_pdrop"], written["attn_pdrop"], written["resid_pdrop"]) == (0.15, 0.25, 0.35)
    assert dropout_rates(transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "plm")) == (0.15, 0.25, 0.35)


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(norm_first=True, final_norm=False), "no Hugging Face equivalent"),
        (dict(norm_first=False, final_norm=True), "no Hugging Face equivalent"),
        (dict(norm_first=False, final_norm=False, activation="gelu"), "activation 'gelu'"),
        (dict(norm_first=False, final_norm=False, ffn_dim=48), "ffn_dim 48"),
    ],
)
def test_configs_without_an_hf_equivalent_are_refused(changes, message, tmp_path):
    shape = dict(vocab_size=101, context_length=32, dim=32, layers=1, heads=4, ffn_dim=128)
    model = from_config(GPTConfig(**{**shape, **changes}))
    with pytest.raises(PLMError, match=message):
        plm.hf.save_hf(model, tmp_path)
    assert not (tmp_path / "config.json").exists()


# --- errors ----------------------------------------------------------------------------------------


def saved_gpt2(directory):
    hf_model("gpt2").save_pretrained(directory)
    return directory


def edit_config(directory, **changes):
    path = directory / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_missing_directory_is_a_plm_error(tmp_path):
    with pytest.raises(PLMError, match="no such model directory"):
        plm.hf.load_hf(tmp_path / "nowhere")


@pytest.mark.parametrize(
    "removed, message", [("config.json", "config.json: file not found"), ("model.safetensors", "no model.safetensors")]
)
def test_directory_without_config_or_weights_is_a_plm_error(removed, message, tmp_path):
    directory = saved_gpt2(tmp_path)
    (directory / removed).unlink()
    with pytest.raises(PLMError, match=message):
        plm.hf.load_hf(directory)


@pytest.mark.parametrize("serialization", ["safetensors", "bin"])
def test_truncated_weights_are_a_plm_error(serialization, tmp_path):
    if serialization == "safetensors":
        hf_model("gpt2").save_pretrained(tmp_path)
    else:
        save_pytorch_model_bin(hf_model("gpt2"), tmp_path)
    path = tmp_path / ("model.safetensors" if serialization == "safetensors" else "pytorch_model.bin")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(PLMError, match=path.name):
        plm.hf.load_hf(tmp_path)


def test_unknown_model_type_is_a_plm_error(tmp_path):
    directory = saved_gpt2(tmp_path)
    edit_config(directory, model_type="not-a-model")
    with pytest.raises(PLMError, match="config.json: model_type 'not-a-model' is not supported"):
        plm.hf.load_hf(directory)


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(n_embd=64), "model.safetensors: weights do not fit"),
        (dict(n_layer=3), "model.safetensors: no tensor h.2"),
        (dict(n_layer=1), "model.safetensors: unexpected tensors h.1"),
        (dict(vocab_size=100), "model.safetensors: weights do not fit"),
    ],
)
def test_weights_that_do_not_fit_the_config_are_a_plm_error(changes, message, tmp_path):
    directory = saved_gpt2(tmp_path)
    edit_config(directory, **changes)
    with pytest.raises(PLMError, match=message):
        plm.hf.load_hf(directory)


@pytest.mark.parametrize(
    "changes",
    [
        dict(scale_attn_by_inverse_layer_idx=True),
        dict(reorder_and_upcast_attn=True),
        dict(scale_attn_weights=False),
        dict(activation_function="gelu_fast"),
    ],
)
def test_gpt2_variants_plm_cannot_reproduce_are_refused(changes, tmp_path):
    directory = saved_gpt2(tmp_path)
    edit_config(directory, **changes)
    with pytest.raises(PLMError, match=f"config.json: {next(iter(changes))}"):
        plm.hf.load_hf(directory)


def test_untied_lm_head_is_refused_unless_it_equals_the_embedding(tmp_path):
    config = transformers.GPT2Config(**TINY, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None)
    reference = randomized(transformers.GPT2LMHeadModel(config), std=0.5)
    reference.save_pretrained(tmp_path / "untied")
    with pytest.raises(PLMError, match="lm_head.weight differs from the token embedding"):
        plm.hf.load_hf(tmp_path / "untied")

    with torch.no_grad():
        reference.lm_head.weight.copy_(reference.transformer.wte.weight)
    reference.save_pretrained(tmp_path / "equal")
    model = plm.hf.load_hf(tmp_path / "equal")
    assert torch.equal(model.token_embedding.weight, reference.transformer.wte.weight)


@pytest.mark.parametrize("kind", KINDS)
def test_a_layer_norm_eps_of_its_own_keeps_the_logits_both_ways(kind, tmp_path):
    """The other tests use transformers' default eps, which plm's default equals, so an eps replaced by the default
    on the way in or out would pass them; eps = 0.5 changes every norm. transformers' logits are the oracle."""
    if kind == "gpt2":
        hf_config = transformers.GPT2Config(**TINY, n_inner=48, bos_token_id=None, eos_token_id=None,
                                            layer_norm_epsilon=0.5)
    else:
        hf_config = transformers.OpenAIGPTConfig(**TINY, layer_norm_epsilon=0.5)
    reference = randomized(transformers.AutoModelForCausalLM.from_config(hf_config), std=0.5)
    reference.save_pretrained(tmp_path / "hf")
    input_ids, mask = padded_batch("none")
    with torch.no_grad():
        expected = hf_logits(reference, input_ids, mask)
        torch.testing.assert_close(plm.hf.load_hf(tmp_path / "hf").eval()(input_ids).logits, expected, atol=3e-5,
                                   rtol=0)

    model = randomized(from_config(dataclasses.replace(plm_model(kind).config, norm_eps=0.5)), std=0.5)
    plm.hf.save_hf(model, tmp_path / "plm")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "plm").eval()
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids).logits, hf_logits(theirs, input_ids, mask), atol=3e-5, rtol=0)


def test_a_gpt2_whose_mlp_is_not_four_times_as_wide_loads_in_transformers_with_the_same_logits(tmp_path):
    """n_inner must be written when ffn_dim != 4 * dim, or transformers builds 4 * dim and refuses the weights."""
    model = randomized(from_config(dataclasses.replace(plm_model("gpt2").config, ffn_dim=48)), std=0.5)
    plm.hf.save_hf(model, tmp_path)
    reference, info = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info
    input_ids, mask = padded_batch("none")
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids).logits, hf_logits(reference.eval(), input_ids, mask), atol=3e-5,
                                   rtol=0)


class RunsCodeWhenUnpickled:
    """A pickled object whose loading calls ``open(marker, "w")``: what a hostile pytorch_model.bin can do."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


def test_pytorch_model_bin_is_never_unpickled_freely(tmp_path):
    """A .bin is read with torch's weights-only loader: a pickle that would run code is refused, and runs none.

    Guards against ``torch.load(..., weights_only=False)``, which would call ``open`` here (and anything else
    elsewhere) before plm could look at what it read.
    """
    marker = tmp_path / "ran"
    path = tmp_path / "pytorch_model.bin"
    torch.save({"wte.weight": torch.zeros(2, 2), "payload": RunsCodeWhenUnpickled(marker)}, path)
    with pytest.raises(PLMError, match="not a readable PyTorch weights file"):
        plm.hf.io.read_weight_file(path)
    assert not marker.exists()
