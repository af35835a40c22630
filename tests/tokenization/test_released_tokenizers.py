"""The tokenizers of released translation models (plm.tokenization.released) against transformers' own.

Nothing is downloaded: a small Marian tokenizer (two SentencePiece models and one id table) and a small
fairseq one (BPE merges and two id tables over Moses tokens) are trained here on Multi30k, and
``transformers.MarianTokenizer`` and ``transformers.FSMTTokenizer`` built from the same files are the
oracle for the ids and the text. The helpers that write those files also serve the model tests
(tests/hf/test_hf_marian.py, tests/hf/test_hf_fsmt.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from plm.data.sentence_pairs import Seq2SeqTokenizers
from plm.errors import PLMError
from plm.tokenization.released import FSMTTokenizer, MarianTokenizer
from tests.conftest import SHARED_DATA

transformers = pytest.importorskip("transformers")
sentencepiece = pytest.importorskip("sentencepiece")
sacremoses = pytest.importorskip("sacremoses")
MULTI30K = SHARED_DATA / "multi30k"
FSMT_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # fairseq's dictionary begins with these, ids 0 to 3


def multi30k(name: str, count: int, start: int = 0) -> list[str]:
    path = MULTI30K / name
    if not path.is_file():
        pytest.skip(f"Multi30k ({path}) is not in the shared data folder")
    return path.read_text(encoding="utf-8").splitlines()[start : start + count]


def write_marian_tokenizer(directory: Path, vocab_size: int = 200, lines: int = 1000,
                           texts: tuple[list[str], list[str]] | None = None) -> int:
    """source.spm (German), target.spm (English) and vocab.json as Marian's conversion lays them out.

    vocab.json is the one id table of both sides: ``</s>`` 0, ``<unk>`` 1, every piece of either model once,
    a language code, and ``<pad>`` last. Returns its size. ``texts``: the source and target sentences to learn
    from instead of Multi30k's first ``lines``.
    """
    sides = texts or (multi30k("train.de", lines), multi30k("train.en", lines))
    for side, sentences in zip(("source", "target"), sides):
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences), model_prefix=str(directory / side), vocab_size=vocab_size,
            character_coverage=1.0, bos_id=-1, eos_id=0, unk_id=1, minloglevel=2, num_threads=1,
        )
        (directory / f"{side}.model").rename(directory / f"{side}.spm")
        (directory / f"{side}.vocab").unlink()
    vocab = {"</s>": 0, "<unk>": 1}
    for side in ("source", "target"):
        model = sentencepiece.SentencePieceProcessor(model_file=str(directory / f"{side}.spm"))
        for index in range(model.get_piece_size()):
            vocab.setdefault(model.id_to_piece(index), len(vocab))
    vocab[">>de<<"] = len(vocab)
    vocab["<pad>"] = len(vocab)
    (directory / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    return len(vocab)


def write_fsmt_tokenizer(directory: Path, merges: int = 500, lines: int = 500) -> tuple[int, int]:
    """merges.txt (learned on German and English Moses tokens), vocab-src.json, vocab-tgt.json, the languages.

    The two tables hold the same tokens in opposite orders, so that reading one side with the other's ids
    shows. Returns their sizes.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    words = []
    for lang, name in (("de", "train.de"), ("en", "train.en")):
        moses = sacremoses.MosesTokenizer(lang=lang)
        words += [moses.tokenize(line, aggressive_dash_splits=True, return_str=True, escape=True)
                  for line in multi30k(name, lines)]
    bpe = Tokenizer(models.BPE(end_of_word_suffix="</w>"))
    bpe.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.BpeTrainer(vocab_size=merges, end_of_word_suffix="</w>", show_progress=False)
    bpe.train_from_iterator(words, trainer)
    learned = json.loads(bpe.to_str())["model"]
    pairs = [merge if isinstance(merge, str) else " ".join(merge) for merge in learned["merges"]]
    (directory / "merges.txt").write_text("".join(f"{pair}\n" for pair in pairs), encoding="utf-8")
    tokens = sorted(learned["vocab"])  # the trainer's own ids differ from one process to the next
    for side, order in (("src", tokens), ("tgt", tokens[::-1])):
        vocab = {token: index for index, token in enumerate(FSMT_SPECIALS + order)}
        (directory / f"vocab-{side}.json").write_text(json.dumps(vocab), encoding="utf-8")
    (directory / "tokenizer_config.json").write_text(json.dumps({"langs": ["de", "en"]}), encoding="utf-8")
    return len(FSMT_SPECIALS) + len(tokens), len(FSMT_SPECIALS) + len(tokens)


