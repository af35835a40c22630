"""plm convert: move checkpoints to and from the Hugging Face format."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from plm.checkpoint import load_model, model_directory, save_model, swap_in
from plm.cli.common import HelpFormatter, check_output_directory
from plm.errors import PLMError
from plm.files import make_directory, staging_directory
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
    parser.add_argument("--overwrite", action="store_true", help="replace a directory that is not empty: the converted model takes its place whole, so no file of the old one stays")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> None:
    source, out = Path(args.model), Path(args.out)
    if not source.exists():
        raise PLMError(f"{source}: no such directory")
    check_output_directory(out)
    if out.is_dir() and out.resolve() == source.resolve():
        raise PLMError(f"{out}: is the directory being converted; choose another --out")
    if out.is_dir() and any(out.iterdir()) and not args.overwrite:
        raise PLMError(f"{out}: the directory is not empty; choose another --out or pass --overwrite to replace it")
    # Written into a staging directory beside --out, then swapped in whole: a failure or a kill leaves the old
    # directory as it was, and --overwrite leaves no file of the replaced model behind.
    staging = staging_directory(make_directory(out.parent), f".{out.name}-")
    try:
        if is_plm_directory(source):
            directory = model_directory(source)
            model = load_model(directory)
            save_hf(model, staging)
            if tokenizer := find_tokenizer(directory):
                tokenizer.save(staging)
            written = f"Hugging Face {model.family} checkpoint"
        else:
            model = load_hf(source)
            save_model(model, staging, find_tokenizer(source))
            written = f"plm {model.family} model"
    except PLMError as error:  # named by the file the user asked for, not the staging copy
        shutil.rmtree(staging, ignore_errors=True)
        raise PLMError(str(error).replace(str(staging), str(out))) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    swap_in(staging, out.parent, out.name)
    print(f"wrote {written} to {out}")
