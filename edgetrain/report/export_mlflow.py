"""``edgetrain export RUN --to mlflow``: the run as one MLflow run in a file store (an ``mlruns``
directory, tracking URI ``file:DIR``), through MLflow's own client (``mlflow-skinny``).

The MLflow run is named after the run directory, in an experiment named after the recipe's
``[run] name``; it holds the recipe's keys as params (``train.lr``, ``model.options.hidden``,
``workers.1.count``; the core sections and the technique's own), every series of
:mod:`edgetrain.report.scalars` as metrics with their steps, the summary's figures as metrics
at the last epoch, tags (``edgetrain.run_id``, the status, the git revision), and the recipe,
report files and final model as artifacts. A store gathers runs: export each run into the same
``--out``; one already there is refused.

MLflow 3 keeps the file store in maintenance mode and refuses it unless
``MLFLOW_ALLOW_FILE_STORE=true``: the export sets it for itself, and a reader of the store
(``mlflow ui --backend-store-uri file:DIR``) sets it too.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgetrain.errors import EdgetrainError
from edgetrain.report.run_table import RunTable
from edgetrain.report.runs import unix_time
from edgetrain.rundir import git_revision

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

ALLOW_FILE_STORE = "MLFLOW_ALLOW_FILE_STORE"
PARAM_CHARS = 500  # MLflow's smallest limit on a param's value (older releases)
BATCH = 100  # MLflow takes at most 100 params, and 1000 metrics, in one call
STATUS = {
    "completed": "FINISHED",
    "failed": "FAILED",
    "diverged": "FAILED",
    "interrupted": "KILLED",
}
ARTIFACTS = (
    "recipe.toml",
    "report/summary.json",
    "report/summary.md",
    "report/accuracy.png",
    "model/final.safetensors",
)


def params(recipe: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """A recipe mapping as flat params: tables by dotted keys, arrays of tables numbered from
    1 (as ``--set`` numbers them), other values as JSON (``[128, 64]``, ``true``); None left
    out. A value longer than MLflow takes is cut, ending in ``...``."""
    out: dict[str, str] = {}
    for key, value in recipe.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(params(value, f"{name}."))
        elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            for n, item in enumerate(value, start=1):
                out.update(params(item, f"{name}.{n}."))
        elif value is not None:
            text = value if isinstance(value, str) else json.dumps(value)
            out[name] = text if len(text) <= PARAM_CHARS else text[: PARAM_CHARS - 3] + "..."
    return out


def read_sections(recipe: Mapping[str, Any]) -> dict[str, Any]:
    """The recipe's core sections and those its technique reads (a recipe dump holds every
    registered family's, most of them defaults nobody set)."""
    from edgetrain import techniques
    from edgetrain.recipe import Recipe

    train = recipe.get("train")
    family = train.get("family") if isinstance(train, Mapping) else None
    technique = train.get("technique") if isinstance(train, Mapping) else None
    try:
        read = techniques.technique_spec(str(family), str(technique)).sections
    except EdgetrainError:  # a family or technique not registered here: keep everything
        return dict(recipe)
    return {k: v for k, v in recipe.items() if k in Recipe.model_fields or k in read}


def is_store(path: Path) -> bool:
    """True if ``path`` looks like an MLflow file store (its trash, or an experiment's
    ``meta.yaml``)."""
    if (path / ".trash").is_dir():
        return True
    return any((p / "meta.yaml").is_file() for p in path.iterdir() if p.is_dir())


@contextmanager
def _file_store_allowed() -> Iterator[None]:
    """MLflow's environment for a file store, restored afterwards: the file store allowed
    (MLflow 3), and no usage reporting unless the user asked for it (edgetrain runs offline)."""
    saved = {k: os.environ.get(k) for k in (ALLOW_FILE_STORE, "MLFLOW_DISABLE_TELEMETRY")}
    os.environ[ALLOW_FILE_STORE] = "true"
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _ms(seconds: float | None) -> int:
    return int(round((seconds if seconds is not None else time.time()) * 1000))


def _already(client: MlflowClient, run_id: str) -> str | None:
    """The MLflow run in the store that holds edgetrain run ``run_id``, if any."""
    experiments = [e.experiment_id for e in client.search_experiments()]
    if not experiments:
        return None
    found = client.search_runs(experiments, f"tags.`edgetrain.run_id` = '{run_id}'")
    return str(found[0].info.run_id) if found else None


