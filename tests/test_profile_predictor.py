"""Performance predictor: regression of slowdown on contention, held-out error, history, load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgetrain.profile.loadgen import load
from edgetrain.profile.predictor import (
    ContentionRecord,
    Predictor,
    append_history,
    held_out_mape,
    history_error,
    platform_throughput,
    read_history,
)
from tests.helpers.waiting import wait_until


def _records(run: str, levels: list[float], noise: float, seed: int) -> list[ContentionRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for level in levels:
        for _ in range(3):
            u = (level * 2 + rng.normal(0, 0.02), 1e5 * level, 3e7 * level)
            rg = 1 + 1.5 * u[0] + 0.01 * u[2] / 1e6  # a known linear slowdown
            out.append(
                ContentionRecord(
                    run, "m", 8, level, u, 0.01, 0.01 * rg * (1 + noise * rng.normal())
                )
            )
    return out


def test_predictor_learns_a_known_slowdown() -> None:
    recs = _records("r1", [0, 0.25, 0.5, 0.75, 1.0], 0.0, 0)
    pred = Predictor().fit(recs)
    assert pred.predict_rg((1.0, 5e4, 1.5e7)) == pytest.approx(1 + 1.5 + 0.15, rel=0.05)
    assert pred.predict_rg((-5.0, 0.0, 0.0)) == 1.0  # clipped: never faster than uncontended
    assert pred.predict_time(0.02, (0.0, 0.0, 0.0)) == pytest.approx(0.02, rel=0.05)
    assert pred.throughput(100.0, (1.0, 5e4, 1.5e7)) == pytest.approx(100 / 2.65, rel=0.05)


def test_held_out_mape_small_without_noise_larger_with() -> None:
    clean, per_level = held_out_mape(_records("r", [0, 0.25, 0.5, 0.75, 1.0], 0.0, 1), "r")
    assert clean < 0.02 and set(per_level) == {0, 0.25, 0.5, 0.75, 1.0}
    noisy, _ = held_out_mape(_records("r", [0, 0.25, 0.5, 0.75, 1.0], 0.1, 1), "r")
    assert noisy > clean


def test_history_error_is_the_mean_over_its_runs_of_the_held_out_error() -> None:
    a = _records("a", [0, 0.25, 0.5, 0.75, 1.0], 0.0, 1)
    b = _records("b", [0, 0.5, 1.0], 0.2, 2)
    both = a + b
    expected = (held_out_mape(both, "a")[0] + held_out_mape(both, "b")[0]) / 2
    assert history_error(both) == pytest.approx(expected)
    assert history_error(a) == pytest.approx(held_out_mape(a, "a")[0])
    # one level of one run: nothing is left to train on when it is held out
    assert history_error(a[:3]) is None
    assert history_error([]) is None


def test_history_round_trip_and_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    recs = _records("a", [0, 1.0], 0.0, 2)
    append_history(path, recs[:3])
    append_history(path, recs[3:])
    with open(path, "a") as fh:
        fh.write('not json\n{"run": 1}\n')
    back = read_history(path)
    assert back == recs and back[0].rg == pytest.approx(recs[0].rg)
    assert read_history(tmp_path / "missing.jsonl") == []


def test_platform_throughput_sums_executors() -> None:
    assert platform_throughput([0.5, 0.25, 0.0]) == pytest.approx(6.0)


def test_load_generator_runs_and_is_reaped(tmp_path: Path) -> None:
    with load(0.5, cpu_workers=1, disk=True, directory=tmp_path) as procs:
        assert len(procs) == 2
        cpu = procs[0]

        def ticks() -> int:
            stat = Path(f"/proc/{cpu.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return int(stat[11]) + int(stat[12])

        wait_until(lambda: ticks() >= 5, 15, "the CPU load burns 5 ticks")
        wait_until(lambda: list(tmp_path.iterdir()), 15, "the disk writer's file")
    assert all(p.poll() is not None for p in procs)
    assert not list(tmp_path.iterdir())  # removed on exit
    with load(0.0) as none:
        assert none == []


def test_contention_run_records_load_and_learns(tmp_path: Path) -> None:
    from edgetrain.models import build_model
    from edgetrain.profile.compute import ComputeConfig
    from edgetrain.profile.contention import measure_contention

    shape = (1, 8, 8)
    cfg = ComputeConfig(batch_sizes=(8,), warmup=1, repeats=1)
    recs = measure_contention(
        build_model("mlp", shape, 10), shape, cfg, "mlp", [0.0, 1.0, 0.5], windows=2, window_s=0.4
    )
    assert [r.level for r in recs] == [0.0, 0.0, 1.0, 1.0, 0.5, 0.5]
    assert len({r.run for r in recs}) == 1 and all(r.t > 0 and r.t0 > 0 for r in recs)
    core = {lv: np.mean([r.u[0] for r in recs if r.level == lv]) for lv in (0.0, 1.0)}
    assert core[1.0] > core[0.0]  # the generator's processes show up as co-running demand
    append_history(tmp_path / "h.jsonl", recs)
    mape, per_level = held_out_mape(read_history(tmp_path / "h.jsonl"), recs[0].run)
    assert np.isfinite(mape) and set(per_level) == {0.0, 0.5, 1.0}


def test_a_feature_the_history_never_saw_vary_does_not_explode_the_slowdown() -> None:
    """Literal rows of a contention history from the EdgeGossip testbed (host gpu-a, before
    its load was counted): core contention 0 throughout, the network rate noise between 0
    and 153 B/s. The live worker then saw 2.49 MB/s of its own traffic as co-running; the
    unbounded fit predicted RG = 419307 from it and the balancer gave the fastest host r = 0."""
    rows = [
        ((0.0, 0.0, 0.0), 1.158), ((0.0, 22.23, 0.0), 0.934), ((0.0, 152.928, 0.0), 1.219),
        ((0.0, 26.268, 0.0), 1.105), ((0.0, 136.753, 0.0), 2.755), ((0.0, 38.522, 0.0), 5.824),
        ((0.0, 75.36, 0.0), 3.131), ((0.0, 25.899, 0.0), 197.256), ((0.0, 38.912, 0.0), 15.037),
        ((0.0, 102.624, 0.0), 199.362), ((0.0, 0.0, 0.0), 18.458), ((0.0, 0.0, 0.0), 1.322),
    ]  # fmt: skip
    recs = [ContentionRecord("r", "lenet5", 64, 0.0, u, 0.005, 0.005 * rg) for u, rg in rows]
    pred = Predictor().fit(recs)
    worst = max(pred.predict_rg((0.0, n, 0.0)) for n in (0.0, 76.5, 153.0, 229.4))
    assert pred.predict_rg((0.0, 2.49e6, 0.0)) == pytest.approx(worst)  # held at the reach
    assert worst < max(rg for _u, rg in rows)
    # within the training range and a little past it, the fit is the unclipped one
    assert pred.predict_rg((0.5, 160.0, 0.0)) == pytest.approx(
        max(float(pred.model.predict(np.array([[0.0, 160.0 / 1e6, 0.0]]))[0]), 1.0)
    )
