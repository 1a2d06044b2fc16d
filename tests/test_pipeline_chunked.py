"""Chunked unit kernels (specification §6.7, ``[pipeline] chunk_mib``): mcPipe stays bit for
bit PipeDream with chunking on, chunked training is numerically close to unchunked, the
transient is one chunk (the bound against the specification's literal tables), and the key is
validated in one line."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from edgetrain.models.small import cnn2
from edgetrain.pipeline import simulate
from edgetrain.pipeline.bounds import UnitSize, resident, transient
from edgetrain.pipeline.chunked import chunk_elems, row_chunks
from edgetrain.pipeline.stores import Hyper
from tests.helpers.cli import run_cli


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


RNG = np.random.default_rng(0)
X = RNG.standard_normal((160, 1, 8, 8)).astype(np.float32)
Y = RNG.integers(0, 10, 160).astype(np.int64)
SHAPE = (1, 8, 8)
CHUNK_MIB = 0.002  # 524 floats: several chunks per layer of these small models


def fc_heavy() -> nn.Module:
    """An FC-heavy MLP (wide hidden layers), three units."""
    torch.manual_seed(2)
    return nn.Sequential(
        nn.Flatten(), nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 96), nn.ReLU(),
        nn.Linear(96, 10),
    )  # fmt: skip


def small_cnn2() -> nn.Module:
    torch.manual_seed(0)
    return cnn2(SHAPE, 10, width=8)


MODELS = {
    "mlp": (fc_heavy, {2: [(0, 2), (2, 3)], 3: [(0, 1), (1, 2), (2, 3)]}),
    "cnn2": (small_cnn2, {2: [(0, 2), (2, 4)], 3: [(0, 1), (1, 3), (3, 4)]}),
}


def _run(model: str, n: int, technique: str, chunk_mib: float, **kw: Any) -> simulate.SimResult:
    make, splits = MODELS[model]
    kw.setdefault("microbatch", 8)
    kw.setdefault("cap", 10)
    kw.setdefault("epochs", 2)
    return simulate.run(make, model, SHAPE, X, Y, splits[n], technique, chunk_mib=chunk_mib, **kw)


@pytest.mark.parametrize("model", ["mlp", "cnn2"])
@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("extra", [0, 1])
@pytest.mark.parametrize(
    "hyper", [Hyper(0.05), Hyper(0.05, momentum=0.9, weight_decay=1e-4)], ids=["sgd", "momentum"]
)
def test_chunked_mcpipe_is_bitwise_chunked_pipedream(
    model: str, n: int, extra: int, hyper: Hyper
) -> None:
    pd = _run(model, n, "pipedream", CHUNK_MIB, extra=extra, hyper=hyper)
    mc = _run(model, n, "mcpipe", CHUNK_MIB, extra=extra, hyper=hyper)
    assert any(m == "pairs" for modes in mc.modes for m in modes)
    assert pd.weights.keys() == mc.weights.keys()
    for k in pd.weights:
        assert np.array_equal(pd.weights[k], mc.weights[k]), k
    assert pd.losses == mc.losses


@pytest.mark.parametrize("model", ["mlp", "cnn2"])
@pytest.mark.parametrize("technique", ["pipedream", "greedy", "mcpipe", "local"])
def test_chunked_is_close_to_unchunked(model: str, technique: str) -> None:
    n = 1 if technique == "local" else 2
    if n == 1:
        make, _ = MODELS[model]
        bounds = [(0, 3 if model == "mlp" else 4)]
        kw: dict[str, Any] = dict(microbatch=8, cap=10, epochs=2, hyper=Hyper(0.05, momentum=0.9))
        plain = simulate.run(make, model, SHAPE, X, Y, bounds, technique, **kw)
        chunked = simulate.run(
            make, model, SHAPE, X, Y, bounds, technique, chunk_mib=CHUNK_MIB, **kw
        )
    else:
        plain = _run(model, n, technique, 0.0, hyper=Hyper(0.05, momentum=0.9))
        chunked = _run(model, n, technique, CHUNK_MIB, hyper=Hyper(0.05, momentum=0.9))
    for k in plain.weights:
        np.testing.assert_allclose(chunked.weights[k], plain.weights[k], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(chunked.losses, plain.losses, rtol=1e-4, atol=1e-5)


def test_chunked_transient_is_one_chunk_measured() -> None:
    """mcPipe's measured transient (plain SGD, Linear units: no gradient tensor) is one chunk
    of weights (plus its bias rows) over the resident bytes; unchunked, a whole unit."""
    c = chunk_elems(CHUNK_MIB)
    for mib, limit in ((CHUNK_MIB, 2 * c * 4), (0.0, None)):
        res = _run("mlp", 3, "mcpipe", mib, hyper=Hyper(0.05))
        mem = res.memory[0]
        extra = mem["transient_peak_bytes"] - mem["resident_bytes"]
        if limit is not None:
            assert 0 < extra <= limit, mem
        else:
            assert extra >= (64 * 96 + 96) * 4, mem  # the whole first unit


def test_row_chunks_and_chunk_size() -> None:
    assert chunk_elems(0) == 0 and chunk_elems(None) == 0
    assert chunk_elems(1.0) == 262_144  # 1 MiB of float32
    assert row_chunks((10, 4), 8) == [slice(0, 2), slice(2, 4), slice(4, 6), slice(6, 8),
                                      slice(8, 10)]  # fmt: skip
    assert row_chunks((3, 2, 3, 3), 40) == [slice(0, 2), slice(2, 3)]
    assert row_chunks((4, 100), 10) == [slice(k, k + 1) for k in range(4)]  # a row at least


# Stage 0 of the FC-heavy MLP 784-2048-2048-2048-10 cut N = 3 [L1 L2 | L3 | L4], b = 16
# (specification §7.5): L1 784->2048, L2 2048->2048.
STAGE0 = [UnitSize(784 * 2048 + 2048, 784 + 2048), UnitSize(2048 * 2048 + 2048, 2048 + 2048)]
C = 262_144  # 0.25 M floats (1 MiB)


def test_transient_bound_literal_tables() -> None:
    # unchunked: a whole unit replayed plus its gradient (mcPipe), a gradient (PipeDream)
    assert transient("pairs", STAGE0) == 2 * 4_196_352 * 4
    assert transient("versions", STAGE0) == 4_196_352 * 4
    assert transient("pairs", STAGE0, fused=True) == 4_196_352 * 4
    # chunked: at most 2c for every schedule (3c for mcPipe with momentum)
    assert transient("pairs", STAGE0, chunk=C) == 2 * C * 4
    assert transient("versions", STAGE0, chunk=C) == C * 4
    assert transient("latest", STAGE0, chunk=C) == C * 4
    assert transient("pairs", STAGE0, fused=True, chunk=C) == C * 4
    assert transient("pairs", STAGE0, momentum=True, chunk=C) == 3 * C * 4
    # a chunk larger than every unit changes nothing
    assert transient("pairs", STAGE0, chunk=10**8) == transient("pairs", STAGE0)


@pytest.mark.parametrize(
    ("m", "chunk", "pipedream", "mcpipe", "ratio"),
    [  # §7.5's transient table, in floats (peak = resident + transient)
        (3, 0, 21_608_448, 14_418_432, 1.50),
        (4, 0, 27_412_480, 14_529_280, 1.89),
        (3, C, 17_674_240, 6_550_016, 2.70),
        (4, C, 23_478_272, 6_660_864, 3.52),
    ],
)
def test_peak_gain_literal_table(
    m: int, chunk: int, pipedream: int, mcpipe: int, ratio: float
) -> None:
    pd = resident("versions", m, STAGE0, 16) + transient("versions", STAGE0, chunk=chunk)
    mc = resident("pairs", m, STAGE0, 16) + transient("pairs", STAGE0, chunk=chunk)
    assert (pd // 4, mc // 4) == (pipedream, mcpipe)
    assert pd / mc == pytest.approx(ratio, abs=0.01)


RECIPE = """
[run]
name = "chunked"
[data]
dataset = "digits"
[model]
name = "mlp"
[train]
family = "pipeline"
technique = "mcpipe"
[pipeline]
chunk_mib = {value}
[[workers]]
role = "stage"
count = 2
"""


@pytest.mark.parametrize("value", ["-1", '"big"', "nan", "1e9"])
def test_bad_chunk_mib_is_refused_in_one_line(
    value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.toml").write_text(RECIPE.format(value=value))
    code, _, err = run_cli(capsys, "check", "r.toml")
    assert code == 2, err
    assert "chunk_mib" in err and "Traceback" not in err
    assert len([ln for ln in err.splitlines() if ln.startswith("error")]) == 1, err


def test_good_chunk_mib_passes_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.toml").write_text(RECIPE.format(value="1.5"))
    code, _, err = run_cli(capsys, "check", "r.toml")
    assert code == 0, err


def test_stage_report_shows_replay_against_its_estimate() -> None:
    from edgetrain.pipeline.stage_report import render, stage_row

    row = stage_row(
        0,
        {"technique": "mcpipe", "m": 3, "role_name": "stage", "role_index": 0,
         "units": ["1", "3"], "store_modes": ["pairs", "pairs"],
         "timers": {"compute_s": 6.0, "replay_s": 1.5}},
    )  # fmt: skip
    # replay 1.5 s over 4.5 s of other compute = 1/3, against w/3 = 2/3: half the estimate
    assert row["replay_share"] == pytest.approx(1 / 3)
    assert row["replay_expected"] == pytest.approx(2 / 3)
    assert row["replay_vs_estimate"] == pytest.approx(0.5)
    assert "| replay/estimate |" in render([row], []) and "| 0.50 |" in render([row], [])
    pd = stage_row(0, {"technique": "pipedream", "m": 3, "timers": {"compute_s": 6.0}})
    assert pd["replay_vs_estimate"] is None and pd["replay_expected"] is None


def test_replay_share_is_read_from_cpu_time_where_the_stage_measured_it() -> None:
    from edgetrain.pipeline.accounting import Timers
    from edgetrain.pipeline.stage_report import stage_row

    # under a quota the wall clock charged the quota's waits to the replay: 3 s of 6 in wall
    # time (1x the rest), 1 of 4 in CPU time (1/3 the rest)
    timers = {"compute_s": 6.0, "replay_s": 3.0, "compute_cpu_s": 4.0, "replay_cpu_s": 1.0}
    row = stage_row(0, {"technique": "mcpipe", "m": 2, "timers": timers})
    assert row["replay_share"] == pytest.approx(1 / 3)
    assert row["replay_vs_estimate"] == pytest.approx(1.0)
    # the timers record both: a block that sleeps takes wall time and almost no CPU
    t = Timers()
    with t.time("replay_s"):
        sum(range(200_000))
    with t.time("wait_s"):
        time.sleep(0.05)
    assert t.get("wait_s") >= 0.05 and t.cpu_get("wait_s") < 0.04
    assert t.cpu_get("replay_s") > 0


SIM_RECIPE = """
[run]
name = "sim"
seed = {{seed}}
[data]
dataset = "digits"
[model]
name = "mlp"
[train]
family = "pipeline"
technique = "mcpipe"
epochs = 1
batch_size = 16
[pipeline]
microbatch = 16
microbatches = 6
split = [1, 2]
chunk_mib = {chunk}
[[workers]]
role = "stage"
count = 2
"""


def test_the_reproductions_simulator_uses_the_recipes_chunks() -> None:
    """The mcPipe reproduction's T14 check (a run's weights against the in-process
    simulator's) replays a run with the recipe's kernels: chunked unit kernels change the
    floating-point sums, so a chunked run matched only a chunked simulation (the full run of
    2026-12-05: 04fd17b3 against 16de1b67 before)."""
    from reproductions.mcpipe_sim import simulated_sha

    chunked = simulated_sha(SIM_RECIPE.format(chunk=CHUNK_MIB), 1, [1, 2])
    plain = simulated_sha(SIM_RECIPE.format(chunk=0), 1, [1, 2])
    assert chunked != plain
    assert simulated_sha(SIM_RECIPE.format(chunk=CHUNK_MIB), 1, [1, 2]) == chunked