def write_mlflow(table: RunTable, out: Path) -> dict[str, Any]:
    """Add the run to the file store ``out`` (made if missing). On any failure what this call
    added is removed again: a store it made, or the MLflow run (and experiment) it made."""
    made_store = not out.exists()
    made: list[Path] = []
    with _file_store_allowed():
        from mlflow.exceptions import MlflowException

        try:
            out.mkdir(parents=True, exist_ok=True)
            return _write(table, out, made)
        except BaseException as exc:
            for path in [out] if made_store else reversed(made):
                shutil.rmtree(path, ignore_errors=True)
            if isinstance(exc, MlflowException):
                line = (str(exc.message).strip().splitlines() or [type(exc).__name__])[0]
                raise EdgetrainError(
                    f"MLflow refused the export to '{out}': {line}",
                    "export into a new, empty --out directory",
                ) from None
            if isinstance(exc, OSError):
                raise EdgetrainError(
                    f"cannot write '{out}': {exc.strerror or exc}",
                    "free some disk space or pass another --out",
                ) from None
            raise


def _write(table: RunTable, out: Path, made: list[Path]) -> dict[str, Any]:
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    uri = out.resolve().as_uri()
    client = MlflowClient(tracking_uri=uri)
    run_id = table.run_id or table.name
    held = _already(client, run_id)
    if held is not None:
        raise EdgetrainError(
            f"'{out}' already holds run {table.name} (MLflow run {held}); exporting it again "
            "would make a second copy",
            "export into another --out, or delete that MLflow run first",
        )
    manifest = table.manifest
    experiment_name = str(manifest.get("name") or table.name)
    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None:
        experiment_id = client.create_experiment(experiment_name)
        made.append(out / experiment_id)
    else:
        experiment_id = experiment.experiment_id
    start = min(table.starts.values(), default=None)
    status = table.summary_row()["status"]
    tags = {
        "edgetrain.run_id": run_id,
        "edgetrain.run_dir": str(table.path.resolve()),
        "edgetrain.status": str(status),
        "edgetrain.family": str(table.summary.get("family")),
        "edgetrain.technique": str(table.summary.get("technique")),
    }
    revision = manifest.get("git_revision") or git_revision()
    if isinstance(revision, str):
        tags["mlflow.source.git.commit"] = revision
    run = client.create_run(experiment_id, start_time=_ms(start), tags=tags, run_name=table.name)
    mlflow_id = run.info.run_id
    made.append(out / experiment_id / mlflow_id)
    recipe = manifest.get("recipe")
    flat = params(read_sections(recipe) if isinstance(recipe, Mapping) else {})
    _in_batches(client, mlflow_id, [Param(k, v) for k, v in flat.items()], "params")
    end = _ms(None)
    metrics = [Metric(s.tag, s.value, _ms(s.wall), s.step) for s in table.scalars()]
    last = table.last_epoch
    metrics += [Metric(k, v, end, last) for k, v in table.figures().items()]
    _in_batches(client, mlflow_id, metrics, "metrics")
    artifacts = []
    for rel in ARTIFACTS:
        path = table.path / rel
        if path.is_file():
            folder = str(Path(rel).parent) if Path(rel).parent != Path(".") else None
            client.log_artifact(mlflow_id, str(path), folder)
            artifacts.append(rel)
    ended = STATUS.get(str(status))
    if ended is not None:
        stop = _ms(unix_time(manifest.get("end_time")))
        client.set_terminated(mlflow_id, ended, stop)
    return {
        "tracking_uri": uri,
        "experiment": experiment_name,
        "experiment_id": experiment_id,
        "mlflow_run_id": mlflow_id,
        "params": len(flat),
        "metrics": len(metrics),
        "artifacts": artifacts,
    }


def _in_batches(client: MlflowClient, run_id: str, items: Sequence[Any], kind: str) -> None:
    for i in range(0, len(items), BATCH):
        chunk = list(items[i : i + BATCH])
        if kind == "params":
            client.log_batch(run_id, params=chunk)
        else:
            client.log_batch(run_id, metrics=chunk)
