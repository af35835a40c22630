"""One meaning per flag: a flag that two commands take is declared once (plm.cli.flags), with one type, one default
(or one that each command sets, where the declaration says so) and one help, and every command that shows a bar,
reads a model or trains takes the flags a user reaches for. A mistyped flag gets "did you mean"."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections import defaultdict
from pathlib import Path

import pytest
import torch
from torch import nn

from plm import progress
from plm.apps.elmo_probes import fit
from plm.cli import demo
from plm.cli import finetune as finetune_cli
from plm.cli import seq2seq as seq2seq_cli
from plm.cli.common import training_config
from plm.cli.flags import (
    FLAGS,
    OWN_NAMES,
    Flag,
    Formerly,
    config_from_args,
    in_flags,
    learning_rate,
    positive_float,
    positive_int,
)
from plm.cli.main import build_parser, main
from plm.cli.run_definition import renamed
from plm.config import HELP
from plm.errors import FIELD
from plm.tasks import task_objective
from plm.tasks.finetune import FinetuneData, FinetuneHead, FinetuneOptimization
from plm.tasks.synthetic import synthetic_task
from plm.training.pretrain import PretrainSetup
from plm.training.train_seq2seq import Seq2SeqSetup
from plm.training.trainer import TrainingConfig
from tests.conftest import synthetic_text
from tests.test_layout import texts_outside_docstrings

ROOT = Path(__file__).resolve().parents[2]


def every_action(parser: argparse.ArgumentParser | None = None, path: tuple[str, ...] = ()):
    """(command, parser, action) for every flag of every command, ``-h`` aside."""
    parser = parser or build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, subparser in action.choices.items():
                yield from every_action(subparser, (*path, name))
        elif action.option_strings and not isinstance(action, argparse._HelpAction):
            yield " ".join(path), parser, action


def public(action: argparse.Action) -> bool:
    return action.help != argparse.SUPPRESS


def takers() -> dict[str, list[tuple[str, argparse.Action]]]:
    """Each public flag name -> the (command, action) of each command that takes it."""
    found = defaultdict(list)
    for command, _, action in every_action():
        if public(action):
            for name in action.option_strings:
                found[name].append((command, action))
    return found


def kind(action: argparse.Action) -> tuple:
    """What a flag's value is: a switch or a value, parsed by what, out of which choices."""
    if action.nargs == 0:
        return ("switch",)
    return ("value", getattr(action.type, "__name__", action.type), tuple(action.choices or ()))


# The whole parser ---------------------------------------------------------------------------------------------------


def test_a_flag_has_one_type_and_one_set_of_choices_wherever_it_is_taken() -> None:
    wrong = []
    for name, uses in takers().items():
        kinds = defaultdict(list)
        for command, action in uses:
            kinds[kind(action)].append(command)
        if len(kinds) > 1:
            wrong.append(f"{name}: " + "; ".join(f"{k} in {', '.join(commands)}" for k, commands in kinds.items()))
    assert not wrong, "one flag, several types:\n" + "\n".join(wrong)


def test_a_flag_that_two_commands_take_is_declared_once() -> None:
    undeclared = sorted(name for name, uses in takers().items()
                        if len({command for command, _ in uses}) > 1 and name not in FLAGS and name not in OWN_NAMES)
    assert not undeclared, f"flags several commands take, declared apart in each: {undeclared} (plm.cli.flags)"


def test_every_use_of_a_declared_flag_keeps_its_type_default_and_meaning() -> None:
    wrong = []
    for command, _, action in every_action():
        flag = FLAGS.get(action.option_strings[0])
        if flag is None or not public(action):
            continue
        where = f"{flag.name} of plm {command}"
        if not (action.help or "").startswith(flag.help):
            wrong.append(f"{where}: another meaning: {action.help!r}")
        if kind(action) != kind_of(flag):
            wrong.append(f"{where}: {kind(action)}, declared {kind_of(flag)}")
        if not flag.per_command_default and action.default != flag.default:
            wrong.append(f"{where}: default {action.default!r}, declared {flag.default!r}")
    assert not wrong, "\n".join(wrong)


def kind_of(flag: Flag) -> tuple:
    if flag.switch:
        return ("switch",)
    return ("value", getattr(flag.type, "__name__", flag.type), tuple(flag.choices or ()))


