"""Marian checkpoints of Hugging Face transformers (``MarianMTModel``), read and written by plm.hf.

transformers is the oracle, on tiny models it builds with random weights (nothing is downloaded): a
``MarianMTModel`` loaded into plm's Transformer gives the same logits; plm's beam search chooses the
translations ``generate`` chooses; a plm model saved for transformers loads there without missing or
unexpected keys and gives the same logits.

Beam search: plm's ``length_penalty`` is GNMT's alpha, log P / ((5 + |Y|) / 6)^alpha, transformers' divides
log P by |Y|^length_penalty; the two are the same function only at 0 (raw log-probabilities), so they are
compared there, with and without early stopping. transformers' ``forced_eos_token_id`` (which forces
``</s>`` at the length limit) has no plm counterpart and is turned off; ``bad_words_ids=[[pad]]`` is what
the released Marian models' generation configs set, and plm suppresses the padding token the same way.
"""

from __future__ import annotations

import dataclasses
import io
import json

import pytest
import torch

import plm.hf
from plm.apps.translation import load_seq2seq
from plm.cli.main import main
from plm.data.sentence_pairs import Seq2SeqTokenizers
from plm.decoding import GenerationConfig
from plm.errors import PLMError
from plm.models import from_config
from plm.models.transformer import TransformerConfig
from plm.objectives.translation import translate_ids
from tests.hf.random_weights import randomized
from tests.tokenization.test_released_tokenizers import write_marian_tokenizer

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: two threads would wait on each other

SHAPE = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
             encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=48, activation_function="swish",
             scale_embedding=True, eos_token_id=0)
# How the embeddings are laid out: (share_encoder_decoder_embeddings, tie_word_embeddings, decoder_vocab_size).
LAYOUTS = {"shared": (True, True, None), "separate": (False, True, 45), "separate-untied": (False, False, 45)}
SOURCES = torch.tensor([[5, 17, 42, 8, 9, 3, 21], [12, 7, 7, 30, 2, 0, 0]])
SOURCE_MASK = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0]])



def hf_marian(layout: str = "shared", vocab_size: int = 50):
    """A random MarianMTModel whose padding token (the decoder's start) is the last id of the target vocabulary."""
    shared, tied, decoder_vocab_size = LAYOUTS[layout]
    pad = (decoder_vocab_size or vocab_size) - 1
    config = transformers.MarianConfig(
        vocab_size=vocab_size, decoder_vocab_size=decoder_vocab_size, share_encoder_decoder_embeddings=shared,
        tie_word_embeddings=tied, pad_token_id=pad, decoder_start_token_id=pad, **SHAPE,
    )
    model = randomized(transformers.MarianMTModel(config), std=0.5, keep=("embed_positions",))
    with torch.no_grad():
        model.final_logits_bias.normal_()
    return model


def targets(start: int) -> torch.Tensor:
    return torch.tensor([[start, 4, 9, 13, 21, 6], [start, 8, 3, 3, 30, 1]])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_loaded_model_gives_the_logits_of_transformers(layout, tmp_path):
    reference = hf_marian(layout)
    reference.save_pretrained(tmp_path)
    model = plm.hf.load_hf(tmp_path).eval()
    config = model.config
    assert (config.sinusoids, config.activation, config.logits_bias) == ("concatenated", "silu", True)
    assert config.decoder_start_id == reference.config.pad_token_id == config.suppressed_ids[0]

    decoder_ids = targets(reference.config.decoder_start_token_id)
    with torch.no_grad():
        expected = reference(input_ids=SOURCES, attention_mask=SOURCE_MASK, decoder_input_ids=decoder_ids).logits
        logits = model(SOURCES, decoder_ids, SOURCE_MASK).logits
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=0)


