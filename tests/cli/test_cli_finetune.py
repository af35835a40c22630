"""plm finetune, plm predict and plm eval task from the command line."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess

import pytest
import torch

from plm.cli.main import main
from plm.models import from_preset
from plm.storage.checkpoint import load_model, save_model
from plm.tasks.synthetic import synthetic_task
from plm.tokenization.tokenizer import Tokenizer
from tests.conftest import full_disk
from tests.training.test_resume import TORCHRUN

QUICK = ["--synthetic-size", "64", "--batch-size", "16", "--epochs", "1"]  # 4 steps on the built-in task


def run_main(capsys, *args):
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_finetune_help_lists_the_tasks(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["finetune", "--help"])
    help_text = capsys.readouterr().out
    assert exit_info.value.code == 0 and "examples:" in help_text
    for task in ("classify", "pair", "regress", "tag", "qa", "choice"):
        assert f"\n  {task} " in help_text


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory):
    """Two learning rates on the built-in classification task: one run each, the better kept."""
    out = tmp_path_factory.mktemp("ft") / "run"
    assert main(["finetune", "--task", "classify", "--lr-grid", "1e-3,3e-3", *QUICK, "--out", str(out)]) == 0
    return out


def test_several_learning_rates_keep_the_best_run(finetuned):
    summary = json.loads((finetuned / "summary.json").read_text())
    assert [run["lr"] for run in summary["runs"]] == [1e-3, 3e-3]
    best = max(summary["runs"], key=lambda run: run["val_accuracy"])
    assert summary["best"]["lr"] == best["lr"]
    kept, chosen = load_model(finetuned), load_model(f"{best['directory']}/best")
    for name, value in kept.state_dict().items():
        torch.testing.assert_close(value, chosen.state_dict()[name], rtol=0, atol=0)


def test_the_sweep_keeps_the_run_with_the_highest_dev_metric(finetuned, tmp_path, capsys):
    """Whichever run scored higher on dev is copied to best/ and named in summary.json, not the lower one.

    The built-in task's two short runs tie on dev accuracy, so their results are rewritten with distinct scores and
    the finished sweep resumed (nothing trains): once with the first run ahead, once with the second.
    """
    out = tmp_path / "run"
    shutil.copytree(finetuned, out)
    runs = sorted((out / "runs").iterdir())
    assert [run.name for run in runs] == ["lr0.001-seed0", "lr0.003-seed0"]
    weights = [load_model(run / "best").state_dict() for run in runs]
    for scores in ([0.9, 0.1], [0.1, 0.9]):
        for run, score in zip(runs, scores):
            result = json.loads((run / "result.json").read_text())
            (run / "result.json").write_text(json.dumps(result | {"directory": str(run), "val_accuracy": score}))
        code, _, err = run_main(capsys, "finetune", "--task", "classify", "--lr-grid", "1e-3,3e-3", *QUICK,
                                "--no-progress", "--out", out, "--resume")
        assert code == 0, err
        higher = scores.index(max(scores))
        assert json.loads((out / "summary.json").read_text())["best"]["directory"] == str(runs[higher])
        kept = load_model(out).state_dict()
        assert all(torch.equal(kept[name], weights[higher][name]) for name in kept)
        assert not all(torch.equal(kept[name], weights[1 - higher][name]) for name in kept)


def test_predict_and_eval_task_agree(finetuned, tmp_path, capsys):
    examples = synthetic_task("classify", 40, seed=99)
    data = tmp_path / "test.jsonl"
    data.write_text("".join(json.dumps({"text": e.text, "label": e.label}) + "\n" for e in examples))
    code, out, _ = run_main(capsys, "predict", "--model", finetuned, data, "--out", tmp_path / "p.jsonl")
    assert code == 0
    rows = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert [r["text"] for r in rows] == [e.text for e in examples]
    assert set(rows[0]) == {"text", "text_pair", "label", "prediction", "probabilities"}  # not the example's line
    assert {r["prediction"] for r in rows} <= {"bad", "good"}
    for row in rows:  # each label's softmax probability, the prediction the most likely
        assert sum(row["probabilities"].values()) == pytest.approx(1.0)
        assert row["prediction"] == max(row["probabilities"], key=row["probabilities"].get)
    right = sum(r["prediction"] == r["label"] for r in rows)

    code, out, _ = run_main(capsys, "eval", "task", "--model", finetuned, data, "--json", tmp_path / "scores.json")
    assert code == 0
    scores = json.loads((tmp_path / "scores.json").read_text())
    assert scores["accuracy"] == pytest.approx(right / 40)
    printed = {line.split()[0]: float(line.split()[1]) for line in out.splitlines()[1:] if len(line.split()) == 2}
    assert printed == pytest.approx({name: round(value, 4) for name, value in scores.items()}, abs=1e-9)
    matrix = {line.split()[0]: [int(n) for n in line.split()[1:]] for line in out.splitlines() if
              line.split()[0] in ("bad", "good")}
    assert matrix["bad"][0] + matrix["good"][1] == right and sum(map(sum, matrix.values())) == 40


def test_predict_reads_plain_text_from_a_file_or_stdin(finetuned, tmp_path, capsys, monkeypatch):
    examples = synthetic_task("classify", 6, seed=98)
    lines = tmp_path / "test.txt"
    lines.write_text("".join(e.text + "\n\n" for e in examples))  # blank lines are skipped
    code, out, err = run_main(capsys, "predict", "--model", finetuned, lines)
    assert code == 0, err
    from_file = [json.loads(line) for line in out.splitlines()]
    assert [row["text"] for row in from_file] == [e.text for e in examples]
    monkeypatch.setattr("sys.stdin", io.StringIO(lines.read_text()))
    code, out, _ = run_main(capsys, "predict", "--model", finetuned, "-")
    assert code == 0 and [json.loads(line) for line in out.splitlines()] == from_file


def test_predict_on_a_full_disk_leaves_the_old_out_file_whole(finetuned, tmp_path, capsys, monkeypatch):
    # Guards against --out written in place: a disk that fills up mid-write must leave the previous predictions as
    # they were, not half a file. Every temporary file goes to /dev/full; --out itself is an ordinary file.
    full_disk(monkeypatch)
    lines = tmp_path / "one.txt"
    lines.write_text("a sentence\n")
    out = tmp_path / "p.jsonl"
    out.write_text('{"old": "predictions"}\n')
    code, _, err = run_main(capsys, "predict", "--model", finetuned, lines, "--out", out)
    assert code == 2 and err.count("\n") == 1 and "No space left on device" in err, err
    assert out.read_text() == '{"old": "predictions"}\n'
    assert sorted(path.name for path in tmp_path.iterdir()) == ["one.txt", "p.jsonl"]  # no temporary file left


def test_predict_refuses_a_max_length_beyond_the_model_s_positions(finetuned, tmp_path, capsys):
    (tmp_path / "one.txt").write_text("a text\n")
    code, _, err = run_main(capsys, "predict", "--model", finetuned, tmp_path / "one.txt", "--max-length", "100000")
    assert code == 2 and err.startswith("plm predict: error: max_length 100000 exceeds the model's ")


def test_steps_win_over_the_epochs_and_end_the_linear_schedule_at_that_step(tmp_path, capsys):
    """16 steps planned (4 epochs of 4); --steps 5 runs 5, warmup 1 of them, the decay reaching 0 at the 5th."""
    out = tmp_path / "run"
    args = ["finetune", "--task", "classify", "--synthetic-size", "64", "--batch-size", "16", "--epochs", "4",
            "--steps", "5", "--warmup-fraction", "0.2", "--lr", "3e-3", "--no-progress", "--out", out]
    assert run_main(capsys, *args)[0] == 0
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rates = {line["step"]: line["lr"] for line in lines}
    assert max(rates) == 5 and "val_accuracy" in lines[-1]
    peak = 3e-3  # step 1 warms up to the peak, steps 2-5 decay linearly from it to 0
    assert [rates[step] for step in range(1, 6)] == pytest.approx([peak, peak, peak * 2 / 3, peak / 3, 0.0])
    assert (out / "best").is_dir()


def test_minutes_stops_early_and_still_keeps_the_best_model(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["finetune", "--task", "classify", *QUICK, "--epochs", "3", "--minutes", "1e-6", "--no-progress",
            "--out", out]
    code, printed, _ = run_main(capsys, *args)
    assert code == 0 and "val_accuracy" in printed
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1]  # 12 steps planned; the first is past the budget
    assert "val_accuracy" in lines[0] and (out / "best").is_dir()
    config = json.loads((out / "training_config.json").read_text())
    assert config["steps"] == 12  # the schedule is laid out over the epochs, as plm pretrain lays it over --steps


def test_a_classifier_logs_no_validation_perplexity(tmp_path, capsys):
    """exp of a class distribution's cross-entropy is no perplexity; the validation loss stays."""
    out = tmp_path / "run"
    assert run_main(capsys, "finetune", "--task", "classify", *QUICK, "--no-progress", "--out", out)[0] == 0
    validations = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if "val_loss" in line]
    assert validations and not any(key.startswith("val_perplexity") for line in validations for key in line)


