"""Entry point of the ``plm`` command."""

from __future__ import annotations

import os
import platform
import sys
import warnings
from collections.abc import Callable

import torch

import plm
from plm.cli import (
    attention_map,
    compare,
    convert,
    data,
    demo,
    elmo,
    embed,
    evaluate,
    fill_mask,
    finetune,
    generate,
    overlap,
    plan,
    predict,
    pretrain,
    quantize,
    seq2seq,
    serve,
    tokenizer,
    translate,
)
from plm.cli.common import HelpFormatter, Parser
from plm.cli.flags import in_flags
from plm.errors import PLMError, PLMWarning, RunStopped
from plm.training.distributed import is_first_process

COMMANDS = (
    demo, tokenizer, data, pretrain, finetune, predict, seq2seq, translate, generate, fill_mask, embed, elmo, evaluate,
    attention_map, serve, compare, overlap, convert, quantize, plan,
)


def build_parser() -> Parser:
    parser = Parser(
        prog="plm",
        description="The pretrained-language-model lineage on PyTorch: RNN encoder-decoders with Bahdanau and "
        "Luong attention, the Transformer, ELMo, GPT-1, GPT-2, BERT, ALBERT and DeBERTa. Train tokenizers, "
        "pre-train with each paper's objective, fine-tune with its task heads, generate and translate, evaluate, "
        "compare runs on an equal budget, and convert to and from Hugging Face. Start with `plm demo`.",
        formatter_class=HelpFormatter,
    )
    versions = f"plm {plm.__version__} (PyTorch {torch.__version__}, Python {platform.python_version()})"
    parser.add_argument("--version", action="version", version=versions)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    for command in COMMANDS:
        command.register(commands)
    return parser


def warning_shower(flag_of: dict[str, str]) -> Callable[..., None]:
    """What shows warnings: plm's own as one line on stderr, fields named by this command's flags; any other as
    Python shows it."""

    def show_warning(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
        if issubclass(category, PLMWarning):
            print(f"plm: warning: {in_flags(str(message), flag_of)}", file=sys.stderr)
        else:
            default_show_warning(message, category, filename, lineno, file, line)

    return show_warning


default_show_warning = warnings.showwarning


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    warnings.showwarning = warning_shower(args.flag_of)
    try:
        status = args.run(args)  # None, or the exit status of a command that answers a question (plan: fits?)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
    except PLMError as error:
        print(f"{args.command_name}: error: {in_flags(str(error), args.flag_of)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader of the output stopped early (plm ... | head): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that flushing at exit fails silently
        return 128 + 13  # SIGPIPE's status, as a shell tool's
    except OSError as error:
        # A file the library did not expect to fail (permissions, a full disk, ...): still the user's to fix.
        where = f"{error.filename}: " if error.filename is not None else ""
        print(f"{args.command_name}: error: {where}{error.strerror or error}", file=sys.stderr)
        return 2
    except RunStopped as stopped:  # a checkpoint of the step reached is saved
        if is_first_process():
            how = (f"continue with: {args.command_name} --out {args.out} --resume" if hasattr(args, "resume")
                   else "run the same command again to continue")
            print(f"{args.command_name}: {stopped}; {how}", file=sys.stderr)
        return 128 + stopped.signal_number
    except KeyboardInterrupt:
        print(f"{args.command_name}: interrupted", file=sys.stderr)
        return 130
    return status or 0


if __name__ == "__main__":
    sys.exit(main())
