"""The tasks' input: JSONL, one JSON object per line, with the fields a task names (or one JSON document).

Blank lines are skipped. A row that is not JSON, not an object, lacks a field or has
one of the wrong type is a [`PLMError`][plm.errors.PLMError] naming the file and the line, so that a
user finds it in an editor. The objects of a JSON document (CoQA's stories) are
checked the same way and named by where they sit (``data[3].questions[2]``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from plm.data.corpus import json_object, read_text
from plm.errors import PLMError


def read_jsonl(
    path: str | Path,
    required: dict[str, type | tuple[type, ...]],
    optional: dict[str, type | tuple[type, ...]] | None = None,
) -> list[tuple[int, dict[str, Any]]]:
    """(line number, row) for each non-blank line of ``path``; each row has the ``required`` fields.

    Args:
        path: the JSONL file.
        required: field -> the type (or types) its value must have.
        optional: fields a row may lack, and the types of their values when present.

    Returns:
        The line numbers (from 1) and rows.

    Raises:
        PLMError: a missing, non-UTF-8 or empty file, or a line that is not a JSON object with the fields and
            types asked for (booleans never count as numbers).
    """
    rows = []
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        row = json_object(line, path, number)
        check_fields(row, required, optional, f"{path}:{number}")
        rows.append((number, row))
    return rows


def read_json(path: str | Path) -> Any:
    """The JSON document in ``path``.

    Args:
        path: the JSON file.

    Returns:
        The document.

    Raises:
        PLMError: a missing, non-UTF-8 or empty file, or one that is not valid JSON (naming the line).
    """
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as error:
        raise PLMError(f"{path}:{error.lineno}: not valid JSON ({error.msg} at column {error.colno})") from None


def check_fields(
    row: Any,
    required: Mapping[str, type | tuple[type, ...]],
    optional: Mapping[str, type | tuple[type, ...]] | None,
    where: str,
) -> dict[str, Any]:
    """``row`` when it is an object with the ``required`` fields, and the ``optional`` ones it has, of their types.

    Args:
        row: a JSON value.
        required: field -> the type (or types) its value must have.
        optional: fields the object may lack, and the types of their values when present.
        where: how a message names the object ("file.jsonl:3", "file.json: data[0]").

    Returns:
        The object.

    Raises:
        PLMError: not an object, a missing field, or a field of another type (booleans never count as numbers).
    """
    if not isinstance(row, dict):
        raise PLMError(f"{where}: expected a JSON object {{...}}, got {type(row).__name__}")
    for name, kind in {**required, **(optional or {})}.items():
        if name not in row:
            if name in required:
                raise PLMError(f"{where}: missing field {name!r}")
        elif not isinstance(row[name], kind) or isinstance(row[name], bool):
            raise PLMError(f"{where}: field {name!r} should be {type_name(kind)}, got {json.dumps(row[name])[:40]}")
    return row


def type_name(kind: type | tuple[type, ...]) -> str:
    """How an error message names the types a field takes: "a string or an integer".

    Args:
        kind: a type, or a tuple of them.

    Returns:
        The names, joined by "or".
    """
    names = {str: "a string", int: "an integer", list: "a list", float: "a number", dict: "an object"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k, k.__name__) for k in kinds)