def test_an_old_spelling_is_hidden_and_sets_the_flag_it_was_renamed_to() -> None:
    olds = [(command, parser, action) for command, parser, action in every_action() if isinstance(action, Formerly)]
    assert {action.option_strings[0] for _, _, action in olds} >= {"--column", "--valid-src", "--summaries"}
    for command, parser, action in olds:
        new = parser._option_string_actions[action.renamed_to]
        assert not public(action) and action.dest == new.dest, f"{action.option_strings} of plm {command}"


# Each name one meaning, each meaning one name -----------------------------------------------------------------------

NEW_SPELLINGS = {
    "finetune's warmup is a fraction, by its own name": (["finetune", "--warmup-fraction", "0.2"],
                                                         "warmup_fraction", 0.2),
    "the trainers' warmup is steps": (["pretrain", "--warmup", "5"], "warmup", 5),
    "generate cuts prompts by its own name": (["generate", "--model", "m", "x", "--max-prompt-tokens", "7"],
                                              "max_prompt_tokens", 7),
    "fill-mask's guesses": (["fill-mask", "--model", "m", "[MASK]", "--guesses", "3"], "guesses", 3),
    "elmo's neighbours": (["elmo", "neighbors", "--model", "m", "f", "--word", "w", "--neighbors", "2"],
                          "neighbors", 2),
    "finetune's --lr is one rate": (["finetune", "--lr", "3e-3"], "lr", 3e-3),
    "finetune's sweep is --lr-grid": (["finetune", "--lr-grid", "1e-3,3e-3"], "lr_grid", (1e-3, 3e-3)),
    "an ELMo probe's epochs are a number": (["elmo", "probe", "pos", "--model", "m", "--train", "a", "--test", "b",
                                             "--epochs", "0.5"], "epochs", 0.5),
    "inference takes training's precisions": (["generate", "--model", "m", "x", "--precision", "auto"],
                                              "precision", "auto"),
    "generate's seed is 0": (["generate", "--model", "m", "x"], "seed", 0),
    "the probe's tag column": (["elmo", "probe", "pos", "--model", "m", "--train", "a", "--test", "b", "--tag-column",
                                "3"], "tag_column", 3),
    "seq2seq's validation pairs": (["seq2seq", "train", "--validation-src", "a"], "validation_src", "a"),
    "data prepare's validation pairs": (["data", "prepare", "--tokenizer", "t", "--out", "o", "--validation-tsv", "v"],
                                        "validation_tsv", "v"),
    "summarize writes --predictions": (["eval", "summarize", "--model", "m", "f", "--predictions", "p.json"],
                                       "predictions", "p.json"),
    "eval pairs builds --pairs": (["eval", "pairs", "--model", "m", "f", "--pairs", "sop"], "pairs", "sop"),
    "predict's precision": (["predict", "--model", "m", "f", "--precision", "bf16"], "precision", "bf16"),
    "eval task's precision": (["eval", "task", "--model", "m", "f", "--precision", "bf16"], "precision", "bf16"),
    "compare's steps": (["compare", "spec.toml", "--steps", "5"], "steps", 5),
    "compare's seed": (["compare", "spec.toml", "--seed", "1"], "seed", 1),
    "compare's precision": (["compare", "spec.toml", "--precision", "fp32"], "precision", "fp32"),
}


@pytest.mark.parametrize("argv, dest, value", NEW_SPELLINGS.values(), ids=NEW_SPELLINGS)
def test_each_meaning_has_its_one_name(argv: list[str], dest: str, value: object) -> None:
    assert getattr(build_parser().parse_args(argv), dest) == value


NO_PROGRESS = [["predict", "--model", "m", "f"], ["eval", "task", "--model", "m", "f"],
               ["fill-mask", "--model", "m", "[MASK]"], ["embed", "--model", "m", "x"], ["demo"],
               ["eval", "lambada", "--model", "m", "f"], ["eval", "cloze", "--model", "m", "f"],
               ["eval", "coqa", "--model", "m", "f"], ["eval", "summarize", "--model", "m", "f"],
               ["eval", "translate", "--model", "m", "--src", "s", "--ref", "r"], ["eval", "qa", "--model", "m", "f"],
               ["compare", "spec.toml"], ["tokenizer", "train", "--out", "tok"]]


