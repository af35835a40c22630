"""Sharded data parallelism (FSDP) under torchrun, sharded checkpoints and activation checkpointing.

Two processes with FSDP must train as one process does on the same global batch (the
oracle: a plain run with twice the micro-batches), write checkpoints that resume bit for
bit (on 2 processes) or within rounding (on 1), consolidate into a model directory equal
to the plain run's, and hold about half of the model and optimizer state each. Only the
first process builds the whole model: the second hands the trainer a model on the meta
device and receives its shards (and buffers) of the first one's weights.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from safetensors.torch import load_file

import plm
from plm.cli.main import main
from plm.errors import PLMError
from plm.hf import save_hf
from plm.models import PRESETS
from plm.models.recipe import Hyperparameters
from plm.objectives.clm import CausalLMObjective
from plm.storage.checkpoint import CHECKPOINT_DIR, STATE_FILE, load_checkpoint, load_model, recover_checkpoint
from plm.storage.sharded_checkpoint import MODEL_SHARDS
from plm.tasks.finetune import FinetuneData, FinetuneOptimization, FinetuneSetup, finetune
from plm.training.parallel import Parallelism
from plm.training.plan import Memory, PlanSetup, plan
from plm.training.trainer import Trainer, TrainingConfig
from tests.training.test_resume import TORCHRUN, finish, kill, logged_losses, start, wait_for

RUN = ["--vocab-size", "400", "--block-size", "32", "--batch-size", "4", "--warmup", "2", "--no-progress",
       "--device", "cpu", "--steps", "6", "--save-every", "3", "--eval-every", "3", "--log-every", "1"]
FSDP = ["--strategy", "fsdp"]


def assert_close_losses(actual: list[dict], expected: list[dict], tolerance: float = 1e-5) -> None:
    assert [line["step"] for line in actual] == [line["step"] for line in expected]
    for got, want in zip(actual, expected):
        assert got.keys() == want.keys()
        for key in want:
            assert got[key] == pytest.approx(want[key], rel=tolerance, abs=tolerance), (got["step"], key)


def assert_same_weights(actual: torch.nn.Module, expected: torch.nn.Module, tolerance: float) -> None:
    expected_weights = expected.state_dict()
    assert actual.state_dict().keys() == expected_weights.keys()
    for name, tensor in actual.state_dict().items():
        torch.testing.assert_close(tensor, expected_weights[name], rtol=tolerance, atol=tolerance, msg=name)


# plm under torchrun with the trainer's prepare_model watched: what each process hands it (the bytes of the
# parameters not on the meta device) and holds after (its shards); the first process's weights before sharding
# and every process's shards after, to compare.
PROBE = """
import json, os, sys
from pathlib import Path
from safetensors.torch import save_file
import plm.training.trainer as trainer
from plm.cli.main import main

prepare, rank = trainer.prepare_model, int(os.environ["RANK"])
out = Path(sys.argv[sys.argv.index("--out") + 1])


def probed(model, *args):
    handed = sum(p.numel() * p.element_size() for p in model.parameters() if not p.is_meta)
    if rank == 0:
        save_file({n: t.detach().clone() for n, t in model.state_dict().items()}, f"{out}.whole.safetensors")
    model = prepare(model, *args)
    shards = {n: p.to_local().detach().contiguous() for n, p in model.named_parameters()}
    save_file(shards, f"{out}.shards-{rank}.safetensors")
    held = sum(t.numel() * t.element_size() for t in shards.values())
    Path(f"{out}.bytes-{rank}.json").write_text(json.dumps({"handed": handed, "held": held}))
    return model


trainer.prepare_model = probed
sys.exit(main())
"""


def probed_torchrun(tmp_path: Path) -> list[str]:
    """TORCHRUN with :data:`PROBE` watching each process's start (:func:`assert_built_on_the_first_process_only`)."""
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE, encoding="utf-8")
    return [*TORCHRUN[:-2], str(probe)]


