"""DeBERTa (v1) checkpoints of Hugging Face transformers, read and written by plm.hf.

transformers is the oracle: a ``DebertaModel`` or ``DebertaForMaskedLM`` it builds and
saves must give the same hidden states and MLM logits once loaded into plm, and a
plm model saved for it must load there without missing or unexpected keys.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

import plm.hf
from plm.errors import PLMError
from plm.models import PRESETS, DebertaConfig, from_config, from_preset, with_heads
from plm.models.deberta import log_buckets
from tests.hf.random_weights import randomized

transformers = pytest.importorskip("transformers")

TINY = dict(
    vocab_size=101,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=32,
    type_vocab_size=2,
    relative_attention=True,
    position_biased_input=False,
    pos_att_type=["c2p", "p2c"],
)
# pos_att_type and max_relative_positions (k = 2 clips distances in 7 tokens; -1 means max_position_embeddings)
VARIANTS = {
    "c2p+p2c": dict(),
    "c2p": dict(pos_att_type=["c2p"]),
    "p2c": dict(pos_att_type=["p2c"]),
    "small-k": dict(max_relative_positions=2),
    "k=-1": dict(max_relative_positions=-1),
    "absolute": dict(relative_attention=False, pos_att_type=[], position_biased_input=True),
    "both-positions": dict(position_biased_input=True, max_relative_positions=3),
}



def hf_model(variant: str = "c2p+p2c", mlm: bool = True, legacy: bool = True):
    config = transformers.DebertaConfig(**{**TINY, **VARIANTS[variant]}, legacy=legacy)
    return randomized((transformers.DebertaForMaskedLM if mlm else transformers.DebertaModel)(config))


def plm_model(**changes):
    config = DebertaConfig(
        vocab_size=101, context_length=32, dim=32, layers=2, heads=4, ffn_dim=64, segments=2,
        max_relative_positions=8, enhanced_mask_decoder=False, pretraining_heads=("mlm",),
    )
    return randomized(from_config(dataclasses.replace(config, **changes)))


def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two sequences of 7 tokens, the second padded after 4, with two segments each."""
    input_ids = torch.tensor([[5, 17, 42, 8, 99, 3, 61], [12, 7, 7, 80, 0, 0, 0]])
    attention_mask = torch.tensor([[1] * 7, [1, 1, 1, 1, 0, 0, 0]])
    token_type_ids = torch.tensor([[0, 0, 0, 1, 1, 1, 1], [0, 0, 1, 1, 0, 0, 0]])
    return input_ids, attention_mask, token_type_ids


def assert_same_outputs(model, reference):
    """Equal hidden states (and MLM logits) on the real tokens; padding positions are nobody's output."""
    input_ids, mask, token_types = batch()
    with torch.no_grad():
        output = model(input_ids, mask, token_types)
        expected = reference(
            input_ids=input_ids, attention_mask=mask, token_type_ids=token_types, output_hidden_states=True
        )
    real = mask.bool()
    torch.testing.assert_close(output.last_hidden_state[real], expected.hidden_states[-1][real], atol=1e-5, rtol=0)
    if hasattr(expected, "logits"):
        torch.testing.assert_close(output.logits[real], expected.logits[real], atol=1e-5, rtol=0)


# --- Hugging Face -> plm ---------------------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
def test_loaded_masked_lm_gives_the_outputs_of_transformers(variant, tmp_path):
    reference = hf_model(variant)
    reference.save_pretrained(tmp_path)
    model = plm.hf.load_hf(tmp_path).eval()
    assert model.config.pretraining_heads == ("mlm",) and not model.config.enhanced_mask_decoder
    assert_same_outputs(model, reference)


@pytest.mark.parametrize("variant", ["c2p+p2c", "p2c", "small-k"])
def test_loaded_bare_model_gives_the_hidden_states_of_transformers(variant, tmp_path):
    reference = hf_model(variant, mlm=False)
    reference.save_pretrained(tmp_path)
    model = plm.hf.load_hf(tmp_path).eval()
    assert model.config.pretraining_heads == () and model.mlm_head is None
    assert_same_outputs(model, reference)


def test_both_mlm_head_layouts_load(tmp_path):
    for legacy in (True, False):
        reference = hf_model(legacy=legacy)
        reference.save_pretrained(tmp_path / str(legacy))
        assert_same_outputs(plm.hf.load_hf(tmp_path / str(legacy)).eval(), reference)


