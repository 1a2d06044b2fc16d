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
        try:
            base.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise EdgetrainError(
                f"cannot create run directory parent '{base}': {exc.strerror}",
                "set [run] runs_root or --runs-root to a writable directory",
            ) from None
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for i in range(1000):
            cand = base / (f"{name}-{stamp}" if i == 0 else f"{name}-{stamp}-{i}")
            try:
                cand.mkdir()
            except FileExistsError:
                continue
            rd = cls(cand)
            rd.metrics.mkdir()
            rd.logs.mkdir()
            return rd
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
        try:
            data = json.loads(self.manifest.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise EdgetrainError(f"cannot read {self.manifest}: {exc}") from None
        if not isinstance(data, dict):
            raise EdgetrainError(f"{self.manifest} is not a JSON object")
        return data

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        atomic_write_json(self.manifest, manifest)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Read a JSON-lines file, skipping a torn last line."""
    out: list[dict[str, Any]] = []
    if not path.is_file():
        return out
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
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


def read_run_json(run_dir: Path, rel: str, what: str, fix: str) -> dict[str, Any]:
    """A JSON object another command left in the run directory (a plan file), or
    :class:`~edgetrain.errors.RecipeError` naming ``what`` (``[ps] plan``) and the ``fix``."""
    from edgetrain.errors import RecipeError

    path = run_dir / rel
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RecipeError(f"{what}: cannot read {path}: {exc}", fix) from None
    if not isinstance(doc, dict):
        raise RecipeError(f"{what}: {path} holds no JSON object", fix)
    return doc
