"""Task data as the public benchmarks ship it: GLUE TSV, CoNLL columns, SQuAD JSON, SWAG CSV, JSONL.

Each reader returns plain examples and knows nothing of tokenizers. A row that
cannot be read is one PLMError naming the file and the line (for SQuAD, the
place in the JSON), so that a user can open the file there and fix it. Text examples
and tagged sentences keep their line, so that a check made later (a validation label
that no training example holds) can name it too.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import itertools
import os
import pathlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from plm.data.corpus import json_document, json_rows, read_text
from plm.errors import PLMError

Path = str | os.PathLike[str]


@dataclass(frozen=True)
class TextExample:
    """One sentence (or sentence pair) and its label: a class name, a score, or None when unlabelled.

    Attributes:
        text: the sentence.
        text_pair: the pair's second sentence, or None.
        label: a class name, a score, or None.
        line: the example's line in the file it was read from (None when it was not read from one), for
            messages about it; it takes no part in comparing examples.
    """

    text: str
    text_pair: str | None = None
    label: str | float | None = None
    line: int | None = field(default=None, compare=False)


@dataclass(frozen=True)
class TaggedSentence:
    """Words and their BIO tags (``B-PER``, ``I-PER``, ``O``), one per word, and the document around them, if read.

    The document's words around the sentence are context: a model reads them, and tags and scores the sentence's
    words alone (BERT section 5.3's NER, "maximal document context").

    Attributes:
        words: the words.
        tags: their tags.
        line: the first word's line in the CoNLL file it was read from (word ``i`` is on line ``line + i``), None
            when it was not read from one; it takes no part in comparing sentences.
        document: the words of the sentence's document, its own included (one tuple shared by the document's
            sentences); empty: the sentence is read alone.
        offset: where the sentence's words start in ``document``.

    Raises:
        PLMError: a ``document`` whose words at ``offset`` are not the sentence's.
    """

    words: tuple[str, ...]
    tags: tuple[str, ...]
    line: int | None = field(default=None, compare=False)
    document: tuple[str, ...] = field(default=(), repr=False)
    offset: int = 0

    def __post_init__(self) -> None:
        if self.document and self.document[self.offset : self.offset + len(self.words)] != self.words:
            raise PLMError(f"the document's words at offset {self.offset} are not the sentence's")

    @property
    def context(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The document's words before the sentence and after it (both empty without a document)."""
        end = self.offset + len(self.words)
        return self.document[: self.offset], self.document[end:]


@dataclass(frozen=True)
class Answer:
    """A gold answer.

    Attributes:
        text: the answer's text.
        start: its character offset in the context, None when the file does not say.
    """

    text: str
    start: int | None


@dataclass(frozen=True)
class QAExample:
    """A SQuAD question; v2.0's unanswerable ones have ``impossible`` set and no answers.

    Attributes:
        id: the question's id.
        question: the question.
        context: the paragraph that holds the answer.
        answers: the gold answers (none when unlabelled or impossible).
        impossible: the question has no answer in the context (SQuAD v2.0).
    """

    id: str
    question: str
    context: str
    answers: tuple[Answer, ...]
    impossible: bool = False


@dataclass(frozen=True)
class ChoiceExample:
    """A SWAG item: the context, the start of the ending all choices share, the endings, the right one's index.

    Attributes:
        context: the first sentence.
        prefix: the start of the second sentence, which every ending continues.
        endings: the candidate endings.
        label: the right ending's index, or None (the test split).
    """

    context: str
    prefix: str
    endings: tuple[str, ...]
    label: int | None


# GLUE's column names: the sentence columns of each task, in order, and the label column names.
GLUE_TEXT_COLUMNS = (
    ("sentence1", "sentence2"),  # MNLI, RTE, WNLI, STS-B
    ("question1", "question2"),  # QQP
    ("#1 String", "#2 String"),  # MRPC
    ("question", "sentence"),  # QNLI
    ("sentence",),  # SST-2, CoLA with a header
    ("content",),  # SST-2 test with labels
    ("text",),
)
GLUE_LABEL_COLUMNS = ("label", "gold_label", "score", "is_duplicate", "Quality")


