"""Family configurations: frozen dataclasses that print, save and load as JSON.

A config's fields are checked against their annotations ([`checked_value`][plm.config.checked_value]). A
message about any JSON a user gives plm (a config, a JSONL row, a request's body) names what a field takes with
[`type_name`][plm.config.type_name] ("an integer or null") and what it got with
[`json_type`][plm.config.json_type] ('the string "two"'), in the same words wherever plm reads JSON.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import TYPE_CHECKING, Any, TypeVar

from plm.errors import PLMError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

C = TypeVar("C", bound="DataclassInstance")  # a config class: a dataclass

# Fields that every family names and uses alike, checked before a model is built from them
# (a zero or negative size fails deep in the constructor, or builds a model of nothing).
POSITIVE_FIELDS = ("vocab_size", "context_length", "dim", "layers", "heads", "ffn_dim", "norm_eps")


HELP = "help"  # a knob's metadata key: what the field means, in its unit


def knob(default: Any = dataclasses.MISSING, help: str = "", *,
         default_factory: Any = dataclasses.MISSING) -> Any:
    """A config field declared with what it means, once: the command line builds its flag from it.

    The help names other fields in backquotes (`` `steps` ``), as the library's messages do, so that each
    interface says them its own way (``--steps`` on the command line).

    Args:
        default: the field's default.
        help: what it means, in its unit.
        default_factory: a factory of the default, instead of ``default``.

    Returns:
        The dataclass field.
    """
    return dataclasses.field(default=default, default_factory=default_factory, metadata={HELP: help})


def config_to_dict(config: Any) -> dict[str, Any]:
    """The fields of a config as a dict (nested configs become dicts too), as JSON saves them.

    Args:
        config: a config (a dataclass instance).

    Returns:
        The field names and values.
    """
    return dataclasses.asdict(config)


def config_from_dict(cls: type[C], values: Any, source: str = "config", complete: bool = False) -> C:
    """Build ``cls`` from ``values``, checked against the field annotations first.

    A wrong type, a null where the field takes none, an unknown field, a missing one
    (a field without default; every field when ``complete``, as for the config.json
    that plm writes whole), a size that is not positive or a dropout that is not a
    probability is a PLMError naming ``source`` and the field, instead of a model
    built from garbage or a traceback deep in its constructor.
    JSON lists become tuples and JSON integers floats where the field wants those.

    A field added after models were saved is named in the class's ``ADDED_FIELDS``
    with the value that reproduces the models saved before it, which a file without
    the field reads: an older model directory keeps loading.

    Args:
        cls: the config class (a dataclass).
        values: the fields as read from JSON.
        source: where ``values`` come from, for the error messages.
        complete: every field must be present, not only those without a default.

    Returns:
        The config.

    Raises:
        PLMError: ``values`` that do not make a valid ``cls``.
    """
    if not isinstance(values, dict):
        raise PLMError(f"{source}: the {cls.__name__} should be a JSON object, got {json_type(values)}")
    reader = getattr(cls, "from_dict", None)
    if reader is not None:  # a config that nests others (the task model's) reads them itself
        return reader(values, source, complete)
    values = {**getattr(cls, "ADDED_FIELDS", {}), **values}
    fields = {field.name: field for field in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise PLMError(f"{source}: unknown {cls.__name__} field(s) {', '.join(unknown)}")
    missing = [
        name
        for name, field in fields.items()
        if name not in values
        and (complete or (field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING))
    ]
    if missing:
        raise PLMError(f"{source}: {cls.__name__} field(s) {', '.join(missing)} missing")
    hints = typing.get_type_hints(cls)
    checked = {name: checked_value(value, hints[name], f"{source}: field {name!r}") for name, value in values.items()}
    for name, value in checked.items():
        if name in POSITIVE_FIELDS and not value > 0:
            raise PLMError(f"{source}: field {name!r} should be positive, got {value}")
        if name.endswith("dropout") and not 0 <= value <= 1:
            raise PLMError(f"{source}: field {name!r} should be a probability between 0 and 1, got {value}")
    try:
        return cls(**checked)
    except (TypeError, ValueError) as error:
        raise PLMError(f"{source}: invalid {cls.__name__}: {error}") from None
    except PLMError as error:
        raise PLMError(f"{source}: {error}") from None


def checked_value(value: Any, annotation: Any, where: str) -> Any:
    """``value`` as a field annotated ``annotation`` holds it, or a PLMError saying what was expected.

    Args:
        value: the value as read from JSON.
        annotation: the field's type annotation.
        where: the field, for the error message.

    Returns:
        The converted value (see [`convert`][plm.config.convert]).

    Raises:
        PLMError: ``value`` does not fit ``annotation``.
    """
    converted = convert(value, annotation)
    if converted is _WRONG:
        raise PLMError(f"{where} should be {type_name(annotation)}, got {json_type(value)}")
    return converted


_WRONG = object()


def convert(value: Any, annotation: Any) -> Any:
    """``value`` converted to ``annotation`` (int, float, bool, str, list, dict, tuples, ``X | None``), else ``_WRONG``.

    Args:
        value: the value as read from JSON.
        annotation: the field's type annotation.

    Returns:
        The converted value, or ``_WRONG`` when it does not fit.

    Raises:
        TypeError: an annotation of a kind that config fields do not use.
    """
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (types.UnionType, typing.Union):
        for option in args:
            converted = convert(value, option)
            if converted is not _WRONG:
                return converted
        return _WRONG
    if annotation is type(None):
        return None if value is None else _WRONG
    if annotation in (bool, str, list, dict):
        return value if isinstance(value, annotation) else _WRONG
    if annotation is int:  # JSON true/false are not numbers, though Python's bool is an int
        return value if isinstance(value, int) and not isinstance(value, bool) else _WRONG
    if annotation is float:
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else _WRONG
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            return _WRONG
        items = args[:1] * len(value) if args[-1:] == (Ellipsis,) else args
        if len(items) != len(value):
            return _WRONG
        converted = tuple(convert(item, kind) for item, kind in zip(value, items))
        return _WRONG if any(item is _WRONG for item in converted) else converted
    raise TypeError(f"config fields annotated {annotation!r} are not supported by config_from_dict")


# How a message names what a field takes: a type alone, and in a list of them ("a list of strings").
_TYPE_NAMES: dict[Any, tuple[str, str]] = {
    str: ("a string", "strings"), int: ("an integer", "integers"), float: ("a number", "numbers"),
    bool: ("true or false", "booleans"), type(None): ("null", "nulls"), list: ("a list", "lists"),
    dict: ("an object", "objects"),
}


def type_name(annotation: Any, plural: bool = False) -> str:
    """How the JSON a field takes reads in a message: "an integer", "a string or null", "a list of strings".

    Args:
        annotation: the field's type annotation (a type, ``X | Y``, ``tuple[X, ...]``, ``tuple[X, Y]``), or a
            tuple of types as `isinstance` takes them.
        plural: the words for several such values ("strings", "lists of integers"), as a list's items read.

    Returns:
        The words, the options of a union joined by "or".
    """
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if isinstance(annotation, tuple):
        origin, args = types.UnionType, annotation
    if origin in (types.UnionType, typing.Union):
        return " or ".join(type_name(option, plural) for option in args)
    if origin is tuple:
        lists = "lists of" if plural else "a list of"
        if args[-1:] == (Ellipsis,):
            return f"{lists} {type_name(args[0], plural=True)}"
        if len(set(args)) == 1:
            return f"{lists} {len(args)} {type_name(args[0], plural=True)}"
        return f"{lists} {len(args)} ({', '.join(type_name(arg) for arg in args)})"
    singular, several = _TYPE_NAMES.get(annotation, (annotation.__name__, annotation.__name__))
    return several if plural else singular


def json_type(value: Any) -> str:
    """How a value read from JSON reads in a message: null, true, the number 3, the string "two", a list ...

    A string, list or object is shown as JSON when that takes at most 40 characters, and named alone
    ("a string") when it is longer.

    Args:
        value: a value as read from JSON (a tuple reads as a list).

    Returns:
        The words for it.
    """
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, tuple):
        value = list(value)
    kinds = {int: "number", float: "number", str: "string", list: "list", dict: "object"}
    kind = next((name for cls, name in kinds.items() if isinstance(value, cls)), None)
    if kind is None:
        return f"a {type(value).__name__}"
    shown = "" if kind != "number" and len(value) > 40 else json.dumps(value, ensure_ascii=False, default=repr)
    if shown and len(shown) <= 40:
        return f"the {kind} {shown}"
    return "an object" if kind == "object" else f"a {kind}"
