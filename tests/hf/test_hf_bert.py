"""BERT checkpoints of Hugging Face transformers, read and written by plm.hf.

transformers is the oracle: a BertModel, BertForMaskedLM or BertForPreTraining it
builds and saves must give the same hidden states, MLM logits and NSP logits once
loaded into plm; a plm BERT saved for it must load there without missing or
unexpected keys and give the same outputs. The helpers here serve ALBERT's tests too.
"""

from __future__ import annotations

import json

import pytest
import torch

import plm.hf
from plm.errors import PLMError
from plm.models import BertConfig, from_config, with_heads
from tests.hf.random_weights import randomized

transformers = pytest.importorskip("transformers")

TINY = dict(
    vocab_size=97,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=48,
    max_position_embeddings=40,
    type_vocab_size=3,
)
ARCHITECTURES = {  # HF class -> (pooler, pretraining heads) of the plm model it loads as
    "BertModel": (True, ()),
    "BertForMaskedLM": (False, ("mlm",)),
    "BertForPreTraining": (True, ("mlm", "nsp")),
}



def batch() -> dict[str, torch.Tensor]:
    """Two sequences of 9 and 6 tokens (right padding), with segments 0, 1 and 2."""
    torch.manual_seed(1)
    input_ids = torch.randint(1, TINY["vocab_size"], (2, 9))
    attention_mask = torch.tensor([[1] * 9, [1] * 6 + [0] * 3])
    token_type_ids = torch.tensor([[0] * 4 + [1] * 5, [0] * 3 + [2] * 3 + [0] * 3])
    return {"input_ids": input_ids * attention_mask, "attention_mask": attention_mask, "token_type_ids": token_type_ids}


def hf_outputs(model, inputs) -> dict[str, torch.Tensor]:
    """Hidden states, MLM logits and sentence-pair logits, whichever the HF model has."""
    with torch.no_grad():
        output = model(**inputs, output_hidden_states=True)
    found = {"hidden": output.hidden_states[-1]}
    fields = (
        ("mlm", "logits"), ("mlm", "prediction_logits"), ("pair", "seq_relationship_logits"), ("pair", "sop_logits")
    )
    for name, field in fields:
        if getattr(output, field, None) is not None:
            found[name] = getattr(output, field)
    return found


def plm_outputs(model, inputs) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        output = model(**inputs)
    found = {"hidden": output.last_hidden_state}
    if output.logits is not None:
        found["mlm"] = output.logits
    if output.pair_logits is not None:
        found["pair"] = output.pair_logits
    return found


def assert_same_outputs(expected: dict, actual: dict, attention_mask: torch.Tensor) -> None:
    """Equal outputs at the real tokens (what padding positions compute is nobody's concern)."""
    assert expected.keys() == actual.keys()
    real = attention_mask.bool()
    for name in expected:
        want, got = expected[name], actual[name]
        if name != "pair":
            want, got = want[real], got[real]
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5, msg=lambda m, name=name: f"{name}: {m}")


