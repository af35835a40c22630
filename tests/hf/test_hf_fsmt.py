"""fairseq's WMT19 models as transformers ports them (``FSMTForConditionalGeneration``), read and written by plm.hf.

transformers is the oracle, on tiny models with random weights (nothing is downloaded): the same logits
once loaded into plm's Transformer, the same translations from plm's beam search as from ``generate``,
and a plm model saved for transformers that loads there without missing or unexpected keys. transformers'
FSMT builds no causal mask in a forward pass with ``use_cache`` (it expects one token at a time), so the
teacher-forced logits are compared with ``use_cache=False``. For the beam search settings (a length
penalty of 0, no forced ``</s>``) see tests/hf/test_hf_marian.py.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

import plm.hf
from plm.apps.translation import load_seq2seq
from plm.decoding import GenerationConfig
from plm.errors import PLMError
from plm.models import from_config
from plm.models.transformer import TransformerConfig
from plm.objectives.translation import translate_ids
from tests.hf.random_weights import randomized
from tests.tokenization.test_released_tokenizers import write_fsmt_tokenizer

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: two threads would wait on each other

SHAPE = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
             encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=48, langs=["de", "en"])
# (tie_word_embeddings, src_vocab_size, pad_token_id): positions start at pad_token_id + 1.
VARIANTS = {"tied": (True, 50, 1), "separate": (False, 55, 1), "separate-pad-11": (False, 55, 11)}
SOURCES = torch.tensor([[5, 17, 42, 8, 9, 3, 21], [12, 7, 7, 30, 20, 0, 0]])
SOURCE_MASK = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0]])
TARGETS = torch.tensor([[2, 4, 9, 13, 21, 6], [2, 8, 3, 3, 30, 5]])  # </s> y: fairseq's decoder starts from </s>



def padded(pad: int) -> torch.Tensor:
    """SOURCES padded with ``pad``: transformers numbers fairseq's positions from the ids, skipping padding."""
    return SOURCES.masked_fill(SOURCE_MASK == 0, pad)


def hf_fsmt(variant: str = "separate", src_vocab_size: int | None = None, tgt_vocab_size: int = 50):
    tied, default_src, pad = VARIANTS[variant]
    config = transformers.FSMTConfig(src_vocab_size=src_vocab_size or default_src, tgt_vocab_size=tgt_vocab_size,
                                     tie_word_embeddings=tied, pad_token_id=pad, **SHAPE)
    return randomized(transformers.FSMTForConditionalGeneration(config), std=0.5, keep=("embed_positions",))


@pytest.mark.parametrize("variant", VARIANTS)
def test_loaded_model_gives_the_logits_of_transformers(variant, tmp_path):
    reference = hf_fsmt(variant)
    reference.save_pretrained(tmp_path)
    model = plm.hf.load_hf(tmp_path).eval()
    config = model.config
    assert (config.sinusoids, config.first_position, config.decoder_start_id) == ("tensor2tensor",
                                                                                  VARIANTS[variant][2] + 1, 2)
    assert config.tied_output == config.joint_vocabulary == VARIANTS[variant][0]

    sources = padded(VARIANTS[variant][2])
    with torch.no_grad():
        expected = reference(input_ids=sources, attention_mask=SOURCE_MASK, decoder_input_ids=TARGETS,
                             use_cache=False).logits
        logits = model(sources, TARGETS, SOURCE_MASK).logits
    torch.testing.assert_close(logits, expected, atol=5e-5, rtol=1e-5)  # fairseq's order of operations differs


# Sizes off the powers of two (issue 50): a vocabulary of 131, d_model 40, 48 or 64, a feed-forward layer of 72 or 80.
ODD_SIZES = {"d40": (40, 72), "d48": (48, 80), "d64": (64, 80)}


