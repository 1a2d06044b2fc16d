"""A reproduction's recipes from plain data: every arm's recipe is a mapping written by the
one TOML writer (:func:`edgetrain.tomlconfig.dumps`) and read back by the recipe loader, so a
reproduction can never launch a recipe that does not parse; ``{seed}`` is left for each run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from edgetrain.errors import RecipeError
from edgetrain.recipe import load_recipe, parse_recipe
from edgetrain.tomlconfig import TOMLDecodeError, dumps, loads

MNIST_TEST_SPLIT = 0.2  # of the 10,000-image MNIST test set: 8,000 train, 2,000 held out
_SEED_MARK = 7_340_958_211  # written as [run] seed, then replaced by the placeholder


def data(dataset: str, root: Path | str | None) -> dict[str, Any]:
    """The ``[data]`` table: scikit-learn's digits, or MNIST's test set from ``root`` split
    8,000 / 2,000 (callers add a partition or a sample cap)."""
    if dataset == "digits":
        return {"dataset": "digits"}
    return {"dataset": "mnist", "root": str(root), "test_split": MNIST_TEST_SPLIT}


def table(text_or_table: str | Mapping[str, Any]) -> dict[str, Any]:
    """A table given as TOML text (``'dataset = "digits"'``) or as a mapping."""
    if isinstance(text_or_table, str):
        return loads(text_or_table)
    return dict(text_or_table)


def recipe(
    name: str,
    data: Mapping[str, Any],
    model: str,
    train: Mapping[str, Any],
    workers: Sequence[Mapping[str, Any]],
    sections: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    heartbeat_s: float | None = 2.0,
    options: Mapping[str, Any] | None = None,
) -> str:
    """The recipe template of one arm: ``[run]`` (no checkpoints; heartbeats every
    ``heartbeat_s``, None: the default), ``[data]``, ``[model]`` (and its ``options``),
    ``[train]`` (family, technique, epochs, batch size, learning rate...), the family's
    ``sections`` and the ``[[workers]]``."""
    run: dict[str, Any] = {"name": name, "seed": 0, "checkpoint_every": 0}
    if heartbeat_s is not None:
        run["heartbeat_s"] = heartbeat_s
    doc = {
        "run": run,
        "data": dict(data),
        "model": {"name": model} | ({"options": dict(options)} if options else {}),
        "train": dict(train),
        **(sections or {}),
        "workers": [dict(w) for w in workers],
    }
    return template(doc)


def template(doc: Mapping[str, Any]) -> str:
    """``doc``'s TOML text with ``{seed}`` as ``[run] seed`` for :meth:`str.format` (every
    other brace doubled), checked: it must load as a recipe."""
    run = doc.get("run")
    if not isinstance(run, Mapping):
        raise RecipeError("a reproduction's recipe needs a [run] table (its name and seed)")
    text = dumps(
        {"run": {**run, "seed": _SEED_MARK}, **{k: v for k, v in doc.items() if k != "run"}}
    )
    text = text.replace("{", "{{").replace("}", "}}")
    text = text.replace(f"seed = {_SEED_MARK}\n", "seed = {seed}\n", 1)
    check(text, f"the recipe of {run.get('name', 'an arm')}")
    return text


def check(text: str, source: str) -> None:
    """Raise :class:`RecipeError` unless the template ``text`` loads as a recipe."""
    try:
        data = loads(text.format(seed=0))
    except TOMLDecodeError as exc:
        raise RecipeError(f"{source}: not valid TOML: {exc}", "a bug in the reproduction") from None
    parse_recipe(data, source)


def check_file(path: Path) -> None:
    """Read a written recipe back with the recipe loader (its paths are the launcher's to
    check): a recipe that does not load is an error before anything is launched."""
    load_recipe(path, check_paths=False)
