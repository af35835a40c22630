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


class RecordsBatches(Writes):
    """``Writes`` that records the rows of each batch it starts decoding."""

    def __init__(self) -> None:
        super().__init__(then=BOOK)
        self.batches: list[int] = []

    def start_decoding(self, request):
        self.batches.append(request.prompt.shape[0])
        return super().start_decoding(request)


PROMPTS = ["the cat reads a book", "a", "the dog sees", "a list", "the"]  # lengths out of order


def test_prompts_are_decoded_batch_size_at_a_time() -> None:
    model = RecordsBatches()
    continue_prompts(model, TOKENIZER, PROMPTS, 3, batch_size=2)
    assert model.batches == [2, 2, 1]  # memory holds a batch's cache, not every prompt's


@pytest.fixture(scope="module")
def gpt() -> torch.nn.Module:
    from plm.models import from_preset

    torch.manual_seed(0)
    return from_preset("gpt2-micro", vocab_size=len(TOKENIZER)).eval()  # context 64


def test_continuations_come_back_in_the_prompts_order(gpt) -> None:
    continuations = continue_prompts(gpt, TOKENIZER, PROMPTS, 6, batch_size=2, ignore_eos=True)
    assert continuations == [continue_prompts(gpt, TOKENIZER, [prompt], 6, ignore_eos=True)[0] for prompt in PROMPTS]
    assert len({continuation.text for continuation in continuations}) == len(PROMPTS)


def test_a_sampled_prompt_draws_the_same_tokens_whatever_the_batch_and_its_neighbours(gpt) -> None:
    options = dict(temperature=1.5, seed=7, ignore_eos=True)
    together = continue_prompts(gpt, TOKENIZER, PROMPTS, 12, **options)
    alone = [continue_prompts(gpt, TOKENIZER, PROMPTS[: i + 1], 12, batch_size=1, **options)[i]
             for i in range(len(PROMPTS))]
    assert together == alone
    assert continue_prompts(gpt, TOKENIZER, PROMPTS, 12, batch_size=3, **options) == together
    assert len({c.text for c in together}) == len(PROMPTS)  # the rows did draw different tokens
    assert continue_prompts(gpt, TOKENIZER, PROMPTS, 12, **{**options, "seed": 8}) != together


def test_generate_takes_a_batch_size_and_no_progress(tmp_path, capsys) -> None:
    from plm.models import from_config, preset_config
    from plm.storage.checkpoint import save_model

    run = save_model(from_config(preset_config("gpt2-micro", vocab_size=len(TOKENIZER))), tmp_path / "model", TOKENIZER)
    assert main(["generate", "--model", str(run), "--batch-size", "1", "--no-progress", "--max-new-tokens", "4",
                 "the cat", "a dog"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("the cat") and "\na dog" in out
    with pytest.raises(SystemExit) as refused:
        main(["generate", "--model", str(run), "--batch-size", "0", "x"])
    assert refused.value.code == 2
    assert "--batch-size" in capsys.readouterr().err


def test_one_sampled_prompt_draws_as_generate_and_the_server_do_with_its_seed(gpt) -> None:
    from plm.decoding import generate

    ids = torch.tensor([TOKENIZER.encode("the cat")])
    alone = generate(gpt, ids, 12, temperature=1.5, seed=7, ignore_eos=True)[0, ids.shape[1]:].tolist()
    ours = continue_prompts(gpt, TOKENIZER, ["the cat", "a dog"], 12, temperature=1.5, seed=7, ignore_eos=True)
    assert ours[0].text == TOKENIZER.decode(alone, skip_special_tokens=True)


def streamed_pieces(gpt, prompt: str, *args, **options) -> tuple[list[str], Continuation]:
    pieces: list[str] = []
    continuation = continue_prompts(gpt, TOKENIZER, [prompt], *args, stream=pieces.append, **options)[0]
    return pieces, continuation


@pytest.mark.parametrize("options", [dict(), dict(temperature=1.5, seed=7)], ids=["greedy", "sampled"])
def test_one_prompt_s_text_comes_in_pieces_that_add_up_to_its_continuation(gpt, options) -> None:
    pieces, continuation = streamed_pieces(gpt, "the cat", 12, ignore_eos=True, **options)
    assert "".join(pieces) == continuation.text == continue_prompts(gpt, TOKENIZER, ["the cat"], 12, ignore_eos=True,
                                                                        **options)[0].text
    assert len(pieces) > 3  # handed over as decoded, not at the end


def test_a_streamed_text_holds_back_what_may_begin_a_stop_string_and_never_hands_over_one() -> None:
    """" book book ...", stopped at "k b": the "k" that ends the first " book" may begin the stop string, so it waits;
    the second token completes the string, and the continuation ends before it."""
    pieces, continuation = streamed_pieces(GOES_ON, "the cat", 6, stop=["k b"])
    assert continuation.text == " boo" and "".join(pieces) == " boo"
    pieces, continuation = streamed_pieces(GOES_ON, "the cat", 3, stop=["k\u2603"])  # begun, never completed
    assert pieces == [" boo", "k boo", "k boo", "k"] and continuation.text == " book" * 3


class Spells(StubCausalLM):
    """Writes " café", whose "é" is two byte-level tokens, then the end of the text."""

    def __init__(self) -> None:
        super().__init__(context=64)
        self.anchor = nn.Parameter(torch.zeros(1))
        script = TOKENIZER.encode(" café")
        self.following = torch.full((len(TOKENIZER),), script[0])
        for token, then in zip(script, [*script[1:], TOKENIZER.eos_id]):
            self.following[token] = then

    def logits_for(self, input_ids: torch.Tensor) -> torch.Tensor:
        return F.one_hot(self.following[input_ids], len(TOKENIZER)).float()


def test_a_character_split_between_tokens_is_handed_over_whole() -> None:
    """The token that ends on the first byte of "é" decodes as U+FFFD: it waits for the byte that completes it."""
    pieces, continuation = streamed_pieces(Spells(), "the cat", 8)
    assert continuation.text == " café" and "".join(pieces) == " café" and pieces[-1].endswith("é")


def test_beam_search_hands_over_its_text_once(gpt) -> None:
    pieces, continuation = streamed_pieces(gpt, "the cat", 6, num_beams=2, ignore_eos=True)
    assert pieces == [continuation.text]


def test_plm_generate_writes_one_prompt_as_it_is_decoded_and_nothing_for_a_prompt_it_refuses(model, capsys,
                                                                                          monkeypatch) -> None:
    writes: list[str] = []
    write = generate_cli.sys.stdout.write
    assert main(["generate", "--model", "goes-on", "the cat", "--max-new-tokens", "3"]) == 0
    assert capsys.readouterr().out == "the cat book book book\n"  # as the text of several prompts is written
    monkeypatch.setattr(generate_cli.sys.stdout, "write", lambda text: writes.append(text) or write(text))
    assert main(["generate", "--model", "goes-on", "the cat", "--max-new-tokens", "3"]) == 0
    assert writes == ["the cat book", " book", " book", "\n"]
    monkeypatch.undo()
    capsys.readouterr()
    assert main(["generate", "--model", "goes-on", "the cat " * 40, "--max-new-tokens", "3"]) == 2  # past the context
    assert capsys.readouterr().out == ""
    with pytest.raises(Exception):
        continue_prompts(GOES_ON, TOKENIZER, ["a", "b"], 3, stream=print)
