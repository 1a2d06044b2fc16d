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
# the profile's step over the slow device's speed, then Adam's step beyond SGD's and the
# gradient's flattening, 2 MB at 1.09 + 0.50 ns a byte, at half speed
T_CP = 0.048 + 2_000_000 * 1.59e-9 / 0.5  # (0.008 + 0.016) / 0.5 + 0.00636
# the link, then the aggregation's own CPU at half speed: its bytes, 4 x 3/4 x 2 MB at 0.71 ns,
# and its 4 x 3 messages at 0.33 ms
HOST = (4 * 3 / 4 * 2_000_000 * 0.71e-9 + 12 * 0.33e-3) / 0.5  # 0.01644
LINK = 2 * 3 / 4 * 2_000_000 / 10e6 + 0.002  # 0.302
T_CM = LINK + HOST
PER_SAMPLE = 0.016 / 32  # the slow device's forward per sample


def test_uniform_is_compute_plus_aggregation() -> None:
    s = settings(MercurySection(), "multips-sgd", 32)
    p = predict_mercury(s, SETTING, Shape(DEVICES, 32, samples_per_device=640, sample_bytes=64))
    assert p.parts["compute"] == pytest.approx(T_CP)
    assert p.parts["communication"] == pytest.approx(T_CM)
    assert p.parts["importance"] == 0.0
    assert p.iteration_s == pytest.approx(T_CP + T_CM)
    assert p.bytes_per_iteration == 2 * 3 * 2_000_000
    assert p.parts["aggregation_overhead"] == pytest.approx(HOST)
    sgd = settings(MercurySection(optimizer="sgd"), "multips-sgd", 32)
    on_sgd = predict_mercury(sgd, SETTING, Shape(DEVICES, 32))
    assert on_sgd.parts["compute"] == pytest.approx(T_CP - 2_000_000 * 1.09e-9 / 0.5)
    # the profile ran at 0.5 core: a CPU second of one core is two of its seconds
    halved = Setting(SETTING.devices, SETTING.links, LAYERS, reference_cores=0.5)
    got = predict_mercury(s, halved, Shape(DEVICES, 32))
    assert got.parts["aggregation_overhead"] == pytest.approx(2 * HOST)
    assert got.parts["compute"] == pytest.approx(0.048 + 2 * (T_CP - 0.048))


def test_sequential_adds_refresh_and_resharding() -> None:
    s = settings(MercurySection(scheduler="sequential", groups=10), "mercury", 32)
    p = predict_mercury(s, SETTING, Shape(DEVICES, 32, samples_per_device=640, sample_bytes=64))
    refresh = 64 * PER_SAMPLE  # a fixed group: 640 / 10 samples
    reshard = 0.5 * 640 * 64 / 20 / 10e6  # rho N_k samples over a round of 20 iterations
    assert p.parts["importance"] == pytest.approx(refresh + reshard)
    assert p.iteration_s == pytest.approx(T_CP + T_CM + refresh + reshard)


def test_bacc_hides_the_refresh_but_not_on_one_core() -> None:
    s = settings(MercurySection(), "mercury", 32)
    chunk = 32 * PER_SAMPLE  # 16 ms, inside the 302 ms aggregation
    # anytime: the refresh stops with the aggregation (640 samples would take 0.32 s); T1
    # waits for the chunk in flight then, half a chunk on average
    p = predict_mercury(s, SETTING, Shape(DEVICES, 32, samples_per_device=640, sample_bytes=64))
    assert p.parts["importance"] == pytest.approx(chunk / 2)
    assert p.iteration_s == pytest.approx(T_CP + T_CM + chunk / 2)
    # a dataset of one chunk: refreshed whole inside the aggregation, nothing in flight
    one = predict_mercury(s, SETTING, Shape(DEVICES, 32, samples_per_device=32))
    assert one.parts["importance"] == 0.0
    # the side's own hook (the local dataset not known): taken as larger than a chunk
    assert predict_mercury(s, SETTING, Shape(DEVICES, 32)).parts["importance"] == pytest.approx(
        chunk / 2
    )
    half = Shape(DEVICES, 32, samples_per_device=320, cores=0.5)
    one_core = predict_mercury(s, SETTING, half)
    # on half a core the first chunk shows whole, then the chunk in flight
    assert one_core.parts["importance"] == pytest.approx(chunk + chunk / 2)
    assert "adds" in one_core.notes[0]
    # the batch's own losses are the first chunk: every refresh is paced, only the chunk in
    # flight at the aggregation's end shows
    batch = settings(MercurySection(batch_refresh=True), "mercury", 32)
    assert predict_mercury(batch, SETTING, half).parts["importance"] == pytest.approx(chunk / 2)
    # ``auto`` (the default) on devices under a CPU quota: resolved as a device would, the
    # batch's losses are the first chunk there too
    quota = tuple(Device(d.name, speed=d.speed, quota_period_s=0.1) for d in SETTING.devices)
    on_quota = Setting(quota, SETTING.links, LAYERS)
    assert predict_mercury(s, on_quota, half).parts["importance"] == pytest.approx(chunk / 2)


