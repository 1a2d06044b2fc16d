"""Network namespaces joined by a veth pair: reachability, tbf limits and cleanup."""

from __future__ import annotations

import subprocess
import sys

import pytest

from edgetrain.emulate import netns
from tests.helpers.skips import skip_or_fail

ECHO_SERVER = """
import socket, sys
s = socket.socket(); s.bind((sys.argv[1], 0)); s.listen(1)
print(s.getsockname()[1], flush=True)
c, _ = s.accept(); c.sendall(c.recv(64).upper()); c.close()
"""

ECHO_CLIENT = """
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
c.sendall(b"ping"); print(c.recv(64).decode())
"""


@pytest.fixture(autouse=True)
def _need_netns() -> None:
    reason = netns.netns_unavailable()
    if reason is not None:
        skip_or_fail(reason)


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def test_ns_command_prefixes_ip_netns_exec() -> None:
    assert netns.ns_command("et-x", ["echo", "hi"]) == ["ip", "netns", "exec", "et-x", "echo", "hi"]


def test_veth_pair_connects_two_namespaces_and_cleans_up() -> None:
    with netns.veth_pair() as link:
        assert {link.ns_a, link.ns_b} <= _namespaces()
        assert (
            link.ns_a.startswith("et-")
            and link.addr_a.rsplit(".", 1)[0] == link.addr_b.rsplit(".", 1)[0]
        )
        qdisc = subprocess.run(
            netns.ns_command(link.ns_a, ["tc", "qdisc", "show", "dev", link.dev_a]),
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert "tbf" in qdisc and "100Mbit" in qdisc
        server = subprocess.Popen(
            netns.ns_command(link.ns_b, [sys.executable, "-c", ECHO_SERVER, link.addr_b]),
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert server.stdout is not None
            port = server.stdout.readline().strip()
            reply = subprocess.run(
                netns.ns_command(
                    link.ns_a, [sys.executable, "-c", ECHO_CLIENT, link.addr_b, port]
                ),
                capture_output=True, text=True, timeout=30, check=True,
            )  # fmt: skip
            assert reply.stdout.strip() == "PING"
            assert server.wait(timeout=10) == 0
        finally:
            server.kill()
            server.wait()
    assert not {link.ns_a, link.ns_b} & _namespaces()


def test_veth_pair_without_rate_has_no_tbf_and_two_pairs_get_distinct_subnets() -> None:
    with netns.veth_pair(rate=None) as one, netns.veth_pair(rate=None) as two:
        qdisc = subprocess.run(
            netns.ns_command(one.ns_a, ["tc", "qdisc", "show", "dev", one.dev_a]),
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert "tbf" not in qdisc
        assert one.addr_a.rsplit(".", 1)[0] != two.addr_a.rsplit(".", 1)[0]


def test_veth_pair_removes_everything_when_the_body_raises() -> None:
    with pytest.raises(RuntimeError, match="boom"), netns.veth_pair() as link:
        raise RuntimeError("boom")
    assert not {link.ns_a, link.ns_b} & _namespaces()


def test_bad_rate_fails_cleanly_without_leftovers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns.secrets, "token_hex", lambda n: "badr8e")
    with pytest.raises(netns.NetnsError, match="tc qdisc"), netns.veth_pair(rate="not-a-rate"):
        pass
    assert not {"et-badr8e-a", "et-badr8e-b"} & _namespaces()
