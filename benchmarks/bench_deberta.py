"""plm's DeBERTa against Hugging Face transformers' DebertaForMaskedLM, same weights, same machine, one run.

Measures, after warm-up, the median over repeats of
  (a) MLM training tokens/s: forward + cross-entropy on 15% of positions + backward + AdamW;
      plm is timed twice, as in bench_bert.py: logits everywhere (Hugging Face's work)
      and logits at the masked rows only (``masked_positions``, plm's pre-training);
  (b) encoder forward tokens/s under torch.inference_mode();
then (c) the peak tensor memory of one MLM forward, and of one forward + backward,
at batch 1 x 512 tokens (torch.profiler's memory timeline; see benchmarks/README.md).
plm and Hugging Face take turns inside each repeat.

    python benchmarks/bench_deberta.py --config both
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from bench_common import (
    Report,
    interleaved_medians,
    linear_weights,
    peak_tensor_memory,
    quiet_transformers,
    training_flops_per_token,
)
from plm.hf import load_hf
from plm.models import from_config, with_heads


@dataclass(frozen=True)
class Setting:
    dim: int
    layers: int
    heads: int
    ffn_dim: int
    vocab_size: int
    batch: int
    length: int
    steps: int


CONFIGS = {
    # Like deberta-mini, with the 512-token context the memory row needs.
    "small": Setting(dim=256, layers=4, heads=4, ffn_dim=1024, vocab_size=8192, batch=8, length=128, steps=10),
    "deberta-base": Setting(dim=768, layers=12, heads=12, ffn_dim=3072, vocab_size=50265, batch=4, length=128, steps=4),
}
MEMORY_LENGTH = 512
MASKED_FRACTION = 0.15


def save_hf_model(setting: Setting, seed: int, directory: str) -> None:
    """A random DebertaForMaskedLM like the released ones (c2p + p2c, k = 512, no absolute positions), dropout 0."""
    from transformers import DebertaConfig, DebertaForMaskedLM

    config = DebertaConfig(
        vocab_size=setting.vocab_size, hidden_size=setting.dim, num_hidden_layers=setting.layers,
        num_attention_heads=setting.heads, intermediate_size=setting.ffn_dim, max_position_embeddings=512,
        type_vocab_size=0, relative_attention=True, max_relative_positions=-1, position_biased_input=False,
        pos_att_type=["c2p", "p2c"], hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )
    torch.manual_seed(seed)
    DebertaForMaskedLM(config).save_pretrained(directory)


def load_side(side: str, directory: str):
    if side == "plm":
        return load_hf(directory)
    from transformers import DebertaForMaskedLM

    return DebertaForMaskedLM.from_pretrained(directory, attn_implementation="eager")


def mlm_batch(setting: Setting, batch: int, length: int, seed: int):
    """Random ids, no padding, and the 15% of positions whose token the loss predicts."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, setting.vocab_size, (batch, length), generator=generator)
    masked = torch.rand(batch, length, generator=generator) < MASKED_FRACTION
    return ids, torch.ones_like(ids), masked, ids.masked_fill(~masked, -100)


