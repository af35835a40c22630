"""ELMo's probes: a linear classifier per layer for part of speech, nearest neighbours per layer for word sense."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import plm
from plm.apps import elmo_probes
from plm.apps.elmo_probes import LabelledSentence, probe_pos, probe_wsd, read_conll_column, read_sense_tagged
from tests.conftest import SHARED_DATA

CONLL = SHARED_DATA / "conll2003" / "eng.train"


@pytest.mark.skipif(not CONLL.is_file(), reason=f"{CONLL} is not in the shared data folder")
def test_the_pos_column_of_conll_2003_reads_as_words_and_tags() -> None:
    first, second = read_conll_column(CONLL, column=2, limit=2)
    assert first.words[:3] == ("EU", "rejects", "German") and first.labels[:3] == ("NNP", "VBZ", "JJ")
    assert second.words == ("Peter", "Blackburn") and second.labels == ("NNP", "NNP")


def test_the_sense_tagged_format(tmp_path: Path) -> None:
    path = tmp_path / "senses.txt"
    path.write_text("he sat by the bank|river of the river\n\nthe bank|money lent money\n")
    assert read_sense_tagged(path) == [
        LabelledSentence(("he", "sat", "by", "the", "bank", "of", "the", "river"),
                         (None, None, None, None, "river", None, None, None)),
        LabelledSentence(("the", "bank", "lent", "money"), (None, "money", None, None)),
    ]
    path.write_text("no tags here\n")
    with pytest.raises(plm.PLMError, match="no word is sense-tagged"):
        read_sense_tagged(path)


def test_a_linear_probe_finds_the_layer_that_holds_the_tags(monkeypatch: pytest.MonkeyPatch) -> None:
    """Features built so that the first LSTM layer is the tag (plus noise) and the others are noise."""
    tags = ["DT", "NN", "VB", "JJ"]
    generator = torch.Generator().manual_seed(0)
    sentences = [LabelledSentence(tuple("w" * 6), tuple(tags[i] for i in torch.randint(4, (6,), generator=generator)))
                 for _ in range(80)]

    def features(model, chosen):
        labels = torch.tensor([tags.index(label) for s in chosen for label in s.labels])
        noise = torch.randn(len(labels), 3, 8, generator=generator)
        noise[:, 1, :4] += 4 * torch.nn.functional.one_hot(labels, 4)
        return noise

    monkeypatch.setattr(elmo_probes, "token_features", features)
    accuracy = probe_pos(None, sentences[:60], sentences[60:], epochs=30)  # type: ignore[arg-type]
    assert accuracy["lstm 1"] > 0.9 and accuracy["mix"] > 0.8  # the mix learns to weigh that layer up
    assert accuracy["token"] < 0.5 and accuracy["lstm 2"] < 0.5  # chance is about 1/4


def test_word_sense_takes_the_nearest_training_occurrence_at_each_layer(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = plm.from_preset("elmo-micro").eval()
    train = [LabelledSentence(("the", "bank", "of", "the", "river"), (None, "shore", None, None, None)),
             LabelledSentence(("a", "bank", "loan", "paid"), (None, "money", None, None)),
             LabelledSentence(("they", "row", "to", "the", "bank"), (None, None, None, None, "shore"))]
    test = [LabelledSentence(("my", "bank", "account"), (None, "money", None)),
            LabelledSentence(("on", "the", "bank", "fishing"), (None, None, "shore", None)),
            LabelledSentence(("a", "plant", "grows"), (None, "flora", None))]  # never seen: always wrong
    accuracy = probe_wsd(model, train, test)
    expected = {}
    for layer, name in enumerate(["token", "lstm 1", "lstm 2"]):  # cosine similarity, one occurrence at a time
        right = 0
        for sentence in test:
            vectors = model.embed([list(sentence.words)])[0, layer]
            for position, sense in enumerate(sentence.labels):
                candidates = [(torch.cosine_similarity(vectors[position], model.embed([list(t.words)])[0, layer, i],
                                                       dim=0).item(), t.labels[i])
                              for t in train for i, word in enumerate(t.words)
                              if word == sentence.words[position] and t.labels[i]]
                right += bool(sense and candidates and max(candidates)[1] == sense)
        expected[name] = right / 3
    assert accuracy == pytest.approx(expected)



def test_word_sense_neighbours_are_nearest_by_cosine_not_by_dot_product(monkeypatch: pytest.MonkeyPatch) -> None:
    """Vectors made so that a long training vector has the larger dot product with the test word at both layers,
    but the larger cosine only at the token layer; the oracle ranks by cosine, computed here by hand."""
    far = LabelledSentence(("bank",), ("river",))
    near = LabelledSentence(("bank",), ("money",))
    test = LabelledSentence(("bank",), ("money",))
    vectors = {  # (words, layers, dim): the token layer, then the LSTM layer
        id(far): torch.tensor([[[10.0, 0.0], [10.0, 0.0]]]),
        id(near): torch.tensor([[[0.6, 0.8], [0.6, 0.8]]]),
        id(test): torch.tensor([[[1.0, 0.1], [0.7, 0.7]]]),
    }
    monkeypatch.setattr(elmo_probes, "token_features", lambda model, sentences: torch.cat([vectors[id(s)]
                                                                                          for s in sentences]))

    def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a * b).sum()) / float((a * a).sum().sqrt() * (b * b).sum().sqrt())

    expected = {}
    for layer, name in enumerate(["token", "lstm 1"]):
        query = vectors[id(test)][0, layer]
        nearest = max((far, near), key=lambda s: cosine(vectors[id(s)][0, layer], query))
        expected[name] = float(nearest.labels[0] == test.labels[0])
        dot = max((far, near), key=lambda s: float(vectors[id(s)][0, layer] @ query))
        assert dot is far  # a dot product would take the long vector's sense at both layers
    assert expected == {"token": 0.0, "lstm 1": 1.0}
    assert probe_wsd(None, [far, near], [test]) == expected  # type: ignore[arg-type]