def test_an_older_checkpoint_with_every_tied_copy_and_the_position_tables_loads_alike(tmp_path):
    """transformers 4's Marian checkpoints (the released opus-mt ones) also saved the tied copies and the sinusoids."""
    reference = hf_marian()
    reference.save_pretrained(tmp_path / "new")
    reference.config.save_pretrained(tmp_path / "old")
    state = dict(reference.state_dict())
    shared = state["model.shared.weight"]
    state |= {"model.encoder.embed_tokens.weight": shared, "model.decoder.embed_tokens.weight": shared,
              "lm_head.weight": shared}
    state |= {f"model.{stack}.embed_positions.weight": getattr(reference.model, stack).embed_positions.weight
              for stack in ("encoder", "decoder")}
    torch.save({name: tensor.clone() for name, tensor in state.items()}, tmp_path / "old" / "pytorch_model.bin")
    old, new = plm.hf.load_hf(tmp_path / "old").state_dict(), plm.hf.load_hf(tmp_path / "new").state_dict()
    assert all(torch.equal(old[name], new[name]) for name in new)

    state["model.encoder.embed_positions.weight"] = torch.zeros_like(state["model.encoder.embed_positions.weight"])
    torch.save({name: tensor.clone() for name, tensor in state.items()}, tmp_path / "old" / "pytorch_model.bin")
    with pytest.raises(PLMError, match="encoder.embed_positions.weight is not the sinusoid table"):
        plm.hf.load_hf(tmp_path / "old")


@pytest.fixture(scope="module")
def marian_directory(tmp_path_factory: pytest.TempPathFactory):
    """A random MarianMTModel saved with a small Marian tokenizer beside it: a model directory as on the Hub."""
    directory = tmp_path_factory.mktemp("opus-mt-tiny")
    vocab_size = write_marian_tokenizer(directory, vocab_size=100, lines=500)
    reference = hf_marian(vocab_size=vocab_size)
    with torch.no_grad():  # the end of sentence likely enough that some hypotheses end before the limit
        reference.final_logits_bias[0, reference.config.eos_token_id] += 4.0
    reference.save_pretrained(directory)
    return directory, reference


SENTENCES = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "Eine Frau liest.",
             "Kinder spielen auf der Straße neben einem roten Auto."]


@pytest.mark.parametrize("early_stopping", [True, False])
def test_beam_search_chooses_the_translations_of_generate(early_stopping, marian_directory):
    directory, reference = marian_directory
    model, tokenizers = load_seq2seq(directory)  # plm translate --model DIR reads both from the directory
    search = GenerationConfig(num_beams=4, length_penalty=0.0, max_len_a=0.0, max_new_tokens=12,
                              early_stopping=early_stopping)
    translations = translate_ids(model, tokenizers, SENTENCES, search)

    pad = reference.config.pad_token_id
    sources = tokenizers.encode_sources(SENTENCES)
    width = max(map(len, sources))
    input_ids = torch.tensor([row + [pad] * (width - len(row)) for row in sources])
    expected = reference.generate(input_ids, attention_mask=(input_ids != pad).long(), num_beams=4,
                                  length_penalty=0.0, max_new_tokens=12, early_stopping=early_stopping,
                                  forced_eos_token_id=None, bad_words_ids=[[pad]], do_sample=False)
    eos = reference.config.eos_token_id
    expected_rows = [row[: row.index(eos, 1) + 1] if eos in row[1:] else row for row in expected.tolist()]
    assert any(len(row) < 13 for row in expected_rows) and any(len(row) == 13 for row in expected_rows)  # both ends
    assert translations == expected_rows


