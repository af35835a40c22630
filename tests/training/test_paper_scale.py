"""--hyperparameters paper at the paper's scale: the seeds' run sizes, the accumulation, flags that win, --dry-run."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest

import plm.cli.pretrain
from plm.cli.main import main
from plm.cli.pretrain import recipe_table
from plm.errors import PLMError
from plm.models import PRESETS, RECIPES, recipe_of
from plm.models.recipe import PaperScale, TranslationScale
from plm.training.optim import learning_rate
from plm.training.paper_scale import accumulation, paper_run, translation_run
from plm.training.pretrain import PretrainSetup, block_size_of, prepare
from plm.training.trainer import TrainingConfig, steps_for_epochs

QUICK = ["--vocab-size", "300", "--no-progress", "--device", "cpu", "--precision", "fp32"]


def test_each_family_s_paper_scale_is_the_seeds() -> None:
    scale = {family: recipe.paper_scale for family, recipe in RECIPES.items()}
    gpt1, bert, albert, elmo = scale["gpt"], scale["bert"], scale["albert"], scale["elmo"]
    # GPT-1: "Batch size 64 random sample x 512 token/sample", "100 epochs".
    assert (gpt1.batch_size, gpt1.block_size, gpt1.epochs, gpt1.steps) == (64, 512, 100, None)
    # BERT: "128k words/batch * 1M steps": 256 x 512 = 131,072 tokens, 90% of the steps at 128.
    assert (bert.batch_size, bert.block_size, bert.steps, bert.epochs) == (256, 512, 1_000_000, None)
    assert bert.batch_size * bert.block_size == 128 * 1024
    assert (bert.short_block_size, bert.short_fraction) == (128, 0.9)
    # ALBERT: "Max_seq_len = 512", "BS = 4096, ..., 125000 steps".
    assert (albert.batch_size, albert.block_size, albert.steps) == (4096, 512, 125_000)
    # ELMo (bilm-tf): 128 sequences per GPU on 3 GPUs, 20 words unrolled, 10 epochs.
    assert (elmo.batch_size, elmo.block_size, elmo.epochs, elmo.steps) == (384, 20, 10, None)
    assert scale["deberta"] is scale["rnn"] is scale["transformer"] is None
    # The Transformer: "Batch size 25000", about 25,000 source and 25,000 target tokens; base: 100,000 steps.
    transformer = RECIPES["transformer"].translation_scale
    assert (transformer.batch_tokens, transformer.steps) == (25_000 + 25_000, 100_000)
    assert RECIPES["rnn"].translation_scale is None  # the seed gives no run size of the RNN papers
    with pytest.raises(ValueError, match="steps or in epochs"):
        PaperScale(batch_size=1, block_size=1, source="neither")


# Each preset's paper run: (sequences per batch, or the Transformer's tokens; tokens per sequence; its length; peak lr).
# Seed 000, GPT-1's section 4.1 table: "Batch size 64 random sample x 512 token/sample", "Schedule 100 epochs", the
# learning rate raised over steps 0-2000 to 2.5e-4. GPT-2's section 2.3: the context grew from 512 to 1024 tokens and
# the batch to 512 (seed 003 says the same); its section 3: each size's learning rate was tuned on held-out WebText and
# is not given, nor is the run's length, so plm takes GPT-1's 2.5e-4 and 100 epochs. The Transformer's section 5
# table: "Batch size 25000" (25,000 source and 25,000 target tokens, the paper's section 5.1), base 100,000 steps and
# big 300,000, lrate = d_model^-0.5 min(step^-0.5, step warmup^-1.5) with warmup_steps 4000; base's d_model is 512
# (its section 3.1), big's 1024 (the paper's Table 3).
SEEDS = {
    "gpt1": (64, 512, {"epochs": 100}, 2.5e-4),
    **{gpt2: (512, 1024, {"epochs": 100}, 2.5e-4) for gpt2 in ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")},
    "transformer-base": (25_000 + 25_000, None, {"steps": 100_000}, 512**-0.5 * 4000**-0.5),
    "transformer-big": (25_000 + 25_000, None, {"steps": 300_000}, 1024**-0.5 * 4000**-0.5),
}


@pytest.mark.parametrize("preset", SEEDS)
def test_each_preset_s_paper_run_is_its_seeds(preset: str) -> None:
    batch, context, length, peak = SEEDS[preset]
    paper = recipe_of(PRESETS[preset]).paper
    if context is None:  # an encoder-decoder's batch in tokens
        settings, _ = translation_run(preset, max_tokens=batch)
        assert settings == {"grad_accum": 1, **length}
        d_model = PRESETS[preset].dim
        for step_num in (1, 2000, 4000, 4001, 300_000):  # step_num counts from 1, plm's steps from 0
            lrate = d_model**-0.5 * min(step_num**-0.5, step_num * 4000**-1.5)
            assert learning_rate(paper.schedule, step_num - 1, paper.lr, paper.warmup, 300_000, 0.0) == pytest.approx(
                lrate)
    else:
        run = paper_run(preset, batch_size=batch)
        assert (run.global_batch, run.settings["block_size"]) == (batch, context)
        assert {name: run.settings[name] for name in length} == length
    assert paper.lr == pytest.approx(peak)
    assert learning_rate(paper.schedule, paper.warmup - 1, paper.lr, paper.warmup, 300_000, 0.0) == pytest.approx(peak)
    # plm pretrain --help prints them, on the paper line of the preset's group.
    (line,) = [line for line in recipe_table().splitlines() if re.match(rf"    paper of (.+, )?{preset}[,:]", line)]
    size = f"batches of {batch:,} tokens" if context is None else f"batch {batch:,} x {context:,}"
    how_long = f"{length['steps']:,} steps" if "steps" in length else f"{length['epochs']} epochs"
    assert f"lr {peak:.3g}," in line and size in line and how_long in line


@pytest.mark.parametrize(("batch", "micro_batch", "processes", "expected"), [
    (4096, 16, 1, (16, 256)),   # ALBERT's: the micro-batch divides the batch
    (384, 16, 3, (16, 8)),      # ELMo's on its 3 GPUs
    (100, 16, 1, (10, 10)),     # 16 does not divide 100: the largest divisor below it does
    (384, 256, 1, (192, 2)),    # nor 256 384
    (7, 16, 1, (7, 1)),         # a batch that fits one micro-batch
])
def test_micro_batch_times_accumulation_times_processes_is_the_paper_s_batch(
    batch: int, micro_batch: int, processes: int, expected: tuple[int, int]
) -> None:
    micro, accumulated = accumulation(batch, micro_batch, processes)
    assert (micro, accumulated) == expected
    assert micro * accumulated * processes == batch


def test_a_batch_the_processes_cannot_share_is_refused() -> None:
    with pytest.raises(PLMError, match="4,096 sequences cannot be shared evenly by 3 processes"):
        accumulation(4096, 16, 3)


def test_the_paper_s_run_at_the_model_s_size() -> None:
    albert = paper_run("albert-base", batch_size=16)
    assert albert.settings == {"batch_size": 16, "grad_accum": 256, "block_size": 512, "steps": 125_000}
    assert albert.global_batch == 4096
    assert albert.describe() == ("`hyperparameters` paper: batch 4,096 = 16 x 256 accumulated, 125,000 steps, "
                                 "512 tokens per sequence (ALBERT section 4.1)")
    bert = paper_run("bert-base", batch_size=32, processes=2)
    assert bert.settings == {"batch_size": 32, "grad_accum": 4, "block_size": 512, "steps": 1_000_000,
                             "short_block_size": 128, "short_steps": 900_000}
    assert "128 tokens per sequence for the first 900,000 steps, then 512" in bert.describe()
    gpt = paper_run("gpt2-micro", batch_size=16)  # GPT-2's run on a context of 64: the sequences are cut, as it says
    assert gpt.settings == {"batch_size": 16, "grad_accum": 32, "block_size": 64, "epochs": 100}
    assert gpt.describe().splitlines()[1].endswith("1024 tokens per sequence are cut to the model's context of 64")
    assert paper_run("elmo-micro", batch_size=16).settings == {"batch_size": 16, "grad_accum": 24, "block_size": 20,
                                                               "epochs": 10}
    deberta = paper_run("deberta-micro", batch_size=16)
    assert deberta.settings == {} and "only the optimizer and its schedule" in deberta.describe()


def test_flags_given_explicitly_win() -> None:
    given = paper_run("albert-base", 16, given={"steps": 10, "block_size": 128, "grad_accum": 2})
    assert given.settings == {"batch_size": 16, "grad_accum": 2, "block_size": 128, "steps": 10}
    assert "batch 32 = 16 x 2 accumulated (the paper's: 4,096)" in given.describe()
    assert paper_run("albert-base", 16, given={"epochs": 3}).settings["epochs"] == 3
    assert "steps" not in paper_run("albert-base", 16, given={"epochs": 3}).settings
    # BERT's short phase is 90% of the run's steps, the paper's or those given; a phase given is kept.
    assert paper_run("bert-base", 16, given={"steps": 1000}).settings["short_steps"] == 900
    kept = paper_run("bert-base", 16, given={"short_block_size": 64, "short_steps": 5})
    assert (kept.settings["short_block_size"], kept.settings["short_steps"]) == (64, 5)
    assert "short_steps" not in paper_run("bert-base", 16, given={"block_size": 128}).settings  # none shorter


def test_a_run_in_epochs_reads_the_text_that_many_times_and_a_short_phase_comes_first(text_file: Path,
                                                                                       tmp_path: Path) -> None:
    assert steps_for_epochs(2.5, per_epoch=1000, per_step=300) == 9  # 2,500 tokens: 8.3 steps
    setup = PretrainSetup(model="gpt2-micro", train_files=(str(text_file),), vocab_size=300, batch_size=4,
                          block_size=16, short_block_size=8, short_steps=2)
    trainer, _ = prepare(setup, TrainingConfig(epochs=2, grad_accum=2, device="cpu"), tmp_path / "run")
    assert trainer.config.steps == math.ceil(2 * trainer.objective.train_tokens / (4 * 16 * 2))
    assert [trainer.objective.batch(step, 0)["tokens"].shape[1] - 1 for step in range(4)] == [8, 8, 16, 16]
    for wrong in ({"short_block_size": 8}, {"short_steps": 2}, {"short_block_size": 32, "short_steps": 2}):
        with pytest.raises(PLMError, match="`short_"):
            block_size_of(dataclasses.replace(setup, **{"short_block_size": None, "short_steps": 0} | wrong))


@pytest.fixture
def small_gpt_paper(monkeypatch: pytest.MonkeyPatch) -> PaperScale:
    """GPT's recipe with a paper run the size of a test, for every size: the paper's arithmetic on a micro preset."""
    scale = PaperScale(batch_size=6, block_size=512, steps=2, short_block_size=16, short_fraction=0.5, source="test")
    monkeypatch.setitem(RECIPES, "gpt", dataclasses.replace(RECIPES["gpt"], paper_scale=scale, paper_by_size=None))
    return scale


def test_the_cli_sets_the_paper_s_run_and_a_resume_keeps_it(small_gpt_paper: PaperScale, text_file: Path,
                                                             tmp_path: Path, capsys: pytest.CaptureFixture,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "run"
    argv = ["pretrain", "--model", "gpt2-micro", "--hyperparameters", "paper", "--batch-size", "4", "--block-size",
            "32", "--min-lr", "1e-5", "--train", str(text_file), "--out", str(out), *QUICK]
    assert main(argv) == 0
    assert ("--hyperparameters paper: batch 6 = 3 x 2 accumulated, 2 steps, 16 tokens per sequence for the first "
            "1 steps, then 32 (test); --block-size as given") in capsys.readouterr().err
    flags = json.loads((out / "run.json").read_text())["flags"]
    paper_values = {"batch_size": 3, "grad_accum": 2, "block_size": 32, "steps": 2, "short_block_size": 16,
                    "short_steps": 1}
    assert {name: flags[name] for name in paper_values} == paper_values
    assert json.loads((out / "training_config.json").read_text())["grad_accum"] == 2
    # The recipe changes; the run resumed (extended to 3 steps) trains with the values it started with.
    monkeypatch.setitem(RECIPES, "gpt", dataclasses.replace(
        RECIPES["gpt"], paper_scale=dataclasses.replace(small_gpt_paper, batch_size=8, block_size=64)))
    resumed = {}

    def pretrain(setup: PretrainSetup, training: TrainingConfig, *args, **kwargs):
        resumed.update(setup=setup, training=training)
        return None, None, {}

    monkeypatch.setattr(plm.cli.pretrain, "pretrain", pretrain)
    assert main(["pretrain", "--out", str(out), "--resume", "--hyperparameters", "paper", "--steps", "3"]) == 0
    setup, training = resumed["setup"], resumed["training"]
    assert (setup.batch_size, training.grad_accum, setup.block_size, training.steps) == (3, 2, 32, 3)
    assert (setup.short_block_size, setup.short_steps) == (16, 1)
    assert "--hyperparameters paper" not in capsys.readouterr().err  # nothing set anew: the run.json's values


def test_a_dry_run_writes_nothing_and_projects_the_run(small_gpt_paper: PaperScale, text_file: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "never"
    argv = ["pretrain", "--model", "gpt2-micro", "--hyperparameters", "paper", "--batch-size", "4", "--steps", "1000",
            "--short-block-size", "8", "--short-steps", "1", "--train", str(text_file), "--out", str(out), "--dry-run",
            *QUICK]
    assert main(argv) == 0
    assert not out.exists()
    report = capsys.readouterr().out
    assert "3 optimizer steps timed after one warm-up step" in report
    # Each phase timed on its own batches of 6 sequences (3 x 2 accumulated): a phase of one step on that step
    # again, of 8 tokens, the rest of 64.
    assert "1 steps of 8 tokens per sequence: " in report and " s per step of 48 tokens, " in report
    assert "999 steps of 64 tokens per sequence: " in report and " s per step of 384 tokens, " in report
    assert "tokens/s" in report and "projected: 1,000 steps in " in report and "peak memory" in report


def test_a_dry_run_of_a_large_step_on_the_cpu_times_a_few_micro_batches_of_one_sequence(
        text_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A paper's step (GPT-2's 512 sequences of 1,024 tokens) takes minutes on a CPU: a dry run must not run one.

    Oracle: the forward passes counted, and the projection rebuilt from the pieces the module says it uses."""
    from plm.objectives.clm import CausalLMObjective
    from plm.training import dry_run as dry_run_module
    from plm.training.pretrain import pretrain_dry_run

    sequences: list[int] = []
    loss = CausalLMObjective.loss
    monkeypatch.setattr(CausalLMObjective, "loss", lambda self, model, batch: (
        sequences.append(len(batch["tokens"])), loss(self, model, batch))[1])
    monkeypatch.setattr(dry_run_module, "WHOLE_STEP_SECONDS", 0.0)  # a step too long to run, as a paper's
    passes: list[float] = []
    forward_backward = dry_run_module.forward_backward
    monkeypatch.setattr(dry_run_module, "forward_backward", lambda *args: (
        passes.append(forward_backward(*args)), passes[-1])[1])
    setup = PretrainSetup(model="gpt2-micro", train_files=(str(text_file),), vocab_size=300, batch_size=16,
                          block_size=32)
    training = TrainingConfig(steps=1000, grad_accum=8, device="cpu", precision="fp32", progress=False)
    measured = pretrain_dry_run(setup, training, tmp_path / "never")
    assert sequences == [1, 2, 1, 1, 2, 2]  # warm-ups, then 1 and 2 timed twice each: no step of 128
    assert not (tmp_path / "never").exists()
    (phase,) = measured.phases
    assert phase.tokens_per_step == 16 * 8 * 32 and phase.steps == 1000
    one, two = min(passes[2:4]), min(passes[4:])  # a pass's fixed cost and one sequence's; one more sequence's
    assert phase.seconds_per_step >= (one + 15 * max(0, two - one)) * 8  # 16 x 8 sequences, and the update
    assert "micro-batches of 1 and 2 sequences timed" in measured.report()
    assert "steps of 128 sequences per process projected" in measured.report()


