"""plm elmo: contextual word vectors from a trained biLM, and the nearest-neighbour demo."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from plm.apps.elmo_probes import (
    SenseScores,
    probe_pos,
    probe_wsd,
    read_conll_column,
    read_first_senses,
    read_sense_tagged,
)
from plm.apps.elmo_weights import elmo_mix_weights, plot_mix_weights
from plm.cli import flags
from plm.cli.common import (
    HelpFormatter,
    add_device,
    add_model,
    add_no_progress,
    add_seed,
    check_output_file,
    positive_int,
)
from plm.cli.eval_common import add_json, check_outputs, report
from plm.data.corpus import read_text
from plm.device import resolve_device
from plm.errors import PLMError, with_article
from plm.loading import find_tokenizer, opened
from plm.models.elmo import MIXES, Elmo, contextual_neighbors, embed_sentences, static_neighbors
from plm.storage.atomic_files import atomic_open, write_json
from plm.tokenization.characters import WORD_ROLES, split_words
from plm.tokenization.tokenizer import Tokenizer

EXAMPLES = """examples:
  plm pretrain --model elmo --out runs/elmo               # a small biLM on the embedded corpus
  plm elmo embed --model runs/elmo sentences.txt --out vectors.npy             # every layer
  plm elmo embed --model runs/elmo sentences.txt --out vectors.npy --mix average
  plm elmo neighbors --model runs/elmo --word play plays.txt
  plm elmo neighbors --model runs/elmo --word play plays.txt --query "They saw a play on Broadway ." --neighbors 5
  plm elmo embed --model elmo-plm sentences.txt --out vectors.npy   # AllenNLP's biLM, after plm convert
  plm elmo weights --model runs/ner --out weights.png   # the layer weights a plm finetune --elmo run learned
"""


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "elmo",
        help="ELMo: contextual word vectors from a biLM",
        description="Use a biLM trained with `plm pretrain --model elmo`, or AllenNLP's converted with `plm "
        "convert`; `weights` reads a model fine-tuned with `plm finetune --elmo` instead. Sentences are the lines "
        "of a UTF-8 file (embed: one row per line, so no empty lines), split into words and punctuation as in "
        "training.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    embed = actions.add_parser(
        "embed",
        help="write each word's vectors to a .npy file",
        description="Write the biLM's vectors of every word of FILE to a float32 .npy: (sentences, L + 1, words, "
        "2 x projection), layer 0 the token layer repeated to that width, layers 1..L the forward state then the "
        "backward state; or, with --mix, one vector per word (sentences, words, 2 x projection). Sentences are "
        "padded with zero vectors to the longest.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_model(embed, "a biLM directory or training run")
    embed.add_argument("file", help="UTF-8 text, one sentence per line")
    embed.add_argument("--out", required=True, help="the .npy file to write")
    embed.add_argument(
        "--mix", choices=MIXES, help="average: the mean of the layers; top (or last): the top LSTM layer"
    )
    embed.add_argument("--batch-size", type=positive_int, default=64, help="sentences per forward pass")
    add_no_progress(embed)
    add_device(embed)
    embed.set_defaults(run=run_embed)

    neighbors = actions.add_parser(
        "neighbors",
        help="nearest sentences by a word's contextual vector, nearest words by its token vector",
        description="For each query sentence holding --word (by default every sentence of FILE holding it), list "
        "the sentences of FILE whose top-layer vector of the word is nearest (cosine): a word with several senses "
        "finds sentences of its own sense. Beside them, the words of the model's vocabulary (of FILE, for a biLM "
        "without one) nearest by the context-free token layer, which has one vector per word whatever the sense.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_model(neighbors, "a biLM directory or training run")
    neighbors.add_argument("file", help="UTF-8 text, one sentence per line")
    neighbors.add_argument("--word", required=True, help="the word to follow (one word, as split in training)")
    neighbors.add_argument(
        "--query", help="a query sentence holding --word (default: each sentence of FILE holding it)"
    )
    neighbors.add_argument("--neighbors", type=positive_int, default=3, metavar="K",
                           help="the K nearest sentences and words to list")
    add_device(neighbors)
    neighbors.set_defaults(run=run_neighbors)

    probe = actions.add_parser(
        "probe",
        help="what each biLM layer knows: part of speech, word sense (ELMo 5.3)",
        description="ELMo's probes of a frozen biLM. pos: a linear classifier trained on each layer alone, and on a "
        "learned scalar mix, over a CoNLL file's POS column (the paper's Table 6 finds the first LSTM layer "
        "better than the second). wsd: the paper's 1-nearest-neighbour: each sense's vectors averaged over the "
        "training words, each tagged test word given its lemma's sense whose mean is nearest by cosine of each "
        "layer's vectors, a lemma unseen in training its first sense (--first-senses), scored by precision, recall "
        "and F1 (Table 5: the second layer is better). The sense-tagged format is a sentence a line, a tagged word "
        "written word|sense; SemCor and the Senseval/SemEval sets of Raganato et al.'s unified WSD framework convert "
        "to it.",
        epilog=PROBE_EXAMPLES,
        formatter_class=HelpFormatter,
    )
    probes = probe.add_subparsers(dest="probe", required=True, metavar="PROBE")
    pos = probes.add_parser("pos", help="a linear POS classifier per layer", epilog=PROBE_EXAMPLES,
                            formatter_class=HelpFormatter)
    add_model(pos, "a biLM directory or training run")
    pos.add_argument("--train", required=True, help="CoNLL file to train the classifiers on")
    pos.add_argument("--test", required=True, help="CoNLL file to score them on")
    flags.TAG_COLUMN.add(pos, default=2, note="CoNLL-2003's POS tags are 2", formerly=("--column",))
    flags.LIMIT.add(pos, default=2000, note="here the training sentences (the features of all are held in memory)")
    flags.EPOCHS.add(pos, default=10.0, note="here over the training words, by each probe")
    add_seed(pos)
    add_json(pos)
    add_device(pos)
    pos.set_defaults(run=run_probe_pos)
    wsd = probes.add_parser("wsd", help="word sense by the nearest sense mean, per layer", epilog=PROBE_EXAMPLES,
                            formatter_class=HelpFormatter)
    add_model(wsd, "a biLM directory or training run")
    wsd.add_argument("--train", required=True, help="sense-tagged sentences whose senses are averaged")
    wsd.add_argument("--test", required=True, help="sense-tagged sentences to score")
    wsd.add_argument("--first-senses", metavar="FILE",
                     help="a lemma and its first sense a line (WordNet's first sense, in the paper): the answer for a "
                     "lemma unseen in training (default: none, such a word is left unanswered)")
    add_json(wsd)
    add_device(wsd)
    wsd.set_defaults(run=run_probe_wsd)

    weights = actions.add_parser(
        "weights",
        help="the layer weights a fine-tuned task learned for ELMo (ELMo 5.5)",
        description="Print the softmax-normalised layer weights s_j and the scale gamma of each of ELMo's scalar "
        "mixes in a model fine-tuned with plm finetune --elmo: the mix at the BiLSTM's input, and with "
        "--elmo-output the one at its output (the paper's Figure 2); with --out, draw them as a bar plot.",
        epilog=WEIGHTS_EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_model(weights, "a model or run fine-tuned with plm finetune --elmo")
    weights.add_argument("--out", help="also draw the weights to this PNG file")
    add_json(weights)
    weights.set_defaults(run=run_weights)


PROBE_EXAMPLES = """examples:
  plm elmo probe pos --model runs/elmo --train conll2003/eng.train --test conll2003/eng.testa
  plm elmo probe wsd --model runs/elmo --train semcor.txt --test senseval2.txt --first-senses first.txt --json wsd.json
