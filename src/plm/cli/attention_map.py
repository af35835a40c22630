"""plm attention: draw attention weights as a PNG heatmap, tokens on both axes."""

from __future__ import annotations

import argparse
from pathlib import Path

from plm.apps.attention_map import pair_attention, plot, self_attention
from plm.cli.common import HelpFormatter, add_device, add_model, check_output_file
from plm.data.sentence_pairs import Seq2SeqTokenizers
from plm.device import resolve_device
from plm.errors import PLMError
from plm.loading import load_pretrained
from plm.models.base import Seq2SeqModel
from plm.storage.checkpoint import model_directory
from plm.storage.hub import local_or_hub

EXAMPLES = """examples:
  plm attention --model runs/dates "the fifth of May, nineteen ninety-nine" --out may.png
  plm attention --model runs/de-en "Ein Hund läuft." --target "A dog runs." --layer 5 --head 2
  plm attention --model runs/bert "The animal didn't cross the street because it was too tired." --layer 3 --head 1
"""


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "attention",
        help="draw attention weights as a heatmap",
        description="Write a PNG heatmap of attention weights with the tokens on both axes. For an encoder-decoder: "
        "the decoder's attention over TEXT (the source) while it reads --target (default: its own greedy "
        "translation); an RNN has one attention, a Transformer one per layer and head (encoder-decoder attention). "
        "For an encoder or a GPT model: the self-attention of TEXT at --layer and --head.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_model(parser, "model directory or training run")
    parser.add_argument("text", help="the source sentence (encoder-decoder) or the text (encoder, GPT)")
    parser.add_argument("--target", help="the target sentence the decoder reads (encoder-decoders only)")
    parser.add_argument("--layer", type=int, default=0,
                        help="which layer's attention (Transformers), from 0 (-1: the last)")
    parser.add_argument("--head", type=int, default=0, help="which head of that layer, from 0")
    parser.add_argument("--out", default="attention.png", help="PNG file to write")
    add_device(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> None:
    if Path(args.out).suffix.lower() != ".png":  # the map is a PNG, whatever the name says
        raise PLMError(f"--out {args.out}: the attention map is a PNG image; give a file name ending in .png")
    check_output_file(args.out)
    path = local_or_hub(args.model, args.revision)
    model, tokenizer = load_pretrained(path, resolve_device(args.device))
    if isinstance(model, Seq2SeqModel):
        tokenizers = Seq2SeqTokenizers.load(model_directory(path))
        attention = pair_attention(model, tokenizers, args.text, args.target, args.layer, args.head)
    else:
        if args.target is not None:
            raise PLMError("--target is for encoder-decoders; this model reads one text")
        attention = self_attention(model, tokenizer, args.text, args.layer, args.head)
    plot(attention, args.out)
    print(f"{attention.title}: {args.out}")
