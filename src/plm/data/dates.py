"""The default seq2seq task: dates written in many styles -> one canonical form (ISO 8601).

"Friday, the fifteenth of March, twenty twenty-four" -> "2024-03-15". The task needs
alignment: the day comes first in most sources and last in the target, the year is
spelled in words or digits, the weekday must be read past and ignored. Pairs are
generated from a seed (no download); the held-out dates are a fixed set of calendar
days that training never sees, in any style.
"""

from __future__ import annotations

import datetime
import random

from plm.data.sentence_pairs import SentencePair

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
ONES = ("", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
        "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
ORDINAL_ONES = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
                "nine": "ninth", "twelve": "twelfth"}
FIRST_DAY, LAST_DAY = datetime.date(1900, 1, 1), datetime.date(2099, 12, 31)
HELD_OUT_EVERY = 10  # every tenth calendar day is held out


def number_words(n: int) -> str:
    """Write 0 < n < 100 in words: "twenty-four".

    Args:
        n: the number.

    Returns:
        Its words.
    """
    if n < 20:
        return ONES[n]
    tens, ones = divmod(n, 10)
    return TENS[tens] + (f"-{ONES[ones]}" if ones else "")


def ordinal_words(n: int) -> str:
    """Write 1 <= n <= 31 as an ordinal: "twenty-first", "fifteenth".

    Args:
        n: the number.

    Returns:
        Its ordinal in words.
    """
    words = number_words(n)
    head, _, last = words.rpartition("-")
    if last in ORDINAL_ONES:
        last = ORDINAL_ONES[last]
    elif last.endswith("y"):
        last = last[:-1] + "ieth"
    else:
        last += "th"
    return f"{head}-{last}" if head else last


def ordinal_suffix(n: int) -> str:
    """Write n with its ordinal suffix: 15 -> "15th", 22 -> "22nd".

    Args:
        n: the number.

    Returns:
        The digits and the suffix.
    """
    suffix = "th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def year_words(year: int) -> str:
    """A year as spoken: 1984 -> "nineteen eighty-four", 2005 -> "two thousand and five", 2024 -> "twenty twenty-four".

    Args:
        year: a year of the task's range, 1900 to 2099.

    Returns:
        Its words.
    """
    century, rest = divmod(year, 100)
    if century == 20 and rest < 10:
        return "two thousand" + (f" and {ONES[rest]}" if rest else "")
    if rest == 0:
        return f"{number_words(century)} hundred"
    return f"{number_words(century)} {'oh ' + ONES[rest] if rest < 10 else number_words(rest)}"


def styles(date: datetime.date) -> list[str]:
    """The same date in every style the task writes.

    Args:
        date: the date.

    Returns:
        Its ten spellings, from "15 March 2024" to "march fifteenth twenty twenty-four".
    """
    day, month, year = date.day, MONTHS[date.month - 1], date.year
    weekday = WEEKDAYS[date.weekday()]
    return [
        f"{day} {month} {year}",
        f"{month} {day}, {year}",
        f"{weekday}, {day} {month} {year}",
        f"{ordinal_suffix(day)} of {month} {year}",
        f"{month[:3]} {day} {year}",
        f"{day:02d}/{date.month:02d}/{year}",
        f"{day}.{date.month}.{year}",
        f"the {ordinal_words(day)} of {month}, {year_words(year)}",
        f"{weekday}, the {ordinal_words(day)} of {month} {year_words(year)}",
        f"{month.lower()} {ordinal_words(day)} {year_words(year)}",
    ]


def canonical(date: datetime.date) -> str:
    """The target form of a date: ISO 8601, "2024-03-15".

    Args:
        date: the date.

    Returns:
        Its ISO form.
    """
    return date.isoformat()


def is_held_out(date: datetime.date) -> bool:
    """Whether ``date`` is one of the held-out days (every tenth calendar day), which training never sees.

    Args:
        date: the date.

    Returns:
        True for a held-out day.
    """
    return date.toordinal() % HELD_OUT_EVERY == 0


def date_pairs(count: int, seed: int, held_out: bool = False) -> list[SentencePair]:
    """``count`` (date in a random style, ISO date) pairs; ``held_out`` draws only from the held-out days.

    The dates are drawn from 1900 to 2099, from the training days unless ``held_out``.

    Args:
        count: the number of pairs.
        seed: the seed of the draws: the same seed gives the same pairs.
        held_out: draw from the held-out days instead of the training days.

    Returns:
        The pairs (a date may repeat).
    """
    rng = random.Random(seed)
    first, last = FIRST_DAY.toordinal(), LAST_DAY.toordinal()
    pairs: list[SentencePair] = []
    while len(pairs) < count:
        date = datetime.date.fromordinal(rng.randint(first, last))
        if is_held_out(date) == held_out:
            pairs.append(SentencePair(rng.choice(styles(date)), canonical(date)))
    return pairs
