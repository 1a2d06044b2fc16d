"""Traces: a schedule of changes to a running testbed's link rates and CPU shares over time.

A trace file (TOML) lists changes, each at a time in seconds from the start::

    loop = false                    # start over after the last change
    [[changes]]
    at = 30
    wan = "cloud-b"                 # a site's WAN uplink ...
    rate = "20mbit"
    [[changes]]
    at = 30
    link = "slow1"                  # ... a host's link ...
    rate = "10mbit"
    [[changes]]
    at = 60
    cpu = "fast"                    # ... or a host's CPU share (co-running load)
    share = 0.3

``plan`` turns it into timed actions against one testbed (pure); ``play`` applies them with
``tc qdisc replace`` and the cgroup's ``cpu.cfs_quota_us``, and puts the spec's values back
when it ends or is interrupted.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from edgetrain import tomlconfig
from edgetrain.emulate import cgroups
from edgetrain.emulate.spec import SpecError, format_rate, parse_rate
from edgetrain.emulate.topology import Topology, host_tbf, tbf


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Change(_Model):
    """One change: at ``at`` s, set ``rate`` on a site's ``wan`` or a host's ``link``, or set
    a host's ``cpu`` share to ``share``."""

    at: float = Field(ge=0)
    wan: str | None = None
    link: str | None = None
    cpu: str | None = None
    rate: int | None = None
    share: float | None = Field(None, ge=0.01, le=256)

    @field_validator("rate", mode="before")
    @classmethod
    def _rate(cls, v: Any) -> Any:
        return None if v is None else parse_rate(v)

    @model_validator(mode="after")
    def _one_target(self) -> Change:
        targets = [t for t in ("wan", "link", "cpu") if getattr(self, t) is not None]
        if len(targets) != 1:
            raise ValueError("each change names exactly one of wan = SITE, link = HOST, cpu = HOST")
        if targets[0] == "cpu" and (self.share is None or self.rate is not None):
            raise ValueError("a cpu change sets share = CORES (and no rate)")
        if targets[0] != "cpu" and (self.rate is None or self.share is not None):
            raise ValueError(f"a {targets[0]} change sets rate = RATE (and no share)")
        return self


class Trace(_Model):
    loop: bool = False
    changes: list[Change] = Field(min_length=1)


@dataclass(frozen=True)
class Action:
    """One timed change against a testbed: tc commands, or a CPU share for a host."""

    at: float
    what: str
    commands: tuple[tuple[str, ...], ...] = ()
    cpu_host: str | None = None
    share: float | None = None


def load_trace(path: str | Path) -> Trace:
    trace, _ = tomlconfig.load_toml(
        path, Trace, "trace", SpecError, "see recipes/testbeds/traces/ for examples"
    )
    return trace


def _link(topo: Topology, host: str, bps: int) -> tuple[tuple[str, ...], ...]:
    h = topo.host(host)
    return (tuple(host_tbf(h.ns, bps)), tuple(host_tbf(topo.fabric_ns, bps, h.port)))


def _wan(topo: Topology, site: str, bps: int) -> tuple[tuple[str, ...], ...]:
    s = topo.site(site)
    return (tuple(tbf(topo.fabric_ns, s.uplink, bps)), tuple(tbf(topo.fabric_ns, s.wan_port, bps)))


def plan(trace: Trace, topo: Topology, source: str) -> list[Action]:
    """The trace's changes as actions on ``topo``, in time order; unknown names are errors."""
    hosts = [h.name for h in topo.hosts]
    actions = []
    for c in sorted(trace.changes, key=lambda c: c.at):
        where = f"{source}: change at {c.at:g} s"
        if c.cpu is not None:
            _known(c.cpu, hosts, "host", where)
            assert c.share is not None
            what = f"cpu {c.cpu} = {c.share:g}"
            actions.append(Action(c.at, what, cpu_host=c.cpu, share=c.share))
        elif c.link is not None:
            _known(c.link, hosts, "host", where)
            assert c.rate is not None
            what = f"link {c.link} = {format_rate(c.rate)}"
            actions.append(Action(c.at, what, _link(topo, c.link, c.rate)))
        else:
            assert c.wan is not None and c.rate is not None
            wan_sites = [s.name for s in topo.sites if s.wan_bps is not None]
            _known(c.wan, wan_sites, "site with a WAN uplink", where)
            actions.append(Action(c.at, f"wan {c.wan} = {format_rate(c.rate)}",
                                  _wan(topo, c.wan, c.rate)))  # fmt: skip
    return actions


def _known(name: str, names: list[str], kind: str, where: str) -> None:
    if name not in names:
        raise SpecError(f"{where}: no {kind} '{name}' in the testbed", f"use one of {names}")


def restore(topo: Topology) -> list[Action]:
    """Actions that put every link rate and CPU share back to the spec's values."""
    out = [Action(0, f"cpu {h.name} = {h.cpu:g}", cpu_host=h.name, share=h.cpu) for h in topo.hosts]
    out += [Action(0, f"link {h.name}", _link(topo, h.name, h.link_bps)) for h in topo.hosts]
    out += [Action(0, f"wan {s.name}", _wan(topo, s.name, s.wan_bps))
            for s in topo.sites if s.wan_bps is not None]  # fmt: skip
    return out


def apply(topo: Topology, action: Action, run: Callable[[list[str]], None]) -> None:
    for argv in action.commands:
        run(list(argv))
    if action.cpu_host is not None and action.share is not None:
        period = topo.host(action.cpu_host).cpu_period_us
        cgroups.set_cpu(topo.name, action.cpu_host, action.share, period)


def play(
    trace: Trace,
    actions: list[Action],
    topo: Topology,
    run: Callable[[list[str]], None],
    stop: threading.Event,
    log: Path | None = None,
    on_change: Callable[[float, Action], None] = lambda _t, _a: None,
    speed: float = 1.0,
) -> int:
    """Apply ``actions`` at their times (``speed`` x faster) until the end or ``stop``;
    return how many were applied. With ``trace.loop`` it starts over after the last one."""
    applied = 0
    span = max(a.at for a in actions)
    t0 = time.monotonic()
    offset = 0.0
    while not stop.is_set():
        for action in actions:
            due = t0 + (offset + action.at) / speed
            if stop.wait(max(0.0, due - time.monotonic())):
                return applied
            apply(topo, action, run)
            applied += 1
            elapsed = time.monotonic() - t0
            on_change(elapsed, action)
            if log is not None:
                entry = {"t": elapsed, "at": action.at, "change": action.what}
                with log.open("a") as f:
                    f.write(json.dumps(entry) + "\n")
        if not trace.loop:
            break
        offset += span if span > 0 else 1.0
    return applied
