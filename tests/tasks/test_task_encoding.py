"""Examples as the encoder reads them: labels on first sub-words, predictions back as words, padded batches."""

from __future__ import annotations

import pytest

from plm.tasks.encoding import IGNORE, collate, encode_choice, encode_tagged, encode_text, word_predictions
from plm.tasks.readers import ChoiceExample, TaggedSentence, TextExample
from plm.tokenization.tokenizer import Tokenizer

WORDS = "the runner was running and jumping over unbelievable hurdles near Westminster".split()


VOCABULARY = """[PAD] [UNK] [CLS] [SEP] [MASK] the a he was and over near run ##ner ##ning ##s jump ##ing
un ##bel ##iev ##able hurdle west ##min ##ster""".split()


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(VOCABULARY) + "\n")
    return Tokenizer.from_vocab_txt(path)


def test_each_word_labels_its_first_piece_only(tokenizer):
    tags = ("O", "B-PER", "O", "O", "O", "O", "O", "B-MISC", "I-MISC", "O", "B-LOC")
    tag_ids = {"O": 0, "B-PER": 1, "B-MISC": 2, "I-MISC": 3, "B-LOC": 4}
    feature = encode_tagged(tokenizer, TaggedSentence(tuple(WORDS), tags), tag_ids, max_length=64)

    # brute force: each word alone gives its pieces; the labelled position is the first of them
    lengths = [len(tokenizer.encode(word)) for word in WORDS]
    assert max(lengths) > 1  # some words split into several pieces
    expected = [IGNORE]  # [CLS]
    for length, tag in zip(lengths, tags):
        expected += [tag_ids[tag]] + [IGNORE] * (length - 1)
    expected.append(IGNORE)  # [SEP]
    assert feature["labels"] == expected
    assert feature["input_ids"][1:-1] == [i for word in WORDS for i in tokenizer.encode(word)]

    short = encode_tagged(tokenizer, TaggedSentence(("the",), ("O",)), tag_ids, max_length=64)
    batch = collate([feature, short], pad_id=tokenizer.pad_id)
    assert batch["labels"][1].tolist() == [IGNORE, 0] + [IGNORE] * (len(expected) - 2)  # padding has no label


def test_word_predictions_read_the_first_piece_and_fill_words_cut_off(tokenizer):
    ids_of_words = list(range(len(WORDS)))
    sentence = TaggedSentence(tuple(WORDS), tuple(str(i) for i in ids_of_words))
    feature = encode_tagged(tokenizer, sentence, {str(i): i for i in ids_of_words}, max_length=64)
    token_predictions = [label if label != IGNORE else 99 for label in feature["labels"]]  # 99 on other pieces
    assert word_predictions(token_predictions, feature["word_ids"], len(WORDS), default=-1) == ids_of_words

    short = encode_tagged(tokenizer, sentence, {str(i): i for i in ids_of_words}, max_length=6)  # 4 pieces fit
    kept = len({w for w in short["word_ids"] if w is not None})
    predictions = word_predictions([0] * 6, short["word_ids"], len(WORDS), default=-1)
    assert len(short["input_ids"]) == 6 and predictions == [0] * kept + [-1] * (len(WORDS) - kept)


def test_a_sentence_in_its_document_reads_the_words_around_it_centred_and_untagged(tokenizer):
    """BERT 5.3's document context: what fits of the document around the sentence, half on each side where both
    have it; the context's pieces carry no label and no word."""
    document = ("a", "he", "was", "over", "the", "runner", "near", "a", "hurdle", "and", "he", "was")
    sentence = TaggedSentence(("the", "runner"), ("O", "B-PER"), document=document, offset=4)  # 4 pieces, 3, then 6

    def read(max_length):
        feature = encode_tagged(tokenizer, sentence, {"O": 0, "B-PER": 1}, max_length)
        return tokenizer.backend.decode(feature["input_ids"], skip_special_tokens=False), feature

    whole, feature = read(64)
    assert whole == "[CLS] a he was over the runner near a hurdle and he was [SEP]"
    assert feature["labels"] == [IGNORE] * 5 + [0, 1, IGNORE] + [IGNORE] * 7
    assert feature["word_ids"] == [None] * 5 + [0, 1, 1] + [None] * 7
    assert word_predictions(feature["labels"], feature["word_ids"], 2, default=-1) == [0, 1]
    assert read(2 + 3 + 4)[0] == "[CLS] was over the runner near a [SEP]"  # 2 and 2 around its 3 pieces
    assert read(2 + 3 + 9)[0] == "[CLS] a he was over the runner near a hurdle and he [SEP]"  # all 4 before, 5 after
    assert read(2 + 3)[0] == "[CLS] the runner [SEP]"
    alone = encode_tagged(tokenizer, TaggedSentence(("the", "runner"), ("O", "B-PER")), {"O": 0, "B-PER": 1}, 64)
    assert alone == encode_tagged(tokenizer, sentence, {"O": 0, "B-PER": 1}, 2 + 3)


def test_pairs_get_segment_ids_and_batches_pad_on_the_right(tokenizer):
    a = encode_text(tokenizer, TextExample("the runner", "jumps"), 32) | {"labels": 1}
    b = encode_text(tokenizer, TextExample("a hurdle"), 32) | {"labels": 0}
    batch = collate([a, b], pad_id=tokenizer.pad_id)
    cls, sep, pad = tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id
    runner, jumps = tokenizer.encode("the runner"), tokenizer.encode("jumps")
    assert batch["input_ids"][0].tolist() == [cls, *runner, sep, *jumps, sep]
    assert batch["token_type_ids"][0].tolist() == [0] * (len(runner) + 2) + [1] * (len(jumps) + 1)
    width = batch["input_ids"].shape[1]
    n = len(tokenizer.encode("a hurdle")) + 2
    assert batch["input_ids"][1, n:].tolist() == [pad] * (width - n)
    assert batch["attention_mask"].tolist()[1] == [1] * n + [0] * (width - n)
    assert batch["labels"].tolist() == [1, 0]


def test_choices_become_one_row_each(tokenizer):
    feature = encode_choice(tokenizer, ChoiceExample("the runner", "he", ("jumps", "runs over a hurdle"), 0), 32)
    batch = collate([feature], pad_id=tokenizer.pad_id)
    assert batch["input_ids"].shape[:2] == (1, 2)
    second = [tokenizer.cls_id, *tokenizer.encode("the runner"), tokenizer.sep_id,
              *tokenizer.encode("he runs over a hurdle"), tokenizer.sep_id]
    assert batch["input_ids"][0, 1].tolist() == second
    assert batch["attention_mask"][0, 0].sum() < batch["attention_mask"][0, 1].sum()
