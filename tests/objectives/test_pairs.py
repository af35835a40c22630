"""Pre-training examples: NSP and SOP pairs and single segments, checked on a few thousand examples.

Both ways through the documents are checked: in order (validation, BERT's script) and at random (training).
"""

import random
from collections import Counter

import pytest
import torch

from plm.data.corpus import Document
from plm.data.prepared import PreparedSplit
from plm.data.segments import segment_starts, split_segments
from plm.errors import PLMError
from plm.objectives.pairs import IN_ORDER, IS_NEXT, NOT_NEXT, SWAPPED, PairExamples
from plm.tokenization.tokenizer import Tokenizer
from tests.conftest import synthetic_sentence

MAX_LENGTH = 48


def make_documents(count: int = 800, seed: int = 0) -> list[Document]:
    rng = random.Random(seed)
    documents = []
    for number in range(count):
        sentences = [f"{synthetic_sentence(rng)} {rng.randint(0, 99)}." for _ in range(rng.randint(3, 30))]
        lines = [" ".join(sentences[i : i + 3]) for i in range(0, len(sentences), 3)]
        documents.append(Document(f"doc{number}", "\n".join(lines)))
    return documents


DOCUMENTS = make_documents()


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.train_wordpiece((doc.text for doc in DOCUMENTS), vocab_size=200)


def pair_examples(documents, tokenizer, task, max_length=MAX_LENGTH, **options) -> PairExamples:
    return PairExamples(PreparedSplit.from_documents(documents, tokenizer), tokenizer, task, max_length, **options)


class Examples(list):
    """Examples made in order, with the PairExamples that made them."""

    def __init__(self, pairs: PairExamples, examples) -> None:
        super().__init__(examples)
        self.pairs = pairs


def in_order(documents, tokenizer, task, max_length=MAX_LENGTH, seed=0, **options) -> Examples:
    pairs = pair_examples(documents, tokenizer, task, max_length, **options)
    return Examples(pairs, pairs.in_order(seed))


def at_random(documents, tokenizer, task, count=3000, seed=0) -> Examples:
    pairs = pair_examples(documents, tokenizer, task)
    rng = random.Random(seed)
    return Examples(pairs, [pairs.at_random(rng) for _ in range(count)])


@pytest.fixture(scope="module", params=["in order", "at random"])
def nsp(tokenizer, request):
    return (in_order if request.param == "in order" else at_random)(DOCUMENTS, tokenizer, "nsp")


@pytest.fixture(scope="module", params=["in order", "at random"])
def sop(tokenizer, request):
    return (in_order if request.param == "in order" else at_random)(DOCUMENTS, tokenizer, "sop")


