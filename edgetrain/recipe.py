"""Recipe schema: TOML files validated into frozen config objects, with errors naming file and key.

A recipe has the core sections ``[run]``, ``[data]``, ``[model]``, ``[train]``, ``[aggregate]``,
``[report]`` and a list ``[[workers]]``, plus one section per family or technique (``[gossip]``,
``[ps]``, ...), which the technique registry (:mod:`edgetrain.techniques`) contributes. Every
section is optional except ``[[workers]]``; unknown keys and sections are errors. ``[train]
family`` and ``technique`` pick what trains; the older spelling (``technique`` = the family,
``algorithm`` = the technique) still loads, with a one-line deprecation notice.
"""

from __future__ import annotations

import copy
import functools
import math
import os
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field, create_model, model_validator

from edgetrain import techniques, tomlconfig
from edgetrain.errors import DeprecatedSpelling, RecipeError

S = TypeVar("S", bound=BaseModel)


#: The largest ``[run] seed`` (and ``[aggregate] seed``): seeds are 32-bit, as numpy's and
#: torch's generators take them everywhere a worker seeds one.
MAX_SEED = 2**32 - 1
#: The most workers a recipe may list (all ``[[workers]]`` counts together), and the most
#: threads one worker may ask for.
MAX_WORKERS = 10_000
MAX_THREADS = 1024
#: A synthetic dataset's size: at most this many values (samples and class prototypes, each
#: of ``shape``), 4 GiB of float32, and no side of ``shape`` over MAX_SIDE.
MAX_SYNTHETIC_VALUES = 2**30
MAX_SIDE = 4096
#: The most times the launcher restarts one worker (``[run] restart``).
MAX_RESTARTS = 100
# [train] lr's default (0.05) is an SGD step size; a recipe that leaves lr out and whose run
# steps with Adam gets Adam's own default instead (at 0.05 Adam diverges on our models)
ADAM_DEFAULT_LR = 1e-3


class _Section(BaseModel):
    model_config = tomlconfig.SECTION_CONFIG


class RunSection(_Section):
    """``[run]``: naming, seeding and where run directories go."""

    name: str = Field(
        "run",
        min_length=1,
        pattern=r"^[A-Za-z0-9._-]+$",
        description="use letters, digits and . _ -",
    )
    seed: int = Field(0, ge=0, le=MAX_SEED)
    # The parent directory of fresh run directories (``launch --runs-root`` overrides it).
    runs_root: str = "runs"
    # Failure handling (EdgeGossip's f_threshold): the run goes on without failed trainers while
    # the failed fraction stays at or below this; above it, it stops with an error.
    max_failed_fraction: float = Field(0.25, ge=0, le=1)
    heartbeat_s: float = Field(1.0, gt=0, le=60)
    # Every N epochs the coordinator writes RUN/checkpoints/epoch-N/ (0: never).
    checkpoint_every: int = Field(5, ge=0)
    # A worker process that dies is started again up to this many times (back-off 1, 2, 4 s
    # ...) and rejoins the running run with live state (0: lost workers stay lost).
    restart: int = Field(0, ge=0, le=MAX_RESTARTS)
    # The recipe's last N trainers start as open slots: nobody runs them until a new worker
    # joins one with ``edgetrain join RUN --worker ID`` (GoSGD and the scheduled
    # parameter-server techniques; :mod:`edgetrain.launch.slots`).
    join_slots: int = Field(0, ge=0, le=MAX_WORKERS)
    # Transport security: "curve" encrypts and authenticates with the keys in ``keys``
    # (a directory written by ``edgetrain keys generate``; relative to the current directory).
    security: Literal["none", "curve"] = "none"
    keys: str = "keys"

    @model_validator(mode="before")
    @classmethod
    def _old_spelling(cls, data: Any) -> Any:
        if isinstance(data, dict) and "run_dir" in data:
            data = dict(data)
            value = data.pop("run_dir")
            if "runs_root" not in data:
                data["runs_root"] = value
            _notice("[run] run_dir is now runs_root (the parent of run directories)")
        return data


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
    classes: int = Field(10, ge=2, le=MAX_SYNTHETIC_VALUES)
    count: int = Field(2000, ge=10, le=MAX_SYNTHETIC_VALUES)

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
        if any(s > MAX_SIDE for s in self.shape):
            raise ValueError(f"shape entries must be at most {MAX_SIDE}")
        if self.dataset == "synthetic":
            values = (self.count + self.classes) * math.prod(self.shape)
            if values > MAX_SYNTHETIC_VALUES:
                raise ValueError(
                    f"synthetic data of {self.count} samples and {self.classes} classes of "
                    f"shape {self.shape} is {values * 4 / 2**30:,.1f} GiB; lower count or "
                    f"shape (at most {MAX_SYNTHETIC_VALUES:,} values, 4 GiB of float32)"
                )
        return self


