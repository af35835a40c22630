"""Every bad input is one line on stderr, exit code 2, and nothing written or overwritten.

The table runs the real commands in-process on tiny saved models (a gpt2-micro with a
byte-level BPE and a bert-micro with an MLM head and WordPiece) and broken copies of
them. Each case names the fragment its message must contain; the workspace is
snapshotted around each command, so a file created, changed or left behind (a
temporary one too) anywhere in it fails the case.
"""

from __future__ import annotations

import argparse
import errno
import gzip
import json
import os
import shutil
import tempfile
from pathlib import Path

import pyarrow
import pytest
from pyarrow import parquet
from safetensors.torch import load_file, save_file

from plm.cli.main import build_parser, main
from plm.config import config_from_dict, config_to_dict
from plm.data.prepare import PrepareOptions, prepare_corpus
from plm.errors import PLMError
from plm.models import PRESETS, from_config, from_preset, preset_config, with_heads
from plm.storage.checkpoint import load_model, save_model
from plm.tokenization.tokenizer import Tokenizer
from tests.conftest import full_disk, synthetic_text

TINY_RUN = ["--model", "gpt2-micro", "--vocab-size", "300", "--block-size", "32", "--batch-size", "4",
            "--warmup", "2", "--no-progress", "--device", "cpu"]


