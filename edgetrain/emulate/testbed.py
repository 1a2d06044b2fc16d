"""``emulate up`` / ``down`` / status: build a testbed from a spec, record it, remove it.

Everything a testbed makes is found again from its name alone: namespaces ``etb-NAME`` and
``etb-NAME.*`` (deleting the fabric namespace deletes every veth, the gateway's too), cgroups
``edgetrain-emulate/NAME``, and the processes inside them. So ``down`` works (and is
idempotent) even after a crash that lost the state directory, and ``up`` rolls back through
``down`` whatever step fails.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgetrain.emulate import cgroups, sshd
from edgetrain.emulate.netns import LOCK_FILE, netns_unavailable
from edgetrain.emulate.spec import SpecError, TestbedSpec
from edgetrain.emulate.topology import Topology, build, owned_namespace
from edgetrain.errors import EdgetrainError
from edgetrain.launch.hosts import parse_hosts, to_toml

log = logging.getLogger(__name__)

STATE_ROOT = Path("/run/edgetrain/emulate")
SUBNET_POOL = "10.232"
STATE_FILE = "state.json"
HOSTS_FILE = "hosts.toml"
_TIMEOUT_S = 30.0

Progress = Callable[[str], None]


class EmulateError(EdgetrainError):
    """A testbed that cannot be built, found or removed."""


def state_root() -> Path:
    env = os.environ.get("EDGETRAIN_EMULATE_DIR")
    return Path(env) if env else STATE_ROOT


def state_dir(name: str, root: Path | None = None) -> Path:
    return (root or state_root()) / name


@dataclass
class Testbed:
    """A testbed that is up: its spec, topology and files."""

    spec: TestbedSpec
    topo: Topology
    state: Path
    python: str
    created: float = field(default_factory=time.time)

    @property
    def hosts_file(self) -> Path:
        return self.state / HOSTS_FILE

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.spec.name,
            "spec": self.spec.model_dump(),
            "subnet": self.topo.subnet,
            "gateway": self.topo.gateway_address,
            "gateway_dev": self.topo.gateway_dev,
            "python": self.python,
            "created": self.created,
            "hosts_file": str(self.hosts_file),
        }


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)


def must(argv: list[str]) -> None:
    """Run an ``ip``/``tc`` command; raise :class:`EmulateError` with its message if it fails."""
    done = _run(argv)
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise EmulateError(f"`{' '.join(argv)}` failed: {lines[-1] if lines else 'no output'}")


def namespaces() -> list[str]:
    done = _run(["ip", "netns", "list"])
    return [line.split()[0] for line in done.stdout.splitlines() if line.strip()]


def requirements_unavailable(spec: TestbedSpec | None = None) -> str | None:
    """Why a testbed cannot be built here (root, iproute2, netns, bridge, tbf, cgroups, sshd)."""
    reason = netns_unavailable()
    if reason is not None:
        return reason
    need_memory = spec is not None and any(h.memory is not None for _, h in spec.hosts)
    reason = cgroups.cgroups_unavailable(need_memory) or sshd.ssh_unavailable()
    if reason is not None:
        return reason
    return _bridge_tbf_unavailable()


def _bridge_tbf_unavailable() -> str | None:
    probe = f"etb-probe-{os.getpid()}"
    try:
        must(["ip", "netns", "add", probe])
        try:
            must(["ip", "-n", probe, "link", "add", "br0", "type", "bridge"])
        except EmulateError as exc:
            return f"cannot create a Linux bridge (bridge module): {exc}"
        try:
            must(["tc", "-n", probe, "qdisc", "add", "dev", "br0", "root", "tbf", "rate",
                   "10mbit", "burst", "32kb", "latency", "50ms"])  # fmt: skip
        except EmulateError as exc:
            return f"cannot add a tbf qdisc (sch_tbf module): {exc}"
    except EmulateError as exc:
        return f"cannot create a network namespace: {exc}"
    finally:
        _run(["ip", "netns", "del", probe])
    return None


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    LOCK_FILE.touch(exist_ok=True)
    with LOCK_FILE.open("r") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _routes_in_use() -> list[ipaddress.IPv4Network]:
    nets: list[ipaddress.IPv4Network] = []
    for argv in (["ip", "-4", "route", "show", "table", "all"], ["ip", "-4", "-o", "addr", "show"]):
        for word in _run(argv).stdout.split():
            with contextlib.suppress(ValueError):
                if word[0].isdigit():
                    nets.append(ipaddress.IPv4Network(word, strict=False))
    return nets


def _testbed_subnets(root: Path) -> list[ipaddress.IPv4Network]:
    nets = []
    for tb in list_testbeds(root):
        with contextlib.suppress(KeyError, ValueError):
            nets.append(ipaddress.IPv4Network(tb["subnet"]))
    return nets


def choose_subnet(spec: TestbedSpec, root: Path) -> str:
    """The spec's subnet if free, else the first free ``10.232.x.0/24``."""
    used = _routes_in_use() + _testbed_subnets(root)
    if spec.subnet is not None:
        net = ipaddress.IPv4Network(spec.subnet)
        clash = next((u for u in used if u.overlaps(net) and u.prefixlen > 0), None)
        if clash is not None:
            raise EmulateError(
                f"subnet {net} overlaps {clash}, already in use on this machine",
                "pick another subnet in the spec, or leave it out to choose a free one",
            )
        return str(net)
    for octet in range(1, 255):
        net = ipaddress.IPv4Network(f"{SUBNET_POOL}.{octet}.0/24")
        if not any(u.overlaps(net) and u.prefixlen > 0 for u in used):
            return str(net)
    raise EmulateError(f"no free subnet in {SUBNET_POOL}.0.0/16", "set subnet in the spec")


