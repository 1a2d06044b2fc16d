"""``edgetrain check`` (and ``launch --dry-run``): every check launch makes, nothing started."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.table import Table

from edgetrain.cli.common import (
    FormatOption,
    HostListOption,
    OutputFormat,
    RemotePythonOption,
    console,
    emit,
    error_line,
)

if TYPE_CHECKING:
    from edgetrain.launch.api import Checked, LaunchRequest

SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        help="Override a recipe key before validation (repeatable): a dotted TOML path and a "
        'TOML value (2, 0.5, true, "text", \\[1, 2]; a bare word is a string); '
        "workers.2.count is the second \\[\\[workers]] group.",
        show_default=False,
    ),
]


def check(
    recipe_path: Annotated[
        Path, typer.Argument(metavar="RECIPE", help="Recipe TOML file.", show_default=False)
    ],
    hosts: Annotated[
        Path | None,
        typer.Option("--hosts", metavar="FILE", help="hosts.toml: place the workers on it."),
    ] = None,
    host_list: HostListOption = None,
    remote_python: RemotePythonOption = None,
    run_dir: Annotated[
        Path | None,
        typer.Option(
            "--run-dir",
            metavar="RUN",
            help="The run directory you would launch into (what the run reads there is checked).",
        ),
    ] = None,
    sets: SetOption = None,
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Check everything launch would check, list every problem, and start nothing.

    Checks the recipe (every schema problem, not just the first), its family's and
    technique's checks, the data and the model, the keys, CPU quotas, and with --hosts or -H the
    hosts file and the placement of each role by labels; then prints which host each worker
    would run on. Starts no process, makes no run directory and writes nothing; hosts are not
    contacted (edgetrain hosts check tries ssh). Exit code 0: ready to launch; 2: problems,
    one line each. Same as edgetrain launch RECIPE --dry-run.

    Examples:
    edgetrain check recipes/quickstart.toml
    edgetrain check recipes/dynacomm.toml --hosts hosts.toml
    edgetrain check recipes/quickstart.toml -H jetson-a:2,jetson-b:1
    edgetrain check recipes/quickstart.toml --set train.epochs=2 --set run.seed=3
    edgetrain check recipes/quickstart.toml --format json
    """
    from edgetrain.launch.api import LaunchRequest

    request = LaunchRequest(
        recipe=recipe_path,
        run_dir=run_dir,
        hosts=hosts,
        host_list=host_list,
        remote_python=remote_python,
        overrides=tuple(sets or ()),
    )
    run_check(request, fmt)


def run_check(request: LaunchRequest, fmt: OutputFormat) -> None:
    """Check ``request`` as launch would, report, and exit 2 when anything is wrong."""
    from edgetrain.launch.api import check_all

    report = check_all(request)
    as_json = fmt == OutputFormat.json
    where = str(request.recipe or request.resume)
    if report.checked is None:
        problems = [{"error": p.problem, "fix": p.fix} for p in report.problems]
        if as_json:
            emit({"ok": False, "recipe": where, "problems": problems}, fmt, lambda: None)
        for p in report.problems:
            sys.stderr.write(error_line(p.problem, p.fix, as_json))
        sys.stderr.flush()
        raise typer.Exit(2)
    checked = report.checked
    rows = placement(checked)
    recipe = checked.recipe
    data: dict[str, Any] = {
        "ok": True,
        "recipe": where,
        "family": recipe.train.family,
        "technique": recipe.train.technique,
        "epochs": recipe.train.epochs,
        "hosts": checked.hosts[2] if checked.hosts is not None else None,
        "workers": rows,
        "problems": [],
    }

    def text() -> None:
        table = Table(title="placement", box=box.SIMPLE_HEAD)
        for col in ("worker", "role", "host"):
            table.add_column(col)
        for r in rows:
            table.add_row(str(r["worker"]), r["role"], r["host"])
        console.print(table)
        console.print(
            f"ok: {where} ({recipe.train.family}/{recipe.train.technique}, "
            f"{recipe.num_workers} workers, {recipe.train.epochs} epochs) is ready to launch; "
            "nothing was started or written",
            markup=False,
            highlight=False,
        )
        if checked.hosts is not None:
            console.print(
                "the hosts were not contacted: edgetrain hosts check "
                f"{_hosts_args(request)} tries ssh on each",
                markup=False,
                highlight=False,
            )

    emit(data, fmt, text)


def placement(checked: Checked) -> list[dict[str, Any]]:
    """Each worker's role and host: a host of the hosts file by its slot, else a local
    process."""
    slot_hosts = (
        checked.hosts[0].slots(checked.recipe.num_workers, checked.hosts[2])
        if checked.hosts is not None
        else None
    )
    rows: list[dict[str, Any]] = []
    for w, role in enumerate(checked.roles):
        host = "local"
        if slot_hosts is not None and checked.slots is not None:
            host = slot_hosts[checked.slots[w]].label
        rows.append({"worker": w, "role": role.name, "host": host})
    return rows


def _hosts_args(request: LaunchRequest) -> str:
    if request.hosts is not None:
        return f"--hosts {request.hosts}"
    return f"-H {request.host_list}"
