"""plm eval lambada / cloze / summarize from the command line: a table, --json, and one-line errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

import plm
from plm.apps.zeroshot.cloze import evaluate_cloze
from plm.apps.zeroshot.evaluation import ZeroShotOptions
from plm.apps.zeroshot.lambada import evaluate_lambada
from plm.cli.main import main
from tests.apps.zeroshot_stubs import tokenizer


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tok = tokenizer()
    torch.manual_seed(0)
    model = plm.from_preset("gpt2-micro", vocab_size=len(tok))
    return plm.save(model, tmp_path_factory.mktemp("gpt") / "model", tok)


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_lambada_prints_a_table_and_writes_the_library_numbers(model_dir: Path, tmp_path: Path, capsys) -> None:
    data = write_jsonl(
        tmp_path / "lambada.jsonl", [{"text": "The cat reads the book"}, {"text": "A dog sees the answer"}]
    )
    out = tmp_path / "lambada.json"
    assert main(["eval", "lambada", "--model", str(model_dir), str(data), "--json", str(out), "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert "LAMBADA" in printed and "accuracy" in printed and "perplexity" in printed
    assert re.search(r"\n  passages +2\n", printed) and re.search(r"\n  stop_word_filter +no\n", printed)
    model, tok = plm.load_pretrained(model_dir)
    assert json.loads(out.read_text()) == pytest.approx(evaluate_lambada(ZeroShotOptions(model, tok), data).as_dict())


def test_cloze_with_partial_scoring_writes_the_library_numbers(model_dir: Path, tmp_path: Path) -> None:
    data = write_jsonl(
        tmp_path / "wsc.jsonl", [{"query": "The cat _ the book.", "options": ["reads", "sees"], "answer": 0}]
    )
    out = tmp_path / "wsc.json"
    args = ["eval", "cloze", "--model", str(model_dir), str(data), "--scoring", "partial", "--blank", "_",
            "--json", str(out)]
    assert main(args) == 0
    model, tok = plm.load_pretrained(model_dir)
    expected = evaluate_cloze(ZeroShotOptions(model, tok), data, "partial", "_").as_dict()
    assert json.loads(out.read_text()) == pytest.approx(expected)


def test_summarize_writes_rouge_and_the_summaries(model_dir: Path, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "news.jsonl", [{"article": "The cat reads the book.", "summary": "A cat reads."}])
    out, summaries = tmp_path / "rouge.json", tmp_path / "summaries.json"
    args = ["eval", "summarize", "--model", str(model_dir), str(data), "--max-new-tokens", "8", "--json", str(out),
            "--predictions", str(summaries)]
    assert main(args) == 0
    numbers = json.loads(out.read_text())
    assert set(numbers) == {"rouge1", "rouge2", "rougeL", "articles"} and numbers["articles"] == 1
    assert len(json.loads(summaries.read_text())) == 1


@pytest.mark.parametrize("task", ["lambada", "cloze", "summarize"])
def test_a_malformed_row_is_one_line_naming_file_and_line_and_exit_code_2(
    model_dir: Path, tmp_path: Path, capsys, task
) -> None:
    data = tmp_path / "bad.jsonl"
    data.write_text("\n\n{oops\n", encoding="utf-8")
    assert main(["eval", task, "--model", str(model_dir), str(data)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.jsonl:3: not valid JSON" in err


@pytest.mark.parametrize("task", ["lambada", "cloze", "summarize"])
def test_every_task_has_help_with_its_input_format(task: str, capsys) -> None:
    with pytest.raises(SystemExit):
        main(["eval", task, "--help"])
    text = capsys.readouterr().out
    assert "examples:" in text and "JSONL" in text


def test_perplexity_with_wikitext_detokenising_prints_and_writes_per_word_numbers(
    model_dir: Path, tmp_path: Path, capsys
) -> None:
    data = tmp_path / "wiki.txt"
    data.write_text(" = The cat = \n The cat reads the book , a dog sees the answer . \n", encoding="utf-8")
    out = tmp_path / "ppl.json"
    assert main(["eval", "perplexity", "--model", str(model_dir), str(data), "--detokenize", "wikitext",
                 "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    model, tok = plm.load_pretrained(model_dir)
    expected = plm.file_perplexity(model, tok, str(data), detokenize="wikitext").as_dict()
    assert json.loads(out.read_text()) == pytest.approx(expected)
    assert expected["words"] == 16 and expected["bytes"] == len(  # the one document: its end-of-text ends it
        "= The cat =\nThe cat reads the book, a dog sees the answer."
    )
    assert "word_perplexity" in printed and "per word" in printed
