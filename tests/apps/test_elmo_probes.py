"""ELMo's probes: a linear classifier per layer for part of speech, the nearest sense mean per layer for word sense."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

import plm
from plm.apps import elmo_probes
from plm.apps.elmo_probes import (
    LabelledSentence,
    probe_pos,
    probe_wsd,
    read_conll_column,
    read_first_senses,
    read_sense_tagged,
    sense_lemma,
)
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


# A hand-made sense-tagged corpus: two lemmas of two and three senses, words whose context decides the sense, and two
# lemmas unseen in training. Each tagged word has made-up vectors at the token layer and the LSTM layer, so that the
# sense means and the nearest senses can be worked out here with numpy, apart from the library.
TRAIN = [  # (line, lemma, (token layer, LSTM layer))
    ("he fished from the bank|bank%1:17:01:: at dawn", "bank", ([1.0, 0.1], [1.0, 0.0])),
    ("the boat drifted to the banks|bank%1:17:01::", "bank", ([0.9, 0.3], [1.0, 0.2])),
    ("she paid the bank|bank%1:14:00:: back", "bank", ([1.0, 0.1], [0.0, 1.0])),
    ("the bank|bank%1:14:00:: by the river lent him a boat", "bank", ([1.0, 0.1], [0.9, 0.5])),  # a money sense near
    ("they saw a play|drama on Broadway", "play", ([0.1, 1.0], [1.0, 1.0])),
    ("the children play|game outside", "play", ([0.0, 1.0], [1.0, -1.0])),
    ("she will Play|music the piano", "play", ([-0.1, 1.0], [-1.0, 0.0])),
]
TEST = [
    ("we walked along the bank|bank%1:17:01:: of the stream", "bank", ([1.0, 0.1], [0.9, 0.45])),
    ("the bank|bank%1:14:00:: approved the loan", "bank", ([1.0, 0.1], [0.1, 1.0])),
    ("the actors rehearse the play|drama", "play", ([0.1, 1.0], [0.8, 1.0])),
    ("the band will play|music tonight", "play", ([0.0, 1.0], [0.3, -1.0])),
    ("a plant|plant%1:03:00:: grows by the window", "plant", ([0.5, 0.5], [0.2, 0.7])),  # unseen: its first sense
    ("the power plant|plant%1:06:01:: closed", "plant", ([0.5, 0.5], [0.6, 0.1])),  # the first sense, which is wrong
    ("he tuned the bass|bass%1:06:02:: guitar", "bass", ([0.3, 0.3], [0.4, 0.4])),  # unseen, no first sense
]
FIRST_SENSES = "plant plant%1:03:00::\nBank bank%1:14:00::\n"  # bank is seen in training: its first sense is unused


def words_of(line: str) -> tuple[str, ...]:
    return tuple(token.split("|")[0] for token in line.split())


def sense_of(line: str) -> str:
    return next(token.split("|")[1] for token in line.split() if "|" in token)


@pytest.fixture
def hand_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    """The corpus's files, and the biLM's features stubbed with its vectors (untagged words zero)."""
    vectors = {words_of(line): torch.tensor(layers) for line, _, layers in TRAIN + TEST}

    def features(model, sentences):
        return torch.stack([vectors[s.words] if label else torch.zeros(2, 2) for s in sentences for label in s.labels])

    monkeypatch.setattr(elmo_probes, "token_features", features)
    train, test, first = tmp_path / "train.txt", tmp_path / "test.txt", tmp_path / "first.txt"
    train.write_text("".join(line + "\n" for line, _, _ in TRAIN))
    test.write_text("".join(line + "\n" for line, _, _ in TEST))
    first.write_text(FIRST_SENSES)
    return train, test, first


def oracle(train: list[tuple[str, str, np.ndarray]], test: list[tuple[str, str, np.ndarray]],
           first_senses: dict[str, str]) -> list[str | None]:
    """The paper's 1-NN with numpy: (lemma, sense, vector) of each training and test word; a sense's mean is the
    average of its training vectors, the nearest by cosine among the lemma's wins; unseen lemmas back off."""
    means: dict[tuple[str, str], np.ndarray] = {}
    for lemma, sense in dict.fromkeys((lemma, sense) for lemma, sense, _ in train):
        means[lemma, sense] = np.mean([v for le, s, v in train if (le, s) == (lemma, sense)], axis=0)
    predicted = []
    for lemma, _, vector in test:
        candidates = [(sense, mean) for (le, sense), mean in means.items() if le == lemma]
        if not candidates:
            predicted.append(first_senses.get(lemma))
            continue
        cosines = [mean @ vector / (np.linalg.norm(mean) * np.linalg.norm(vector)) for _, mean in candidates]
        predicted.append(candidates[int(np.argmax(cosines))][0])
    return predicted


