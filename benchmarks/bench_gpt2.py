"""plm's GPT-2 against Hugging Face transformers' GPT2LMHeadModel, same weights, same machine, one run.

Measures, after warm-up, the median over repeats of
  (a) training tokens/s: forward + cross-entropy + backward + AdamW step;
  (b) forward tokens/s under torch.inference_mode();
  (c) greedy generation tokens/s with the KV cache, batch 1, exactly N new tokens.
plm and Hugging Face take turns inside each repeat, so a slow spell of the machine
hits both. See benchmarks/README.md.

    python benchmarks/bench_gpt2.py --config both
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import tempfile
import time
from typing import Callable

import torch
import torch.nn.functional as F

from plm.hf import load_hf
from plm.models import GPTConfig

CONFIGS = {
    # Like the gpt2-mini preset: per-token Python overhead dominates decoding here.
    "small": GPTConfig(vocab_size=8192, context_length=256, dim=256, layers=4, heads=4, ffn_dim=1024),
    "gpt2": GPTConfig(),  # 124M
}


@dataclasses.dataclass(frozen=True)
class Workload:
    train_batch: int
    train_length: int
    train_steps: int
    forward_steps: int
    prompt_length: int
    new_tokens: int
    generate_runs: int
    warmup: int


WORKLOADS = {
    "small": Workload(train_batch=8, train_length=128, train_steps=10, forward_steps=10,
                      prompt_length=16, new_tokens=128, generate_runs=5, warmup=2),
    "gpt2": Workload(train_batch=4, train_length=128, train_steps=6, forward_steps=6,
                     prompt_length=16, new_tokens=32, generate_runs=3, warmup=2),
}


def build_models(config: GPTConfig, device: torch.device, seed: int, dropout: float):
    """A random Hugging Face GPT-2 and the plm GPT that plm.hf.load_hf reads from its checkpoint."""
    from transformers import GPT2Config, GPT2LMHeadModel

    hf_config = GPT2Config(
        vocab_size=config.vocab_size,
        n_positions=config.context_length,
        n_embd=config.dim,
        n_layer=config.layers,
        n_head=config.heads,
        n_inner=config.ffn_dim,
        activation_function="gelu_new",
        layer_norm_epsilon=config.norm_eps,
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
        bos_token_id=config.vocab_size - 1,
        eos_token_id=config.vocab_size - 1,
        pad_token_id=config.vocab_size - 1,
    )
    torch.manual_seed(seed)
    hf = GPT2LMHeadModel._from_config(hf_config, attn_implementation="sdpa")
    with tempfile.TemporaryDirectory() as directory:
        hf.save_pretrained(directory)
        ours = load_hf(directory)
    return ours.to(device), hf.to(device)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved_medians(
    steps: dict[str, Callable[[], object]], repeats: int, warmup: int, device: torch.device
) -> dict[str, float]:
    """Median seconds per call of each step; the steps take turns within every repeat."""
    for step in steps.values():
        for _ in range(warmup):
            step()
    synchronize(device)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            synchronize(device)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(seconds) for name, seconds in times.items()}


def logits_of(model, input_ids: torch.Tensor) -> torch.Tensor:
    return model(input_ids).logits


def train_step_fn(model, optimizer, input_ids: torch.Tensor, autocast) -> Callable[[], float]:
    def step() -> float:
        with autocast():
            logits = logits_of(model, input_ids[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), input_ids[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    return step


def forward_fn(model, input_ids: torch.Tensor, autocast) -> Callable[[], None]:
    def step() -> None:
        with torch.inference_mode(), autocast():
            logits_of(model, input_ids)

    return step


def bench_config(name: str, device: torch.device, args: argparse.Namespace) -> list[tuple[str, float, float]]:
    config, work = CONFIGS[name], WORKLOADS[name]
    train_steps = args.train_steps or work.train_steps
    forward_steps = args.forward_steps or work.forward_steps
    generate_runs = args.generate_runs or work.generate_runs
    new_tokens = args.new_tokens or work.new_tokens
    autocast = (
        (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if args.bf16 else contextlib.nullcontext
    )
    ours, hf = build_models(config, device, args.seed, args.dropout)
    models = {"plm": ours, "hf": hf}
    generator = torch.Generator().manual_seed(args.seed)

    def tokens(batch: int, length: int) -> torch.Tensor:
        return torch.randint(0, config.vocab_size - 1, (batch, length), generator=generator).to(device)

    check = tokens(2, 32)
    ours.eval()
    hf.eval()
    with torch.inference_mode():
        difference = (ours(check).logits - hf(check).logits).abs().max().item()
    print(f"[{name}] {ours.num_parameters():,} parameters; max |plm - hf| logits on the same weights: {difference:.2e}")

    rows = []
    train_ids = tokens(work.train_batch, work.train_length + 1)
    steps = {}
    for label, model in models.items():
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        steps[label] = train_step_fn(model, optimizer, train_ids, autocast)
    seconds = interleaved_medians(steps, train_steps, work.warmup, device)
    train_tokens = work.train_batch * work.train_length
    rows.append((f"train tok/s ({work.train_batch}x{work.train_length})", *(train_tokens / seconds[m] for m in models)))
    for model in models.values():
        model.zero_grad(set_to_none=True)
        model.eval()
    print(f"[{name}] training done")

    forward_ids = tokens(work.train_batch, work.train_length)
    steps = {label: forward_fn(model, forward_ids, autocast) for label, model in models.items()}
    seconds = interleaved_medians(steps, forward_steps, work.warmup, device)
    rows.append((f"forward tok/s ({work.train_batch}x{work.train_length})", *(train_tokens / seconds[m] for m in models)))
    print(f"[{name}] forward done")

    prompt = tokens(1, work.prompt_length)
    outputs = {}

    def plm_generate() -> None:
        with autocast():
            outputs["plm"] = ours.generate(prompt, max_new_tokens=new_tokens)

    def hf_generate() -> None:
        with torch.inference_mode(), autocast():
            outputs["hf"] = hf.generate(
                prompt,
                attention_mask=torch.ones_like(prompt),
                do_sample=False,
                min_new_tokens=new_tokens,
                max_new_tokens=new_tokens,
                pad_token_id=config.vocab_size - 1,
            )

    seconds = interleaved_medians({"plm": plm_generate, "hf": hf_generate}, generate_runs, 1, device)
    for label, out in outputs.items():
        assert out.shape == (1, work.prompt_length + new_tokens), f"{label} generated {tuple(out.shape)}"
    same = torch.equal(outputs["plm"], outputs["hf"])
    rows.append((f"greedy generate tok/s (1x{work.prompt_length}+{new_tokens})", *(new_tokens / seconds[m] for m in models)))
    print(f"[{name}] generation done; same greedy tokens as hf: {same}")
    return [(name, *row) for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", choices=["small", "gpt2", "both"], default="both")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-steps", type=int, default=None, help="timed training steps (default: per config)")
    parser.add_argument("--forward-steps", type=int, default=None, help="timed forward passes (default: per config)")
    parser.add_argument("--generate-runs", type=int, default=None, help="timed generate calls (default: per config)")
    parser.add_argument("--new-tokens", type=int, default=None, help="tokens per generate call (default: per config)")
    parser.add_argument("--dropout", type=float, default=0.0, help="dropout of both models while training")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast for both models (meant for CUDA)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = parser.parse_args()

    import transformers
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(args.device)
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}"
        f"; device {device}{' (' + torch.cuda.get_device_name(device) + ')' if device.type == 'cuda' else ''}"
        f", {torch.get_num_threads()} threads, {'bf16 autocast' if args.bf16 else 'fp32'}, dropout {args.dropout}"
    )
    names = ["small", "gpt2"] if args.config == "both" else [args.config]
    rows = [row for name in names for row in bench_config(name, device, args)]

    print()
    print(f"{'config':<7} {'measure':<38} {'plm':>10} {'hf':>10} {'plm/hf':>7}")
    for name, measure, ours, theirs in rows:
        print(f"{name:<7} {measure:<38} {ours:>10.1f} {theirs:>10.1f} {ours / theirs:>6.2f}x")


if __name__ == "__main__":
    main()
