"""plm data prepare: tokenize a corpus, or sentence pairs, once into memory-mapped shards that training reads."""

from __future__ import annotations

import argparse

from plm.cli import flags
from plm.cli.common import HelpFormatter, add_no_progress, positive_float, positive_int
from plm.cli.seq2seq import add_sentence_pairs
from plm.data.prepare import PrepareOptions, join_prepared, prepare_corpus, prepare_pairs
from plm.data.prepared import PreparedCorpus, PreparedPairs
from plm.data.sentence_pairs import ParallelText, Seq2SeqTokenizers
from plm.errors import PLMError
from plm.tokenization.tokenizer import Tokenizer

EXAMPLES = """examples:
  plm data prepare books/ wiki.jsonl.zst --tokenizer tok --out data/books-wiki
  plm data prepare 'shards/*.parquet' --text-field content --tokenizer tok --out data/web
  plm data prepare train.txt --validation valid.txt --tokenizer bert-tok --out data/bert
  plm pretrain --model bert --data data/bert --steps 100000        # every objective reads it
  plm data prepare web.jsonl --tokenizer tok --shard 3/8 --out data/web-3   # on machine 3 of 8 (from 0)
  plm data join data/web-* --out data/web                          # the 8 shards as one corpus, tokens linked
  plm data prepare --src train.de --tgt train.en --tokenizer runs/t/checkpoint --out data/de-en   # sentence pairs
  plm data prepare wmt14.jsonl.gz --src-lang de --tgt-lang en --tokenizer tok --out data/wmt14-de-en
  plm seq2seq train --model transformer --data data/wmt14-de-en     # seq2seq reads the pairs
"""


