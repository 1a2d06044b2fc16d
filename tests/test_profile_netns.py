"""Link probe across two network namespaces joined by a 100 Mbit/s tbf-limited veth pair."""

from __future__ import annotations

import json
import signal
import subprocess

import pytest

from edgetrain.emulate import netns
from tests.helpers.profile_cli import cli_argv
from tests.helpers.skips import skip_or_fail

RATE_BPS = 100e6 / 8  # tc's 100mbit, in bytes/s


@pytest.fixture(autouse=True)
def _need_netns() -> None:
    reason = netns.netns_unavailable()
    if reason is not None:
        skip_or_fail(reason)


def _endpoint(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("}"):
            break
    return str(json.loads("".join(lines))["endpoint"])


def test_probe_measures_a_100mbit_tbf_link() -> None:
    with netns.veth_pair("100mbit") as link:
        serve = cli_argv("profile", "serve", "--bind", link.addr_b, "--format", "json")
        server = subprocess.Popen(
            netns.ns_command(link.ns_b, serve), stdout=subprocess.PIPE, text=True
        )
        try:
            endpoint = _endpoint(server)
            assert endpoint.startswith(f"tcp://{link.addr_b}:")
            probe = cli_argv(
                "profile", "--peer", endpoint, "--probe-max-mib", "4", "--format", "json"
            )
            done = subprocess.run(
                netns.ns_command(link.ns_a, probe), capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 0, done.stderr
            measured = json.loads(done.stdout)["links"][0]
            server.send_signal(signal.SIGTERM)
            assert server.wait(timeout=10) == 0
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
    assert measured["bandwidth_Bps"] == pytest.approx(RATE_BPS, rel=0.10), measured
    assert 0 < measured["rtt_s"] < 0.05 and measured["dt_s"] >= 0