def test_decoding_starts_from_the_models_start_token_and_never_chooses_padding(marian_directory):
    """The config's decoder_start_id, not the target tokenizer's bos; and the padding token, however likely, never."""
    directory, reference = marian_directory
    model, tokenizers = load_seq2seq(directory)
    tokenizers.target.special_tokens["bos"] = "</s>"  # a tokenizer that would start elsewhere
    pad = reference.config.pad_token_id
    with torch.no_grad():  # padding the likeliest token after every prefix
        model.logits_bias[pad] += 50.0
        reference.final_logits_bias[0, pad] += 50.0
    try:
        search = GenerationConfig(num_beams=4, length_penalty=0.0, max_len_a=0.0, max_new_tokens=8)
        translations = translate_ids(model, tokenizers, SENTENCES[:2], search)
        [source] = tokenizers.encode_sources(SENTENCES[:1])
        expected = reference.generate(torch.tensor([source]), num_beams=4, length_penalty=0.0, max_new_tokens=8,
                                      forced_eos_token_id=None, bad_words_ids=[[pad]], do_sample=False)
    finally:
        with torch.no_grad():
            reference.final_logits_bias[0, pad] -= 50.0
    assert all(row[0] == pad and pad not in row[1:] for row in translations)
    eos = reference.config.eos_token_id
    row = expected[0].tolist()
    assert translations[0] == (row[: row.index(eos, 1) + 1] if eos in row[1:] else row)


