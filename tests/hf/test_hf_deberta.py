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