def test_a_sentence_transformers_checkpoint_is_fine_tuned_through_its_own_pooling(tmp_path):
    """all-MiniLM-L6-v2 was trained on the mean of its token states; its [CLS] pooler never was."""
    from plm.tasks.finetune import trained_pooling

    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]))
    modes = {"pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False}
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(modes))
    assert trained_pooling(tmp_path) == "mean"
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(modes | {"pooling_mode_mean_tokens": False,
                                                                            "pooling_mode_cls_token": True}))
    assert trained_pooling(tmp_path) == "cls"
    assert trained_pooling(tmp_path / "1_Pooling") is None  # no modules.json: the family's own pooling


def test_finetune_reads_a_sentence_transformers_model_through_the_mean_of_its_tokens(tmp_path, capsys):

    texts = [f"a {w} cat" for w in ("good", "bad")] * 20
    tokenizer = Tokenizer.train_wordpiece(texts, vocab_size=100)
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"text": t, "label": t.split()[1]}) + "\n" for t in texts))
    model = tmp_path / "model"
    save_model(from_preset("bert-micro", vocab_size=len(tokenizer)), model, tokenizer)
    args = ["finetune", "--task", "classify", "--model", model, "--train", data, "--validation", data, "--epochs", "1",
            "--no-progress"]
    assert run_main(capsys, *args, "--out", tmp_path / "plain")[0] == 0
    assert load_model(tmp_path / "plain").config.head.pooling == "cls"  # BERT's [CLS] through its pooler

    (model / "1_Pooling").mkdir()
    (model / "modules.json").write_text(
        json.dumps([{"idx": 1, "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}])
    )
    (model / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    assert run_main(capsys, *args, "--out", tmp_path / "st")[0] == 0
    assert load_model(tmp_path / "st").config.head.pooling == "mean"
    assert run_main(capsys, *args, "--pooling", "cls", "--out", tmp_path / "asked")[0] == 0
    assert load_model(tmp_path / "asked").config.head.pooling == "cls"  # --pooling overrides it


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--task", "classify", "--train", "a.jsonl"], "give both --train and --validation"),
        (["--task", "tag", "--train", "{bad}", "--validation", "{bad}"], "bad.conll:2: a word without a tag"),
        (["--task", "classify", "--warmup-fraction", "1"], "--warmup-fraction must be in [0, 1), got 1.0"),
        (["--task", "tag", "--pooling", "mean"], "--pooling is for --task classify, pair, regress, choice"),
        (["--task", "classify", "--symmetric"], "--symmetric reads sentence pairs: it is for --task pair or regress"),
        (["--task", "pair", "--symmetric"], "--symmetric is GPT-1's similarity form; an encoder reads a pair as"),
    ],
)
def test_bad_finetune_inputs_are_one_line_and_exit_2(tmp_path, capsys, args, message):
    bad = tmp_path / "bad.conll"
    bad.write_text("EU B-ORG\nlonely\n")
    args = [a.replace("{bad}", str(bad)) for a in args]
    code, _, err = run_main(capsys, "finetune", *args, "--out", tmp_path / "out")
    assert code == 2 and err.count("\n") == 1 and message in err
    assert not (tmp_path / "out").exists()


def test_a_bad_learning_rate_list_is_an_argument_error(capsys):
    with pytest.raises(SystemExit) as raised:
        main(["finetune", "--task", "classify", "--lr-grid", "1e-3,fast"])
    err = capsys.readouterr().err
    assert raised.value.code == 2 and err.count("\n") == 1 and "expected numbers separated by commas" in err


def test_eval_task_needs_a_fine_tuned_model(tmp_path, capsys, finetuned):
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "a good cat", "label": "good"}\n')
    backbone = load_model(finetuned).backbone  # a bare encoder: no task head
    save_model(backbone, tmp_path / "encoder", Tokenizer.load(finetuned / "best"))
    code, _, err = run_main(capsys, "eval", "task", "--model", tmp_path / "encoder", data)
    assert code == 2 and err.count("\n") == 1 and "has no task head; fine-tune it first" in err


def test_sift_trains_with_its_adversarial_term_and_validates_without_it(tmp_path, capsys):
    out = tmp_path / "sift"
    code, _, err = run_main(capsys, "finetune", "--task", "classify", "--sift", *QUICK, "--no-progress", "--out", out)
    assert code == 0 and err == ""  # --no-progress: no bar on stderr
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    training = [line for line in lines if "loss_sift" in line]
    assert len(training) == 4  # every step of the run adds the term
    for line in training:
        assert line["loss_sift"] > 0
        assert line["loss"] == pytest.approx(line["loss_task"] + line["loss_sift"])
    validation = [line for line in lines if "val_accuracy" in line]
    assert validation and not any("val_loss_sift" in line for line in validation)


def test_sift_on_a_gpt_is_one_line_and_exit_2(tmp_path, capsys):

    tokenizer = Tokenizer.train_bpe(["a good cat", "a bad dog"] * 20, vocab_size=300)
    save_model(from_preset("gpt2-micro", vocab_size=len(tokenizer)), tmp_path / "gpt", tokenizer)
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "a good cat", "label": "good"}\n{"text": "a bad dog", "label": "bad"}\n')
    code, _, err = run_main(capsys, "finetune", "--task", "classify", "--model", tmp_path / "gpt", "--train", data,
                            "--validation", data, "--sift", "--out", tmp_path / "out")
    assert code == 2 and err.count("\n") == 1 and "SiFT" in err
    assert not (tmp_path / "out").exists()