def scores(predicted: list[str | None], gold: list[str]) -> tuple[float, float, float]:
    """Precision over the answered, recall over all, F1 (Raganato et al.'s scorer)."""
    correct = sum(p == g for p, g in zip(predicted, gold))
    precision, recall = correct / sum(p is not None for p in predicted), correct / len(gold)
    return precision, recall, 2 * precision * recall / (precision + recall)


def test_word_sense_is_the_nearest_sense_mean_with_the_first_sense_for_unseen_lemmas(hand_made) -> None:
    train, test, first = hand_made
    first_senses = {"plant": "plant%1:03:00::", "bank": "bank%1:14:00::"}
    gold = [sense_of(line) for line, _, _ in TEST]
    result = probe_wsd(None, read_sense_tagged(train), read_sense_tagged(test),  # type: ignore[arg-type]
                       read_first_senses(first))
    for layer, name in enumerate(["token", "lstm 1"]):
        predicted = oracle([(lemma, sense_of(line), np.array(v[layer])) for line, lemma, v in TRAIN],
                           [(lemma, sense_of(line), np.array(v[layer])) for line, lemma, v in TEST], first_senses)
        if name == "lstm 1":  # worked out by hand: four right, two wrong, one unanswered
            assert predicted == ["bank%1:17:01::", "bank%1:14:00::", "drama", "game", "plant%1:03:00::",
                                 "plant%1:03:00::", None]
        precision, recall, f1 = scores(predicted, gold)
        got = result[name]
        assert (got.instances, got.answered, got.first_sense) == (7, 6, 2)
        assert (got.precision, got.recall, got.f1) == pytest.approx((precision, recall, f1))
    assert (result["lstm 1"].precision, result["lstm 1"].recall) == pytest.approx((4 / 6, 4 / 7))
    assert result["lstm 1"].f1 == pytest.approx(8 / 13)  # 2 (4/6)(4/7) / (4/6 + 4/7), below the accuracy of answers


def test_a_sense_mean_is_not_the_nearest_occurrence(hand_made) -> None:
    """The first test word's single nearest training word is a money 'bank', its nearest sense mean the river's."""
    train, test, _ = hand_made
    query = np.array(TEST[0][2][1])
    occurrences = [(sense_of(line), np.array(v[1])) for line, lemma, v in TRAIN if lemma == "bank"]
    nearest = max(occurrences, key=lambda o: o[1] @ query / np.linalg.norm(o[1]) / np.linalg.norm(query))
    assert nearest[0] == "bank%1:14:00::" != sense_of(TEST[0][0])
    one = read_sense_tagged(test)[:1]
    assert probe_wsd(None, read_sense_tagged(train), one)["lstm 1"].correct == 1  # type: ignore[arg-type]


def test_with_every_instance_answered_precision_recall_and_f1_are_one_number(hand_made) -> None:
    train, test, _ = hand_made
    first_senses = {"plant": "plant%1:03:00::", "bass": "bass%1:06:02::"}
    result = probe_wsd(None, read_sense_tagged(train), read_sense_tagged(test), first_senses)  # type: ignore[arg-type]
    got = result["lstm 1"]
    assert got.answered == got.instances == 7
    assert got.precision == got.recall == got.f1 == pytest.approx(5 / 7)
    nothing = probe_wsd(None, read_sense_tagged(train), read_sense_tagged(test))["lstm 1"]  # type: ignore[arg-type]
    assert (nothing.answered, nothing.first_sense, nothing.correct) == (4, 0, 3)  # unseen lemmas: unanswered