def test_plan_shows_the_paper_s_micro_batch_and_global_batch(capsys: pytest.CaptureFixture) -> None:
    argv = ["plan", "--model", "albert-base", "--hyperparameters", "paper", "--batch-size", "48", "--device", "cpu",
            "--memory", "1TB"]
    assert main(argv) == 0
    shown = capsys.readouterr().out
    assert "--hyperparameters paper: batch 4,096 = 32 x 128 accumulated, 125,000 steps" in shown
    # The paper's optimizer, and the micro-batch (the largest divisor of 4,096 up to 48) at the paper's length.
    assert "lamb, batch 32 x 512 tokens per process" in shown


@pytest.mark.parametrize(("max_tokens", "processes", "given", "expected"), [
    (4096, 1, {}, {"grad_accum": 13, "steps": 100_000}),       # 13 x 4,096 = 53,248 >= 50,000 > 12 x 4,096
    (4096, 2, {}, {"grad_accum": 7, "steps": 100_000}),        # 7 x 4,096 x 2 = 57,344
    (50_000, 1, {}, {"grad_accum": 1, "steps": 100_000}),
    (4096, 1, {"grad_accum": 2, "steps": 10}, {"grad_accum": 2, "steps": 10}),  # flags given win
])
def test_the_transformer_accumulates_micro_batches_up_to_its_paper_s_tokens(
    max_tokens: int, processes: int, given: dict[str, int], expected: dict[str, int]
) -> None:
    settings, line = translation_run("transformer-base", max_tokens, processes, given)
    assert settings == expected
    assert "(the paper's: 50,000)" in line


