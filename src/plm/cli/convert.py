"""plm convert: move checkpoints to and from the Hugging Face format, and read AllenNLP's released ELMo."""

from __future__ import annotations

import argparse
from pathlib import Path

from plm.cli.common import HelpFormatter, add_model, check_output_file, write_model_directory
from plm.data.sentence_pairs import Seq2SeqTokenizers, reads_reversed
from plm.errors import PLMError
from plm.hf import load_hf, save_hf
from plm.hf.allennlp_elmo import allennlp_elmo_files, load_allennlp_elmo
from plm.llama_cpp import GGUF_TYPES, write_gguf
from plm.loading import check_tokenizer_fits, find_tokenizer, is_plm_directory, load
from plm.storage.checkpoint import load_model, model_directory, save_model
from plm.storage.hub import local_or_hub
from plm.storage.sharded_checkpoint import is_sharded_checkpoint
from plm.tokenization.released import load_released
from plm.tokenization.tokenizer import Tokenizer

EXAMPLES = """examples:
  plm convert --model hf-gpt2/ --out gpt2-plm/          # Hugging Face -> plm
  plm convert --model runs/pretrain --out my-gpt2-hf/   # plm -> Hugging Face (loads with transformers)
  plm convert --model runs/fsdp --out gpt2-whole/       # an FSDP run's shards -> one plm model directory
  plm convert --model gpt2-whole --out gpt2-hf/         # ... and that -> Hugging Face
  plm convert --model elmo-original/ --out elmo-plm/    # AllenNLP's ELMo: *options.json + *weights.hdf5 -> plm
  plm convert --model runs/pretrain --to gguf --out model.gguf             # llama.cpp's format, f16 matrices
  plm convert --model runs/pretrain --to gguf --type q8_0 --out model.gguf # ... 8-bit blocks, as llama.cpp's q8_0
"""


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "convert",
        help="convert checkpoints to and from the Hugging Face format",
        description="Convert a checkpoint between plm and Hugging Face transformers. The direction follows from "
        "--model: a plm model directory (or run) is written in the Hugging Face layout (config.json + "
        "model.safetensors), a Hugging Face directory in plm's, and a run whose checkpoint is sharded (--strategy "
        "fsdp) is consolidated into one plm model directory, which loads on one process. A directory holding "
        "AllenNLP's released ELMo (one *options.json and one *.hdf5) becomes a plm biLM for plm elmo and --elmo; "
        "the released files keep no softmax, so it embeds but has no LM loss (h5py reads them: "
        "pip install 'plm[elmo]'). "
        "The tokenizer is carried along when there is one. "
        "--to gguf writes one file for llama.cpp and the tools that read GGUF instead: a GPT-2-layout model with its "
        "byte-level BPE tokenizer, its matrices in --type (the gguf package writes it: pip install 'plm[gguf]'). "
        "Weights are read with safetensors (or torch.load(weights_only=True)), never unpickled.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_model(parser, "the directory to convert")
    parser.add_argument("--out", required=True,
                        help="the directory to write, new or empty unless --overwrite; with --to gguf, the file")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace a directory that is not empty (or a GGUF file): the converted model takes its "
                        "place whole, so no file of the old one stays")
    parser.add_argument("--to", choices=("gguf",),
                        help="gguf: write llama.cpp's format (one file). Left out, the direction follows from --model")
    parser.add_argument("--type", choices=GGUF_TYPES,
                        help="with --to gguf: the type of the weight matrices (default: f16, as llama.cpp's converter; "
                        "norms, biases and positions stay f32, as it keeps them); q8_0 is 8-bit blocks of 32 with one "
                        "scale each")
    parser.set_defaults(run=run)


def carried_tokenizer(directory: Path) -> Seq2SeqTokenizers | Tokenizer | None:
    """What goes with a converted model: a released translation model's two tokenizers (Marian's SentencePiece,
    FSMT's BPE files), else the tokenizer [`find_tokenizer`][plm.loading.find_tokenizer] finds, or None."""
    released = load_released(directory)
    return Seq2SeqTokenizers(*released) if released is not None else find_tokenizer(directory)


def run(args: argparse.Namespace) -> None:
    source = local_or_hub(args.model, args.revision)
    if args.to == "gguf":
        write_gguf_file(source, Path(args.out), args.type or "f16", args.overwrite)
        return
    if args.type is not None:
        raise PLMError("--type is the tensor type of a GGUF file: give it with --to gguf")

    def write(directory: Path) -> str:
        if is_plm_directory(source):
            model_dir = model_directory(source)
            model = load_model(model_dir)
            if is_sharded_checkpoint(model_dir):  # read whole from the shards of all its processes
                save_model(model, directory, carried_tokenizer(model_dir))
                return f"plm {model.family} model (consolidated from {model_dir}'s shards)"
            if reads_reversed(model_dir):  # Marian's and FSMT's configs have no such field: users would get nonsense
                raise PLMError(f"{model_dir} reads its sources reversed (--reverse-source), which a Hugging Face "
                               "translation model cannot say; translate it with plm")
            tokenizer = carried_tokenizer(model_dir)
            if isinstance(tokenizer, Tokenizer):
                check_tokenizer_fits(model_dir, model, tokenizer)
            save_hf(model, directory, tokenizer if isinstance(tokenizer, Tokenizer) else None)  # its bos and eos ids
            if tokenizer is not None:
                tokenizer.save(directory)
            return f"Hugging Face {model.family} checkpoint"
        if (allennlp := allennlp_elmo_files(source)) is not None:
            save_model(load_allennlp_elmo(*allennlp), directory)
            return "plm elmo model (AllenNLP's biLM)"
        model = load_hf(source)
        save_model(model, directory, carried_tokenizer(source))
        return f"plm {model.family} model"

    print(f"wrote {write_model_directory(source, Path(args.out), args.overwrite, write)} to {args.out}")


def write_gguf_file(source: Path, out: Path, tensor_type: str, overwrite: bool) -> None:
    """``plm convert --to gguf``: the model at ``source`` and its tokenizer as one GGUF file at ``out``."""
    check_output_file(str(out))
    if out.exists() and not overwrite:
        raise PLMError(f"{out}: the file exists; choose another --out or pass --overwrite to replace it")
    model = load(source)  # local_or_hub has found the directory
    directory = model_directory(source) if is_plm_directory(source) else source
    tokenizer = find_tokenizer(directory)
    if tokenizer is None:
        raise PLMError(f"{source}: no tokenizer beside the model, and a GGUF file carries one for llama.cpp")
    check_tokenizer_fits(directory, model, tokenizer)
    write_gguf(model, tokenizer, out, tensor_type)
    print(f"wrote a GGUF {model.family} model ({tensor_type} matrices) to {out}")
