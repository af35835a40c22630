"""plm's GPT-2 against Hugging Face transformers' GPT2LMHeadModel, same weights, same machine, one run.

Measures, after warm-up, the median over repeats of
  (a) training tokens/s: forward + cross-entropy + backward + AdamW step;
  (b) forward tokens/s under torch.inference_mode();
  (c) greedy generation tokens/s with the KV cache, batch 1, exactly N new tokens, and on the CPU
      the same with int8 weights (plm.quantize).
plm and Hugging Face take turns inside each repeat, so a slow spell of the machine
hits both. ``--compile`` adds plm rows with torch.compile; ``--profile`` adds notes on where a
generated token's time goes (weight products, attention, LayerNorm, other ops, and the Python
between them), read from torch.profiler. Training is also reported
as model FLOPs utilisation against the machine's measured matmul peak, and decoding
against its measured memory bandwidth. See benchmarks/README.md.

    python benchmarks/bench_gpt2.py --config both
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import tempfile
from typing import Callable

import torch
import torch.nn.functional as F

from bench_common import Report, bf16_autocast, interleaved_medians, quiet_transformers, training_flops_per_token
from plm.cpu.int8 import quantize
from plm.decoding.generation import generate
from plm.hf import load_hf
from plm.models import GPTConfig
from plm.models.gpt import GPT

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


# torch.profiler's names for the parts of a decoding step; what is in none of them is "other ops".
DECODING_PARTS = {
    "weight products": ("aten::_weight_int8pack_mm", "aten::addmm", "aten::mm", "aten::bmm"),
    "attention": ("aten::_scaled_dot_product_flash_attention_for_cpu",),
    "LayerNorm": ("aten::native_layer_norm",),
}


def decoding_profile(step: Callable[[], None], new_tokens: int) -> dict[str, float]:
    """Seconds per generated token of each part of ``step`` (one generate call), from torch.profiler.

    Each part is the self time of its ops (the prompt's one pass included, spread over the
    tokens); "other ops" is every other op's (slicing, copies, casts, adds, the argmax).
    """
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    seconds = {event.key: event.self_cpu_time_total / 1e6 for event in prof.key_averages()}
    parts = {part: sum(seconds.get(op, 0.0) for op in ops) / new_tokens for part, ops in DECODING_PARTS.items()}
    parts["other ops"] = sum(seconds.values()) / new_tokens - sum(parts.values())
    return parts


def bf16_generation(name: str, report: Report, ours: torch.nn.Module, hf: torch.nn.Module, plm_generate,
                    hf_generate, runs: int, new_tokens: int, weights: int, prompt_length: int) -> float:
    """Greedy decoding with bf16 copies of the weights, plm's (graphed on a GPU) against HF's generate.

    Returns:
        plm's seconds per generate call.
    """
    device = next(hf.parameters()).device
    label = "plm graphed" if device.type == "cuda" else "plm"
    steps = {label: plm_generate(f"{label} bf16", copy.deepcopy(ours).to(torch.bfloat16),
                                 cuda_graph=device.type == "cuda"),
             "hf": hf_generate("hf bf16", copy.deepcopy(hf).to(torch.bfloat16))}
    seconds = interleaved_medians(steps, runs, 1, device)
    limit = report.limits["bandwidth"] / (weights * 2)
    variant = ", plm graphed" if label == "plm graphed" else ""
    report.add(name, f"greedy generate tok/s (1x{prompt_length}+{new_tokens}){variant}",
               new_tokens / seconds[label], new_tokens / seconds["hf"],
               f"{new_tokens / seconds[label] / limit:.0%} of {limit:,.0f} tok/s "
               f"({weights * 2 / 1e6:,.0f} MB a token); hf {new_tokens / seconds['hf'] / limit:.0%}",
               precision="bf16 weights")
    return seconds[label]


def training_kernels(model: torch.nn.Module, train_ids: torch.Tensor, top: int = 8) -> str:
    """The CUDA kernels that take the most time in one bf16 training step of ``model``, from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    step = train_step_fn(model, optimizer, train_ids, bf16_autocast(train_ids.device, True))
    step()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.device_time_total > 0]
    total = sum(e.self_device_time_total for e in events)
    events.sort(key=lambda e: e.self_device_time_total, reverse=True)
    model.eval()
    return "; ".join(f"{e.key[:60]} {e.self_device_time_total / total:.0%}" for e in events[:top]) + \
        f" (of {total / 1e3:.1f} ms of kernel time)"


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


def logits_of(model, input_ids: torch.Tensor) -> torch.Tensor:
    return model(input_ids).logits


def mean_loss(model, input_ids: torch.Tensor) -> torch.Tensor:
    """Each library's own next-token loss: plm's from its targets (the loss taken with the head,
    plm.core.linear_cross_entropy), HF's from the logits, upcast as its own loss function does."""
    inputs, targets = input_ids[:, :-1], input_ids[:, 1:]
    if isinstance(getattr(model, "_orig_mod", model), GPT):  # plm's, or plm's under torch.compile
        return model(inputs, targets=targets).loss / targets.numel()
    logits = logits_of(model, inputs)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


