"""The dates task's spoken forms, against spellings written out by hand (not the code's own output)."""

from __future__ import annotations

import pytest

from plm.data.dates import ordinal_suffix, year_words


@pytest.mark.parametrize(("n", "written"), [
    (1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (10, "10th"), (11, "11th"), (12, "12th"), (13, "13th"),
    (14, "14th"), (21, "21st"), (22, "22nd"), (23, "23rd"), (30, "30th"), (31, "31st"),
])
def test_ordinal_suffixes_are_english_ones_with_eleventh_to_thirteenth_in_th(n: int, written: str) -> None:
    """Catches the teens' exception cut short (13 -> "13rd")."""
    assert ordinal_suffix(n) == written


@pytest.mark.parametrize(("year", "spoken"), [
    (1900, "nineteen hundred"), (1901, "nineteen oh one"), (1909, "nineteen oh nine"), (1910, "nineteen ten"),
    (1984, "nineteen eighty-four"), (2000, "two thousand"), (2005, "two thousand and five"),
    (2009, "two thousand and nine"), (2010, "twenty ten"), (2024, "twenty twenty-four"),
])
def test_years_are_spoken_as_people_say_them(year: int, spoken: str) -> None:
    """Catches the "oh" of 1901..1909 lost for a single-digit rest (1909 -> "nineteen nine")."""
    assert year_words(year) == spoken