def read_glue(path: Path, regression: bool = False) -> list[TextExample]:
    """A GLUE TSV with a header line: the task's sentence columns and label column are found by name.

    Quotes are not special (GLUE's files are plain tab-separated). The label stays a
    string (a class name) unless ``regression``; a file without a label column gives
    unlabelled examples.

    Args:
        path: the file.
        regression: read the labels as numbers (STS-B).

    Returns:
        The examples, with their lines.

    Raises:
        PLMError: no known sentence column in the header, a row with another number of fields, an empty
            sentence or label, a label that is not a number (``regression``), no examples, or
            a file that cannot be read as text (see [`read_text`][plm.data.corpus.read_text]).
    """
    lines = read_text(path).split("\n")
    header = lines[0].split("\t")
    names = next((columns for columns in GLUE_TEXT_COLUMNS if all(c in header for c in columns)), None)
    if names is None:
        raise PLMError(f"{path}:1: no sentence column in the header ({', '.join(header)}); "
                       f"expected one of {', '.join(c[0] for c in GLUE_TEXT_COLUMNS)}")
    text_columns = [header.index(name) for name in names]
    label_column = next((header.index(name) for name in GLUE_LABEL_COLUMNS if name in header), None)
    examples = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != len(header):
            raise PLMError(f"{path}:{number}: {len(fields)} tab-separated fields, the header has {len(header)}")
        texts = [fields[c] for c in text_columns]
        empty = next((c for c, text in zip(text_columns, texts) if not text.strip()), None)
        if empty is not None:
            raise PLMError(f"{path}:{number}: an empty sentence in column {header[empty]!r}")
        label = None if label_column is None else _label(fields[label_column], regression, path, number)
        examples.append(TextExample(texts[0], texts[1] if len(texts) > 1 else None, label, number))
    return _nonempty(examples, path)


def read_jsonl(path: Path, regression: bool = False) -> list[TextExample]:
    """One JSON object a line: ``{"text": ..., "text_pair": ..., "label": ...}`` (pair and label optional).

    Args:
        path: the file.
        regression: read the labels as numbers.

    Returns:
        The examples, with their lines.

    Raises:
        PLMError: a line [`json_rows`][plm.data.corpus.json_rows] refuses (not a JSON object, a text or pair that
            is not a string), an empty text or pair, an empty label, a label that is not a number
            (``regression``), or no examples.
    """
    examples = []
    for number, row in json_rows(path, {"text": str}, {"text_pair": str | None}):
        text, pair, label = row["text"], row.get("text_pair"), row.get("label")
        if not text.strip() or (pair is not None and not pair.strip()):
            raise PLMError(
                f'{path}:{number}: an empty "text"' if not text.strip() else f'{path}:{number}: an empty "text_pair"'
            )
        if label is not None:
            label = _label(str(label), regression, path, number)
        examples.append(TextExample(text, pair, label, number))
    return _nonempty(examples, path)


def read_lines(task: str, text: str, source: str) -> list[TextExample] | list[TaggedSentence]:
    """Plain text, one input a line, unlabelled: a text to classify or score, or words to tag.

    Args:
        task: classify, regress or tag (the tasks whose input is one text).
        text: the text.
        source: where it was read from (a file name, or stdin), for messages.

    Returns:
        One example per non-empty line: a TextExample, or for tag a TaggedSentence of the line's words without tags.

    Raises:
        PLMError: a task whose input is not one text (qa, choice), or no lines.
    """
    if task not in ("classify", "regress", "tag"):
        raise PLMError(f"{source}: plain text is one input a line, for classify, regress and tag; a {task} model "
                       "reads SQuAD JSON (qa) or SWAG CSV (choice)")
    lines = [(number, line) for number, line in enumerate(text.split("\n"), start=1) if line.strip()]
    if task == "tag":
        return _nonempty([TaggedSentence(tuple(line.split()), (), number) for number, line in lines], source)
    return _nonempty([TextExample(line.strip(), None, None, number) for number, line in lines], source)


# Layouts whose tag column is the last: word and tag; CoNLL-2003's word, POS tag, chunk tag, entity tag.
# CoNLL-2000's chunking files have 3 (word, POS tag, chunk tag), as do others with another third column:
# there the tag column must be given.
TAG_LAST_LAYOUTS = (2, 4)


