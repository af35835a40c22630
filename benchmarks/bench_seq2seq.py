"""Sequence to sequence speed: Transformer training against torch.nn.Transformer, and decoding sentences/s.

(a) Training tokens/s (target tokens) of plm's Transformer and of the same-shape model
    built on ``torch.nn.Transformer`` (post-LN, ReLU, the same embeddings, sinusoidal
    positions and tied output matrix), forward + cross entropy + backward + Adam, the two
    taking turns inside each repeat (bench_common.interleaved_medians).
(b) Decoding sentences/s of plm's encoder-decoders (the Transformer and the three RNN
    forms) with greedy search and beam 4, every sentence decoded to the same length
    (untrained weights, EOS never chosen), a batch of sentences per call: beam search
    decodes all sentences and beams in one forward pass per step.

    python benchmarks/bench_seq2seq.py --config small
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F
from torch import nn

from bench_common import interleaved_medians
from plm.decoding import beam_search
from plm.models import from_preset

CONFIGS = {
    # (transformer preset, vocabulary, batch, source length, target length, decoded tokens, repeats)
    "small": ("transformer-small", 8000, 32, 24, 24, 20, 5),
    "micro": ("transformer-micro", 512, 8, 12, 12, 8, 3),
}


class TorchTransformer(nn.Module):
    """plm's Transformer shape on torch.nn.Transformer: shared embeddings scaled by sqrt(d), sinusoids, tied output."""

    def __init__(self, vocab: int, dim: int, layers: int, heads: int, ffn: int, context: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.transformer = nn.Transformer(dim, heads, layers, layers, ffn, dropout=0.0, batch_first=True)
        position = torch.arange(context)[:, None]
        frequencies = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))
        table = torch.zeros(context, dim)
        table[:, 0::2], table[:, 1::2] = torch.sin(position * frequencies), torch.cos(position * frequencies)
        self.register_buffer("positions", table)
        self.scale = math.sqrt(dim)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embedding(ids) * self.scale + self.positions[: ids.shape[1]]

    def forward(self, source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        causal = nn.Transformer.generate_square_subsequent_mask(target.shape[1])
        hidden = self.transformer(self.embed(source), self.embed(target), tgt_mask=causal, tgt_is_causal=True)
        return hidden @ self.embedding.weight.T


def training_step(model: nn.Module, optimizer: torch.optim.Optimizer, source, target, labels):
    def step() -> None:
        output = model(source, target)
        logits = getattr(output, "logits", output)  # plm returns a ModelOutput, torch a tensor
        F.cross_entropy(logits.flatten(0, 1), labels.flatten()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def bench_training(name: str) -> None:
    preset, vocab, batch, source_length, target_length, _, repeats = CONFIGS[name]
    torch.manual_seed(0)
    plm_model = from_preset(preset, vocab_size=vocab, dropout=0.0).train()
    config = plm_model.config
    torch_model = TorchTransformer(vocab, config.dim, config.encoder_layers, config.heads, config.ffn_dim,
                                   config.context_length).train()
    source = torch.randint(3, vocab, (batch, source_length))
    target = torch.randint(3, vocab, (batch, target_length + 1))
    inputs, labels = target[:, :-1], target[:, 1:]
    steps = {
        "plm": training_step(plm_model, torch.optim.Adam(plm_model.parameters()), source, inputs, labels),
        "torch.nn.Transformer": training_step(torch_model, torch.optim.Adam(torch_model.parameters()), source,
                                              inputs, labels),
    }
    seconds = interleaved_medians(steps, repeats=repeats, warmup=1, device=torch.device("cpu"))
    tokens = batch * target_length
    plm_rate, torch_rate = tokens / seconds["plm"], tokens / seconds["torch.nn.Transformer"]
    print(f"{preset} training, {batch} x ({source_length} -> {target_length}) tokens: plm {plm_rate:,.0f} tok/s, "
          f"torch.nn.Transformer {torch_rate:,.0f} tok/s, plm/torch {plm_rate / torch_rate:.2f}x")


def bench_decoding(name: str) -> None:
    preset, vocab, batch, source_length, _, new_tokens, repeats = CONFIGS[name]
    source = torch.randint(3, vocab, (batch, source_length))
    start = torch.full((batch, 1), 1)
    for model_name in (preset, "rnn", "rnn-bahdanau", "rnn-luong"):
        torch.manual_seed(0)
        model = from_preset(model_name, vocab_size=vocab).eval()
        calls = {
            f"beam {beam}": (lambda beam=beam: beam_search(model, start, beam_size=beam, alpha=0.0, max_len_b=new_tokens,
                                                             source_ids=source))
            for beam in (1, 4)
        }
        seconds = interleaved_medians(calls, repeats=repeats, warmup=1, device=torch.device("cpu"))
        rates = ", ".join(f"{label if label != 'beam 1' else 'greedy'} {batch / s:,.1f}" for label, s in seconds.items())
        print(f"{model_name} decoding sentences/s ({batch} sentences of {source_length} tokens, {new_tokens} new): {rates}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="small", choices=CONFIGS)
    args = parser.parse_args()
    torch.set_grad_enabled(True)
    bench_training(args.config)
    bench_decoding(args.config)


if __name__ == "__main__":
    main()
