"""What each layer of a frozen biLM knows: ELMo's probes (Peters et al., 2018, section 5.3).

- **Part of speech** (the paper's Table 6): a linear classifier trained on one layer's vectors alone, for each
  layer, and on a learned scalar mix of them. The paper finds the first LSTM layer better than the second
  (97.3% against 96.8% on the PTB): syntax sits low in the stack.
- **Word sense** (Table 5): a test word takes the sense of its nearest training occurrence of the same word
  (cosine similarity of the layer's vectors), for each layer; a word never seen with a sense takes none and counts
  as wrong. The paper finds the second layer better (69.0 F1 against 67.4 on SemCor/Senseval): semantics sits
  high.

The sense-tagged format is one sentence a line, words separated by spaces, a tagged word written ``word|sense``
(``bank|bank%1:14:00`` say; the sense is any string without spaces or ``|``). SemCor and the Senseval/SemEval
test sets, in the unified format of Raganato et al. (2017, "Word Sense Disambiguation: A Unified Evaluation
Framework and Empirical Comparison"), convert to it line by line.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
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


def probe_wsd(model: Elmo, train: Sequence[LabelledSentence], test: Sequence[LabelledSentence]) -> dict[str, float]:
    """Nearest-neighbour sense accuracy of each layer over the test's tagged words.

    Args:
        model: the frozen biLM.
        train: sense-tagged sentences (the neighbours).
        test: sense-tagged sentences to score.

    Returns:
        Accuracy by layer: ``token``, ``lstm 1`` .. ``lstm L``.

    Raises:
        PLMError: a test file without tagged words.
    """
    def tagged(sentences: Sequence[LabelledSentence]) -> tuple[list[str], list[str], torch.Tensor]:
        positions = [i for i, label in enumerate(label for s in sentences for label in s.labels) if label]
        words = [word for s in sentences for word in s.words]
        labels = [label for s in sentences for label in s.labels]
        return ([words[i] for i in positions], [str(labels[i]) for i in positions],
                F.normalize(token_features(model, sentences)[positions], dim=-1))  # unit vectors: dot = cosine

    train_words, train_senses, train_vectors = tagged(train)
    test_words, test_senses, test_vectors = tagged(test)
    if not test_words:
        raise PLMError("the test sentences have no sense-tagged word")
    accuracies = {}
    for layer, name in enumerate(layer_names(train_vectors.shape[1])):
        right = 0
        for word, sense, vector in zip(test_words, test_senses, test_vectors[:, layer]):
            same = [i for i, other in enumerate(train_words) if other == word]
            if same:
                nearest = same[int((train_vectors[same, layer] @ vector).argmax())]
                right += train_senses[nearest] == sense
        accuracies[name] = right / len(test_words)
    return accuracies
