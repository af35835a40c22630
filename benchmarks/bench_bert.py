"""plm's BERT against Hugging Face transformers' BertForMaskedLM, same weights, same machine, one run.

Measures, after warm-up, the median over repeats of
  (a) MLM training tokens/s: forward + cross-entropy on 15% of positions + backward + AdamW;
      plm is timed twice: with the vocabulary projection everywhere (the same work as
      Hugging Face) and with ``masked_positions`` (only the masked rows, what plm's
      pre-training does);
  (b) encoder forward tokens/s under torch.inference_mode().
plm and Hugging Face take turns inside each repeat (see bench_gpt2.py).

    python benchmarks/bench_bert.py --config both
"""

from __future__ import annotations

import argparse
import tempfile

import torch
import torch.nn.functional as F

from bench_common import Report, interleaved_medians, linear_weights, quiet_transformers, training_flops_per_token
from plm.hf import load_hf
from plm.models import from_config, with_heads

CONFIGS = {
    # (dim, layers, heads, ffn, vocab, batch, length, steps)
    "small": (256, 4, 4, 1024, 8192, 8, 128, 10),  # like the bert-mini preset
    "bert-base": (768, 12, 12, 3072, 30522, 4, 128, 4),
}


def build_models(name: str, seed: int):
    """A random Hugging Face BertForMaskedLM and the plm Bert that load_hf reads from its checkpoint."""
    from transformers import BertConfig, BertForMaskedLM

    dim, layers, heads, ffn, vocab, *_ = CONFIGS[name]
    config = BertConfig(vocab_size=vocab, hidden_size=dim, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=ffn, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(seed)
    hf = BertForMaskedLM._from_config(config, attn_implementation="sdpa")
    with tempfile.TemporaryDirectory() as directory:
        hf.save_pretrained(directory)
        ours = load_hf(directory)
    return ours, hf


def bench(name: str, seed: int, report: Report) -> None:
    dim, layers, _, _, vocab, batch, length, steps = CONFIGS[name]
    ours, hf = build_models(name, seed)
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (batch, length), generator=generator)
    mask = torch.ones_like(ids)
    masked = torch.rand(batch, length, generator=generator) < 0.15
    labels = ids.masked_fill(~masked, -100)
    with torch.inference_mode():
        hf.eval(), ours.eval()
        difference = (ours(ids, mask).logits - hf(ids, attention_mask=mask).logits).abs().max().item()
    print(f"[{name}] {ours.num_parameters():,} encoder parameters; max |plm - hf| MLM logits: {difference:.2e}")

    def train_step(model, optimizer, forward):
        def step() -> None:
            logits = forward(model)
            F.cross_entropy(
                logits.reshape(-1, vocab), labels[masked] if logits.dim() == 2 else labels.reshape(-1)
            ).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return step

    ours.train(), hf.train()
    steps = {
        "plm": train_step(ours, torch.optim.AdamW(ours.parameters(), 1e-4), lambda m: m(ids, mask).logits),
        "plm-masked": train_step(ours, torch.optim.AdamW(ours.parameters(), 1e-4),
                                 lambda m: m(ids, mask, masked_positions=masked).logits),
        "hf": train_step(hf, torch.optim.AdamW(hf.parameters(), 1e-4), lambda m: m(ids, attention_mask=mask).logits),
    }
    seconds = interleaved_medians(steps, steps_count(name), 1, torch.device("cpu"))
    tokens = batch * length
    # hf's linear layers include the vocabulary projection, which plm's masked rows skip at 85% of positions.
    flops = {"plm": training_flops_per_token(linear_weights(hf), layers, dim, length) * tokens}
    flops["hf"] = flops["plm"]
    flops["plm-masked"] = flops["plm"] - 6 * dim * vocab * int((~masked).sum())
    mfu = {label: report.mfu(flops[label] / seconds[label]) for label in seconds}
    report.add(name, f"MLM train tok/s ({batch}x{length})", tokens / seconds["plm"], tokens / seconds["hf"],
               f"MFU {mfu['plm']}, hf {mfu['hf']}")
    report.add(name, f"MLM train tok/s ({batch}x{length}), masked rows only", tokens / seconds["plm-masked"],
               tokens / seconds["hf"], f"MFU {mfu['plm-masked']} (of its fewer FLOPs)")

    ours.eval(), hf.eval()

    def forward(model, call):
        def step() -> None:
            with torch.inference_mode():
                call(model)
        return step

    encoder = from_config(with_heads(ours.config, pooler=False)).eval()  # the encoder alone, like hf.bert
    encoder.load_state_dict(ours.state_dict(), strict=False)
    seconds = interleaved_medians(
        {
            "plm": forward(encoder, lambda m: m(ids, mask)),
            "hf": forward(hf.bert, lambda m: m(ids, attention_mask=mask)),
        },
        steps_count(name), 1, torch.device("cpu"),
    )
    report.add(name, f"encoder forward tok/s ({batch}x{length})", tokens / seconds["plm"], tokens / seconds["hf"])


def steps_count(name: str) -> int:
    return CONFIGS[name][-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", choices=["small", "bert-base", "both"], default="both")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = parser.parse_args()
    version = quiet_transformers()
    if args.threads:
        torch.set_num_threads(args.threads)
    report = Report("bert", f"transformers {version} BertForMaskedLM (sdpa), the same weights", settings=vars(args))
    for name in ["small", "bert-base"] if args.config == "both" else [args.config]:
        bench(name, args.seed, report)
    report.finish()


if __name__ == "__main__":
    main()