def train_step_fn(model, optimizer, input_ids: torch.Tensor, autocast) -> Callable[[], float]:
    def step() -> float:
        with autocast():
            loss = mean_loss(model, input_ids)
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


def bench_config(name: str, device: torch.device, args: argparse.Namespace, report: Report) -> None:
    config, work = CONFIGS[name], WORKLOADS[name]
    work = dataclasses.replace(work, train_batch=args.train_batch or work.train_batch,
                               train_length=args.train_length or work.train_length)
    train_steps = args.train_steps or work.train_steps
    forward_steps = args.forward_steps or work.forward_steps
    generate_runs = args.generate_runs or work.generate_runs
    new_tokens = args.new_tokens or work.new_tokens
    autocast = bf16_autocast(device, args.bf16)
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
    parameters = ours.num_parameters()
    print(f"[{name}] {parameters:,} parameters; max |plm - hf| logits on the same weights: {difference:.2e}")

    def add_rows(measure: str, seconds: dict[str, float], work_per_call: float,
                 limit: Callable[[str], str] = lambda label: "", precision: str | None = None) -> None:
        """plm's row against hf, and one per plm variant timed (compiled, int8), each with its limit."""
        for label in ("plm", "plm compiled", "plm graphed", "plm int8"):
            if label in seconds:
                variant = "" if label == "plm" else f", {label}"
                report.add(name, measure + variant, work_per_call / seconds[label], work_per_call / seconds["hf"],
                           limit(label), "int8 weights, hf fp32" if label == "plm int8" else precision)

    train_ids = tokens(work.train_batch, work.train_length + 1)
    # Training moves the two models' weights apart (and, with --compile, plm's twice as far);
    # the forward and generation rows need them equal again.
    initial = {
        label: {key: value.clone() for key, value in model.state_dict().items()} for label, model in models.items()
    }
    steps = {}
    trained = {**models, **({"plm compiled": torch.compile(ours)} if args.compile else {})}
    for label, model in trained.items():
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
        steps[label] = train_step_fn(model, optimizer, train_ids, autocast)
    seconds = interleaved_medians(steps, train_steps, work.warmup, device)
    train_tokens = work.train_batch * work.train_length
    # Every weight multiplies each token once but the position table (the token table does, as the tied head).
    weights = parameters - config.context_length * config.dim
    flops = training_flops_per_token(weights, config.layers, config.dim, work.train_length) * train_tokens
    add_rows(f"train tok/s ({work.train_batch}x{work.train_length})", seconds, train_tokens,
             lambda label: f"MFU {report.mfu(flops / seconds[label])}, hf {report.mfu(flops / seconds['hf'])}")
    report.notes.append(f"[{name}] training, 6 N + 12 L d T = {flops / train_tokens / 1e6:,.1f} MFLOP per token "
                        f"(N = {weights:,}); MFU against the measured matmul peak")
    for label, model in models.items():
        model.zero_grad(set_to_none=True)
        model.load_state_dict(initial[label])
        model.eval()
    print(f"[{name}] training done")

    forward_ids = tokens(work.train_batch, work.train_length)
    steps = {label: forward_fn(model, forward_ids, autocast) for label, model in models.items()}
    seconds = interleaved_medians(steps, forward_steps, work.warmup, device)
    add_rows(f"forward tok/s ({work.train_batch}x{work.train_length})", seconds, train_tokens)
    print(f"[{name}] forward done")

    prompt = tokens(1, work.prompt_length)
    outputs = {}

    # int8 weights (CPU only): a quantized copy of the same weights, through PyTorch's int8-weight kernel.
    int8 = quantize(copy.deepcopy(ours), "int8") if device.type == "cpu" else None

    def plm_generate(label: str, model: torch.nn.Module = ours, **options: bool) -> Callable[[], None]:
        def step() -> None:
            outputs[label] = generate(model, prompt, new_tokens, **options)
        return step

    def hf_generate(label: str = "hf", model: torch.nn.Module = hf) -> Callable[[], None]:
        def step() -> None:
            with torch.inference_mode():
                outputs[label] = model.generate(
                    prompt,
                    attention_mask=torch.ones_like(prompt),
                    do_sample=False,
                    min_new_tokens=new_tokens,
                    max_new_tokens=new_tokens,
                    pad_token_id=config.vocab_size - 1,
                )
        return step

    on_gpu = device.type == "cuda"
    steps = {
        "plm": plm_generate("plm"),
        "hf": hf_generate(),
        **({"plm compiled": plm_generate("plm compiled", compile=True)} if args.compile and not on_gpu else {}),
        **({"plm graphed": plm_generate("plm graphed", cuda_graph=True)} if on_gpu else {}),
        **({"plm int8": plm_generate("plm int8", int8)} if int8 is not None else {}),
    }
    seconds = interleaved_medians(steps, generate_runs, 1, device)  # the warm-up call compiles
    for label, out in outputs.items():
        assert out.shape == (1, work.prompt_length + new_tokens), f"{label} generated {tuple(out.shape)}"
    same = ", ".join(f"{label} {torch.equal(out, outputs['hf'])}" for label, out in outputs.items() if label != "hf")
    print(f"[{name}] generation done; same greedy tokens as hf: {same}")
    # Each new token reads every weight once; the position table only one row. The KV cache adds
    # 2 * layers * length * dim floats, a few MB at these lengths, left out.
    weight_bytes = {"plm": weights * ours.token_embedding.weight.element_size()}
    if int8 is not None:
        weight_bytes["plm int8"] = sum(t.numel() * t.element_size() for k, t in int8.state_dict().items()
                                       if "position" not in k)
    weight_bytes["plm compiled"] = weight_bytes["plm graphed"] = weight_bytes["hf"] = weight_bytes["plm"]

    def bandwidth_share(label: str) -> str:
        limit = report.limits["bandwidth"] / weight_bytes[label]
        share = (
            f"{new_tokens / seconds[label] / limit:.0%} of {limit:,.0f} tok/s "
            f"({weight_bytes[label] / 1e6:,.0f} MB a token)"
        )
        return share + (f"; hf {new_tokens / seconds['hf'] / limit:.0%}" if label == "plm" else "")

    # the weights are fp32 (int8 rows: int8), whatever the training rows' autocast
    add_rows(f"greedy generate tok/s (1x{work.prompt_length}+{new_tokens})", seconds, new_tokens, bandwidth_share,
             "fp32")
    if args.bf16:
        bf16_seconds = bf16_generation(name, report, ours, hf, plm_generate, hf_generate, generate_runs,
                                       new_tokens, weights, work.prompt_length)
        report.notes.append(f"[{name}] bf16 weights generate {seconds['plm'] / bf16_seconds:.2f}x plm fp32's "
                            "tokens/s")
    if on_gpu and args.profile:
        profiled = trained.get("plm compiled", ours)
        which = "plm compiled" if args.compile else "plm"
        report.notes.append(f"[{name}] top CUDA kernels of one training step of {which}: "
                            f"{training_kernels(profiled, train_ids)}")
    if int8 is not None:
        report.notes.append(f"[{name}] int8 weights generate {seconds['plm'] / seconds['plm int8']:.2f}x plm fp32's "
                            f"tokens/s and {seconds['hf'] / seconds['plm int8']:.2f}x hf fp32's")
    if args.profile:
        for label in ("plm", "plm int8"):
            if label in steps:
                parts = decoding_profile(steps[label], new_tokens)
                report.notes.append(
                    f"[{name}] {label}: {seconds[label] / new_tokens * 1e3:.3f} ms a token; its ops' self time under "
                    f"torch.profiler {sum(parts.values()) * 1e3:.3f} ms ("
                    + ", ".join(f"{part} {t * 1e3:.3f}" for part, t in parts.items())
                    + "), the rest is Python and dispatch between them; the weight products read "
                    f"{weight_bytes[label] / parts['weight products'] / 1e9:.1f} GB/s of weights "
                    f"(bandwidth {report.limits['bandwidth'] / 1e9:.1f} GB/s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", choices=["small", "gpt2", "both"], default="both")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-steps", type=int, default=None, help="timed training steps (default: per config)")
    parser.add_argument(
        "--train-batch", type=int, default=None, help="training sequences per step (default: per config)"
    )
    parser.add_argument(
        "--train-length", type=int, default=None, help="training tokens per sequence (default: per config)"
    )
    parser.add_argument("--forward-steps", type=int, default=None, help="timed forward passes (default: per config)")
    parser.add_argument("--generate-runs", type=int, default=None, help="timed generate calls (default: per config)")
    parser.add_argument("--new-tokens", type=int, default=None, help="tokens per generate call (default: per config)")
    parser.add_argument("--dropout", type=float, default=0.0, help="dropout of both models while training")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast for both models' training and forward rows, "
                        "and rows of greedy decoding with bf16 weights (on a GPU, or a CPU with AVX512-BF16 or AMX)")
    parser.add_argument(
        "--compile", action="store_true", help="add rows for plm under torch.compile (training, generation)"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--profile", action="store_true", help="notes on where a generated token's time goes")
    args = parser.parse_args()

    version = quiet_transformers()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(args.device)
    print(
        f"torch {torch.__version__}, transformers {version}"
        f"; device {device}{' (' + torch.cuda.get_device_name(device) + ')' if device.type == 'cuda' else ''}"
        f", {torch.get_num_threads()} threads, {'bf16 autocast' if args.bf16 else 'fp32'}, dropout {args.dropout}"
    )
    report = Report("gpt2", f"transformers {version} GPT2LMHeadModel (sdpa), the same weights",
                    settings=vars(args), device=device.type, precision="bf16" if args.bf16 else "fp32")
    for name in ["small", "gpt2"] if args.config == "both" else [args.config]:
        bench_config(name, device, args, report)
    report.finish()


if __name__ == "__main__":
    main()