def is_up(name: str, root: Path | None = None) -> bool:
    ns = namespaces()
    return (state_dir(name, root) / STATE_FILE).is_file() or any(
        owned_namespace(name, n) for n in ns
    )


def up(
    spec: TestbedSpec,
    root: Path | None = None,
    python: str | None = None,
    progress: Progress = lambda _msg: None,
) -> Testbed:
    """Build ``spec``; on any failure (or signal) remove what was made, then re-raise."""
    reason = requirements_unavailable(spec)
    if reason is not None:
        raise EmulateError(f"cannot build a testbed here: {reason}")
    root = root or state_root()
    cpus = os.cpu_count() or 1
    big = [h.name for _, h in spec.hosts if h.cpu > cpus]
    if big:
        raise SpecError(
            f"host '{big[0]}' asks for more CPU than this machine's {cpus} cores",
            "lower its cpu share",
        )
    with _locked():
        if is_up(spec.name, root):
            raise EmulateError(
                f"testbed '{spec.name}' is already up",
                f"run `edgetrain emulate down {spec.name}` first, or pick another --name",
            )
        subnet = choose_subnet(spec, root)
        topo = build(spec, subnet)
        state = state_dir(spec.name, root)
        shutil.rmtree(state, ignore_errors=True)  # a leftover without state.json
        state.mkdir(parents=True, mode=0o700)
        testbed = Testbed(spec, topo, state, python or sys.executable)
        _write_json(state / STATE_FILE, {**testbed.to_dict(), "status": "building"})
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        _build(testbed, progress)
    except BaseException:
        progress("rolling back")
        down(spec.name, root)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    return testbed


def _raise_interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def _build(tb: Testbed, progress: Progress) -> None:
    topo, state = tb.topo, tb.state
    progress(f"network: {len(topo.namespaces)} namespaces in {topo.subnet}")
    for argv in topo.commands():
        must(argv)
    progress("cgroups: CPU shares and memory limits")
    for h in topo.hosts:
        try:
            cgroups.create(topo.name, h.name, h.cpu, h.memory, h.cpu_period_us)
        except cgroups.CgroupError as exc:
            raise EmulateError(str(exc)) from None
    progress("ssh: keys and one sshd per host")
    client = state / sshd.CLIENT_KEY
    pub = sshd.keygen(client, f"edgetrain-emulate {topo.name}")
    (state / "authorized_keys").write_text(pub + "\n")
    for h in topo.hosts:
        try:
            sshd.start(state, topo.name, h)
        except sshd.SshdError as exc:
            raise EmulateError(str(exc)) from None
    (state / "known_hosts").write_text(
        "".join(sshd.known_hosts_line(state, h) + "\n" for h in topo.hosts)
    )
    text = hosts_toml(tb)
    parse_hosts_text(text, str(tb.hosts_file))
    tmp = tb.hosts_file.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(tb.hosts_file)
    _write_json(state / STATE_FILE, {**tb.to_dict(), "status": "up"})


