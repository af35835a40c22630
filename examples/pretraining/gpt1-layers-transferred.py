"""GPT-1's Figure 2 (left) at CPU scale: fine-tuned accuracy against the number of pre-trained layers transferred.

GPT-1 section 5 ("Impact of number of layers transferred") fine-tunes with the embeddings and the first k of the
pre-trained model's layers transferred, k = 0 .. L: transferring the embeddings helps, and so does every layer
(up to 9% on MultiNLI for the whole model). The paper does not say what stands in for the layers that are not
transferred; here the model keeps its depth and architecture and they start from a fresh initialisation (as
do the final LayerNorm, which is transferred with the last layer, and the task head), so that the only thing
that changes along the curve is how much of the model starts pre-trained. A last row, "none", transfers
nothing, not even the embeddings: GPT-1's "no pre-training" ablation.

    python examples/pretraining/gpt1-zero-shot.py ../shared/data/sst-2   # pre-trains runs/gpt1-zero-shot/run
    python examples/pretraining/gpt1-layers-transferred.py ../shared/data/sst-2 runs/gpt1-zero-shot/run

Each k is one fine-tuning (plm.tasks.finetune, GPT-1's recipe: lr 6.25e-5 unless LR= says otherwise, the
auxiliary LM loss at lambda 0.5, ``EPOCHS`` epochs, default 3) on the first ``TRAIN`` (default 2,000) SST-2
training sentences, scored on the dev set (all 872, or the first ``DEV``). It prints one row per k and draws
OUT/layers.png (OUT default runs/gpt1-layers) where matplotlib is installed.
"""

import os
import sys
from pathlib import Path

import torch

import plm
from plm.tasks.finetune import FinetuneData, FinetuneOptimization, FinetuneSetup, finetune

data, run = Path(sys.argv[1]), Path(sys.argv[2])
out = Path(sys.argv[3] if len(sys.argv) > 3 else "runs/gpt1-layers")
out.mkdir(parents=True, exist_ok=True)
lines = (data / "train.tsv").read_text(encoding="utf-8").splitlines()
train = out / "train.tsv"  # the header and the first TRAIN sentences
train.write_text("\n".join(lines[: 1 + int(os.environ.get("TRAIN", 2000))]) + "\n", encoding="utf-8")
lines = (data / "dev.tsv").read_text(encoding="utf-8").splitlines()
dev = out / "dev.tsv"
dev.write_text("\n".join(lines[: 1 + int(os.environ.get("DEV", len(lines)))]) + "\n", encoding="utf-8")

pretrained, tokenizer = plm.load_pretrained(run)
layers = pretrained.config.layers


def transferred(k: int | None) -> dict[str, torch.Tensor]:
    """The pre-trained weights that a model with the first ``k`` layers transferred starts from (None: none)."""
    if k is None:
        return {}
    kept = ["token_embedding.", "position_embedding.", *(f"blocks.{i}." for i in range(k))]
    kept += ["final_norm."] if k == layers else []
    return {name: weight for name, weight in pretrained.state_dict().items() if name.startswith(tuple(kept))}


rows = []
for k in [*range(layers + 1), None]:
    name = "none" if k is None else str(k)
    torch.manual_seed(0)
    model = plm.from_config(pretrained.config)  # freshly initialised, as pre-training starts
    model.load_state_dict(transferred(k), strict=False)
    plm.save(model, out / f"k-{name}" / "model", tokenizer)
    setup = FinetuneSetup(
        task="classify",
        model=str(out / f"k-{name}" / "model"),
        data=FinetuneData(train=str(train), validation=str(dev)),
        optimization=FinetuneOptimization(
            lrs=(float(os.environ["LR"]),) if "LR" in os.environ else None,
            epochs=float(os.environ.get("EPOCHS", 3)),
        ),
        precision="fp32",
        progress=False,
    )
    result = finetune(setup, out / f"k-{name}" / "finetuned", overwrite=True)
    rows.append((name, result.best["val_accuracy"]))

print(f"SST-2 dev accuracy, fine-tuned with the first k of {layers} pre-trained layers ({run})")
print("| layers transferred | dev accuracy |")
print("| ---: | ---: |")
for name, accuracy in rows:
    print(f"| {name} | {accuracy:.1%} |")
try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit(0)
figure, axes = plt.subplots(figsize=(5, 3.5))
axes.plot(range(layers + 1), [accuracy for _, accuracy in rows[:-1]], marker="o", label="SST-2 dev")
axes.axhline(rows[-1][1], color="grey", linestyle=":", label="no pre-training")
axes.set_xlabel("pre-trained layers transferred (0: the embeddings only)")
axes.set_ylabel("accuracy")
axes.legend()
figure.tight_layout()
figure.savefig(out / "layers.png", dpi=100)
print(f"curve: {out / 'layers.png'}")
