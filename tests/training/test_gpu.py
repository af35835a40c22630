"""The GPU path: bf16 autocast, fused AdamW, pinned batches, FSDP with offload, answers read from GPU logits,
torch.compile, CUDA-graph decoding, resuming. Skipped without CUDA.

The oracles are the same work done the plain way: a few steps of a micro model in bf16 on the
GPU must follow its fp32 losses on the CPU closely; FSDP with CPU offload, the compiled step and
a resumed run must give the losses of plain training on the GPU; the CUDA graph's decoding the
tokens and logits of eager decoding.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import plm
from plm.decoding import GenerationConfig, decode_steps
from plm.decoding.static_step import StaticStep
from plm.tasks.qa import encode_windows, predict_answer
from plm.tokenization.tokenizer import Tokenizer
from plm.training.parallel import Parallelism
from plm.training.pretrain import pretrain
from plm.training.trainer import TrainingConfig
from tests.tasks.test_task_qa import WORDS, long_example
from tests.training.test_resume import IN_PROCESS, gpt_setup, interrupted_then_resumable, logged_losses
from tests.training.test_training import assert_updates_follow, gain_updates
from tests.training.test_training import train_micro_gpt as train

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture
def group_of_one():
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def test_bf16_on_the_gpu_follows_fp32_on_the_cpu_with_fused_adamw(tmp_path: Path) -> None:
    gpu = train(tmp_path / "gpu", "cuda")
    assert gpu.dtype == torch.bfloat16 and gpu.optimizer.defaults["fused"]
    cpu = train(tmp_path / "cpu", "cpu")
    for got, want in zip(logged_losses(tmp_path / "gpu"), logged_losses(tmp_path / "cpu")):
        assert got["loss"] == pytest.approx(want["loss"], rel=2e-2)
    assert_updates_follow(gain_updates(gpu), gain_updates(cpu))  # the fp32 master weights


def test_fsdp_with_cpu_offload_trains_as_plain_gpu_training(tmp_path: Path, group_of_one) -> None:
    sharded = train(tmp_path / "fsdp", "cuda", "fp32", Parallelism("fsdp", offload=True, checkpoint_activations=True))
    assert next(sharded.model.parameters()).device.type == "cpu"  # the shards live in CPU memory
    train(tmp_path / "plain", "cuda", "fp32")
    for got, want in zip(logged_losses(tmp_path / "fsdp"), logged_losses(tmp_path / "plain")):
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-4)


def test_answers_are_read_from_logits_on_the_gpu_as_from_the_cpu() -> None:
    """The span search built its mask of allowed positions on the CPU and failed on CUDA logits."""
    tokenizer = Tokenizer.train_wordpiece([" ".join(WORDS)] * 20 + ["Paris France capital city"] * 20, vocab_size=200)
    example = long_example()
    windows = encode_windows(tokenizer, example, max_length=64, stride=20)
    generator = torch.Generator().manual_seed(0)
    starts = [torch.randn(len(w["input_ids"]), generator=generator) for w in windows]
    ends = [torch.randn(len(w["input_ids"]), generator=generator) for w in windows]
    on_cpu = predict_answer(example.context, windows, starts, ends)
    on_gpu = predict_answer(example.context, windows, [s.cuda() for s in starts], [e.cuda() for e in ends])
    assert on_gpu == on_cpu and on_cpu.text


def test_a_compiled_training_step_follows_the_eager_one(tmp_path: Path) -> None:
    train(tmp_path / "compiled", "cuda", "fp32", compile=True)
    train(tmp_path / "eager", "cuda", "fp32")
    for got, want in zip(logged_losses(tmp_path / "compiled"), logged_losses(tmp_path / "eager"), strict=True):
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-4)


def test_a_run_interrupted_on_the_gpu_resumes_as_the_straight_run(tmp_path: Path, text_file: Path) -> None:
    config = TrainingConfig(**{**IN_PROCESS, "device": "cuda", "precision": "fp32"})
    pretrain(gpt_setup(text_file), config, tmp_path / "straight")
    interrupted_then_resumable(gpt_setup(text_file), config, tmp_path / "halves").train(resume=True)
    straight, halves = logged_losses(tmp_path / "straight"), logged_losses(tmp_path / "halves")
    assert [line["step"] for line in halves] == [line["step"] for line in straight] == list(range(1, 9))
    for got, want in zip(halves, straight):  # the GPU's atomics add in any order: not bit-exact
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-5)


def test_cuda_graph_decoding_gives_the_tokens_and_logits_of_eager_decoding(monkeypatch) -> None:
    captures = []
    capture = StaticStep.capture
    monkeypatch.setattr(StaticStep, "capture", lambda step: (captures.append(step), capture(step)))
    torch.manual_seed(0)
    model = plm.from_preset("gpt2-micro").cuda().eval()
    prompts = torch.randint(0, 512, (3, 7), generator=torch.Generator().manual_seed(2)).cuda()
    mask = torch.ones_like(prompts)
    mask[0, :3] = 0  # left padding: positions and mask differ from the cache's slots
    eager = list(decode_steps(model, prompts, GenerationConfig(max_new_tokens=12), mask))
    graphed = list(decode_steps(model, prompts, GenerationConfig(max_new_tokens=12, cuda_graph=True), mask))
    assert len(captures) == 1  # captured once, then replayed for the other ten steps
    for got, want in zip(graphed, eager, strict=True):
        assert torch.equal(got.tokens, want.tokens)
        torch.testing.assert_close(got.logits, want.logits, rtol=0, atol=1e-4)
