"""Per-layer timing: attribution of a step's time to layers, and what the profile measures."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from edgetrain.models import build_model, layer_specs
from edgetrain.profile.compute import ComputeConfig, _faster_half, estimate, profile_compute
from edgetrain.profile.timeline import LayerTimeline, _charge
from tests.helpers.vision import model_params


def test_forward_intervals_open_at_events() -> None:
    # layer 0 starts at 1.0 (start 0.5 counts for it), layer 2 at 3.0, layer 1 at 2.0
    out = _charge([(1.0, 0), (3.0, 2), (2.0, 1)], 0.5, 4.5, 3, forward=True)
    assert out.tolist() == [1.5, 1.0, 1.5]
    assert out.sum() == pytest.approx(4.0)


def test_backward_intervals_close_at_events() -> None:
    # layer 2 finishes first (at 1.0), then layer 1 (weight 2.0, bias 2.5), then layer 0
    out = _charge([(1.0, 2), (2.0, 1), (2.5, 1), (4.0, 0)], 0.0, 5.0, 3, forward=False)
    assert out.tolist() == [2.5, 1.5, 1.0]
    assert _charge([], 0.0, 2.0, 2, forward=False).tolist() == [2.0, 0.0]


def test_faster_half() -> None:
    assert _faster_half(np.array([5.0, 1.0, 2.0, 3.0, 100.0])).tolist() == [1, 2, 3]
    assert _faster_half(np.array([7.0])).tolist() == [0]
    assert estimate([1.0, 2.0, 9.0, 10.0]) == 1.5


@pytest.mark.parametrize(
    ("name", "shape"), model_params([("lenet5", (1, 28, 28)), ("resnet18", (3, 8, 8))])
)
def test_hooked_step_is_split_without_loss(name: str, shape: tuple[int, int, int]) -> None:
    torch.manual_seed(0)
    model = build_model(name, shape, 10)
    specs = layer_specs(model, shape)
    timeline = LayerTimeline(model.train(), specs, "cpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(2, *shape), torch.randint(0, 10, (2,))
    st = timeline.step(x, y, torch.nn.functional.cross_entropy, opt)
    # every instant of the step is charged to exactly one layer (up to clock reads)
    assert st.fwd.sum() + st.bwd.sum() == pytest.approx(st.total_s, rel=1e-3, abs=1e-4)
    assert (st.fwd > 0).all() and (st.bwd > 0).all()  # every layer ran both ways
    assert len(st.activation_bytes) == len(specs)
    assert st.activation_bytes[-1] == 2 * 10 * 4  # the logits


def test_profile_compute_fields() -> None:
    shape = (1, 8, 8)
    model = build_model("mlp", shape, 10)
    specs = layer_specs(model, shape)
    cfg = ComputeConfig(batch_sizes=(4, 2), warmup=1, repeats=3, min_time_s=0.0)
    calls: list[tuple[str, int, int]] = []
    cp = profile_compute(model, specs, shape, cfg, lambda *a: calls.append(a))
    assert [lp.name for lp in cp.layers] == [s.name for s in specs]
    assert set(cp.throughput) == {4, 2} and cp.throughput[4] == pytest.approx(4 / cp.step_s)
    assert cp.peak_memory_bytes > 0 and cp.peak_memory_source
    assert [c[1:] for c in calls] == [(1, 3), (2, 3), (3, 3)] * 2  # 3 runs per batch size
    assert cp.repeats == 3
    more = profile_compute(model, specs, shape, ComputeConfig(batch_sizes=(4,), min_time_s=0.2))
    assert more.repeats >= 10  # how many more depends on how fast this machine is right now
    assert all(lp.fwd_iqr_s >= 0 and lp.bwd_iqr_s >= 0 for lp in cp.layers)


def test_given_inputs_are_timed_cycled_to_each_batch() -> None:
    """The caller's samples, the first of them cycled to the batch size; without them, random."""
    from edgetrain.profile.compute import _Trainer

    shape = (1, 8, 8)
    samples = np.arange(3 * 64, dtype=np.float32).reshape(3, *shape)
    tr = _Trainer(build_model("mlp", shape, 10), ComputeConfig((4,), inputs=samples), shape)
    x, y = tr.batch(5)
    assert x.shape == (5, *shape) and y.shape == (5,)
    assert torch.equal(x, torch.from_numpy(samples[[0, 1, 2, 0, 1]]))
    assert torch.equal(tr.batch(2)[0], torch.from_numpy(samples[:2]))
    plain = _Trainer(build_model("mlp", shape, 10), ComputeConfig((4,)), shape)
    assert plain.batch(4)[0].shape == (4, *shape)
    cp = profile_compute(
        build_model("mlp", shape, 10),
        layer_specs(build_model("mlp", shape, 10), shape),
        shape,
        ComputeConfig((4,), warmup=1, repeats=2, min_time_s=0.0, inputs=samples),
    )
    assert cp.step_s > 0


def test_a_profile_times_batches_in_the_layout_a_run_takes_them() -> None:
    """One-channel images (digits, as the loader gives them) batched as the workers batch them
    (``index_select`` from ``torch.from_numpy``): torch's standard strides, not the stride of 1
    on the channel axis a numpy cut gives, which sends convolutions down the channels-last
    kernels (a faster path no run takes)."""
    from edgetrain.data.loaders import load_dataset
    from edgetrain.profile.compute import _Trainer
    from edgetrain.profile.run import first_samples
    from edgetrain.recipe import DataSection

    data = load_dataset(DataSection(dataset="digits"), 0)
    samples = first_samples(data)
    shape = tuple(samples.shape[1:])
    assert shape[0] == 1
    tr = _Trainer(build_model("lenet5", shape, 10), ComputeConfig((16,), inputs=samples), shape)
    x, _ = tr.batch(16)
    workers = torch.from_numpy(np.ascontiguousarray(data.x_train, dtype=np.float32))
    run = workers.index_select(0, torch.arange(16))
    assert torch.equal(x, run) and x.stride() == run.stride()
    numpy_cut = torch.from_numpy(np.ascontiguousarray(samples[np.arange(16)], np.float32))
    assert numpy_cut.stride() != run.stride()  # the layout the profile used to time


PEAK_SCRIPT = """
import json, torch
from edgetrain.profile.memory import peak_memory
with peak_memory("cpu") as small:
    torch.ones(16)
with peak_memory("cpu") as big:
    t = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched
    del t
print(json.dumps([small.source, small.bytes, big.source, big.bytes]))
"""


def test_peak_memory_sees_a_large_allocation() -> None:
    # A fresh process: in a long test session freed memory is reused (and the allocator may be
    # told to keep large buffers), so a new 64 MiB tensor need not raise the resident peak.
    done = subprocess.run(
        [sys.executable, "-c", PEAK_SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    small_source, small_bytes, big_source, big_bytes = json.loads(done.stdout)
    assert big_source == small_source
    if big_source == "vmhwm":
        assert big_bytes - small_bytes > 48 * 2**20


def test_bad_config() -> None:
    with pytest.raises(Exception, match="batch sizes"):
        ComputeConfig(batch_sizes=())


def test_millisecond_steps_get_enough_runs_to_fill_min_time() -> None:
    from edgetrain.profile.compute import MAX_REPEATS, timed_runs

    cfg = ComputeConfig(batch_sizes=(4,), repeats=10, min_time_s=0.2)
    assert timed_runs(cfg, 0.001) == 200  # 1 ms steps: 200 runs fill 0.2 s
    assert timed_runs(cfg, 0.05) == 10  # slow steps: the requested repeats
    assert timed_runs(cfg, 1e-9) == MAX_REPEATS
