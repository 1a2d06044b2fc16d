"""iBatch as [DC Alg. 1/2] give it, on tables worked by hand (shared/specs/ps.md §1.8)."""

from __future__ import annotations

import numpy as np
import pytest

from edgetrain.plan.baselines import ibatch_back, ibatch_cuts, ibatch_front
from edgetrain.plan.costs import LayerCosts
from edgetrain.plan.simulator import prefix


def _p(values: list[float]) -> np.ndarray:
    return prefix(np.array(values, dtype=float))


@pytest.mark.parametrize(
    ("pt", "fc", "dt", "front", "back"),
    [
        # L=4: D1=2 is the largest feasible first segment (1+8-4 >= 4; D1=3 is not); its second
        # pull must cover FC(0,2]=4: layers 3..4 (5 >= 4). From the back: the pair (0, 2) has
        # the largest covered compute (4).
        ([2, 2, 2, 2], [3, 1, 1, 1], 1.0, [2], [2]),
        # compute too heavy for any pull: the closest-to-feasible pair (deficit 8) both ways
        ([1, 1, 1], [10, 10, 10], 0.0, [1], [1]),
        # L=5, all ones: the front takes D1=2, then the pull covering 2 ends at 4, then L;
        # the back ties (0,2) and (1,3) on compute 2, takes the shorter last pull (b=3), then
        # x=0 covers FC(0,1]=1 <= PT(1,3]=2
        ([1, 1, 1, 1, 1], [1, 1, 1, 1, 1], 0.0, [2, 4], [1, 3]),
        ([1.0], [1.0], 0.5, [], []),  # one layer: one segment
    ],
)
def test_ibatch_greedy_tables(
    pt: list[float], fc: list[float], dt: float, front: list[int], back: list[int]
) -> None:
    assert ibatch_front(_p(pt), _p(fc), dt) == front
    assert ibatch_back(_p(pt), _p(fc), dt) == back


def test_ibatch_keeps_the_faster_forward_and_lbl_backward() -> None:
    ones = [1.0] * 5
    costs = LayerCosts(np.array(ones), np.array(ones), np.array(ones), np.array(ones), 0.0)
    forward, backward = ibatch_cuts(costs)
    assert forward == [1, 3]  # both take 7 s; the tie goes to the smaller cut list
    assert backward == [1, 2, 3, 4]
