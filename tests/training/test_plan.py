"""plm plan: exact parameter bytes, sharding, and activations against torch.profiler's peak."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile
from torch.profiler._memory_profiler import Action

from plm.cli.main import main
from plm.models import from_config, model_class, preset_config
from plm.training.parallel import Parallelism, prepare_model
from plm.training.plan import Memory, PlanSetup, activation_bytes, plan

ROOMY = Memory(10**12, "given")


def peak_tensor_memory(step: Callable[[], object]) -> int:
    """Peak bytes of the tensors ``step`` creates and holds at one time (torch.profiler's memory timeline)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        step()
    live = peak = 0
    for _, action, _, size in prof._memory_profile().timeline:
        live += size if action == Action.CREATE else -size if action == Action.DESTROY else 0
        peak = max(peak, live)
    return peak


def training_model(name: str, heads: tuple[str, ...] = ()):
    config = preset_config(name)
    return from_config(model_class(config).config_with_heads(config, heads))


@pytest.mark.parametrize(
    ("name", "heads"), [("gpt2-mini", ()), ("bert-mini", ("mlm", "nsp")), ("albert-mini", ("mlm", "sop"))]
)
def test_parameter_bytes_are_4_per_distinct_parameter(name: str, heads: tuple[str, ...]) -> None:
    result = plan(PlanSetup(name), ROOMY)
    expected = sum(p.numel() for p in training_model(name, heads).parameters())  # a shared tensor once
    assert result.parameters == expected
    assert result.device["parameters"] == result.device["gradients"] == 4 * expected
    assert result.device["optimizer state"] == 2 * 4 * expected  # AdamW's two moments


def test_gpt2_has_its_published_124m_parameters_and_albert_shares_its_layers() -> None:
    assert plan(PlanSetup("gpt2"), ROOMY).parameters == 124_439_808
    albert = plan(PlanSetup("albert-base"), ROOMY).parameters
    assert 11_000_000 < albert < 13_000_000  # ALBERT-base: 12M, its one block counted once, not 12 times


def test_fsdp_shards_everything_and_ddp_nothing() -> None:
    single = plan(PlanSetup("gpt2-mini", processes=1, strategy="ddp"), ROOMY)
    ddp = plan(PlanSetup("gpt2-mini", processes=4, strategy="ddp"), ROOMY)
    fsdp = plan(PlanSetup("gpt2-mini", processes=4, strategy="fsdp", optimizer="adagrad"), ROOMY)
    weights = 4 * single.parameters
    assert ddp.device["parameters"] == ddp.device["gradients"] == ddp.device["gradient buckets"] == weights
    assert fsdp.device["parameters"] == fsdp.device["gradients"] == pytest.approx(weights / 4, abs=4)
    assert fsdp.device["optimizer state"] == fsdp.device["parameters"]  # Adagrad: one sum per parameter
    block = sum(p.numel() for p in training_model("gpt2-mini").blocks[0].parameters())
    assert fsdp.device["all-gather (one block)"] == 2 * 4 * block
    offloaded = plan(PlanSetup("gpt2-mini", processes=4, strategy="fsdp", offload=True), ROOMY)
    assert offloaded.cpu == {"parameters": fsdp.device["parameters"], "optimizer state": 2 * fsdp.device["parameters"]}
    assert "parameters" not in offloaded.device and offloaded.device_total < fsdp.device_total


def causal_step(model, batch: int, block: int) -> Callable[[], None]:
    tokens = torch.randint(0, model.config.vocab_size, (batch, block + 1))

    def step() -> None:
        logits = model(tokens[:, :-1]).logits
        F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten(), reduction="sum").backward()

    return step


def masked_step(model, batch: int, block: int) -> Callable[[], None]:
    ids = torch.randint(0, model.config.vocab_size, (batch, block))
    masked = torch.rand(batch, block) < 0.15

    def step() -> None:
        logits = model(ids, attention_mask=torch.ones_like(ids), masked_positions=masked).logits
        F.cross_entropy(logits, ids[masked], reduction="sum").backward()

    return step