def read_conll(path: Path, tag_column: int | None = None, document_context: bool = False) -> list[TaggedSentence]:
    """CoNLL columns: a word first and its tag in ``tag_column``, sentences between blank lines.

    See [`read_conll_layout`][plm.tasks.readers.read_conll_layout], which also says which column the tags came from.

    Args:
        path: the file.
        tag_column: the (1-based) column of the tags; None: the last, in the layouts that put it there.
        document_context: give each sentence its document.

    Returns:
        The sentences.

    Raises:
        PLMError: as [`read_conll_layout`][plm.tasks.readers.read_conll_layout].
    """
    return read_conll_layout(path, tag_column, document_context)[0]


def read_conll_layout(
    path: Path, tag_column: int | None = None, document_context: bool = False
) -> tuple[list[TaggedSentence], int, int]:
    """The sentences, the (1-based) column their tags came from and the file's number of columns.

    The tag column is ``tag_column``, or the last in the layouts that put it there
    (`TAG_LAST_LAYOUTS`); any other number of columns asks for it. Every line has
    the same number of columns. ``-DOCSTART-`` lines end a document and are not words. Tags may be BIO or IOB1
    (CoNLL-2003's, where B- only separates two touching entities of one type); both come
    back as BIO: an I-X that does not continue an X entity starts one. For valid BIO
    that changes nothing, so the scheme need not be given.

    With ``document_context`` each sentence holds its document's words (see
    [`TaggedSentence`][plm.tasks.readers.TaggedSentence]): those of the sentences between the ``-DOCSTART-`` lines
    before and after it (a file without them is one document), so that an encoder reads the words around it as
    context, as BERT's NER did (section 5.3).

    Args:
        path: the file.
        tag_column: the (1-based) column of the tags, or None.
        document_context: give each sentence its document.

    Returns:
        The sentences (tags as BIO), the tag column and the number of columns.

    Raises:
        PLMError: a word without a tag, a line with another number of columns than those before, a tag that is
            neither O nor B-TYPE / I-TYPE, a tag column that is not given where it must be or is out of range,
            no sentences, or
            a file that cannot be read as text (see [`read_text`][plm.data.corpus.read_text]).
    """
    sentences: list[TaggedSentence] = []
    words: list[str] = []
    tags: list[str] = []
    columns = column = first = 0  # first: the line of the sentence's first word
    document = 0  # where the current document's sentences start in sentences
    for number, line in enumerate(read_text(path).split("\n"), start=1):
        fields = line.split()
        if not fields or fields[0] == "-DOCSTART-":
            if words:
                sentences.append(TaggedSentence(tuple(words), tuple(to_bio(tags)), first))
                words, tags = [], []
            if fields and document_context:  # a -DOCSTART- line: the document before it ends
                sentences[document:] = in_document(sentences[document:])
                document = len(sentences)
            continue
        if len(fields) < 2:
            raise PLMError(f"{path}:{number}: a word without a tag ({line.strip()!r}); expected 'word ... tag'")
        if not columns:
            columns, column = len(fields), tag_column_of(path, number, len(fields), tag_column)
        elif len(fields) != columns:
            raise PLMError(f"{path}:{number}: {len(fields)} columns, but the lines before have {columns}")
        tag = fields[column - 1]
        if tag != "O" and not (tag[:2] in ("B-", "I-") and len(tag) > 2):
            raise PLMError(f"{path}:{number}: tag {tag!r} is neither O nor B-TYPE / I-TYPE")
        if not words:
            first = number
        words.append(fields[0])
        tags.append(tag)
    if words:
        sentences.append(TaggedSentence(tuple(words), tuple(to_bio(tags)), first))
    if document_context:
        sentences[document:] = in_document(sentences[document:])
    return _nonempty(sentences, path), column, columns


def in_document(sentences: Sequence[TaggedSentence]) -> list[TaggedSentence]:
    """The sentences of one document, each holding the document's words and where its own start.

    Args:
        sentences: the document's sentences, in order.

    Returns:
        The same sentences, each with the one shared ``document`` tuple and its ``offset`` in it.
    """
    document = tuple(word for sentence in sentences for word in sentence.words)
    offsets = itertools.accumulate((len(sentence.words) for sentence in sentences), initial=0)
    return [dataclasses.replace(sentence, document=document, offset=offset)
            for sentence, offset in zip(sentences, offsets)]


