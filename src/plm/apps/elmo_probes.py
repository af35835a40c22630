"""What each layer of a frozen biLM knows: ELMo's probes (Peters et al., 2018, section 5.3).

- **Part of speech** (the paper's Table 6): a linear classifier trained on one layer's vectors alone, for each
  layer, and on a learned scalar mix of them. The paper finds the first LSTM layer better than the second
  (97.3% against 96.8% on the PTB): syntax sits low in the stack.
- **Word sense** (Table 5), the paper's method: each sense of the training set is the average of the layer's
  vectors of its words; a test word takes the sense of its lemma whose average is nearest (1-nearest-neighbour,
  by cosine), for each layer; a lemma with no training word takes its first sense, which the paper reads from
  WordNet and plm from a file of first senses
  ([`read_first_senses`][plm.apps.elmo_probes.read_first_senses]), and stays unanswered without one. Scored as
  the all-words WSD evaluation scores: precision, recall and F1
  ([`SenseScores`][plm.apps.elmo_probes.SenseScores]). The paper finds the second layer better (69.0 F1
  against 67.4, trained on SemCor, scored on the Senseval/SemEval sets): semantics sits high.

The sense-tagged format is one sentence a line, words separated by spaces, a tagged word written ``word|sense``
(``bank|bank%1:14:00::`` say; the sense is any string without spaces or ``|``). A word's lemma picks its candidate
senses: the part of a WordNet sense key before ``%``, else the word, in lower case
([`sense_lemma`][plm.apps.elmo_probes.sense_lemma]). SemCor and the Senseval/SemEval test sets, in the unified
format of Raganato et al. (2017, "Word Sense Disambiguation: A Unified Evaluation Framework and Empirical
Comparison"), convert to it line by line (an instance with several gold keys keeps one).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from plm.data.corpus import read_text
from plm.errors import PLMError
from plm.models.elmo import Elmo
from plm.models.scalar_mix import ScalarMix


@dataclass(frozen=True)
class LabelledSentence:
    """Words and a label per word (a POS tag, or a sense; None where a word has no sense tag).

    Attributes:
        words: the words.
        labels: one per word.
    """

    words: tuple[str, ...]
    labels: tuple[str | None, ...]


def read_conll_column(path: str | os.PathLike[str], column: int, limit: int | None = None) -> list[LabelledSentence]:
    """Sentences of a CoNLL file (a word a line, blank lines between sentences) with column ``column``'s labels.

    Args:
        path: the file (CoNLL-2003's POS tags are column 2).
        column: the (1-based) column of the labels.
        limit: read at most this many sentences.

    Returns:
        The sentences, ``-DOCSTART-`` lines skipped.

    Raises:
        PLMError: a line without that column, no sentences, or a file [`read_text`][plm.data.corpus.read_text] refuses.
    """
    sentences: list[LabelledSentence] = []
    words: list[str] = []
    labels: list[str | None] = []
    for number, line in enumerate([*read_text(path).split("\n"), ""], start=1):
        fields = line.split()
        if fields and fields[0] != "-DOCSTART-":
            if len(fields) < column:
                raise PLMError(f"{path}:{number}: no column {column} (the line has {len(fields)})")
            words.append(fields[0])
            labels.append(fields[column - 1])
        elif words:
            sentences.append(LabelledSentence(tuple(words), tuple(labels)))
            words, labels = [], []
            if limit is not None and len(sentences) == limit:
                break
    if not sentences:
        raise PLMError(f"{path}: no sentences")
    return sentences


def read_sense_tagged(path: str | os.PathLike[str]) -> list[LabelledSentence]:
    """Sentences of the sense-tagged format (module doc): ``word|sense`` where a word is tagged.

    Args:
        path: the file.

    Returns:
        The sentences; untagged words have the label None.

    Raises:
        PLMError: a token with an empty word or sense, no tagged word in the file, or a file that cannot be read.
    """
    sentences = []
    for number, line in enumerate(read_text(path).split("\n"), start=1):
        if not line.strip():
            continue
        words, senses = [], []
        for token in line.split():
            word, _, sense = token.partition("|")
            if not word or (token.count("|") and not sense):
                raise PLMError(f"{path}:{number}: {token!r} is not a word or word|sense")
            words.append(word)
            senses.append(sense or None)
        sentences.append(LabelledSentence(tuple(words), tuple(senses)))
    if not any(label for sentence in sentences for label in sentence.labels):
        raise PLMError(f"{path}: no word is sense-tagged (write word|sense)")
    return sentences


@torch.no_grad()
def token_features(model: Elmo, sentences: Sequence[LabelledSentence], batch_size: int = 64) -> torch.Tensor:
    """Each word's vector at every layer of the frozen biLM, the words of all sentences in a row.

    Args:
        model: the biLM.
        sentences: the sentences.
        batch_size: sentences per forward pass.

    Returns:
        (words, L + 1, 2 * projection_dim) on the CPU, layer 0 the token layer.
    """
    parts = []
    for start in range(0, len(sentences), batch_size):
        batch = [list(sentence.words) for sentence in sentences[start : start + batch_size]]
        layers = model.embed(batch).cpu()  # (B, L + 1, words, 2 * dim), padding zero
        for row, words in enumerate(batch):
            parts.append(layers[row, :, : len(words)].transpose(0, 1))  # (words, L + 1, 2 * dim)
    return torch.cat(parts)


def layer_names(layers: int) -> list[str]:
    """The probes' names: ``token`` (layer 0), then ``lstm 1`` .. ``lstm L``.

    Args:
        layers: L + 1, the layers of the features.

    Returns:
        The names.
    """
    return ["token", *(f"lstm {j}" for j in range(1, layers))]


def probe_pos(model: Elmo, train: Sequence[LabelledSentence], test: Sequence[LabelledSentence], epochs: float = 20,
              lr: float = 1e-2, batch_size: int = 256, seed: int = 0) -> dict[str, float]:
    """Test accuracy of a linear classifier trained on each layer alone, and on a learned scalar mix (``mix``).

    Args:
        model: the frozen biLM.
        train: sentences with a tag per word.
        test: sentences to score.
        epochs: passes over the training words (a fraction: that share of the last pass's batches).
        lr: Adam's learning rate.
        batch_size: words per step.
        seed: the initialisation and the order of the words.

    Returns:
        Accuracy by probe: ``token``, ``lstm 1`` .. ``lstm L``, ``mix``.
    """
    tags = sorted({label for sentence in train for label in sentence.labels if label is not None})
    index = {tag: i for i, tag in enumerate(tags)}
    targets = torch.tensor([index[str(label)] for s in train for label in s.labels])  # every training tag is known
    gold = torch.tensor([index.get(str(label), -1) for s in test for label in s.labels])  # unseen: always wrong
    features, tests = token_features(model, train), token_features(model, test)
    layers, width = features.shape[1], features.shape[2]
    accuracies = {}
    for name, probe in [*((name, LayerProbe(j, width, len(tags))) for j, name in enumerate(layer_names(layers))),
                        ("mix", MixProbe(layers, width, len(tags)))]:
        fit(probe, features, targets, epochs, lr, batch_size, seed)
        with torch.no_grad():
            accuracies[name] = (probe(tests).argmax(-1) == gold).float().mean().item()
    return accuracies


class LayerProbe(nn.Module):
    """A linear classifier over one layer's vectors (words, L + 1, D) -> (words, tags)."""

    def __init__(self, layer: int, width: int, tags: int) -> None:
        super().__init__()
        self.layer = layer
        self.linear = nn.Linear(width, tags)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """The tag logits from the probe's layer."""
        return self.linear(features[:, self.layer])


class MixProbe(nn.Module):
    """A linear classifier over ELMo's scalar mix gamma * sum_j softmax(s)_j h_j of the layers."""

    def __init__(self, layers: int, width: int, tags: int) -> None:
        super().__init__()
        self.mix = ScalarMix(layers)
        self.linear = nn.Linear(width, tags)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """The tag logits from the mix; (words, L + 1, D) is read as one sequence of words."""
        return self.linear(self.mix(features.transpose(0, 1)[None])[0])  # (1, L + 1, words, D) -> (words, D)


def fit(probe: nn.Module, features: torch.Tensor, targets: torch.Tensor, epochs: float, lr: float, batch_size: int,
        seed: int) -> None:
    """Train ``probe`` with Adam on cross entropy, in shuffled mini-batches of words.

    Args:
        probe: the classifier.
        features: (words, L + 1, D).
        targets: (words,) tag indices.
        epochs: passes over the words (a fraction: that share of the last pass's batches).
        lr: the learning rate.
        batch_size: words per step.
        seed: initialisation and order.
    """
    generator = torch.Generator().manual_seed(seed)
    for module in probe.modules():  # the same start for every probe of a run, whatever was drawn before
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight, generator=generator)
            nn.init.zeros_(module.bias)
    optimizer = torch.optim.Adam(probe.parameters(), lr=lr)
    batches = math.ceil(len(targets) / batch_size)
    steps = math.ceil(epochs * batches)
    for epoch in range(math.ceil(epochs)):
        for rows in torch.randperm(len(targets), generator=generator).split(batch_size)[: steps - epoch * batches]:
            optimizer.zero_grad()
            F.cross_entropy(probe(features[rows]), targets[rows]).backward()
            optimizer.step()


@dataclass(frozen=True)
class SenseScores:
    """A word-sense probe's counts, and its precision, recall and F1.

    As the all-words WSD evaluation scores a system (Raganato et al., 2017): precision over the instances answered,
    recall over all of them, F1 their harmonic mean. When every instance is answered the three are equal (and equal
    to accuracy).

    Attributes:
        correct: the instances given their gold sense.
        answered: the instances given a sense at all.
        instances: the sense-tagged test words.
        first_sense: the instances whose lemma no training word has, answered with the lemma's first sense.
    """

    correct: int
    answered: int
    instances: int
    first_sense: int = 0

    @property
    def precision(self) -> float:
        """The share right among the instances answered (0 when none is)."""
        return self.correct / self.answered if self.answered else 0.0

    @property
    def recall(self) -> float:
        """The share right among all the instances."""
        return self.correct / self.instances if self.instances else 0.0

    @property
    def f1(self) -> float:
        """The harmonic mean 2 P R / (P + R) (0 when nothing is right)."""
        total = self.precision + self.recall
        return 2 * self.precision * self.recall / total if total else 0.0


def sense_lemma(word: str, sense: str) -> str:
    """The lemma that a tagged word's candidate senses are looked up by, in lower case.

    A WordNet sense key's part before ``%`` (``banks|bank%1:17:01::`` is ``bank``), else the word itself
    (``Bank|shore`` is ``bank``).

    Args:
        word: the word as written.
        sense: its sense.

    Returns:
        The lemma.
    """
    return (sense.partition("%")[0] if "%" in sense else word).lower()


def read_first_senses(path: str | os.PathLike[str]) -> dict[str, str]:
    """Each lemma's first sense, the answer for a test word whose lemma no training word has: ``lemma sense`` a line.

    WordNet's first sense of a lemma (its most frequent in SemCor) is what the paper backs off to; this file stands
    in for WordNet, so it can hold exactly that (``wn.synsets(lemma)[0]``'s sense key for the lemma, with NLTK).

    Args:
        path: the file.

    Returns:
        The first sense of each lemma, by the lemma in lower case.

    Raises:
        PLMError: a line that is not two fields, a lemma given twice, or a file that cannot be read.
    """
    first: dict[str, str] = {}
    for number, line in enumerate(read_text(path).split("\n"), start=1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 2:
            raise PLMError(f"{path}:{number}: write a lemma and its first sense, got {len(fields)} field(s)")
        lemma = fields[0].lower()
        if lemma in first:
            raise PLMError(f"{path}:{number}: the lemma {lemma!r} is given twice")
        first[lemma] = fields[1]
    return first


def tagged_words(model: Elmo, sentences: Sequence[LabelledSentence]) -> tuple[list[str], list[str], torch.Tensor]:
    """The sense-tagged words of ``sentences``: lemmas, senses, and vectors at every layer of the frozen biLM.

    The lemmas are [`sense_lemma`][plm.apps.elmo_probes.sense_lemma]'s.

    Args:
        model: the biLM.
        sentences: sense-tagged sentences.

    Returns:
        The lemmas, the senses and the vectors (tagged words, L + 1, D), in the order of the words.
    """
    words = [word for sentence in sentences for word in sentence.words]
    labels = [label for sentence in sentences for label in sentence.labels]
    positions = [i for i, label in enumerate(labels) if label]
    senses = [str(labels[i]) for i in positions]
    lemmas = [sense_lemma(words[i], sense) for i, sense in zip(positions, senses)]
    return lemmas, senses, token_features(model, sentences)[positions]


def sense_means(lemmas: Sequence[str], senses: Sequence[str],
                vectors: torch.Tensor) -> dict[str, tuple[list[str], torch.Tensor]]:
    """Each sense's mean vector over its training words, at every layer, grouped by lemma.

    Args:
        lemmas: each training word's lemma.
        senses: each one's sense.
        vectors: (words, L + 1, D).

    Returns:
        For each lemma, its senses in the order first seen and their means (senses, L + 1, D).
    """
    rows: dict[str, dict[str, list[int]]] = {}
    for row, (lemma, sense) in enumerate(zip(lemmas, senses)):
        rows.setdefault(lemma, {}).setdefault(sense, []).append(row)
    return {lemma: (list(by_sense), torch.stack([vectors[taken].mean(0) for taken in by_sense.values()]))
            for lemma, by_sense in rows.items()}


def nearest_senses(means: dict[str, tuple[list[str], torch.Tensor]], lemmas: Sequence[str], vectors: torch.Tensor,
                   layer: int, first_senses: Mapping[str, str]) -> list[str | None]:
    """Each test word's sense: the nearest mean, by cosine, of its lemma's training senses at ``layer``.

    A lemma without training words takes its first sense, or None (unanswered) where ``first_senses`` has none.

    Args:
        means: [`sense_means`][plm.apps.elmo_probes.sense_means] of the training words.
        lemmas: each test word's lemma.
        vectors: (words, L + 1, D), the test words'.
        layer: the layer compared.
        first_senses: the first sense of each lemma.

    Returns:
        A sense, or None, per test word.
    """
    predicted: list[str | None] = []
    for lemma, vector in zip(lemmas, vectors[:, layer]):
        if lemma in means:
            senses, centres = means[lemma]
            similarity = F.normalize(centres[:, layer], dim=-1) @ F.normalize(vector, dim=0)  # (senses,) cosines
            predicted.append(senses[int(similarity.argmax())])  # a tie: the sense seen first
        else:
            predicted.append(first_senses.get(lemma))
    return predicted


def probe_wsd(model: Elmo, train: Sequence[LabelledSentence], test: Sequence[LabelledSentence],
              first_senses: Mapping[str, str] | None = None) -> dict[str, SenseScores]:
    """ELMo's word-sense probe (section 5.3, Table 5): 1-nearest-neighbour to the sense means, at each layer.

    Each sense seen in ``train`` is the mean of its words' vectors; a test word takes the sense of its lemma whose
    mean is nearest by cosine; a lemma no training word has takes its first sense from ``first_senses`` (WordNet's
    first sense in the paper), and is left unanswered without one.

    Args:
        model: the frozen biLM.
        train: sense-tagged sentences whose senses are averaged.
        test: sense-tagged sentences to score.
        first_senses: the first sense of each lemma (see
            [`read_first_senses`][plm.apps.elmo_probes.read_first_senses]); None: no backoff.

    Returns:
        Precision, recall and F1 by layer: ``token``, ``lstm 1`` .. ``lstm L``.

    Raises:
        PLMError: training or test sentences without a tagged word.
    """
    first_senses = first_senses or {}
    if not any(label for sentence in train for label in sentence.labels):
        raise PLMError("the training sentences have no sense-tagged word")
    if not any(label for sentence in test for label in sentence.labels):
        raise PLMError("the test sentences have no sense-tagged word")
    means = sense_means(*tagged_words(model, train))
    lemmas, gold, vectors = tagged_words(model, test)
    backed_off = sum(lemma not in means and lemma in first_senses for lemma in lemmas)
    scores = {}
    for layer, name in enumerate(layer_names(vectors.shape[1])):
        predicted = nearest_senses(means, lemmas, vectors, layer, first_senses)
        scores[name] = SenseScores(sum(p == g for p, g in zip(predicted, gold)),
                                   sum(p is not None for p in predicted), len(gold), backed_off)
    return scores
