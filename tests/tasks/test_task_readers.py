"""Task readers: the benchmark formats as shipped, and one clear error per malformed row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plm.errors import PLMError
from plm.tasks.readers import (
    Answer,
    ChoiceExample,
    TaggedSentence,
    TextExample,
    read_conll,
    read_conll_layout,
    read_glue,
    read_jsonl,
    read_squad,
    read_swag,
    to_bio,
)

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_glue_single_sentences_and_pairs_are_found_by_column_name(tmp_path):
    sst = write(tmp_path, "sst.tsv", 'sentence\tlabel\nit "works" .\t1\nno\t0\n')
    assert read_glue(sst) == [TextExample('it "works" .', None, "1"), TextExample("no", None, "0")]
    assert [e.line for e in read_glue(sst)] == [2, 3]  # each example's line, for messages about it
    mrpc = write(tmp_path, "mrpc.tsv", "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t7\t8\tA b .\tB a .\n")
    assert read_glue(mrpc) == [TextExample("A b .", "B a .", "1")]
    sts = write(tmp_path, "sts.tsv", "index\tsentence1\tsentence2\tscore\n0\tx\ty\t3.8\n")
    assert read_glue(sts, regression=True) == [TextExample("x", "y", 3.8)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sentence\tlabel\nok\t1\ntoo\tmany\tfields\n", r"bad.tsv:3: 3 tab-separated fields, the header has 2"),
        ("sentence\tlabel\nok\t\n", r"bad.tsv:2: empty label"),
        ("words\tlabel\nok\t1\n", r"bad.tsv:1: no sentence column"),
    ],
)
def test_glue_malformed_rows_name_file_and_line(tmp_path, text, message):
    with pytest.raises(PLMError, match=message):
        read_glue(write(tmp_path, "bad.tsv", text))


def test_glue_regression_label_must_be_a_number(tmp_path):
    with pytest.raises(PLMError, match=r"bad.tsv:2: label 'high' is not a number"):
        read_glue(write(tmp_path, "bad.tsv", "sentence1\tsentence2\tscore\na\tb\thigh\n"), regression=True)


def test_jsonl_reads_text_pair_and_label_and_names_bad_lines(tmp_path):
    good = write(tmp_path, "a.jsonl", '{"text": "a", "label": "pos"}\n\n{"text": "b", "text_pair": "c", "label": 2}\n')
    assert read_jsonl(good) == [TextExample("a", None, "pos"), TextExample("b", "c", "2")]
    assert [e.line for e in read_jsonl(good)] == [1, 3]
    with pytest.raises(PLMError, match=r"b.jsonl:2: not valid JSON"):
        read_jsonl(write(tmp_path, "b.jsonl", '{"text": "a"}\n{"text": \n'))
    with pytest.raises(PLMError, match=r"c.jsonl:1: field 'text' should be a string, got the number 3"):
        read_jsonl(write(tmp_path, "c.jsonl", '{"text": 3}\n'))
    with pytest.raises(PLMError, match=r"d.jsonl:1: field 'text_pair' should be a string or null, got the list \[\]"):
        read_jsonl(write(tmp_path, "d.jsonl", '{"text": "a", "text_pair": []}\n'))


def test_conll_iob1_comes_back_as_bio(tmp_path):
    text = ("-DOCSTART- -X- -X- O\n\nEU NNP B-NP I-ORG\nrejects VBZ B-VP O\nGerman JJ B-NP I-MISC\n\n"
            "Peter NNP B-NP I-PER\nBlackburn NNP I-NP I-PER\nMary NNP I-NP B-PER\n")
    sentences = read_conll(write(tmp_path, "x.conll", text))
    assert sentences == [
        TaggedSentence(("EU", "rejects", "German"), ("B-ORG", "O", "B-MISC")),
        TaggedSentence(("Peter", "Blackburn", "Mary"), ("B-PER", "I-PER", "B-PER")),
    ]
    assert [s.line for s in sentences] == [3, 7]  # the first word's line; word i is on the line i after it


def test_conll_sentences_read_in_their_documents_hold_the_words_around_them(tmp_path):
    """BERT 5.3's document context: a -DOCSTART- line ends a document, and a file without one is one document."""
    text = ("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\nPeter NNP B-NP B-PER\nsmiles VBZ B-VP O\n"
            "\n-DOCSTART- -X- -X- O\n\nMary NNP B-NP B-PER\n")
    path = write(tmp_path, "x.conll", text)
    alone, in_documents = read_conll(path), read_conll(path, document_context=True)
    assert [(s.words, s.tags, s.line) for s in in_documents] == [(s.words, s.tags, s.line) for s in alone]
    assert [s.context for s in in_documents] == [((), ("Peter", "smiles")), (("EU", "rejects"), ()), ((), ())]
    assert [s.context for s in alone] == [((), ())] * 3
    one_document = read_conll(write(tmp_path, "y.conll", "EU B-ORG\n\nPeter B-PER\n\nMary B-PER\n"), None, True)
    assert one_document[1].context == (("EU",), ("Mary",))
    with pytest.raises(PLMError, match="the document's words at offset 1 are not the sentence's"):
        TaggedSentence(("EU",), ("B-ORG",), document=("EU", "rejects"), offset=1)