class ModelSection(_Section):
    """``[model]``: a model from the zoo by name, with its options."""

    name: str = "mlp"
    options: dict[str, Any] = Field(default_factory=dict)


class TrainSection(_Section):
    """``[train]``: family and technique, and the optimiser's settings."""

    family: str = "gossip"
    technique: str = "gosgd"
    epochs: int = Field(10, ge=1)
    batch_size: int = Field(32, ge=1)
    lr: float = Field(0.05, gt=0)
    momentum: float = Field(0.9, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)
    optimizer: Literal["sgd", "adam"] = "sgd"
    eval_every: int = Field(1, ge=1)
    # Keep a copy of the model at each evaluation epoch and score the copies after training
    # (edgetrain.runtime.snapshots): a host with a CPU quota then spends none of it evaluating
    # while the training clock runs. The run's accuracy curve is complete when the run ends.
    eval_deferred: bool = False
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    # Deterministic kernels in every process of the run (torch.use_deterministic_algorithms,
    # cuDNN deterministic without benchmarking, CUBLAS_WORKSPACE_CONFIG): on CUDA, the same
    # recipe gives the same weights run to run (edgetrain.runtime.determinism).
    deterministic: bool = False
    # cuBLAS's workspace per thread that runs matrix products on CUDA (a process has two, its
    # own and autograd's backward thread): "default" is torch's (32 MiB each on Hopper, 4 MiB
    # on older GPUs); "small" is 128 KiB each (CUBLAS_WORKSPACE_CONFIG=:16:8, which keeps
    # deterministic mode deterministic), for devices short of accelerator memory, at some cost
    # in speed. Nothing changes on the CPU.
    blas_workspace: Literal["default", "small"] = "default"

    @model_validator(mode="before")
    @classmethod
    def _old_spelling(cls, data: Any) -> Any:
        """``technique = "gossip"`` + ``algorithm = "gosgd"`` -> ``family`` + ``technique``."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        technique = data.get("technique")  # any TOML value: a wrong type is the model's to name
        known = isinstance(technique, str) and technique in techniques.families()
        old_family = known and "family" not in data
        if "algorithm" in data or old_family:
            family = data.pop("technique", None) if old_family else data.get("family")
            algorithm = data.pop("algorithm", None)
            family = family or "gossip"
            data["family"] = family
            if algorithm is not None:
                data["technique"] = algorithm
            elif isinstance(family, str) and family in techniques.families():
                data["technique"] = techniques.families()[family].default_technique
            _notice(
                f'[train] technique = "{family}" with algorithm = "{data.get("technique")}" '
                f'is now family = "{family}" with technique = "{data.get("technique")}"'
            )
        elif "technique" in data and "family" not in data:
            found = techniques.family_of(str(data["technique"]))
            if found is not None:
                data["family"] = found
        return data

    @model_validator(mode="after")
    def _check(self) -> TrainSection:
        fam = techniques.families().get(self.family)
        if fam is None:
            raise ValueError(
                f"unknown family '{self.family}'; known families and techniques: "
                f"{techniques.known()}"
            )
        if self.technique not in fam.techniques:
            raise ValueError(
                f"technique '{self.technique}' is not a {self.family} technique; known "
                f"families and techniques: {techniques.known()}"
            )
        if self.eval_deferred and not fam.deferred_eval:
            able = ", ".join(n for n, f in techniques.families().items() if f.deferred_eval)
            raise ValueError(
                f"eval_deferred: the {self.family} family evaluates as it trains; only the "
                f"{able} family defers evaluation (remove eval_deferred)"
            )
        return self


class AggregateSection(_Section):
    """``[aggregate]``: EdgeGossip's aggregated data points (``edgetrain aggregate``)."""

    reduce: Literal["svd", "svd-sample", "isvd", "hash", "pca", "histogram"] = "svd"
    divide: Literal["kmeans", "lsh", "gmm"] = "kmeans"
    ratio: int = Field(10, ge=1)
    # reduced dimensions d' (None: the method's default, 10; isvd log2(0.1 * d / ratio))
    dims: int | None = Field(None, ge=1)
    kmeans_iterations: int = Field(20, ge=1)
    # per-class centroids above which k-means goes two-level (None: always flat k-means)
    kmeans_flat_limit: int | None = Field(256, ge=1)
    chunk_size: int = Field(128, ge=1)  # isvd: samples per streamed chunk
    seed: int | None = Field(None, ge=0, le=MAX_SEED)  # None: the recipe's [run] seed