@pytest.fixture(scope="module")
def marian_directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("marian")
    write_marian_tokenizer(directory)
    return directory


@pytest.fixture(scope="module")
def fsmt_directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("fsmt")
    write_fsmt_tokenizer(directory)
    return directory


def held_out(count: int = 300) -> tuple[list[str], list[str]]:
    """Multi30k validation pairs the tokenizers were not trained on."""
    return multi30k("val.de", count), multi30k("val.en", count)


# --- Marian ----------------------------------------------------------------------------------------------


def test_marian_ids_are_marian_tokenizers(marian_directory):
    reference = transformers.MarianTokenizer(
        source_spm=str(marian_directory / "source.spm"), target_spm=str(marian_directory / "target.spm"),
        vocab=str(marian_directory / "vocab.json"),
    )
    tokenizers = Seq2SeqTokenizers.load(marian_directory)
    assert isinstance(tokenizers.source, MarianTokenizer) and not tokenizers.joint
    german, english = held_out()
    german = [*german, ">>de<< Ein Hund rennt.", "  Zwei  Leerzeichen ", "Ω ☃ unbekannt"]  # a language code; unknowns

    assert tokenizers.encode_sources(german) == reference(german)["input_ids"]  # x </s>
    targets = tokenizers.encode_targets(english)  # <pad> y </s>: Marian's decoder starts from <pad>
    assert {row[0] for row in targets} == {reference.pad_token_id}
    assert [row[1:] for row in targets] == reference(text_target=english)["input_ids"]

    texts = tokenizers.decode_targets([row[1:] for row in targets])
    assert texts == [reference.decode(row, skip_special_tokens=True, use_source_tokenizer=False) for row in targets]
    assert sum(text == line for text, line in zip(texts, english)) >= 0.95 * len(english)  # round trip
    assert tokenizers.target.decode(targets[0]) == reference.decode(targets[0], use_source_tokenizer=False)


def test_marian_ids_differ_by_side(marian_directory):
    """The source side reads German pieces, the target side English ones, in the one id table."""
    tokenizers = Seq2SeqTokenizers.load(marian_directory)
    german, _ = held_out(20)
    assert tokenizers.source.encode_batch(german) != tokenizers.target.encode_batch(german)


# --- FSMT ------------------------------------------------------------------------------------------------


def test_fsmt_ids_are_fsmt_tokenizers(fsmt_directory):
    files = {"merges_file": str(fsmt_directory / "merges.txt")}
    reference = transformers.FSMTTokenizer(langs=["de", "en"], src_vocab_file=str(fsmt_directory / "vocab-src.json"),
                                           tgt_vocab_file=str(fsmt_directory / "vocab-tgt.json"), **files)
    # FSMTTokenizer encodes any text as a source; the reverse direction's encodes plm's target side.
    reverse = transformers.FSMTTokenizer(langs=["en", "de"], src_vocab_file=str(fsmt_directory / "vocab-tgt.json"),
                                         tgt_vocab_file=str(fsmt_directory / "vocab-src.json"), **files)
    tokenizers = Seq2SeqTokenizers.load(fsmt_directory)
    assert isinstance(tokenizers.source, FSMTTokenizer) and not tokenizers.joint
    german, english = held_out()
    german = [*german, "„Zitat“ – mit Strich…", "Größe 10,5 % & mehr", "a\x01b  c",  # Moses' normalisation
              "Preis：１０％（etwa）【neu】。"]  # FSMTTokenizer's replacements of full-width punctuation
    english = [*english, "“Quote” — a dash… it's AT&T's <b>"]

    assert tokenizers.encode_sources(german) == reference(german)["input_ids"]  # x </s>
    targets = tokenizers.encode_targets(english)  # </s> y </s>: fairseq's decoder starts from </s>
    assert {row[0] for row in targets} == {reference.sep_token_id}
    assert [row[1:] for row in targets] == reverse(english)["input_ids"]

    texts = tokenizers.decode_targets([row[1:] for row in targets])
    assert texts == [reference.decode(row, skip_special_tokens=True) for row in targets]
    assert sum(text == line for text, line in zip(texts, english)) >= 0.9 * len(english)  # round trip
    assert tokenizers.target.decode(targets[0]) == reference.decode(targets[0])