def random_ids(rows: int, length: int, vocab: int, generator: torch.Generator) -> torch.Tensor:
    """Ids drawn from the whole vocabulary: the padding index (1) among them, as a token."""
    ids = torch.randint(0, vocab, (rows, length), generator=generator)
    ids[:, length // 3] = 1
    return ids


def odd_pair(d_model: int, ffn_dim: int, direction: str, directory):
    """A plm model and transformers' at an odd size: random weights of transformers loaded into plm ("loaded"), or
    plm's own initialisation saved for transformers ("saved": logits of about 0.5, as in the issue)."""
    if direction == "saved":
        config = TransformerConfig(
            vocab_size=131, source_vocab_size=131, context_length=64, dim=d_model, encoder_layers=2, decoder_layers=2,
            heads=4, ffn_dim=ffn_dim, sinusoids="tensor2tensor", first_position=2, tied_output=False,
            decoder_start_id=2)
        torch.manual_seed(0)
        model = from_config(config).eval()
        plm.hf.save_hf(model, directory)
        return model, transformers.AutoModelForSeq2SeqLM.from_pretrained(directory).eval()
    config = transformers.FSMTConfig(
        src_vocab_size=131, tgt_vocab_size=131, d_model=d_model, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=ffn_dim, decoder_ffn_dim=ffn_dim,
        max_position_embeddings=64, langs=["de", "en"])
    reference = randomized(transformers.FSMTForConditionalGeneration(config), keep=("embed_positions",))
    reference.save_pretrained(directory)
    return plm.hf.load_hf(directory).eval(), reference


@pytest.mark.parametrize("padding", ["right and left", "none"])
@pytest.mark.parametrize("direction", ["loaded", "saved"])
@pytest.mark.parametrize("d_model, ffn_dim", ODD_SIZES.values(), ids=ODD_SIZES)
def test_random_ids_give_the_logits_of_transformers_at_odd_sizes(d_model, ffn_dim, direction, padding, tmp_path):
    """fairseq numbers positions from the ids (a padding index takes the zero row and is not counted) and hides the
    padding index from the decoder's self-attention: ids drawn at random, padding index included, tell that apart
    from numbering by place. A left-padded source (fairseq pads sources on the left) is numbered from its first
    token."""
    model, reference = odd_pair(d_model, ffn_dim, direction, tmp_path)
    generator = torch.Generator().manual_seed(0)
    sources, targets = random_ids(3, 40, 131, generator), random_ids(3, 30, 131, generator)
    targets[:, 0] = 2  # </s>, where fairseq's decoder starts
    mask = torch.ones_like(sources)
    if padding != "none":
        mask[1, -6:] = mask[2, :4] = 0
        sources[mask == 0] = 1
    with torch.no_grad():
        expected = reference(input_ids=sources, attention_mask=mask, decoder_input_ids=targets, use_cache=False).logits
        logits = model(sources, targets, mask).logits
    torch.testing.assert_close(logits, expected, atol=5e-5, rtol=1e-5)


@pytest.fixture(scope="module")
def fsmt_directory(tmp_path_factory: pytest.TempPathFactory):
    """A random FSMT model saved with a small fairseq tokenizer beside it: a model directory as on the Hub."""
    directory = tmp_path_factory.mktemp("wmt19-tiny")
    source_size, target_size = write_fsmt_tokenizer(directory, merges=300, lines=300)
    reference = hf_fsmt(src_vocab_size=source_size, tgt_vocab_size=target_size)
    eos = reference.config.eos_token_id
    # </s> likely enough that some hypotheses end before the limit: FSMT has no logits bias, but its last
    # LayerNorm adds a bias b to every output h, so w_eos + 6 b / |b|^2 adds about 6 to the logit of </s>.
    with torch.no_grad():
        bias = reference.model.decoder.layers[-1].final_layer_norm.bias
        reference.model.decoder.output_projection.weight[eos] += 6.0 * bias / bias.dot(bias)
    reference.save_pretrained(directory)
    return directory, reference


SENTENCES = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "Eine Frau liest.",
             "Kinder spielen auf der Straße neben einem roten Auto."]


