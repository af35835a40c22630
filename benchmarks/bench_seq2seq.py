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
(c) With ``--translate MODEL`` instead: translation sentences/s of a trained encoder-decoder
    (a model directory or training run) over the first ``--sentences`` Multi30k test
    sentences, with its family's decoding (the Transformer: beam 4, alpha 0.6, at most
    source length + 50 tokens) and ``--beam``: batched as ``plm.objectives.translation.translate``
    batches them (sentences leave their batch once done) against one sentence per call,
    with fp32 weights and with int8 ones (``plm.quantize``), all four taking turns.

    python benchmarks/bench_seq2seq.py --config small
    python benchmarks/bench_seq2seq.py --translate MODEL_DIR --sentences 300 --threads 1
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from bench_common import Report, interleaved_medians
from plm import quantize
from plm.apps.translation import load_seq2seq
from plm.decoding import beam_search
from plm.models import from_preset
from plm.objectives.translation import recipe_decoding, translate
from references import TorchTransformer, build_reference

MULTI30K_TEST = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "multi30k" / "test_2016_flickr.de"

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


def bench_training(name: str, report: Report) -> None:
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
    report.add(preset, f"train target tok/s ({batch}x{source_length}->{target_length}), vs torch.nn.Transformer",
               tokens / seconds["plm"], tokens / seconds["torch.nn.Transformer"])


def bench_rnn_training(name: str, report: Report) -> None:
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
        report.add(form, f"train target tok/s ({batch}x{source_length}->{target_length}), vs references.py",
                   tokens / seconds["plm"], tokens / seconds["torch.nn"])


def bench_decoding(name: str, report: Report) -> None:
    preset, vocab, batch, source_length, _, new_tokens, repeats = CONFIGS[name]
    source = torch.randint(3, vocab, (batch, source_length))
    start = torch.full((batch, 1), 1)
    for model_name in (preset, *RNN_FORMS):
        torch.manual_seed(0)
        model = from_preset(model_name, vocab_size=vocab).eval()
        calls = {
            f"beam {beam}": (
                lambda beam=beam: beam_search(
                    model, start, num_beams=beam, length_penalty=0.0, max_new_tokens=new_tokens, source_ids=source
                )
            )
            for beam in (1, 4)
        }
        seconds = interleaved_medians(calls, repeats=repeats, warmup=1, device=torch.device("cpu"))
        for label, s in seconds.items():
            search = "greedy" if label == "beam 1" else label
            report.add(model_name, f"{search} sentences/s ({batch} of {source_length} tokens, {new_tokens} new)",
                       batch / s)


def bench_translation(model_path: Path, sources: Path, sentences: int, beam: int, repeats: int, report: Report) -> None:
    fp32, tokenizers = load_seq2seq(model_path)
    models = {"fp32": fp32.eval(), "int8": quantize(copy.deepcopy(fp32), "int8")}
    lines = sources.read_text(encoding="utf-8").splitlines()[:sentences]
    options = recipe_decoding(fp32.family, num_beams=beam)
    modes = ("batched", "one at a time")
    outputs: dict[str, list[str]] = {}

    def translating(name: str, model: nn.Module, one_at_a_time: bool) -> Callable[[], None]:
        def call() -> None:
            outputs[name] = ([translate(model, tokenizers, [line], options)[0] for line in lines] if one_at_a_time
                             else translate(model, tokenizers, lines, options))
        return call

    calls = {f"{weights} {mode}": translating(f"{weights} {mode}", model, mode == "one at a time")
             for weights, model in models.items() for mode in modes}
    seconds = interleaved_medians(calls, repeats=repeats, warmup=1, device=torch.device("cpu"))
    rate = {name: len(lines) / s for name, s in seconds.items()}
    config = f"{fp32.family}, beam {beam}"
    for weights in models:  # batched against one sentence per call
        report.add(config, f"{weights} sentences/s, {len(lines)} of {sources.name}, batched vs one at a time",
                   rate[f"{weights} batched"], rate[f"{weights} one at a time"])
    for mode in modes:
        report.add(config, f"int8 vs fp32 sentences/s, {mode}", rate[f"int8 {mode}"], rate[f"fp32 {mode}"])
    for weights in models:
        same = sum(a == b for a, b in zip(*(outputs[f"{weights} {mode}"] for mode in modes)))
        report.notes.append(f"{weights}: batched and one at a time give the same translation for {same} of "
                            f"{len(lines)} sentences")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="small", choices=CONFIGS)
    parser.add_argument("--translate", type=Path, metavar="MODEL", help="time translation with this trained model (c)")
    parser.add_argument("--sources", type=Path, default=MULTI30K_TEST, help="sentences to translate, one a line")
    parser.add_argument("--sentences", type=int, default=300, help="how many of them (the first)")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    # no paths
    settings = {name: value.name if isinstance(value, Path) else value for name, value in vars(args).items()}
    if args.translate:
        report = Report("translation", "the same model one sentence per call, and in fp32", settings=settings)
        bench_translation(args.translate, args.sources, args.sentences, args.beam, args.repeats, report)
    else:
        report = Report("seq2seq", "torch.nn models of the same shape (references.py); decoding: plm alone",
                        settings=settings)
        torch.set_grad_enabled(True)
        bench_training(args.config, report)
        bench_rnn_training(args.config, report)
        bench_decoding(args.config, report)
    report.finish()


if __name__ == "__main__":
    main()