def tag_column_of(path: Path, number: int, columns: int, tag_column: int | None) -> int:
    """The column that holds the tags, for a file whose lines have ``columns`` columns.

    Args:
        path: the file, for the messages.
        number: the line the layout was read from, for the messages.
        columns: the number of columns.
        tag_column: the column asked for, or None.

    Returns:
        ``tag_column``, or the last column in the layouts of `TAG_LAST_LAYOUTS`.

    Raises:
        PLMError: no ``tag_column`` for another layout, or one that is not from 2 to ``columns``.
    """
    if tag_column is None:
        if columns not in TAG_LAST_LAYOUTS:
            raise PLMError(f"{path}:{number}: lines of {columns} columns; say which holds the tags with `tag_column` "
                           "(1 is the word; CoNLL-2003's 4 columns end with the entity tag, CoNLL-2000's 3 with the "
                           "chunk tag)")
        return columns
    if not 2 <= tag_column <= columns:
        raise PLMError(f"`tag_column` {tag_column}: {path} has {columns} columns, the word in column 1")
    return tag_column


def to_bio(tags: Sequence[str]) -> list[str]:
    """IOB1 (or BIO) tags as BIO: an I-X after anything but B-X or I-X becomes B-X.

    Args:
        tags: a sentence's tags.

    Returns:
        The tags as BIO.
    """
    bio = []
    for index, tag in enumerate(tags):
        previous = tags[index - 1] if index else "O"
        if tag.startswith("I-") and previous[2:] != tag[2:]:
            tag = "B-" + tag[2:]
        bio.append(tag)
    return bio


def read_squad(path: Path, labelled: bool = True) -> list[QAExample]:
    """SQuAD v1.1 or v2.0 JSON: ``data[].paragraphs[].{context, qas[].{id, question, answers, is_impossible}}``.

    Args:
        path: the file.
        labelled: the questions are to train or score on; False (questions to answer): ``answers`` may be
            missing or empty.

    Returns:
        The questions.

    Raises:
        PLMError: invalid JSON, not SQuAD's layout, a missing or ill-typed field, an ``answer_start`` that does
            not point at its answer, a labelled question without answers that is not impossible, no questions,
            or
            a file that cannot be read as text (see [`read_text`][plm.data.corpus.read_text]).
    """
    document = json_document(path)
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise PLMError(f'{path}: not SQuAD JSON (no "data" list at the top)')
    examples = []
    for a, article in enumerate(document["data"]):
        for p, paragraph in enumerate(_field(article, "paragraphs", list, path, f"data[{a}]")):
            where = f"data[{a}].paragraphs[{p}]"
            context = _field(paragraph, "context", str, path, where)
            for q, question in enumerate(_field(paragraph, "qas", list, path, where)):
                where_q = f"{where}.qas[{q}]"
                question_id = str(_field(question, "id", (str, int), path, where_q))
                text_of_question = _field(question, "question", str, path, where_q)
                answers = []
                listed = _field(question, "answers", list, path, where_q) if labelled or "answers" in question else []
                for n, answer in enumerate(listed):
                    text = _field(answer, "text", str, path, f"{where_q}.answers[{n}]")
                    start = answer.get("answer_start")
                    if start is not None and not _points_at(context, start, text):
                        raise PLMError(f"{path}: {where_q}.answers[{n}]: answer_start {start} does not point at "
                                       f"{text!r} in the context")
                    answers.append(Answer(text, start))
                impossible = bool(question.get("is_impossible", False))
                if not answers and not impossible and labelled:
                    raise PLMError(f"{path}: {where_q}: no answers, and is_impossible is not set")
                examples.append(QAExample(question_id, text_of_question, context, tuple(answers), impossible))
    return _nonempty(examples, path)


SWAG_ENDINGS = ("ending0", "ending1", "ending2", "ending3")