@pytest.mark.parametrize("early_stopping", [True, False])
def test_beam_search_chooses_the_translations_of_generate(early_stopping, fsmt_directory):
    directory, reference = fsmt_directory
    model, tokenizers = load_seq2seq(directory)
    search = GenerationConfig(num_beams=4, length_penalty=0.0, max_len_a=0.0, max_new_tokens=12,
                              early_stopping=early_stopping)
    translations = translate_ids(model, tokenizers, SENTENCES, search)

    pad, eos = reference.config.pad_token_id, reference.config.eos_token_id
    sources = tokenizers.encode_sources(SENTENCES)
    width = max(map(len, sources))
    input_ids = torch.tensor([row + [pad] * (width - len(row)) for row in sources])
    expected = reference.generate(input_ids, attention_mask=(input_ids != pad).long(), num_beams=4,
                                  length_penalty=0.0, max_new_tokens=12, early_stopping=early_stopping,
                                  forced_eos_token_id=None, do_sample=False)
    expected_rows = [row[: row.index(eos, 1) + 1] if eos in row[1:] else row for row in expected.tolist()]
    assert any(len(row) < 13 for row in expected_rows) and any(len(row) == 13 for row in expected_rows)  # both ends
    assert translations == expected_rows


# --- plm -> Hugging Face ---------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
def test_saved_model_loads_in_transformers_with_the_same_logits(variant, tmp_path):
    hf_fsmt(variant).save_pretrained(tmp_path / "hf")
    model = plm.hf.load_hf(tmp_path / "hf").eval()
    plm.hf.save_hf(model, tmp_path / "out")
    reference, info = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out", output_loading_info=True)
    assert type(reference).__name__ == "FSMTForConditionalGeneration" and not any(info.values()), info
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["pad_token_id"] == VARIANTS[variant][2]

    sources = padded(VARIANTS[variant][2])
    with torch.no_grad():
        expected = reference.eval()(input_ids=sources, attention_mask=SOURCE_MASK, decoder_input_ids=TARGETS,
                                    use_cache=False).logits
        logits = model(sources, TARGETS, SOURCE_MASK).logits
    torch.testing.assert_close(logits, expected, atol=5e-5, rtol=1e-5)

    again = plm.hf.load_hf(tmp_path / "out")
    assert again.config == model.config
    assert all(torch.equal(again.state_dict()[name], tensor) for name, tensor in model.state_dict().items())


# --- errors ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("changes, message", [
    (dict(first_position=0), "an FSMT with positions from 0"),
    (dict(logits_bias=True), "an FSMT with a logits bias"),
    (dict(suppressed_ids=(1,)), r"an FSMT with suppressed_ids \(1,\)"),
    (dict(source_vocab_size=None), "an FSMT with a joint vocabulary and an output projection of its own"),
    (dict(tied_output=True), "an FSMT with separate vocabularies and the target embedding as output projection"),
])
def test_configs_without_an_fsmt_equivalent_are_refused(changes, message, tmp_path):
    config = TransformerConfig(vocab_size=40, source_vocab_size=44, context_length=24, dim=16, encoder_layers=1,
                               decoder_layers=1, heads=2, ffn_dim=32, sinusoids="tensor2tensor", first_position=2,
                               tied_output=False, decoder_start_id=2)
    with pytest.raises(PLMError, match=message):
        plm.hf.save_hf(from_config(dataclasses.replace(config, **changes)), tmp_path)
    assert not (tmp_path / "config.json").exists()


def test_tied_embeddings_of_two_vocabulary_sizes_are_refused(tmp_path):
    hf_fsmt("separate").save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "tie_word_embeddings": True}))
    with pytest.raises(PLMError, match="tie_word_embeddings ties vocabularies of 55 and 50 tokens"):
        plm.hf.load_hf(tmp_path)
