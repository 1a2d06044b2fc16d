"""Traces: parsing and planning (pure), and playing one on a real testbed (root)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgetrain.emulate import cgroups, testbed, trace
from edgetrain.emulate.spec import SpecError, load_spec, parse_spec
from edgetrain.emulate.topology import LinkCheck, build
from edgetrain.emulate.verify import measure_link
from tests.helpers.paths import TESTBEDS
from tests.helpers.skips import skip_or_fail
from tests.helpers.waiting import wait_until

SPEC = """
name = "{name}"
wan = "100mbit"
[[sites]]
name = "a"
lan = "1gbit"
[[sites.hosts]]
name = "h1"
cpu = 0.5
[[sites]]
name = "b"
lan = "1gbit"
[[sites.hosts]]
name = "h2"
cpu = 0.25
"""


def _trace(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "trace.toml"
    path.write_text(text)
    return path


def test_shipped_traces_fit_their_testbeds() -> None:
    for name, bed in (("dlion-4-wan-dip", "dlion-4"), ("mercury-4-bandwidth", "mercury-4"),
                      ("edgegossip-4-load", "edgegossip-4")):  # fmt: skip
        topo = build(load_spec(TESTBEDS / f"{bed}.toml"), "10.232.9.0/24")
        actions = trace.plan(trace.load_trace(TESTBEDS / "traces" / f"{name}.toml"), topo, name)
        assert actions and [a.at for a in actions] == sorted(a.at for a in actions)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[changes]]\nat = 1\nrate = '1mbit'\n", "exactly one of"),
        ("[[changes]]\nat = 1\nwan = 'a'\nlink = 'h1'\nrate = '1mbit'\n", "exactly one of"),
        ("[[changes]]\nat = 1\ncpu = 'h1'\nrate = '1mbit'\n", "share = CORES"),
        ("[[changes]]\nat = 1\nlink = 'h1'\nshare = 0.5\n", "rate = RATE"),
        ("[[changes]]\nat = -1\nlink = 'h1'\nrate = '1mbit'\n", "[[changes]] #1 at"),
        ("[[changes]]\nat = 1\nlink = 'h1'\nrate = 'slow'\n", "not a rate"),
        ("loop = true\n", "changes"),
        ("[[changes]\n", "not valid TOML"),
        ("[[changes]]\nat = 1\nlink = 'h1'\nrat = '1mbit'\n", "did you mean 'rate'?"),
    ],
)
def test_bad_traces(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(SpecError) as exc:
        trace.load_trace(_trace(tmp_path, text))
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_plan_names_unknown_targets(tmp_path: Path) -> None:
    spec = {
        "name": "t", "wan": "100mbit",
        "sites": [{"name": "a", "lan": "1gbit", "hosts": [{"name": "h1", "cpu": 0.5}]},
                  {"name": "b", "lan": "1gbit", "hosts": [{"name": "h2", "cpu": 0.5}]}],
    }  # fmt: skip
    topo = build(parse_spec(spec, "x"), "10.232.9.0/24")
    bad = trace.load_trace(_trace(tmp_path, "[[changes]]\nat = 0\ncpu = 'h9'\nshare = 0.1\n"))
    with pytest.raises(SpecError, match="no host 'h9'"):
        trace.plan(bad, topo, "t.toml")
    actions = trace.plan(
        trace.load_trace(_trace(tmp_path, "[[changes]]\nat = 2\nwan = 'b'\nrate = '5mbit'\n"
                                "[[changes]]\nat = 1\nlink = 'h1'\nrate = '2mbit'\n")),
        topo, "t.toml")  # fmt: skip
    assert [a.what for a in actions] == ["link h1 = 2 Mbit/s", "wan b = 5 Mbit/s"]
    assert [c[6] for c in actions[1].commands] == ["u1", "w1"]
    assert {c[2] for c in actions[0].commands} == {"etb-t.h1", "etb-t"}
    assert len(trace.restore(topo)) == 2 + 2 + 2


# --- on a real testbed ---------------------------------------------------------------------


@pytest.fixture
def bed(tmp_path: Path) -> Iterator[tuple[testbed.Testbed, Path]]:
    reason = testbed.requirements_unavailable()
    if reason is not None:
        skip_or_fail(reason)
    state = tmp_path / "state"
    path = tmp_path / "bed.toml"
    path.write_text(SPEC.format(name=f"tr{abs(hash(tmp_path)) % 100000}"))
    tb = testbed.up(load_spec(path), state)
    try:
        yield tb, state
    finally:
        testbed.down(tb.spec.name, state)


def _rate(ns: str, dev: str) -> str:
    out = subprocess.run(["tc", "-n", ns, "qdisc", "show", "dev", dev], capture_output=True,
                         text=True, check=True).stdout.split()  # fmt: skip
    return out[out.index("rate") + 1]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "edgetrain", "emulate", *args]


@pytest.mark.system
@pytest.mark.timeout(180)
def test_play_changes_links_and_shares_then_restores(
    bed: tuple[testbed.Testbed, Path], tmp_path: Path
) -> None:
    tb, state = bed
    fab, h1, h2 = tb.topo.fabric_ns, tb.topo.host("h1"), tb.topo.host("h2")
    path = _trace(tmp_path, "[[changes]]\nat = 0\nwan = 'a'\nrate = '20mbit'\n"
                  "[[changes]]\nat = 0\ncpu = 'h1'\nshare = 0.2\n"
                  "[[changes]]\nat = 0.3\nlink = 'h2'\nrate = '50mbit'\n")  # fmt: skip
    done = subprocess.run(_cli("trace", tb.spec.name, str(path), "--keep", "--state-dir",
                               str(state), "--format", "json"),
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    applied = json.loads(done.stdout)["applied"]
    assert [a["change"] for a in applied] == ["wan a = 20 Mbit/s", "cpu h1 = 0.2",
                                              "link h2 = 50 Mbit/s"]  # fmt: skip
    assert applied[2]["t"] >= 0.3
    assert _rate(fab, "u0") == _rate(fab, "w0") == "20Mbit"
    assert _rate(h2.ns, "eth0") == _rate(fab, h2.port) == "50Mbit"
    assert cgroups.read_cpu(tb.spec.name, "h1") == pytest.approx(0.2)
    # the change is real: traffic from site a to site b now crosses a 20 Mbit/s uplink
    link = measure_link(tb, LinkCheck("wan", "a uplink", "h1", "h2", 20_000_000))
    assert link.ok, link
    assert len((state / tb.spec.name / "trace.jsonl").read_text().splitlines()) == 3

    # a looping trace stopped by Ctrl-C puts the spec's values back
    path = _trace(tmp_path, "loop = true\n[[changes]]\nat = 0\nlink = 'h1'\nrate = '5mbit'\n"
                  "[[changes]]\nat = 30\nlink = 'h1'\nrate = '7mbit'\n")  # fmt: skip
    proc = subprocess.Popen(_cli("trace", tb.spec.name, str(path), "--state-dir", str(state)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        log = state / tb.spec.name / "trace.jsonl"
        wait_until(lambda: len(log.read_text().splitlines()) >= 4, 30, "the looping trace's change")
        assert _rate(h1.ns, "eth0") == "5Mbit"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "the spec's values are back" in out
    assert _rate(h1.ns, "eth0") == "1Gbit"
    assert _rate(fab, "u0") == "100Mbit" and _rate(h2.ns, "eth0") == "1Gbit"
    assert cgroups.read_cpu(tb.spec.name, "h1") == pytest.approx(0.5)


def test_a_reproductions_trace_stops_and_restores_even_where_sigint_is_ignored(
    bed: tuple[testbed.Testbed, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the reproductions play traces through experiment.testbed.trace_running; started from a
    # script's background job, the trace inherits an ignored SIGINT, so the helper stops it
    # with SIGTERM
    from edgetrain.experiment.testbed import trace_running

    tb, state = bed
    h1 = tb.topo.host("h1")
    monkeypatch.setenv("EDGETRAIN_EMULATE_DIR", str(state))
    path = _trace(tmp_path, "loop = true\n[[changes]]\nat = 0\nlink = 'h1'\nrate = '5mbit'\n"
                  "[[changes]]\nat = 30\nlink = 'h1'\nrate = '7mbit'\n")  # fmt: skip
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # what the child inherits
    try:
        with trace_running(tb.spec.name, path):
            log = state / tb.spec.name / "trace.jsonl"
            wait_until(lambda: log.exists() and log.read_text().strip() != "", 30, "the change")
            assert _rate(h1.ns, "eth0") == "5Mbit"
    finally:
        signal.signal(signal.SIGINT, previous)
    assert _rate(h1.ns, "eth0") == "1Gbit"