def test_bare_model_ignores_the_head_of_a_masked_lm_checkpoint(tmp_path):
    reference = hf_model()
    reference.save_pretrained(tmp_path)
    edit_config(tmp_path, architectures=["DebertaModel"])
    model = plm.hf.load_hf(tmp_path).eval()
    assert model.mlm_head is None
    assert_same_outputs(model, reference.deberta)


def test_unused_position_table_of_the_original_checkpoints_is_ignored(tmp_path):
    """microsoft/deberta-base stores embeddings.position_embeddings (its EMD's); position_biased_input is false."""
    reference = hf_model()
    reference.save_pretrained(tmp_path)
    tensors = plm.hf.io.read_tensors(tmp_path / "model.safetensors")
    tensors["deberta.embeddings.position_embeddings.weight"] = torch.randn(32, 32)
    plm.hf.io.write_tensors(tmp_path / "model.safetensors", tensors)
    assert_same_outputs(plm.hf.load_hf(tmp_path).eval(), reference)


@pytest.mark.parametrize("name, layers, dim, heads", [("deberta-base", 12, 768, 12), ("deberta-large", 24, 1024, 16)])
def test_presets_are_the_hf_configs_and_sizes(name, layers, dim, heads):
    hf_config = transformers.DebertaConfig(
        num_hidden_layers=layers, hidden_size=dim, num_attention_heads=heads, intermediate_size=4 * dim,
        relative_attention=True, position_biased_input=False, pos_att_type="c2p|p2c", max_relative_positions=-1,
    )
    converter = plm.hf.BY_MODEL_TYPE["deberta"]
    config = converter.config_from_hf({**hf_config.to_dict(), "architectures": ["DebertaModel"]}, "config.json")
    assert config == dataclasses.replace(PRESETS[name], enhanced_mask_decoder=False)
    with torch.device("meta"):
        expected = sum(p.numel() for p in transformers.DebertaModel(hf_config).parameters())
        assert from_preset(name).num_parameters() == expected


# --- plm -> Hugging Face ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes",
    [dict(), dict(position_terms=("c2p",)), dict(position_terms=("p2c",)), dict(max_relative_positions=2),
     dict(pretraining_heads=()), dict(position_terms=(), absolute_positions=True)],
    ids=["both", "c2p", "p2c", "small-k", "bare", "no-relative"],
)
def test_saved_model_loads_in_transformers_with_the_same_outputs(changes, tmp_path):
    model = plm_model(**changes)
    plm.hf.save_hf(model, tmp_path)
    mlm = "mlm" in model.config.pretraining_heads
    auto = transformers.AutoModelForMaskedLM if mlm else transformers.AutoModel
    reference, info = auto.from_pretrained(tmp_path, output_loading_info=True)
    assert type(reference).__name__ == ("DebertaForMaskedLM" if mlm else "DebertaModel")
    assert not any(info.values()), info
    assert_same_outputs(model, reference.eval())


def test_round_trip_keeps_config_and_weights(tmp_path):
    model = plm_model(position_terms=("p2c",), max_relative_positions=3)
    loaded = plm.hf.load_hf(plm.hf.save_hf(model, tmp_path / "out"))
    assert loaded.config == model.config
    assert loaded.state_dict().keys() == model.state_dict().keys()
    assert all(torch.equal(loaded.state_dict()[key], value) for key, value in model.state_dict().items())


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(enhanced_mask_decoder=True), "enhanced mask decoder"),
        (dict(p2c_distance="paper"), "p2c_distance 'paper'"),
        (dict(pooler=True), "a pooler"),
        (dict(norm_first=True), "pre-LN"),
    ],
)
def test_models_without_an_hf_equivalent_are_refused(changes, message, tmp_path):
    with pytest.raises(PLMError, match=message):
        plm.hf.save_hf(plm_model(**changes), tmp_path)
    assert not (tmp_path / "config.json").exists()


def test_enhanced_mask_decoder_without_mlm_head_is_no_obstacle(tmp_path):
    model = from_config(with_heads(dataclasses.replace(plm_model().config, enhanced_mask_decoder=True)))
    plm.hf.save_hf(model, tmp_path)  # a bare encoder: the EMD would feed a head it does not have
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["DebertaModel"]


# --- errors ----------------------------------------------------------------------------------------