def test_bacc_fixed_group_shows_what_outlasts_the_aggregation() -> None:
    s = settings(MercurySection(group_size="fixed", groups=1), "mercury", 32)
    # a fixed group of the whole 640 samples (0.32 s) outlasts the 302 ms aggregation
    p = predict_mercury(s, SETTING, Shape(DEVICES, 32, samples_per_device=640))
    assert p.parts["importance"] == pytest.approx(640 * PER_SAMPLE - T_CM)
    small = settings(MercurySection(group_size="fixed", groups=10), "mercury", 32)
    assert (
        predict_mercury(small, SETTING, Shape(DEVICES, 32, samples_per_device=640)).parts[
            "importance"
        ]
        == 0.0
    )  # 64 samples (32 ms): hidden whole
    half = Shape(DEVICES, 32, samples_per_device=640, cores=0.5)
    assert predict_mercury(small, SETTING, half).parts["importance"] == pytest.approx(
        32 * PER_SAMPLE
    )  # on half a core, never less than the first chunk


def test_cpu_use_is_cpu_over_the_cores_times_the_iteration() -> None:
    from edgetrain.ps.mercury.mercury_report import cpu_use

    # 19.6 ms of CPU in a 53 ms iteration on 0.45 core: 82% of the share
    assert cpu_use({"cpu_s": 0.0196, "t_it_s": 0.053}, 0.45) == pytest.approx(0.0196 / 0.02385)
    assert cpu_use({"cpu_s": None, "t_it_s": 0.053}, 0.45) is None  # a run from before cpu_s
    assert cpu_use({"cpu_s": 0.01, "t_it_s": 0.053}, None) is None


def test_a_calibration_takes_the_measured_compute_and_the_aggregations_own_work() -> None:
    from edgetrain.ps.mercury.predict import Calibration

    # a uniform run at 10 MB/s measured T_cp 60 ms and T_cm 0.302 + 0.040 s: 40 ms beyond
    # the link model, which the model then adds at every rate (in place of the a priori terms)
    cal = Calibration(t_cp_s=0.060, t_cm_s=LINK + 0.040, bandwidth_Bps=10e6)
    s = settings(MercurySection(), "multips-sgd", 32)
    shape = Shape(DEVICES, 32, samples_per_device=640, calibration=cal)
    same = predict_mercury(s, SETTING, shape)
    assert same.parts["compute"] == pytest.approx(0.060)
    assert same.parts["aggregation_overhead"] == pytest.approx(0.040)
    assert same.iteration_s == pytest.approx(0.060 + LINK + 0.040)  # its own run back
    faster = Setting(SETTING.devices, (Link(20e6, 0.001),), LAYERS)
    fast = predict_mercury(s, faster, shape)
    link = 2 * 3 / 4 * 2_000_000 / 20e6 + 0.002
    assert fast.parts["communication"] == pytest.approx(link + 0.040)
    assert "calibrated" in fast.notes[-1]
    # a run faster than the link model (a burst above the rate) adds nothing
    quick = Calibration(t_cp_s=0.060, t_cm_s=0.2, bandwidth_Bps=10e6)
    got = predict_mercury(s, SETTING, Shape(DEVICES, 32, calibration=quick))
    assert got.parts["aggregation_overhead"] == 0.0
    with pytest.raises(ValueError, match="t_cm_s"):
        Calibration(t_cp_s=0.06, t_cm_s=0.0, bandwidth_Bps=10e6)


def test_a_quota_refills_while_the_slowest_device_waits_on_the_link() -> None:
    """Under a CPU quota the slowest device's work runs at the reference speed after a wait
    long enough to refill it: the iteration is ``max(work, work x speed + link)``, never more
    than ``work + link``; without a quota period it stays ``work + link``."""
    s = settings(MercurySection(), "multips-sgd", 32)
    quota = (Device("a"), Device("b"), Device("c"), Device("d", speed=0.5, quota_period_s=0.1))
    got = predict_mercury(s, Setting(quota, SETTING.links, LAYERS), Shape(DEVICES, 32))
    work = T_CP + HOST  # the slow device's own CPU an iteration, at its average speed
    assert got.iteration_s == pytest.approx(work * 0.5 + LINK)  # the link outlasts the stalls
    assert got.parts["quota_overlap"] == pytest.approx(work * 0.5)
    assert got.parts["exposed_communication"] == pytest.approx(T_CM - work * 0.5)
    assert any("quota refills" in n for n in got.notes)
    fast = (Link(10e9, 0.0),)  # a link too quick to matter: the quota binds, the link hides
    bound = predict_mercury(s, Setting(quota, fast, LAYERS), Shape(DEVICES, 32))
    host = (4 * 3 / 4 * 2_000_000 * 0.71e-9 + 12 * 0.33e-3) / 0.5
    assert bound.iteration_s == pytest.approx(T_CP + host)
    plain = predict_mercury(s, Setting(SETTING.devices, fast, LAYERS), Shape(DEVICES, 32))
    assert plain.iteration_s == pytest.approx(T_CP + host + 2 * 3 / 4 * 2_000_000 / 10e9)
    assert "quota_overlap" not in plain.parts


def test_the_report_says_which_devices_resolved_auto_how() -> None:
    from edgetrain.ps.mercury.mercury_report import _on_devices, device_keys

    row = {"under_quota": True, "batch_refresh": True, "pace_utilisation": 0.6, "t_cp_s": 1.0}
    assert device_keys(row) == {"under_quota": True, "batch_refresh": True, "pace_utilisation": 0.6}
    free = {"under_quota": False, "batch_refresh": False, "pace_utilisation": 1.0}
    line = _on_devices({"0": device_keys(row), "1": device_keys(row), "2": free})
    assert line == (
        "On the devices ('auto' resolved): batch_refresh = true, pace_utilisation = 0.6 on "
        "device(s) 0, 1 (under a CPU quota); batch_refresh = false, pace_utilisation = 1.0 on "
        "device(s) 2 (not under a CPU quota)."
    )
    # devices of an older version report none: no line
    assert _on_devices({"0": device_keys({})}) is None