def mlm_loss(side: str, model, ids, mask, masked, labels, masked_only: bool = False) -> torch.Tensor:
    if side == "hf":
        logits = model(input_ids=ids, attention_mask=mask).logits
    elif masked_only:
        logits = model(ids, mask, masked_positions=masked).logits  # (n_masked, vocab), row-major
        return F.cross_entropy(logits, labels[masked])
    else:
        logits = model(ids, mask).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def bench(name: str, seed: int, report: Report) -> None:
    setting = CONFIGS[name]
    with tempfile.TemporaryDirectory() as directory:
        save_hf_model(setting, seed, directory)
        ours, hf = load_side("plm", directory), load_side("hf", directory)
    ids, mask, masked, labels = mlm_batch(setting, setting.batch, setting.length, seed)
    with torch.inference_mode():
        hf.eval(), ours.eval()
        difference = (ours(ids, mask).logits - hf(input_ids=ids, attention_mask=mask).logits).abs().max().item()
    print(f"[{name}] {ours.num_parameters():,} parameters; max |plm - hf| MLM logits: {difference:.2e}")

    def train_step(side, model, masked_only=False):
        optimizer = torch.optim.AdamW(model.parameters(), 1e-4)

        def step() -> None:
            mlm_loss(side, model, ids, mask, masked, labels, masked_only).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        return step

    ours.train(), hf.train()
    steps = {"plm": train_step("plm", ours), "plm-masked": train_step("plm", ours, True), "hf": train_step("hf", hf)}
    seconds = interleaved_medians(steps, setting.steps, 1, torch.device("cpu"))
    tokens = setting.batch * setting.length
    shape = f"{setting.batch}x{setting.length}"
    # 6 N + 12 L d T, N from hf's linear layers (the vocabulary projection among them, which plm's masked rows
    # skip at 85% of positions); the disentangled attention's c2p and p2c scores add 2 more T x T x d products
    # a layer, counted in the 12 L d T term's factor: 12 -> 24.
    flops = {"plm": (training_flops_per_token(linear_weights(hf), setting.layers, setting.dim, setting.length)
                     + 12 * setting.layers * setting.dim * setting.length) * tokens}
    flops["hf"] = flops["plm"]
    flops["plm-masked"] = flops["plm"] - 6 * setting.dim * setting.vocab_size * int((~masked).sum())
    mfu = {label: report.mfu(flops[label] / seconds[label]) for label in seconds}
    report.add(name, f"MLM train tok/s ({shape})", tokens / seconds["plm"], tokens / seconds["hf"],
               f"MFU {mfu['plm']}, hf {mfu['hf']}")
    report.add(name, f"MLM train tok/s ({shape}), masked rows only", tokens / seconds["plm-masked"],
               tokens / seconds["hf"], f"MFU {mfu['plm-masked']} (of its fewer FLOPs)")
    print(f"[{name}] training done")

    ours.eval(), hf.eval()
    encoder = from_config(with_heads(ours.config)).eval()  # the encoder alone, like hf.deberta
    encoder.load_state_dict(ours.state_dict(), strict=False)

    def forward(call):
        def step() -> None:
            with torch.inference_mode():
                call()
        return step

    seconds = interleaved_medians(
        {
            "plm": forward(lambda: encoder(ids, mask)),
            "hf": forward(lambda: hf.deberta(input_ids=ids, attention_mask=mask)),
        },
        setting.steps, 1, torch.device("cpu"),
    )
    report.add(name, f"encoder forward tok/s ({shape})", tokens / seconds["plm"], tokens / seconds["hf"])
    print(f"[{name}] forward done")
    for phase, sides in peak_memory(setting, {"plm": ours, "hf": hf}, seed).items():
        measure = f"peak MB, {phase} 1x{MEMORY_LENGTH}" + (" + backward" if phase == "train" else "")
        report.add(name, measure + " (lower is better)", sides["plm"], sides["hf"])
    print(f"[{name}] memory done")


def peak_memory(setting: Setting, models: dict, seed: int) -> dict[str, dict[str, float]]:
    """MB of peak tensor memory of one MLM forward, and of one forward + backward, at 1 x 512 tokens:
    {phase: {side: MB}}."""
    ids, mask, masked, labels = mlm_batch(setting, 1, MEMORY_LENGTH, seed)
    megabytes: dict[str, dict[str, float]] = {"forward": {}, "train": {}}
    for side, model in models.items():
        def forward() -> None:
            with torch.inference_mode():
                mlm_loss(side, model.eval(), ids, mask, masked, labels)

        def train() -> None:
            mlm_loss(side, model.train(), ids, mask, masked, labels).backward()

        megabytes["forward"][side] = peak_tensor_memory(forward) / 2**20
        megabytes["train"][side] = peak_tensor_memory(train) / 2**20
        model.zero_grad(set_to_none=True)
    return megabytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", choices=["small", "deberta-base", "both"], default="both")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = parser.parse_args()
    version = quiet_transformers()
    if args.threads:
        torch.set_num_threads(args.threads)
    report = Report("deberta", f"transformers {version} DebertaForMaskedLM (eager), the same weights",
                    settings=vars(args))
    for name in ["small", "deberta-base"] if args.config == "both" else [args.config]:
        bench(name, args.seed, report)
    report.notes.append("peak MB: the most tensor memory held at once during one step (torch.profiler memory "
                        "timeline), weights not counted; plm/peer below 1: plm needs less")
    report.finish()


if __name__ == "__main__":
    main()