@pytest.mark.parametrize("argv", NO_PROGRESS, ids=lambda argv: " ".join(argv[:2]))
def test_a_command_with_a_progress_bar_takes_no_progress(argv: list[str]) -> None:
    assert build_parser().parse_args([*argv, "--no-progress"]).no_progress is True


REFUSED = {
    "finetune's old fractional --warmup": (["finetune", "--warmup", "0.1"], "did you mean --warmup-fraction?"),
    "finetune's --max-steps": (["finetune", "--max-steps", "5"], "did you mean --steps?"),
    "plan's --batch": (["plan", "--model", "gpt2", "--batch", "4"], "did you mean --batch-size?"),
    "a list for --lr": (["finetune", "--lr", "1e-3,3e-3"], "expected one learning rate, got '1e-3,3e-3' (several: "
                        "plm finetune --lr-grid)"),
    "a mistyped flag": (["pretrain", "--stpes", "5"], "unrecognized arguments: --stpes 5; did you mean --steps?"),
    "a mistyped command": (["pretrian"], "did you mean pretrain?"),
    "a mistyped choice": (["pretrain", "--precision", "fp61"], "did you mean fp16?"),
}


@pytest.mark.parametrize("argv, said", REFUSED.values(), ids=REFUSED)
def test_a_wrong_or_old_flag_is_one_line_that_names_the_right_one(argv: list[str], said: str, capsys) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.count("\n") == 1 and said in err, err


OLD_SPELLINGS = {
    "elmo's --column": (["elmo", "probe", "pos", "--model", "m", "--train", "a", "--test", "b", "--column", "3"],
                        "tag_column", 3, "--column is now --tag-column"),
    "--valid-src": (["seq2seq", "train", "--valid-src", "a"], "validation_src", "a",
                    "--valid-src is now --validation-src"),
    "--valid-tsv": (["data", "prepare", "--tokenizer", "t", "--out", "o", "--valid-tsv", "v"], "validation_tsv", "v",
                    "--valid-tsv is now --validation-tsv"),
    "--summaries": (["eval", "summarize", "--model", "m", "f", "--summaries", "s.json"], "predictions", "s.json",
                    "--summaries is now --predictions"),
}


@pytest.mark.parametrize("argv, dest, value, said", OLD_SPELLINGS.values(), ids=OLD_SPELLINGS)
def test_an_old_spelling_still_works_and_says_once_that_it_was_renamed(argv, dest, value, said, capsys) -> None:
    args = build_parser().parse_args(argv)
    err = capsys.readouterr().err
    assert getattr(args, dest) == value and dest in args.given_flags
    assert err.count("\n") == 1 and err.endswith(f"warning: {said}\n"), err


def test_a_run_saved_under_old_flag_names_resumes_under_the_new_ones() -> None:
    old = {"lr": [1e-3, 3e-3], "warmup": 0.2, "epochs": 3.0}
    assert renamed(old, finetune_cli.RUN.renamed) == {"lr_grid": [1e-3, 3e-3], "warmup_fraction": 0.2, "epochs": 3.0}
    new = {"lr": 3e-3, "lr_grid": None, "warmup_fraction": None}
    assert renamed(new, finetune_cli.RUN.renamed) == new  # "lr" is a flag of its own again
    assert renamed({"valid_src": "v.de"}, seq2seq_cli.RUN.renamed) == {"validation_src": "v.de"}


def test_the_value_types_say_what_they_want() -> None:
    assert learning_rate("3e-4") == 3e-4 and positive_int("2") == 2 and positive_float("0.5") == 0.5
    for parse, text in ((learning_rate, "1e-3,3e-3"), (positive_int, "0"), (positive_float, "nan")):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)


def test_a_flag_keeps_its_declared_default_unless_declared_per_command() -> None:
    with pytest.raises(ValueError, match="--seed has one default, 0"):
        FLAGS["--seed"].add(argparse.ArgumentParser(), default=None)


# The flags that were missing do what they say ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpt_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("gpt")
    (folder / "train.txt").write_text(synthetic_text(40), encoding="utf-8")
    assert main(["pretrain", "--model", "gpt2-micro", "--vocab-size", "300", "--block-size", "32", "--batch-size", "4",
                 "--steps", "1", "--no-progress", "--device", "cpu", "--train", str(folder / "train.txt"),
                 "--out", str(folder / "run")]) == 0
    return folder / "run"


