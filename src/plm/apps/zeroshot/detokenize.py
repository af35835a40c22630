"""Detokenisers for pre-tokenised benchmark text (GPT-2 §3.1).

WikiText and the Penn Treebank are distributed tokenised: punctuation and
contractions split off by spaces, hyphens and number separators written ``@-@``,
``@,@``, ``@.@``, headings as ``= = Title = =``. A byte-level model trained on
ordinary text is out of its distribution there, so GPT-2 scored these sets after
undoing the tokenisation. The paper's detokenisers were not published; these
undo each spacing rule the tokenisers apply, one regular expression per rule,
and leave the words themselves (``<unk>``, PTB's ``N``) as they are. Per-word
perplexities divide by the words of the text as distributed (before detokenising),
so that they compare with the published numbers.
"""

from __future__ import annotations

import re
from typing import Callable

_CONTRACTIONS = [(re.compile(r" (n't|'t|'s|'re|'ve|'ll|'d|'m)\b", re.IGNORECASE), r"\1")]

_WIKITEXT: list[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]] = [
    (re.compile(r" @([-,.])@ "), r"\1"),  # 1 @,@ 000 -> 1,000; well @-@ known -> well-known
    (re.compile(r" ([.,;:!?%)\]}])"), r"\1"),  # no space before closing punctuation
    (re.compile(r"([(\[{$]) "), r"\1"),  # nor after opening punctuation
    (re.compile(r"(?<=s) '(?= )"), "'"),  # the players ' cup -> the players' cup
    *_CONTRACTIONS,
    (
        re.compile(r"(?m)^(=(?: =)*) (.*?) (=(?: =)*)$"),  # = = Heading = = -> == Heading ==
        lambda m: f"{m[1].replace(' ', '')} {m[2]} {m[3].replace(' ', '')}",
    ),
]
_QUOTED = re.compile(r'" ([^"\n]*?) "')  # a quotation opens and closes on one line
_LINE_EDGES = re.compile(r"(?m)^ +| +$")


def wikitext(text: str) -> str:
    """WikiText-2/103 as ordinary text.

    ``He said " hi " , 1 @,@ 000 times .`` becomes ``He said "hi", 1,000 times.``; headings
    ``= = Title = =`` become ``== Title ==``.

    Args:
        text: the tokenised text.

    Returns:
        The detokenised text.
    """
    text = _LINE_EDGES.sub("", text)
    for pattern, replacement in _WIKITEXT:
        text = pattern.sub(replacement, text)
    return _QUOTED.sub(r'"\1"', text)


def ptb(text: str) -> str:
    """Penn Treebank (Mikolov's LM version) as ordinary text: contractions joined, line edges trimmed.

    Args:
        text: the tokenised text.

    Returns:
        The detokenised text.
    """
    text = _LINE_EDGES.sub("", text)
    for pattern, replacement in _CONTRACTIONS:
        text = pattern.sub(replacement, text)
    return text


DETOKENIZERS: dict[str, Callable[[str], str]] = {"none": lambda text: text, "wikitext": wikitext, "ptb": ptb}
