"""GoSGD mixing: alpha is conserved and the alpha-weighted average is invariant under gossip."""

from __future__ import annotations

import math

import numpy as np
import torch

from edgetrain.gossip.mixing import check_compatible, merge_into, weighted_average


def _state(rng: np.random.Generator) -> dict[str, torch.Tensor]:
    return {
        "w": torch.from_numpy(rng.standard_normal((4, 3)).astype(np.float32)),
        "b": torch.from_numpy(rng.standard_normal(3).astype(np.float32)),
    }


def test_pure_gossip_conserves_alpha_and_the_weighted_average() -> None:
    rng = np.random.default_rng(0)
    k = 5
    states = [_state(rng) for _ in range(k)]
    alphas = [1.0 / k] * k

    def average() -> dict[str, np.ndarray]:
        return weighted_average(
            [(a, {n: t.numpy() for n, t in s.items()}) for a, s in zip(alphas, states, strict=True)]
        )

    before = average()
    for _ in range(200):
        i, j = rng.choice(k, size=2, replace=False)
        alphas[i] /= 2  # sender halves and sends
        sent = {n: t.numpy().copy() for n, t in states[i].items()}
        alphas[j] = merge_into(states[j], alphas[j], sent, alphas[i])
    assert math.isclose(sum(alphas), 1.0, rel_tol=1e-12)
    after = average()
    for n in before:
        np.testing.assert_allclose(after[n], before[n], atol=1e-5)
    # and gossip drives the nodes towards consensus
    spread = max(float((s["w"] - torch.from_numpy(after["w"])).abs().max()) for s in states)
    assert spread < 0.05


def test_merge_formula() -> None:
    local = {"x": torch.tensor([1.0, 3.0])}
    alpha = merge_into(local, 0.25, {"x": np.array([5.0, 7.0], dtype=np.float32)}, 0.75)
    assert alpha == 1.0
    torch.testing.assert_close(local["x"], torch.tensor([4.0, 6.0]))


def test_check_compatible_rejects_bad_gossip() -> None:
    local = {"x": torch.zeros(2, 2)}
    ok = {"x": np.zeros((2, 2), dtype=np.float32)}
    assert check_compatible(local, ok, 0.5) is None
    assert check_compatible(local, ok, -1.0) == "bad_alpha"
    assert check_compatible(local, ok, float("nan")) == "bad_alpha"
    assert check_compatible(local, ok, "0.5") == "bad_alpha"
    assert check_compatible(local, ok, 2.0) == "bad_alpha"
    assert check_compatible(local, {"y": ok["x"]}, 0.5) == "bad_tensor_names"
    assert check_compatible(local, {"x": np.zeros(4, dtype=np.float32)}, 0.5) == "bad_tensor_shape"
    assert check_compatible(local, {"x": np.zeros((2, 2))}, 0.5) == "bad_tensor_dtype"
    assert check_compatible(local, {"x": np.full((2, 2), np.inf, np.float32)}, 0.5) == "non_finite"