def read_swag(path: Path) -> list[ChoiceExample]:
    """SWAG CSV (``sent1``, ``sent2``, ``ending0``..``ending3``, ``label``); the test split has no label.

    Args:
        path: the file.

    Returns:
        The examples.

    Raises:
        PLMError: a header without SWAG's columns, a row with another number of fields, a label that is not
            0 to 3, no examples, or
            a file that cannot be read as text (see [`read_text`][plm.data.corpus.read_text]).
    """
    reader = csv.reader(io.StringIO(read_text(path)))
    header = next(reader)
    missing = [name for name in ("sent1", "sent2", *SWAG_ENDINGS) if name not in header]
    if missing:
        raise PLMError(f"{path}:1: the header lacks {', '.join(missing)}; not a SWAG CSV")
    column = {name: header.index(name) for name in header}
    examples = []
    for row in reader:
        number = reader.line_num
        if not row:
            continue
        if len(row) != len(header):
            raise PLMError(f"{path}:{number}: {len(row)} fields, the header has {len(header)}")
        label = None
        if "label" in column:
            text = row[column["label"]]
            if text not in ("0", "1", "2", "3"):
                raise PLMError(f"{path}:{number}: label {text!r} is not 0, 1, 2 or 3")
            label = int(text)
        endings = tuple(row[column[name]] for name in SWAG_ENDINGS)
        examples.append(ChoiceExample(row[column["sent1"]], row[column["sent2"]], endings, label))
    return _nonempty(examples, path)


def _points_at(context: str, start: Any, text: str) -> bool:
    """Whether the answer starts at ``start``; case may differ (some copies of SQuAD changed a heading's case)."""
    return isinstance(start, int) and context[start : start + len(text)].lower() == text.lower()


def _label(text: str, regression: bool, path: Path, number: int) -> str | float:
    if not regression:
        if not text.strip():
            raise PLMError(f"{path}:{number}: empty label")
        return text.strip()
    try:
        return float(text)
    except ValueError:
        raise PLMError(f"{path}:{number}: label {text!r} is not a number (this task is a regression)") from None




def _field(row: Any, name: str, kind: type | tuple[type, ...], path: Path, where: str) -> Any:
    if not isinstance(row, dict) or not isinstance(row.get(name), kind):
        raise PLMError(f'{path}: {where}: missing or ill-typed "{name}"')
    return row[name]


def _nonempty(examples: list, path: Path | str) -> list:
    if not examples:
        raise PLMError(f"{path}: no examples in the file")
    return examples


def read_examples(
    task: str, path: Path, tag_column: int | None = None, labelled: bool = True, document_context: bool = False
) -> list[Any]:
    """The examples of ``path`` for ``task``: CoNLL, SQuAD JSON, SWAG CSV; GLUE TSV (.tsv) or JSONL otherwise.

    Unlabelled (``labelled`` False), a ``.txt`` file or ``-`` (stdin) is plain text, one input a line
    ([`read_lines`][plm.tasks.readers.read_lines]).

    CoNLL: the tags of ``tag_column`` (see [`read_conll_layout`][plm.tasks.readers.read_conll_layout]), and a note on
    stderr says which column that was.

    Args:
        task: the task (see `TASKS`): tag reads CoNLL, qa SQuAD JSON, choice
            SWAG CSV, the others GLUE TSV or JSONL.
        path: the file.
        tag_column: tag: the (1-based) column of the tags; None: the layout's last.
        labelled: False: examples to predict, not to train on (qa: questions without answers; plain text).
        document_context: tag: each sentence with its CoNLL document (see
            [`read_conll_layout`][plm.tasks.readers.read_conll_layout]).

    Returns:
        The examples (this module's classes).

    Raises:
        PLMError: a file that cannot be read as the task's format, naming the file and the line; document context
            asked of a task other than tag, or of plain text.
    """
    plain = not labelled and (str(path) == "-" or pathlib.Path(path).suffix == ".txt")
    if document_context and (task != "tag" or plain):
        raise PLMError(f"`document_context` reads CoNLL documents: it is for `task` tag's CoNLL files, not {path} "
                       f"({task})")
    if plain:
        text = sys.stdin.read() if str(path) == "-" else read_text(path)
        return read_lines(task, text, "stdin" if str(path) == "-" else str(path))
    if task == "tag":
        sentences, column, columns = read_conll_layout(pathlib.Path(path), tag_column, document_context)
        print(f"{path}: tags from column {column} of {columns}", file=sys.stderr)
        return sentences
    if task == "qa":
        return read_squad(pathlib.Path(path), labelled)
    if task == "choice":
        return read_swag(pathlib.Path(path))
    read = read_glue if str(path).endswith(".tsv") else read_jsonl
    return read(path, regression=task == "regress")
