"""Two network namespaces joined by a veth pair, optionally rate-limited with ``tc tbf``."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import ipaddress
import logging
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

PREFIX = "et-"
SUBNET_BASE = "10.231"
LOCK_FILE = Path("/tmp/edgetrain-netns.lock")
_TIMEOUT_S = 20.0


class NetnsError(RuntimeError):
    """An ``ip``/``tc`` command failed while building the emulated link."""


@dataclass(frozen=True)
class VethLink:
    """The two namespaces, their veth ends and IPv4 addresses (no prefix length)."""

    ns_a: str
    ns_b: str
    dev_a: str
    dev_b: str
    addr_a: str
    addr_b: str


def ns_command(ns: str, argv: Sequence[str]) -> list[str]:
    """The argv that runs ``argv`` inside namespace ``ns``."""
    return ["ip", "netns", "exec", ns, *argv]


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), capture_output=True, text=True, timeout=_TIMEOUT_S, check=False
    )


def _must(argv: Sequence[str]) -> None:
    done = _run(argv)
    if done.returncode != 0:
        msg = (done.stderr or done.stdout).strip().splitlines()
        raise NetnsError(f"{' '.join(argv)}: {msg[-1] if msg else 'failed'}")


@functools.lru_cache(maxsize=1)
def netns_unavailable() -> str | None:
    """Why namespaces cannot be used here (not root, no iproute2, no permission), or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` not found; install iproute2 (apt-get install -y iproute2)"
    probe = f"{PREFIX}probe-{os.getpid()}-{secrets.token_hex(3)}"
    try:
        _must(["ip", "netns", "add", probe])
    except (NetnsError, OSError, subprocess.SubprocessError) as exc:
        return f"cannot create a network namespace: {exc}"
    try:
        _must(["ip", "-n", probe, "link", "add", "etp0", "type", "veth", "peer", "name", "etp1"])
    except (NetnsError, OSError, subprocess.SubprocessError) as exc:
        return f"cannot create a veth pair: {exc}"
    finally:
        _run(["ip", "netns", "del", probe])
    return None


def _namespaces() -> list[str]:
    done = _run(["ip", "netns", "list"])
    return [line.split()[0] for line in done.stdout.splitlines() if line.strip()]


def _used_subnets() -> set[int]:
    """Third octets of 10.231.x.0/24 already used by our namespaces."""
    used: set[int] = set()
    for ns in _namespaces():
        if not ns.startswith(PREFIX):
            continue
        out = _run(["ip", "-n", ns, "-o", "-4", "addr", "show"]).stdout
        for word in out.split():
            if word.startswith(SUBNET_BASE + "."):
                used.add(int(ipaddress.ip_interface(word).ip.packed[2]))
    return used


def _free_subnet() -> int:
    used = _used_subnets()
    start = secrets.randbelow(254) + 1
    for i in range(254):
        octet = (start + i - 1) % 254 + 1
        if octet not in used:
            return octet
    raise NetnsError(f"all 254 subnets {SUBNET_BASE}.x.0/24 are in use by {PREFIX}* namespaces")


def _setup(link: VethLink, rate: str | None, burst: str, latency: str) -> None:
    _must(["ip", "netns", "add", link.ns_a])
    _must(["ip", "netns", "add", link.ns_b])
    _must(["ip", "link", "add", link.dev_a, "netns", link.ns_a, "type", "veth",
           "peer", "name", link.dev_b, "netns", link.ns_b])  # fmt: skip
    for ns, dev, addr in (
        (link.ns_a, link.dev_a, link.addr_a),
        (link.ns_b, link.dev_b, link.addr_b),
    ):
        _must(["ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev])
        _must(["ip", "-n", ns, "link", "set", "lo", "up"])
        _must(["ip", "-n", ns, "link", "set", dev, "up"])
        if rate is not None:
            _must(ns_command(ns, ["tc", "qdisc", "add", "dev", dev, "root", "tbf",
                                  "rate", rate, "burst", burst, "latency", latency]))  # fmt: skip


def _teardown(link: VethLink) -> None:
    for ns in (link.ns_a, link.ns_b):
        done = _run(["ip", "netns", "del", ns])
        if done.returncode != 0 and ns in _namespaces():
            log.warning("could not delete namespace %s: %s", ns, done.stderr.strip())


@contextlib.contextmanager
def veth_pair(
    rate: str | None = "100mbit", burst: str = "64kb", latency: str = "50ms"
) -> Iterator[VethLink]:
    """Create two fresh namespaces joined by a veth pair; remove both on exit, whatever happens."""
    token = secrets.token_hex(3)
    LOCK_FILE.touch(exist_ok=True)
    with LOCK_FILE.open("r") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        octet = _free_subnet()
        link = VethLink(
            ns_a=f"{PREFIX}{token}-a",
            ns_b=f"{PREFIX}{token}-b",
            dev_a=f"et{token}a",
            dev_b=f"et{token}b",
            addr_a=f"{SUBNET_BASE}.{octet}.1",
            addr_b=f"{SUBNET_BASE}.{octet}.2",
        )
        try:
            _setup(link, rate, burst, latency)
        except BaseException:
            _teardown(link)
            raise
    try:
        yield link
    finally:
        _teardown(link)