class ReportSection(_Section):
    """``[report]``: what the launcher writes for the tools users watch training with."""

    # TensorBoard event files under RUN/tensorboard/, written as the run goes (needs the
    # tensorboard package: pip install 'edgetrain[tensorboard]').
    tensorboard: bool = False


class WorkerGroup(_Section):
    """``[[workers]]``: ``count`` workers of one role on ``host``, slowed down by ``slowdown``."""

    host: str = "localhost"
    count: int = Field(1, ge=1, le=MAX_WORKERS)
    # The role these workers run (trainer, server, stage, ...); default: the family's default.
    role: str | None = Field(None, min_length=1)
    # Host labels these workers need: with a hosts file they go only to hosts carrying them.
    labels: list[str] = Field(default_factory=list)
    slowdown: float = Field(1.0, ge=1.0)
    threads: int = Field(1, ge=1, le=MAX_THREADS)
    # Local workers only: run each in a cgroup v1 CPU group with this many cores of quota
    # (root, cgroup v1); unlike slowdown, a resource monitor sees it as a real small device.
    cpu: float | None = Field(None, gt=0, le=1024)


class Recipe(_Section):
    """A whole, validated recipe. Family sections are fields of the subclass that
    :func:`recipe_model` builds from the registry; reach them with :meth:`section`."""

    run: RunSection = Field(default_factory=RunSection)
    data: DataSection = Field(default_factory=DataSection)
    model: ModelSection = Field(default_factory=ModelSection)
    train: TrainSection = Field(default_factory=TrainSection)
    aggregate: AggregateSection = Field(default_factory=AggregateSection)
    report: ReportSection = Field(default_factory=ReportSection)
    workers: list[WorkerGroup] = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self) -> Recipe:
        if self.num_workers > MAX_WORKERS:
            raise ValueError(
                f"[[workers]] counts add up to {self.num_workers} workers; a run has at most "
                f"{MAX_WORKERS}"
            )
        fam = techniques.families()[self.train.family]
        tech = fam.techniques[self.train.technique]
        for n, group in enumerate(self.workers, start=1):
            if group.role is not None and group.role not in tech.roles:
                raise ValueError(
                    f"[[workers]] #{n} role '{group.role}' is not a role of "
                    f"{self.train.family}/{self.train.technique}; "
                    f"use one of: {', '.join(tech.roles)}"
                )
        fr = self.data.fractions
        shards = self.num_data_workers
        if self.data.partition == "fractions" and fr is not None and len(fr) != shards:
            raise ValueError(
                f"data.fractions has {len(fr)} entries but the recipe has "
                f"{shards} workers that train on data; give one fraction per worker"
            )
        if "lr" not in self.train.model_fields_set and self.optimizer == "adam":
            # [train] lr's default is an SGD step: an Adam run without a recipe's lr steps at
            # Adam's own. The sections are frozen, so the validated recipe takes a copy whose
            # lr is resolved without counting as set (a candidate advise derives for an SGD
            # technique from the user's keys still gets the SGD default).
            train = self.train.model_copy()
            object.__setattr__(train, "lr", ADAM_DEFAULT_LR)
            object.__setattr__(self, "train", train)
        return self

    @property
    def optimizer(self) -> str:
        """The optimiser the run steps with: a technique section's ``optimizer`` where the
        technique reads one (Mercury's ``[mercury] optimizer``), else ``[train] optimizer``."""
        tech = techniques.technique_spec(self.train.family, self.train.technique)
        for name in tech.sections:
            value = getattr(getattr(self, name, None), "optimizer", None)
            if isinstance(value, str):
                return value
        return self.train.optimizer

    @property
    def num_workers(self) -> int:
        """Every process of the run, whatever its role."""
        return sum(g.count for g in self.workers)

    @property
    def family_spec(self) -> techniques.FamilySpec:
        return techniques.family_spec(self.train.family)

    def role_names(self) -> list[str]:
        """Each worker's role, in worker-id order."""
        default = self.family_spec.default_role
        return [g.role or default for g in self.expanded_workers()]

    def ids_of(self, role: str) -> list[int]:
        """The ids of the workers of ``role``, in order."""
        return [i for i, r in enumerate(self.role_names()) if r == role]

    @property
    def num_data_workers(self) -> int:
        """Workers whose role trains on a shard of the data (the partition's shard count)."""
        data_roles = techniques.families()[self.train.family].data_roles
        default = techniques.families()[self.train.family].default_role
        return sum(g.count for g in self.workers if (g.role or default) in data_roles)

    def expanded_workers(self) -> list[WorkerGroup]:
        """One entry per worker (``count`` = 1), in worker-id order."""
        out: list[WorkerGroup] = []
        for g in self.workers:
            out.extend(g.model_copy(update={"count": 1}) for _ in range(g.count))
        return out

    def section(self, name: str, model: type[S]) -> S:
        """A family section by name (its defaults when the recipe leaves it out)."""
        value = getattr(self, name, None)
        if not isinstance(value, model):
            raise RecipeError(f"the recipe has no [{name}] section model {model.__name__}")
        return value

    def with_run(self, source: str = "recipe", **changes: Any) -> Recipe:
        """A copy with ``[run]`` fields changed (``launch --name``), validated as the recipe's
        own: a bad value raises :class:`RecipeError` naming ``source`` and the key."""
        run = tomlconfig.validate(
            type(self.run), {**self.run.model_dump(), **changes}, source, RecipeError, ("run",)
        )
        return self.model_copy(update={"run": run})

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_toml(self) -> str:
        """The recipe as TOML that loads back to an equal recipe (the one TOML writer)."""
        return tomlconfig.recipe_toml(self)


