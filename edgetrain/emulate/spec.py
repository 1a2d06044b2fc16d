"""Testbed specs (TOML): sites of hosts, each host's CPU share, memory and links; validated.

A spec describes an edge setting, not how it is built::

    name = "dlion-4"
    wan = "100mbit"                 # default uplink of every site (between sites)
    cpu_period_ms = 100             # CPU quota period of every host (cpu.cfs_period_us), 1..1000

    [[sites]]
    name = "cloud-a"
    lan = "1gbit"                   # each host's link inside the site

    [[sites.hosts]]
    name = "fast"
    cpu = 0.9                       # cores (cgroup v1 cpu.cfs_quota_us)
    memory = "2g"                   # optional cgroup memory limit
    access = "50mbit"               # optional access link (Wi-Fi-like), capped by the LAN
    workers = 1                     # worker slots in the hosts.toml it writes
    cpu_period_ms = 10              # optional: this host's quota period (default: the testbed's)

Rates are tc rates (``kbit``, ``mbit``, ``gbit``, or bits/s); they are parsed here so that a
bad one is caught before anything is built. A host's quota is ``cpu`` x the period each
period: at 100 ms (the kernel's default) a 0.3-core host runs 30 ms and then stalls 70 ms; a
short period spreads the same share finely. The kernel takes no quota under 1 ms, so ``cpu``
x ``cpu_period_ms`` must be at least 1 ms.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from edgetrain import tomlconfig
from edgetrain.errors import EdgetrainError
from edgetrain.sizes import parse_size as parse_size

NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,19}$"
NAME_RULE = "use 1-20 lower-case letters, digits and '-' (starting with a letter or digit)"
MIN_RATE_BPS = 100_000  # 100 kbit/s: tbf below that is mostly burst
MAX_RATE_BPS = 100_000_000_000
DEFAULT_CPU_PERIOD_MS = 100  # edgetrain.cgroups.CFS_PERIOD_US, the kernel's default
MIN_QUOTA_MS = 1.0  # the kernel's least cpu.cfs_quota_us (edgetrain.cgroups.MIN_QUOTA_US)
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(bit|kbit|mbit|gbit|bps)?\s*$", re.IGNORECASE)
_RATE_UNIT = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bps": 8}


class SpecError(EdgetrainError):
    """A testbed spec that is missing, unreadable or invalid."""


def parse_rate(value: str | int | float) -> int:
    """A tc-style rate (``"100mbit"``, ``"1gbit"``, ``"500kbit"``, bits/s as a number) in bit/s."""
    if isinstance(value, bool):
        raise ValueError("a rate is a string such as '100mbit'")
    if isinstance(value, (int, float)):
        bps = float(value)
    else:
        m = _RATE.match(value)
        if m is None:
            raise ValueError(f"rate {value!r} is not a rate; write it like '100mbit' or '1gbit'")
        bps = float(m.group(1)) * _RATE_UNIT[(m.group(2) or "bit").lower()]
    if not MIN_RATE_BPS <= bps <= MAX_RATE_BPS:
        raise ValueError(f"rate {value!r} is outside 100kbit..100gbit")
    return int(bps)


def format_rate(bps: float) -> str:
    """``1000000000`` -> ``1 Gbit/s``."""
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:.3g} {unit}"
    return f"{bps:.0f} bit/s"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HostSpec(_Model):
    """One emulated device."""

    name: str = Field(pattern=NAME_PATTERN, description=NAME_RULE)
    cpu: float = Field(ge=0.05, le=256, description="CPU share in cores")
    memory: int | None = None
    access: int | None = None
    workers: int = Field(1, ge=1, le=64)
    labels: list[str] = Field(default_factory=list)
    cpu_period_ms: int | None = Field(None, ge=1, le=1000, strict=True)

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, v: Any) -> Any:
        return None if v is None else parse_size(v)

    @field_validator("access", mode="before")
    @classmethod
    def _access(cls, v: Any) -> Any:
        return None if v is None else parse_rate(v)


class SiteSpec(_Model):
    """A site: hosts on one LAN, joined to the other sites by its WAN uplink."""

    name: str = Field(pattern=NAME_PATTERN, description=NAME_RULE)
    lan: int
    wan: int | None = None
    hosts: list[HostSpec] = Field(min_length=1)

    @field_validator("lan", "wan", mode="before")
    @classmethod
    def _rates(cls, v: Any) -> Any:
        return None if v is None else parse_rate(v)


class TestbedSpec(_Model):
    """A whole testbed."""

    name: str = Field(pattern=NAME_PATTERN, description=NAME_RULE)
    description: str = ""
    wan: int | None = None
    subnet: str | None = None
    cpu_period_ms: int = Field(DEFAULT_CPU_PERIOD_MS, ge=1, le=1000, strict=True)
    sites: list[SiteSpec] = Field(min_length=1)

    @field_validator("wan", mode="before")
    @classmethod
    def _wan(cls, v: Any) -> Any:
        return None if v is None else parse_rate(v)

    @field_validator("subnet")
    @classmethod
    def _subnet(cls, v: str | None) -> str | None:
        if v is None:
            return v
        net = ipaddress.ip_network(v, strict=True)
        if net.version != 4 or net.prefixlen != 24 or not net.is_private:
            raise ValueError(f"subnet {v!r} must be a private IPv4 /24 such as '10.232.7.0/24'")
        return str(net)

    @model_validator(mode="after")
    def _names(self) -> TestbedSpec:
        sites = [s.name for s in self.sites]
        hosts = [h.name for s in self.sites for h in s.hosts]
        for kind, names in (("site", sites), ("host", hosts)):
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise ValueError(f"{kind} name '{dup[0]}' is used twice; names must be distinct")
        if len(hosts) > 200:
            raise ValueError(f"{len(hosts)} hosts; a testbed holds at most 200")
        if len(self.sites) > 1:
            missing = [s.name for s in self.sites if s.wan is None and self.wan is None]
            if missing:
                raise ValueError(
                    f"site '{missing[0]}' has no WAN rate; set wan at the top or in the site"
                )
        for _, h in self.hosts:
            period = self.period_of(h)
            if h.cpu * period < MIN_QUOTA_MS - 1e-9:
                least = MIN_QUOTA_MS / h.cpu
                raise ValueError(
                    f"host '{h.name}': cpu {h.cpu:g} x cpu_period_ms {period} is a quota under "
                    f"the kernel's least (1 ms); raise cpu_period_ms to at least {least:.0f}"
                )
        return self

    def period_of(self, host: HostSpec) -> int:
        """The host's CPU quota period in ms (its own, else the testbed's)."""
        return host.cpu_period_ms if host.cpu_period_ms is not None else self.cpu_period_ms

    def wan_of(self, site: SiteSpec) -> int | None:
        """The site's uplink rate (its own, else the testbed's), or None (one site: no WAN)."""
        if len(self.sites) == 1:
            return None
        return site.wan if site.wan is not None else self.wan

    @property
    def hosts(self) -> list[tuple[SiteSpec, HostSpec]]:
        return [(s, h) for s in self.sites for h in s.hosts]

    def with_name(self, name: str | None) -> TestbedSpec:
        if name is None:
            return self
        try:
            return TestbedSpec.model_validate({**self.model_dump(), "name": name})
        except ValidationError:
            raise SpecError(
                f"--name {name!r} is not a testbed name",
                "use 1-20 lower-case letters, digits and '-'",
            ) from None


def parse_spec(data: dict[str, Any], source: str) -> TestbedSpec:
    """Validate a spec mapping; raise :class:`SpecError` naming ``source`` and the key."""
    if "name" not in data and source.endswith(".toml"):
        data = {**data, "name": Path(source).stem}
    return tomlconfig.validate(TestbedSpec, data, source, SpecError)


def load_spec(path: str | Path) -> TestbedSpec:
    """Read and validate a testbed spec file."""
    data, _ = tomlconfig.read_toml(
        path, "testbed spec", SpecError, "see recipes/testbeds/ for examples"
    )
    return parse_spec(data, str(path))