def copy_with_config(workspace: Path, source: str, name: str, edit) -> None:
    """A copy of model directory ``source`` whose config.json ``edit`` changed in place."""
    shutil.copytree(workspace / source, workspace / name)
    description = json.loads((workspace / name / "config.json").read_text())
    edit(description)
    (workspace / name / "config.json").write_text(json.dumps(description))


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bad-inputs")
    text = synthetic_text()
    (root / "text.txt").write_text(text)
    bpe = Tokenizer.train_bpe([text], 300)
    save_model(from_preset("gpt2-micro", vocab_size=len(bpe)), root / "gpt", bpe)
    wordpiece = Tokenizer.train_wordpiece([text], 300)
    bert = with_heads(preset_config("bert-micro", vocab_size=len(wordpiece)), "mlm")
    save_model(from_config(bert), root / "bert", wordpiece)

    # Tokenizers with more tokens than their model has embeddings.
    save_model(from_preset("gpt2-micro", vocab_size=len(bpe) - 10), root / "gpt-small-vocab", bpe)
    small_bert = with_heads(preset_config("bert-micro", vocab_size=len(wordpiece) - 10), "mlm")
    save_model(from_config(small_bert), root / "bert-small-vocab", wordpiece)

    # Weights changed after saving: the header still parses, the data is different.
    shutil.copytree(root / "gpt", root / "tampered")
    weights = bytearray((root / "tampered" / "model.safetensors").read_bytes())
    weights[-100:-96] = bytes(255 - b for b in weights[-100:-96])
    (root / "tampered" / "model.safetensors").write_bytes(bytes(weights))

    # Broken config.json files.
    copy_with_config(root, "gpt", "config-type", lambda d: d["config"].update(layers="two"))
    copy_with_config(root, "gpt", "config-null", lambda d: d["config"].update(heads=None))
    copy_with_config(root, "gpt", "config-missing", lambda d: d["config"].pop("dim"))
    copy_with_config(root, "gpt", "config-float", lambda d: d["config"].update(dropout="0.1"))
    copy_with_config(root, "gpt", "config-bool", lambda d: d["config"].update(norm_first=1))
    copy_with_config(root, "gpt", "config-zero", lambda d: d["config"].update(layers=0))
    copy_with_config(root, "gpt", "config-dropout", lambda d: d["config"].update(attention_dropout=2.0))
    copy_with_config(root, "gpt", "config-extra", lambda d: d["config"].update(colour="blue"))
    copy_with_config(root, "gpt", "config-family", lambda d: d.update(family="gpt5"))
    copy_with_config(root, "gpt", "config-list", lambda d: d.update(config=[1, 2]))
    copy_with_config(root, "bert", "config-tuple", lambda d: d["config"].update(pretraining_heads="mlm"))
    copy_with_config(root, "bert", "config-optional", lambda d: d["config"].update(embedding_dim="wide"))

    # The inputs of the first bad-input table (empty, non-UTF-8, truncated, another architecture).
    (root / "empty.txt").write_text("")
    (root / "latin1.txt").write_bytes("caf\u00e9 au lait".encode("latin-1"))
    shutil.copytree(root / "gpt", root / "truncated")
    weights = (root / "gpt" / "model.safetensors").read_bytes()
    (root / "truncated" / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    copy_with_config(root, "gpt", "other", lambda d: d["config"].update(layers=3))

    (root / "binary.txt").write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00" + bytes(range(256)) * 4)
    (root / "control.txt").write_bytes(b"\x1b\x01\x02 ok \x03\x04\x05\x06\x07\x08\x0e\x0f\x10\n" * 20)
    (root / "somefile.txt").write_text("a file, not a directory\n")
    (root / "not-empty").mkdir()
    (root / "not-empty" / "notes.txt").write_text("keep me\n")
    (root / "a-directory").mkdir()
    (root / "gap.txt").write_text("the first line\n\nthe third line\n")
    (root / "empty-sentence.tsv").write_text("sentence\tlabel\na good film\t1\n\t0\n")

    # Corpora in the formats plm data prepare reads, broken; prepared corpora, finished or not.
    (root / "cut.txt.gz").write_bytes(gzip.compress(text.encode())[:-30])
    (root / "list.jsonl").write_text('{"text": "fine"}\n["not", "an", "object"]\n')
    (root / "fields.jsonl").write_text('{"body": "the text is here"}\n')
    parquet.write_table(pyarrow.table({"content": ["a row"]}), root / "rows.parquet")
    (root / "glob").mkdir()
    (root / "glob" / "a.txt").write_text("fine\n")
    (root / "glob" / "b.txt").write_bytes("one\n\ntwo caf\u00e9\n".encode("latin-1"))
    prepare_corpus([root / "text.txt"], bpe, root / "prepared-gpt", options=PrepareOptions(progress=False))
    (root / "unfinished").mkdir()
    (root / ".unfinished.preparing").mkdir()
    return root


MESSAGE_TOO_BIG_GPT = "the tokenizer has 300 tokens but the model only 290 embeddings"

# id: (argv with {w} for the workspace, the fragment the one line must contain)
CASES = {
    # From the first table: unreadable text, unknown names, broken or foreign checkpoints.
    "empty": (["pretrain", *TINY_RUN, "--train", "{w}/empty.txt", "--out", "{w}/run"], "empty.txt: the file is empty"),
    "not utf-8": (["pretrain", *TINY_RUN, "--train", "{w}/latin1.txt", "--out", "{w}/run"],
                  "latin1.txt:1: not valid UTF-8 at byte 3 (0xe9)"),
    "missing": (["pretrain", *TINY_RUN, "--train", "{w}/nope.txt", "--out", "{w}/run"], "nope.txt: no such file"),
    "preset": (["pretrain", "--model", "gpt5", "--out", "{w}/run"], "unknown preset 'gpt5'"),
    "block size": (["pretrain", *TINY_RUN, "--block-size", "100", "--train", "{w}/text.txt", "--out", "{w}/run"],
                   "--block-size 100 exceeds the model's context of 64 tokens"),
    "no model": (["generate", "--model", "{w}/nowhere", "x"], "nowhere: no such model directory"),
    "truncated": (["generate", "--model", "{w}/truncated", "x"],
                  "model.safetensors: not a readable safetensors file, perhaps truncated"),
    "mismatched": (["generate", "--model", "{w}/other", "x"], "weights do not fit a GPT of this config"),
    "long prompt": (["generate", "--model", "{w}/gpt", "cat " * 80], "but the model's context is 64"),
    "prompt fills the context": (["generate", "--model", "{w}/gpt", "cat " * 80, "--max-prompt-tokens", "64"],
                                 "prompt of 64 tokens fills the model's context of 64"),
    # config.json
    "config wrong type": (["generate", "--model", "{w}/config-type", "x"],
                          "config.json: field 'layers' should be an integer, got the string \"two\""),
    "config null": (["generate", "--model", "{w}/config-null", "x"],
                    "config.json: field 'heads' should be an integer, got null"),
    "config missing field": (["generate", "--model", "{w}/config-missing", "x"],
                             "config.json: GPTConfig field(s) dim missing"),
    "config float as string": (["generate", "--model", "{w}/config-float", "x"],
                               "field 'dropout' should be a number, got the string \"0.1\""),
    "config int for bool": (["generate", "--model", "{w}/config-bool", "x"],
                            "field 'norm_first' should be true or false, got the number 1"),
    "config zero layers": (["generate", "--model", "{w}/config-zero", "x"], "field 'layers' should be positive, got 0"),
    "config dropout": (["generate", "--model", "{w}/config-dropout", "x"],
                       "field 'attention_dropout' should be a probability between 0 and 1, got 2.0"),
    "config unknown field": (["generate", "--model", "{w}/config-extra", "x"], "unknown GPTConfig field(s) colour"),
    "config unknown family": (["generate", "--model", "{w}/config-family", "x"], "unknown model family 'gpt5'"),
    "config not an object": (["generate", "--model", "{w}/config-list", "x"],
                             "GPTConfig should be a JSON object, got the list [1, 2]"),
    "config tuple": (["fill-mask", "--model", "{w}/config-tuple", "[MASK]"],
                     "field 'pretraining_heads' should be a list of strings, got the string \"mlm\""),
    "config optional": (["embed", "--model", "{w}/config-optional", "x"],
                        "field 'embedding_dim' should be an integer or null, got the string \"wide\""),
    # A tokenizer with ids past the embedding table.
    "vocab generate": (["generate", "--model", "{w}/gpt-small-vocab", "x"], MESSAGE_TOO_BIG_GPT),
    "vocab perplexity": (["eval", "perplexity", "--model", "{w}/gpt-small-vocab", "{w}/text.txt"], MESSAGE_TOO_BIG_GPT),
    "vocab fill-mask": (["fill-mask", "--model", "{w}/bert-small-vocab", "[MASK]"], "tokens but the model only"),
    "vocab embed": (["embed", "--model", "{w}/bert-small-vocab", "x"], "tokens but the model only"),
    "model is a file": (["generate", "--model", "{w}/text.txt", "x"], "text.txt: a file, not a model directory"),
    "vocab convert": (["convert", "--model", "{w}/gpt-small-vocab", "--out", "{w}/converted"], MESSAGE_TOO_BIG_GPT),
    "vocab convert gguf": (["convert", "--model", "{w}/gpt-small-vocab", "--to", "gguf", "--out", "{w}/m.gguf"],
                           f"gpt-small-vocab: {MESSAGE_TOO_BIG_GPT}"),
    # Weights changed after they were saved.
    "tampered generate": (["generate", "--model", "{w}/tampered", "x"],
                          "tampered/model.safetensors: the tensor data does not match the checksum"),
    "tampered convert": (["convert", "--model", "{w}/tampered", "--out", "{w}/converted"],
                         "tampered/model.safetensors: the tensor data does not match the checksum"),
    # Output paths.
    "embed out no directory": (["embed", "--model", "{w}/bert", "x", "--out", "{w}/nodir/e.npy"],
                               "nodir: no such directory (for --out"),
    "embed out under a file": (["embed", "--model", "{w}/bert", "x", "--out", "{w}/somefile.txt/e.npy"],
                               "somefile.txt: is not a directory"),
    "embed out is a directory": (["embed", "--model", "{w}/bert", "x", "--out", "{w}/a-directory"],
                                 "a-directory: is a directory; --out names the file"),
    "json is a directory": (["eval", "perplexity", "--model", "{w}/gpt", "{w}/text.txt", "--json", "{w}/a-directory"],
                            "a-directory: is a directory; --json names the file"),
    "predictions no directory": (["eval", "translate", "--model", "{w}/gpt", "--src", "{w}/text.txt", "--ref",
                                  "{w}/text.txt", "--predictions", "{w}/nodir/p.txt"],
                                 "nodir: no such directory (for --predictions"),
    "convert out under a file": (["convert", "--model", "{w}/gpt", "--out", "{w}/somefile.txt/sub"],
                                 "somefile.txt: is a file, not a directory (for --out"),
    "convert out not empty": (["convert", "--model", "{w}/gpt", "--out", "{w}/not-empty"],
                              "not-empty: the directory is not empty; choose another --out or pass --overwrite"),
    "convert out is the model": (["convert", "--model", "{w}/gpt", "--out", "{w}/gpt", "--overwrite"],
                                 "gpt: is the model being read"),
    "tokenizer out under a file": (["tokenizer", "train", "{w}/text.txt", "--out", "{w}/somefile.txt/tok"],
                                   "somefile.txt: is a file, not a directory"),
    # Flag values.
    "fill-mask guesses": (["fill-mask", "--model", "{w}/bert", "the [MASK] reads", "--guesses", "100000"],
                          "--guesses must be between 1 and the vocabulary's"),
    "fill-mask no mask": (["fill-mask", "--model", "{w}/bert", "the cat reads"],
                          "the text has no mask token; write [MASK]"),
    "fill-mask mask cut off": (["fill-mask", "--model", "{w}/bert", "the cat reads the book. " * 20 + "[MASK]"],
                               "longer than the model's context of 64 tokens and is cut before its mask token"),
    "temperature zero": (["generate", "--model", "{w}/gpt", "x", "--temperature", "0"],
                         "temperature must be a positive number, got 0.0"),
    "temperature nan": (["generate", "--model", "{w}/gpt", "x", "--temperature", "nan"],
                        "temperature must be a positive number, got nan"),
    "top-p zero": (["generate", "--model", "{w}/gpt", "x", "--top-p", "0"], "top_p must be in (0, 1], got 0.0"),
    "top-p above one": (["generate", "--model", "{w}/gpt", "x", "--top-p", "1.5"], "top_p must be in (0, 1], got 1.5"),
    "top-k negative": (["generate", "--model", "{w}/gpt", "x", "--top-k", "-1"], "top_k must be >= 0, got -1"),
    "repetition penalty nan": (["generate", "--model", "{w}/gpt", "x", "--repetition-penalty", "nan"],
                               "repetition_penalty must be a positive number, got nan"),
    "max-new-tokens too many": (["generate", "--model", "{w}/gpt", "x", "--max-new-tokens", "64"],
                                "plus 64 new tokens exceeds the model's context of 64"),
    "window beyond context": (["eval", "perplexity", "--model", "{w}/gpt", "{w}/text.txt", "--window", "65"],
                              "window 65 exceeds the model's context of 64 tokens"),
    "window of one": (["eval", "perplexity", "--model", "{w}/gpt", "{w}/text.txt", "--window", "1"],
                      "window must be at least 2"),
    "stride equals window": (["eval", "perplexity", "--model", "{w}/gpt", "{w}/text.txt",
                              "--window", "32", "--stride", "32"],
                             "stride must be between 1 and window - 1 (31), got 32"),
    # Corpora of every format, and prepared corpora.
    "truncated gz": (["pretrain", *TINY_RUN, "--train", "{w}/cut.txt.gz", "--out", "{w}/run"],
                     "cut.txt.gz: truncated or corrupt gzip file"),
    "jsonl not an object": (["data", "prepare", "{w}/list.jsonl", "--tokenizer", "{w}/gpt", "--out", "{w}/prepared"],
                            'list.jsonl:2: expected a JSON object {...}, got the list ["not", "an", "object"]'),
    "jsonl without the field": (["pretrain", *TINY_RUN, "--train", "{w}/fields.jsonl", "--out", "{w}/run"],
                                "fields.jsonl:1: no field 'text' (the fields are body)"),
    "parquet without the column": (["data", "prepare", "{w}/rows.parquet", "--tokenizer", "{w}/gpt",
                                    "--out", "{w}/prepared"],
                                   "rows.parquet: no column 'text' (the columns are content)"),
    "not utf-8 in a glob": (["data", "prepare", "{w}/glob/*.txt", "--tokenizer", "{w}/gpt", "--out", "{w}/prepared"],
                            "b.txt:3: not valid UTF-8 at byte 12 (0xe9)"),
    "empty input": (["data", "prepare", "{w}/empty.txt", "--tokenizer", "{w}/gpt", "--out", "{w}/prepared"],
                    "empty.txt: the file is empty"),
    "unfinished prepare": (["pretrain", *TINY_RUN, "--data", "{w}/unfinished", "--out", "{w}/run"],
                           "unfinished: its prepare has not finished"),
    "prepared with another tokenizer": (["pretrain", *TINY_RUN, "--data", "{w}/prepared-gpt", "--tokenizer",
                                         "{w}/bert", "--out", "{w}/run"], "prepared-gpt: prepared with another "
                                        "tokenizer"),
    "prepare over a model": (["data", "prepare", "{w}/text.txt", "--tokenizer", "{w}/gpt", "--out", "{w}/bert"],
                             "bert: holds other files; choose another directory, or overwrite it"),
    # Binary files wherever text is read.
    "binary pretrain": (["pretrain", *TINY_RUN, "--train", "{w}/binary.txt", "--out", "{w}/run"],
                        "binary.txt:1: looks like a binary file (it has NUL bytes"),
    "binary tokenizer": (["tokenizer", "train", "{w}/binary.txt", "--out", "{w}/tok"],
                         "binary.txt:1: looks like a binary file"),
    "binary prompt file": (["generate", "--model", "{w}/gpt", "--prompt-file", "{w}/binary.txt"],
                           "binary.txt: looks like a binary file"),
    "binary embed file": (["embed", "--model", "{w}/bert", "--file", "{w}/binary.txt"],
                          "binary.txt: looks like a binary file"),
    "binary perplexity": (["eval", "perplexity", "--model", "{w}/gpt", "{w}/binary.txt"],
                          "binary.txt:1: looks like a binary file (it has NUL bytes"),  # read as --train reads it
    # Inputs that lose the line-by-line correspondence or train on nothing.
    "overlap empty training file": (["overlap", "--train", "{w}/empty.txt", "--test", "{w}/text.txt"],
                                    "empty.txt: the file is empty: no words to compare"),
    "overlap empty test file": (["overlap", "--train", "{w}/text.txt", "--test", "{w}/empty.txt"],
                                "empty.txt: the file is empty: no words to compare"),
    "elmo embed empty line": (["elmo", "embed", "--model", "{w}/gpt", "{w}/gap.txt", "--out", "{w}/gap.npy"],
                              "gap.txt:2: an empty line; the vectors are one row per line"),
    "embed empty line": (["embed", "--model", "{w}/bert", "--file", "{w}/gap.txt", "--out", "{w}/gap.npy"],
                         "gap.txt:2: empty line; every line must hold one sentence"),
    "empty tsv sentence": (["finetune", "--task", "classify", "--model", "{w}/bert",
                            "--train", "{w}/empty-sentence.tsv", "--validation", "{w}/empty-sentence.tsv",
                            "--out", "{w}/ft"],
                           "empty-sentence.tsv:3: an empty sentence in column 'sentence'"),
    "control characters": (["eval", "perplexity", "--model", "{w}/gpt", "{w}/control.txt"],
                           "control.txt: looks like a binary file (71% control characters)"),
}


def snapshot(root: Path) -> dict[str, tuple[int, int] | None]:
    """Every file (size, modification time) and directory under ``root``."""
    return {
        str(path.relative_to(root)): (path.stat().st_size, path.stat().st_mtime_ns) if path.is_file() else None
        for path in root.rglob("*")
    }


def run_failing(argv: list[str], capsys: pytest.CaptureFixture, workspace: Path) -> str:
    """Run ``plm argv``; check exit code 2, one line on stderr, no traceback, nothing written. The line."""
    before = snapshot(workspace)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.endswith("\n") and "Traceback" not in err, err
    assert snapshot(workspace) == before, "the command wrote into the workspace"
    return err


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    case: str, workspace: Path, capsys: pytest.CaptureFixture
) -> None:
    argv, message = CASES[case]
    err = run_failing([arg.replace("{w}", str(workspace)) for arg in argv], capsys, workspace)
    assert message in err


