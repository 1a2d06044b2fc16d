"""``edgetrain hosts``: check the hosts of a run, and install this edgetrain on them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from edgetrain.cli.common import (
    FormatOption,
    OutputFormat,
    RemotePythonOption,
    console,
    emit,
    err_console,
)

app = typer.Typer(no_args_is_help=True, help="Check the hosts of a run; install edgetrain there.")

HostsOpt = Annotated[
    Path | None, typer.Option("--hosts", metavar="FILE", help="hosts.toml of the run.")
]
HostListOpt = Annotated[
    str | None,
    typer.Option("-H", "--host-list", metavar="HOST:N,...", help="ssh hosts: a:2,b:1."),
]


def _hosts(path: Path | None, host_list: str | None, python: str | None) -> Any:
    from edgetrain.errors import EdgetrainError
    from edgetrain.launch.hosts import hosts_option
    from edgetrain.launch.ssh import resolve_hosts

    found = hosts_option(path, host_list, python)
    if found is None:
        raise EdgetrainError("give --hosts FILE or -H HOST:N,...", "name the hosts to check")
    return resolve_hosts(found[0])


def _table(found: list[Any], title: str) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD)
    for col in (
        "host",
        "reachable",
        "python",
        "edgetrain",
        "torch",
        "cores",
        "memory",
        "CUDA",
        "problem",
    ):
        table.add_column(col, overflow="fold")
    for f in found:
        mem = f"{f.memory_bytes / 2**30:.1f} GiB" if f.memory_bytes else "-"
        table.add_row(
            f"{f.name} ({f.address})",
            "yes" if f.reachable else "[red]no[/]",
            f.python_version or "-",
            f.edgetrain or "-",
            f.torch or "-",
            str(f.cores) if f.cores else "-",
            mem,
            f.cuda or "-",
            f"[red]{f.problem}[/]" if f.problem else "[green]ok[/]",
        )
    return table


def _report(found: list[Any], fmt: OutputFormat, title: str) -> None:
    from edgetrain.launch.hostinfo import failing

    emit({"hosts": [f.to_dict() for f in found]}, fmt, lambda: console.print(_table(found, title)))
    failing(found)  # one line per failing host, exit 2


@app.command("check")
def check(
    hosts: HostsOpt = None,
    host_list: HostListOpt = None,
    remote_python: RemotePythonOption = None,
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Check every host over ssh: reachable, python, edgetrain and torch versions, cores,
    memory, CUDA. Exit 2 with one line per host that cannot run workers.

    Examples:
    edgetrain hosts check --hosts hosts.toml
    edgetrain hosts check -H jetson-a:2,jetson-b:1 --format json
    """
    from edgetrain.launch.hostinfo import check as check_hosts

    cfg = _hosts(hosts, host_list, remote_python)
    _report(check_hosts(cfg), fmt, "hosts")


@app.command("install")
def install(
    hosts: HostsOpt = None,
    host_list: HostListOpt = None,
    remote_python: RemotePythonOption = None,
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Build a wheel of this edgetrain, copy it to every host over ssh and install it into the
    host's python (its venv). torch must be there already (a Jetson keeps NVIDIA's); other
    dependencies come from the host's package index.

    Example: edgetrain hosts install --hosts hosts.toml
    """
    from edgetrain.launch.hostinfo import install as install_hosts

    cfg = _hosts(hosts, host_list, remote_python)
    say = err_console if fmt == OutputFormat.json else console
    say.print(f"installing edgetrain on {len(cfg.hosts)} host(s)...")
    _report(install_hosts(cfg), fmt, "hosts after install")
