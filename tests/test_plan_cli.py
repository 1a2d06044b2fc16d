"""``edgetrain plan``: the JSON contract, profile input, what-if, plots and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.plan_profile import write_profile

CONTRACT_KEYS = {
    "forward_cuts",
    "backward_cuts",
    "forward_s",
    "backward_s",
    "iteration_s",
    "speedup_vs_sequential",
}


def _costs_file(tmp_path: Path, layers: int = 6) -> Path:
    path = tmp_path / "costs.json"
    rows = [
        {"name": f"l{i}", "pt": 0.01 * (i + 1), "fc": 0.02, "bc": 0.04, "gt": 0.01 * (i + 1)}
        for i in range(layers)
    ]
    path.write_text(json.dumps({"dt": 0.003, "layers": rows}))
    return path


_profile = write_profile


def test_costs_file_json_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "plan", "--costs", str(_costs_file(tmp_path)), "-f", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc["strategies"]) == {"sequential", "lbl", "ibatch", "dynacomm"}
    for s in doc["strategies"].values():
        assert set(s) == CONTRACT_KEYS
        assert s["iteration_s"] == pytest.approx(s["forward_s"] + s["backward_s"])
        assert all(isinstance(c, int) and 1 <= c <= 5 for c in s["forward_cuts"])
    assert doc["strategies"]["sequential"]["forward_cuts"] == []
    assert doc["strategies"]["lbl"]["backward_cuts"] == [1, 2, 3, 4, 5]
    best = min(s["iteration_s"] for s in doc["strategies"].values())
    assert doc["strategies"]["dynacomm"]["iteration_s"] == pytest.approx(best)


def test_profile_with_bandwidth_writes_the_plan_and_gantt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prof = _profile(tmp_path)
    code, out, err = run_cli(
        capsys, "plan", "--profile", str(prof), "--bandwidth", "100mbit", "--rtt", "10ms", "--plot"
    )
    assert code == 0, err
    assert "dynacomm" in out and "wrote" in out
    plan = json.loads((tmp_path / "run" / "plans" / "h.json").read_text())
    assert plan["bandwidth_Bps"] == 12.5e6 and plan["dt_s"] == 0.01 and plan["dt_source"] == "--rtt"
    seq = plan["strategies"]["sequential"]
    total_bytes = sum(400_000 * (i + 1) for i in range(5))
    # pull everything (one dt), compute everything
    assert seq["forward_s"] == pytest.approx(0.01 + total_bytes / 12.5e6 + 0.05)
    assert (tmp_path / "run" / "plans" / "h.png").read_bytes()[:4] == b"\x89PNG"


def test_profile_link_probe_gives_bandwidth_and_dt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    link = {"peer": "tcp://x:1", "bandwidth_Bps": 1e6, "rtt_s": 0.002, "dt_s": 0.004}
    code, out, _ = run_cli(
        capsys, "plan", "--profile", str(_profile(tmp_path, [link])), "-f", "json"
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["bandwidth_Bps"] == 1e6 and doc["dt_s"] == 0.004
    assert doc["dt_source"] == "profile link probe"


def test_what_if_over_bandwidths(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prof = _profile(tmp_path)
    code, out, err = run_cli(
        capsys,
        "plan",
        "--profile",
        str(prof),
        "--bandwidth",
        "10kbit,100mbit,100gbit",
        "--dt",
        "1ms",
        "-f",
        "json",
    )
    assert code == 0, err
    doc = json.loads(out)
    rows = doc["bandwidths"]
    assert [r["bandwidth_Bps"] for r in rows] == [1250.0, 12.5e6, 12.5e9]
    slow, _, fast = (r["verdict"] for r in rows)
    assert not slow["scheduling_helps"] and "communication dominates" in slow["text"]
    assert not fast["scheduling_helps"] and "compute dominates" in fast["text"]
    for r in rows:
        assert set(r["strategies"]["dynacomm"]) == CONTRACT_KEYS
    code, out, _ = run_cli(
        capsys, "plan", "--profile", str(prof), "--bandwidth", "10mbit,1gbit", "--dt", "1ms"
    )
    assert code == 0 and out.count("plan at") == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give exactly one of --profile FILE or --costs FILE"),
        (["--costs", "missing.json"], "does not exist"),
        (["--profile", "PROFILE", "--bandwidth", "fast"], "is not a number with a unit"),
        (["--profile", "PROFILE"], "the profile has no link probe; give --bandwidth"),
        (["--profile", "PROFILE", "--bandwidth", "1mbit"], "dt is unknown"),
        (["--costs", "COSTS", "--bandwidth", "1mbit"], "apply to --profile"),
        (["--costs", "BAD"], "layers[0].fc must be a number"),
    ],
)
def test_bad_input_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"dt": 0.1, "layers": [{"pt": 1, "fc": "x", "bc": 1, "gt": 1}]}))
    subst = {
        "PROFILE": str(_profile(tmp_path)),
        "COSTS": str(_costs_file(tmp_path)),
        "BAD": str(bad),
        "missing.json": str(tmp_path / "missing.json"),
    }
    code, out, err = run_cli(capsys, "plan", *[subst.get(a, a) for a in args])
    assert code == 2
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "run" / "plans").exists()
