"""Link probe: the overhead fit, an in-process probe on loopback, and the serve command."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from collections.abc import Iterator

import pytest

from edgetrain.profile.probe import (
    ProbeConfig,
    ProbeError,
    ProbeServer,
    check_endpoint,
    fit_overhead,
    probe_link,
)
from tests.helpers.profile_cli import cli_argv

SMALL = ProbeConfig(pings=5, sizes=(2**12, 2**16, 2**20), repeats=2, connect_timeout_s=5)


def test_fit_recovers_dt_and_bandwidth() -> None:
    sizes = [2**16, 2**18, 2**20, 2**22]
    times = [0.002 + b / 1e7 for b in sizes]
    dt, bw = fit_overhead(sizes, times)
    assert dt == pytest.approx(0.002, rel=1e-6) and bw == pytest.approx(1e7, rel=1e-6)
    # a largest transfer faster than the one before: bytes over time, dt the mean residual
    assert fit_overhead([200, 100], [1.0, 2.0]) == (0.75, 200.0)


@pytest.fixture
def server() -> Iterator[ProbeServer]:
    stop = threading.Event()
    with ProbeServer("127.0.0.1") as srv:
        thread = threading.Thread(target=srv.serve, args=(stop, 20), daemon=True)
        thread.start()
        yield srv
        stop.set()
        thread.join(timeout=10)
        assert not thread.is_alive()


def test_in_process_probe_on_loopback(server: ProbeServer) -> None:
    link = probe_link(server.endpoint, SMALL)
    assert link.peer == server.endpoint
    assert 0 < link.rtt_s < 1 and link.dt_s >= 0
    assert link.bandwidth_Bps > 1e6  # loopback moves far more than 1 MB/s
    assert list(link.sizes) == [2**12, 2**16, 2**20] and len(link.times_s) == 3
    assert server.traffic.bytes_received >= 3 * (2**12 + 2**16 + 2**20)  # warm-up + 2
    d = link.to_dict()
    assert {"peer", "bandwidth_Bps", "rtt_s", "dt_s"} <= set(d)


def test_a_bad_message_is_dropped_not_fatal(server: ProbeServer) -> None:
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.connect(server.endpoint)
    sock.send_multipart([b"not json", b"x"])
    sock.close(linger=1000)
    ctx.term()
    link = probe_link(server.endpoint, SMALL)  # still answers
    assert link.bandwidth_Bps > 0


def test_unreachable_and_malformed_peers() -> None:
    with pytest.raises(ProbeError, match="did not answer"):
        probe_link("tcp://127.0.0.1:9", ProbeConfig(connect_timeout_s=0.3))
    for bad in ("127.0.0.1:80", "tcp://host", "tcp://h:99999", "udp://h:1"):
        with pytest.raises(ProbeError, match="not an endpoint"):
            check_endpoint(bad)


def test_serve_command_answers_profile_peer(tmp_path) -> None:  # type: ignore[no-untyped-def]
    argv = cli_argv("profile", "serve", "--bind", "127.0.0.1", "--format", "json")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:  # the JSON object announcing the endpoint
            lines.append(line)
            if line.startswith("}"):
                break
        endpoint = json.loads("".join(lines))["endpoint"]
        client = subprocess.run(
            cli_argv(
                *("profile", "--peer", endpoint, "--probe-max-mib", "1"),
                *("--run-dir", str(tmp_path), "--host-name", "a"),
            ),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert client.returncode == 0, client.stderr
        data = json.loads((tmp_path / "profiles" / "a.json").read_text())
        assert data["links"][0]["peer"] == endpoint and data["layers"] == []
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