@pytest.fixture(scope="module")
def bert_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bert")
    (folder / "train.txt").write_text(synthetic_text(40), encoding="utf-8")
    assert main(["pretrain", "--model", "bert-micro", "--objective", "mlm", "--vocab-size", "300", "--block-size",
                 "32", "--batch-size", "4", "--steps", "1", "--no-progress", "--device", "cpu", "--train",
                 str(folder / "train.txt"), "--out", str(folder / "run")]) == 0
    return folder / "run"


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A classifier fine-tuned for a few steps on the built-in task, and a labelled file of its task."""
    folder = tmp_path_factory.mktemp("classify")
    assert main(["finetune", "--task", "classify", "--synthetic-size", "32", "--batch-size", "8", "--epochs", "1",
                 "--no-progress", "--device", "cpu", "--out", str(folder / "run")]) == 0
    data = folder / "test.jsonl"
    data.write_text("".join(json.dumps({"text": e.text, "label": e.label}) + "\n"
                            for e in synthetic_task("classify", 24, seed=5)), encoding="utf-8")
    return folder / "run", data


def test_generate_samples_the_same_tokens_twice_without_a_seed(gpt_run: Path, capsys) -> None:
    argv = ["generate", "--model", str(gpt_run), "The", "--temperature", "1.5", "--max-new-tokens", "12"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0 and capsys.readouterr().out == first


@pytest.mark.parametrize("precision", ["fp16", "auto"])
def test_inference_takes_the_precisions_training_takes(gpt_run: Path, precision: str, capsys) -> None:
    assert main(["generate", "--model", str(gpt_run), "The", "--max-new-tokens", "3", "--precision", precision]) == 0


def test_fill_mask_and_embed_show_a_bar_unless_no_progress(bert_run: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0)  # captured stderr is no terminal: the bar's lines, at once
    for argv, bar in ((["fill-mask", "--model", str(bert_run), "a [MASK] b"], "fill-mask:"),
                      (["embed", "--model", str(bert_run), "a b", "c d"], "embed:")):
        assert main(argv) == 0 and bar in capsys.readouterr().err
        assert main([*argv, "--no-progress"]) == 0 and bar not in capsys.readouterr().err


def test_predict_and_eval_task_show_a_bar_unless_no_progress(classifier: tuple[Path, Path], capsys,
                                                             monkeypatch) -> None:
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0)
    run, data = classifier
    for argv in (["predict", "--model", str(run), str(data)], ["eval", "task", "--model", str(run), str(data)]):
        assert main(argv) == 0 and "classify:" in capsys.readouterr().err
        assert main([*argv, "--no-progress"]) == 0 and "classify:" not in capsys.readouterr().err


def test_predict_and_eval_task_hold_the_weights_in_the_precision_asked(classifier, tmp_path, monkeypatch,
                                                                      capsys) -> None:
    run, data = classifier
    seen = []
    original = task_objective.forward
    monkeypatch.setattr(task_objective, "forward",
                        lambda model, batch: seen.append(next(model.parameters()).dtype) or original(model, batch))
    assert main(["predict", "--model", str(run), str(data), "--precision", "bf16", "--no-progress",
                 "--out", str(tmp_path / "p.jsonl")]) == 0
    assert len((tmp_path / "p.jsonl").read_text().splitlines()) == 24
    assert main(["eval", "task", "--model", str(run), str(data), "--precision", "bf16", "--no-progress"]) == 0
    assert "accuracy" in capsys.readouterr().out and set(seen) == {torch.bfloat16}


ZERO_SHOT = {
    "lambada": ("plm.cli.eval_lambada", "evaluate_lambada", ["f"]),
    "cloze": ("plm.cli.eval_cloze", "evaluate_cloze", ["f"]),
    "coqa": ("plm.cli.eval_coqa", "evaluate_coqa", ["f"]),
    "summarize": ("plm.cli.eval_summarize", "evaluate_summaries", ["f"]),
    "translate": ("plm.cli.eval_translate", "evaluate_translation_prompt", ["--src", "s", "--ref", "r"]),
    "qa": ("plm.cli.eval_qa", "evaluate_open_qa", ["f"]),
}


@pytest.mark.parametrize("metric", ZERO_SHOT)
@pytest.mark.parametrize("no_progress", [False, True])
def test_the_zero_shot_evaluations_show_their_bar_unless_no_progress(metric, no_progress, monkeypatch) -> None:
    module, function, inputs = ZERO_SHOT[metric]
    asked = {}

    def stop(options, *args, **kwargs):
        asked["progress"] = options.progress
        raise SystemExit(0)

    monkeypatch.setattr("plm.cli.eval_common.load_causal_lm", lambda args: (None, None))
    monkeypatch.setattr(f"{module}.{function}", stop)
    with pytest.raises(SystemExit):
        main(["eval", metric, "--model", "m", *inputs, *(["--no-progress"] if no_progress else [])])
    assert asked == {"progress": not no_progress}


def test_the_demo_hands_no_progress_to_its_pretraining() -> None:
    args = build_parser().parse_args(["demo", "--no-progress", "--steps", "4"])
    assert demo.pretrain_arguments(args, continuing=False).no_progress is True
    args = build_parser().parse_args(["demo", "--steps", "4"])
    assert demo.pretrain_arguments(args, continuing=False).no_progress is False


def test_compare_s_flags_override_every_run_of_the_spec(tmp_path, text_file, monkeypatch, capsys) -> None:
    spec = tmp_path / "ablation.toml"
    spec.write_text(f"""[budget]
