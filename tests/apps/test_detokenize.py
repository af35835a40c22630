"""The WikiText and PTB detokenisers give back the text as it was written (GPT-2 §3.1)."""

from __future__ import annotations

import pytest

from plm.apps.zeroshot.detokenize import ptb, wikitext
from tests.conftest import SHARED_DATA

WIKITEXT_LINES = [  # (as WikiText distributes it, as it was written)
    (" = Robert Boulter = \n", "= Robert Boulter =\n"),
    (" = = = 2000 – 2005 = = = \n", "=== 2000 – 2005 ===\n"),
    (" He had a guest @-@ starring role in 2000 . \n", "He had a guest-starring role in 2000.\n"),
    (" It cost $ 1 @,@ 500 @.@ 50 ( about £ 900 ) ; sales rose 3 % . \n",
     "It cost $1,500.50 (about £ 900); sales rose 3%.\n"),
    (' A review called him " horribly menacing " , and he didn \'t mind . \n',
     'A review called him "horribly menacing", and he didn\'t mind.\n'),
    (" Teddy 's Story is n't the players ' favourite : they 've said so ! \n",
     "Teddy's Story isn't the players' favourite: they've said so!\n"),
    (" \n", "\n"),
]


@pytest.mark.parametrize(("tokenised", "written"), WIKITEXT_LINES)
def test_wikitext_lines_come_back_as_written(tokenised: str, written: str) -> None:
    assert wikitext(tokenised) == written


def test_wikitext_keeps_every_word_and_line_of_a_passage() -> None:
    passage = "".join(tokenised for tokenised, _ in WIKITEXT_LINES)
    assert wikitext(passage) == "".join(written for _, written in WIKITEXT_LINES)


def test_ptb_joins_contractions_and_leaves_its_placeholders() -> None:
    assert ptb(" the company 's shares did n't fall below $ N a share \n") == (
        "the company's shares didn't fall below $ N a share\n"
    )


def test_wikitext_2_test_set_loses_no_alphanumeric_character() -> None:
    path = SHARED_DATA / "wikitext-2" / "test.txt"
    if not path.is_file():
        pytest.skip("../shared/data/wikitext-2 is not here")
    text = path.read_text(encoding="utf-8")
    detokenized = wikitext(text)
    assert [c for c in detokenized if c.isalnum()] == [c for c in text if c.isalnum()]
    assert detokenized.count("\n") == text.count("\n")
    assert " @-@ " not in detokenized and " , " not in detokenized and " . " not in detokenized