def test_a_conll_layout_without_its_tags_last_asks_for_the_tag_column(tmp_path):
    """CoNLL-2000's 3 columns end with the chunk tag, not an entity tag: which column to read must be said."""
    path = write(tmp_path, "x.conll", "EU NNP B-ORG\nrejects VBZ O\n\nPeter NNP B-PER\n")
    with pytest.raises(PLMError, match=r"x.conll:1: lines of 3 columns; say which holds the tags with `tag_column`"):
        read_conll(path)
    assert read_conll_layout(path, tag_column=3) == (
        [TaggedSentence(("EU", "rejects"), ("B-ORG", "O")), TaggedSentence(("Peter",), ("B-PER",))], 3, 3)
    with pytest.raises(PLMError, match=r"`tag_column` 4: .*x.conll has 3 columns"):
        read_conll(path, tag_column=4)
    with pytest.raises(PLMError, match=r"y.conll:2: 2 columns, but the lines before have 4"):
        read_conll(write(tmp_path, "y.conll", "EU NNP B-NP B-ORG\nrejects O\n"))


def test_to_bio_leaves_valid_bio_alone():
    tags = ["B-PER", "I-PER", "B-PER", "O", "B-LOC", "I-LOC", "B-ORG"]
    assert to_bio(tags) == tags
    assert to_bio(["O", "I-LOC", "I-PER", "I-PER"]) == ["O", "B-LOC", "B-PER", "I-PER"]


@pytest.mark.parametrize(
    ("text", "message"),
    [("EU B-ORG\nlonely\n", r"x.conll:2: a word without a tag"), ("EU X-ORG\n", r"x.conll:1: tag 'X-ORG'")],
)
def test_conll_malformed_lines_name_file_and_line(tmp_path, text, message):
    with pytest.raises(PLMError, match=message):
        read_conll(write(tmp_path, "x.conll", text))


def squad(questions, version="2.0"):
    paragraph = {"context": "Paris is in France.", "qas": questions}
    return json.dumps({"version": version, "data": [{"title": "t", "paragraphs": [paragraph]}]})


def test_squad_v2_answers_and_unanswerable_questions(tmp_path):
    questions = [
        {"id": "q1", "question": "Where?", "answers": [{"text": "France", "answer_start": 12}]},
        {"id": "q2", "question": "Who?", "answers": [], "is_impossible": True},
        {"id": "q3", "question": "What?", "answers": [{"text": "Paris", "answer_start": None}]},
    ]
    examples = read_squad(write(tmp_path, "s.json", squad(questions)))
    assert [(e.id, e.answers, e.impossible) for e in examples] == [
        ("q1", (Answer("France", 12),), False), ("q2", (), True), ("q3", (Answer("Paris", None),), False)]
    assert examples[0].context == "Paris is in France."


@pytest.mark.parametrize(
    ("questions", "message"),
    [
        ([{"id": "q", "question": "?", "answers": [{"text": "France", "answer_start": 3}]}],
         r"data\[0\].paragraphs\[0\].qas\[0\].answers\[0\]: answer_start 3 does not point at 'France'"),
        ([{"id": "q", "answers": []}], r'qas\[0\]: missing or ill-typed "question"'),
        ([{"id": "q", "question": "?", "answers": []}], r"qas\[0\]: no answers, and is_impossible is not set"),
    ],
)
def test_squad_malformed_questions_say_where(tmp_path, questions, message):
    with pytest.raises(PLMError, match=message):
        read_squad(write(tmp_path, "s.json", squad(questions)))


def test_swag_reads_endings_and_checks_labels(tmp_path):
    header = "video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label\n"
    row = 'v,1,"A man sits. He","A man sits.",He,gold,"runs, fast.",sleeps.,eats.,sings.,1\n'
    assert read_swag(write(tmp_path, "s.csv", header + row)) == [
        ChoiceExample("A man sits.", "He", ("runs, fast.", "sleeps.", "eats.", "sings."), 1)]
    with pytest.raises(PLMError, match=r"t.csv:3: label '7' is not 0, 1, 2 or 3"):
        read_swag(write(tmp_path, "t.csv", header + row + row.replace(",1\n", ",7\n")))


def test_an_empty_file_is_an_error(tmp_path):
    with pytest.raises(PLMError, match="no examples"):
        read_conll(write(tmp_path, "e.conll", "-DOCSTART- -X- -X- O\n\n"))


@pytest.mark.skipif(not (DATA / "conll2003").is_dir(), reason="../shared/data/conll2003 is absent")
def test_real_conll2003_dev():
    sentences = read_conll(DATA / "conll2003" / "eng.testa")
    assert len(sentences) == 3250  # CoNLL-2003 English dev, as published
    assert sentences[1] == TaggedSentence(("LONDON", "1996-08-30"), ("B-LOC", "O"))
    in_documents = read_conll(DATA / "conll2003" / "eng.testa", document_context=True)
    assert sum(s.offset == 0 for s in in_documents) == 216  # its -DOCSTART- lines
    assert in_documents[1].context[0] == in_documents[0].words and len(in_documents[1].document) == 440


@pytest.mark.skipif(not (DATA / "sst-2").is_dir(), reason="../shared/data/sst-2 is absent")
def test_real_sst2_dev():
    examples = read_glue(DATA / "sst-2" / "dev.tsv")
    assert len(examples) == 872 and {e.label for e in examples} == {"0", "1"}


@pytest.mark.skipif(not (DATA / "squad").is_dir(), reason="../shared/data/squad is absent")
def test_real_squad_sample():
    assert len(read_squad(DATA / "squad" / "dev-v1.1-sample.json")) == 158