def test_the_lemma_is_the_sense_key_s_or_the_word_and_first_senses_read_by_lemma(tmp_path: Path) -> None:
    assert sense_lemma("banks", "bank%1:17:01::") == "bank" and sense_lemma("Play", "music") == "play"
    path = tmp_path / "first.txt"
    path.write_text(FIRST_SENSES + "\n")
    assert read_first_senses(path) == {"plant": "plant%1:03:00::", "bank": "bank%1:14:00::"}
    path.write_text("plant\n")
    with pytest.raises(plm.PLMError, match=r"first.txt:1: write a lemma and its first sense"):
        read_first_senses(path)
    path.write_text("plant a\nPlant b\n")
    with pytest.raises(plm.PLMError, match=r"first.txt:2: the lemma 'plant' is given twice"):
        read_first_senses(path)


def test_word_sense_on_a_real_bilm_is_the_numpy_oracle_over_its_vectors() -> None:
    torch.manual_seed(0)
    model = plm.from_preset("elmo-micro").eval()
    train = [LabelledSentence(("the", "bank", "of", "the", "river"), (None, "shore", None, None, None)),
             LabelledSentence(("a", "Bank", "loan", "paid"), (None, "money", None, None)),
             LabelledSentence(("they", "row", "to", "the", "bank"), (None, None, None, None, "shore"))]
    test = [LabelledSentence(("my", "bank", "account"), (None, "money", None)),
            LabelledSentence(("on", "the", "bank", "fishing"), (None, None, "shore", None)),
            LabelledSentence(("a", "plant", "grows"), (None, "flora", None))]  # unseen, no first sense: unanswered
    result = probe_wsd(model, train, test)

    def tagged(sentences, layer):
        return [(s.words[i].lower(), label, model.embed([list(s.words)])[0, layer, i].numpy())
                for s in sentences for i, label in enumerate(s.labels) if label]

    for layer, name in enumerate(["token", "lstm 1", "lstm 2"]):
        predicted = oracle(tagged(train, layer), tagged(test, layer), {})
        assert predicted[2] is None
        correct = sum(p == g for p, g in zip(predicted, ["money", "shore", "flora"]))
        assert (result[name].correct, result[name].answered, result[name].instances) == (correct, 2, 3)


def test_word_sense_means_are_nearest_by_cosine_not_by_dot_product(monkeypatch: pytest.MonkeyPatch) -> None:
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
    assert {name: s.f1 for name, s in probe_wsd(None, [far, near], [test]).items()} == expected  # type: ignore[arg-type]


def test_the_mix_probe_is_gamma_times_the_softmax_weighted_layers_and_learns_its_weights() -> None:
    """ELMo eq. 1: ELMo_k = gamma * sum_j softmax(s)_j h_k,j, the tag classifier on it, by hand; fitting moves s
    towards the one layer that holds the tags (a mix frozen at the plain average would not)."""
    probe = elmo_probes.MixProbe(3, 4, 2)
    with torch.no_grad():
        probe.mix.scalars.copy_(torch.tensor([0.5, -1.0, 2.0]))
        probe.mix.gamma.fill_(1.7)
    features = torch.randn(5, 3, 4, generator=torch.Generator().manual_seed(0))
    shares = [math.exp(s) / sum(math.exp(t) for t in (0.5, -1.0, 2.0)) for s in (0.5, -1.0, 2.0)]
    mixed = 1.7 * sum(share * features[:, j] for j, share in enumerate(shares))
    torch.testing.assert_close(probe(features), probe.linear(mixed))

    generator = torch.Generator().manual_seed(1)
    labels = torch.randint(2, (200,), generator=generator)
    features = torch.randn(200, 3, 4, generator=generator)
    features[:, 2, 0] += 3 * (2 * labels - 1)  # only layer 2 tells the tags apart
    probe = elmo_probes.MixProbe(3, 4, 2)
    elmo_probes.fit(probe, features, labels, epochs=20, lr=0.1, batch_size=50, seed=0)
    weights = probe.mix.weights.tolist()  # 0.87 to 0.94 for layer 2 with seeds 0 to 9
    assert weights[2] > 0.6