"""


WEIGHTS_EXAMPLES = """examples:
  plm finetune --task pair --model $MINILM --train snli.jsonl --features 0 --elmo runs/elmo --elmo-output --out snli
  plm elmo weights --model snli --out snli-weights.png --json snli-weights.json
"""


def run_probe_pos(args: argparse.Namespace) -> None:
    check_outputs(args, "json")
    model, _ = load_elmo(args.model, args.device, args.revision)
    train = read_conll_column(args.train, args.tag_column, args.limit)
    test = read_conll_column(args.test, args.tag_column)
    accuracy = probe_pos(model, train, test, epochs=args.epochs, seed=args.seed)
    report(f"part-of-speech accuracy on {args.test} (linear probes trained on {len(train):,} sentences)", accuracy,
           args.json)


def run_probe_wsd(args: argparse.Namespace) -> None:
    check_outputs(args, "json")
    train, test = read_sense_tagged(args.train), read_sense_tagged(args.test)
    first_senses = read_first_senses(args.first_senses) if args.first_senses else None
    model, _ = load_elmo(args.model, args.device, args.revision)
    scores = probe_wsd(model, train, test, first_senses)
    some = next(iter(scores.values()))
    print(f"word sense on {args.test}: the nearest sense mean of {args.train} (1-NN, cosine); {some.instances:,} "
          f"tagged words, {some.first_sense:,} of them (lemmas unseen in training) answered by their first sense")
    print(f"  {'layer':<8}  {'precision':>9}  {'recall':>7}  {'F1':>7}  answered")
    for name, score in scores.items():
        print(f"  {name:<8}  {score.precision:>9.4f}  {score.recall:>7.4f}  {score.f1:>7.4f}  "
              f"{score.answered:,} of {score.instances:,}")
    if args.json:
        write_json(args.json, {name: wsd_numbers(score) for name, score in scores.items()})


def wsd_numbers(score: SenseScores) -> dict[str, float | int]:
    """A layer's scores and counts, as --json writes them."""
    return {"precision": score.precision, "recall": score.recall, "f1": score.f1, "correct": score.correct,
            "answered": score.answered, "instances": score.instances, "first_sense": score.first_sense}