def assert_built_on_the_first_process_only(out: Path) -> None:
    """The second process handed the trainer no parameter memory at all (a model on the meta device) and holds
    half the model after; each process's shards are its rows of the first process's whole weights."""
    whole = load_file(f"{out}.whole.safetensors")
    whole_bytes = sum(tensor.numel() * tensor.element_size() for tensor in whole.values())
    counts = [json.loads(Path(f"{out}.bytes-{rank}.json").read_text()) for rank in range(2)]
    assert [count["handed"] for count in counts] == [whole_bytes, 0]
    assert sum(count["held"] for count in counts) == whole_bytes
    assert counts[1]["held"] == pytest.approx(whole_bytes / 2, rel=0.01)
    for rank in range(2):
        shards = load_file(f"{out}.shards-{rank}.safetensors")
        assert shards.keys() == whole.keys()
        for name, shard in shards.items():  # FSDP2 shards dimension 0 as torch.chunk does
            torch.testing.assert_close(shard, whole[name].chunk(2)[rank], rtol=0, atol=0, msg=f"{name} of {rank}")


def test_an_fsdp_run_trains_like_one_process_and_resumes_on_two_processes_or_one(text_file: Path, tmp_path: Path,
                                                                                 group_of_one) -> None:
    """Two processes with FSDP against the oracle of one process taking both micro-batches of each step:
    the same losses and, consolidated, the same weights. Killed after a checkpoint, the run resumes bit for
    bit on 2 processes, and (a copy of it) on 1 with the same global batch (so the same losses, to rounding).
    The second process never builds the whole model: its shards come from the first."""
    assert main(["tokenizer", "train", str(text_file), "--vocab-size", "400", "--out", str(tmp_path / "tok")]) == 0
    args = ["pretrain", *RUN, "--steps", "12", "--model", "gpt2-micro", "--train", str(text_file), "--dropout", "0",
            "--tokenizer", str(tmp_path / "tok")]
    straight = start(probed_torchrun(tmp_path), [*args, *FSDP], tmp_path / "straight")
    interrupted = start(TORCHRUN, [*args, *FSDP], tmp_path / "on-two")
    wait_for(tmp_path / "on-two" / CHECKPOINT_DIR / STATE_FILE, interrupted, tmp_path / "on-two")
    kill(interrupted)
    recover_checkpoint(tmp_path / "on-two")
    assert json.loads((tmp_path / "on-two" / CHECKPOINT_DIR / STATE_FILE).read_text())["step"] < 12
    shutil.copytree(tmp_path / "on-two", tmp_path / "on-one")
    resumed = start(TORCHRUN, [*args, *FSDP, "--resume"], tmp_path / "on-two")
    # Meanwhile, here: the copy resumed by one process, and the oracle.
    assert main([*args, *FSDP, "--resume", "--out", str(tmp_path / "on-one")]) == 0
    assert main([*args, "--grad-accum", "2", "--out", str(tmp_path / "plain")]) == 0
    finish(straight, tmp_path / "straight")
    finish(resumed, tmp_path / "on-two")

    assert_built_on_the_first_process_only(tmp_path / "straight")
    expected = logged_losses(tmp_path / "straight")
    assert [line["step"] for line in expected] == list(range(1, 13))
    assert logged_losses(tmp_path / "on-two") == expected
    assert_close_losses(logged_losses(tmp_path / "on-one"), expected)
    assert_close_losses(logged_losses(tmp_path / "plain"), expected)
    assert (tmp_path / "straight" / CHECKPOINT_DIR / MODEL_SHARDS).is_dir()
    assert not (tmp_path / "straight" / CHECKPOINT_DIR / "model.safetensors").exists(), "no process wrote it whole"
    assert main(["convert", "--model", str(tmp_path / "straight"), "--out", str(tmp_path / "whole")]) == 0
    assert_same_weights(load_model(tmp_path / "whole"), load_model(tmp_path / "plain"), tolerance=1e-5)


SHARING = ("all", "attention", "ffn")  # ALBERT's kinds of cross-layer sharing
# plm pretrain of albert-micro once for each kind of sharing, into OUT-all, OUT-attention and OUT-ffn.
SHARINGS = f"""
import dataclasses, sys
import plm.training.trainer as trainer
from plm.cli.main import main
from plm.models import PRESETS

trainer.teardown_distributed = lambda: None  # one process group for the three runs
argv = sys.argv[1:]
out = argv.index("--out")
argv, base = argv[:out] + argv[out + 2:], argv[out + 1]
albert = PRESETS["albert-micro"]
for sharing in {SHARING!r}:
    PRESETS["albert-micro"] = dataclasses.replace(albert, sharing=sharing)
    if main([*argv, "--out", f"{{base}}-{{sharing}}"]):
        sys.exit(2)
"""