def nothing_written(out):
    return not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize(
    ("name", "train", "dev"),
    [
        ("dev.tsv", "sentence\tlabel\n" + "a good cat\tpos\na bad dog\tneg\n" * 4,
         "sentence\tlabel\na good cat\tpos\na cat\tmeh\n"),
        ("dev.jsonl", '{"text": "a good cat", "label": "pos"}\n{"text": "a bad dog", "label": "neg"}\n' * 4,
         '{"text": "a good cat", "label": "pos"}\n\n{"text": "a cat", "label": "meh"}\n'),
    ],
    ids=["glue-tsv", "jsonl"],
)
def test_a_label_only_the_dev_file_holds_is_refused_at_its_line(tmp_path, capsys, name, train, dev):
    """A dev-only label would be a class the head never trains on (issue 33): refused, naming its line (3)."""
    (tmp_path / f"train{name[3:]}").write_text(train)
    (tmp_path / name).write_text(dev)
    code, _, err = run_main(capsys, "finetune", "--task", "classify", "--train", tmp_path / f"train{name[3:]}",
                            "--validation", tmp_path / name, "--no-progress", "--out", tmp_path / "out")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert f"{tmp_path / name}:3: label 'meh' is in no training example (their labels: neg, pos)" in err
    assert nothing_written(tmp_path / "out")


