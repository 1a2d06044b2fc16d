"""DLion, Gaia and Ako end to end: real worker processes exchanging gradients over ZeroMQ on
127.0.0.1. A fast and a slow worker (the runtime's slowdown throttle) get batch sizes in the
ratio of their capacities and take equally long per iteration; with two sites (the recipe's
``sites``, as local processes have no hosts file) WAN links carry fewer entries than LAN links,
Gaia runs a parameter server per site, and Ako partitions its gradients; bad sparse messages
are dropped and counted while training goes on."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zmq

from edgetrain.comm.wire import Message, encode
from edgetrain.gossip.exchange.cpu_parts import PARTS
from edgetrain.gossip.exchange.messages import GRAD
from edgetrain.rundir import read_jsonl
from tests.helpers.launching import Launch
from tests.helpers.procs import edgetrain_processes

pytestmark = pytest.mark.slow

RECIPE = """
[run]
name = "{name}"
seed = 3
checkpoint_every = 0
[data]
dataset = "digits"
[model]
name = "lenet5"
[train]
technique = "{technique}"
epochs = {epochs}
batch_size = {b0}
lr = {lr}
[{technique}]
pilot_s = {pilot}
{section}
{workers}
"""


def _run(tmp_path: Path, technique: str, section: str, workers: str, **kw: Any) -> dict[str, Any]:
    values = {"name": technique, "epochs": 3, "b0": 16, "pilot": 1.0, "lr": 0.02, **kw}
    recipe = tmp_path / f"{technique}.toml"
    recipe.write_text(
        RECIPE.format(technique=technique, section=section, workers=workers, **values)
    )
    launch = Launch(recipe, tmp_path / "runs")
    try:
        code, summary = launch.finish(timeout=200)
        run_id = launch.manifest()["run_id"]
    finally:
        launch.kill()
    assert code == 0, launch.stderr[-3000:]
    assert summary is not None and summary["status"] == "completed"
    assert edgetrain_processes(run_id) == {}  # every worker reaped
    return summary


def _epochs(run: Path, worker: int) -> list[dict[str, Any]]:
    rows = read_jsonl(run / "metrics" / f"worker-{worker}.jsonl")
    return [r for r in rows if r["event"] == "epoch"]


@pytest.mark.timeout(240)
def test_fast_and_slow_workers_get_batches_in_their_capacity_ratio(tmp_path: Path) -> None:
    # The recipe's epsilon. Loose: the test shares 2 cores with whatever else runs, and under
    # contention the always-busy fast worker loses more to it than the throttled one, whose short
    # bursts after each sleep get the CPU first; without the plan the slow worker's step would
    # take 3x the fast one's (a spread of 100% of the mean).
    eps = 0.5
    summary = _run(
        tmp_path,
        "dlion",
        f'epsilon = {eps}\nwe_when = "none"\nbs_policy = "static"\nlr_policy = "small"\n'
        "decay_lr = false",
        "[[workers]]\ncount = 1\n[[workers]]\ncount = 1\nslowdown = 3.0\n",
        epochs=6,
        b0=64,
        pilot=2.0,
    )
    run = Path(summary["run"])
    plan = json.loads((run / "plans" / "batches.json").read_text())
    fast, slow = plan["batches"]["0"], plan["batches"]["1"]
    assert fast + slow == 128  # the equal-total rule: the uniform baseline's samples
    at_b0 = plan["capacity_at_b0"]
    assert 2.0 <= at_b0["0"] / at_b0["1"] <= 7.0  # the throttle's 3x, measured on a busy box
    # batches in the ratio of the capacities at those batch sizes (a step's fixed cost makes
    # that ratio larger than at b0: the slow worker's fixed cost is 3x too)
    # unless the slow worker sits at the planner's floor (b0 // 4), which caps the ratio
    caps = plan["capacities"]
    if slow > 64 // 4:
        assert fast / slow == pytest.approx(caps["0"] / caps["1"], rel=0.15)
    else:
        assert fast / slow <= caps["0"] / caps["1"] * 1.15
    assert fast / slow >= 2.0
    assert plan["t_unit"] > 0 and plan["spread"] <= eps
    rows = {w: _epochs(run, w)[-1] for w in (0, 1)}
    assert rows[0]["iterations"] == rows[1]["iterations"] > 0  # iteration-synchronous
    assert (rows[0]["batch"], rows[1]["batch"]) == (fast, slow)
    for r in rows.values():  # CPU time: the gradients' within their wall time, the steps' more
        assert 0 < r["compute_cpu_s"] <= r["compute_s"] * 1.05 + 0.05
        assert r["cpu_s"] >= r["compute_cpu_s"]
        parts = r["cpu_parts"]  # the main thread's, part by part: within the process's
        assert set(parts) <= set(PARTS) and {"gradient", "send", "receive", "update"} <= set(parts)
        assert sum(parts.values()) <= r["cpu_s"] + 0.01
        assert parts["gradient"] == pytest.approx(r["compute_cpu_s"], rel=0.05, abs=0.01)
    for w, r in rows.items():  # the samples of its gradients: its batch every iteration
        seen = [e["batch"] for e in _epochs(run, w)]
        assert min(seen) * r["iterations"] <= r["computed_samples"] <= max(seen) * r["iterations"]
    # the slow worker's throttle sleeps twice its step: CPU time leaves the sleep out
    assert rows[1]["compute_cpu_s"] < 0.6 * (rows[1]["compute_s"] + rows[1]["sleep_s"])
    # each worker's time per iteration (compute plus the emulated slowdown; the median of an
    # epoch's, robust to a burst of someone else's load) within epsilon of the other's, with a
    # margin for a pilot that the suite's own leftovers disturbed (0.61 seen once in a full
    # run, 2026-12-06); without the plan the spread is 1.0 (the slow step 3x the fast one)
    step = {w: statistics.median(r["step_s_median"] for r in _epochs(run, w)) for w in (0, 1)}
    mean = (step[0] + step[1]) / 2
    assert abs(step[0] - step[1]) / mean <= eps * 1.5, step
    report = summary["technique_report"]["exchange"]
    assert report["workers"]["0"]["batch_last"] == fast  # JSON keys are strings
    assert (
        "## DLion: batches, waiting and traffic per worker"
        in (run / "report" / "summary.md").read_text()
    )


SITES = 'sites = ["a", "a", "b"]'
THREE = "[[workers]]\ncount = 3\n"


@pytest.mark.timeout(240)
def test_dlion_across_two_sites_sends_fewer_entries_over_the_wan(tmp_path: Path) -> None:
    # Six epochs, as for the baselines below: after three, the accuracy is still on the steep
    # part of the curve, where the pilot's batch sizes (three equal processes on two shared
    # cores) and arrival order move it between 0.34 and 0.97.
    summary = _run(tmp_path, "dlion", f'{SITES}\nbandwidth = "static"', THREE, epochs=6)
    run = Path(summary["run"])
    row = _epochs(run, 0)[-1]  # site a: worker 1 over the LAN, worker 2 over the WAN
    n = 61706  # lenet5
    lan, wan = row["entries"]["1"], row["entries"]["2"]
    assert lan is None or lan > wan  # None: dense, the whole gradient
    assert wan is not None and 0 < wan < n / 2
    assert row["bytes_wan"] > 0 and row["bytes_lan"] > 0
    per_it = row["bytes_wan"] / row["iterations"]
    assert per_it < 4 * n  # less than the dense gradient over the WAN
    assert row["we_sent"] + sum(_epochs(run, w)[-1]["we_received"] for w in (0, 1, 2)) > 0
    assert summary["test_accuracy"] > 0.5
    assert all(w["dropped"] == {} for w in summary["workers"])


@pytest.mark.timeout(240)
@pytest.mark.parametrize("technique", ["gaia", "ako"])
def test_baselines_train_across_two_sites(tmp_path: Path, technique: str) -> None:
    # Six epochs: after three, lenet5 is still on the steep part of its curve, where Ako's
    # stale partitions (p from the measured iteration time, so from the machine's speed) and
    # arrival order move the accuracy between 0.49 and 0.80; after six it is past 0.75.
    summary = _run(tmp_path, technique, SITES, THREE, epochs=6)
    run = Path(summary["run"])
    rows = [_epochs(run, w)[-1] for w in range(3)]
    assert len({r["iterations"] for r in rows}) == 1
    if technique == "gaia":
        # a parameter server per site: worker 0 serves a, worker 2 serves b (only it crosses)
        assert [r["deployment"] for r in rows] == ["site"] * 3
        assert [r["parameter_server"] for r in rows] == [0, 0, 2]
        assert rows[1]["bytes_wan"] == 0 and rows[0]["bytes_wan"] > 0
    else:
        assert all(r["partitions"] >= 1 for r in rows)
    assert all(r["batch"] == 16 for r in rows)  # no capacity-aware batching
    assert summary["test_accuracy"] > 0.5


BAD_PAYLOADS: dict[str, dict[str, Any]] = {
    "bad_sparse_order": {"idx": np.array([5, 2, 9], np.int32)},
    "bad_sparse_range": {"idx": np.array([0, 1, 61706], np.int32)},
    "bad_sparse_indices": {"idx": np.array([0, 1, 2], np.int64)},
    "non_finite": {"val": np.array([1.0, np.nan, 2.0], np.float32)},
    "bad_payload_length": {"n": 12},
    "bad_payload_tensors": {"extra": np.zeros(3, np.float32)},
}


def _bad_grad(run_id: str, reason: str, t: int) -> list[bytes]:
    change = BAD_PAYLOADS[reason]
    tensors = {"idx": np.array([0, 3, 7], np.int32), "val": np.ones(3, np.float32)}
    tensors.update({k: v for k, v in change.items() if isinstance(v, np.ndarray)})
    meta = {"t": t, "origin": 1, "loss": 1.0, "m": 8, "kind": "sparse", "offset": 0}
    meta["n"] = change.get("n", 61706)
    msg = Message(GRAD, "w1", run_id, t, 0, meta, tensors)
    return [bytes(f) for f in encode(msg)]


@pytest.mark.timeout(240)
def test_bad_sparse_messages_are_dropped_and_counted_and_training_goes_on(
    tmp_path: Path,
) -> None:
    recipe = tmp_path / "dlion.toml"
    recipe.write_text(
        RECIPE.format(
            name="fuzz", technique="dlion", epochs=3, b0=16, lr=0.02, pilot=0.5, section="",
            workers="[[workers]]\ncount = 2\n",
        )
    )  # fmt: skip
    launch = Launch(recipe, tmp_path / "runs")
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    try:
        ready = launch.wait_event(
            lambda r: r.get("event") == "ready" and r.get("worker") == 0, 120, "worker 0 ready"
        )
        run_id = launch.manifest()["run_id"]
        push.connect(ready["endpoints"]["gossip"])
        for reason in BAD_PAYLOADS:
            for t in range(5):
                push.send_multipart(_bad_grad(run_id, reason, t))
        code, summary = launch.finish(timeout=200)
    finally:
        push.close(linger=0)
        ctx.term()
        launch.kill()
    assert code == 0, launch.stderr[-3000:]
    assert summary is not None and summary["status"] == "completed"
    dropped = summary["workers"][0]["dropped"]
    assert {r: dropped.get(r) for r in BAD_PAYLOADS} == dict.fromkeys(BAD_PAYLOADS, 5)
    final = [r for r in read_jsonl(Path(summary["run"]) / "metrics" / "worker-0.jsonl")
             if r["event"] == "epoch"][-1]  # fmt: skip
    assert final["dropped_payloads"] == 5 * len(BAD_PAYLOADS)
    assert summary["workers"][1]["dropped"] == {}
