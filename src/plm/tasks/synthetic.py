"""Built-in toy tasks, one per fine-tuning task, for ``plm finetune`` without data files.

Each is decided by a few words of the input, so that a correct implementation
learns it in about a minute on the CPU, even from a freshly initialised model, and
a broken one (labels on the wrong pieces, spans read from the wrong window, a loss
that ignores the head) does not.
"""

from __future__ import annotations

import random
from typing import Any

from plm.tasks.readers import Answer, ChoiceExample, QAExample, TaggedSentence, TextExample

FILLER = "the a cat dog friend book reads sees likes finds today slowly".split()
GOOD, BAD = ["good", "great", "fine"], ["bad", "awful", "poor"]
NAMES = ["anna", "boris", "chen", "dora", "emil", "fatima"]
PLACES = ["paris", "lima", "oslo", "cairo", "delhi", "quito"]


def filler(rng: random.Random, count: int) -> list[str]:
    return [rng.choice(FILLER) for _ in range(count)]


def classify(rng: random.Random) -> TextExample:
    """Sentiment by one word among fillers."""
    good = rng.random() < 0.5
    words = filler(rng, 5)
    words.insert(rng.randrange(6), rng.choice(GOOD if good else BAD))
    return TextExample(" ".join(words), None, "good" if good else "bad")


def pair(rng: random.Random) -> TextExample:
    """Which of the two sentences holds the name: read from the segments."""
    a, b = filler(rng, 4), filler(rng, 3)
    in_first = rng.random() < 0.5
    words = a if in_first else b
    words.insert(rng.randrange(len(words) + 1), rng.choice(NAMES))
    return TextExample(" ".join(a), " ".join(b), "first" if in_first else "second")


def regress(rng: random.Random) -> TextExample:
    """The number of positive words, 0 to 3."""
    count = rng.randrange(4)
    words = filler(rng, 4) + [rng.choice(GOOD) for _ in range(count)]
    rng.shuffle(words)
    return TextExample(" ".join(words), None, float(count))


def tag(rng: random.Random) -> TaggedSentence:
    """People (B-PER) and places, some of two words (B-LOC I-LOC), among fillers."""
    words, tags = [], []
    for _ in range(rng.randrange(3, 7)):
        kind = rng.random()
        if kind < 0.2:
            words.append(rng.choice(NAMES).title())
            tags.append("B-PER")
        elif kind < 0.35:
            words += ["new", rng.choice(PLACES).title()]
            tags += ["B-LOC", "I-LOC"]
        elif kind < 0.5:
            words.append(rng.choice(PLACES).title())
            tags.append("B-LOC")
        else:
            words.append(rng.choice(FILLER))
            tags.append("O")
    return TaggedSentence(tuple(words), tuple(tags))


def qa(rng: random.Random, index: int = 0) -> QAExample:
    """Where does X live? Read from a paragraph that says where several people live."""
    people = rng.sample(NAMES, 4)
    homes = [rng.choice(PLACES) for _ in people]
    context = " ".join(
        f"{name.title()} lives in {home.title()} and {' '.join(filler(rng, 2))} ." for name, home in zip(people, homes)
    )
    asked = rng.randrange(len(people))
    sentence = context.index(people[asked].title())
    start = context.index(homes[asked].title(), sentence)
    return QAExample(f"q{index}", f"where does {people[asked]} live ?", context, (Answer(homes[asked].title(), start),))


def choice(rng: random.Random) -> ChoiceExample:
    """Which ending repeats where the context says the person lives."""
    name, home = rng.choice(NAMES), rng.choice(PLACES)
    endings = rng.sample([p for p in PLACES if p != home], 3)
    label = rng.randrange(4)
    endings.insert(label, home)
    return ChoiceExample(f"{name} lives in {home} .", f"{name} is from", tuple(endings), label)


GENERATORS = {"classify": classify, "pair": pair, "regress": regress, "tag": tag, "choice": choice}


def synthetic_task(task: str, count: int, seed: int) -> list[Any]:
    """``count`` examples of the toy ``task`` (one of plm.tasks.objectives.TASKS)."""
    rng = random.Random(seed)
    if task == "qa":
        return [qa(rng, i) for i in range(count)]
    return [GENERATORS[task](rng) for _ in range(count)]
