"""One loader for every TOML configuration: recipes, hosts files, testbed specs and traces.

Each file is read, parsed and validated into a pydantic model by the same code, so every kind of
file (and every family's recipe section) reports a problem the same way, in one line that names
the file and the key::

    recipes/r.toml: unknown key 'epoch' in [train]; did you mean 'epochs'?
    hosts.toml: [[hosts]] #2 port: Input should be a valid integer (got 'x')

Locations are written as the TOML reads: ``[table] key``, ``[[array]] #n key`` (1-based), deeper
keys joined by dots, nested arrays of tables as ``name #n``.
"""

from __future__ import annotations

import difflib
import os
import sys
import types
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from edgetrain.errors import EdgetrainError

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10 (Ubuntu 22.04, JetPack 6): the same parser, as a package
    import tomli as tomllib

__all__ = [
    "TOMLDecodeError",
    "describe_error",
    "load_toml",
    "loads",
    "locate",
    "model_at",
    "read_toml",
    "validate",
]

M = TypeVar("M", bound=BaseModel)
TOMLDecodeError = tomllib.TOMLDecodeError


def loads(text: str) -> dict[str, Any]:
    """Parse TOML text (``tomllib``, or ``tomli`` on Python 3.10)."""
    return tomllib.loads(text)


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
        errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
        first = describe_error(dict(errors[0]), model, prefix)
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        raise error(f"{source}: {first}{more}") from None


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
    shown = "" if isinstance(given, (dict, list)) or given is None else f" (got {given!r})"
    return f"{where}: {msg}{shown}" if full else f"{msg}{shown}"
