"""Where a batch of runs goes: a testbed of the plan (its hosts' CPU shares, its sites, its
spec) brought up as an emulated testbed and verified, or, without one, local processes slowed
down in the hosts' CPU ratios. The specs and traces a reproduction writes go through the one
TOML writer and are read back by their loaders first."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgetrain.emulate.spec import load_spec
from edgetrain.emulate.trace import load_trace
from edgetrain.experiment.testbed import Testbed, testbed, verify_markdown
from edgetrain.tomlconfig import dumps, loads

if TYPE_CHECKING:
    from edgetrain.runtime.setting_build import TestbedFacts

Say = Callable[[str], None]


@dataclass(frozen=True)
class BedSpec:
    """A testbed of the plan: its name, each host's CPU share and site (in worker order), and
    its spec: a file as it is, or a document written into ``OUT/testbeds``."""

    name: str
    shares: tuple[float, ...] = ()
    sites: tuple[str, ...] = ()
    spec: Path | Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Bed:
    """A testbed brought up (``tb``), or local processes standing in for it (``tb`` None)."""

    spec: BedSpec
    tb: Testbed | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def hosts(self) -> Path | None:
        """The emulated testbed's hosts file (None: local processes)."""
        return self.tb.hosts_file if self.tb is not None else None

    def workers(self) -> list[dict[str, Any]]:
        """``[[workers]]``: one a host of the emulated testbed, or a local process a host,
        slowed down in the hosts' CPU ratios (the fastest at 1, four decimals)."""
        if self.tb is not None:
            return [{"count": len(self.spec.shares)}]
        fastest = max(self.spec.shares)
        return [
            {"host": "localhost", "slowdown": Decimal(f"{fastest / s:.4f}")}
            for s in self.spec.shares
        ]

    def command(self, host: str, args: Sequence[str]) -> list[str]:
        """The argv that runs ``python ARGS`` on ``host`` of the testbed (over ssh, with the
        host's interpreter), or here with this interpreter for local processes."""
        if self.hosts is None:
            return [sys.executable, *args]
        from edgetrain.launch.hosts import load_hosts
        from edgetrain.launch.ssh_argv import ssh_command

        hosts, _ = load_hosts(self.hosts)
        entry = next(h for h in hosts.hosts if h.label == host)
        return ssh_command(hosts, entry, " ".join([hosts.python_for(entry), *args]))

    def sites(self) -> dict[str, Any]:
        """``sites = [...]`` for a family section: local processes have no hosts file, so the
        recipe names their sites (when there are several)."""
        if self.tb is None and len(set(self.spec.sites)) > 1:
            return {"sites": list(self.spec.sites)}
        return {}


@contextmanager
def bring_up(
    spec: BedSpec,
    out: Path,
    local: bool,
    say: Say,
    tables: dict[str, str] | None = None,
    label: str | None = None,
    file: str | None = None,
    about: str = "",
) -> Iterator[Bed]:
    """The bed for a batch: local processes, or ``spec`` brought up and verified (its spec
    written to ``OUT/testbeds/<file>.toml`` when it is a document), its verification table
    kept in ``tables[label]`` for the report, and brought down after the batch."""
    if local:
        yield Bed(spec)
        return
    path = spec_file(spec, out, file)
    say(f"bringing up and verifying testbed {spec.name}{about}")
    with testbed(path, spec.name) as tb:
        if tables is not None:
            tables[label or spec.name] = verify_markdown(tb)
        yield Bed(spec, tb)


def spec_file(spec: BedSpec, out: Path, file: str | None = None) -> Path:
    """The spec's file: the one it names, or its document written into ``OUT/testbeds``;
    either read by the spec loader first."""
    if spec.spec is None:
        raise ValueError(f"testbed {spec.name} has no spec to bring up")
    if isinstance(spec.spec, Path):
        path = spec.spec
    else:
        path = out / "testbeds" / f"{file or spec.name}.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dumps(spec.spec))
    load_spec(path)
    return path


def spec_doc(path: Path) -> dict[str, Any]:
    """A committed spec as a document, to derive a variant from."""
    return loads(path.read_text())


def hosts_of(doc: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every host table of a spec document, site by site (to change in place)."""
    for site in doc.get("sites", []):
        yield from site.get("hosts", [])


def access_at(path: Path, rate: str) -> dict[str, Any]:
    """A committed spec with every host's access link at ``rate`` (a batch's bandwidth)."""
    doc = spec_doc(path)
    for host in hosts_of(doc):
        if "access" in host:
            host["access"] = rate
    return doc


def write_trace(path: Path, text: str) -> Path:
    """A trace's text written to ``path`` and read back by the trace loader."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    load_trace(path)
    return path


def trace_toml(changes: list[dict[str, Any]], loop: bool = False) -> str:
    """A trace: ``loop`` and its ``[[changes]]``."""
    return dumps({"loop": loop, "changes": changes})


def facts_of(spec: BedSpec, local: bool) -> TestbedFacts:
    """The testbed's facts as ``emulate up`` would write them (no quota for local processes).
    Pure but for reading a spec file."""
    from edgetrain.emulate.spec import parse_spec
    from edgetrain.emulate.topology import spec_facts

    if isinstance(spec.spec, Path):
        parsed = load_spec(spec.spec)
    else:
        parsed = parse_spec(dict(spec.spec or {}), spec.name)
    facts = spec_facts(parsed)
    if local:
        hosts = tuple(replace(h, quota_period_s=None) for h in facts.hosts)
        facts = replace(facts, hosts=hosts)
    return facts