def hosts_toml(tb: Testbed) -> str:
    """The ``hosts.toml`` for ``edgetrain launch --hosts``: every host over its own sshd."""
    s = tb.state
    data: dict[str, Any] = {
        "coordinator": tb.topo.gateway_address,
        "bind": tb.topo.gateway_address,
        "python": tb.python,
        "connect_timeout_s": 10,
        "testbed": tb.topo.facts().as_dict(),
        "ssh_options": [
            "-o",
            f"UserKnownHostsFile={s / 'known_hosts'}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "LogLevel=ERROR",
        ],  # fmt: skip
        "hosts": [
            {
                "name": h.name,
                "address": h.address,
                "user": "root",
                "identity": str(s / sshd.CLIENT_KEY),
                "workers": h.workers,
                "site": h.site,
                "labels": list(h.labels),
                "bind": h.address,
                **({"memory": h.memory} if h.memory is not None else {}),
            }
            for h in tb.topo.hosts
        ],
    }
    header = (
        f"# Written by `edgetrain emulate up` for testbed '{tb.spec.name}' ({tb.topo.subnet}).\n"
        f"# Use it with: edgetrain launch RECIPE --hosts {tb.hosts_file}\n"
    )
    return header + to_toml(parse_hosts(data, "hosts.toml"))


def parse_hosts_text(text: str, source: str) -> None:
    from edgetrain.tomlconfig import loads

    parse_hosts(loads(text), source)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)


def _ns_pids(ns: str) -> set[int]:
    return {int(p) for p in _run(["ip", "netns", "pids", ns]).stdout.split() if p.isdigit()}


def _kill_namespace_procs(nss: list[str], timeout: float = 10.0) -> int:
    victims = set().union(*(_ns_pids(n) for n in nss)) if nss else set()
    left = victims
    for sig in (signal.SIGTERM, signal.SIGKILL):
        cgroups.signal_all(left, sig)
        deadline = time.monotonic() + timeout / 2
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = {p for p in left if sshd.alive(p)}
    return len(victims)


@dataclass
class DownReport:
    """What ``down`` removed, and what it could not."""

    name: str
    namespaces: list[str] = field(default_factory=list)
    processes: int = 0
    cgroups: bool = False
    state: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return bool(self.namespaces or self.processes or self.cgroups or self.state)


def down(name: str, root: Path | None = None) -> DownReport:
    """Remove testbed ``name``: processes, namespaces (and with them all veths), cgroups, state.
    Idempotent: whatever is already gone is skipped."""
    report = DownReport(name)
    state = state_dir(name, root)
    gw = None
    with contextlib.suppress(OSError, ValueError, KeyError):
        gw = json.loads((state / STATE_FILE).read_text())["gateway_dev"]
    report.processes += cgroups.kill_all(name)
    owned = [n for n in namespaces() if owned_namespace(name, n)]
    report.processes += _kill_namespace_procs(owned)
    for ns in sorted(owned, key=lambda n: n == f"etb-{name}"):  # hosts first, then the fabric
        done = _run(["ip", "netns", "del", ns])
        if done.returncode == 0:
            report.namespaces.append(ns)
        elif ns in namespaces():
            report.problems.append(f"namespace {ns}: {done.stderr.strip()}")
    if gw and _run(["ip", "link", "show", "dev", gw]).returncode == 0:
        _run(["ip", "link", "del", "dev", gw])
    report.cgroups = bool(cgroups.testbed_dirs(name))
    report.problems += cgroups.remove(name)
    if state.exists():
        shutil.rmtree(state, ignore_errors=True)
        report.state = True
    return report


def list_testbeds(root: Path | None = None) -> list[dict[str, Any]]:
    """The recorded testbeds (state.json contents), by name."""
    base = root or state_root()
    found = []
    if base.is_dir():
        for d in sorted(base.iterdir()):
            with contextlib.suppress(OSError, ValueError):
                found.append(json.loads((d / STATE_FILE).read_text()))
    return found


def load(name: str, root: Path | None = None) -> Testbed:
    """The recorded testbed ``name``."""
    path = state_dir(name, root) / STATE_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        names = [t["name"] for t in list_testbeds(root)]
        hint = f"testbeds up: {', '.join(names)}" if names else "no testbed is up"
        raise EmulateError(f"testbed '{name}' is not up", hint) from None
    except (OSError, ValueError) as exc:
        raise EmulateError(f"testbed state {path} cannot be read: {exc}") from None
    spec = TestbedSpec.model_validate(data["spec"])
    tb = Testbed(spec, build(spec, data["subnet"]), path.parent, data["python"], data["created"])
    return tb


def only_testbed(root: Path | None = None) -> str:
    """The name of the one testbed that is up (for commands given no name)."""
    names = [t["name"] for t in list_testbeds(root)]
    if len(names) == 1:
        return str(names[0])
    if not names:
        raise EmulateError("no testbed is up", "start one with `edgetrain emulate up SPEC`")
    raise EmulateError(f"{len(names)} testbeds are up ({', '.join(names)})", "name one")
