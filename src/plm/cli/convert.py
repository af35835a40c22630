"""plm convert: move checkpoints to and from the Hugging Face format."""

from __future__ import annotations

import argparse
from pathlib import Path

from plm.checkpoint import load_model, model_directory, save_model
from plm.cli.common import HelpFormatter, check_output_directory
from plm.errors import PLMError
from plm.hf import load_hf, save_hf
from plm.loading import find_tokenizer, is_plm_directory

EXAMPLES = """examples:
  plm convert --model hf-gpt2/ --out gpt2-plm/          # Hugging Face -> plm
  plm convert --model runs/pretrain --out my-gpt2-hf/   # plm -> Hugging Face (loads with transformers)
"""


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "convert",
        help="convert checkpoints to and from the Hugging Face format",
        description="Convert a checkpoint between plm and Hugging Face transformers. The direction follows from "
        "--model: a plm model directory (or run) is written in the Hugging Face layout (config.json + "
        "model.safetensors), a Hugging Face directory in plm's. The tokenizer is carried along when there is one. "
        "Weights are read with safetensors (or torch.load(weights_only=True)), never unpickled.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--model", required=True, help="the directory to convert")
    parser.add_argument("--out", required=True, help="directory to write; new or empty unless --overwrite")
    parser.add_argument("--overwrite", action="store_true", help="write into a directory that is not empty (files of the same name are replaced)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> None:
    source, out = Path(args.model), Path(args.out)
    if not source.exists():
        raise PLMError(f"{source}: no such directory")
    check_output_directory(out)
    if out.is_dir() and out.resolve() == source.resolve():
        raise PLMError(f"{out}: is the directory being converted; choose another --out")
    if out.is_dir() and any(out.iterdir()) and not args.overwrite:
        raise PLMError(f"{out}: the directory is not empty; choose another --out or pass --overwrite")
    if is_plm_directory(source):
        directory = model_directory(source)
        model = load_model(directory)
        save_hf(model, out)
        if tokenizer := find_tokenizer(directory):
            tokenizer.save(out)
        print(f"wrote Hugging Face {model.family} checkpoint to {out}")
    else:
        model = load_hf(source)
        save_model(model, out, find_tokenizer(source))
        print(f"wrote plm {model.family} model to {out}")