@pytest.mark.parametrize(
    "argv, target",
    [
        (["embed", "--model", "{w}/bert", "a sentence", "--out", "{w}/full.npy"], "full.npy"),
        (["convert", "--model", "{w}/gpt", "--out", "{w}/a-directory"], "a-directory/model.safetensors"),
        (["tokenizer", "train", "{w}/text.txt", "--out", "{w}/a-directory", "--vocab-size", "300"],
         "a-directory/tokenizer.json"),
    ],
)
def test_a_full_disk_names_the_file_and_leaves_no_temporary_file(
    argv: list[str], target: str, workspace: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    full_disk(monkeypatch)
    err = run_failing([arg.replace("{w}", str(workspace)) for arg in argv], capsys, workspace)
    assert f"{workspace / target}: cannot write (No space left on device)" in err


def test_an_unwritable_directory_names_the_file(
    workspace: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    read_only = workspace / "read-only"
    read_only.mkdir(exist_ok=True)
    read_only.chmod(0o500)
    if os.geteuid() == 0:  # root writes there anyway: refuse the file the way the kernel would refuse others

        def mkstemp(*args, dir: str, **kwargs):
            raise PermissionError(errno.EACCES, "Permission denied", str(Path(dir) / "temporary"))

        monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    try:
        err = run_failing(["embed", "--model", str(workspace / "bert"), "x", "--out", str(read_only / "e.npy")],
                          capsys, workspace)
    finally:
        read_only.chmod(0o700)
    assert f"{read_only / 'e.npy'}: cannot write (Permission denied)" in err


def test_an_os_error_the_library_did_not_expect_is_one_line_naming_the_file(
    workspace: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(workspace / "gpt" / "tokenizer.json"))

    monkeypatch.setattr(Tokenizer, "load", refuse)
    err = run_failing(["generate", "--model", str(workspace / "gpt"), "x"], capsys, workspace)
    assert err == f"plm generate: error: {workspace / 'gpt' / 'tokenizer.json'}: Permission denied\n"


def test_convert_overwrite_replaces_the_directory_whole(workspace: Path, tmp_path: Path, capsys) -> None:
    """A BERT's vocab.txt left beside a converted GPT-2 would make the directory read as another model."""
    out = tmp_path / "hf"
    assert main(["convert", "--model", str(workspace / "bert"), "--out", str(out)]) == 0
    (out / "vocab.txt").write_text("[PAD]\n[UNK]\n")  # as a BERT checkpoint from the Hub holds beside its weights
    assert main(["convert", "--model", str(workspace / "gpt"), "--out", str(out), "--overwrite"]) == 0
    assert json.loads((out / "config.json").read_text())["model_type"] == "gpt2"
    fresh = tmp_path / "fresh"
    assert main(["convert", "--model", str(workspace / "gpt"), "--out", str(fresh)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in fresh.iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh", "hf"]  # no staging or previous directory left


def test_generate_fits_its_default_length_to_the_context(workspace: Path, capsys: pytest.CaptureFixture) -> None:
    prompt = "The cat reads the book"
    room = 64 - len(Tokenizer.load(workspace / "gpt").encode(prompt))
    code = main(["generate", "--model", str(workspace / "gpt"), prompt])
    captured = capsys.readouterr()
    assert code == 0 and captured.out.startswith(prompt)
    assert captured.err == (
        f"plm generate: note: generated at most {room} new tokens, the room the model's context of 64 leaves "
        "after the prompt (--max-new-tokens to choose)\n"
    )


def test_weights_saved_without_a_checksum_still_load(workspace: Path, tmp_path: Path) -> None:
    shutil.copytree(workspace / "gpt", tmp_path / "gpt")
    weights = tmp_path / "gpt" / "model.safetensors"
    save_file(load_file(weights), weights, metadata={"format": "pt"})  # as another program (or older plm) writes it
    original, reloaded = load_model(workspace / "gpt"), load_model(tmp_path / "gpt")
    for name, tensor in original.state_dict().items():
        assert reloaded.state_dict()[name].equal(tensor), name


def test_a_changed_tensor_is_caught_by_the_checksum(workspace: Path, tmp_path: Path) -> None:
    shutil.copytree(workspace / "gpt", tmp_path / "gpt")
    weights = tmp_path / "gpt" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    length = int.from_bytes(data[:8], "little")
    begin, _ = json.loads(data[8 : 8 + length])["final_norm.weight"]["data_offsets"]
    data[8 + length + begin] ^= 0x01  # the lowest mantissa bit of a LayerNorm gain: 1.0 -> 1.0000001
    weights.write_bytes(bytes(data))
    assert load_file(weights)["final_norm.weight"][0].item() != 1.0  # safetensors itself reads it happily
    with pytest.raises(PLMError, match="model.safetensors: the tensor data does not match the checksum"):
        load_model(tmp_path / "gpt")


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_config_survives_json_and_validation(name: str) -> None:
    config = PRESETS[name]
    values = json.loads(json.dumps(config_to_dict(config)))
    assert config_from_dict(type(config), values, "config.json", complete=True) == config


def all_parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                yield from all_parsers(subparser)


def test_help_shows_each_default_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # each option's help on one line
    parsers = list(all_parsers(build_parser()))
    expected = {"plm pretrain", "plm generate", "plm tokenizer train", "plm eval perplexity"}
    assert {parser.prog for parser in parsers} >= expected
    for parser in parsers:
        text = parser.format_help()
        assert "(default: None)" not in text and "(default: [])" not in text and "(default: False)" not in text, (
            parser.prog
        )
        for line in text.splitlines():
            assert line.count("default") <= 1, (parser.prog, line)
