"""``edgetrain emulate up|status|verify|down|trace``: a testbed of real hosts on this machine."""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from edgetrain.cli.common import FormatOption, OutputFormat, console, emit, err_console
from edgetrain.errors import EdgetrainError

app = typer.Typer(
    help="Emulate an edge testbed on this machine: hosts in network namespaces, each with its "
    "own sshd, CPU share and bandwidth limits.",
    no_args_is_help=True,
)

StateDir = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        help="Where testbeds are recorded (default /run/edgetrain/emulate, "
        "or $EDGETRAIN_EMULATE_DIR).",
    ),
]


# A command on one testbed, the only one up when not named.
OnlyTestbed = Annotated[
    str | None, typer.Argument(metavar="NAME", help="Testbed (default: the only one up).")
]
CpuSeconds = Annotated[
    float, typer.Option(help="Seconds per CPU probe (verification).", min=0.5, max=30)
]
CpuRounds = Annotated[
    int, typer.Option(help="CPU probe rounds (verification; the median is checked).", min=1)
]


@app.callback()
def _emulate() -> None:
    """Emulate an edge testbed on this machine (run as root)."""


def _root(state_dir: Path | None) -> Path:
    from edgetrain.emulate.testbed import state_root

    return state_dir or state_root()


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise EdgetrainError(
            f"`edgetrain emulate {what}` needs root (network namespaces, tc, cgroups)",
            f"run it as root: sudo edgetrain emulate {what} ...",
        )


@contextlib.contextmanager
def _progress(fmt: OutputFormat, title: str) -> Iterator[Any]:
    if fmt == OutputFormat.json or not err_console.is_terminal:
        quiet = fmt == OutputFormat.json

        def say(msg: str) -> None:
            if not quiet:
                err_console.print(f"{escape(title)}: {escape(msg)}", highlight=False)

        yield say
        return
    with err_console.status(title) as status:
        yield lambda msg: status.update(f"{title}: {escape(msg)}")


def _rate(bps: float | None) -> str:
    from edgetrain.emulate.spec import format_rate

    return "-" if bps is None else format_rate(bps)


def _mem(size: int | None) -> str:
    return "-" if size is None else f"{size / 2**20:.0f} MiB"


def _hosts_table(tb: Any, live: dict[str, Any] | None = None) -> Table:
    table = Table(
        title=f"testbed {tb.spec.name}: {tb.topo.subnet}, gateway {tb.topo.gateway_address}"
    )
    for col in ("host", "site", "address", "cpu", "memory", "link", "uplink (WAN)", "workers"):
        table.add_column(col, justify="right" if col in ("cpu", "workers") else "left")
    if live is not None:
        table.add_column("sshd")
    for h in tb.topo.hosts:
        cpu = f"{h.cpu:g}"
        now = live[h.name]["cpu_now"] if live is not None else None
        if now is not None and abs(now - h.cpu) > 1e-6:
            cpu = f"{now:g} (spec {h.cpu:g})"  # a trace changed it
        row = [
            h.name,
            h.site,
            h.address,
            cpu,
            _mem(h.memory),
            _rate(h.link_bps),
            _rate(tb.topo.site(h.site).wan_bps),
            str(h.workers),
        ]
        if live is not None:
            row.append("up" if live[h.name]["sshd"] else "[red]down[/red]")
        table.add_row(*[r if r.startswith("[") else escape(r) for r in row])
    return table


def _verify_tables(v: dict[str, Any]) -> list[Table]:
    links = Table(title=f"links (edgetrain transport; ok within {v['link_tolerance']:.0%})")
    for col in ("class", "path", "limit", "measured", "error", "rtt", "ok"):
        links.add_column(col)
    for r in v["links"]:
        links.add_row(
            r["kind"],
            escape(f"{r['label']}: {r['src']} -> {r['dst']}"),
            _rate(r["limit_bps"]),
            _rate(r["measured_bps"]),
            f"{r['error']:+.1%}",
            f"{r['rtt_ms']:.2f} ms",
            "ok" if r["ok"] else "[red]FAIL[/red]",
        )
    cpus = Table(
        title=f"CPU shares: throughput as a part of its cores' in the same window (of cores), "
        f"ratio to the largest share's, ok within {v['cpu_tolerance']:.0%}; "
        f"granted = CPU time per second"
    )
    for col in ("host", "share", "loops/s", "of cores", "granted", "ratio", "expected", "error",
                "ok"):  # fmt: skip
        cpus.add_column(col)
    for r in v["cpus"]:
        cpus.add_row(
            escape(r["host"]),
            f"{r['share']:g}",
            f"{r['ops_per_s'] / 1e6:.2f} M",
            f"{r['cores']:.3f}",
            f"{r['granted']:.3f}",
            f"{r['ratio']:.3f}",
            f"{r['expected_ratio']:.3f}",
            f"{r['error']:+.1%}",
            "ok" if r["ok"] else "[red]FAIL[/red]",
        )
    return [links, cpus]