def test_a_tag_only_the_dev_file_holds_is_refused_at_its_word(tmp_path, capsys):
    train = "\n\n".join(["EU B-ORG\nrejects O\nGerman B-MISC\ncall O", "Peter B-PER\nBlackburn I-PER"] * 8) + "\n"
    dev = "Peter B-PER\nwent O\n\nto O\nParis B-LOC\n"  # B-LOC never occurs in training
    (tmp_path / "train.conll").write_text(train)
    (tmp_path / "dev.conll").write_text(dev)
    code, _, err = run_main(capsys, "finetune", "--task", "tag", "--train", tmp_path / "train.conll", "--validation",
                            tmp_path / "dev.conll", "--epochs", "1", "--no-progress", "--out", tmp_path / "out")
    notes = [f"{tmp_path / file}: tags from column 2 of 2" for file in ("train.conll", "dev.conll")]
    *printed, error = err.splitlines()
    assert code == 2 and printed == notes and "Traceback" not in err
    assert error.startswith(f"plm finetune: error: {tmp_path / 'dev.conll'}:5: tag 'B-LOC' is in no training example")
    assert nothing_written(tmp_path / "out")


def test_the_built_in_task_counts_the_classes_of_its_validation_examples(tmp_path, capsys):
    """4 pair examples of seed 0 are all "second"; the 1 validation example, "first", is still a class of the task."""
    out = tmp_path / "out"
    args = ["finetune", "--task", "pair", "--synthetic-size", "4", "--batch-size", "4", "--epochs", "1"]
    assert run_main(capsys, *args, "--no-progress", "--out", out)[0] == 0
    assert load_model(out).config.head.label_names == ("first", "second")


