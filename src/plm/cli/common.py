"""Flags that every command spells the same way."""

from __future__ import annotations

import argparse

from plm.device import DEVICES, resolve_device
from plm.errors import PLMError
from plm.loading import load_pretrained
from plm.models import CausalLM, Encoder
from plm.tokenizer import Tokenizer


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows defaults and keeps the examples in descriptions as written."""


def add_device(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", choices=DEVICES, help="where to run: auto picks CUDA when present")


def add_seed(parser: argparse.ArgumentParser, default: int | None = 0) -> None:
    parser.add_argument("--seed", type=int, default=default, help="random seed, for runs you can repeat")


def add_model(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--model", required=True, help=help)


def load_causal_lm(path: str, device: str) -> tuple[CausalLM, Tokenizer]:
    """A causal model (plm or Hugging Face directory, or a training run) and its tokenizer."""
    model, tokenizer = load_pretrained(path, resolve_device(device))
    if not isinstance(model, CausalLM):
        raise PLMError(f"{path}: a {model.family} model does not generate text")
    return model, tokenizer


def load_encoder(path: str, device: str) -> tuple[Encoder, Tokenizer]:
    """An encoder (BERT, ALBERT, DeBERTa; plm or Hugging Face directory) and its tokenizer."""
    model, tokenizer = load_pretrained(path, resolve_device(device))
    if not isinstance(model, Encoder):
        raise PLMError(f"{path}: a {model.family} model is not an encoder (BERT, ALBERT or DeBERTa)")
    return model, tokenizer


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value

