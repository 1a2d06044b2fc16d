"""One loader for every TOML configuration: recipes, hosts files, testbed specs and traces.

Each file is read, parsed and validated into a pydantic model by the same code, so every kind of
file (and every family's recipe section) reports a problem the same way, in one line that names
the file and the key::

    recipes/r.toml: unknown key 'epoch' in [train]; did you mean 'epochs'?
    hosts.toml: [[hosts]] #2 port: Input should be a valid integer (got 'x')

Locations are written as the TOML reads: ``[table] key``, ``[[array]] #n key`` (1-based), deeper
keys joined by dots, nested arrays of tables as ``name #n``.

The one writer is :func:`dumps` (a mapping to TOML text that reads back equal); every TOML file
edgetrain or a reproduction writes goes through it, and :func:`recipe_toml` is a recipe's text.
"""

from __future__ import annotations

import datetime
import decimal
import difflib
import math
import os
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from edgetrain.errors import EdgetrainError

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10 (Ubuntu 22.04, JetPack 6): the same parser, as a package
    import tomli as tomllib

__all__ = [
    "MAX_DEPTH",
    "SECTION_CONFIG",
    "TOMLDecodeError",
    "check_values",
    "describe_error",
    "dumps",
    "inline",
    "load_toml",
    "loads",
    "locate",
    "model_at",
    "problems",
    "read_toml",
    "recipe_toml",
    "validate",
]

M = TypeVar("M", bound=BaseModel)

#: What every recipe section's model shares (the core sections' and each family's): unknown
#: keys are errors; values are taken as TOML types them (strict: ``lr = true`` or
#: ``lr = "0.1"`` is a wrong type, not 1.0 or 0.1, while an integer stands for a float); and
#: numbers are finite (``inf`` and ``nan`` are refused).
SECTION_CONFIG = ConfigDict(
    extra="forbid", frozen=True, validate_default=True, strict=True, allow_inf_nan=False
)
TOMLDecodeError = tomllib.TOMLDecodeError


#: How deep tables and arrays may nest in a configuration file (``[[workers]]`` is 2 deep, a
#: model's ``options = { hidden = [128, 64] }`` 3): deeper is a mistake, and nesting thousands
#: deep would exhaust the parser's recursion.
MAX_DEPTH = 32
_INT64 = 2**63


def loads(text: str) -> dict[str, Any]:
    """Parse TOML text (``tomllib``, or ``tomli`` on Python 3.10). Text nested too deeply for
    the parser raises :class:`RecursionError`; :func:`read_toml` turns it into one line."""
    return tomllib.loads(text)


def check_values(data: Any, source: str, error: type[EdgetrainError]) -> None:
    """Refuse what the TOML grammar lets through but no configuration means: tables or arrays
    nested more than :data:`MAX_DEPTH` deep, and integers outside TOML's 64 bits (``tomllib``
    reads any size; ``seed = 99999999999999999999999`` would overflow later, far from its
    key). Walks without recursion, so a deep document cannot exhaust the stack here."""
    stack: list[tuple[tuple[Any, ...], Any]] = [((), data)]
    while stack:
        loc, value = stack.pop()
        if isinstance(value, bool):
            continue
        if isinstance(value, int) and not -_INT64 <= value < _INT64:
            raise error(
                f"{source}: {locate(loc)}: {value} does not fit a 64-bit integer",
                f"use a value from {-_INT64} to {_INT64 - 1}",
            )
        if isinstance(value, (dict, list)):
            if len(loc) >= MAX_DEPTH:
                keys = loc[: next((i for i, k in enumerate(loc) if not isinstance(k, str)), 3)]
                raise error(
                    f"{source}: {locate(keys[:3])}: tables and arrays nested more than "
                    f"{MAX_DEPTH} deep",
                    "flatten the value; no configuration key nests that deep",
                )
            items = value.items() if isinstance(value, dict) else enumerate(value)
            stack.extend(((*loc, k), v) for k, v in items)


def read_toml(
    path: str | os.PathLike[str], what: str, error: type[EdgetrainError], fix_missing: str
) -> tuple[dict[str, Any], str]:
    """Read and parse ``path``: its mapping and its text. ``what`` names the kind of file in
    messages ("recipe file", "hosts file"); ``fix_missing`` is the fix for a missing file."""
    p = Path(path)
    if not p.exists():
        raise error(f"{what} '{p}' not found", fix_missing)
    if not p.is_file():
        raise error(f"{what} '{p}' is not a file", fix_missing)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{what} '{p}' cannot be read: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{p}: not valid TOML: {exc}", "fix the syntax") from None
    except RecursionError:
        raise error(
            f"{p}: tables and arrays nested more than {MAX_DEPTH} deep",
            "flatten the value; no configuration key nests that deep",
        ) from None
    check_values(data, str(p), error)
    return data, text


