"""Run directory: its layout, the manifest, and atomic artifact writes.

Layout of ``runs/<name>-<timestamp>/``::

    manifest.json          resolved recipe, versions, hosts, seed, times, status, git revision
    recipe.toml            the recipe as the user wrote it
    metrics/<worker>.jsonl one JSON object per event
    logs/<worker>.log      each process's stdout and stderr
    report/summary.json    written by ``edgetrain report`` (and at the end of ``launch``)
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from edgetrain.errors import EdgetrainError

MANIFEST = "manifest.json"
COORDINATOR_STEM = "coordinator"


def worker_stem(worker_id: int) -> str:
    """File stem of a worker's metrics and log files: ``worker-<id>``."""
    return f"worker-{worker_id}"


def _umask() -> int:
    """The process's umask, read without changing it where Linux shows it (changing it, as
    ``os.umask`` must, would race with other threads creating files)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    old = os.umask(0o022)
    os.umask(old)
    return old


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename. The file gets the mode
    a plain ``open`` would give it (0666 less the umask), not the temporary file's 0600: a
    report written under ``sudo`` stays readable by the user who asked for it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o666 & ~_umask())
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def git_revision(cwd: Path | None = None) -> str | None:
    """The git revision of the working directory, or None outside a repository."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    rev = out.stdout.strip()
    return rev if out.returncode == 0 and rev else None


def check_writable(path: str | os.PathLike[str], what: str, fix: str) -> None:
    """Check, before any work, that ``path`` is a directory files can be written in, or one
    that can be made: its nearest existing ancestor is a directory this process can create
    in. Probes by making and removing an empty directory there (permission bits alone do not
    tell: root ignores them, and ``/proc`` refuses everyone), so nothing is left behind.
    Raises :class:`EdgetrainError` naming ``what`` (``--run-dir``) and ``fix``."""
    p = Path(os.path.expanduser(str(path)))
    probe = p
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        raise EdgetrainError(f"{what} '{p}': '{probe}' is not a directory", fix)
    before = probe.stat()
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".edgetrain-probe-", dir=probe))
    except OSError as exc:
        raise EdgetrainError(
            f"{what} '{p}': '{probe}' is not writable ({exc.strerror or exc})", fix
        ) from None
    with contextlib.suppress(OSError):  # the probe leaves not even a new modification time
        os.utime(probe, ns=(before.st_atime_ns, before.st_mtime_ns))


def _missing_parents(path: Path) -> list[Path]:
    """``path`` and those of its ancestors that do not exist yet, deepest first."""
    out = []
    while not path.exists() and path.parent != path:
        out.append(path)
        path = path.parent
    return out


def _remove_empty(dirs: list[Path]) -> None:
    for d in dirs:  # deepest first; a directory that is not empty (or gone) stays
        with contextlib.suppress(OSError):
            d.rmdir()