def test_a_gpt_regressor_on_unordered_pairs_predicts_the_same_in_either_order(tmp_path, capsys):
    """--symmetric (GPT-1's STS-B form) is kept with the model: plm predict reads pairs in both orders too."""

    tokenizer = Tokenizer.train_bpe(["a good cat", "a bad dog", "the good dog"] * 20, vocab_size=300)
    save_model(from_preset("gpt2-micro", vocab_size=len(tokenizer)), tmp_path / "gpt", tokenizer)
    pairs = [("a good cat", "a bad dog", 1.0), ("the good dog", "a good cat", 4.0)] * 4
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"text": a, "text_pair": b, "label": y}) + "\n" for a, b, y in pairs))
    swapped = tmp_path / "swapped.jsonl"
    swapped.write_text("".join(json.dumps({"text": b, "text_pair": a, "label": y}) + "\n" for a, b, y in pairs))
    code, _, _ = run_main(capsys, "finetune", "--task", "regress", "--symmetric", "--model", tmp_path / "gpt",
                          "--train", data, "--validation", data, "--epochs", "1", "--no-progress",
                          "--out", tmp_path / "out")
    assert code == 0
    predicted = {}
    for name in (data, swapped):
        assert run_main(capsys, "predict", "--model", tmp_path / "out", name, "--out", tmp_path / "p.jsonl")[0] == 0
        predicted[name] = [json.loads(line)["prediction"] for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert predicted[data] == pytest.approx(predicted[swapped], abs=1e-6)


def test_a_gpt_with_task_tokens_fine_tunes_the_same_twice_with_one_seed(tmp_path, capsys):
    """GPT-1's task tokens are new embedding rows, drawn at random: from the run's seed, not from the process's."""
    tokenizer = Tokenizer.train_bpe(["a good cat", "a bad dog", "the good dog"] * 20, vocab_size=300)
    save_model(from_preset("gpt2-micro", vocab_size=len(tokenizer)), tmp_path / "gpt", tokenizer)
    weights = []
    for run, process_seed in enumerate((1, 2)):
        torch.manual_seed(process_seed)  # whatever the process drew before
        code, _, _ = run_main(capsys, "finetune", "--task", "pair", "--model", tmp_path / "gpt", *QUICK,
                              "--no-progress", "--out", tmp_path / f"run{run}")
        assert code == 0
        weights.append(load_model(tmp_path / f"run{run}").state_dict())
    assert weights[0].keys() == weights[1].keys()
    for name, tensor in weights[0].items():
        assert torch.equal(tensor, weights[1][name]), name


@pytest.mark.parametrize(
    ("preset", "task", "lr", "warmup", "batch_size"),
    [
        ("gpt2-micro", "classify", 6.25e-5, 0.002, 32),  # GPT-1 4.1
        ("bert-micro", "classify", 5e-5, 0.1, 32),  # BERT A.3 (its largest lr)
        ("bert-micro", "choice", 2e-5, 0.1, 16),  # BERT 4.4, SWAG
        ("gpt2-micro", "choice", 6.25e-5, 0.002, 32),  # GPT-1 4.1 fine-tunes its multiple choice (RACE) alike
    ],
)
def test_fine_tuning_follows_the_papers_recipe(tmp_path, capsys, preset, task, lr, warmup, batch_size):
    """3 epochs, Adam (0.9, 0.999), linear warmup then decay to 0; the paper's lr, warmup and batch size."""
    texts = [f"a {w} cat" for w in ("good", "bad", "fine", "poor")] * 100
    tokenizer = (Tokenizer.train_bpe if preset.startswith("gpt") else Tokenizer.train_wordpiece)(texts, vocab_size=300)
    save_model(from_preset(preset, vocab_size=len(tokenizer)), tmp_path / "model", tokenizer)
    if task == "classify":  # 400 examples
        data = tmp_path / "d.jsonl"
        data.write_text("".join(json.dumps({"text": t, "label": t.split()[1]}) + "\n" for t in texts))
    else:  # 48 SWAG rows
        data = tmp_path / "d.csv"
        data.write_text("sent1,sent2,ending0,ending1,ending2,ending3,label\n" + "".join(
            f"{t},a,good,bad,fine,poor,{i % 4}\n" for i, t in enumerate(texts[:48])))
    code, _, _ = run_main(capsys, "finetune", "--task", task, "--model", tmp_path / "model", "--train", data,
                          "--validation", data, "--no-progress", "--out", tmp_path / "out")
    assert code == 0
    config = json.loads((tmp_path / "out" / "training_config.json").read_text())
    examples = 400 if task == "classify" else 48
    steps = 3 * -(-examples // batch_size)  # 3 epochs of batch_size examples a step, the last batch short
    assert (config["steps"], config["lr"], config["warmup"]) == (steps, lr, round(warmup * steps))
    assert (config["optimizer"], config["betas"], config["schedule"], config["min_lr"]) == ("adamw", [0.9, 0.999],
                                                                                          "linear", 0.0)
    if preset.startswith("gpt"):  # GPT-1 3.2: L3 = L2 + lambda * L1 with lambda 0.5, logged at every step
        for row in map(json.loads, (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()):
            assert row["loss"] == pytest.approx(row["loss_task"] + 0.5 * row["loss_lm"], rel=1e-5)


def squad_v2(questions):
    """A SQuAD v2.0 document: one paragraph, ``questions`` as (id, question, answer or None for no answer)."""
    context = "Paris is the capital of France. Berlin is the capital of Germany."
    qas = [{"id": q, "question": text, "is_impossible": answer is None,
            "answers": [] if answer is None else [{"text": answer, "answer_start": context.index(answer)}]}
           for q, text, answer in questions]
    return json.dumps({"version": "v2.0", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]})


def test_squad_v2_tau_is_chosen_on_dev_saved_and_used_on_other_files(tmp_path, capsys):
    """tau fitted to the gold answers of whatever file is scored would inflate its score: the saved one is used."""
    tokenizer = Tokenizer.train_wordpiece(["Paris is the capital of France. Berlin is the capital of Germany. "
                                           "What is the capital of Spain? Who lives in Rome?"] * 20, vocab_size=120)
    torch.manual_seed(0)
    save_model(from_preset("bert-micro", vocab_size=len(tokenizer)), tmp_path / "bert", tokenizer)
    questions = [("a", "What is the capital of France?", "Paris"), ("b", "What is the capital of Spain?", None),
                 ("c", "What is the capital of Germany?", "Berlin"), ("d", "Who lives in Rome?", None)]
    (tmp_path / "train.json").write_text(squad_v2(questions))
    code, _, err = run_main(capsys, "finetune", "--task", "qa", "--model", tmp_path / "bert", "--train",
                            tmp_path / "train.json", "--validation", tmp_path / "train.json", "--steps", "2",
                            "--max-length", "48", "--out", tmp_path / "run", "--no-progress")
    assert code == 0, err
    config = json.loads((tmp_path / "run" / "best" / "config.json").read_text())
    assert isinstance(config["config"]["head"]["null_threshold"], float)

    # tau 1e9: no answer to anything, so EM is the share of impossible questions, 0.5; tau -1e9: a span for every
    # question, so both impossible ones are missed (a tau refitted to this file's answers would answer "" to some).
    for tau in (1e9, -1e9):
        config["config"]["head"]["null_threshold"] = tau
        (tmp_path / "run" / "best" / "config.json").write_text(json.dumps(config))
        code, out, err = run_main(capsys, "predict", "--model", tmp_path / "run", tmp_path / "train.json",
                                  "--max-length", "48")
        assert code == 0, err
        predictions = [json.loads(line)["prediction"] for line in out.splitlines()]
        assert all(p == "" for p in predictions) if tau > 0 else all(p != "" for p in predictions)
        code, out, err = run_main(capsys, "eval", "task", "--model", tmp_path / "run", tmp_path / "train.json",
                                  "--max-length", "48", "--json", tmp_path / "scores.json")
        assert code == 0, err
        right = sum(p == answer for p, (_, _, answer) in zip(predictions, questions) if answer is not None)
        expected = 0.5 if tau > 0 else right / 4
        assert json.loads((tmp_path / "scores.json").read_text())["exact_match"] == pytest.approx(expected)
    # Questions without answers, as a test file has them: predict reads them and answers with the saved tau.
    unanswered = json.loads(squad_v2(questions))
    for question in unanswered["data"][0]["paragraphs"][0]["qas"]:
        del question["answers"], question["is_impossible"]
    (tmp_path / "test.json").write_text(json.dumps(unanswered))
    code, out, err = run_main(
        capsys, "predict", "--model", tmp_path / "run", tmp_path / "test.json", "--max-length", "48"
    )
    assert code == 0, err
    assert [json.loads(line)["prediction"] for line in out.splitlines()] != ["", "", "", ""]  # tau -1e9: always a span


def logged(run):
    return [(row["step"], row["loss"]) + ((row["val_accuracy"],) if "val_accuracy" in row else ())
            for row in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]


def test_an_interrupted_lr_sweep_resumes_bit_exactly(tmp_path, capsys, monkeypatch):
    """The finished run is kept, the interrupted one continues from its checkpoint: the logs of an unbroken sweep."""
    from plm.training.trainer import Trainer

    sweep = ["finetune", "--task", "classify", "--lr-grid", "1e-3,3e-3", *QUICK[:4], "--epochs", "3", "--no-progress"]
    assert run_main(capsys, *sweep, "--out", tmp_path / "straight")[0] == 0
    save = Trainer.save

    def save_then_stop(trainer):  # the second run stops right after its checkpoint at step 8 of 12
        save(trainer)
        if "lr0.003" in str(trainer.out) and trainer.step == 8:
            raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "save", save_then_stop)
    assert run_main(capsys, *sweep, "--out", tmp_path / "stopped")[0] == 130  # as Ctrl-C ends it
    monkeypatch.setattr(Trainer, "save", save)
    steps, step = [], Trainer.optimizer_step
    monkeypatch.setattr(Trainer, "optimizer_step", lambda trainer, wrapped: steps.append(1) or step(trainer, wrapped))
    code, out, err = run_main(capsys, *sweep, "--out", tmp_path / "stopped", "--resume")
    assert code == 0, err
    assert len(steps) == 4  # steps 9-12 of the second run; the first was kept
    for run in ("lr0.001-seed0", "lr0.003-seed0"):
        assert logged(tmp_path / "stopped" / "runs" / run) == logged(tmp_path / "straight" / "runs" / run)
    assert json.loads((tmp_path / "stopped" / "summary.json").read_text())["best"]["lr"] == json.loads(
        (tmp_path / "straight" / "summary.json").read_text())["best"]["lr"]


def test_a_run_stopped_before_its_first_save_is_named_as_such(tmp_path, capsys, monkeypatch):
    """A directory with a run's files but no model must not be read as a (Hugging Face) model."""
    from plm.training.trainer import Trainer

    def stop(trainer, wrapped):
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "optimizer_step", stop)
    assert (
        run_main(capsys, "finetune", "--task", "classify", *QUICK, "--no-progress", "--out", tmp_path / "run")[0] == 130
    )
    monkeypatch.undo()
    code, out, err = run_main(capsys, "eval", "task", "--model", tmp_path / "run", tmp_path / "x.jsonl")
    assert code == 2 and "a training run that saved no model yet" in err and "--resume" in err
    assert run_main(capsys, "finetune", "--task", "classify", *QUICK, "--no-progress", "--out", tmp_path / "run",
                    "--resume")[0] == 0
    assert (tmp_path / "run" / "best" / "config.json").is_file()