def test_seq2seq_train_fine_tunes_a_marian_directory_and_translate_reads_the_run(marian_directory, tmp_path, capsys,
                                                                              monkeypatch):
    directory, reference = marian_directory
    german = ["Ein Hund rennt.", "Zwei Männer lachen.", "Eine Frau singt.", "Ein Kind spielt.", "Ein Mann liest."]
    english = ["A dog runs.", "Two men laugh.", "A woman sings.", "A child plays.", "A man reads."]
    (tmp_path / "train.de").write_text("\n".join(german * 4) + "\n", encoding="utf-8")
    (tmp_path / "train.en").write_text("\n".join(english * 4) + "\n", encoding="utf-8")
    run = tmp_path / "run"
    assert main(["seq2seq", "train", "--model", str(directory), "--src", str(tmp_path / "train.de"), "--tgt",
                 str(tmp_path / "train.en"), "--steps", "2", "--max-tokens", "256", "--metric-examples", "0",
                 "--out", str(run), "--no-progress", "--device", "cpu"]) == 0
    assert {"source.spm", "target.spm", "vocab.json"} <= {path.name for path in (run / "checkpoint").iterdir()}
    model, tokenizers = load_seq2seq(run)
    assert tokenizers.encode_sources(german) == Seq2SeqTokenizers.load(directory).encode_sources(german)
    assert model.config.decoder_start_id == reference.config.decoder_start_token_id
    assert torch.equal(model.logits_bias, plm.hf.load_hf(directory).logits_bias)  # fixed, as transformers keeps it
    assert not torch.equal(model.target_embedding.weight, plm.hf.load_hf(directory).target_embedding.weight)

    capsys.readouterr()
    monkeypatch.setattr("sys.stdin", io.StringIO("Ein Hund rennt.\nEine Frau singt.\n"))
    assert main(["translate", "--model", str(run), "--max-len-b", "4", "--no-progress", "--device", "cpu"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_convert_carries_the_two_tokenizers_both_ways(marian_directory, tmp_path, capsys):
    """plm convert of an opus-mt directory gives a plm model that translates as the original; converting it back
    gives a directory transformers' MarianTokenizer reads with the same ids."""
    directory, _ = marian_directory
    assert main(["convert", "--model", str(directory), "--out", str(tmp_path / "plm")]) == 0
    search = GenerationConfig(num_beams=2, length_penalty=0.0, max_len_a=0.0, max_new_tokens=6)
    expected = translate_ids(*load_seq2seq(directory), SENTENCES, search)
    assert translate_ids(*load_seq2seq(tmp_path / "plm"), SENTENCES, search) == expected
    assert main(["convert", "--model", str(tmp_path / "plm"), "--out", str(tmp_path / "hf")]) == 0
    original = transformers.MarianTokenizer.from_pretrained(directory)
    assert transformers.MarianTokenizer.from_pretrained(tmp_path / "hf")(SENTENCES).input_ids == original(
        SENTENCES).input_ids


# --- plm -> Hugging Face ---------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_saved_model_loads_in_transformers_with_the_same_logits(layout, tmp_path):
    hf_marian(layout).save_pretrained(tmp_path / "hf")
    model = plm.hf.load_hf(tmp_path / "hf").eval()
    plm.hf.save_hf(model, tmp_path / "out")
    reference, info = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out", output_loading_info=True)
    assert type(reference).__name__ == "MarianMTModel" and not any(info.values()), info

    decoder_ids = targets(model.config.decoder_start_id)
    with torch.no_grad():
        expected = reference.eval()(input_ids=SOURCES, attention_mask=SOURCE_MASK, decoder_input_ids=decoder_ids)
        logits = model(SOURCES, decoder_ids, SOURCE_MASK).logits
    torch.testing.assert_close(logits, expected.logits, atol=1e-5, rtol=0)

    again = plm.hf.load_hf(tmp_path / "out")
    assert again.config == model.config
    assert all(torch.equal(again.state_dict()[name], tensor) for name, tensor in model.state_dict().items())


def test_unscaled_embeddings_and_a_joint_vocabulary_with_an_output_projection_of_its_own_round_trip(tmp_path):
    config = TransformerConfig(vocab_size=40, context_length=24, dim=16, encoder_layers=1, decoder_layers=1, heads=2,
                               ffn_dim=32, activation="silu", sinusoids="concatenated", scale_embeddings=False,
                               tied_output=False, logits_bias=True, decoder_start_id=39, suppressed_ids=(39,))
    model = from_config(config).eval()
    plm.hf.save_hf(model, tmp_path)
    reference, info = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info
    source, target = SOURCES.clamp(max=38), targets(39).clamp(max=39)
    with torch.no_grad():
        expected = reference.eval()(input_ids=source, attention_mask=SOURCE_MASK, decoder_input_ids=target).logits
        torch.testing.assert_close(model(source, target, SOURCE_MASK).logits, expected, atol=1e-5, rtol=0)
    assert plm.hf.load_hf(tmp_path).config == config


# --- errors ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("changes, message", [
    (dict(sinusoids="interleaved"), "interleaved sinusoids"),
    (dict(norm_first=True), "a Marian with pre-LN blocks"),
    (dict(decoder_start_id=None), "a Marian with no decoder_start_id"),
    (dict(activation="gelu_tanh", first_position=2), "a Marian with positions from 2"),
    (dict(suppressed_ids=(3,)), r"a Marian with suppressed_ids \(3,\)"),
])
def test_configs_without_a_marian_equivalent_are_refused(changes, message, tmp_path):
    config = TransformerConfig(vocab_size=40, context_length=24, dim=16, encoder_layers=1, decoder_layers=1, heads=2,
                               ffn_dim=32, sinusoids="concatenated", decoder_start_id=39)
    with pytest.raises(PLMError, match=message):
        plm.hf.save_hf(from_config(dataclasses.replace(config, **changes)), tmp_path)
    assert not (tmp_path / "config.json").exists()


@pytest.mark.parametrize("changes, message", [
    (dict(normalize_before=True), "normalize_before=True is a Marian variant that plm does not implement"),
    (dict(add_final_layer_norm=True), "add_final_layer_norm=True is a Marian variant"),
    (dict(activation_dropout=0.1), "activation_dropout=0.1 is a Marian variant"),
    (dict(decoder_attention_heads=2), "encoder_attention_heads=4 but decoder_attention_heads=2"),
    (dict(activation_function="tanh"), "activation_function 'tanh' is not supported"),
])
def test_marian_variants_plm_cannot_reproduce_are_refused(changes, message, tmp_path):
    hf_marian().save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    with pytest.raises(PLMError, match=message):
        plm.hf.load_hf(tmp_path)