minutes = 30
[base]
model = "gpt2-micro"
train_files = ["{text_file}"]
seed = 7
[[run]]
name = "a"
[[run]]
name = "b"
precision = "bf16"
""", encoding="utf-8")
    compared = {}

    def capture(spec, out, where):
        compared.update(spec=spec, out=out)
        raise SystemExit(0)

    monkeypatch.setattr("plm.cli.compare.compare", capture)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        main(["compare", str(spec), "--steps", "2", "--seed", "3", "--precision", "fp32", "--no-progress"])
    assert compared["out"] == Path("runs/compare/ablation-steps-2-seed-3-precision-fp32")
    assert compared["spec"].budget.describe() == "2 steps"
    for run in compared["spec"].runs:
        training = run.training
        assert (training.steps, training.minutes, training.seed, training.precision, training.progress) == (
            2, None, 3, "fp32", False)
    with pytest.raises(SystemExit):
        main(["compare", str(spec)])  # without them, the spec's own values and directory
    assert compared["out"] == Path("runs/compare/ablation")
    assert [(r.training.seed, r.training.precision, r.training.progress) for r in compared["spec"].runs] == [
        (7, "auto", True), (7, "bf16", True)]


def test_an_elmo_probe_trains_a_fraction_of_an_epoch_as_that_share_of_its_batches() -> None:
    calls = []

    class Counting(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(4, 3)

        def forward(self, features: torch.Tensor) -> torch.Tensor:
            calls.append(len(features))
            return self.linear(features[:, 0])

    features, targets = torch.randn(10, 2, 4), torch.randint(0, 3, (10,))
    for epochs, steps in ((0.5, 3), (1, 5), (2, 10)):  # 5 batches of 2 words a pass
        calls.clear()
        fit(Counting(), features, targets, epochs, lr=1e-2, batch_size=2, seed=0)
        assert len(calls) == steps


# The documentation --------------------------------------------------------------------------------------------------


def value_of(flag: Flag) -> str:
    if flag.switch:
        return "switch"
    if flag.choices:
        return ", ".join(f"`{choice}`" for choice in flag.choices)
    names = {positive_int: "integer ≥ 1", positive_float: "number > 0", int: "integer", float: "number",
             learning_rate: "number", None: "text"}
    value = names[flag.type]
    return f"{flag.nargs} × {value}" if flag.nargs else value


def default_of(flag: Flag) -> str:
    if flag.switch:
        return "off"
    if flag.per_command_default:
        return "per command"
    return "none" if flag.default is None else f"`{flag.default}`"


def vocabulary_rows() -> list[str]:
    """The rows of docs/cli.md's table of flags, as the declarations give them."""
    return [f"| `{flag.name}` | {value_of(flag)} | {default_of(flag)} | "
            f"{flag.help.replace('%%', '%').replace('<', '&lt;')} |" for flag in FLAGS.values()]


def test_the_command_line_page_lists_the_vocabulary_as_declared() -> None:
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    missing = [row for row in vocabulary_rows() if row not in page.splitlines()]
    assert not missing, "docs/cli.md lacks these rows (or has them otherwise):\n" + "\n".join(missing)