def edit_config(directory, **changes):
    path = directory / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(pos_att_type=["c2p", "p2p"]), "pos_att_type 'p2p' is not supported"),
        (dict(relative_attention=False), "pos_att_type .* without relative_attention"),
        (dict(talking_head=True), "talking_head"),
        (dict(embedding_size=16), "embedding_size 16"),
        (dict(hidden_act="gelu_fast"), "hidden_act 'gelu_fast'"),
        (dict(architectures=["DebertaForMultipleChoice"]), "DebertaForMultipleChoice is not supported"),
    ],
)
def test_hf_variants_plm_cannot_reproduce_are_refused(changes, message, tmp_path):
    hf_model().save_pretrained(tmp_path)
    edit_config(tmp_path, **changes)
    with pytest.raises(PLMError, match=f"config.json: {message}"):
        plm.hf.load_hf(tmp_path)


def test_weights_that_do_not_fit_the_config_are_a_plm_error(tmp_path):
    hf_model().save_pretrained(tmp_path)
    edit_config(tmp_path, num_hidden_layers=3)
    with pytest.raises(PLMError, match="model.safetensors: no tensor encoder.layer.2"):
        plm.hf.load_hf(tmp_path)


def test_untied_decoder_is_refused_unless_it_equals_the_embedding(tmp_path):
    config = transformers.DebertaConfig(**TINY, tie_word_embeddings=False)
    reference = randomized(transformers.DebertaForMaskedLM(config))
    reference.save_pretrained(tmp_path / "untied")
    with pytest.raises(PLMError, match="cls.predictions.decoder.weight differs"):
        plm.hf.load_hf(tmp_path / "untied")


# --- deberta-v2: the layout of the 1.5B model -------------------------------------------------------

# The 1.5B model's layout features at a tiny size: shared position projections, buckets (b = 4: distances
# beyond 2 of the 7 tokens are bucketed, up to k = 8), a LayerNorm on P and nGiE's convolution of width 3.
V2 = dict(TINY, pos_att_type="p2c|c2p", max_relative_positions=8, share_att_key=True, position_buckets=4,
          norm_rel_ebd="layer_norm", conv_kernel_size=3, conv_act="gelu")
V2_VARIANTS = {
    "1.5b-layout": dict(),
    "own-projections": dict(share_att_key=False),  # pos_key_proj and pos_query_proj, both with a bias
    "no-buckets": dict(position_buckets=-1),
    "buckets-not-reached": dict(position_buckets=12),  # the 7 tokens are 6 apart at most: b/2
    "c2p": dict(pos_att_type=["c2p"]),
    "p2c-own-projection": dict(pos_att_type=["p2c"], share_att_key=False),
    "no-norm-no-conv": dict(norm_rel_ebd="none", conv_kernel_size=0),
}


def hf_v2_model(variant: str = "1.5b-layout", mlm: bool = True, legacy: bool = True):
    config = transformers.DebertaV2Config(**{**V2, **V2_VARIANTS[variant]}, legacy=legacy)
    return randomized((transformers.DebertaV2ForMaskedLM if mlm else transformers.DebertaV2Model)(config))


@pytest.mark.parametrize("variant", V2_VARIANTS)
def test_loaded_v2_masked_lm_gives_the_outputs_of_transformers(variant, tmp_path):
    reference = hf_v2_model(variant)
    reference.save_pretrained(tmp_path)
    model = plm.hf.load_hf(tmp_path).eval()
    config = model.config
    assert config.key_bias and config.share_position_projections == V2_VARIANTS[variant].get("share_att_key", True)
    assert_same_outputs(model, reference)


@pytest.mark.parametrize("legacy, mlm", [(False, True), (True, False)], ids=["lm-predictions-head", "bare"])
def test_other_v2_layouts_load(legacy, mlm, tmp_path):
    reference = hf_v2_model(mlm=mlm, legacy=legacy)
    reference.save_pretrained(tmp_path)
    model = plm.hf.load_hf(tmp_path).eval()
    assert (model.mlm_head is not None) == mlm
    assert_same_outputs(model, reference)


