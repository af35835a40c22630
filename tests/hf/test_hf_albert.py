"""ALBERT checkpoints of Hugging Face transformers, read and written by plm.hf.

As for BERT (whose helpers these tests reuse): an AlbertModel, AlbertForMaskedLM or
AlbertForPreTraining built by transformers gives the same hidden states, MLM logits
and SOP logits in plm, for shared layers in one group, in several groups and with
several layers per group; plm's ALBERT saved for transformers loads there completely.
"""

from __future__ import annotations

import json

import pytest
import torch

import plm.hf
from plm.errors import PLMError
from plm.models import AlbertConfig, from_config
from tests.hf.random_weights import randomized
from tests.hf.test_hf_bert import (
    TINY,
    assert_same_outputs,
    batch,
    check_load,
    check_save,
    hf_outputs,
    plm_outputs,
)

transformers = pytest.importorskip("transformers")

ARCHITECTURES = {
    "AlbertModel": (True, ()),
    "AlbertForMaskedLM": (False, ("mlm",)),
    "AlbertForPreTraining": (True, ("mlm", "sop")),
}
GROUPINGS = [  # (layers, hidden groups, layers per group)
    (2, 1, 1),
    (4, 2, 1),
    (4, 2, 2),
    (3, 1, 2),
    (3, 3, 1),
]
# Every architecture with groups of several layers, and every grouping for the bare encoder.
CASES = [(architecture, 4, 2, 2) for architecture in ARCHITECTURES] + [
    ("AlbertModel", *g) for g in GROUPINGS if g != (4, 2, 2)
]


def hf_config(layers: int = 2, groups: int = 1, inner: int = 1):
    return transformers.AlbertConfig(
        **{**TINY, "num_hidden_layers": layers},
        embedding_size=16,
        num_hidden_groups=groups,
        inner_group_num=inner,
    )


def tiny_plm_config(**fields) -> AlbertConfig:
    values = dict(vocab_size=97, context_length=40, embedding_dim=16, dim=32, layers=2, heads=4, ffn_dim=48, segments=3)
    return AlbertConfig(**{**values, **fields})


@pytest.mark.parametrize("architecture, layers, groups, inner", CASES)
def test_hf_albert_loads_with_equal_outputs(tmp_path, architecture, layers, groups, inner):
    hf_model = randomized(getattr(transformers, architecture)(hf_config(layers, groups, inner)))
    check_load(hf_model, tmp_path, ARCHITECTURES)
    model = plm.hf.load_hf(tmp_path)
    assert (model.config.hidden_groups, model.config.inner_group_layers) == (groups, inner)
    assert len(model.blocks) == groups * inner


@pytest.mark.parametrize("architecture, layers, groups, inner", CASES)
def test_plm_albert_saves_for_transformers(tmp_path, architecture, layers, groups, inner):
    pooler, heads = ARCHITECTURES[architecture]
    config = tiny_plm_config(
        layers=layers, hidden_groups=groups, inner_group_layers=inner, pooler=pooler, pretraining_heads=heads
    )
    check_save(from_config(config), tmp_path, architecture)


def test_hidden_states_are_recorded_after_every_block_as_transformers_does(tmp_path):
    hf_model = randomized(transformers.AlbertModel(hf_config(4, 2, 2)))
    hf_model.save_pretrained(tmp_path)
    model = plm.hf.load_hf(tmp_path).eval()
    inputs = batch()
    with torch.no_grad():
        expected = hf_model(**inputs, output_hidden_states=True).hidden_states
        actual = model(**inputs, output_hidden_states=True).hidden_states
    assert len(actual) == len(expected) == 1 + 4 * 2
    real = inputs["attention_mask"].bool()
    for want, got in zip(expected, actual):
        torch.testing.assert_close(got[real], want[real], atol=1e-5, rtol=1e-5)


def test_unshared_albert_is_saved_as_one_group_per_layer(tmp_path):
    model = from_config(tiny_plm_config(layers=3, sharing="none"))
    plm.hf.save_hf(randomized(model), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert (config["num_hidden_groups"], config["inner_group_num"]) == (3, 1)
    hf_model = transformers.AlbertModel.from_pretrained(tmp_path).eval()
    inputs = batch()
    # The real tokens only: plm returns zeros at padding positions, transformers what it computed there.
    assert_same_outputs(hf_outputs(hf_model, inputs), plm_outputs(model, inputs), inputs["attention_mask"])


@pytest.mark.parametrize("sharing", ["attention", "ffn"])
def test_partial_sharing_has_no_hf_equivalent(tmp_path, sharing):
    with pytest.raises(PLMError, match="shares only"):
        plm.hf.save_hf(from_config(tiny_plm_config(sharing=sharing)), tmp_path)


def test_mismatched_albert_weights_are_plm_errors(tmp_path):
    transformers.AlbertForPreTraining(hf_config(2, 2, 1)).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())

    (tmp_path / "config.json").write_text(json.dumps({**config, "embedding_size": 8}))
    with pytest.raises(PLMError, match="wrong shape"):
        plm.hf.load_hf(tmp_path)

    (tmp_path / "config.json").write_text(json.dumps({**config, "num_hidden_groups": 1}))
    with pytest.raises(PLMError, match="unexpected tensors albert.encoder.albert_layer_groups.1"):
        plm.hf.load_hf(tmp_path)

    (tmp_path / "config.json").write_text(json.dumps({**config, "inner_group_num": 2}))
    with pytest.raises(PLMError, match="no tensor albert.encoder.albert_layer_groups.0.albert_layers.1"):
        plm.hf.load_hf(tmp_path)
