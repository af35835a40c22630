"""GPT-1's Figure 2 (right) at CPU scale: a zero-shot heuristic scored at checkpoints during pre-training.

GPT-1 section 5 ("Zero-shot Behaviors") scores tasks with the generative model alone, without fine-tuning,
at points along pre-training. Its sentiment heuristic: append the token "very" to each SST-2 sentence,
restrict the language model's next-word distribution to "positive" and "negative", and predict the one it
finds more likely. This script pre-trains a small GPT with ``keep_last`` (a snapshot every ``STEPS / 10``
steps, warming up over the first tenth), then scores that heuristic on SST-2's dev set at every snapshot and
prints the curve (and draws OUT/zero-shot.png, where matplotlib is installed): the accuracy, the share of sentences
called positive, and, as a diagnostic the paper does not use, the accuracy when the margin log p(positive) -
log p(negative) is cut at its median instead of at 0 (does the model rank the sentences by sentiment, whatever
its prior for either word?):

    python examples/pretraining/gpt1-zero-shot.py ../shared/data/sst-2                # 300 steps of gpt2-mini
    STEPS=1000 DIM=128 BLOCK=64 python examples/pretraining/gpt1-zero-shot.py ../shared/data/sst-2 runs/zs

STEPS, MODEL (a GPT preset), DIM (narrow the preset), BLOCK (tokens per sequence, default 64), VOCAB (the
byte-level BPE's size, default 4,096), TRAIN and DEV (the first N sentences) size the run.

The pre-training text is SST-2's 67,349 training sentences with their labels dropped (the dev sentences are
not in it): movie-review text, as the heuristic needs, where the paper read BooksCorpus's 800M words. Even
so, "positive" occurs 46 times in it and "negative" 16 times, "very positive" and "very negative" never; in
the embedded corpus the two words are plm's own ("a negative index").
The run directory (OUT, default runs/gpt1-zero-shot) is reused by gpt1-layers-transferred.py.
"""

import os
import sys
from pathlib import Path

import plm
from plm.apps.zeroshot.scoring import score_continuations
from plm.storage.checkpoint import snapshot_step, snapshots
from plm.tasks.readers import read_examples

data = Path(sys.argv[1])
out = Path(sys.argv[2] if len(sys.argv) > 2 else "runs/gpt1-zero-shot")
steps, model_name = int(os.environ.get("STEPS", 300)), os.environ.get("MODEL", "gpt2-mini")
dev = read_examples("classify", data / "dev.tsv")
limit = int(os.environ.get("DEV", len(dev)))  # DEV=N: score only the first N dev sentences
dev = dev[:limit]

out.mkdir(parents=True, exist_ok=True)
text = out / "sst-2-sentences.txt"  # the training sentences, labels dropped: the pre-training text
sentences = [example.text for example in read_examples("classify", data / "train.tsv")]
text.write_text("\n".join(sentences[: int(os.environ.get("TRAIN", len(sentences)))]) + "\n", encoding="utf-8")

# SST-2 sentences are short (about 25 tokens): 64-token blocks hold two or three of them. DIM=128 narrows the
# preset (d_ff = 4 d) where a CPU is busy; the depth, and the layers that gpt1-layers-transferred.py counts, stay.
dim = {"dim": int(os.environ["DIM"]), "ffn_dim": 4 * int(os.environ["DIM"])} if "DIM" in os.environ else {}
plm.pretrain(
    plm.PretrainSetup(model=model_name, train_files=(str(text),), vocab_size=int(os.environ.get("VOCAB", 4096)),
                      block_size=int(os.environ.get("BLOCK", 64)), model_overrides=dim),
    plm.TrainingConfig(steps=steps, warmup=steps // 10, save_every=max(1, steps // 10), keep_last=10,
                       eval_every=max(1, steps // 10), precision="fp32", progress=False),
    out=out / "run", overwrite=True,
)

rows = []
for snapshot in snapshots(out / "run"):
    model, tokenizer = plm.load_pretrained(snapshot)
    pairs = [(example.text + " very", word) for example in dev for word in (" positive", " negative")]
    scores = score_continuations(model, tokenizer, pairs)
    margins = [positive.logprob - negative.logprob for positive, negative in zip(scores[0::2], scores[1::2])]
    gold = [example.label == "1" for example in dev]
    # Beside the paper's rule (margin > 0), a diagnostic: the margin cut at its median, which says whether the model
    # orders the sentences by sentiment even where its prior for one word outweighs the sentence.
    median = sorted(margins)[len(margins) // 2]
    rows.append((
        snapshot_step(snapshot),
        sum((margin > 0) == label for margin, label in zip(margins, gold)) / len(dev),
        sum(margin > 0 for margin in margins) / len(dev),
        sum((margin >= median) == label for margin, label in zip(margins, gold)) / len(dev),
    ))

print(f"SST-2 dev ({len(dev)} sentences), zero-shot: '<sentence> very' -> ' positive' or ' negative'")
print("| step | accuracy | predicted positive | accuracy, margin cut at its median |")
print("| ---: | ---: | ---: | ---: |")
for step, accuracy, positive, at_median in rows:
    print(f"| {step} | {accuracy:.1%} | {positive:.1%} | {at_median:.1%} |")
try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit(0)
figure, axes = plt.subplots(figsize=(5, 3.5))
axes.plot([row[0] for row in rows], [row[1] for row in rows], marker="o", label="the paper's rule (margin > 0)")
axes.plot([row[0] for row in rows], [row[3] for row in rows], marker="o", label="margin cut at its median")
axes.axhline(0.5, color="grey", linestyle=":", label="chance")
axes.set_xlabel("pre-training steps")
axes.set_ylabel("SST-2 dev accuracy, zero-shot")
axes.legend()
figure.tight_layout()
figure.savefig(out / "zero-shot.png", dpi=100)
print(f"curve: {out / 'zero-shot.png'}")
