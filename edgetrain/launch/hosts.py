"""The hosts a run spreads over: ``hosts.toml`` or ``-H a:2,b:1``, validated, mapped to workers."""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from edgetrain import tomlconfig
from edgetrain.errors import EdgetrainError
from edgetrain.sizes import parse_size

LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")


class HostsError(EdgetrainError):
    """A hosts file or ``-H`` list that is missing, unreadable or invalid."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class Host(_Model):
    """One ``[[hosts]]`` entry: where to ssh, what to run there, and how many workers."""

    address: str = Field(min_length=1)
    name: str | None = Field(None, min_length=1, pattern=r"^[A-Za-z0-9._@:-]+$")
    user: str | None = Field(None, min_length=1)
    port: int | None = Field(None, ge=1, le=65535)
    identity: str | None = None
    python: str | None = None
    venv: str | None = None
    workdir: str | None = None
    workers: int = Field(1, ge=1)
    labels: list[str] = Field(default_factory=list)
    site: str | None = None
    bind: str | None = None
    announce: str | None = None
    # The machine `address` names (an ssh alias resolves through ~/.ssh/config): what peers
    # and the coordinator reach. Default: what `ssh -G` says, at launch.
    hostname: str | None = None
    # The host's memory in bytes (or "2g", "512m"): a cap planners respect
    # (`edgetrain plan --pipeline --hosts`); launch itself does not enforce it.
    memory: int | None = Field(None, ge=1)

    @field_validator("memory", mode="before")
    @classmethod
    def _size(cls, v: Any) -> Any:
        if isinstance(v, str):
            return parse_size(v)
        return v

    @property
    def reach(self) -> str:
        """The name or address the network knows this host by."""
        return self.hostname or self.address

    @property
    def label(self) -> str:
        return self.name or self.address

    def python_path(self, default: str) -> str:
        """The interpreter to run there: ``python``, else ``venv``/bin/python, else ``default``."""
        if self.python:
            return self.python
        if self.venv:
            return f"{self.venv.rstrip('/')}/bin/python"
        return default

    @property
    def is_loopback(self) -> bool:
        return is_loopback(self.reach)

    def bind_address(self) -> str:
        """Where this host's workers bind their gossip inbox."""
        if self.bind:
            return self.bind
        return "127.0.0.1" if self.is_loopback else "0.0.0.0"

    def announce_address(self) -> str:
        """The address peers use to reach this host's workers."""
        if self.announce:
            return self.announce
        bind = self.bind_address()
        return self.reach if bind in ("0.0.0.0", "::", "*") else bind


class HostsFile(_Model):
    """A whole, validated ``hosts.toml``."""

    coordinator: str | None = None
    bind: str | None = None
    ssh_options: list[str] = Field(default_factory=list)
    ssh_config: str | None = None
    python: str | None = None
    connect_timeout_s: int = Field(10, ge=1, le=600)
    # The emulated testbed's spec, written by `edgetrain emulate up` (read by the report's
    # cost model: each host's CPU share and each link's rate); informational.
    testbed: dict[str, Any] | None = None
    hosts: list[Host] = Field(min_length=1, description="add one [[hosts]] table per machine")

    @property
    def num_slots(self) -> int:
        return sum(h.workers for h in self.hosts)

    def python_for(self, host: Host) -> str:
        return host.python_path(self.python or sys.executable)

    def slots(self, num_workers: int, source: str) -> list[Host]:
        """The host of each worker id: hosts in file order, ``workers`` slots each."""
        if self.num_slots != num_workers:
            raise HostsError(
                f"{source}: the hosts have {self.num_slots} worker slots but the recipe has "
                f"{num_workers} workers",
                "make the hosts' `workers` add up to the recipe's worker count",
            )
        return [h for h in self.hosts for _ in range(h.workers)]

    def coordinator_address(self) -> str:
        """The address the hosts use to reach the launcher's coordinator."""
        if self.coordinator:
            return self.coordinator
        if all(h.is_loopback for h in self.hosts):
            return "127.0.0.1"
        return route_source(self.hosts[0].reach)

    def bind_address(self) -> str:
        """Where the coordinator binds."""
        if self.bind:
            return self.bind
        return "127.0.0.1" if all(h.is_loopback for h in self.hosts) else "0.0.0.0"


