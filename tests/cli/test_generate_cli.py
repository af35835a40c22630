"""plm generate says in one line on stderr where the model ended a text with its end-of-text token; --ignore-eos goes
on to --max-new-tokens."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from plm.apps.text_pipelines import Continuation, continue_prompts, ended_after
from plm.cli import generate as generate_cli
from plm.cli.main import main
from plm.decoding import StopStrings
from plm.tokenization.tokenizer import Tokenizer
from tests.conftest import StubCausalLM

TOKENIZER = Tokenizer.train_bpe(["the cat reads a book", "a dog sees the list"] * 20, 300, 1)
BOOK = TOKENIZER.encode(" book")[0]


class Writes(StubCausalLM):
    """Writes " book" after any other token, and after " book" the token ``then`` (the end of the text, or " book")."""

    def __init__(self, then: int) -> None:
        super().__init__(context=64)
        self.then = then
        self.anchor = nn.Parameter(torch.zeros(1))  # where the model's tensors go

    def logits_for(self, input_ids: torch.Tensor) -> torch.Tensor:
        following = torch.where(input_ids == BOOK, self.then, BOOK)
        return F.one_hot(following, len(TOKENIZER)).float()


ENDS = Writes(then=TOKENIZER.eos_id)
GOES_ON = Writes(then=BOOK)


def test_a_continuation_says_where_the_model_ended_it() -> None:
    assert continue_prompts(ENDS, TOKENIZER, ["the cat", "a dog sees"], 8) == [Continuation(" book", 1)] * 2
    assert continue_prompts(GOES_ON, TOKENIZER, ["the cat"], 8) == [Continuation(" book" * 8, None)]


def test_ignore_eos_writes_every_token_asked_for() -> None:
    ids = torch.tensor([TOKENIZER.encode("the cat")])
    out = ENDS.generate(ids, 8, eos_token_id=TOKENIZER.eos_id, ignore_eos=True)
    assert out.shape[1] - ids.shape[1] == 8
    assert continue_prompts(ENDS, TOKENIZER, ["the cat"], 8, ignore_eos=True) == [Continuation(" book" * 4, None)]


def test_an_end_of_text_id_after_a_stop_string_is_padding() -> None:
    eos, stop = TOKENIZER.eos_id, StopStrings([" book book"], TOKENIZER.decode)
    assert ended_after([BOOK, eos, eos], eos, None) == 1
    assert ended_after([BOOK, BOOK, eos], eos, stop) is None  # the stop string ended it; eos pads (pad id = eos id)
    assert ended_after([BOOK, BOOK], eos, None) is None
    assert ended_after([BOOK, eos], None, None) is None


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch):
    """plm generate --model ends or goes-on: the stub model of that name, with TOKENIZER."""
    models = {"ends": ENDS, "goes-on": GOES_ON}
    monkeypatch.setattr(generate_cli, "load_causal_lm", lambda args: (models[args.model], TOKENIZER))


def test_generation_that_ends_at_the_end_of_text_token_says_so_in_one_line(model, capsys) -> None:
    assert main(["generate", "--model", "ends", "the cat", "--max-new-tokens", "8"]) == 0
    out, err = capsys.readouterr()
    assert out == "the cat book\n"
    assert err == ("plm generate: note: the model ended the text with its end-of-text token after 1 of 8 tokens "
                   "(--ignore-eos goes on to --max-new-tokens)\n")
    assert main(["generate", "--model", "ends", "the cat", "a dog", "--max-new-tokens", "8"]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the texts of prompts 1, 2 with its end-of-text token, after 1, 1 of 8" in err


def test_generation_that_runs_its_length_says_nothing(model, capsys) -> None:
    assert main(["generate", "--model", "goes-on", "the cat", "--max-new-tokens", "3"]) == 0
    assert capsys.readouterr() == ("the cat book book book\n", "")
    assert main(["generate", "--model", "ends", "the cat", "--max-new-tokens", "6", "--ignore-eos"]) == 0
    assert capsys.readouterr() == ("the cat book book book\n", "")
