"""``edgetrain hosts``: check the hosts of a run, and install this edgetrain on them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.markup import escape
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


def _cuda(f: Any) -> str:
    """torch's CUDA as the host has it: the version it was built with, and the device it sees."""
    if f.torch is None:
        return "-"
    if f.torch_cuda is None:
        return "CPU-only build"
    return f"{f.torch_cuda}: {f.cuda}" if f.cuda_available else f"{f.torch_cuda}, no device"


def _verdict(f: Any) -> str:
    if f.problem:
        return f"[red]{escape(f.problem)}[/]"
    return f"[yellow]{escape(f.note)}[/]" if f.note else "[green]ok[/]"


def _table(found: list[Any], title: str) -> Table:
    from edgetrain.launch.jetson import describe_board

    table = Table(title=title, box=box.SIMPLE_HEAD)
    for col in (
        "host",
        "reachable",
        "python",
        "edgetrain",
        "torch",
        "torch CUDA: device",
        "board",
        "cores",
        "memory",
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
            _cuda(f),
            describe_board(f.board, f.l4t) or "-",
            str(f.cores) if f.cores else "-",
            mem,
            _verdict(f),
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
    """Check every host over ssh: reachable, python, edgetrain and torch versions, the CUDA
    torch was built with and the device it sees, a Jetson's board and L4T/JetPack release,
    cores, memory. Exit 2 with one line per host that cannot run workers (a Python older than
    3.10 among them: docs/jetson.md).

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