@pytest.mark.parametrize("checkpoint", [False, True], ids=["whole", "checkpointed"])
@pytest.mark.parametrize(("name", "heads", "make_step", "batch", "block"), [
    ("gpt2-mini", (), causal_step, 4, 128),
    ("gpt2-mini", (), causal_step, 2, 256),
    ("bert-mini", ("mlm",), masked_step, 8, 128),
    ("albert-mini", ("mlm",), masked_step, 8, 128),
    ("deberta-mini", ("mlm",), masked_step, 8, 128),  # c2p and p2c in every pass, and the mask decoder's 2 passes
])
def test_activations_are_within_15_percent_of_a_measured_training_step(name, heads, make_step, batch, block,
                                                                       checkpoint: bool) -> None:
    torch.manual_seed(0)
    model = training_model(name, heads).train()
    if checkpoint:
        prepare_model(model, Parallelism(checkpoint_activations=True), torch.device("cpu"), torch.float32)
    for parameter in model.parameters():  # gradients are planned apart: keep them out of the measured peak
        parameter.grad = torch.zeros_like(parameter)
    measured = peak_tensor_memory(make_step(model, batch, block))
    setup = PlanSetup(name, batch=batch, block=block, checkpoint_activations=checkpoint, device="cpu")
    estimate = plan(setup, ROOMY).device["activations"]
    assert estimate == pytest.approx(measured, rel=0.15)


def test_checkpointing_keeps_block_inputs_and_one_block() -> None:
    batch, block, dim, ffn_dim, heads = 4, 128, 256, 1024, 4  # gpt2-mini's shape

    def activations(layers: int, checkpoint: bool) -> int:
        return activation_bytes(preset_config("gpt2-mini", layers=layers), 1.0, batch, block, checkpoint)

    per_value = 4 * batch * block  # fp32, every token
    one_block = 10 * dim + 2 * ffn_dim + 3 * heads * block
    assert activations(8, checkpoint=False) - activations(4, checkpoint=False) == 4 * one_block * per_value
    assert activations(8, checkpoint=True) - activations(4, checkpoint=True) == 4 * dim * per_value  # inputs alone
    with_checkpoints = plan(PlanSetup("gpt2-mini", batch=batch, block=block, checkpoint_activations=True, device="cpu"),
                            ROOMY)
    assert with_checkpoints.activations == {"without": activations(4, False), "with": activations(4, True)}
    assert with_checkpoints.device["activations"] == activations(4, True)


def test_cuda_plans_keep_no_attention_scores() -> None:
    cpu, cuda = (plan(PlanSetup("gpt2-mini", batch=4, block=256, device=device), ROOMY).activations["without"]
                 for device in ("cpu", "cuda"))
    assert cpu - cuda == 4 * 4 * 256 * 4 * (3 * 4 * 256)  # layers x tokens x fp32 x 3 rows of T per head


def test_cli_prints_the_table_and_a_verdict(capsys: pytest.CaptureFixture, tmp_path) -> None:
    out = tmp_path / "plan.json"
    code = main(["plan", "--model", "gpt2-xl", "--processes", "8", "--strategy", "fsdp", "--device", "cuda",
                 "--memory", "80GB", "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    assert "1,557,611,200 parameters" in printed and "all-gather (one block)" in printed and "GiB" in printed
    assert printed.splitlines()[-1].startswith("fits: ") and "74.5 GiB (given)" in printed
    written = json.loads(out.read_text())
    assert written["device"]["parameters"] == 4 * 1_557_611_200 // 8 and written["fits"] is True
    assert main(["plan", "--model", "gpt2-xl", "--device", "cuda", "--memory", "16GB"]) == 1  # a script can tell
    assert capsys.readouterr().out.splitlines()[-1].startswith("does NOT fit: ")


@pytest.mark.parametrize("args", [["--model", "gpt9"], ["--model", "gpt2", "--memory", "lots"],
                                  ["--model", "elmo-mini"], ["--model", "gpt2", "--offload"],
                                  ["--model", "gpt2", "--block-size", "4096"]])
def test_cli_errors_are_one_line_and_exit_code_2(args: list[str], capsys: pytest.CaptureFixture) -> None:
    assert main(["plan", *args]) == 2
    error = capsys.readouterr().err
    assert error.startswith("plm plan: error: ") and error.count("\n") == 1


@pytest.mark.parametrize("preset, family", [("transformer-base", "transformer"), ("elmo-mini", "elmo")])
def test_a_family_plan_does_not_count_yet_says_so(preset: str, family: str, capsys: pytest.CaptureFixture) -> None:
    assert main(["plan", "--model", preset]) == 2
    assert capsys.readouterr().err == (f"plm plan: error: plm plan does not plan the {family} family yet: it counts "
                                       "the decoder-only and encoder stacks of GPT, BERT, ALBERT and DeBERTa\n")


def test_batch_and_block_are_spelled_as_pretrain_spells_them(capsys: pytest.CaptureFixture) -> None:
    assert main(["plan", "--model", "gpt2", "--batch-size", "2", "--block-size", "128", "--memory", "80GB",
                 "--device", "cpu"]) == 0
    assert "batch 2 x 128 tokens per process" in capsys.readouterr().out


def test_a_bad_number_is_refused_by_the_parser(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", "--model", "gpt2", "--processes", "0"])
    assert exit_info.value.code == 2 and capsys.readouterr().err.count("\n") == 1