@functools.lru_cache(maxsize=8)
def _recipe_model(generation: int) -> type[Recipe]:
    fields: dict[str, Any] = {
        name: (model, Field(default_factory=model))
        for name, model in techniques.section_models().items()
        if name not in Recipe.model_fields
    }
    return create_model("Recipe", __base__=Recipe, **fields)


def recipe_model() -> type[Recipe]:
    """The recipe model with every registered family's sections as fields."""
    return _recipe_model(techniques.generation())


def _notice(message: str) -> None:
    warnings.warn(f"{message}; please update the recipe", DeprecatedSpelling, stacklevel=2)


# --------------------------------------------------------------------------- loading


def parse_recipe(data: dict[str, Any], source: str = "recipe") -> Recipe:
    """Validate a recipe mapping; raise :class:`RecipeError` naming ``source`` and the key."""
    return tomlconfig.validate(recipe_model(), data, source, RecipeError)


def load_recipe(
    path: str | os.PathLike[str], check_paths: bool = True, overrides: Sequence[str] = ()
) -> tuple[Recipe, str]:
    """Read and validate a TOML recipe file. Returns the recipe and its text: the file's own,
    or with ``overrides`` (``launch --set KEY=VALUE``) the overridden document's."""
    data, text, source = read_recipe(path, overrides)
    recipe = parse_recipe(data, source)
    if check_paths:
        check_recipe_paths(recipe, str(path))
    return recipe, text


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


