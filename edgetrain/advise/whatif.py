"""``--what-if`` changes to an :class:`~edgetrain.advise.environment.Environment`, predicted
again without measuring anything. Pure.

``bandwidth=RATE`` every host's link and every site's WAN; ``wan=RATE`` the sites' WANs only;
``rtt=TIME`` the round trip between hosts; ``cpu=CORES`` every host's CPU share; ``memory=SIZE``
every host's memory; ``hosts=+N`` N more hosts like the last, ``hosts=-N`` N fewer, ``hosts=N``
exactly N. Several changes: repeat the option, or separate them with commas.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from edgetrain.advise.environment import Environment
from edgetrain.runtime.setting_build import HostFacts

__all__ = ["KEYS", "Change", "WhatIfError", "apply", "parse", "rate"]

KEYS = ("bandwidth", "wan", "rtt", "cpu", "memory", "hosts")
_TIME = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s)?\s*$")
_HOSTS = re.compile(r"^\s*([+-]?)(\d+)\s*$")
MAX_HOSTS = 256


class WhatIfError(ValueError):
    """A change that cannot be read or applied (its message names it and the form)."""


@dataclass(frozen=True)
class Change:
    """One change: its key and the value as written."""

    key: str
    value: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}"


def parse(texts: list[str] | tuple[str, ...]) -> list[Change]:
    """``["bandwidth=10mbit,hosts=+2"]`` -> two changes, each checked."""
    out = []
    for text in texts:
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            key, sep, value = part.partition("=")
            key, value = key.strip().lower(), value.strip()
            if not sep or key not in KEYS or not value:
                raise WhatIfError(
                    f"--what-if '{part}': expected KEY=VALUE with KEY one of {', '.join(KEYS)} "
                    "(e.g. bandwidth=10mbit, rtt=20ms, hosts=+2)"
                )
            change = Change(key, value)
            _value(change)  # checked now, before anything runs
            out.append(change)
    return out


def _value(change: Change) -> float:
    from edgetrain.emulate.spec import parse_rate
    from edgetrain.sizes import parse_size

    key, value = change.key, change.value
    try:
        if key in ("bandwidth", "wan"):
            return float(parse_rate(value))
        if key == "memory":
            return float(parse_size(value))
        if key == "cpu":
            cores = float(value)
            if not 0.01 <= cores <= 1024:
                raise ValueError("cpu is a share of cores from 0.01 to 1024")
            return cores
        if key == "rtt":
            m = _TIME.match(value)
            if m is None:
                raise ValueError("write a round trip like 20ms, 500us or 0.1s")
            scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2) or "s"]
            return float(m.group(1)) * scale
        m = _HOSTS.match(value)
        if m is None:
            raise ValueError("write hosts=+2, hosts=-1 or hosts=6")
        return float(m.group(2)) * (-1 if m.group(1) == "-" else 1)
    except ValueError as exc:
        raise WhatIfError(f"--what-if {change}: {exc}") from None


def rate(change: Change) -> float:
    """A bandwidth or WAN change's rate in bits/s."""
    return _value(change)


def apply(env: Environment, changes: list[Change]) -> Environment:
    """``env`` with every change made, in order (WhatIfError: a host count below 1 or above
    :data:`MAX_HOSTS`)."""
    for change in changes:
        env = _one(env, change)
    return env


def _one(env: Environment, change: Change) -> Environment:
    value = _value(change)
    facts = env.facts
    hosts = list(facts.hosts)
    if change.key == "bandwidth":
        hosts = [replace(h, link_bps=int(value)) for h in hosts]
        wan = {site: (int(value) if r else r) for site, r in facts.wan_bps.items()}
        facts = replace(facts, hosts=tuple(hosts), wan_bps=wan)
    elif change.key == "wan":
        sites = {h.site for h in hosts if h.site}
        if len(sites) < 2:
            raise WhatIfError(f"--what-if {change}: these hosts are on one site (no WAN)")
        facts = replace(facts, wan_bps=dict.fromkeys(sites | set(facts.wan_bps), int(value)))
    elif change.key == "rtt":
        return replace(env, latency_s=value / 2, source=env.source)
    elif change.key == "cpu":
        facts = replace(facts, hosts=tuple(replace(h, cpu=value) for h in hosts))
    elif change.key == "memory":
        facts = replace(facts, hosts=tuple(replace(h, memory=int(value)) for h in hosts))
    else:
        facts = replace(facts, hosts=tuple(_resize(hosts, change, int(value))))
    return replace(env, facts=facts)


def _resize(hosts: list[HostFacts], change: Change, n: int) -> list[HostFacts]:
    relative = change.value.strip()[:1] in "+-"
    count = len(hosts) + n if relative else n
    if not 1 <= count <= MAX_HOSTS:
        raise WhatIfError(
            f"--what-if {change}: that leaves {count} hosts; keep between 1 and {MAX_HOSTS}"
        )
    names = {h.name for h in hosts}
    out = hosts[:count]
    last = hosts[-1]
    k = 1
    while len(out) < count:
        name = f"{last.name}+{k}"
        k += 1
        if name not in names:
            out.append(replace(last, name=name))
            names.add(name)
    return out
