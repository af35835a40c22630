"""Where a document's sentences begin: the boundaries BERT's pairs are cut at.

A simple splitter is enough: segments only mark where segment A of a pair may end and B
begin (BERT's "sentences" are any span of contiguous text), so an abbreviation cut as a
sentence end or a wrapped line cut mid-sentence does no harm. A document's lines are
segments, and each line is cut after every sentence end.
"""

from __future__ import annotations

import re

# A sentence ends at . ! or ? (perhaps followed by a closing quote or bracket) before a space.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"')\]])\s+")
# Where a segment starts, in one pass over the text: a line's first non-space, or the first non-space after a
# sentence end on the same line ([^\S\n]: a space other than a line break).
_SEGMENT_START = re.compile(r"^[^\S\n]*(?=\S)|[.!?][\"')\]]?[^\S\n]+(?=\S)", re.MULTILINE)


def split_segments(text: str) -> list[str]:
    """The segments of a document: its lines, each cut after every sentence end.

    Args:
        text: the document's text.

    Returns:
        The non-empty segments, in order.
    """
    return [piece for line in text.split("\n") for piece in _SENTENCE_END.split(line.strip()) if piece]


def segment_starts(text: str) -> list[int]:
    """The character offset in ``text`` of the first character of each segment of `split_segments`.

    Args:
        text: the document's text.

    Returns:
        The offsets, increasing; one per segment.
    """
    return [found.end() for found in _SEGMENT_START.finditer(text)]