def run_weights(args: argparse.Namespace) -> None:
    if args.out is not None:
        if Path(args.out).suffix.lower() != ".png":
            raise PLMError(f"--out {args.out}: the plot is a PNG image; give a file name ending in .png")
        check_output_file(args.out)
    check_outputs(args, "json")
    _, model = opened(args.model, "cpu", args.revision)
    mixes = elmo_mix_weights(model)
    layers = mixes[0].layers
    print(f"ELMo's layer weights in {args.model}: softmax-normalised s_j of each scalar mix, and its gamma")
    print(f"  {'mix':<6}" + "".join(f"  {name:>7}" for name in layers) + f"  {'gamma':>7}")
    for mix in mixes:
        print(f"  {mix.place:<6}" + "".join(f"  {w:>7.4f}" for w in mix.weights) + f"  {mix.gamma:>7.4f}")
    if args.json:
        write_json(args.json, {mix.place: {"weights": dict(zip(mix.layers, mix.weights)), "gamma": mix.gamma}
                               for mix in mixes})
    if args.out is not None:
        plot_mix_weights(mixes, args.out, f"ELMo's layer weights in {Path(args.model).name}")
        print(f"wrote {args.out}")


def load_elmo(path: str, device: str, revision: str | None = None) -> tuple[Elmo, Tokenizer | None]:
    """The biLM at ``path`` and its word vocabulary, None where it has none (AllenNLP's, converted)."""
    directory, model = opened(path, resolve_device(device), revision)
    if not isinstance(model, Elmo):
        raise PLMError(
            f"{path}: {with_article(model.family)} model is not a biLM (train one with plm pretrain --model elmo)"
        )
    return model, find_tokenizer(directory)


def read_sentences(path: str, every_line: bool = False) -> tuple[list[str], list[list[str]]]:
    """The non-empty lines of ``path`` and their words; ``every_line``: an empty line is an error (one output
    row per input line, which a skipped line would shift)."""
    lines = read_text(path).splitlines()
    if every_line:
        empty = next((number for number, line in enumerate(lines, 1) if not split_words(line)), None)
        if empty is not None:
            raise PLMError(
                f"{path}:{empty}: an empty line; the vectors are one row per line, so every line needs a word"
            )
    lines = [line.strip() for line in lines if split_words(line)]
    if not lines:
        raise PLMError(f"{path}: no words in the file")
    return lines, [split_words(line) for line in lines]


def run_embed(args: argparse.Namespace) -> None:
    check_output_file(args.out)
    _, sentences = read_sentences(args.file, every_line=True)
    model, _ = load_elmo(args.model, args.device, args.revision)
    embedded = embed_sentences(model, sentences, args.mix, args.batch_size, progress=not args.no_progress)
    vectors = embedded.numpy().astype(np.float32)
    with atomic_open(args.out) as handle:
        np.save(handle, vectors)
    shape = " x ".join(map(str, vectors.shape))
    print(f"wrote {shape} vectors of {sum(map(len, sentences)):,} words to {args.out}")


def run_neighbors(args: argparse.Namespace) -> None:
    if split_words(args.word) != [args.word]:
        raise PLMError(f"--word {args.word!r} is not one word as training splits text: {split_words(args.word)}")
    lines, sentences = read_sentences(args.file)
    holding = [index for index, sentence in enumerate(sentences) if args.word in sentence]
    if args.query is not None:
        queries = [(args.query.strip(), split_words(args.query))]
        if args.word not in queries[0][1]:
            raise PLMError(f"--query does not contain the word {args.word!r}")
    else:
        queries = [(lines[index], sentences[index]) for index in holding]
    if not holding or (args.query is None and len(holding) < 2):
        raise PLMError(f"{args.file}: {len(holding)} sentence(s) hold {args.word!r}; the demo needs "
                       f"{'one' if args.query is not None else 'two'} at least")
    model, tokenizer = load_elmo(args.model, args.device, args.revision)
    # Without a vocabulary (AllenNLP's biLM), the candidates are the file's words.
    candidates = tokenizer.backend.get_vocab() if tokenizer is not None else [w for s in sentences for w in s]
    vocabulary = [word for word in candidates if word not in WORD_ROLES.values()]
    words = static_neighbors(model, args.word, vocabulary, args.neighbors)
    print(f"nearest words to {args.word!r} by the token layer (one vector, any context): "
          + ", ".join(f"{word} {similarity:.2f}" for word, similarity in words))
    for text, query in queries:
        print(f"\n{text}")
        for index, similarity in contextual_neighbors(model, sentences, args.word, query, args.neighbors):
            print(f"  {similarity:.3f}  {lines[index]}")