def test_fsdp_shards_albert_whose_blocks_share_all_or_one_sublayer(text_file: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """One block run at every layer is gathered and resharded at each; a sub-layer that distinct blocks hold
    (FSDP2 takes each parameter into one unit only) is a unit of its own. LAMB steps on the shards."""
    assert main(["tokenizer", "train", str(text_file), "--kind", "unigram", "--vocab-size", "400",
                 "--out", str(tmp_path / "tok")]) == 0
    worker = tmp_path / "sharings.py"
    worker.write_text(SHARINGS, encoding="utf-8")
    args = ["pretrain", *RUN, "--steps", "3", "--save-every", "3", "--eval-every", "3", "--model", "albert-micro",
            "--train", str(text_file), "--tokenizer", str(tmp_path / "tok"), "--dropout", "0"]
    sharded = start([*TORCHRUN[:-2], str(worker)], [*args, *FSDP], tmp_path / "fsdp")
    albert = PRESETS["albert-micro"]
    for sharing in SHARING:  # the oracle, here meanwhile: one process taking both micro-batches of each step
        monkeypatch.setitem(PRESETS, "albert-micro", dataclasses.replace(albert, sharing=sharing))
        assert main([*args, "--grad-accum", "2", "--out", str(tmp_path / f"one-{sharing}")]) == 0
    finish(sharded, tmp_path / "fsdp")
    for sharing in SHARING:
        assert_close_losses(logged_losses(tmp_path / f"fsdp-{sharing}"), logged_losses(tmp_path / f"one-{sharing}"))


def test_a_sharded_checkpoint_loads_whole_and_converts_to_hugging_face(tmp_path: Path, group_of_one) -> None:
    trainer = sharded_run(tmp_path / "run")
    whole = load_model(tmp_path / "run")  # read from the shards in one process
    assert_same_weights(whole, plain_copy(trainer), tolerance=0)
    save_hf(whole, tmp_path / "hf")
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["model_type"] == "gpt2"


ROOT = Path(__file__).resolve().parents[2]  # the repository: the worker imports tests.training.test_fsdp
LOCAL_SHARES = """
import json, sys
import torch
sys.path.insert(0, {root!r})
import plm
from tests.training.test_fsdp import clm_objective
from plm.training.parallel import Parallelism, built_on_first_process, prepare_model
from plm.training.trainer import Trainer, TrainingConfig
from plm.training.distributed import teardown_distributed

model = plm.from_preset("gpt2-mini")
whole = sum(p.numel() for p in model.parameters())
config = TrainingConfig(steps=1, device="cpu", progress=False, save_every=10, eval_every=10,
                        parallelism=Parallelism("fsdp"))
trainer = Trainer(model, clm_objective(), config, {out!r})
trainer.optimizer_step(trainer.wrap(trainer.model))
local = lambda t: t.to_local() if hasattr(t, "to_local") else t
parameters = sum(local(p).numel() for p in trainer.model.parameters())
moments = sum(local(v).numel() for state in trainer.optimizer.state.values() for k, v in state.items() if k != "step")
# A buffer outside the state dict (the sinusoidal table), of a model the second process builds on the meta device.
with built_on_first_process(Parallelism("fsdp"), trainer.distributed):
    seq2seq = plm.from_preset("transformer-micro")
table = prepare_model(seq2seq, Parallelism("fsdp"), torch.device("cpu"), torch.float32).positions.table
table_kept = torch.equal(table, plm.from_preset("transformer-micro").positions.table)
with open({out!r} + f"/shares-{{trainer.distributed.rank}}.json", "w") as file:
    json.dump({{"whole": whole, "parameters": parameters, "moments": moments, "table_kept": table_kept}}, file)
teardown_distributed()
"""


def test_each_of_two_processes_holds_half_of_the_parameters_and_optimizer_state_and_every_buffer(
        tmp_path: Path) -> None:
    worker = tmp_path / "worker.py"
    worker.write_text(LOCAL_SHARES.format(root=str(ROOT), out=str(tmp_path)), encoding="utf-8")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(worker)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    shares = [json.loads((tmp_path / f"shares-{rank}.json").read_text()) for rank in range(2)]
    whole = shares[0]["whole"]
    assert sum(share["parameters"] for share in shares) == whole  # every value in exactly one shard
    planned = plan(PlanSetup("gpt2-mini", processes=2, strategy="fsdp", device="cpu"), Memory(10**12, "given")).device
    for share in shares:  # each dimension 0 split in two (rounded up on the first process)
        assert share["parameters"] == pytest.approx(whole / 2, rel=0.01)
        assert share["moments"] == 2 * share["parameters"]  # AdamW's two moments, of the process's own shard only
        assert 4 * share["parameters"] == pytest.approx(planned["parameters"], rel=0.01)  # what plm plan said
        assert 4 * share["moments"] == pytest.approx(planned["optimizer state"], rel=0.01)
        assert share["table_kept"]


@pytest.fixture
def group_of_one():
    """A process group of this process alone, as ``--strategy fsdp`` makes outside torchrun."""
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


QUIET = dict(device="cpu", progress=False)


def sharded_run(out: Path) -> Trainer:
    """One step of gpt2-micro with FSDP over this process alone, checkpointed into ``out``."""
    trainer = Trainer(plm.from_preset("gpt2-micro"), clm_objective(),
                      TrainingConfig(steps=1, **QUIET, parallelism=Parallelism("fsdp")), out)
    trainer.train()
    return trainer


def plain_copy(trainer: Trainer) -> torch.nn.Module:
    """The trainer's model as whole tensors in a model of its own."""
    model = plm.from_preset("gpt2-micro")
    model.load_state_dict(trainer.whole_weights())
    return model


def clm_objective() -> CausalLMObjective:
    ids = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 512, (4000,), generator=ids).numpy()
    return CausalLMObjective(tokens, tokens[:200], block_size=16, batch_size=2)