def share(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def test_documents_are_cut_into_lines_and_sentences():
    text = 'First one. "Quoted!" Then (a bracket.) and e.g. more\nA new line? yes\n\n  '
    segments = ["First one.", '"Quoted!"', "Then (a bracket.)", "and e.g.", "more", "A new line?", "yes"]
    assert split_segments(text) == segments
    assert [text[start:].split("\n")[0][: len(segment)] for start, segment in
            zip(segment_starts(text), segments)] == segments


def test_nsp_pairs_are_half_true_continuations_half_random_documents(nsp):
    assert len(nsp) > 2000
    assert share(e.label == NOT_NEXT for e in nsp) == pytest.approx(0.5, abs=0.03)
    untruncated = 0
    for example in nsp:
        a, b = example.a, example.b
        assert len(a) >= 1 and len(b) >= 1 and len(a) + len(b) + 3 <= MAX_LENGTH
        if example.label == IS_NEXT:
            assert a.document == b.document and a.stop <= b.start
            if len(a) + len(b) < MAX_LENGTH - 3:  # nothing was cut off, so B starts where A ends
                assert b.start == a.stop
                untruncated += 1
        else:
            assert a.document != b.document
    assert untruncated > 100
    others = [e.b.document for e in nsp if e.label == NOT_NEXT]
    assert len(set(others)) > 0.5 * len(DOCUMENTS)  # random documents, not a few favourites


def test_sop_pairs_are_consecutive_segments_of_one_document_half_swapped(sop):
    assert len(sop) > 2000
    assert share(e.label == SWAPPED for e in sop) == pytest.approx(0.5, abs=0.03)
    for example in sop:
        a, b = example.a, example.b
        assert a.document == b.document  # never across documents
        assert len(a) >= 1 and len(b) >= 1 and len(a) + len(b) + 3 <= MAX_LENGTH
        if example.label == IN_ORDER:
            assert a.stop <= b.start
        else:
            assert b.stop <= a.start


def test_about_ten_percent_of_examples_are_short_and_the_others_fill_the_room(nsp, sop):
    room = MAX_LENGTH - 3
    for examples in (nsp, sop):
        short = [e for e in examples if e.target_length < room]
        assert len(short) / len(examples) == pytest.approx(0.1, abs=0.025)
        full = [len(e.a) + len(e.b) for e in examples if e.target_length == room]
        assert share(length == room for length in full) > 0.6  # the others end their document (in order)
        assert share(full) > 0.8 * room
        assert share(len(e.a) + len(e.b) for e in short) < 0.7 * room


def test_random_examples_start_anywhere_and_fill_the_room_even_at_a_document_end(tokenizer):
    examples = at_random(DOCUMENTS, tokenizer, "sop")
    room = MAX_LENGTH - 3
    full = [len(e.a) + len(e.b) for e in examples if e.target_length == room]
    assert share(length == room for length in full) > 0.9  # a chunk that meets its document's end grows back
    assert len({(e.a.document, min(e.a.start, e.b.start)) for e in examples}) > 0.8 * len(examples)  # ~13k sentences


def test_random_examples_are_a_function_of_the_generator(tokenizer):
    pairs = pair_examples(DOCUMENTS[:100], tokenizer, "nsp")
    first, again, other = ([pairs.at_random(random.Random(seed)) for _ in range(50)] for seed in (3, 3, 4))
    assert first == again and first != other


def test_single_segments_cover_each_document_in_order(tokenizer):
    examples = in_order(DOCUMENTS, tokenizer, "none", short_seq_prob=0.0)
    assert all(e.b is None and e.label == -1 and 1 <= len(e.a) <= MAX_LENGTH - 2 for e in examples)
    by_document: dict[int, list] = {}
    for example in examples:
        by_document.setdefault(example.a.document, []).append(example.a)
    assert len(by_document) == len(DOCUMENTS)
    for document, spans in by_document.items():
        assert spans[0].start == 0 and spans[-1].stop == len(examples.pairs.split.document_tokens(document))
        assert all(before.stop == after.start for before, after in zip(spans, spans[1:]))  # nothing lost


def test_a_batch_is_cls_a_sep_b_sep_padded(nsp, tokenizer):
    batch = nsp.pairs.batch(nsp[:4])
    assert batch["pair_labels"].tolist() == [nsp[i].label for i in range(4)]
    for row in range(4):
        a, b = nsp[row].a, nsp[row].b
        ids = [tokenizer.cls_id, *nsp.pairs.tokens(a), tokenizer.sep_id, *nsp.pairs.tokens(b), tokenizer.sep_id]
        length = len(ids)
        assert batch["input_ids"][row, :length].tolist() == ids
        assert (batch["input_ids"][row, length:] == tokenizer.pad_id).all()
        assert batch["attention_mask"][row].tolist() == [1] * length + [0] * (batch["input_ids"].shape[1] - length)
        assert batch["token_type_ids"][row, :length].tolist() == [0] * (len(a) + 2) + [1] * (len(b) + 1)
        special = batch["special_tokens_mask"][row].bool()
        assert torch.equal(special, (batch["word_ids"][row] < 0))
        assert special[[0, len(a) + 1, length - 1]].all() and special.sum() == 3 + batch["input_ids"].shape[1] - length
    text = tokenizer.decode(batch["input_ids"][0, : batch["attention_mask"][0].sum()])
    assert text.startswith("[CLS] ") and text.endswith(" [SEP]") and text.count("[SEP]") == 2


def test_examples_are_a_function_of_the_seed(tokenizer):
    documents = DOCUMENTS[:100]
    first, again = (in_order(documents, tokenizer, "sop", seed=7) for _ in range(2))
    other = in_order(documents, tokenizer, "sop", seed=8)
    assert list(first) == list(again)
    assert list(first) != list(other)


def test_a_document_of_one_sentence_is_split_between_words(tokenizer):
    documents = [Document(f"d{i}", f"The cat reads the book {i} and every token of a string.") for i in range(50)]
    for task in ("nsp", "sop"):
        examples = in_order(documents, tokenizer, task, 64, seed=1)
        assert len(examples) == 50
        for example in examples:
            if example.a.document == example.b.document:
                first, second = sorted([example.a, example.b], key=lambda span: span.start)
                assert first.stop == second.start
                assert examples.pairs.split.document_word_starts(first.document)[second.start]


def test_unusable_input_is_refused_with_a_reason(tokenizer):
    # a file of one sentence a line, without blank lines, is one document: the message says both ways out
    with pytest.raises(PLMError, match=r"at least 2 documents with text, got 1: separate the documents with blank "
                       r"lines, or train the masked LM alone \(objective mlm\)$"):
        pair_examples(DOCUMENTS[:1], tokenizer, "nsp")
    with pytest.raises(PLMError, match="max_length 4 leaves no room"):
        pair_examples(DOCUMENTS, tokenizer, "sop", 4)
    with pytest.raises(PLMError, match="no cls token"):
        pair_examples(DOCUMENTS, Tokenizer.train_bpe(["some text"] * 5, vocab_size=260), "none")
    with pytest.raises(PLMError, match="no none example"):
        pair_examples([Document("empty", "\n\n")], tokenizer, "none")


def test_nsp_labels_are_those_of_hugging_faces_bert_for_pretraining(nsp):
    """``next_sentence_label`` as transformers documents it (written out here, not imported from plm): 0 when B
    is a continuation of A, 1 when B is a random sequence. The other convention answers the opposite once exported.
    """
    assert all(e.label == (0 if e.b.document == e.a.document else 1) for e in nsp)


def test_sop_labels_are_those_of_hugging_faces_albert_for_pretraining(sop):
    """``sentence_order_label`` as transformers documents it: 0 for the original order (A, then B), 1 for switched."""
    assert all(e.label == (0 if e.a.stop <= e.b.start else 1) for e in sop)


def test_nsp_puts_back_the_segments_a_random_b_left_unused(tokenizer):
    """BERT's create_pretraining_data.py: when B is random, the chunk's unused segments start the next chunk.

    With room for any whole document and no short targets nothing is truncated, so every token of every
    document is read exactly once, in A or in an IsNext B; dropping the unused segments loses about a quarter.
    """
    examples = in_order(DOCUMENTS[:300], tokenizer, "nsp", max_length=512, short_seq_prob=0.0)
    split = examples.pairs.split
    assert max(len(split.document_tokens(d)) for d in range(len(split))) < 512 - 3
    read = Counter()
    for example in examples:
        for span in (example.a, example.b):
            if span.document == example.a.document:
                read.update((span.document, t) for t in range(span.start, span.stop))
    every = Counter((d, t) for d in range(len(split)) for t in range(len(split.document_tokens(d))))
    assert read == every


def test_the_random_b_of_nsp_comes_from_every_other_document_alike(nsp):
    """BERT draws the random document uniformly: the NotNext B documents fall evenly into ten bins."""
    others = [e.b.document for e in nsp if e.label == NOT_NEXT]
    bins = Counter(10 * document // len(DOCUMENTS) for document in others)
    expected = len(others) / 10
    chi_square = sum((bins[k] - expected) ** 2 / expected for k in range(10))
    assert chi_square < 27.88  # the 0.999 quantile of chi-square with 9 degrees of freedom
