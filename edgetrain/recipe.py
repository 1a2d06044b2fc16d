"""Recipe schema: TOML files validated into frozen config objects, with errors naming file and key.

A recipe has the sections ``[run]``, ``[data]``, ``[model]``, ``[train]``, ``[gossip]`` and a list
``[[workers]]``. Every section is optional except ``[[workers]]``; unknown keys are errors.
Later techniques add their own optional sections (``[ps]``, ``[pipeline]``, ``[edgegossip]``,
``[dlion]``, ``[mercury]``, ``[dynacomm]``) so that older recipes keep loading unchanged.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any, Literal

import tomllib
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from edgetrain.errors import RecipeError

TECHNIQUES: dict[str, tuple[str, ...]] = {"gossip": ("gosgd",)}


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class RunSection(_Section):
    """``[run]``: naming, seeding and where run directories go."""

    name: str = Field("run", min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    seed: int = 0
    run_dir: str = "runs"
    # Failure handling (EdgeGossip's f_threshold): the run goes on without failed workers while
    # the failed fraction stays at or below this; above it, it stops with an error.
    max_failed_fraction: float = Field(0.25, ge=0, le=1)
    heartbeat_s: float = Field(1.0, gt=0, le=60)
    # Every N epochs the coordinator writes RUN/checkpoints/epoch-N/ (0: never).
    checkpoint_every: int = Field(5, ge=0)
    # Transport security: "curve" encrypts and authenticates with the keys in ``keys``
    # (a directory written by ``edgetrain keys generate``; relative to the current directory).
    security: Literal["none", "curve"] = "none"
    keys: str = "keys"


class DataSection(_Section):
    """``[data]``: which dataset, where it lives, and how it is split across workers."""

    dataset: Literal["digits", "mnist", "fashion-mnist", "cifar10", "synthetic"] = "digits"
    root: str | None = None
    partition: Literal["iid", "dirichlet", "fractions"] = "iid"
    alpha: float = Field(0.5, gt=0)
    fractions: list[float] | None = None
    test_split: float = Field(0.2, gt=0, lt=1)
    max_samples: int | None = Field(None, gt=0)
    # synthetic only
    shape: list[int] = Field(default_factory=lambda: [1, 28, 28], min_length=1, max_length=3)
    classes: int = Field(10, ge=2)
    count: int = Field(2000, ge=10)

    @model_validator(mode="after")
    def _check(self) -> DataSection:
        if self.dataset in ("mnist", "fashion-mnist", "cifar10") and not self.root:
            raise ValueError(f"dataset '{self.dataset}' needs root = \"DIR\" (its directory)")
        if self.partition == "fractions":
            if not self.fractions:
                raise ValueError("partition = 'fractions' needs fractions = [..] (one per worker)")
            if any(f <= 0 for f in self.fractions) or abs(sum(self.fractions) - 1.0) > 1e-6:
                raise ValueError("fractions must be positive and sum to 1")
        if any(s <= 0 for s in self.shape):
            raise ValueError("shape entries must be positive")
        return self


class ModelSection(_Section):
    """``[model]``: a model from the zoo by name, with its options."""

    name: str = "mlp"
    options: dict[str, Any] = Field(default_factory=dict)


class TrainSection(_Section):
    """``[train]``: technique, algorithm and the optimiser's settings."""

    technique: Literal["gossip"] = "gossip"
    algorithm: str = "gosgd"
    epochs: int = Field(10, ge=1)
    batch_size: int = Field(32, ge=1)
    lr: float = Field(0.05, gt=0)
    momentum: float = Field(0.9, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)
    optimizer: Literal["sgd", "adam"] = "sgd"
    eval_every: int = Field(1, ge=1)
    device: Literal["cpu", "cuda", "auto"] = "cpu"

    @model_validator(mode="after")
    def _check(self) -> TrainSection:
        known = TECHNIQUES[self.technique]
        if self.algorithm not in known:
            raise ValueError(
                f"algorithm '{self.algorithm}' is not a {self.technique} algorithm; "
                f"use one of: {', '.join(known)}"
            )
        return self


class GossipSection(_Section):
    """``[gossip]``: GoSGD's exchange probability and epoch synchronisation."""

    probability: float = Field(0.25, ge=0, le=1)
    sync_epochs: bool = True
    drain_timeout_s: float = Field(60.0, gt=0)


class AggregateSection(_Section):
    """``[aggregate]``: EdgeGossip's aggregated data points (``edgetrain aggregate``)."""

    reduce: Literal["svd", "isvd", "hash", "pca", "histogram"] = "svd"
    divide: Literal["kmeans", "lsh", "gmm"] = "kmeans"
    ratio: int = Field(10, ge=1)
    # reduced dimensions d' (None: the method's default, 10; isvd log2(0.1 * d / ratio))
    dims: int | None = Field(None, ge=1)
    kmeans_iterations: int = Field(20, ge=1)
    # per-class centroids above which k-means goes two-level (None: always flat k-means)
    kmeans_flat_limit: int | None = Field(256, ge=1)
    chunk_size: int = Field(128, ge=1)  # isvd: samples per streamed chunk
    seed: int | None = None  # None: the recipe's [run] seed


