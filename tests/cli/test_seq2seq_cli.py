"""The seq2seq commands end to end on tiny data: train, translate, eval bleu, attention; bad input: one line, exit 2."""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path

import pytest

from plm import progress
from plm.apps.translation import load_seq2seq
from plm.cli.main import main
from plm.decoding import GenerationConfig, beam_search
from plm.training.train_seq2seq import Seq2SeqSetup, prepare_seq2seq
from plm.training.trainer import TrainingConfig
from tests.conftest import DATE_PAIRS


@pytest.fixture(scope="module")
def trained(date_pair_files: Path) -> Path:
    """An RNN with Bahdanau attention after two steps on date pairs (too few to learn; enough to run),
    in ``run`` beside the pairs' src.txt and tgt.txt."""
    folder = date_pair_files
    code = main(["seq2seq", "train", "--model", "rnn-bahdanau", "--src", str(folder / "src.txt"), "--tgt",
                 str(folder / "tgt.txt"), "--vocab-size", "300", "--max-tokens", "256", "--steps", "2",
                 "--metric-examples", "1", "--out", str(folder / "run"), "--no-progress", "--device", "cpu"])
    assert code == 0
    return folder


def test_train_prints_held_out_scores_and_draws_the_attention(trained: Path, capsys: pytest.CaptureFixture) -> None:
    assert (trained / "run" / "checkpoint" / "model.safetensors").is_file()
    assert (trained / "run" / "attention.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_translate_reads_stdin_and_writes_one_line_per_sentence(trained: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("3 May 1999\nthe first of June, two thousand\n"))
    assert main(["translate", "--model", str(trained / "run"), "--beam", "2", "--max-len-a", "0", "--max-len-b", "3",
                 "--device", "cpu"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_eval_bleu_prints_bleu_chrf_and_exact_match(trained: Path, capsys) -> None:
    code = main(["eval", "bleu", "--model", str(trained / "run"), "--src", str(trained / "src.txt"), "--ref",
                 str(trained / "tgt.txt"), "--max-len-a", "0", "--max-len-b", "3", "--device", "cpu"])
    assert code == 0
    assert (
        "BLEU" in (out := capsys.readouterr().out) and "chrF" in out and "exact match" in out and "24 sentences" in out
    )


@pytest.mark.parametrize("command", ["translate", "eval bleu"])
def test_a_progress_bar_counts_the_sentences_unless_no_progress(trained: Path, capsys, monkeypatch, command) -> None:
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0)  # captured stderr is no terminal: the bar's lines, at once
    files = ([str(trained / "src.txt")] if command == "translate"
             else ["--src", str(trained / "src.txt"), "--ref", str(trained / "tgt.txt")])
    argv = [*command.split(), "--model", str(trained / "run"), *files, "--max-len-a", "0", "--max-len-b", "3",
            "--device", "cpu"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "translate: 100%" in err and "24/24" in err
    assert main([*argv, "--no-progress"]) == 0
    assert capsys.readouterr().err == ""


def test_eval_bleu_writes_the_printed_scores_to_json(trained: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "scores.json"
    code = main(["eval", "bleu", "--model", str(trained / "run"), "--src", str(trained / "src.txt"), "--ref",
                 str(trained / "tgt.txt"), "--max-len-a", "0", "--max-len-b", "3", "--json", str(out),
                 "--device", "cpu"])
    assert code == 0
    printed = re.search(r"BLEU (\S+)  chrF (\S+)  exact match (\S+%) \((\d+) sentences\)", capsys.readouterr().out)
    written = json.loads(out.read_text(encoding="utf-8"))
    assert [f"{written['bleu']:.2f}", f"{written['chrf']:.2f}", f"{written['exact_match']:.2%}"] == list(
        printed.groups()[:3])  # BLEU and chrF 0-100; exact match a fraction, printed as a percentage
    assert 0 <= written["exact_match"] <= 1
    assert written["sentences"] == int(printed.group(4)) == 24
    assert (written["beam"], written["max_len_a"], written["max_len_b"]) == (1, 0.0, 3)  # the search with the scores


@pytest.fixture(scope="module")
def transformer_run(date_pair_files: Path) -> Path:
    """A Transformer after one step on date pairs: enough to decode."""
    out = date_pair_files / "transformer"
    code = main(["seq2seq", "train", "--model", "transformer-micro", "--src", str(date_pair_files / "src.txt"),
                 "--tgt", str(date_pair_files / "tgt.txt"), "--vocab-size", "300", "--steps", "1",
                 "--metric-examples", "0", "--out", str(out), "--no-progress", "--device", "cpu"])
    assert code == 0
    return out


def record_searches(monkeypatch: pytest.MonkeyPatch, command: str) -> list[GenerationConfig]:
    """Replace the translation a command calls by one that records the search it was asked for."""
    searches: list[GenerationConfig] = []

    def spy(model, tokenizers, sentences, config, **batching):
        searches.append(config)
        return ["x"] * len(sentences)

    monkeypatch.setattr(f"plm.cli.{command.replace('eval ', 'eval_')}.translate", spy)
    return searches


@pytest.mark.parametrize("command", ["translate", "eval bleu"])
@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        # Vaswani et al. section 6.1
        ([], GenerationConfig(num_beams=4, length_penalty=0.6, max_len_a=1.0, max_new_tokens=50)),
        (["--beam", "1"], GenerationConfig(num_beams=1, length_penalty=0.6, max_len_a=1.0, max_new_tokens=50)),
        (["--length-penalty", "1", "--max-len-a", "2", "--max-len-b", "7"],
         GenerationConfig(num_beams=4, length_penalty=1.0, max_len_a=2.0, max_new_tokens=7)),
    ],
)
def test_a_transformer_decodes_as_the_paper_unless_flags_say_otherwise(
    transformer_run: Path, date_pair_files: Path, monkeypatch, capsys, command, flags, expected
) -> None:
    searches = record_searches(monkeypatch, command)
    files = ([str(date_pair_files / "src.txt")] if command == "translate"
             else ["--src", str(date_pair_files / "src.txt"), "--ref", str(date_pair_files / "tgt.txt")])
    assert main([*command.split(), "--model", str(transformer_run), *files, *flags, "--device", "cpu"]) == 0
    assert searches == [expected]


@pytest.mark.parametrize(
    ("flags", "sampling"),
    [
        (["--sample"], {"do_sample": True, "seed": 0}),
        (["--temperature", "0.7", "--top-p", "0.9", "--seed", "3"], {"temperature": 0.7, "top_p": 0.9, "seed": 3}),
        (["--top-k", "5", "--max-len-b", "9"], {"top_k": 5, "seed": 0, "max_new_tokens": 9}),
    ],
)
def test_sampling_flags_replace_the_beam_by_one_draw_a_sentence(
    transformer_run: Path, date_pair_files: Path, monkeypatch, capsys, flags, sampling
) -> None:
    searches = record_searches(monkeypatch, "translate")
    assert main(["translate", "--model", str(transformer_run), str(date_pair_files / "src.txt"), *flags,
                 "--device", "cpu"]) == 0
    paper = {"length_penalty": 0.6, "max_len_a": 1.0, "max_new_tokens": 50}
    assert searches == [GenerationConfig(num_beams=1, **{**paper, **sampling})]


def test_a_sampled_translation_repeats_with_its_seed(trained: Path, capsys) -> None:
    def sampled(seed: str) -> list[str]:
        assert main(["translate", "--model", str(trained / "run"), str(trained / "src.txt"), "--sample", "--seed",
                     seed, "--no-progress", "--device", "cpu"]) == 0
        return capsys.readouterr().out.splitlines()

    first = sampled("1")
    assert len(first) == 24 and sampled("1") == first
    assert sampled("2") != first


def test_an_rnn_decodes_greedily_by_default(trained: Path, monkeypatch, capsys) -> None:
    searches = record_searches(monkeypatch, "translate")
    monkeypatch.setattr("sys.stdin", io.StringIO("3 May 1999\n"))
    assert main(["translate", "--model", str(trained / "run"), "--device", "cpu"]) == 0
    assert searches == [GenerationConfig(num_beams=1, length_penalty=0.6, max_len_a=1.5, max_new_tokens=10)]


def test_attention_writes_a_png(trained: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "map.png"
    assert main(["attention", "--model", str(trained / "run"), "4 July 1976", "--target", "1976-07-04",
                 "--out", str(out), "--device", "cpu"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "bahdanau attention" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["seq2seq", "train", "--src", "{src}", "--tgt", "{short}"],
         "has 24 lines but .* has 2: the files are not aligned"),
        (["seq2seq", "train", "--src", "{src}"], "--src and --tgt go together"),
        (["seq2seq", "train", "--model", "gpt2-micro"], "a gpt model is not an encoder-decoder"),
        (["pretrain", "--model", "rnn"], "is an encoder-decoder: train it on sentence pairs with plm seq2seq train"),
        (["translate", "--model", "{nowhere}"], "no such model directory"),
        (["attention", "--model", "{run}", "x", "--out", "{nowhere}/x.png"], "no such directory"),
        (["eval", "bleu", "--model", "{run}", "--src", "{src}", "--ref", "{short}"], "not aligned"),
        (["translate", "--model", "{run}", "x", "--max-len-a", "0", "--max-len-b", "0"], "leave no room for a single"),
        (["translate", "--model", "{run}", "x", "--sample", "--beam", "2"], "sampling draws one translation a "
         "sentence; give --beam 1, not 2"),
        (["translate", "--model", "{run}", "x", "--temperature", "0"], "temperature must be a positive number"),
        (["translate", "--model", "{run}", "{src}", "--beam", "100000"],
         "--beam 100000 is more than the .* target tokens"),
        (["finetune", "--task", "classify", "--model", "{run}", "--train", "{tsv}", "--validation", "{tsv}",
          "--out", "{nowhere}"], "rnn models take no task head"),
    ],
)
def test_bad_inputs_are_one_line_and_exit_2(trained: Path, tmp_path: Path, capsys, argv, message) -> None:
    (tmp_path / "short.txt").write_text("a\nb\n", encoding="utf-8")
    (tmp_path / "pairs.tsv").write_text("sentence\tlabel\n4 July 1976\t1\n5 May 1999\t0\n", encoding="utf-8")
    names = {"src": trained / "src.txt", "short": tmp_path / "short.txt", "nowhere": tmp_path / "nowhere",
             "run": trained / "run", "tsv": tmp_path / "pairs.tsv"}
    argv = [a.format(**names) for a in argv] + ["--device", "cpu"] * (argv[0] != "pretrain")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert re.search(message, err), err
    assert not (tmp_path / "runs").exists()


def test_a_pair_longer_than_the_transformers_context_is_left_out_with_a_note(tmp_path: Path, capsys) -> None:
    long_source = " ".join(["the first of May nineteen ninety-nine"] * 20)  # far past transformer-micro's 64 positions
    pairs = [(p.source, p.target) for p in DATE_PAIRS] + [(long_source, "1999-05-01")]
    (tmp_path / "src.txt").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    (tmp_path / "vsrc.txt").write_text(long_source + "\n" + DATE_PAIRS[0].source + "\n", encoding="utf-8")
    (tmp_path / "vtgt.txt").write_text("1999-05-01\n" + DATE_PAIRS[0].target + "\n", encoding="utf-8")
    code = main(["seq2seq", "train", "--model", "transformer-micro", "--src", str(tmp_path / "src.txt"),
                 "--tgt", str(tmp_path / "tgt.txt"), "--validation-src", str(tmp_path / "vsrc.txt"), "--validation-tgt",
                 str(tmp_path / "vtgt.txt"), "--vocab-size", "300", "--steps", "2", "--metric-examples", "2",
                 "--out", str(tmp_path / "run"), "--no-progress", "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "left out 1 training and 1 validation pairs longer than the model's context of 64 tokens" in err

    (tmp_path / "to-translate.txt").write_text(DATE_PAIRS[1].source + "\n" + long_source + "\n", encoding="utf-8")
    code = main(["translate", "--model", str(tmp_path / "run"), str(tmp_path / "to-translate.txt"), "--device", "cpu"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "sentence 2 is" in err and "the model reads at most 64" in err


def test_min_lr_is_where_a_cosine_decay_ends(date_pair_files: Path, tmp_path: Path) -> None:
    """The RNN recipe's floor is its peak (a constant rate), so --schedule cosine needs --min-lr to decay at all."""
    folder = date_pair_files
    code = main(["seq2seq", "train", "--model", "rnn", "--src", str(folder / "src.txt"),
                 "--tgt", str(folder / "tgt.txt"),
                 "--vocab-size", "300", "--max-tokens", "256", "--steps", "4", "--warmup", "0", "--schedule", "cosine",
                 "--lr", "1e-3", "--min-lr", "1e-4", "--log-every", "1", "--metric-examples", "0",
                 "--out", str(tmp_path / "run"), "--no-progress", "--device", "cpu"])
    assert code == 0
    rates = [row["lr"] for row in map(json.loads, (tmp_path / "run" / "metrics.jsonl").read_text().splitlines())
             if "lr" in row]
    # lr_t = min + (peak - min) (1 + cos(pi t / (T - 1))) / 2 at steps t = 0..3 of T = 4: the floor at the last.
    expected = [1e-4 + 9e-4 * (1 + math.cos(math.pi * t / 3)) / 2 for t in range(4)]
    assert rates == pytest.approx(expected)


def test_attention_draws_a_run_with_separate_vocabularies(date_pair_files: Path, tmp_path: Path, capsys) -> None:
    """The tokenizer beside the model is the source one: it is checked against the source embeddings."""
    folder = date_pair_files
    assert main(["seq2seq", "train", "--model", "rnn-bahdanau", "--src", str(folder / "src.txt"), "--tgt",
                 str(folder / "tgt.txt"), "--separate-vocabularies", "--vocab-size", "300", "--max-tokens", "256",
                 "--steps", "1", "--metric-examples", "0", "--out", str(tmp_path / "run"), "--no-progress",
                 "--device", "cpu"]) == 0
    out = tmp_path / "map.png"
    assert main(["attention", "--model", str(tmp_path / "run"), "4 July 1976", "--target", "1976-07-04",
                 "--out", str(out), "--device", "cpu"]) == 0, capsys.readouterr().err
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_wider_beam_takes_fewer_sentences_a_batch(trained: Path, monkeypatch) -> None:
    """Beam k decodes k hypotheses per sentence: a batch holds a k-th of --max-tokens source tokens."""
    import plm.apps.translation
    import plm.objectives.translation

    shapes = []
    search = plm.objectives.translation.beam_search

    def recording(model, start, **options):
        shapes.append(tuple(options["source_ids"].shape))
        return search(model, start, **options)

    monkeypatch.setattr(plm.objectives.translation, "beam_search", recording)
    model, tokenizers = plm.apps.translation.load_seq2seq(trained / "run")
    sentences = [p.source for p in DATE_PAIRS]
    for beam in (1, 4):
        shapes.clear()
        plm.objectives.translation.translate(
            model, tokenizers, sentences, GenerationConfig(num_beams=beam, max_new_tokens=2), max_tokens=256
        )
        longest = max(map(len, tokenizers.encode_sources(sentences)))
        assert all(rows * width <= max(256 // beam, longest) for rows, width in shapes)
        assert sum(rows for rows, _ in shapes) == len(sentences)
    assert len(shapes) > 1


def test_a_search_that_would_not_fit_in_free_memory_is_refused_with_its_estimate(trained: Path, monkeypatch,
                                                                                 capsys) -> None:
    import plm.apps.translation
    import plm.objectives.translation

    model, tokenizers = plm.apps.translation.load_seq2seq(trained / "run")
    vocabulary = model.config.vocab_size
    # With 10 kB free, 64 hypotheses cannot even hold their scores over the vocabulary (64 x V x 4 bytes).
    assert 64 * vocabulary * 4 > 10_000
    monkeypatch.setattr(plm.objectives.translation, "available_memory", lambda: 10_000)
    code = main(["translate", "--model", str(trained / "run"), str(trained / "src.txt"), "--beam", "64",
                 "--device", "cpu"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1
    assert re.search(r"--beam 64 over \d+ sentence\(s\) of \d+ tokens needs about [\d.]+ GiB for the search, "
                     r"more than the 0.0 GiB free", err), err
    monkeypatch.setattr(plm.objectives.translation, "available_memory", lambda: 1 << 40)
    assert main(["translate", "--model", str(trained / "run"), str(trained / "src.txt"), "--beam", "64",
                 "--max-len-a", "0", "--max-len-b", "2", "--device", "cpu"]) == 0


@pytest.mark.parametrize(("model", "flag", "expected"), [
    ("transformer", None, 0.1),  # Vaswani et al. section 5.4: epsilon_ls = 0.1
    ("rnn-luong", None, 0.0),  # Bahdanau et al. and Luong et al. train on plain cross entropy
    ("rnn", 0.2, 0.2),  # --label-smoothing overrides the recipe
])
def test_label_smoothing_is_the_familys_papers_unless_a_flag_says_otherwise(
    date_pair_files: Path, tmp_path: Path, model: str, flag: float | None, expected: float
) -> None:
    setup = Seq2SeqSetup(model=model, source=str(date_pair_files / "src.txt"), target=str(date_pair_files / "tgt.txt"),
                         vocab_size=300, label_smoothing=flag, metric_examples=0)
    trainer, _ = prepare_seq2seq(setup, TrainingConfig(steps=1, device="cpu"), tmp_path / "run")
    assert trainer.objective.label_smoothing == expected


def test_a_model_trained_on_reversed_sources_translates_them_reversed(date_pair_files: Path, tmp_path: Path,
                                                                       monkeypatch, capsys) -> None:
    """Sutskever et al.'s reversed source is kept with the model: plm translate feeds it x_n .. x_1 </s> too."""
    run = tmp_path / "reversed"
    assert main(["seq2seq", "train", "--model", "rnn", "--reverse-source", "--src", str(date_pair_files / "src.txt"),
                 "--tgt", str(date_pair_files / "tgt.txt"), "--vocab-size", "300", "--steps", "2",
                 "--metric-examples", "0", "--out", str(run), "--no-progress", "--device", "cpu"]) == 0
    capsys.readouterr()
    read = []

    def recorded_search(model, start, *, source_ids, **options):
        read.append(source_ids[0].tolist())
        return beam_search(model, start, source_ids=source_ids, **options)

    monkeypatch.setattr("plm.objectives.translation.beam_search", recorded_search)
    sentence = "the fifth of May, nineteen ninety-nine"
    monkeypatch.setattr("sys.stdin", io.StringIO(sentence + "\n"))
    assert main(["translate", "--model", str(run), "--max-len-a", "0", "--max-len-b", "6", "--device", "cpu"]) == 0
    _, tokenizers = load_seq2seq(run)
    assert read == [[*reversed(tokenizers.source.encode(sentence)), tokenizers.source.eos_id]]
    # a model continued must keep its order
    assert main(["seq2seq", "train", "--model", str(run), "--src", str(date_pair_files / "src.txt"), "--tgt",
                 str(date_pair_files / "tgt.txt"), "--steps", "1", "--out", str(tmp_path / "on"), "--device",
                 "cpu"]) == 2
    assert "reads its sources reversed; continue it with --reverse-source" in capsys.readouterr().err


def test_a_dry_run_projects_the_run_and_writes_nothing(date_pair_files: Path, tmp_path: Path, capsys) -> None:
    folder = date_pair_files
    code = main(["seq2seq", "train", "--model", "rnn", "--src", str(folder / "src.txt"), "--tgt",
                 str(folder / "tgt.txt"), "--vocab-size", "300", "--max-tokens", "256", "--steps", "40",
                 "--out", str(tmp_path / "never"), "--no-progress", "--device", "cpu", "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0 and not (tmp_path / "never").exists()
    assert out.startswith("dry run: ") and "nothing written" in out
    assert "  40 steps: " in out and " s per step of " in out and "projected: 40 steps in " in out


def test_training_goes_through_the_one_entry_that_reports_before_leaving_the_process_group(
    date_pair_files: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    """seq2seq train runs as pretrain does (plm.training.trainer.train_run): the scores and the attention map while
    the processes are together (an FSDP model is gathered by all of them), then the process group is left."""
    import plm.cli.seq2seq
    import plm.training.trainer

    calls = []
    monkeypatch.setattr(plm.training.trainer, "teardown_distributed", lambda: calls.append("teardown"))
    report = plm.cli.seq2seq.report
    monkeypatch.setattr(plm.cli.seq2seq, "report", lambda *args: (calls.append("report"), report(*args)))
    assert main(["seq2seq", "train", "--model", "rnn-bahdanau", "--src", str(date_pair_files / "src.txt"), "--tgt",
                 str(date_pair_files / "tgt.txt"), "--vocab-size", "300", "--steps", "1", "--metric-examples", "1",
                 "--out", str(tmp_path / "run"), "--no-progress", "--device", "cpu"]) == 0
    assert calls == ["report", "teardown"]
    assert (tmp_path / "run" / "attention.png").is_file()


def test_epochs_set_the_steps_unless_steps_are_given(date_pair_files: Path, tmp_path: Path) -> None:
    """--epochs reaches the trainer (a knob of TrainingConfig, so seq2seq train takes it as pretrain does): two
    epochs of 23 pairs take twice the steps of one; a --steps given wins."""
    def steps(name: str, *flags: str) -> int:
        assert main(["seq2seq", "train", "--model", "rnn", "--src", str(date_pair_files / "src.txt"),
                     "--tgt", str(date_pair_files / "tgt.txt"), "--vocab-size", "300", "--max-tokens", "64",
                     "--metric-examples", "0", "--eval-every", "1000", "--out", str(tmp_path / name),
                     "--no-progress", "--device", "cpu", *flags]) == 0
        return json.loads((tmp_path / name / "training_config.json").read_text())["steps"]

    one = steps("one", "--epochs", "1")
    assert one > 1 and steps("two", "--epochs", "2") == 2 * one
    assert steps("given", "--epochs", "2", "--steps", "3") == 3