# --------------------------------------------------------------------------- --set KEY=VALUE

_KEY_PART = re.compile(r"[A-Za-z0-9_-]+")


def read_recipe(
    path: str | os.PathLike[str], overrides: Sequence[str] = ()
) -> tuple[dict[str, Any], str, str]:
    """A recipe file's mapping with ``overrides`` applied, its text, and the source its
    messages name (the path, and the ``--set`` options when there are any). Not validated."""
    data, text = tomlconfig.read_toml(path, "recipe file", RecipeError, "check the path")
    if not overrides:
        return data, text, str(path)
    data = apply_overrides(data, overrides)
    sets = " ".join(f"--set {item}" for item in overrides)
    tomlconfig.check_values(data, f"{path} with {sets}", RecipeError)
    header = f"# {path} with {sets} (edgetrain launch --set): the recipe that ran\n"
    return data, header + tomlconfig.dumps(data), f"{path} with {sets}"


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A copy of a recipe mapping with each ``KEY=VALUE`` applied in order (see
    :func:`apply_override`)."""
    out = copy.deepcopy(data)
    for item in overrides:
        apply_override(out, item)
    return out


def apply_override(data: dict[str, Any], item: str) -> None:
    """Set one ``KEY=VALUE`` in a recipe mapping, in place.

    KEY is a dotted path into the TOML document (``train.epochs``; missing tables are made;
    ``workers.2.count`` is the second ``[[workers]]``, numbered from 1 as error lines number
    them). VALUE is read as a TOML value (``2``, ``0.5``, ``true``, ``"text"``, ``[1, 2]``);
    anything that is not one is taken as a string (``--set run.name=exp2``). Whether the key
    and value are right is the recipe's validation's business, as for the file."""
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise RecipeError(f"--set '{item}': expected KEY=VALUE", "e.g. --set train.epochs=2")
    parts = key.split(".")
    if not all(_KEY_PART.fullmatch(p) for p in parts):
        raise RecipeError(
            f"--set '{item}': '{key}' is not a dotted key",
            "write the TOML path with dots, e.g. --set train.epochs=2",
        )
    value = _override_value(raw.strip())
    current: Any = data
    for n, part in enumerate(parts):
        where = ".".join(parts[:n]) or "the top level"
        last = n == len(parts) - 1
        if isinstance(current, list):
            if not part.isdigit():
                raise RecipeError(
                    f"--set '{item}': '{where}' is an array of {len(current)} entries",
                    f"name one by its number from 1: --set {where}.1.{'.'.join(parts[n:])}=...",
                )
            if not 1 <= int(part) <= len(current):
                raise RecipeError(
                    f"--set '{item}': '{where}' has no entry {part}",
                    f"number its {len(current)} entries from 1 to {len(current)}",
                )
            if last:
                current[int(part) - 1] = value
                return
            current = current[int(part) - 1]
            continue
        if not isinstance(current, dict):
            raise RecipeError(
                f"--set '{item}': '{where}' is a value, not a table",
                f"set {where} itself, e.g. --set {where}=VALUE",
            )
        if last:
            current[part] = value
            return
        if part not in current:
            current[part] = {}
        current = current[part]


def _override_value(raw: str) -> Any:
    try:
        doc = tomlconfig.loads(f"value = {raw}")
    except (tomlconfig.TOMLDecodeError, RecursionError):  # too deep to parse: as a string
        return raw
    return doc["value"] if list(doc) == ["value"] else raw