def validate(
    model: type[M],
    data: dict[str, Any],
    source: str,
    error: type[EdgetrainError],
    prefix: tuple[Any, ...] = (),
) -> M:
    """Validate ``data`` into ``model``; any problem raises ``error`` naming ``source`` and the
    key. ``prefix`` is where ``data`` sits in the file (a recipe's family section)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        lines = _described(exc, model, prefix)
        more = f" (and {len(lines) - 1} more problem(s))" if len(lines) > 1 else ""
        raise error(f"{source}: {lines[0]}{more}") from None


def problems(
    model: type[BaseModel], data: dict[str, Any], source: str, prefix: tuple[Any, ...] = ()
) -> list[str]:
    """Every problem :func:`validate` would find in ``data``, one line each naming ``source``
    (unknown keys first, as :func:`validate` picks its first); empty when ``data`` is valid."""
    try:
        model.model_validate(data)
    except ValidationError as exc:
        return [f"{source}: {line}" for line in _described(exc, model, prefix)]
    return []


def _described(exc: ValidationError, model: type[BaseModel], prefix: tuple[Any, ...]) -> list[str]:
    errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    return [describe_error(dict(e), model, prefix) for e in errors]


def load_toml(
    path: str | Path,
    model: type[M],
    what: str,
    error: type[EdgetrainError],
    fix_missing: str,
    prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> tuple[M, str]:
    """:func:`read_toml` then :func:`validate`: the model and the file's text."""
    data, text = read_toml(path, what, error, fix_missing)
    if prepare is not None:
        data = prepare(data)
    return validate(model, data, str(path), error), text


def locate(loc: Sequence[Any], shape: str | None = None) -> str:
    """``('workers', 1, 'slowdown')`` -> ``[[workers]] #2 slowdown``; ``()`` -> the top level.

    A lone top-level key is written ``[key]`` when ``shape`` is "table", ``[[key]]`` when it
    is "array" (of tables)."""
    if not loc:
        return "the top level"
    head, rest = str(loc[0]), list(loc[1:])
    if rest and isinstance(rest[0], int):
        name = f"[[{head}]] #{rest.pop(0) + 1}"
    elif rest or shape == "table":
        name = f"[{head}]"
    elif shape == "array":
        return f"[[{head}]]"
    else:
        return head
    tail, after_key = "", False
    for part in rest:
        if isinstance(part, int):
            tail, after_key = f"{tail} #{part + 1}", False
        else:
            tail, after_key = f"{tail}{'.' if after_key else ' '}{part}", True
    return f"{name}{tail}"


def shape_at(root: type[BaseModel], loc: Sequence[Any]) -> str | None:
    """ "table", "array" (of tables) or None (a plain value) for the key at ``loc``."""
    if not loc or model_at(root, loc) is None:
        return None
    parent = model_at(root, loc[:-1])
    field = parent.model_fields.get(str(loc[-1])) if parent is not None else None
    if field is not None and typing.get_origin(field.annotation) is list:
        return "array"
    return "table"


