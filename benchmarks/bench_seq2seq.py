"""Sequence to sequence speed: training against torch.nn models of the same shape, and decoding sentences/s.

(a) Training tokens/s (target tokens) of plm's Transformer and of the same-shape model
    built on ``torch.nn.Transformer`` (post-LN, ReLU, the same embeddings, sinusoidal
    positions and tied output matrix), forward + cross entropy + backward + Adam, the two
    taking turns inside each repeat (bench_common.interleaved_medians).
(a') The same for the three RNN forms against the quality suite's torch.nn references
    (references.py: a context vector, Bahdanau's and Luong's attention, each the textbook
    loop over target steps), with dropout and gradient clipping at 1 as both train.
(b) Decoding sentences/s of plm's encoder-decoders (the Transformer and the three RNN
    forms) with greedy search and beam 4, every sentence decoded to the same length
    (untrained weights, EOS never chosen), a batch of sentences per call: beam search
    decodes all sentences and beams in one forward pass per step.

    python benchmarks/bench_seq2seq.py --config small
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn

from bench_common import interleaved_medians
from plm.decoding import beam_search
from plm.models import from_preset
from references import TorchTransformer, build_reference

CONFIGS = {
    # (transformer preset, vocabulary, batch, source length, target length, decoded tokens, repeats)
    "small": ("transformer-small", 8000, 32, 24, 24, 20, 5),
    "micro": ("transformer-micro", 512, 8, 12, 12, 8, 3),
}
RNN_FORMS = ("rnn", "rnn-bahdanau", "rnn-luong")


def training_step(model: nn.Module, optimizer: torch.optim.Optimizer, *inputs: torch.Tensor, labels: torch.Tensor,
                  clip: float = 0.0):
    def step() -> None:
        output = model(*inputs)
        logits = getattr(output, "logits", output)  # plm returns a ModelOutput, torch a tensor
        F.cross_entropy(logits.flatten(0, 1), labels.flatten()).backward()
        if clip:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
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
        "plm": training_step(plm_model, torch.optim.Adam(plm_model.parameters()), source, inputs, labels=labels),
        "torch.nn.Transformer": training_step(torch_model, torch.optim.Adam(torch_model.parameters()), source,
                                              inputs, labels=labels),
    }
    seconds = interleaved_medians(steps, repeats=repeats, warmup=1, device=torch.device("cpu"))
    tokens = batch * target_length
    plm_rate, torch_rate = tokens / seconds["plm"], tokens / seconds["torch.nn.Transformer"]
    print(f"{preset} training, {batch} x ({source_length} -> {target_length}) tokens: plm {plm_rate:,.0f} tok/s, "
          f"torch.nn.Transformer {torch_rate:,.0f} tok/s, plm/torch {plm_rate / torch_rate:.2f}x")


def bench_rnn_training(name: str) -> None:
    _, vocab, batch, source_length, target_length, _, repeats = CONFIGS[name]
    source = torch.randint(3, vocab, (batch, source_length))
    mask = torch.ones(batch, source_length, dtype=torch.long)
    mask[::2, -source_length // 4 :] = 0  # every other sentence a quarter shorter: the encoders pack
    target = torch.randint(3, vocab, (batch, target_length + 1))
    inputs, labels = target[:, :-1], target[:, 1:]
    for form in RNN_FORMS:
        torch.manual_seed(0)
        models = {"plm": from_preset(form, vocab_size=vocab).train(), "torch.nn": build_reference(form, vocab).train()}
        steps = {
            kind: training_step(model, torch.optim.Adam(model.parameters()), source, inputs, mask, labels=labels,
                                clip=1.0)
            for kind, model in models.items()
        }
        seconds = interleaved_medians(steps, repeats=repeats * 2, warmup=2, device=torch.device("cpu"))
        tokens = batch * target_length
        plm_rate, torch_rate = tokens / seconds["plm"], tokens / seconds["torch.nn"]
        print(f"{form} training, {batch} x ({source_length} -> {target_length}) tokens: plm {plm_rate:,.0f} tok/s, "
              f"torch.nn {torch_rate:,.0f} tok/s, plm/torch {plm_rate / torch_rate:.2f}x")


def bench_decoding(name: str) -> None:
    preset, vocab, batch, source_length, _, new_tokens, repeats = CONFIGS[name]
    source = torch.randint(3, vocab, (batch, source_length))
    start = torch.full((batch, 1), 1)
    for model_name in (preset, *RNN_FORMS):
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
    bench_rnn_training(args.config)
    bench_decoding(args.config)


if __name__ == "__main__":
    main()