@pytest.mark.parametrize("variant", ["1.5b-layout", "own-projections", "no-norm-no-conv"])
def test_saved_v2_model_loads_in_transformers_with_the_same_outputs(variant, tmp_path):
    hf_v2_model(variant).save_pretrained(tmp_path / "hf")
    model = plm.hf.load_hf(tmp_path / "hf").eval()
    plm.hf.save_hf(model, tmp_path / "out")
    reference, info = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "out", output_loading_info=True)
    assert type(reference).__name__ == "DebertaV2ForMaskedLM" and not any(info.values()), info
    assert_same_outputs(model, reference.eval())
    again = plm.hf.load_hf(tmp_path / "out")
    assert again.config == model.config
    assert all(torch.equal(again.state_dict()[key], value) for key, value in model.state_dict().items())


XXLARGE = dict(  # microsoft/deberta-v2-xxlarge's config.json
    vocab_size=128100, hidden_size=1536, num_hidden_layers=48, num_attention_heads=24, intermediate_size=6144,
    max_position_embeddings=512, type_vocab_size=0, relative_attention=True, max_relative_positions=-1,
    position_buckets=256, norm_rel_ebd="layer_norm", share_att_key=True, pos_att_type="p2c|c2p",
    conv_kernel_size=3, conv_act="gelu", layer_norm_eps=1e-7, position_biased_input=False,
)


def test_the_1_5b_preset_is_the_released_config_and_size():
    hf_config = transformers.DebertaV2Config(**XXLARGE)
    converter = plm.hf.BY_MODEL_TYPE["deberta-v2"]
    config = converter.config_from_hf({**hf_config.to_dict(), "architectures": ["DebertaV2Model"]}, "config.json")
    assert config == dataclasses.replace(PRESETS["deberta-1.5b"], enhanced_mask_decoder=False)
    with torch.device("meta"):
        expected = sum(p.numel() for p in transformers.DebertaV2Model(hf_config).parameters())
        assert from_preset("deberta-1.5b").num_parameters() == expected == 1_564_549_632


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(conv_groups=2), "conv_groups 2 is not supported"),
        (dict(conv_act="tanh"), "conv_act 'tanh' is not supported"),
        (dict(attention_head_size=4), "attention_head_size 4"),
        (dict(architectures=["DebertaV2ForSequenceClassification"]), "DebertaV2ForSequenceClassification is not"),
    ],
)
def test_v2_variants_plm_cannot_reproduce_are_refused(changes, message, tmp_path):
    hf_v2_model().save_pretrained(tmp_path)
    edit_config(tmp_path, **changes)
    with pytest.raises(PLMError, match=f"config.json: {message}"):
        plm.hf.load_hf(tmp_path)


@pytest.mark.parametrize("field, value", [("share_position_projections", True), ("position_buckets", 4),
                                          ("relative_embedding_norm", True), ("ngram_kernel", 3)])
def test_1_5b_features_without_key_bias_are_refused(field, value, tmp_path):
    """transformers has them only in deberta-v2, whose keys have a bias: a model without one is not that."""
    with pytest.raises(PLMError, match=f"{field} but no key_bias"):
        plm.hf.save_hf(plm_model(**{field: value}), tmp_path)
    assert not (tmp_path / "config.json").exists()


@pytest.mark.parametrize("buckets, max_distance", [(256, 512), (8, 32), (16, 100)])
def test_log_buckets_are_the_released_codes(buckets, max_distance):
    """Every distance lands in the bucket of transformers' make_log_bucket_position (the released 1.5B model's).

    Guards the log scale's end: log((k - 1) / m), not log(k / m), which moves some far distances one bucket.
    """
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

    distance = torch.arange(-3 * max_distance, 3 * max_distance + 1)[:, None]  # (T, 1), T, S as the model's
    expected = make_log_bucket_position(distance, buckets, max_distance).long()
    assert torch.equal(log_buckets(distance, buckets, max_distance), expected)


def test_a_layer_norm_eps_of_its_own_keeps_the_outputs_both_ways(tmp_path):
    """The other tests use the default eps (1e-7 in both libraries), so an eps replaced by the default on the way in
    or out would pass them; eps = 0.5 changes every norm. transformers' outputs are the oracle."""
    reference = randomized(transformers.DebertaForMaskedLM(transformers.DebertaConfig(**TINY, layer_norm_eps=0.5)))
    reference.save_pretrained(tmp_path / "hf")
    assert_same_outputs(plm.hf.load_hf(tmp_path / "hf").eval(), reference)

    model = plm_model(norm_eps=0.5)
    plm.hf.save_hf(model, tmp_path / "plm")
    assert_same_outputs(model, transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "plm").eval())
