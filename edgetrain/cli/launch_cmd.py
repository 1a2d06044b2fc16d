"""``edgetrain launch``: run a recipe's workers and show their progress live."""

from __future__ import annotations

import dataclasses
import logging
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer

from edgetrain.cli.common import FormatOption, OutputFormat, console, emit, err_console

if TYPE_CHECKING:
    from edgetrain.comm.security import CurveKeys
    from edgetrain.launch.driver import LaunchOptions
    from edgetrain.launch.hosts import HostsFile
    from edgetrain.launch.ssh import SshLauncher
    from edgetrain.recipe import Recipe


def _sigterm_as_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def launch(
    recipe_path: Annotated[
        Path | None, typer.Argument(metavar="[RECIPE]", help="Recipe TOML file.")
    ] = None,
    run_dir: Annotated[
        Path | None,
        typer.Option("--run-dir", help="Parent directory for the run (default: [run] run_dir)."),
    ] = None,
    name: Annotated[str | None, typer.Option(help="Run name (default: [run] name).")] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            "--resume",
            metavar="RUN",
            help="Continue a stopped run from its last checkpoint (no RECIPE needed).",
        ),
    ] = None,
    hosts: Annotated[
        Path | None,
        typer.Option("--hosts", metavar="FILE", help="hosts.toml: run the workers over ssh."),
    ] = None,
    host_list: Annotated[
        str | None,
        typer.Option(
            "-H", "--host-list", metavar="HOST:N,...", help="ssh hosts and worker slots: a:2,b:1."
        ),
    ] = None,
    remote_python: Annotated[
        str | None,
        typer.Option(help="Python on the hosts of -H (default: this interpreter's path)."),
    ] = None,
    stream_logs: Annotated[
        bool | None,
        typer.Option(
            "--stream-logs/--quiet-logs",
            help="Show worker log lines, prefixed with worker and host (default: on for ssh).",
        ),
    ] = None,
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Start the coordinator and the recipe's workers, stream progress, and report.

    Writes runs/<name>-<timestamp>/ with manifest.json, metrics/, logs/ and report/.
    Ctrl-C stops every worker and marks the run interrupted.

    Examples:
    edgetrain launch recipes/quickstart.toml
    edgetrain launch --resume runs/quickstart-20261122-101500
    edgetrain launch recipes/quickstart.toml --hosts hosts.toml
    edgetrain launch recipes/quickstart.toml -H jetson-a:2,jetson-b:1
    """
    from edgetrain.checkpoints import load_resume
    from edgetrain.cli.live import LiveProgress, summary_table
    from edgetrain.errors import EdgetrainError
    from edgetrain.launch import driver
    from edgetrain.launch.local import LocalLauncher
    from edgetrain.recipe import load_recipe
    from edgetrain.rundir import RunDir

    hosts_cfg = _hosts(hosts, host_list, remote_python)
    resume_point = None
    if resume is not None:
        if recipe_path is not None or run_dir is not None or name is not None:
            raise EdgetrainError(
                "--resume RUN takes its recipe and name from RUN; drop RECIPE, --run-dir and --name"
            )
        rd = RunDir.open(resume)
        recipe, text = load_recipe(rd.recipe)
        resume_point = load_resume(rd.path, recipe.num_workers)
        data = driver.preflight(recipe)
        keys, keys_dir = _keys(recipe)
        ssh = _ssh_launcher(hosts_cfg, recipe.num_workers, stream_logs, fmt)
    else:
        if recipe_path is None:
            raise EdgetrainError("give a RECIPE to launch, or --resume RUN to continue a run")
        recipe, text = load_recipe(recipe_path)
        if name is not None:
            run_cfg = recipe.run.model_copy(update={"name": name})
            recipe = recipe.model_copy(update={"run": run_cfg})
        data = driver.preflight(recipe)  # bad data or model: exit 2, nothing started or written
        keys, keys_dir = _keys(recipe)
        ssh = _ssh_launcher(hosts_cfg, recipe.num_workers, stream_logs, fmt)
        rd = RunDir.create(run_dir if run_dir is not None else recipe.run.run_dir, recipe.run.name)
    logging.basicConfig(
        filename=rd.logs / "launcher.log",
        level=logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    say = err_console if fmt == OutputFormat.json else console
    say.print(f"run directory: [bold]{rd.path}[/]")
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    launcher = ssh if ssh is not None else LocalLauncher()
    opts = dataclasses.replace(_launch_options(hosts_cfg), keys=keys, keys_dir=keys_dir)
    if fmt == OutputFormat.json:
        outcome = driver.run(recipe, text, rd, launcher, data, opts=opts, resume=resume_point)
    else:
        with LiveProgress(recipe, console) as live:
            outcome = driver.run(
                recipe, text, rd, launcher, data, observer=live, opts=opts, resume=resume_point
            )
    emit(outcome.summary, fmt, lambda: console.print(summary_table(outcome.summary)))
    say.print(f"run directory: [bold]{rd.path}[/]  (report: {rd.report})")
    if outcome.status == "interrupted":
        err_console.print("interrupted: every worker was stopped; the manifest says 'interrupted'")
        raise typer.Exit(130)
    if outcome.status != "completed":
        sys.stderr.write(f"error: run failed: {outcome.error}\n")
        raise typer.Exit(1)


def _keys(recipe: Recipe) -> tuple[CurveKeys | None, Path | None]:
    """The run's CURVE keys when the recipe sets ``security = "curve"`` (missing keys: exit 2).

    A relative ``[run] keys`` is taken from the current directory, as data paths are."""
    from edgetrain.comm.security import load_keys, security_config

    config = security_config(recipe.run.security, recipe.run.keys, Path.cwd())
    keys = load_keys(config)
    return keys, (config.keys_dir.resolve() if keys is not None and config.keys_dir else None)


def _hosts(
    path: Path | None, host_list: str | None, remote_python: str | None
) -> tuple[HostsFile, str, str] | None:
    """(hosts, their TOML text, where they came from) from --hosts or -H; None for local."""
    from edgetrain.errors import EdgetrainError
    from edgetrain.launch.hosts import load_hosts, parse_host_list, to_toml

    if path is not None and host_list is not None:
        raise EdgetrainError("give --hosts FILE or -H HOST:N,..., not both")
    if path is not None:
        if remote_python is not None:
            raise EdgetrainError("--remote-python goes with -H; set `python` in the hosts file")
        cfg, text = load_hosts(path)
        return cfg, text, str(path)
    if host_list is not None:
        cfg = parse_host_list(host_list, remote_python)
        return cfg, to_toml(cfg), f"-H '{host_list}'"
    return None


def _ssh_launcher(
    hosts: tuple[HostsFile, str, str] | None,
    num_workers: int,
    stream_logs: bool | None,
    fmt: OutputFormat,
) -> SshLauncher | None:
    """The ssh launcher, after checking every host (exit 2 before anything is written)."""
    from edgetrain.launch.ssh import SshLauncher
    from edgetrain.launch.ssh_preflight import check_hosts

    if hosts is None:
        return None
    cfg, text, source = hosts
    out = err_console if fmt == OutputFormat.json else console
    sink = None
    if stream_logs is not False:

        def sink(line: str) -> None:
            out.print(line, markup=False, highlight=False, soft_wrap=True)

    launcher = SshLauncher(cfg, num_workers, source, sink=sink, hosts_text=text)
    check_hosts(cfg)
    return launcher


def _launch_options(hosts: tuple[HostsFile, str, str] | None) -> LaunchOptions:
    from edgetrain.launch.driver import LaunchOptions

    if hosts is None:
        return LaunchOptions()
    cfg = hosts[0]
    return LaunchOptions(bind_host=cfg.bind_address(), announce_host=cfg.coordinator_address())
