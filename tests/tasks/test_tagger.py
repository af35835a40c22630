"""The feature-based tagger: a frozen encoder's first-piece features, layer combinations, a BiLSTM over words."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from plm.errors import PLMError
from plm.models import from_preset
from plm.tasks.bilstm import BiLSTMTagger, LayerCombination, ScalarMix, encoder_word_features
from plm.tasks.encoding import collate, encode_tagged
from plm.tasks.readers import TaggedSentence
from plm.tokenization.tokenizer import Tokenizer

VOCABULARY = "[PAD] [UNK] [CLS] [SEP] [MASK] the a cat dog sees run ##ner ##ning ##s jump ##ing".split()


def test_scalar_mix_is_gamma_times_the_softmax_weighted_sum():
    mix = ScalarMix(3)
    with torch.no_grad():
        mix.scalars.copy_(torch.tensor([0.5, -1.0, 2.0]))
        mix.gamma.fill_(1.5)
    layered = torch.randn(2, 3, 4, 5)
    weights = torch.exp(torch.tensor([0.5, -1.0, 2.0]))
    weights = weights / weights.sum()
    expected = 1.5 * sum(weights[j] * layered[:, j] for j in range(3))
    torch.testing.assert_close(mix(layered), expected)


def test_concat_and_sum_combine_each_words_layers():
    layered = torch.randn(2, 4, 3, 5)  # (batch, layers, words, dim)
    concat = LayerCombination(4, 5, "concat")(layered)
    torch.testing.assert_close(concat[1, 2], torch.cat([layered[1, j, 2] for j in range(4)]))
    torch.testing.assert_close(LayerCombination(4, 5, "sum")(layered)[0, 1], layered[0, :, 1].sum(0))


def test_features_are_the_chosen_layers_at_each_words_first_piece(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(VOCABULARY) + "\n")
    tokenizer = Tokenizer.from_vocab_txt(path)
    torch.manual_seed(0)
    encoder = from_preset("bert-micro", vocab_size=len(tokenizer)).eval()
    sentences = [TaggedSentence(("the", "runner", "jumping"), ()), TaggedSentence(("a", "dog"), ())]
    features = [encode_tagged(tokenizer, s, {}, 32) for s in sentences]
    batch = collate(features, tokenizer.pad_id)
    words, mask = encoder_word_features(encoder, batch["input_ids"], batch["attention_mask"],
                                        [f["word_ids"] for f in features], layers=(-2, -1))
    states = encoder(batch["input_ids"], batch["attention_mask"], output_hidden_states=True).hidden_states
    # [CLS] the run ##ner jump ##ing [SEP]: the words start at 1, 2, 4; [CLS] a dog [SEP]: at 1, 2
    torch.testing.assert_close(words[0, :, 2], torch.stack([states[-2][0, 4], states[-1][0, 4]]))
    torch.testing.assert_close(words[1, 1, 1], states[-1][1, 2])
    assert mask.tolist() == [[1, 1, 1], [1, 1, 0]]


def test_padding_words_do_not_change_the_real_words_tags():
    """Both LSTM directions start at each sentence's own last word, whatever the batch's padding."""
    torch.manual_seed(0)
    tagger = BiLSTMTagger([(2, 6)], labels=3, hidden=8, dropout=0.0).eval()
    sentence = torch.randn(1, 2, 4, 6)
    alone = tagger([sentence], torch.ones(1, 4, dtype=torch.long))
    padded = torch.cat([sentence, torch.randn(1, 2, 3, 6)], dim=2)  # three more "words" of padding
    in_batch = tagger([padded], torch.tensor([[1, 1, 1, 1, 0, 0, 0]]))
    torch.testing.assert_close(in_batch[:, :4], alone)


def test_the_tagger_learns_from_an_extra_elmo_shaped_source():
    """An (L+1)-layer source as ELMo's embed gives, beside the encoder's: the tag is read from it alone."""
    torch.manual_seed(0)
    elmo = torch.randn(32, 3, 5, 8)  # (batch, L+1, words, dim)
    tags = elmo[:, 1, :, :3].argmax(-1)  # the middle layer's first three features decide
    encoder = torch.randn(32, 4, 5, 6)  # uninformative
    tagger = BiLSTMTagger([(4, 6), (3, 8)], labels=3, combine="mix", hidden=16, lstm_layers=1, dropout=0.0)
    optimizer = torch.optim.Adam(tagger.parameters(), lr=3e-2)
    mask = torch.ones(32, 5, dtype=torch.long)
    for _ in range(40):
        loss = F.cross_entropy(tagger([encoder, elmo], mask).flatten(0, 1), tags.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    accuracy = (tagger([encoder, elmo], mask).argmax(-1) == tags).float().mean()
    assert accuracy > 0.9
    weights = tagger.combinations[1].mix.scalars.softmax(0)
    assert weights[1] == weights.max()  # the scalar mix learned which layer holds the tags


def test_a_source_of_another_width_is_an_error():
    """nn.LSTM reads a packed input of the wrong width without complaint: the tagger checks it (2 x 5, not 2 x 6)."""
    tagger = BiLSTMTagger([(2, 6)], labels=3, hidden=4)
    with pytest.raises(PLMError, match="the sources give 10 features per word, the tagger was built for 12"):
        tagger([torch.randn(1, 2, 3, 5)], torch.ones(1, 3, dtype=torch.long))