def test_activation_checkpointing_keeps_the_losses_and_gradients_and_saves_less_for_backward(group_of_one) -> None:
    # Dropout on: the recomputed blocks must draw the same masks as the first pass did.
    def step(checkpoint_activations: bool) -> tuple[float, dict[str, torch.Tensor], int]:
        torch.manual_seed(0)
        model = plm.from_preset("gpt2-micro")
        parallelism = Parallelism(checkpoint_activations=checkpoint_activations)
        trainer = Trainer(model, clm_objective(), TrainingConfig(steps=1, device="cpu", progress=False, clip=0,
                                                                 parallelism=parallelism), "unused")
        saved = []

        def keep(tensor: torch.Tensor) -> torch.Tensor:
            saved.append(tensor.numel() * tensor.element_size())
            return tensor

        torch.manual_seed(1)
        with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
            loss = trainer.objective.loss(trainer.model.train(), trainer.objective.batch(0, 0))["lm"]
        loss.backward()
        return loss.item(), {n: p.grad for n, p in trainer.model.named_parameters()}, sum(saved)

    plain_loss, plain_gradients, plain_saved = step(False)
    loss, gradients, saved = step(True)
    assert loss == pytest.approx(plain_loss, rel=1e-6)
    for name, gradient in gradients.items():
        torch.testing.assert_close(gradient, plain_gradients[name], rtol=1e-5, atol=1e-6, msg=name)
    assert saved < plain_saved / 2, f"{saved:,} bytes kept for backward with checkpointing, {plain_saved:,} without"


def test_a_one_process_fsdp_run_trains_as_a_plain_one(tmp_path: Path, group_of_one) -> None:
    """FSDP over a group of one is plain training with sharded checkpoints: the same numbers."""
    def train(strategy: str) -> list[dict]:
        torch.manual_seed(0)
        out = tmp_path / strategy
        config = TrainingConfig(steps=4, device="cpu", progress=False, log_every=1, eval_every=2, save_every=2,
                                keep_last=2, parallelism=Parallelism(strategy))
        Trainer(plm.from_preset("gpt2-micro"), clm_objective(), config, out).train()
        return logged_losses(out)

    assert train("fsdp") == train("ddp")
    snapshots = sorted(path.name for path in (tmp_path / "fsdp" / "checkpoints").iterdir())
    assert snapshots == ["step-000002", "step-000004"]  # whole models, to average
    assert_same_weights(load_model(tmp_path / "fsdp" / "checkpoints" / "step-000004"),
                        load_model(tmp_path / "ddp" / "checkpoints" / "step-000004"), tolerance=0)


