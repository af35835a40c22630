"""Fine-tuning speed: plm's task model (BERT + classifier head) against BertForSequenceClassification.

Same weights (plm's ``load_hf`` reads the Hugging Face checkpoint), same batch of
token ids and labels, dropout off; one step is forward + cross-entropy + backward +
AdamW. Half the rows are padded to half the length: plm runs everything but attention
on the real tokens alone, Hugging Face's model on every position. plm and Hugging Face
take turns inside each repeat (see bench_gpt2.py); the table gives optimizer steps per
second (the median).

    python benchmarks/bench_finetune.py --config both
"""

from __future__ import annotations

import argparse
import tempfile

import torch
import torch.nn.functional as F

from bench_common import (
    Report,
    bf16_autocast,
    interleaved_medians,
    linear_weights,
    quiet_transformers,
    training_flops_per_token,
)
from plm.hf import load_hf

CONFIGS = {
    # (dim, layers, heads, ffn, vocab, batch, length, repeats)
    "small": (256, 4, 4, 1024, 8192, 32, 128, 10),  # like the bert-mini preset, the recipe's batch 32
    "bert-base": (768, 12, 12, 3072, 30522, 8, 128, 4),
}


def build_models(name: str, seed: int):
    """A random BertForSequenceClassification (2 labels) and the plm task model load_hf reads from it."""
    from transformers import BertConfig, BertForSequenceClassification

    dim, layers, heads, ffn, vocab, *_ = CONFIGS[name]
    config = BertConfig(vocab_size=vocab, hidden_size=dim, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=ffn, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                        classifier_dropout=0.0, num_labels=2)
    torch.manual_seed(seed)
    hf = BertForSequenceClassification._from_config(config, attn_implementation="sdpa")
    with tempfile.TemporaryDirectory() as directory:
        hf.save_pretrained(directory)
        ours = load_hf(directory)
    return ours, hf


def bench(name: str, args: argparse.Namespace, device: torch.device, report: Report) -> None:
    dim, layers, _, _, vocab, batch, length, repeats = CONFIGS[name]
    batch = args.batch or batch
    ours, hf = (model.to(device) for model in build_models(name, args.seed))
    generator = torch.Generator().manual_seed(args.seed)
    ids = torch.randint(5, vocab, (batch, length), generator=generator).to(device)
    mask = torch.ones_like(ids)
    mask[batch // 2 :, length // 2 :] = 0  # half the batch padded to half the length, as real sentences are
    labels = torch.randint(0, 2, (batch,), generator=generator).to(device)
    autocast = bf16_autocast(device, args.bf16)
    with torch.inference_mode():
        ours.eval(), hf.eval()
        difference = (ours(ids, mask).logits - hf(ids, attention_mask=mask).logits).abs().max().item()
    print(f"[{name}] max |plm - hf| classifier logits: {difference:.2e}")

    def train_step(model, forward):
        optimizer = torch.optim.AdamW(model.parameters(), 2e-5, fused=device.type == "cuda")

        def step() -> None:
            with autocast():
                loss = F.cross_entropy(forward(model).float(), labels)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return step

    ours.train(), hf.train()
    seconds = interleaved_medians(
        {"plm": train_step(ours, lambda m: m(ids, mask).logits),
         "hf": train_step(hf, lambda m: m(ids, attention_mask=mask).logits)},
        repeats, 1, device,
    )
    # The FLOPs of the real tokens (half the batch is half padding, 25% of the tokens): plm computes only
    # those outside attention (it packs the real tokens, plm.core.Packing); hf computes the padding's too.
    flops = training_flops_per_token(linear_weights(hf), layers, dim, length) * int(mask.sum())
    report.add(name, f"classifier train steps/s ({batch}x{length})", 1 / seconds["plm"], 1 / seconds["hf"],
               f"MFU {report.mfu(flops / seconds['plm'])} of the real tokens, hf {report.mfu(flops / seconds['hf'])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", choices=["small", "bert-base", "both"], default="both")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="cpu")
    parser.add_argument("--batch", type=int, default=None, help="sentences per step (default: per config)")
    parser.add_argument("--bf16", action="store_true",
                        help="bf16 autocast for both models (a GPU, or a CPU with AVX512-BF16 or AMX)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = parser.parse_args()
    version = quiet_transformers()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(args.device)
    report = Report("finetune", f"transformers {version} BertForSequenceClassification (sdpa), the same weights",
                    settings=vars(args), device=device.type, precision="bf16" if args.bf16 else "fp32")
    for name in ["small", "bert-base"] if args.config == "both" else [args.config]:
        bench(name, args, device, report)
    report.finish()


if __name__ == "__main__":
    main()
