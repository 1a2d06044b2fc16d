"""DynaComm is optimal: brute force over every cut set (L <= 14) under the simulator."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.plan import dynacomm
from edgetrain.plan.baselines import ibatch_cuts, lbl_cuts, sequential_cuts
from edgetrain.plan.costs import LayerCosts
from edgetrain.plan.simulator import evaluate_backward, evaluate_forward, simulate
from edgetrain.plan.strategies import plan_all


def _all_cut_sets(layers: int) -> list[list[int]]:
    return [
        [i for i, keep in zip(range(1, layers), bits, strict=True) if keep]
        for bits in itertools.product((False, True), repeat=layers - 1)
    ]


def _brute(costs: LayerCosts) -> tuple[float, float]:
    sets = _all_cut_sets(costs.num_layers)
    return (
        min(evaluate_forward(costs, c) for c in sets),
        min(evaluate_backward(costs, c) for c in sets),
    )


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))


def _check_optimal(costs: LayerCosts) -> None:
    best_f, best_b = _brute(costs)
    f, fcuts = dynacomm.forward(costs)
    b, bcuts = dynacomm.backward(costs)
    assert _close(f, best_f) and _close(b, best_b)
    # its predicted value is the simulator's value for its own cuts
    assert _close(evaluate_forward(costs, fcuts), f) and _close(evaluate_backward(costs, bcuts), b)
    # the paper's O(L^3) programme agrees, and so do its traced-back cuts
    pf, pfcuts = dynacomm.paper_forward(costs)
    pb, pbcuts = dynacomm.paper_backward(costs)
    assert _close(pf, best_f) and _close(pb, best_b)
    assert _close(evaluate_forward(costs, pfcuts), pf)
    assert _close(evaluate_backward(costs, pbcuts), pb)
    # no other strategy beats it
    mine = simulate(costs, fcuts, bcuts).iteration_s
    for cutter in (sequential_cuts, lbl_cuts, ibatch_cuts):
        fw, bw = cutter(costs)
        assert mine <= simulate(costs, fw, bw).iteration_s * (1 + 1e-9)


def _costs(layers: int, seed: int, comm: float = 1.0, compute: float = 1.0, dt: float = 0.1):
    rng = np.random.default_rng(seed)
    pt, fc, bc, gt = (rng.exponential(1.0, layers) for _ in range(4))
    return LayerCosts(pt * comm, fc * compute, bc * compute, gt * comm, dt)


@pytest.mark.parametrize("layers", range(1, 15))
def test_optimal_for_every_depth_up_to_14(layers: int) -> None:
    _check_optimal(_costs(layers, seed=layers))


@pytest.mark.parametrize(
    ("comm", "compute", "dt"),
    [
        (1.0, 1000.0, 0.1),  # compute much larger than communication
        (1000.0, 1.0, 0.1),  # communication much larger than compute
        (1.0, 1.0, 0.0),  # no per-transmission overhead: finer is never worse
        (1.0, 1.0, 50.0),  # a large overhead: few segments
        (0.0, 1.0, 0.5),  # nothing to transfer but the overhead
        (1.0, 0.0, 0.5),  # nothing to compute
    ],
)
def test_optimal_at_the_extremes(comm: float, compute: float, dt: float) -> None:
    _check_optimal(_costs(12, seed=7, comm=comm, compute=compute, dt=dt))


def test_zero_dt_means_layer_by_layer_is_optimal() -> None:
    costs = _costs(10, seed=3, dt=0.0)
    fw, bw = lbl_cuts(costs)
    assert _close(dynacomm.forward(costs)[0], evaluate_forward(costs, fw))
    assert _close(dynacomm.backward(costs)[0], evaluate_backward(costs, bw))


_seconds = st.floats(min_value=0.0, max_value=1e3, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(min_value=1, max_value=10).flatmap(
        lambda n: st.tuples(
            st.lists(_seconds, min_size=n, max_size=n),
            st.lists(_seconds, min_size=n, max_size=n),
            st.lists(_seconds, min_size=n, max_size=n),
            st.lists(_seconds, min_size=n, max_size=n),
        )
    ),
    st.sampled_from([0.0, 1e-3, 1.0, 1e3]),
)
def test_optimal_on_random_costs(vectors: tuple, dt: float) -> None:
    pt, fc, bc, gt = (np.array(v) for v in vectors)
    _check_optimal(LayerCosts(pt, fc, bc, gt, dt))


def test_plan_all_ranks_dynacomm_first_and_reports_speedups() -> None:
    results = plan_all(_costs(30, seed=11, comm=2.0))
    best = min(r.timeline.iteration_s for r in results.values())
    assert results["dynacomm"].timeline.iteration_s == pytest.approx(best, rel=1e-12)
    assert results["sequential"].speedup_vs_sequential == 1.0
    assert results["dynacomm"].speedup_vs_sequential >= results["lbl"].speedup_vs_sequential


def test_timeline_respects_the_dependencies() -> None:
    costs = _costs(8, seed=5)
    tl = simulate(costs, [2, 5], [3])
    pulls = [s for s in tl.spans if s.kind == "pull"]
    fwd = [s for s in tl.spans if s.kind == "forward"]
    for p, f in zip(pulls, fwd, strict=True):
        assert f.start >= p.end - 1e-12  # a segment computes after its pull arrived
    for a, b in zip(pulls, pulls[1:], strict=False):
        assert b.start >= a.end - 1e-12  # transmissions are sequential
    pushes = [s for s in tl.spans if s.kind == "push"]
    bwd = [s for s in tl.spans if s.kind == "backward"]
    assert [(s.first_layer, s.last_layer) for s in bwd] == [(4, 8), (1, 3)]
    for p, b in zip(pushes, bwd, strict=True):
        assert p.start >= b.end - 1e-12  # a push starts after its gradients exist
    assert tl.forward_s == fwd[-1].end and tl.backward_s == pushes[-1].end


def test_bad_costs_are_refused() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        LayerCosts(np.array([-1.0]), np.ones(1), np.ones(1), np.ones(1), 0.1)
    with pytest.raises(ValueError, match="cuts must lie"):
        simulate(_costs(3, 1), [3], [])