def register(commands: argparse._SubParsersAction) -> None:
    data = commands.add_parser("data", help="prepare corpora for pre-training",
                               description="Prepare corpora for pre-training: tokenize once into memory-mapped token "
                               "ids (prepare), and join shards prepared on several machines (join).",
                               epilog=EXAMPLES, formatter_class=HelpFormatter)
    actions = data.add_subparsers(dest="action", required=True, metavar="ACTION")
    prepare = actions.add_parser(
        "prepare",
        help="tokenize a corpus once, in parallel, into memory-mapped token ids",
        description="Tokenize a corpus once, on every core and in bounded memory, into a directory of memory-mapped "
        "token ids with the boundaries of its documents and sentences, which plm pretrain --data reads with every "
        "objective (GPT's blocks, BERT's NSP and ALBERT's SOP pairs, the masked LMs). Inputs are plain text "
        "(documents separated by blank lines; also .gz and .zst), JSONL (one object a line; also .gz and .zst), "
        "Parquet, and Hugging Face datasets directories (save_to_disk); globs and directories of them. About 5% of "
        "the documents are held out for validation (by a hash of their text: the same ones every time), unless "
        "--validation names inputs. The directory appears only once complete: a prepare that is stopped leaves "
        "nothing that passes for a prepared corpus, and running it again starts it cleanly. Sentence pairs for "
        "plm seq2seq train --data are prepared from --src/--tgt (aligned files, one sentence a line), --tsv "
        "(source<TAB>target lines), or JSONL inputs of translation records {\"translation\": {\"de\": ..., "
        "\"en\": ...}} with --src-lang/--tgt-lang, with a seq2seq --tokenizer (a seq2seq run's or model's).",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    prepare.add_argument("inputs", nargs="*", metavar="INPUT",
                         help="files, globs or directories; JSONL translation records with --src-lang/--tgt-lang")
    flags.TOKENIZER.add(prepare, required=True, note="plm tokenizer train's, or a model's; for sentence pairs, a "
                        "seq2seq model's or run's")
    prepare.add_argument("--out", required=True, help="the directory to write; new or empty unless --overwrite")
    prepare.add_argument("--overwrite", action="store_true", help="replace a prepared corpus of other inputs")
    prepare.add_argument("--validation", nargs="+", default=[], metavar="INPUT",
                         help="inputs to validate on, instead of holding out part of the corpus")
    prepare.add_argument("--validation-fraction", type=positive_float, default=0.05,
                         help="the share of the documents held out when there is no --validation")
    flags.TEXT_FIELD.add(prepare)
    pairs = prepare.add_argument_group("sentence pairs, for plm seq2seq train --data")
    add_sentence_pairs(pairs)
    pairs.add_argument("--src-lang", metavar="LANG",
                       help="the INPUTs are JSONL translation records; the source is this language's sentence")
    pairs.add_argument("--tgt-lang", metavar="LANG", help="... and the target this one's")
    prepare.add_argument("--workers", type=positive_int, help="processes that tokenize (default: one per core)")
    prepare.add_argument("--shard", type=shard, metavar="I/N",
                         help="prepare only share I (from 0, as RANK or SLURM_ARRAY_TASK_ID) of N disjoint shares of "
                         "the inputs, about equal in bytes: a large text or JSONL file is cut at document breaks, "
                         "other inputs go whole; then plm data join puts the N shards together")
    add_no_progress(prepare)
    prepare.set_defaults(run=run_prepare)
    join = actions.add_parser(
        "join",
        help="join prepared corpora (the shards of one prepare) into one, without copying tokens",
        description="Join prepared corpora of one tokenizer into one: the shards of a plm data prepare --shard I/N "
        "(all N of them, each once), or corpora prepared apart. The token files are hard-linked (symbolically "
        "linked across file systems), not copied; the manifest lists every part's inputs and sums their counts.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    join.add_argument("parts", nargs="+", metavar="DIR", help="prepared corpora")
    join.add_argument("--out", required=True, help="the directory to write; new or empty unless --overwrite")
    join.add_argument("--overwrite", action="store_true", help="replace what is in --out")
    join.set_defaults(run=run_join)


def shard(text: str) -> tuple[int, int]:
    """--shard I/N: share I (from 0) of N."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"I/N, share I (from 0) of N, got {text!r}") from None
    if count < 1 or not 0 <= index < count:
        raise argparse.ArgumentTypeError(f"I/N with 0 <= I < N, got {text!r}")
    return index, count


def run_prepare(args: argparse.Namespace) -> None:
    if not 0 < args.validation_fraction < 1:
        raise PLMError(f"--validation-fraction must be between 0 and 1, got {args.validation_fraction}")
    options = PrepareOptions(text_field=args.text_field, validation_fraction=args.validation_fraction,
                             workers=args.workers, progress=not args.no_progress, shard=args.shard)
    text, validation = parallel_text(args)
    if text is not None:
        report_pairs(prepare_pairs(text, Seq2SeqTokenizers.load(args.tokenizer), args.out, validation, options,
                                   args.overwrite))
        return
    if not args.inputs:
        raise PLMError("give the INPUT files to prepare, or sentence pairs (--src/--tgt, --tsv, or INPUT files with "
                       "--src-lang/--tgt-lang)")
    report(prepare_corpus(args.inputs, Tokenizer.load(args.tokenizer), args.out, args.validation, options,
                          args.overwrite), "prepared")


def parallel_text(args: argparse.Namespace) -> tuple[ParallelText | None, ParallelText | None]:
    """The sentence pairs to prepare and their validation pairs (None: held out), or None for documents."""
    languages = (args.src_lang, args.tgt_lang)
    valid_files = (args.validation_src, args.validation_tgt, args.validation_tsv)
    if not any((args.src, args.tgt, args.tsv, *languages)):
        if any(valid_files):
            raise PLMError("--validation-src/--validation-tgt and --validation-tsv are sentence pairs; documents "
                           "validate on --validation")
        return None, None
    if any(languages) and not all(languages):
        raise PLMError("--src-lang and --tgt-lang go together: the keys of the source and the target sentence")
    if (args.src or args.tgt) and args.tsv:
        raise PLMError("give either --tsv or --src and --tgt, not both")
    if bool(args.src) != bool(args.tgt):
        raise PLMError("--src and --tgt go together: one file of source sentences, one of their translations")
    if all(languages) and (args.src or args.tsv):
        raise PLMError("sentence pairs are --src/--tgt files, a --tsv file, or INPUT files of translation records "
                       "with --src-lang/--tgt-lang: give one of them")
    if args.inputs and not all(languages):
        raise PLMError("INPUT files are documents, or translation records with --src-lang/--tgt-lang; --src/--tgt "
                       "and --tsv prepare without them")
    if args.shard is not None:
        raise PLMError("--shard prepares a share of documents; sentence pairs are prepared whole")
    if bool(args.validation_src) != bool(args.validation_tgt):
        raise PLMError("--validation-src and --validation-tgt go together")
    if args.validation_tsv and args.validation_src:
        raise PLMError("give either --validation-tsv or --validation-src and --validation-tgt, not both")
    if args.validation and not all(languages):
        raise PLMError("--validation names documents, or translation records with --src-lang/--tgt-lang; validation "
                       "pairs are --validation-src/--validation-tgt or --validation-tsv")
    if all(languages) and not args.inputs:
        raise PLMError("--src-lang/--tgt-lang name the languages of INPUT files of translation records: give them")
    pairs = tuple(args.inputs), languages if all(languages) else None
    text = ParallelText(args.src, args.tgt, args.tsv, *pairs)
    if args.validation:
        return text, ParallelText(translations=tuple(args.validation), languages=languages)
    if args.validation_src or args.validation_tsv:
        return text, ParallelText(args.validation_src, args.validation_tgt, args.validation_tsv)
    return text, None


def run_join(args: argparse.Namespace) -> None:
    report(join_prepared(args.parts, args.out, args.overwrite), "joined")


def report(corpus: PreparedCorpus, done: str) -> None:
    for split in ("train", "validation"):
        counts = corpus.manifest["splits"][split]
        print(f"{split}: {counts['documents']:,} documents, {counts['sentences']:,} sentences, "
              f"{counts['tokens']:,} tokens")
    print(f"{done} {corpus.path}")


def report_pairs(corpus: PreparedPairs) -> None:
    for split in ("train", "validation"):
        counts = corpus.manifest["splits"][split]
        print(f"{split}: {counts['pairs']:,} pairs, {counts['source_tokens']:,} source and "
              f"{counts['target_tokens']:,} target tokens")
    print(f"prepared {corpus.path}")
