"""Launching a run from a request: everything ``edgetrain launch`` does, as one library call.

:func:`prepare` checks every input before anything is written or started (recipe, family,
data and model, keys, hosts over ssh, placement) and turns a bad one into one
:class:`~edgetrain.errors.EdgetrainError` (exit code 2); only then does it create or adopt the
run directory. :func:`check` is its checking part alone and :func:`check_all` the same checks
collecting every problem (``edgetrain check``); neither starts nor writes anything.
:func:`execute` runs it, logging to the run's own ``logs/launcher.log`` and turning SIGTERM
into an interrupt, and returns the outcome with the summary.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

from edgetrain.comm.control import Role, assign_roles
from edgetrain.comm.coordinator import Resume
from edgetrain.errors import EdgetrainError, RecipeError
from edgetrain.launch.driver import LaunchOptions, Observer, RunOutcome, RunSetup, preflight, run
from edgetrain.launch.placement import Need, place
from edgetrain.launch.restart import check_restart
from edgetrain.launch.slots import check_join_slots
from edgetrain.launch.tensorboard_sink import check_tensorboard, with_tensorboard
from edgetrain.recipe import Recipe, load_recipe, read_recipe, recipe_model
from edgetrain.rundir import MANIFEST, RunDir
from edgetrain.runtime.side import launcher_side

if TYPE_CHECKING:
    from edgetrain.comm.security import CurveKeys
    from edgetrain.data import Dataset
    from edgetrain.launch.base import Launcher
    from edgetrain.launch.hosts import HostsFile
    from edgetrain.runtime.base import Family

LineSink = Callable[[str], None]
T = TypeVar("T")


@dataclass(frozen=True)
class LaunchRequest:
    """What the user asked for (``edgetrain launch``'s options)."""

    recipe: Path | None = None
    run_dir: Path | None = None  # launch into this run directory (made if missing)
    runs_root: Path | None = None  # else a fresh one under this (default: [run] runs_root)
    name: str | None = None
    resume: Path | None = None  # continue this run from its last checkpoint
    hosts: Path | None = None
    host_list: str | None = None
    remote_python: str | None = None
    stream_logs: bool | None = None  # worker lines over ssh (None: on)
    log_sink: LineSink | None = None  # where streamed worker lines go
    epochs: int | None = None  # --resume: train the run up to this many epochs (extend it)
    overrides: tuple[str, ...] = ()  # --set KEY=VALUE, applied to the recipe before validation


def load_checked_recipe(path: Path, overrides: tuple[str, ...] = ()) -> tuple[Recipe, str]:
    """A recipe (with ``--set`` overrides) whose paths exist and whose model builds its name
    and options."""
    from edgetrain.errors import ModelError
    from edgetrain.models.zoo import check_model_config

    recipe, text = load_recipe(path, overrides=overrides)
    try:
        check_model_config(recipe.model.name, recipe.model.options)
    except ModelError as exc:
        raise RecipeError(f"{path}: [model] {exc}") from None
    return recipe, text


def _hosts(req: LaunchRequest) -> tuple[HostsFile, str, str] | None:
    from edgetrain.launch.hosts import hosts_option

    return hosts_option(req.hosts, req.host_list, req.remote_python)


def _keys(recipe: Recipe) -> tuple[CurveKeys | None, Path | None]:
    """The run's CURVE keys when the recipe sets ``security = "curve"`` (missing keys: exit 2).

    A relative ``[run] keys`` is taken from the current directory, as data paths are."""
    from edgetrain.comm.security import load_keys, security_config

    config = security_config(recipe.run.security, recipe.run.keys, Path.cwd())
    keys = load_keys(config)
    return keys, (config.keys_dir.resolve() if keys is not None and config.keys_dir else None)


def _recipe(req: LaunchRequest) -> tuple[Recipe, str, RunDir | None]:
    """The recipe (and, for --resume, the run it comes from)."""
    if req.resume is not None:
        if req.recipe is not None or req.run_dir is not None or req.name is not None:
            raise EdgetrainError(
                "--resume RUN takes its recipe and name from RUN; drop RECIPE, --run-dir and --name"
            )
        if req.overrides:
            raise EdgetrainError(
                "--set changes a new run's recipe; a resumed run keeps the recipe it ran with",
                "drop --set (--epochs N trains a resumed run further)",
            )
        rd = RunDir.open(req.resume)
        recipe, text = load_checked_recipe(rd.recipe)
        return recipe, text, rd
    if req.epochs is not None:
        raise EdgetrainError(
            "--epochs N extends a run and needs --resume RUN",
            "for a new run set [train] epochs in the recipe",
        )
    if req.recipe is None:
        raise EdgetrainError("give a RECIPE to launch, or --resume RUN to continue a run")
    if req.run_dir is not None and req.runs_root is not None:
        raise EdgetrainError("give --run-dir RUN (this run's directory) or --runs-root, not both")
    recipe, text = load_checked_recipe(req.recipe, req.overrides)
    if req.name is not None:  # validated as [run] name is: no '/', no '..' out of the root
        recipe = recipe.with_run(source="--name", name=req.name)
    return recipe, text, None


@dataclass(frozen=True)
class _Extension:
    """How many epochs a resumed run trains to, and whether its completed result is kept."""

    recipe: Recipe  # the run's recipe with [train] epochs set to the target
    extended_epochs: int | None  # the target, when it is not the recipe file's epochs
    keep: bool  # the run completed: keep its result before it is overwritten
    manifest: dict[str, Any]


def _epochs_done(recipe: Recipe, manifest: dict[str, Any]) -> int:
    """The epochs a run was set to train: its recipe's, or those an earlier --epochs set."""
    extended = manifest.get("extended_epochs")
    if isinstance(extended, int) and not isinstance(extended, bool) and extended > 0:
        return extended
    return recipe.train.epochs


def _extension(req: LaunchRequest, recipe: Recipe, rd: RunDir) -> _Extension:
    """A completed run is resumed only with ``--epochs N`` above the epochs it completed."""
    manifest = rd.read_manifest()
    done = _epochs_done(recipe, manifest)
    completed = manifest.get("status") == "completed"
    if req.epochs is not None and req.epochs < 1:
        raise EdgetrainError(f"--epochs {req.epochs} must be at least 1", "pass --epochs N > 0")
    if completed and req.epochs is None:
        raise EdgetrainError(
            f"run '{rd.path}' already completed its {done} epochs; resuming it would train "
            "its last epochs again and overwrite its result",
            f"to train it further add --epochs N with N > {done} (the result so far is kept "
            f"under {rd.path / 'attempts'}/)",
        )
    if completed and req.epochs is not None and req.epochs <= done:
        raise EdgetrainError(
            f"--epochs {req.epochs} is not more than the {done} epochs run '{rd.path}' completed",
            f"pass --epochs N with N > {done}",
        )
    target = req.epochs if req.epochs is not None else done
    if target == recipe.train.epochs:  # the recipe file's
        return _Extension(recipe, None, completed, manifest)
    train = recipe.train.model_copy(update={"epochs": target})
    return _Extension(recipe.model_copy(update={"train": train}), target, completed, manifest)


def keep_result(rd: RunDir, manifest: dict[str, Any]) -> Path:
    """Copy what an extended run overwrites (``manifest.json``, ``report/``, ``model/``, the
    families' ``metrics/*.json`` and ``plans/epoch-*.json``, ``hosts.toml``) to
    ``RUN/attempts/<n>/``, ``n`` the attempt's number; the folder appears whole or not at
    all."""
    root = rd.path / "attempts"
    n = len(manifest.get("attempts") or []) + 1
    while (root / str(n)).exists():
        n += 1
    dest, tmp = root / str(n), root / f".{n}.tmp"
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        shutil.copy2(rd.manifest, tmp / MANIFEST)
        for sub in ("report", "model"):  # model/: the final.safetensors it overwrites
            if (rd.path / sub).is_dir():
                shutil.copytree(rd.path / sub, tmp / sub)
        for sub, pattern in (("metrics", "*.json"), ("plans", "epoch-*.json")):
            for f in sorted((rd.path / sub).glob(pattern)):
                (tmp / sub).mkdir(exist_ok=True)
                shutil.copy2(f, tmp / sub / f.name)
        if (rd.path / "hosts.toml").is_file():
            shutil.copy2(rd.path / "hosts.toml", tmp / "hosts.toml")
        os.rename(tmp, dest)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise EdgetrainError(
            f"cannot keep the earlier result of '{rd.path}' in {dest}: {exc.strerror or exc}",
            "free some disk space or make the run directory writable",
        ) from None
    return dest


def _roles_and_slots(
    recipe: Recipe, hosts: HostsFile | None, source: str
) -> tuple[list[Role], list[int] | None]:
    """Each worker's role, and its host slot when there are hosts (placement by labels)."""
    roles = assign_roles(recipe.role_names())
    if hosts is None:
        return roles, None
    fam = recipe.family_spec
    slot_hosts = hosts.slots(recipe.num_workers, source)
    needs = [
        Need(r.name, tuple(g.labels), fam.placement.get(r.name))
        for r, g in zip(roles, recipe.expanded_workers(), strict=True)
    ]
    return roles, place(needs, [tuple(h.labels) for h in slot_hosts])


def _resume_point(recipe: Recipe, family: Family, roles: list[Role], rd: RunDir) -> Resume:
    """The last checkpoint of ``rd``, spread over the recipe's workers by the family."""
    from edgetrain.checkpoints import load_checkpoint

    epoch, handins = load_checkpoint(rd.path)
    if max(handins) >= len(roles):
        raise EdgetrainError(
            f"the checkpoint of epoch {epoch} in {rd.path} does not match the recipe's "
            f"{len(roles)} workers"
        )
    return Resume(epoch, family.resume(recipe, handins, roles))


def _check_device(recipe: Recipe, with_hosts: bool) -> None:
    """A local run's ``[train] device = "cuda"`` needs CUDA on this machine, known before any
    worker starts (on hosts, each host's own CUDA is the workers' business)."""
    if with_hosts or recipe.train.device != "cuda":
        return
    from edgetrain.runtime.trainer import resolve_device

    resolve_device("cuda")


def _check_output(req: LaunchRequest, recipe: Recipe) -> None:
    """Where a new run's directory goes can be written (``--run-dir`` or the runs root),
    checked without creating anything; a resumed run writes in its own directory."""
    from edgetrain.rundir import check_writable

    if req.resume is not None:
        return
    if req.run_dir is not None:
        check_writable(req.run_dir, "--run-dir", "pass a writable --run-dir")
        return
    root = req.runs_root if req.runs_root is not None else Path(recipe.run.runs_root)
    check_writable(root, "runs root", "set [run] runs_root or --runs-root to a writable directory")


def _check_cpu_quotas(recipe: Recipe, with_hosts: bool) -> None:
    """``[[workers]] cpu`` limits local workers, and needs the cgroups to do it."""
    from edgetrain.launch import cpuquota

    if all(g.cpu is None for g in recipe.workers):
        return
    if with_hosts:
        raise EdgetrainError(
            "[[workers]] cpu limits local workers only; on hosts the CPU share is the host's "
            "own (an emulated testbed's cpu); remove cpu from the recipe or launch without hosts"
        )
    why = cpuquota.unavailable()
    if why is not None:
        raise EdgetrainError(
            f"[[workers]] cpu needs a cgroup per worker, and here {why}; run as root on a "
            "machine with cgroup v1, or emulate a slower device with slowdown instead"
        )


@dataclass(frozen=True)
class Checked:
    """A launch whose every input was checked (:func:`check`): nothing written or started."""

    recipe: Recipe
    text: str  # the recipe's text as the run stores it (with --set: the overridden document)
    family: Family
    roles: list[Role]
    slots: list[int] | None  # each worker's host slot (with hosts)
    data: Dataset
    opts: LaunchOptions
    hosts: tuple[HostsFile, str, str] | None  # (hosts, their TOML text, where they came from)
    resumed: RunDir | None = None
    resume: Resume | None = None
    ext: _Extension | None = None


class _Failed:
    """A check that found a problem (collected): what depends on it is not checked."""


_FAILED = _Failed()


def _checks(req: LaunchRequest, problems: list[EdgetrainError] | None) -> Checked | None:
    """Every check of a launch, in launch's order. ``problems`` None: the first problem raises
    (launch); else each is appended there, checks that need a failed one are skipped, and the
    result is None when anything failed (``edgetrain check``)."""

    def attempt(fn: Callable[[], T]) -> T | _Failed:
        if problems is None:
            return fn()
        try:
            return fn()
        except EdgetrainError as exc:
            problems.append(exc)
            return _FAILED

    hosts = attempt(lambda: _hosts(req))
    path = req.recipe
    if problems is not None and path is not None and req.resume is None:
        found = attempt(lambda: _schema_problems(path, req.overrides))  # every one, not the first
        if isinstance(found, _Failed) or found:
            problems.extend([] if isinstance(found, _Failed) else found)
            return None
    loaded = attempt(lambda: _recipe(req))
    if isinstance(loaded, _Failed):
        return None
    recipe, text, resumed = loaded
    ext = attempt(lambda: _extension(req, recipe, resumed)) if resumed is not None else None
    if isinstance(ext, _Failed):
        return None
    if ext is not None:
        recipe = ext.recipe
    family = attempt(lambda: launcher_side(recipe.train.family, recipe.train.technique))
    if isinstance(family, _Failed):
        return None
    fam: Family = family
    attempt(lambda: fam.check(recipe))
    attempt(lambda: check_restart(recipe))  # [run] restart: the technique can rejoin
    attempt(lambda: check_join_slots(recipe))  # [run] join_slots: it takes new workers
    attempt(lambda: check_tensorboard(recipe))  # [report] tensorboard: the package
    placed = (
        _FAILED
        if isinstance(hosts, _Failed)
        else attempt(
            lambda: _roles_and_slots(recipe, hosts[0] if hosts else None, hosts[2] if hosts else "")
        )
    )
    resume: Resume | None | _Failed = None
    if resumed is not None and not isinstance(placed, _Failed):
        roles = placed[0]
        resume = attempt(lambda: _resume_point(recipe, fam, roles, resumed))
        point, epochs = resume, req.epochs
        if isinstance(point, Resume) and epochs is not None and epochs <= point.epoch:
            attempt(lambda: _more_epochs(epochs, point.epoch))
    data = attempt(lambda: preflight(recipe))  # bad data or model: exit 2, nothing started
    # what the run reads from its directory
    attempt(lambda: fam.check_run_dir(recipe, resumed.path if resumed is not None else req.run_dir))
    keys = attempt(lambda: _keys(recipe))
    attempt(lambda: _check_cpu_quotas(recipe, hosts is not None))
    attempt(lambda: _check_device(recipe, hosts is not None))
    attempt(lambda: _check_output(req, recipe))
    if problems:
        return None
    assert not isinstance(hosts, _Failed) and not isinstance(placed, _Failed)
    assert not isinstance(data, _Failed) and not isinstance(keys, _Failed)
    assert not isinstance(resume, _Failed) and not isinstance(ext, _Failed)
    roles, slots = placed
    opts = LaunchOptions(keys=keys[0], keys_dir=keys[1])
    return Checked(recipe, text, fam, roles, slots, data, opts, hosts, resumed, resume, ext)


def _more_epochs(epochs: int, done: int) -> None:
    raise EdgetrainError(
        f"--epochs {epochs} is not more than the {done} epochs of the run's last checkpoint",
        f"pass --epochs N with N > {done}",
    )


def _schema_problems(path: Path, overrides: tuple[str, ...]) -> list[EdgetrainError]:
    """Every schema problem of a recipe file (with ``--set``), one error each."""
    from edgetrain import tomlconfig

    data, _, source = read_recipe(path, overrides)
    return [RecipeError(line) for line in tomlconfig.problems(recipe_model(), data, source)]


def check(req: LaunchRequest) -> Checked:
    """Everything :func:`prepare` checks, raising the first problem; nothing is written or
    started (hosts are not contacted: :func:`prepare` runs the ssh preflight)."""
    checked = _checks(req, None)
    assert checked is not None
    return checked


@dataclass(frozen=True)
class CheckReport:
    """What ``edgetrain check`` found: every problem, or the checked launch."""

    problems: list[EdgetrainError]
    checked: Checked | None


def check_all(req: LaunchRequest) -> CheckReport:
    """:func:`check`, listing every problem it finds instead of raising the first."""
    problems: list[EdgetrainError] = []
    checked = _checks(req, problems)
    return CheckReport(problems, checked if not problems else None)


def prepare(req: LaunchRequest) -> RunSetup:
    """Check everything, then create (or adopt) the run directory: a run ready to start."""
    return create(req, check(req))


def create(req: LaunchRequest, checked: Checked) -> RunSetup:
    """The creating part of :func:`prepare`: the launcher (with the ssh preflight of the
    hosts), then the run directory, made or adopted (a completed run's result kept first)."""
    from edgetrain.launch.local import LocalLauncher
    from edgetrain.launch.run_inputs import RunInputs, classify, run_dir_files
    from edgetrain.launch.ssh import SshLauncher, resolve_hosts
    from edgetrain.launch.ssh_preflight import check_hosts

    recipe, hosts, resumed, ext, opts = (
        checked.recipe,
        checked.hosts,
        checked.resumed,
        checked.ext,
        checked.opts,
    )
    launcher: Launcher = LocalLauncher()
    if hosts is not None:
        cfg, hosts_text, source = hosts
        cfg = resolve_hosts(cfg)  # an ssh alias: the machine ssh resolves it to
        sink = req.log_sink if req.stream_logs is not False else None
        launcher = SshLauncher(cfg, recipe.num_workers, source, sink=sink, hosts_text=hosts_text)
        check_hosts(cfg)
        opts = replace(opts, bind_host=cfg.bind_address(), announce_host=cfg.coordinator_address())
    fresh = resumed is None and (req.run_dir is None or not req.run_dir.exists())
    kept: Path | None = None
    inputs: RunInputs | None = None
    if resumed is not None:
        rd = resumed
        if ext is not None and ext.keep:  # everything checked: keep the result, then extend
            kept = keep_result(rd, ext.manifest)
    elif req.run_dir is not None:
        rd = RunDir.adopt(req.run_dir)
        inputs = classify(run_dir_files(rd.path), checked.family.reads(recipe))
    else:
        root = req.runs_root if req.runs_root is not None else recipe.run.runs_root
        rd = RunDir.create(root, recipe.run.name)
    extended = ext.extended_epochs if ext is not None else None
    return RunSetup(
        recipe,
        checked.text,
        rd,
        launcher,
        checked.data,
        checked.family,
        checked.roles,
        checked.slots,
        opts,
        checked.resume,
        fresh,
        extended,
        kept,
        inputs,
    )


def _sigterm_as_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextmanager
def _interrupt_on_sigterm() -> Iterator[None]:
    """SIGTERM stops a run as Ctrl-C does (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def _run_log(run_dir: RunDir) -> Iterator[None]:
    """Send edgetrain's log records to this run's ``logs/launcher.log`` while it runs (and
    only this run's: a second launch in the same process gets its own file)."""
    handler = logging.FileHandler(run_dir.logs / "launcher.log", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logger = logging.getLogger("edgetrain")
    level = logger.level
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        handler.close()


def execute(setup: RunSetup, observer: Observer | None = None) -> RunOutcome:
    """Run a prepared launch to its end."""
    with _run_log(setup.run_dir), _interrupt_on_sigterm():
        return run(setup, with_tensorboard(setup, observer))


def launch(req: LaunchRequest, observer: Observer | None = None) -> RunOutcome:
    """:func:`prepare` then :func:`execute`."""
    return execute(prepare(req), observer)