@dataclass(frozen=True)
class RunDir:
    """Paths inside one run directory."""

    path: Path

    @property
    def manifest(self) -> Path:
        return self.path / MANIFEST

    @property
    def recipe(self) -> Path:
        return self.path / "recipe.toml"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics"

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    @property
    def report(self) -> Path:
        return self.path / "report"

    def metrics_file(self, name: str) -> Path:
        return self.metrics / f"{name}.jsonl"

    def log_file(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    @classmethod
    def create(cls, parent: str | os.PathLike[str], name: str) -> RunDir:
        """Make ``parent/<name>-<timestamp>`` (with a suffix if that exists)."""
        base = Path(os.path.expanduser(str(parent)))
        fix = "set [run] runs_root or --runs-root to a writable directory"
        made = _missing_parents(base)
        try:
            base.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            _remove_empty(made)
            raise EdgetrainError(
                f"cannot create run directory parent '{base}': {exc.strerror}", fix
            ) from None
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for i in range(1000):
            cand = base / (f"{name}-{stamp}" if i == 0 else f"{name}-{stamp}-{i}")
            try:
                cand.mkdir()
            except FileExistsError:
                continue
            except OSError as exc:  # not writable (PermissionError), /proc, a full disk
                _remove_empty(made)
                raise EdgetrainError(
                    f"cannot create a run directory in '{base}': {exc.strerror or exc}", fix
                ) from None
            rd = cls(cand)
            try:
                rd.metrics.mkdir()
                rd.logs.mkdir()
            except OSError as exc:
                _remove_empty([rd.metrics, rd.logs, cand, *made])
                raise EdgetrainError(
                    f"cannot create run directory '{cand}': {exc.strerror or exc}", fix
                ) from None
            return rd
        _remove_empty(made)
        raise EdgetrainError(f"cannot find a free run directory name under '{base}'")

    @classmethod
    def adopt(cls, path: str | os.PathLike[str]) -> RunDir:
        """A run directory to launch into: one that ``profile``, ``plan`` or ``aggregate``
        filled (or a new one), as long as no run was launched in it yet."""
        p = Path(os.path.expanduser(str(path)))
        if p.exists() and not p.is_dir():
            raise EdgetrainError(f"--run-dir '{p}' is not a directory", "pass a directory")
        if (p / MANIFEST).is_file():
            raise EdgetrainError(
                f"'{p}' already holds a launched run ({MANIFEST})",
                f"continue it with --resume {p}, or launch into another --run-dir",
            )
        try:
            for sub in ("metrics", "logs"):
                (p / sub).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise EdgetrainError(
                f"cannot create run directory '{p}': {exc.strerror}", "pass a writable --run-dir"
            ) from None
        return cls(p)

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> RunDir:
        """Open an existing run directory, checking it has a manifest."""
        p = Path(path)
        if not p.is_dir():
            raise EdgetrainError(f"run directory '{p}' not found", "pass the path launch printed")
        if not (p / MANIFEST).is_file():
            raise EdgetrainError(
                f"'{p}' is not an edgetrain run directory (no {MANIFEST})",
                "pass the path launch printed",
            )
        return cls(p)

    def read_manifest(self) -> dict[str, Any]:
        """The manifest, checked to hold what the commands that read it rely on (the types of
        the keys in :class:`_ManifestView`); a damaged one raises :class:`EdgetrainError`."""
        fix = _DAMAGED_FIX
        try:
            data = json.loads(self.manifest.read_bytes().decode("utf-8"))
        except OSError as exc:
            raise EdgetrainError(f"cannot read {self.manifest}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise EdgetrainError(f"{self.manifest} is damaged: not UTF-8 text", fix) from None
        except ValueError as exc:  # json.JSONDecodeError
            raise EdgetrainError(f"{self.manifest} is damaged: not JSON ({exc})", fix) from None
        except RecursionError:
            raise EdgetrainError(f"{self.manifest} is damaged: nested too deeply", fix) from None
        if not isinstance(data, dict):
            raise EdgetrainError(f"{self.manifest} is damaged: not a JSON object", fix)
        try:
            _ManifestView.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(k) for k in first["loc"]) or "the top level"
            given = first.get("input")
            shown = "" if isinstance(given, (dict, list)) else f" (got {given!r:.60})"
            raise EdgetrainError(
                f"{self.manifest} is damaged: {where}: {first['msg']}{shown}", fix
            ) from None
        return data

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        atomic_write_json(self.manifest, manifest)


#: What the readers of metrics rows take as given: these events carry an integer ``epoch``,
#: these a time ``t``; and where a row has them, ``t`` is a number, ``worker`` an integer
#: and ``run_id`` a string (the launcher writes every row so: ``launch.driver.event_row``).
_EPOCH_EVENTS = ("epoch", "barrier", "resumed")
_TIMED_EVENTS = ("epoch", "barrier", "started")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _row_ok(row: dict[str, Any]) -> bool:
    """True for a metrics row as the launcher and workers write them; False for one a
    damaged byte changed (a key misspelt, a value of another type)."""
    if "worker" in row and not _is_int(row["worker"]):
        return False
    if "run_id" in row and not isinstance(row["run_id"], str):
        return False
    if "t" in row and not _is_number(row["t"]):
        return False
    event = row.get("event")
    if event is None:
        return "event" not in row
    if not isinstance(event, str):
        return False
    if event in _TIMED_EVENTS and "t" not in row:
        return False
    return event not in _EPOCH_EVENTS or _is_int(row.get("epoch"))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Read a JSON-lines file of metrics rows, skipping a torn last line, and any line that
    is not a row (damaged bytes, text that is not UTF-8, nesting too deep to parse, a key
    of a row its readers rely on missing or of the wrong type)."""
    out: list[dict[str, Any]] = []
    if not path.is_file():
        return out
    with path.open("rb") as fh:
        for raw in fh:
            try:
                obj = json.loads(raw.decode("utf-8"))
            except (ValueError, RecursionError):  # UnicodeDecodeError, JSONDecodeError
                continue
            if isinstance(obj, dict) and _row_ok(obj):
                out.append(obj)
    return out


class JsonlWriter:
    """Append JSON objects to a file, one per line, flushed after each write."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = path.open("a", encoding="utf-8")

    def write(self, obj: dict[str, Any]) -> None:
        self._fh.write(json.dumps(obj, separators=(",", ":")) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


_DAMAGED_FIX = "restore it from a copy, or launch the recipe again into a new run directory"


class _Loose(BaseModel):
    """A JSON object of which only the named keys are checked (types, strictly)."""

    model_config = ConfigDict(extra="allow", strict=True)


class _WorkerView(_Loose):
    id: int = Field(ge=0)
    role: str | None = None
    host: str | None = None
    site: str | None = None


class _RecipeView(_Loose):
    run: dict[str, Any] = Field(default_factory=dict)
    data: dict[str, Any] = Field(default_factory=dict)
    model: dict[str, Any] = Field(default_factory=dict)
    train: dict[str, Any] = Field(default_factory=dict)


class _AttemptView(_Loose):
    run_id: str | None = None
    start_time: str | None = None
    end_time: str | None = None


class _ManifestView(_Loose):
    """The keys of ``manifest.json`` that ``report``, ``compare``, ``status``, ``runs``,
    ``export`` and ``launch --resume`` read, with the types they read them as."""

    name: str | None = None
    run_id: str | None = None
    status: str | None = None
    family: str | None = None
    technique: str | None = None
    seed: int | None = None
    start_time: str | None = None
    end_time: str | None = None
    wall_s: float | None = None
    launcher_host: str | None = None
    launcher_pid: int | None = None
    extended_epochs: int | None = None
    recipe: _RecipeView = Field(default_factory=_RecipeView)
    workers: list[_WorkerView] = Field(default_factory=list)
    attempts: list[_AttemptView] = Field(default_factory=list)


def read_run_json(run_dir: Path, rel: str, what: str, fix: str) -> dict[str, Any]:
    """A JSON object another command left in the run directory (a plan file), or
    :class:`~edgetrain.errors.RecipeError` naming ``what`` (``[ps] plan``) and the ``fix``."""
    from edgetrain.errors import RecipeError

    path = run_dir / rel
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise RecipeError(f"{what}: {path} is nested too deeply", fix) from None
    except (OSError, ValueError) as exc:
        raise RecipeError(f"{what}: cannot read {path}: {exc}", fix) from None
    if not isinstance(doc, dict):
        raise RecipeError(f"{what}: {path} holds no JSON object", fix)
    return doc
