"""EdgeGossip's predictor (t0 RG(U), t0 adapted; reactive; static), the cgroup scope of the
resource sampler on a fake /proc, and the gossip family's report on literal metrics rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgetrain.gossip.edgegossip.predictor import (
    History,
    LivePredictor,
    adapt_t0,
    load_history,
    prediction_error,
    throughput,
)
from edgetrain.gossip.spread_report import gossip_report, spread
from edgetrain.profile.predictor import ContentionRecord, append_history
from edgetrain.profile.sampler import Snapshot, snapshot, usage
from edgetrain.profile.scope import (
    CgroupScope,
    cpu_cgroup,
    group_counters,
    group_directory,
    own_tree,
    resolve_scope,
)


def test_t0_adaptation_and_throughput_literals() -> None:
    assert adapt_t0(0.010, 0.030, 1.0) == pytest.approx(0.020)
    assert adapt_t0(0.010, 0.030, 3.0) == pytest.approx(0.010)  # all of it was contention
    assert adapt_t0(0.010, 0.030, 1.0, lam=0.25) == pytest.approx(0.015)
    assert throughput(0.002, 2.0) == pytest.approx(250.0)
    assert throughput(0.002, 0.5) == pytest.approx(500.0)  # RG is at least 1
    assert prediction_error(110.0, 100.0) == pytest.approx(0.1)
    assert prediction_error(1.0, None) is None and prediction_error(1.0, 0.0) is None


def _rg(u: object) -> float:
    return 1.0 + 2.0 * float(u[0])  # type: ignore[index]


def test_predictive_follows_contention_and_adapts_t0() -> None:
    pred = LivePredictor("predictive", History(_rg, 10, None))
    # calibration: 0.004 s/sample under half a core of co-running load (RG 2): t0 = 0.002
    assert pred.first(0.004, (0.5, 0.0, 0.0)) == pytest.approx(250.0)
    assert pred.t0 == pytest.approx(0.002)
    # the load goes: the epoch ran at t0 and the next prediction is uncontended
    assert pred.after_epoch(0.002, (0.0, 0.0, 0.0)) == pytest.approx(500.0)
    # an invisible slowdown (a quota cut): t_obs 0.006 with no load moves t0 half way
    assert pred.after_epoch(0.006, (0.0, 0.0, 0.0)) == pytest.approx(1 / 0.004)
    assert pred.after_epoch(0.006, (0.0, 0.0, 0.0)) == pytest.approx(1 / 0.005)
    assert pred.after_epoch(float("nan"), None) == pytest.approx(1 / 0.005)  # nothing learnt


def test_profile_t0_beats_the_calibration() -> None:
    pred = LivePredictor("predictive", History(_rg, 10, 0.001))
    assert pred.first(0.004, (0.5, 0.0, 0.0)) == pytest.approx(500.0)  # 1 / (0.001 * 2)


def test_reactive_and_static() -> None:
    reactive = LivePredictor("reactive", History(_rg, 10, None))
    assert reactive.first(0.004, (0.5, 0.0, 0.0)) == pytest.approx(250.0)
    assert reactive.after_epoch(0.010, (0.9, 0.0, 0.0)) == pytest.approx(100.0)
    static = LivePredictor("static", History(_rg, 10, None))
    assert static.first(0.004, (0.5, 0.0, 0.0)) == pytest.approx(500.0)  # 1 / t0
    assert static.after_epoch(0.010, (0.9, 0.0, 0.0)) == pytest.approx(500.0)
    off = LivePredictor("off", History.none())
    assert off.first(0.004, None) == pytest.approx(250.0)


def test_history_fits_rg_and_finds_the_models_t0(tmp_path: Path) -> None:
    path = tmp_path / "h.history.jsonl"
    assert load_history(path, "lenet5").records == 0
    records = [
        ContentionRecord("r1", "lenet5", 32, lv, (lv, 0.0, 0.0), 0.032, 0.032 * (1 + 2 * lv))
        for lv in (0.0, 0.25, 0.5, 0.75, 1.0)
    ]
    append_history(path, records)
    hist = load_history(path, "lenet5")
    assert hist.records == 5 and hist.t0 == pytest.approx(0.001)
    assert hist.rg((0.5, 0.0, 0.0)) == pytest.approx(2.0, rel=0.05)
    assert load_history(path, "mlp").t0 is None


def test_a_history_that_misses_its_held_out_levels_gives_no_slowdown(tmp_path: Path) -> None:
    # the slowdown jumps between 1 and 3 from level to level: no line through U predicts it
    path = tmp_path / "bad.history.jsonl"
    records = [
        ContentionRecord("r1", "lenet5", 32, lv, (lv, 0.0, 0.0), 0.032, 0.032 * (1 + 2 * (i % 2)))
        for i, lv in enumerate((0.0, 0.25, 0.5, 0.75, 1.0))
    ]
    append_history(path, records)
    hist = load_history(path, "lenet5")
    assert hist.held_out is not None and hist.held_out > 0.15
    assert not hist.rg_used and hist.rg((0.5, 0.0, 0.0)) == 1.0
    assert hist.records == 5 and hist.t0 == pytest.approx(0.001)  # the profile's t0 still counts
    loose = load_history(path, "lenet5", max_error=10.0)
    assert loose.rg_used and loose.held_out == hist.held_out
    # a history that predicts its held-out levels is used (the linear one above: within 15%)
    good = tmp_path / "good.history.jsonl"
    append_history(
        good,
        [
            ContentionRecord("r1", "lenet5", 32, lv, (lv, 0.0, 0.0), 0.032, 0.032 * (1 + lv))
            for lv in (0.0, 0.25, 0.5, 0.75, 1.0)
        ],
    )
    used = load_history(good, "lenet5")
    assert used.rg_used and used.held_out is not None and used.held_out <= 0.15


def test_cpu_cgroup_from_proc_text() -> None:
    v1 = "9:name=systemd:/\n4:memory:/x\n1:cpu:/edgetrain-emulate/eg/gpu-a\n0::/\n"
    assert cpu_cgroup(v1) == "/edgetrain-emulate/eg/gpu-a"
    assert cpu_cgroup("3:cpu,cpuacct:/edgetrain-emulate/eg/h\n") == "/edgetrain-emulate/eg/h"
    assert cpu_cgroup("1:cpu:/\n2:cpuacct:/\n") is None
    assert cpu_cgroup("0::/user.slice/session-1.scope\n") == "/user.slice/session-1.scope"
    assert cpu_cgroup("garbage") is None


def test_own_tree() -> None:
    parents = {10: 1, 11: 10, 12: 11, 20: 1, 21: 20}
    assert own_tree(10, parents) == {10, 11, 12}
    assert own_tree(99, parents) == {99}


def _fake_proc(root: Path, pid: int, ppid: int, ticks: int, io: int, state: str = "S") -> None:
    d = root / str(pid)
    (d / "task" / str(pid)).mkdir(parents=True)
    fields = [state, str(ppid)] + ["0"] * 9 + [str(ticks), "0"] + ["0"] * 10
    stat = f"{pid} (python) " + " ".join(fields)
    (d / "stat").write_text(stat)
    (d / "task" / str(pid) / "stat").write_text(stat)
    (d / "io").write_text(f"rchar: 1\nread_bytes: {io}\nwrite_bytes: 0\n")


def _fake_machine(root: Path, own_ticks: int, co: dict[int, tuple[int, int, str]]) -> None:
    (root / "net").mkdir(parents=True, exist_ok=True)
    (root / "stat").write_text("cpu 100 0 100 800 0 0 0 0\nprocs_running 5\n")
    (root / "net" / "dev").write_text("h\nh\n  eth0: 1000 0 0 0 0 0 0 0 500 0\n")
    (root / "diskstats").write_text("")
    _fake_proc(root, 100, 1, own_ticks, 0, "R")
    for pid, (ticks, io, state) in co.items():
        _fake_proc(root, pid, 1, ticks, io, state)


def test_group_scope_counts_only_the_groups_other_processes(tmp_path: Path) -> None:
    cg = tmp_path / "cgroup" / "cpu" / "edgetrain-emulate" / "eg" / "gpu-a"
    cg.mkdir(parents=True)
    (cg / "cgroup.procs").write_text("100\n200\n201\n")
    (cg / "cpu.cfs_quota_us").write_text("50000\n")
    (cg / "cpu.cfs_period_us").write_text("100000\n")
    scope = CgroupScope("/edgetrain-emulate/eg/gpu-a", cg)
    assert scope.share() == pytest.approx(0.5) and scope.pids() == {100, 200, 201}
    assert group_directory("/edgetrain-emulate/eg/gpu-a", tmp_path / "cgroup") == cg
    a_root, b_root = tmp_path / "a", tmp_path / "b"
    _fake_machine(a_root, 50, {200: (10, 0, "S"), 201: (5, 100, "S"), 300: (999, 0, "R")})
    # 2 s later: co-runners 200 and 201 used 40 + 20 ticks and wrote 4,000 bytes; process 300,
    # busy but in another group (another emulated host), does not count
    _fake_machine(b_root, 150, {200: (50, 0, "R"), 201: (25, 4100, "S"), 300: (1999, 0, "R")})
    a = snapshot(100, 0, a_root, scope)
    b = snapshot(100, 0, b_root, scope)
    a = Snapshot(**{**a.__dict__, "t": 0.0})
    b = Snapshot(**{**b.__dict__, "t": 2.0})
    u = usage(a, b, cores=0.5, hz=100)
    assert u.own_cores_busy == pytest.approx(0.5)  # 100 ticks / 100 Hz / 2 s
    assert u.co_cores_busy == pytest.approx(0.3)  # 60 ticks / 100 Hz / 2 s
    assert u.co_disk_Bps == pytest.approx(2000.0)
    assert u.co_runnable == 1.0  # process 200 is running now; 300 is not in the group
    assert u.contention[0] == pytest.approx(2.0)  # max(0.3, 1) runnable over a 0.5-core quota


def test_own_children_are_left_out_unless_named_co_running(tmp_path: Path) -> None:
    """``profile --contention`` generates its load in its own children: named as co-running
    they count, where before its history on every emulated host read zero core contention at
    every level (and RG was fitted on noise in the network rate)."""
    cg = tmp_path / "cgroup"
    cg.mkdir()
    (cg / "cgroup.procs").write_text("100\n110\n111\n200\n")
    scope = CgroupScope("/edgetrain-emulate/eg/cpu-a", cg)
    root = tmp_path / "proc"
    _fake_machine(root, 50, {200: (7, 0, "S")})
    _fake_proc(root, 110, 100, 30, 0, "R")  # a load generator: a child of the profiler
    _fake_proc(root, 111, 110, 5, 0, "S")  # and its child
    left_out = group_counters(scope, 100, root)
    assert left_out.ticks == {200: 7} and left_out.runnable == 0
    named = group_counters(scope, 100, root, co_pids=[110, 111, 100])
    assert named.ticks == {110: 30, 111: 5, 200: 7} and named.runnable == 1


def test_resolve_scope_modes(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "7").mkdir(parents=True)
    cgroot = tmp_path / "cg"
    for path in ("edgetrain-emulate/eg/h", "user.slice"):
        (cgroot / "cpu" / path).mkdir(parents=True)
        (cgroot / "cpu" / path / "cgroup.procs").write_text("7\n")
    (proc / "7" / "cgroup").write_text("1:cpu:/edgetrain-emulate/eg/h\n")
    found = resolve_scope("auto", 7, proc, cgroot)
    assert found is not None and found.directory == cgroot / "cpu" / "edgetrain-emulate/eg/h"
    assert resolve_scope("machine", 7, proc, cgroot) is None
    (proc / "7" / "cgroup").write_text("1:cpu:/user.slice\n")
    assert resolve_scope("auto", 7, proc, cgroot) is None  # not an emulated host
    assert resolve_scope("cgroup", 7, proc, cgroot) is not None


def _rows(epoch_s: list[list[float]], ratio: list[list[float]]) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for w in range(len(epoch_s[0])):
        rows: list[dict] = [{"event": "ready", "worker": w, "aggregate_s": 0.5 + w}]
        for e, (times, rs) in enumerate(zip(epoch_s, ratio, strict=True), start=1):
            rows.append({"event": "epoch", "worker": w, "epoch": e, "epoch_s": times[w],
                         "ratio": rs[w], "rank_s": 0.1, "kept": 100,
                         "predictor_error": 0.1 * (w + 1)})  # fmt: skip
        out[w] = rows
    return out


def test_report_on_literal_rows() -> None:
    rows = _rows([[2.0, 4.0], [2.0, 2.5]], [[1.0, 0.5], [1.0, 0.4]])
    manifest = {"technique": "edgegossip", "workers": [{"id": 0, "host": "a"}, {"id": 1}]}
    rep = gossip_report(manifest, rows, edge=True)  # EdgeGossip's side asks for its columns
    assert rep is not None
    assert [e["spread"] for e in rep["epochs"]] == pytest.approx([2.0, 1.25])
    assert rep["epochs"][1]["ratio"] == {0: 1.0, 1: 0.4}
    assert rep["spread_max"] == pytest.approx(2.0) and rep["epoch_clock_s"] == pytest.approx(6.5)
    assert rep["aggregate_max_s"] == pytest.approx(1.5)
    assert rep["rank_share"] == pytest.approx(0.4 / 10.5)
    assert rep["predictor_mape"] == pytest.approx(0.15)
    assert rep["predictor_mape_by_worker"] == pytest.approx({0: 0.1, 1: 0.2})
    assert "| 2 | 1.000 | 0.400 | 2.00 | 2.50 | 1.25 | 15.0% |" in rep["markdown"]
    json.dumps(rep)  # the summary stores it as JSON
    gosgd = gossip_report({"technique": "gosgd"}, rows)
    assert gosgd is not None and "ratio" not in gosgd["epochs"][0]
    assert "finish-time spread per epoch" in gosgd["markdown"]
    assert gossip_report({}, {0: [{"event": "ready"}]}) is None
    assert spread({0: 1.0}) is None and spread({0: 2.0, 1: 0.0, 2: 1.0}) == 2.0