def test_under_torchrun_each_step_reads_one_batch_per_process_and_one_process_reports(tmp_path):
    """An epoch of 8 batches is 4 steps on 2 processes. Every process read every batch (8 steps, each batch
    twice), and both copied the best run over each other and printed the results."""
    out = tmp_path / "run"
    result = subprocess.run(
        [*TORCHRUN, "finetune", "--task", "classify", "--synthetic-size", "64", "--batch-size", "8", "--epochs", "1",
         "--lr-grid", "1e-3,3e-3", "--device", "cpu", "--no-progress", "--out", str(out)],
        capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("best: lr") == 1
    summary = json.loads((out / "summary.json").read_text())
    assert [run["steps"] for run in summary["runs"]] == [4, 4]
    assert load_model(out) is not None
    best, kept = load_model(summary["best"]["directory"]).state_dict(), load_model(out).state_dict()
    assert best.keys() == kept.keys() and all(torch.equal(best[name], kept[name]) for name in best)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_precision_chooses_the_autocast_of_fine_tuning_as_of_pre_training(tmp_path, capsys, precision):
    out = tmp_path / "run"
    code, _, err = run_main(capsys, "finetune", "--task", "classify", *QUICK, "--steps", "1", "--precision",
                            precision, "--no-progress", "--device", "cpu", "--out", out)
    assert code == 0, err
    assert json.loads((out / "training_config.json").read_text())["precision"] == precision