def is_loopback(address: str) -> bool:
    if address.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def route_source(address: str, port: int = 22) -> str:
    """This machine's address on the route to ``address`` (no packet is sent)."""
    try:
        family = socket.getaddrinfo(address, port, proto=socket.IPPROTO_UDP)[0]
        with socket.socket(family[0], socket.SOCK_DGRAM) as s:
            s.connect(family[4])
            return str(s.getsockname()[0])
    except OSError as exc:
        raise HostsError(
            f"cannot find this machine's address towards host '{address}': {exc}",
            'set coordinator = "ADDRESS" in the hosts file',
        ) from None


def parse_hosts(data: dict[str, Any], source: str) -> HostsFile:
    """Validate a hosts mapping; raise :class:`HostsError` naming ``source`` and the key."""
    hosts = tomlconfig.validate(HostsFile, data, source, HostsError)
    names = [h.label for h in hosts.hosts]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise HostsError(
            f"{source}: host name '{dup[0]}' is used twice", "give each [[hosts]] a distinct name"
        )
    return hosts


def load_hosts(path: str | os.PathLike[str]) -> tuple[HostsFile, str]:
    """Read and validate a ``hosts.toml``. Returns the hosts and the file's text."""
    data, text = tomlconfig.read_toml(path, "hosts file", HostsError, "check the --hosts path")
    return parse_hosts(data, str(path)), text


def hosts_option(
    path: str | os.PathLike[str] | None, host_list: str | None, remote_python: str | None
) -> tuple[HostsFile, str, str] | None:
    """(hosts, their TOML text, where they came from) from ``--hosts FILE`` or
    ``-H a:2,b:1``; None when neither is given (local processes)."""
    if path is not None and host_list is not None:
        raise HostsError("give --hosts FILE or -H HOST:N,..., not both")
    if path is not None:
        if remote_python is not None:
            raise HostsError("--remote-python goes with -H; set `python` in the hosts file")
        cfg, text = load_hosts(path)
        return cfg, text, str(path)
    if host_list is not None:
        cfg = parse_host_list(host_list, remote_python)
        return cfg, to_toml(cfg), f"-H '{host_list}'"
    return None


def parse_host_list(spec: str, python: str | None = None) -> HostsFile:
    """``a:2,b:1`` (horovodrun style): hosts named and addressed ``a`` and ``b``, 2 and 1 slots."""
    hosts: list[dict[str, Any]] = []
    for item in spec.split(","):
        name, sep, count = item.strip().rpartition(":")
        if not sep:
            name, count = count, "1"
        if not name or not count.isdigit() or int(count) < 1:
            raise HostsError(
                f"-H '{spec}': bad entry '{item.strip()}'", "write HOST:SLOTS[,HOST:SLOTS...]"
            )
        hosts.append({"address": name, "workers": int(count)})
    return parse_hosts({"hosts": hosts, "python": python}, f"-H '{spec}'")


def to_toml(hosts: HostsFile) -> str:
    """A ``hosts.toml`` text equivalent to ``hosts`` (for a ``-H`` list, into the run dir)."""
    lines = [f"{k} = {_toml(v)}" for k, v in _fields(hosts, "hosts").items()]
    for h in hosts.hosts:
        lines += ["", "[[hosts]]", *(f"{k} = {_toml(v)}" for k, v in _fields(h).items())]
    return "\n".join(lines) + "\n"


def _fields(model: BaseModel, *skip: str) -> dict[str, Any]:
    return {
        k: v
        for k, v in model.model_dump().items()
        if k not in skip and v is not None and v != [] and k in model.model_fields_set
    }


def _toml(value: Any) -> str:
    return tomlconfig.inline(value)


@dataclass(frozen=True)
class Placement:
    """Where one worker runs: its host, and the addresses its sockets bind and announce."""

    host: str
    site: str | None
    labels: tuple[str, ...]
    bind: str
    announce: str

    @classmethod
    def of(cls, host: Host) -> Placement:
        return cls(
            host.label, host.site, tuple(host.labels), host.bind_address(), host.announce_address()
        )