class WorkerGroup(_Section):
    """``[[workers]]``: ``count`` workers on ``host``, slowed down by ``slowdown``."""

    host: str = "localhost"
    count: int = Field(1, ge=1)
    slowdown: float = Field(1.0, ge=1.0)
    threads: int = Field(1, ge=1)


class Recipe(_Section):
    """A whole, validated recipe."""

    run: RunSection = Field(default_factory=RunSection)
    data: DataSection = Field(default_factory=DataSection)
    model: ModelSection = Field(default_factory=ModelSection)
    train: TrainSection = Field(default_factory=TrainSection)
    gossip: GossipSection = Field(default_factory=GossipSection)
    aggregate: AggregateSection = Field(default_factory=AggregateSection)
    workers: list[WorkerGroup] = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self) -> Recipe:
        fr = self.data.fractions
        if self.data.partition == "fractions" and fr is not None and len(fr) != self.num_workers:
            raise ValueError(
                f"data.fractions has {len(fr)} entries but the recipe has "
                f"{self.num_workers} workers; give one fraction per worker"
            )
        return self

    @property
    def num_workers(self) -> int:
        return sum(g.count for g in self.workers)

    def expanded_workers(self) -> list[WorkerGroup]:
        """One entry per worker (``count`` = 1), in worker-id order."""
        out: list[WorkerGroup] = []
        for g in self.workers:
            out.extend(g.model_copy(update={"count": 1}) for _ in range(g.count))
        return out

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


# --------------------------------------------------------------------------- loading


def _loc_name(loc: tuple[Any, ...]) -> str:
    """Render a pydantic location like ('workers', 1, 'slowdown') as '[[workers]] #2 slowdown'."""
    if not loc:
        return "recipe"
    head, rest = str(loc[0]), list(loc[1:])
    if head == "workers":
        if rest and isinstance(rest[0], int):
            idx = rest.pop(0)
            name = f"[[workers]] #{idx + 1}"
        else:
            name = "[[workers]]"
    elif rest or head in Recipe.model_fields:
        name = f"[{head}]"
    else:
        return head
    keys = ".".join(str(p) for p in rest)
    return f"{name} {keys}".strip()


def _section_model(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    if not loc:
        return Recipe
    field = Recipe.model_fields.get(str(loc[0]))
    if field is None:
        return None
    ann = field.annotation
    if str(loc[0]) == "workers":
        return WorkerGroup
    return ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None


def _describe(err: dict[str, Any]) -> str:
    loc = tuple(err.get("loc", ()))
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        key = str(loc[-1])
        parent = loc[:-1]
        model = _section_model(tuple(p for p in parent if not isinstance(p, int)))
        where = _loc_name(parent) if parent else "the top level"
        hint = ""
        if model is not None:
            keys = list(model.model_fields)
            close = difflib.get_close_matches(key, keys, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f"; valid keys: {', '.join(keys)}"
        return f"unknown key '{key}' in {where}{hint}"
    msg = str(err.get("msg", "invalid value"))
    msg = msg.removeprefix("Value error, ")
    where = _loc_name(loc)
    if kind == "missing":
        return f"{where}: missing; add it to the recipe"
    given = err.get("input")
    shown = "" if isinstance(given, dict) or given is None else f" (got {given!r})"
    return f"{where}: {msg}{shown}"


def parse_recipe(data: dict[str, Any], source: str = "recipe") -> Recipe:
    """Validate a recipe mapping; raise :class:`RecipeError` naming ``source`` and the key."""
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        first = _describe(dict(errors[0]))
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        raise RecipeError(f"{source}: {first}{more}") from None


def load_recipe(path: str | os.PathLike[str], check_paths: bool = True) -> tuple[Recipe, str]:
    """Read and validate a TOML recipe file. Returns the recipe and its original text."""
    p = Path(path)
    if not p.exists():
        raise RecipeError(f"recipe file '{p}' not found", "check the path")
    if not p.is_file():
        raise RecipeError(f"recipe '{p}' is not a file", "pass a .toml recipe file")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RecipeError(f"recipe '{p}' cannot be read: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"{p}: not valid TOML: {exc}", "fix the syntax") from None
    recipe = parse_recipe(data, str(p))
    if check_paths:
        check_recipe_paths(recipe, str(p))
        check_recipe_model(recipe, str(p))
    return recipe, text


def check_recipe_model(recipe: Recipe, source: str) -> None:
    """Check the model name and options before any worker starts."""
    from edgetrain.errors import ModelError
    from edgetrain.models.zoo import check_model_config

    try:
        check_model_config(recipe.model.name, recipe.model.options)
    except ModelError as exc:
        raise RecipeError(f"{source}: [model] {exc}") from None


def check_recipe_paths(recipe: Recipe, source: str) -> None:
    """Check that files and directories the recipe names exist on this machine."""
    root = recipe.data.root
    if root is not None and recipe.data.dataset != "digits":
        rp = Path(os.path.expanduser(root))
        if not rp.is_dir():
            raise RecipeError(
                f"{source}: [data] root: directory '{root}' does not exist",
                "point root at the dataset's directory",
            )
