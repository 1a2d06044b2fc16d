"""Mercury's iteration-time model against literal tables: the uniform baseline is compute plus
aggregation, the sequential scheduler adds the refresh and the resharding piece, BACC hides the
refresh behind the aggregation except what outlasts it (and, without ``batch_refresh``, its
first chunk on one core)."""

from __future__ import annotations

import pytest

from edgetrain.ps.mercury.config import MercurySection, settings
from edgetrain.ps.mercury.predict import Shape, predict_mercury
from edgetrain.runtime.predict import Device, Layer, Link, Setting

# a minibatch of 32: forward 8 ms, backward 16 ms; 2 MB of parameters
LAYERS = (
    Layer("conv", forward_s=0.006, backward_s=0.012, param_bytes=400_000),
    Layer("fc", forward_s=0.002, backward_s=0.004, param_bytes=1_600_000),
)
# four devices, the last one half as fast; 10 MB/s, 1 ms one way
SETTING = Setting(
    devices=(Device("a"), Device("b"), Device("c"), Device("d", speed=0.5)),
    links=(Link(10e6, 0.001),),
    layers=LAYERS,
)
DEVICES = (0, 1, 2, 3)
T_CP = 0.048  # (0.008 + 0.016) / 0.5
T_CM = 2 * 3 / 4 * 2_000_000 / 10e6 + 0.002  # 0.302
PER_SAMPLE = 0.016 / 32  # the slow device's forward per sample


def test_uniform_is_compute_plus_aggregation() -> None:
    s = settings(MercurySection(), "multips-sgd", 32)
    p = predict_mercury(s, SETTING, Shape(DEVICES, 32, samples_per_device=640, sample_bytes=64))
    assert p.parts["compute"] == pytest.approx(T_CP)
    assert p.parts["communication"] == pytest.approx(T_CM)
    assert p.parts["importance"] == 0.0
    assert p.iteration_s == pytest.approx(T_CP + T_CM)
    assert p.bytes_per_iteration == 2 * 3 * 2_000_000


def test_sequential_adds_refresh_and_resharding() -> None:
    s = settings(MercurySection(scheduler="sequential", groups=10), "mercury", 32)
    p = predict_mercury(s, SETTING, Shape(DEVICES, 32, samples_per_device=640, sample_bytes=64))
    refresh = 64 * PER_SAMPLE  # a fixed group: 640 / 10 samples
    reshard = 0.5 * 640 * 64 / 20 / 10e6  # rho N_k samples over a round of 20 iterations
    assert p.parts["importance"] == pytest.approx(refresh + reshard)
    assert p.iteration_s == pytest.approx(T_CP + T_CM + refresh + reshard)


def test_bacc_hides_the_refresh_but_not_on_one_core() -> None:
    s = settings(MercurySection(), "mercury", 32)
    # the anytime refresh (640 samples, 0.32 s) outlasts the aggregation by 18 ms
    p = predict_mercury(s, SETTING, Shape(DEVICES, 32, samples_per_device=640, sample_bytes=64))
    assert p.parts["importance"] == pytest.approx(640 * PER_SAMPLE - T_CM)
    small = predict_mercury(s, SETTING, Shape(DEVICES, 32, samples_per_device=320))
    assert small.parts["importance"] == 0.0  # hidden whole
    half = Shape(DEVICES, 32, samples_per_device=320, cores=0.5)
    one_core = predict_mercury(s, SETTING, half)
    assert one_core.parts["importance"] == pytest.approx(32 * PER_SAMPLE)  # the first chunk
    assert "adds" in one_core.notes[0]
    # the batch's own losses are the first chunk: every refresh is paced, nothing shows
    batch = settings(MercurySection(batch_refresh=True), "mercury", 32)
    assert predict_mercury(batch, SETTING, half).parts["importance"] == 0.0