# --- both ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["marian", "fsmt"])
def test_saved_tokenizers_load_with_the_same_ids(kind, marian_directory, fsmt_directory, tmp_path):
    tokenizers = Seq2SeqTokenizers.load(marian_directory if kind == "marian" else fsmt_directory)
    tokenizers.save(tmp_path)
    loaded = Seq2SeqTokenizers.load(tmp_path)
    assert not (tmp_path / "target").exists()  # both sides' files name their side
    german, english = held_out(50)
    assert loaded.encode_sources(german) == tokenizers.encode_sources(german)
    assert loaded.encode_targets(english) == tokenizers.encode_targets(english)
    assert loaded.target.decode(loaded.encode_targets(english)[0]) == tokenizers.target.decode(
        tokenizers.encode_targets(english)[0]
    )


def test_a_missing_package_is_one_line_naming_the_extra(marian_directory, monkeypatch):
    monkeypatch.setitem(sys.modules, "sentencepiece", None)  # import sentencepiece now fails
    with pytest.raises(PLMError, match=r"pip install 'plm\[mt\]'"):
        Seq2SeqTokenizers.load(marian_directory)


def test_unreadable_files_are_plm_errors(marian_directory, fsmt_directory, tmp_path):
    for name in ("source.spm", "target.spm"):
        (tmp_path / name).write_bytes((marian_directory / name).read_bytes())
    (tmp_path / "vocab.json").write_text('["not", "a", "table"]', encoding="utf-8")
    with pytest.raises(PLMError, match="vocab.json: not a vocabulary"):
        Seq2SeqTokenizers.load(tmp_path)

    fsmt = tmp_path / "fsmt"
    fsmt.mkdir()
    for name in ("vocab-src.json", "vocab-tgt.json", "merges.txt"):
        (fsmt / name).write_bytes((fsmt_directory / name).read_bytes())
    with pytest.raises(PLMError, match="no pair of languages"):
        Seq2SeqTokenizers.load(fsmt)


def test_a_lowercasing_fsmt_tokenizer_still_lowercases_once_saved_and_loaded(fsmt_directory, tmp_path):
    """fairseq's lowercased models (do_lower_case) must not lose it in plm's copy; FSMTTokenizer is the oracle."""
    for name in ("vocab-src.json", "vocab-tgt.json", "merges.txt"):
        (tmp_path / name).write_bytes((fsmt_directory / name).read_bytes())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"langs": ["de", "en"], "do_lower_case": True}))
    Seq2SeqTokenizers.load(tmp_path).save(tmp_path / "saved")
    reference = transformers.FSMTTokenizer(
        langs=["de", "en"], src_vocab_file=str(tmp_path / "vocab-src.json"),
        tgt_vocab_file=str(tmp_path / "vocab-tgt.json"), merges_file=str(tmp_path / "merges.txt"), do_lower_case=True,
    )
    german = [line.upper() for line in held_out(20)[0]]
    loaded = Seq2SeqTokenizers.load(tmp_path / "saved")
    assert loaded.encode_sources(german) == reference(german)["input_ids"]