def test_seq2seq_train_takes_the_paper_s_token_batches_and_a_resume_keeps_them(
        date_pair_files: Path, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(RECIPES, "transformer", dataclasses.replace(
        RECIPES["transformer"], translation_scale=TranslationScale(batch_tokens=600, steps=2, source="test"),
        paper_by_size=None))  # for every size
    out = tmp_path / "run"
    files = ["--src", str(date_pair_files / "src.txt"), "--tgt", str(date_pair_files / "tgt.txt")]
    assert main(["seq2seq", "train", "--model", "transformer-micro", "--hyperparameters", "paper", *files,
                 "--max-tokens", "256", "--metric-examples", "0", "--out", str(out), *QUICK]) == 0
    assert ("--hyperparameters paper: batches of 768 source and target tokens = --max-tokens 256 x 3 accumulated "
            "(the paper's: 600), 2 steps (test)") in capsys.readouterr().err
    assert json.loads((out / "training_config.json").read_text())["grad_accum"] == 3
    assert json.loads((out / "run.json").read_text())["flags"]["steps"] == 2
    # The recipe changes; the run resumed (extended to 3 steps) keeps the accumulation it started with.
    monkeypatch.setitem(RECIPES, "transformer", dataclasses.replace(
        RECIPES["transformer"], translation_scale=TranslationScale(batch_tokens=6000, steps=2, source="test")))
    assert main(["seq2seq", "train", "--out", str(out), "--resume", "--steps", "3", "--no-progress"]) == 0
    assert "--hyperparameters paper" not in capsys.readouterr().err
    assert json.loads((out / "training_config.json").read_text())["grad_accum"] == 3
    assert json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 3
