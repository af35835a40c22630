"""ELMo's biLM: training tokens/s, and where a training step spends its time.

There is no reference implementation to race (AllenNLP's biLM does not train, bilm-tf
is TensorFlow 1), so this measures plm alone, after warm-up, as the median over repeats:
  (a) training words/s: a full step (char-CNN, both LSTM stacks, both softmax losses,
      backward, AdamW) on batches of real words from the embedded corpus;
  (b) the forward + backward time of each part on the same batch, timed apart, taking
      turns within each repeat: the char-CNN (with highway and projection), the four
      LSTMs (both directions, all layers), and the shared softmax over both directions.
      Their shares say whether the LSTMs dominate, as they should, or something else does;
      what the parts do not add up to is the optimizer and the glue between them.

    python benchmarks/bench_elmo.py                   # elmo-mini, 16 x 20 words (the recipe's batch)
    python benchmarks/bench_elmo.py --batch-size 64 --threads 1
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from bench_common import Report, interleaved_medians
from plm.data.corpus import default_corpus
from plm.models import from_preset
from plm.tokenization.characters import batch_to_ids, split_words


def real_batch(batch: int, words: int, vocab: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Char ids (batch, words, chars) of consecutive corpus words, and random next/previous targets."""
    stream = [w for document in default_corpus().train[:200] for w in split_words(document.text)]
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(stream) - words, batch)
    chars, _ = batch_to_ids([stream[s : s + words] for s in starts])
    targets = torch.from_numpy(rng.integers(0, vocab, (2, batch, words)))
    return chars, targets[0], targets[1]


def bench(preset: str, batch: int, words: int, repeats: int, seed: int, report: Report) -> None:
    torch.manual_seed(seed)
    model = from_preset(preset, vocab_size=8192).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    chars, next_words, previous_words = real_batch(batch, words, model.config.vocab_size, seed)
    tokens = batch * words
    print(f"[{preset}] {model.num_parameters():,} parameters; batch {batch} x {words} words; "
          f"{torch.get_num_threads()} threads")

    def train_step() -> None:
        out = model(chars, next_words=next_words, previous_words=previous_words)
        (out.forward_loss + out.backward_loss).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    with torch.no_grad():
        out = model(chars)
    token, forward_top, backward_top = out.token.detach(), out.forward[-1].detach(), out.backward[-1].detach()

    def char_cnn() -> None:
        model.token_encoder(chars).sum().backward()

    def lstms() -> None:
        x = token.clone().requires_grad_()
        forward = model._run(model.forward_lstms, x)[-1]
        backward = model._run(model.backward_lstms, x.flip(1))[-1]
        (forward.sum() + backward.sum()).backward()

    def softmax() -> None:
        f, b = forward_top.clone().requires_grad_(), backward_top.clone().requires_grad_()
        (model.word_loss(f, next_words) + model.word_loss(b, previous_words)).backward()

    times = interleaved_medians({"step": train_step, "char-CNN": char_cnn, "LSTMs": lstms, "softmax": softmax},
                                repeats=repeats, warmup=2, device=torch.device("cpu"))
    model.zero_grad(set_to_none=True)
    rest = times["step"] - sum(times[p] for p in ("char-CNN", "LSTMs", "softmax"))
    report.add(preset, f"training words/s ({batch}x{words})", tokens / times["step"],
               limit=f"{times['step'] * 1e3:.1f} ms a step")
    for part, seconds in (("char-CNN", times["char-CNN"]), ("LSTMs", times["LSTMs"]), ("softmax", times["softmax"]),
                          ("rest (optimizer, glue)", rest)):
        report.add(preset, f"ms a step: {part}", seconds * 1e3, limit=f"{seconds / times['step']:.0%} of the step")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="elmo-mini")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--words", type=int, default=20, help="words per sequence (bilm-tf unrolls 20)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    report = Report("elmo", "none (no trainable reference biLM to race; parts of plm's step)", settings=vars(args))
    bench(args.preset, args.batch_size, args.words, args.repeats, args.seed, report)
    report.finish()


if __name__ == "__main__":
    main()