def _failed_verification(result: dict[str, Any], name: str) -> None:
    """One line: why (the machine's own load, when that is it) and what to do; exit 1."""
    why = result.get("busy") or "see the tables"
    err_console.print(
        f"error: testbed {name} is up but failed verification: {why}; inspect it, or remove "
        f"it with `edgetrain emulate down {name}`",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    raise typer.Exit(1)


def _run_verify(tb: Any, fmt: OutputFormat, cpu_seconds: float, rounds: int) -> dict[str, Any]:
    from edgetrain.emulate.verify import verify

    with _progress(fmt, "verify") as say:
        result = verify(tb, cpu_seconds=cpu_seconds, rounds=rounds, progress=say).to_dict()
    (tb.state / "verify.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


@app.command("up")
def up(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="Testbed spec (TOML).")],
    name: Annotated[
        str | None, typer.Option(help="Testbed name (default: the spec's name).")
    ] = None,
    verify: Annotated[
        bool, typer.Option("--verify", help="Measure every link class and CPU share, and check.")
    ] = False,
    python: Annotated[
        str | None,
        typer.Option(help="Python the hosts run workers with (default: this one)."),
    ] = None,
    cpu_seconds: CpuSeconds = 2.0,
    cpu_rounds: CpuRounds = 3,
    state_dir: StateDir = None,
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Build the testbed SPEC: one network namespace, cgroup and sshd per host; write hosts.toml.

    Examples:
    edgetrain emulate up recipes/testbeds/dlion-4.toml --verify
    edgetrain launch recipes/quickstart.toml --hosts /run/edgetrain/emulate/dlion-4/hosts.toml
    edgetrain emulate down dlion-4
    """
    from edgetrain.emulate import testbed
    from edgetrain.emulate.spec import load_spec

    spec = load_spec(spec_path).with_name(name)
    _need_root("up")
    root = _root(state_dir)
    with _progress(fmt, f"emulate up {spec.name}") as say:
        tb = testbed.up(spec, root, python, progress=say)
    result = _run_verify(tb, fmt, cpu_seconds, cpu_rounds) if verify else None
    data = {**tb.to_dict(), "verify": result}

    def render() -> None:
        console.print(_hosts_table(tb))
        if result is not None:
            for table in _verify_tables(result):
                console.print(table)
        console.print(f"hosts file: {escape(str(tb.hosts_file))}", highlight=False)
        console.print(
            escape(
                f"next: edgetrain launch RECIPE --hosts {tb.hosts_file}; "
                f"then: edgetrain emulate down {spec.name}"
            ),  # fmt: skip
            highlight=False,
        )

    emit(data, fmt, render)
    if result is not None and not result["ok"]:
        _failed_verification(result, spec.name)


def _live(tb: Any) -> dict[str, Any]:
    from edgetrain.emulate import cgroups, sshd
    from edgetrain.emulate.testbed import namespaces

    nss = set(namespaces())
    out = {}
    for h in tb.topo.hosts:
        pid = sshd.read_pid(tb.state, h.name)
        out[h.name] = {
            "namespace": h.ns in nss,
            "sshd": pid is not None and sshd.alive(pid) and h.ns in nss,
            "sshd_pid": pid,
            "cpu_now": cgroups.read_cpu(tb.spec.name, h.name),
        }
    return out


@app.command("status")
def status(
    name: Annotated[
        str | None, typer.Argument(metavar="NAME", help="Testbed (default: every one).")
    ] = None,
    state_dir: StateDir = None,
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Show the testbeds that are up: hosts, limits, sshd state, last measured link rates.

    Examples:
    edgetrain emulate status
    edgetrain emulate status dlion-4 --format json
    """
    from edgetrain.emulate import testbed

    root = _root(state_dir)
    names = [name] if name else [t["name"] for t in testbed.list_testbeds(root)]
    beds = [testbed.load(n, root) for n in names]
    data: dict[str, Any] = {"testbeds": []}
    for tb in beds:
        verify_file = tb.state / "verify.json"
        measured = json.loads(verify_file.read_text()) if verify_file.is_file() else None
        entry = {**tb.to_dict(), "hosts": _live(tb), "verify": measured}
        data["testbeds"].append(entry)

    def render() -> None:
        if not beds:
            console.print("no testbed is up (start one with `edgetrain emulate up SPEC`)")
        for tb, entry in zip(beds, data["testbeds"], strict=True):
            console.print(_hosts_table(tb, entry["hosts"]))
            if entry["verify"] is not None:
                for table in _verify_tables(entry["verify"]):
                    console.print(table)
            else:
                console.print(f"not measured yet: edgetrain emulate verify {tb.spec.name}")
            console.print(f"hosts file: {escape(str(tb.hosts_file))}", highlight=False)

    emit(data, fmt, render)


@app.command("verify")
def verify_cmd(
    name: OnlyTestbed = None,
    cpu_seconds: CpuSeconds = 2.0,
    cpu_rounds: CpuRounds = 3,
    state_dir: StateDir = None,
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Measure a testbed's link classes and CPU shares again, and check them.

    Example: edgetrain emulate verify dlion-4
    """
    from edgetrain.emulate import testbed

    _need_root("verify")
    root = _root(state_dir)
    tb = testbed.load(name or testbed.only_testbed(root), root)
    result = _run_verify(tb, fmt, cpu_seconds, cpu_rounds)

    def render() -> None:
        for table in _verify_tables(result):
            console.print(table)

    emit(result, fmt, render)
    if not result["ok"]:
        _failed_verification(result, tb.spec.name)


@app.command("trace")
def trace_cmd(
    name: Annotated[str, typer.Argument(metavar="NAME", help="Testbed that is up.")],
    trace_path: Annotated[Path, typer.Argument(metavar="TRACE", help="Trace file (TOML).")],
    speed: Annotated[
        float, typer.Option(help="Play the trace this many times faster.", min=0.01, max=1000)
    ] = 1.0,
    keep: Annotated[
        bool, typer.Option("--keep", help="Leave the last values in place at the end.")
    ] = False,
    state_dir: StateDir = None,
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Play a trace: change link rates and CPU shares of a running testbed over time.

    Runs in the foreground until the trace ends (or Ctrl-C); then puts the spec's values
    back unless --keep. Each change is logged to the testbed's trace.jsonl.

    Examples:
    edgetrain emulate trace dlion-4 recipes/testbeds/traces/dlion-4-wan-dip.toml
    edgetrain emulate trace edgegossip-4 recipes/testbeds/traces/edgegossip-4-load.toml &
    """
    import signal
    import threading

    from edgetrain.emulate import testbed, trace

    _need_root("trace")
    root = _root(state_dir)
    tb = testbed.load(name, root)
    plan = trace.load_trace(trace_path)
    actions = trace.plan(plan, tb.topo, str(trace_path))
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    applied: list[dict[str, Any]] = []

    def on_change(t: float, action: Any) -> None:
        applied.append({"t": t, "at": action.at, "change": action.what})
        if fmt == OutputFormat.text:
            console.print(f"{t:8.2f} s  {escape(action.what)}", highlight=False)

    try:
        trace.play(plan, actions, tb.topo, testbed.must, stop, tb.state / "trace.jsonl",
                   on_change, speed)  # fmt: skip
    except KeyboardInterrupt:
        stop.set()
    finally:
        signal.signal(signal.SIGTERM, previous)
        if not keep:
            for action in trace.restore(tb.topo):
                trace.apply(tb.topo, action, testbed.must)
    data = {"testbed": name, "applied": applied, "restored": not keep}

    def render() -> None:
        tail = "; the spec's values are back" if not keep else ""
        console.print(f"trace done: {len(applied)} changes{tail}", highlight=False)

    emit(data, fmt, render)


@app.command("down")
def down(
    name: OnlyTestbed = None,
    all_: Annotated[bool, typer.Option("--all", help="Remove every testbed.")] = False,
    state_dir: StateDir = None,
    fmt: FormatOption = OutputFormat.text,
) -> None:
    """Remove a testbed: its processes, namespaces, veths, cgroups and files. Idempotent.

    Examples:
    edgetrain emulate down dlion-4
    edgetrain emulate down --all
    """
    from edgetrain.emulate import testbed

    _need_root("down")
    root = _root(state_dir)
    if all_:
        names = [t["name"] for t in testbed.list_testbeds(root)]
    elif name is not None:
        from edgetrain.emulate.spec import NAME_PATTERN

        if not re.fullmatch(NAME_PATTERN, name):
            raise EdgetrainError(
                f"{name!r} is not a testbed name", "see `edgetrain emulate status`"
            )
        names = [name]
    else:
        names = [testbed.only_testbed(root)]
    reports = [testbed.down(n, root) for n in names]
    data = {
        "removed": [
            {"name": r.name, "found": r.found, "namespaces": r.namespaces,
             "processes": r.processes, "problems": r.problems}
            for r in reports
        ]
    }  # fmt: skip

    def render() -> None:
        for r in reports:
            if not r.found:
                console.print(f"testbed {r.name}: nothing to remove", highlight=False)
                continue
            console.print(
                f"testbed {r.name}: removed {len(r.namespaces)} namespaces, "
                f"stopped {r.processes} processes, removed its cgroups and files",
                highlight=False,
            )

    emit(data, fmt, render)
    problems = [p for r in reports for p in r.problems]
    if problems:
        raise EdgetrainError(f"could not remove everything: {problems[0]}", "run it again")