def model_at(root: type[BaseModel], loc: Sequence[Any]) -> type[BaseModel] | None:
    """The pydantic model that validates the mapping at ``loc`` inside ``root`` (None if the
    location is not a model: a dict of options, a scalar)."""
    current: Any = root
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(str(part))
        if field is None:
            return None
        current = _inner_model(field.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _inner_model(annotation: Any) -> Any:
    """The model inside ``X``, ``X | None``, ``list[X]``: the type the next key applies to."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (list, tuple, typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            inner = _inner_model(arg)
            if inner is not None:
                return inner
    return None


def _description(root: type[BaseModel], loc: Sequence[Any]) -> str | None:
    """The ``description`` of the field at ``loc``, if it has one."""
    parent = model_at(root, loc[:-1]) if loc else None
    field = parent.model_fields.get(str(loc[-1])) if parent is not None else None
    return field.description if field is not None else None


def describe_error(err: dict[str, Any], root: type[BaseModel], prefix: tuple[Any, ...] = ()) -> str:
    """One pydantic error as a line: where, what, the value given, and a fix where we know one."""
    loc = tuple(err.get("loc", ()))
    full = (*prefix, *loc)
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        key = str(loc[-1])
        parent = model_at(root, loc[:-1])
        where = locate(full[:-1], shape_at(root, loc[:-1]))
        fix = ""
        if parent is not None:
            keys = list(parent.model_fields)
            close = difflib.get_close_matches(key, keys, n=1)
            fix = f"; did you mean '{close[0]}'?" if close else f"; valid keys: {', '.join(keys)}"
        return f"unknown key '{key}' in {where}{fix}"
    where = locate(full, shape_at(root, loc))
    hint = _description(root, loc)  # a field's description says how to write it
    if kind == "missing":
        return f"{where}: missing; {hint or 'add it'}"
    msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    if kind == "string_pattern_mismatch" and hint:
        msg = hint
    given = err.get("input")
    shown = "" if isinstance(given, (dict, list)) or given is None else f" (got {_shown(given)})"
    return f"{where}: {msg}{shown}" if full else f"{msg}{shown}"


def _shown(value: Any) -> str:
    """A value given in a file, as the file spells it where Python's ``repr`` would not
    (``true``, ``inf``, ``nan``)."""
    if isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value)):
        return _value(value, ())
    return repr(value)


# --------------------------------------------------------------------------- writing

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
    '"': '\\"',
    "\\": "\\\\",
}


def dumps(doc: Mapping[str, Any]) -> str:
    """``doc`` as TOML text that :func:`loads` reads back equal.

    Strings are basic strings (quotes, backslashes and control characters escaped, other
    Unicode as is); ints must fit 64 bits; floats keep every digit (``inf`` and ``nan`` as TOML
    spells them), a :class:`~decimal.Decimal` its written digits (``Decimal("3.0000")``: a
    float that reads ``3.0000``); dates and times in ISO form; paths as strings. A mapping is a
    ``[table]``, a list of mappings an array of tables (``[[workers]]``), anything inside an
    array inline. ``None`` has no TOML spelling and is refused (leave the key out), as is any
    other type. Within a table its plain keys come first, then its tables, in ``doc``'s order.
    """
    lines: list[str] = []
    _table(lines, (), doc, header=None)
    return "\n".join(lines).lstrip("\n") + "\n" if lines else ""


def inline(value: Any) -> str:
    """One TOML value as it stands right of ``=`` (a mapping as an inline table)."""
    return _value(value, ())


def recipe_toml(recipe: Mapping[str, Any] | BaseModel) -> str:
    """A recipe's TOML text: a mapping as read from a file, or a validated model (its fields
    with ``None`` left out, since TOML has no null)."""
    if isinstance(recipe, BaseModel):
        return dumps(recipe.model_dump(mode="json", exclude_none=True))
    return dumps(recipe)


def _key(key: Any, path: tuple[str, ...]) -> str:
    if not isinstance(key, str):
        raise TypeError(f"TOML keys are strings, not {key!r} (at {_dotted(path) or 'the top'})")
    return key if _BARE_KEY.fullmatch(key) else _string(key)


def _dotted(path: tuple[str, ...]) -> str:
    return ".".join(_key(k, ()) for k in path)


def _is_tables(value: Any) -> bool:
    return (
        isinstance(value, (list, tuple))
        and bool(value)
        and all(isinstance(v, Mapping) for v in value)
    )


def _table(
    lines: list[str], path: tuple[str, ...], table: Mapping[str, Any], header: str | None
) -> None:
    """A table's plain keys under ``header`` (none: the top level, or a table that holds only
    tables, which TOML makes implicitly), then its tables and arrays of tables."""
    plain = {k: v for k, v in table.items() if not isinstance(v, Mapping) and not _is_tables(v)}
    nested = [k for k in table if k not in plain]
    if header is not None and (plain or not nested or header.startswith("[[")):
        lines += ["", header]
    for k, v in plain.items():
        lines.append(f"{_key(k, path)} = {_value(v, (*path, k))}")
    for k in nested:
        sub, v = (*path, k), table[k]
        if isinstance(v, Mapping):
            _table(lines, sub, v, f"[{_dotted(sub)}]")
        else:
            for item in v:
                _table(lines, sub, item, f"[[{_dotted(sub)}]]")


def _value(value: Any, path: tuple[str, ...]) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if not -_INT64 <= value < _INT64:
            raise ValueError(f"{_dotted(path)}: {value} does not fit TOML's 64-bit integers")
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, decimal.Decimal):
        return _decimal(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, os.PathLike):
        return _string(os.fspath(value))
    if isinstance(value, (datetime.date, datetime.time)):  # datetime is a date
        if isinstance(value, datetime.time) and value.tzinfo is not None:
            raise ValueError(f"{_dotted(path)}: a TOML time of day has no UTC offset")
        return value.isoformat()
    if isinstance(value, Mapping):
        items = [f"{_key(k, path)} = {_value(v, (*path, k))}" for k, v in value.items()]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v, path) for v in value) + "]"
    where = _dotted(path) or "the top level"
    if value is None:
        raise TypeError(f"{where} is None: TOML has no null (leave the key out)")
    raise TypeError(f"{where}: {type(value).__name__} has no TOML spelling ({value!r})")


def _decimal(value: decimal.Decimal) -> str:
    if value.is_nan():
        return "nan"
    if value.is_infinite():
        return "-inf" if value.is_signed() else "inf"
    text = str(value)
    return text if any(c in text for c in ".eE") else f"{text}.0"


def _string(text: str) -> str:
    out = []
    for c in text:
        if c in _ESCAPES:
            out.append(_ESCAPES[c])
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04X}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'