def load_in_transformers(directory):
    architecture = json.loads((directory / "config.json").read_text())["architectures"][0]
    model, info = getattr(transformers, architecture).from_pretrained(directory, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    return model.eval()


def check_load(hf_model, directory, architectures) -> None:
    """Save an HF model, load it with plm; same config heads and the same outputs."""
    hf_model.save_pretrained(directory)
    model = plm.hf.load_hf(directory).eval()
    pooler, heads = architectures[type(hf_model).__name__]
    assert (model.config.pooler, model.config.pretraining_heads) == (pooler, heads)
    inputs = batch()
    assert_same_outputs(hf_outputs(hf_model, inputs), plm_outputs(model, inputs), inputs["attention_mask"])


def check_save(model, directory, expected_architecture) -> None:
    """Save a plm model for HF; HF loads every tensor, the outputs match, and plm reads it back."""
    randomized(model)
    plm.hf.save_hf(model, directory)
    hf_model = load_in_transformers(directory)
    assert type(hf_model).__name__ == expected_architecture
    inputs = batch()
    assert_same_outputs(hf_outputs(hf_model, inputs), plm_outputs(model, inputs), inputs["attention_mask"])
    again = plm.hf.load_hf(directory)
    assert again.config == model.config
    assert all(torch.equal(again.state_dict()[k], v) for k, v in model.state_dict().items())


def tiny_plm_config(**fields) -> BertConfig:
    return BertConfig(vocab_size=97, context_length=40, dim=32, layers=2, heads=4, ffn_dim=48, segments=3, **fields)


@pytest.mark.parametrize("architecture", list(ARCHITECTURES))
def test_hf_bert_loads_with_equal_outputs(tmp_path, architecture):
    hf_model = randomized(getattr(transformers, architecture)(transformers.BertConfig(**TINY)))
    check_load(hf_model, tmp_path, ARCHITECTURES)


@pytest.mark.parametrize("architecture", list(ARCHITECTURES))
def test_plm_bert_saves_for_transformers(tmp_path, architecture):
    pooler, heads = ARCHITECTURES[architecture]
    check_save(from_config(tiny_plm_config(pooler=pooler, pretraining_heads=heads)), tmp_path, architecture)


def test_mlm_only_model_is_saved_as_masked_lm_without_its_pooler(tmp_path):
    model = randomized(from_config(with_heads(tiny_plm_config(), "mlm", pooler=True)))
    plm.hf.save_hf(model, tmp_path)
    hf_model = load_in_transformers(tmp_path)
    assert isinstance(hf_model, transformers.BertForMaskedLM)
    inputs = batch()
    assert_same_outputs(hf_outputs(hf_model, inputs), plm_outputs(model, inputs), inputs["attention_mask"])


def test_other_architectures_heads_are_ignored_as_from_pretrained_does(tmp_path):
    """bert-base-uncased says BertForMaskedLM but holds the pooler and NSP head too."""
    hf_model = randomized(transformers.BertForPreTraining(transformers.BertConfig(**TINY)))
    hf_model.save_pretrained(tmp_path)
    for architecture, (pooler, heads) in ARCHITECTURES.items():
        config = json.loads((tmp_path / "config.json").read_text())
        (tmp_path / "config.json").write_text(json.dumps({**config, "architectures": [architecture]}))
        model = plm.hf.load_hf(tmp_path).eval()
        assert (model.config.pooler, model.config.pretraining_heads) == (pooler, heads)
        inputs = batch()
        wanted = {"hidden", *("mlm" if head == "mlm" else "pair" for head in heads)}
        expected = {k: v for k, v in hf_outputs(hf_model, inputs).items() if k in wanted}
        assert_same_outputs(expected, plm_outputs(model, inputs), inputs["attention_mask"])


def test_a_saved_tied_decoder_is_accepted_and_checked(tmp_path):
    hf_model = randomized(transformers.BertForMaskedLM(transformers.BertConfig(**TINY)))
    hf_model.save_pretrained(tmp_path)
    state = {k: v.contiguous() for k, v in hf_model.state_dict().items()}
    state["cls.predictions.decoder.weight"] = state["bert.embeddings.word_embeddings.weight"].clone()
    state["cls.predictions.decoder.bias"] = state["cls.predictions.bias"].clone()
    state["bert.embeddings.position_ids"] = torch.arange(TINY["max_position_embeddings"])[None]
    torch.save(state, tmp_path / "pytorch_model.bin")
    (tmp_path / "model.safetensors").unlink()
    plm.hf.load_hf(tmp_path)
    state["cls.predictions.decoder.weight"] = state["cls.predictions.decoder.weight"] + 1
    torch.save(state, tmp_path / "pytorch_model.bin")
    with pytest.raises(PLMError, match="decoder.weight differs"):
        plm.hf.load_hf(tmp_path)


def test_mismatched_weights_are_plm_errors(tmp_path):
    hf_model = randomized(transformers.BertModel(transformers.BertConfig(**TINY)))
    hf_model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())

    (tmp_path / "config.json").write_text(json.dumps({**config, "intermediate_size": 64}))
    with pytest.raises(PLMError, match="wrong shape"):
        plm.hf.load_hf(tmp_path)

    (tmp_path / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}))
    with pytest.raises(PLMError, match="no tensor encoder.layer.2"):
        plm.hf.load_hf(tmp_path)

    (tmp_path / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1}))
    with pytest.raises(PLMError, match="unexpected tensors encoder.layer.1"):
        plm.hf.load_hf(tmp_path)

    (tmp_path / "config.json").write_text(json.dumps({**config, "architectures": ["BertForPreTraining"]}))
    with pytest.raises(PLMError, match="no tensor"):
        plm.hf.load_hf(tmp_path)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"position_embedding_type": "relative_key"}, "variant"),
        ({"is_decoder": True}, "variant"),
        ({"hidden_act": "swish"}, "hidden_act"),
        ({"architectures": ["BertForNextSentencePrediction"]}, "architecture"),
        ({"hidden_size": 0}, "positive"),
    ],
)
def test_unsupported_configs_are_plm_errors(tmp_path, change, message):
    transformers.BertModel(transformers.BertConfig(**TINY)).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(PLMError, match=message):
        plm.hf.load_hf(tmp_path)


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(embedding_dim=16), "factorized"),
        (dict(norm_first=True), "no Hugging Face equivalent"),
        (dict(pretraining_heads=("nsp",)), "no Hugging Face architecture"),
        (dict(pooler=False), "no Hugging Face architecture"),
    ],
)
def test_configs_without_hf_equivalent_are_plm_errors(tmp_path, fields, message):
    with pytest.raises(PLMError, match=message):
        plm.hf.save_hf(from_config(tiny_plm_config(**fields)), tmp_path)


def test_bare_encoder_reads_a_checkpoint_with_the_bert_prefix(tmp_path):
    """from_pretrained gives BertModel the encoder out of a BertForPreTraining checkpoint; so does plm."""
    hf_model = randomized(transformers.BertForPreTraining(transformers.BertConfig(**TINY)))
    hf_model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "architectures": ["BertModel"]}))
    model = plm.hf.load_hf(tmp_path).eval()
    inputs = batch()
    expected = {"hidden": hf_outputs(hf_model, inputs)["hidden"]}
    assert_same_outputs(expected, plm_outputs(model, inputs), inputs["attention_mask"])


def test_a_layer_norm_eps_of_its_own_keeps_the_outputs_both_ways(tmp_path):
    """The other tests use the default eps (1e-12 in both libraries), so an eps replaced by the default on the way in
    or out would pass them; eps = 0.5 changes every norm. transformers' outputs are the oracle."""
    hf_model = randomized(transformers.BertForPreTraining(transformers.BertConfig(**TINY, layer_norm_eps=0.5)))
    check_load(hf_model, tmp_path / "hf", ARCHITECTURES)
    check_save(from_config(tiny_plm_config(norm_eps=0.5)), tmp_path / "plm", "BertModel")
