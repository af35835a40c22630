"""The one exception type for errors a user can cause.

Library code raises [`PLMError`][plm.errors.PLMError] with a message that says what went wrong and
where (file, line, byte offset, the config field and its value); the command line prints
that message as one line and exits with status 2, without a traceback.

The library speaks no command line: a message names a config field or a parameter in
backquotes, `` `steps` `` (`FIELD`), never a flag. The command line prints each such name as
the flag that sets it in that command (``--steps``), so that each reader is told what they can
change: a field to the Python user, a flag to the one at the shell.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator

FIELD = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)`")  # a config field or parameter named in a message: `steps`


class PLMError(Exception):
    """A problem with the user's input: a file, a flag, a checkpoint or a prompt."""


class RunStopped(Exception):
    """A training run that a signal stopped, after it saved its checkpoint.

    The CLI prints the message (where it saved, how to resume) and exits with 128 + the
    signal's number, as shells expect: 143 for SIGTERM, 130 for SIGINT.

    Args:
        message: where the run saved and how to resume it.
        signal_number: the number of the signal that stopped the run.
    """

    def __init__(self, message: str, signal_number: int) -> None:
        super().__init__(message)
        self.signal_number = signal_number


class PLMWarning(UserWarning):
    """Something a user may want to change, though the run can go on (the CLI prints it as one line)."""


def with_article(word: str) -> str:
    """``word`` after "a" or "an" as it is spoken, for messages naming a family.

    "an elmo", "an albert", and for a word without vowels, spelled out letter by letter, by its first
    letter's name: "a gpt", "an rnn".

    Args:
        word: the word to put an article before.

    Returns:
        The article, a space and ``word``.
    """
    spelled = not any(vowel in word.lower() for vowel in "aeiouy")
    sounds = "aefhilmnorsx" if spelled else "aeiou"
    return f"{'an' if word[:1].lower() in sounds else 'a'} {word}"


@contextlib.contextmanager
def reading(path: str | os.PathLike[str], what: str = "a text file") -> Iterator[None]:
    """Turn the errors of reading a user's file into one PLMError that names it: missing, a directory, unreadable.

    Args:
        path: the file, as the user gave it.
        what: what the file should have been, for a directory given in its place.

    Yields:
        Nothing: the body reads the file.

    Raises:
        PLMError: the body met a missing file, a directory, or another error of the operating system.
    """
    try:
        yield
    except FileNotFoundError:
        raise PLMError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise PLMError(f"{path}: is a directory, not {what}") from None
    except OSError as error:
        raise PLMError(f"{path}: cannot read ({error.strerror})") from None
