"""The commands' results, not just their exit codes: conversions keep the logits, a trained
masked LM fills the mask it learned, trained tokenizers load and encode the training text.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

import plm
from plm.cli.main import main
from plm.storage.checkpoint import model_directory
from tests.conftest import synthetic_text

transformers = pytest.importorskip("transformers")

QUICK = ["--batch-size", "8", "--warmup", "5", "--dropout", "0", "--no-progress", "--device", "cpu"]
SENTENCE = "alpha beta gamma delta."


def logits_of(model, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits


def some_ids(vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows of 12 tokens, the second right-padded after 7."""
    ids = torch.randint(5, vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[1] * 12, [1] * 7 + [0] * 5])
    return ids, mask


def randomized_copy(run: Path, directory: Path) -> Path:
    """The run's model with every weight drawn from N(0, 0.3) (norm gains near 1), saved with its tokenizer.

    A few training steps leave the weights near their small initial values, where a
    wrong activation (GELU for its tanh approximation) hardly moves the logits; these do.
    """
    model = plm.load(run)
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(std=0.3)
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.add_(1.0)
    return plm.save(model, directory, plm.Tokenizer.load(model_directory(run)))


def assert_converts_there_and_back(source: Path, tmp_path: Path, hf_class, text: str) -> None:
    """plm -> Hugging Face -> plm with the CLI; transformers on the middle one is the oracle."""
    hf, back = tmp_path / "hf", tmp_path / "back"
    assert main(["convert", "--model", str(source), "--out", str(hf)]) == 0
    assert main(["convert", "--model", str(hf), "--out", str(back)]) == 0
    original = plm.load(source)
    ids, mask = some_ids(original.config.vocab_size)
    expected = logits_of(original, ids, mask)
    real = mask.bool()  # what a model computes at a padding position is nobody's business
    oracle = hf_class.from_pretrained(hf).eval()
    torch.testing.assert_close(logits_of(oracle, ids, mask)[real], expected[real], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(logits_of(plm.load(hf), ids, mask), expected, rtol=0, atol=0)
    torch.testing.assert_close(logits_of(plm.load(back), ids, mask), expected, rtol=0, atol=0)
    assert plm.Tokenizer.load(back).encode(text) == plm.Tokenizer.load(model_directory(source)).encode(text)


@pytest.fixture(scope="module")
def gpt_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    text = tmp_path_factory.mktemp("gpt-text") / "train.txt"
    text.write_text(synthetic_text(), encoding="utf-8")
    out = tmp_path_factory.mktemp("gpt-run") / "run"
    argv = ["pretrain", "--model", "gpt2-micro", "--vocab-size", "300", "--block-size", "32", "--steps", "8",
            "--lr", "3e-3", *QUICK, "--train", str(text), "--out", str(out)]
    assert main(argv) == 0
    return out


@pytest.fixture(scope="module")
def alphabet_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bert-micro trained (MLM only) on one sentence repeated: its masks have one right answer."""
    text = tmp_path_factory.mktemp("mlm-text") / "train.txt"
    text.write_text("\n\n".join(" ".join([SENTENCE] * 4) for _ in range(40)) + "\n", encoding="utf-8")
    out = tmp_path_factory.mktemp("bert-run") / "run"
    argv = ["pretrain", "--model", "bert-micro", "--objective", "mlm", "--vocab-size", "100", "--block-size", "24",
            "--steps", "80", "--lr", "3e-3", *QUICK, "--train", str(text), "--out", str(out)]
    assert main(argv) == 0
    return out


@pytest.mark.parametrize("weights", ["trained", "randomized"])
def test_convert_a_gpt_run_to_hugging_face_and_back_keeps_the_logits(weights, gpt_run, tmp_path):
    source = gpt_run if weights == "trained" else randomized_copy(gpt_run, tmp_path / "random")
    assert_converts_there_and_back(source, tmp_path, transformers.GPT2LMHeadModel, "The cat reads the book.")


@pytest.mark.parametrize("weights", ["trained", "randomized"])
def test_convert_a_bert_run_to_hugging_face_and_back_keeps_the_logits(weights, alphabet_bert, tmp_path):
    source = alphabet_bert if weights == "trained" else randomized_copy(alphabet_bert, tmp_path / "random")
    assert_converts_there_and_back(source, tmp_path, transformers.BertForMaskedLM, SENTENCE)
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == ["BertForMaskedLM"]


def test_fill_mask_puts_the_learned_word_at_each_mask(alphabet_bert, capsys):
    capsys.readouterr()
    assert main(["fill-mask", "--model", str(alphabet_bert), "alpha [MASK] gamma delta. alpha beta [MASK] delta."]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:3] for line in lines] == [["mask", "1:", "beta"], ["mask", "2:", "gamma"]]


def test_fill_mask_takes_several_texts_and_shows_small_probabilities(alphabet_bert, capsys):
    capsys.readouterr()
    assert main(["fill-mask", "--model", str(alphabet_bert), "alpha [MASK] gamma delta.", "alpha beta [MASK] delta.",
                 "--guesses", "30"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "alpha [MASK] gamma delta." and lines[2] == "alpha beta [MASK] delta."
    assert lines[1].split()[:3] == ["mask", "1:", "beta"] and lines[3].split()[:3] == ["mask", "1:", "gamma"]
    printed = re.findall(r"\(([\d.e+-]+)\)", lines[1])
    smallest = min(printed, key=float)  # the tail of 30 guesses: three significant digits, not 0.002 or 0.000
    assert float(smallest) < 0.01 and len(smallest.replace(".", "").lstrip("0").split("e")[0]) == 3


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60 kB of English with a real vocabulary: Python's own reference topics, always installed."""
    from pydoc_data.topics import topics

    path = tmp_path_factory.mktemp("tok-text") / "train.txt"
    path.write_text("\n\n".join(topics[name] for name in sorted(topics))[:60_000], encoding="utf-8")
    return path


def words_line(corpus: Path) -> str:
    """A line of the training text made of eight or more plain words."""
    lines = corpus.read_text(encoding="utf-8").splitlines()
    return next(line for line in lines if re.fullmatch(r"[A-Za-z ]+", line) and len(line.split()) >= 8)


def train_tokenizer(corpus: Path, out: Path, *options: str) -> plm.Tokenizer:
    assert main(["tokenizer", "train", str(corpus), *options, "--vocab-size", "400", "--out", str(out)]) == 0
    return plm.Tokenizer.load(out)


def test_a_trained_bpe_tokenizer_loads_and_round_trips_the_text(corpus, tmp_path):
    tokenizer = train_tokenizer(corpus, tmp_path, "--kind", "bpe")
    assert len(tokenizer) == 400
    text = corpus.read_text(encoding="utf-8")[:2000]
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    assert len(ids) < 0.75 * len(text.encode())  # merges were learned, not only bytes
    assert tokenizer.eos_id is not None and tokenizer.decode([tokenizer.eos_id]) == "<|endoftext|>"


@pytest.mark.parametrize(
    ("kind", "marker", "model"), [("wordpiece", "##", "WordPiece"), ("unigram", "\u2581", "Unigram")]
)
def test_a_trained_encoder_tokenizer_loads_cuts_the_words_and_knows_its_specials(kind, marker, model, corpus, tmp_path):
    tokenizer = train_tokenizer(corpus, tmp_path, "--kind", kind, "--lowercase")
    assert type(tokenizer.backend.model).__name__ == model and len(tokenizer) == 400
    sentence = words_line(corpus)
    tokens = [tokenizer.backend.id_to_token(i) for i in tokenizer.encode(sentence)]
    assert "".join(token.replace(marker, "") for token in tokens) == sentence.lower().replace(" ", "")
    assert len(tokens) < 0.75 * len(sentence.replace(" ", ""))  # word pieces, not letters
    cls, sep, mask = (tokenizer.token_to_id(token) for token in ("[CLS]", "[SEP]", "[MASK]"))
    assert None not in (cls, sep, mask) and len({cls, sep, mask}) == 3
    assert (tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id) == (cls, sep, mask)
    pair = tokenizer.encode_pair("the cat", "a dog").ids
    assert pair[0] == cls and pair.count(sep) == 2