def test_a_sharded_seq2seq_run_decodes_its_held_out_pairs_like_a_plain_one(date_pair_files: Path, tmp_path: Path,
                                                                          group_of_one) -> None:
    # The held-out BLEU decodes with the whole model: gathered from the shards for it.
    files = ["--src", str(date_pair_files / "src.txt"), "--tgt", str(date_pair_files / "tgt.txt")]
    args = ["seq2seq", "train", "--model", "transformer-micro", *files, "--vocab-size", "300", "--max-tokens", "256",
            "--steps", "4", "--eval-every", "4", "--log-every", "1", "--metric-examples", "4", "--no-progress",
            "--device", "cpu", "--dropout", "0"]
    assert main([*args, "--out", str(tmp_path / "plain")]) == 0
    assert main([*args, *FSDP, "--out", str(tmp_path / "fsdp")]) == 0
    plain, sharded = logged_losses(tmp_path / "plain"), logged_losses(tmp_path / "fsdp")
    assert "val_bleu" in sharded[-1]
    assert sharded == plain


def test_resuming_with_another_strategy_is_refused(tmp_path: Path, group_of_one) -> None:
    sharded = sharded_run(tmp_path / "fsdp")
    plain = Trainer(plm.from_preset("gpt2-micro"), clm_objective(), TrainingConfig(steps=1, **QUIET), tmp_path / "ddp")
    plain.train()
    with pytest.raises(PLMError, match="trained with `strategy` fsdp and is resumed with `strategy` ddp; resume it "
                                       "with `strategy` fsdp"):
        load_checkpoint(tmp_path / "fsdp", plain.model, plain.optimizer)
    with pytest.raises(PLMError, match="trained with `strategy` ddp and is resumed with `strategy` fsdp; resume it "
                                       "with `strategy` ddp"):
        load_checkpoint(tmp_path / "ddp", sharded.model, sharded.optimizer, sharded=True)


@pytest.mark.parametrize(("parallelism", "precision", "message"), [
    (Parallelism(offload=True), "fp32", "`offload` moves FSDP's shards to CPU memory; it needs `strategy` fsdp"),
    (Parallelism("fsdp", offload=True), "fp32", "on the CPU they are there already"),
    (Parallelism("fsdp"), "fp16", "`strategy` fsdp trains in fp32 or bf16, not fp16"),
    (Parallelism("zero3"), "fp32", "unknown `strategy` 'zero3'; choose one of ddp, fsdp"),
])
def test_a_setting_the_device_cannot_train_with_is_refused(parallelism: Parallelism, precision: str,
                                                           message: str) -> None:
    with pytest.raises(PLMError, match=re.escape(message)):
        TrainingConfig(device="cpu", precision=precision, parallelism=parallelism).with_defaults(
            Hyperparameters()
        ).validate()


def test_a_wrong_setting_is_one_line_before_anything_is_written(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture) -> None:
    code = main(["pretrain", "--model", "gpt2-micro", "--strategy", "fsdp", "--offload", "--steps", "1",
                 "--device", "cpu", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "on the CPU they are there already" in err, err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("damage", ["truncated", "missing"])
def test_a_damaged_shard_is_named(damage: str, tmp_path: Path, group_of_one) -> None:
    sharded_run(tmp_path / "run")
    shard = next((tmp_path / "run" / CHECKPOINT_DIR / MODEL_SHARDS).glob("*.safetensors"))
    if damage == "truncated":
        shard.write_bytes(shard.read_bytes()[:-100])
    else:
        shard.unlink()
    with pytest.raises(PLMError, match=re.escape(str(shard))):
        load_model(tmp_path / "run")


def test_a_sharded_fine_tuning_run_keeps_the_best_model_of_a_plain_one(tmp_path: Path, group_of_one) -> None:
    # The best model is saved whole from the shards whenever the validation metric improves.
    def best(strategy: str) -> torch.nn.Module:
        setup = FinetuneSetup(task="classify", data=FinetuneData(synthetic_size=64),
                              optimization=FinetuneOptimization(batch_size=8, epochs=2), device="cpu", progress=False,
                              parallelism=Parallelism(strategy))
        return finetune(setup, tmp_path / strategy).model

    assert_same_weights(best("fsdp"), best("ddp"), tolerance=1e-6)
