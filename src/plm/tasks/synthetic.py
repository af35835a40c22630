"""Built-in toy tasks, one per fine-tuning task, for ``plm finetune`` without data files.

Each is decided by a few words of the input, so that a correct implementation
learns it in seconds on the CPU, even from a freshly initialised model, and a
broken one (labels on the wrong pieces, spans read from the wrong window, choices
scored against the wrong label, a loss that ignores the head) does not. qa and
choice need the question or context with the candidate, not the candidate alone:
every context lists one word of each kind, and only the question says which.
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
    """Words that decide nothing.

    Args:
        rng: the random numbers.
        count: how many.

    Returns:
        ``count`` words drawn from `FILLER`.
    """
    return [rng.choice(FILLER) for _ in range(count)]


def classify(rng: random.Random) -> TextExample:
    """Sentiment by one word among fillers.

    Args:
        rng: the random numbers.

    Returns:
        The example.
    """
    good = rng.random() < 0.5
    words = filler(rng, 5)
    words.insert(rng.randrange(6), rng.choice(GOOD if good else BAD))
    return TextExample(" ".join(words), None, "good" if good else "bad")


def pair(rng: random.Random) -> TextExample:
    """Which of the two sentences holds the name: read from the segments.

    Args:
        rng: the random numbers.

    Returns:
        The example.
    """
    a, b = filler(rng, 4), filler(rng, 3)
    in_first = rng.random() < 0.5
    words = a if in_first else b
    words.insert(rng.randrange(len(words) + 1), rng.choice(NAMES))
    return TextExample(" ".join(a), " ".join(b), "first" if in_first else "second")


def regress(rng: random.Random) -> TextExample:
    """The number of positive words, 0 to 3.

    Args:
        rng: the random numbers.

    Returns:
        The example.
    """
    count = rng.randrange(4)
    words = filler(rng, 4) + [rng.choice(GOOD) for _ in range(count)]
    rng.shuffle(words)
    return TextExample(" ".join(words), None, float(count))


def tag(rng: random.Random) -> TaggedSentence:
    """People (B-PER) and places, some of two words (B-LOC I-LOC), among fillers.

    Args:
        rng: the random numbers.

    Returns:
        The example.
    """
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


KINDS = {  # the kind of word a question or a context asks for, and the words of each kind
    "pet": ("horse", "fish", "bird", "goat"),  # none of them a filler
    "city": tuple(PLACES),
    "colour": ("red", "green", "blue", "yellow"),
    "number": ("three", "seven", "ten", "twelve"),
}


def word_of_kind(rng: random.Random, kind: str) -> str:
    """A word of ``kind``; a third of the cities have two words ("New Lima"), so the span's end must be found too.

    Args:
        rng: the random numbers.
        kind: a key of `KINDS`.

    Returns:
        The word (or two).
    """
    word = rng.choice(KINDS[kind])
    return f"New {word.title()}" if kind == "city" and rng.random() < 1 / 3 else word


def qa(rng: random.Random, index: int = 0) -> QAExample:
    """Which pet (city, colour, number) did X see? Read from what X saw: one of each kind, in any order.

    Args:
        rng: the random numbers.
        index: the question's number, for its id (``q<index>``).

    Returns:
        The example.
    """
    name = rng.choice(NAMES)
    kinds = rng.sample(list(KINDS), len(KINDS))  # the order the context lists them in
    asked = rng.choice(kinds)
    context = f"{name.title()} saw"
    for kind in kinds:
        seen = word_of_kind(rng, kind)
        context = " ".join([context, *filler(rng, rng.randrange(2))]) + " "
        if kind == asked:
            answer = Answer(seen, len(context))
        context += seen
    return QAExample(f"q{index}", f"which {asked} did {name} see ?", context + " .", (answer,))


def choice(rng: random.Random) -> ChoiceExample:
    """Which ending is of the kind the context names: a pet, a city, a colour or a number, one ending of each.

    Args:
        rng: the random numbers.

    Returns:
        The example.
    """
    kinds = rng.sample(list(KINDS), len(KINDS))
    label = rng.randrange(len(kinds))
    name = rng.choice(NAMES)
    endings = tuple(rng.choice(KINDS[kind]) for kind in kinds)
    return ChoiceExample(f"{name} names a {kinds[label]} .", f"{name} says", endings, label)


GENERATORS = {"classify": classify, "pair": pair, "regress": regress, "tag": tag, "choice": choice}


def synthetic_task(task: str, count: int, seed: int) -> list[Any]:
    """``count`` examples of the toy ``task`` (one of plm.tasks.task_objective.TASKS).

    Args:
        task: the task.
        count: how many examples.
        seed: the seed of the random numbers: the same seed, the same examples.

    Returns:
        The examples.
    """
    rng = random.Random(seed)
    if task == "qa":
        return [qa(rng, i) for i in range(count)]
    return [GENERATORS[task](rng) for _ in range(count)]