def flag_of(argv: list[str]) -> dict[str, str]:
    return build_parser().parse_args(argv).flag_of


def test_a_field_that_the_library_names_is_printed_as_the_flag_that_sets_it_in_that_command() -> None:
    message = "`num_beams` 4 and `max_new_tokens` 0; `keep_last` N; `not_a_field`"
    assert in_flags(message, flag_of(["translate", "--model", "m"])) == (
        "--beam 4 and --max-len-b 0; --keep-last N; not_a_field")  # keep_last: another command's flag
    assert in_flags(message, flag_of(["generate", "--model", "m"])) == (
        "--beam 4 and --max-new-tokens 0; --max-prompt-tokens N; not_a_field")
    assert in_flags("`lrs`", flag_of(["finetune", "--task", "classify"])) == "--lr (or --lr-grid)"


def library_fields() -> dict[str, str]:
    """Each field named in backquotes by a text of the library outside plm.cli, and where first."""
    named: dict[str, str] = {}
    for path in sorted((ROOT / "src" / "plm").rglob("*.py")):
        if "cli" not in path.relative_to(ROOT / "src" / "plm").parts:
            for node in texts_outside_docstrings(path):
                for field in FIELD.findall(node.value):
                    named.setdefault(field, f"{path.relative_to(ROOT)}:{node.lineno}")
    return named


def test_every_field_the_library_names_is_a_flag_of_some_command() -> None:
    """A misspelt field, or one that no flag sets, would reach the command line as a bare name."""
    flags = set()
    for _, parser, _ in every_action():
        flags |= set(parser.flag_of())
    unflagged = {field: where for field, where in library_fields().items() if field not in flags}
    assert not unflagged, unflagged


def knobs(config: type) -> list[str]:
    """The fields of ``config`` declared with their meaning (`plm.config.knob`): each one a flag."""
    return [field.name for field in dataclasses.fields(config) if HELP in field.metadata]


KNOBS = {  # each command, and the configs whose knobs are its flags
    ("pretrain",): (PretrainSetup, TrainingConfig),
    ("seq2seq", "train"): (Seq2SeqSetup, TrainingConfig),
    ("finetune",): (FinetuneData, FinetuneHead, FinetuneOptimization),
}


def test_a_knob_is_declared_once_in_its_config_and_the_command_line_is_built_from_it() -> None:
    """Each knob of a training command's configs is a flag of the command with the field's help and default, and the
    flags given come back as the config's fields without a line per field: a knob added to a dataclass, or its flag
    forgotten, fails here."""
    parser = build_parser()
    for path, configs in KNOBS.items():
        command = parser
        for name in path:
            command = next(a for a in command._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
        actions = {action.dest: action for action in command._actions}
        for config in configs:
            for name in knobs(config):
                field = next(f for f in dataclasses.fields(config) if f.name == name)
                assert name in actions, f"{config.__name__}.{name} has no flag in plm {' '.join(path)}"
                help = FIELD.sub(lambda named: "--" + named.group(1).replace("_", "-"), field.metadata[HELP])
                assert actions[name].help.startswith(help), name
    given = ["pretrain", "--whole-word", "--max-ngram", "3", "--mask-ratios", "0.7,0.2,0.1", "--short-block-size", "8",
             "--short-steps", "2", "--objective", "mlm", "--grad-accum", "2", "--clip", "0.5", "--warmup", "7",
             "--betas", "0.8", "0.9", "--keep-last", "3", "--seed", "5", "--compile", "--train", "a.txt"]
    args = parser.parse_args(given)
    setup = config_from_args(PretrainSetup, args, train_files=tuple(args.train))
    pretrain = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["pretrain"]
    training = training_config(args)
    assert setup == PretrainSetup(whole_word=True, max_ngram=3, mask_ratios=(0.7, 0.2, 0.1), short_block_size=8,
                                  short_steps=2, objective="mlm", train_files=("a.txt",))
    assert (training.grad_accum, training.clip, training.warmup, training.betas, training.keep_last, training.seed,
            training.compile) == (2, 0.5, 7, (0.8, 0.9), 3, 5, True)
    assert TrainingConfig().steps == 1000 and pretrain.get_default("steps") == 1000  # each command's own default
