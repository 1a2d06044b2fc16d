"""The pipeline family on its device (issue 29, item 1), on the CPU: the device abstraction
(resolving the recipe's device, moving tensors to and from the wire, the accelerator's memory
figures), a stage whose every weight, pending pair and buffer lives on its device, and mcPipe =
PipeDream bit for bit through the device-aware path on every device this machine has. The
runs on CUDA itself are in ``test_pipeline_cuda.py``."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch
from torch import nn

from edgetrain.errors import EdgetrainError
from edgetrain.pipeline import simulate, stage_report
from edgetrain.pipeline.family import FAMILY
from edgetrain.pipeline.stage_build import Stage, cut, make_stage, move_buffers
from edgetrain.pipeline.stores import Hyper
from edgetrain.pipeline.table import unit_table
from edgetrain.recipe import parse_recipe
from edgetrain.runtime import accelerator

CUDA = torch.cuda.is_available()
DEVICES = ["cpu", *(["cuda"] if CUDA else [])]
SHAPE = (1, 8, 8)
HYPER = Hyper(0.05, momentum=0.9, weight_decay=1e-4)


@pytest.fixture
def deterministic() -> Iterator[None]:
    """Deterministic kernels for the test (CUDA's differ run to run without), undone after."""
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(before)


def mixed() -> nn.Module:
    """Conv, BatchNorm (buffers), dropout and linear layers: four units."""
    torch.manual_seed(1)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.2), nn.Linear(64, 32), nn.ReLU(), nn.Dropout(0.2),
        nn.Linear(32, 10),
    )  # fmt: skip


# ------------------------------------------------------------------ the device abstraction


def test_cpu_and_auto_resolve_to_the_cpu_here_and_cuda_is_refused_in_one_line() -> None:
    assert accelerator.start_device("cpu") == torch.device("cpu")
    assert accelerator.start_device("auto").type == ("cuda" if CUDA else "cpu")
    if CUDA:
        assert accelerator.start_device("cuda").type == "cuda"
        return
    with pytest.raises(EdgetrainError) as err:
        accelerator.start_device("cuda")
    assert err.value.exit_code == 2
    assert str(err.value) == (
        "[train] device = 'cuda' but no CUDA device is available; use device = 'cpu' or 'auto'"
    )


@pytest.mark.parametrize("device", DEVICES)
def test_tensors_cross_the_wire_as_host_arrays(device: str) -> None:
    dev = torch.device(device)
    received = np.arange(12, dtype=np.float32).reshape(3, 4)
    received.flags.writeable = False  # as a message's buffer arrives
    t = accelerator.from_host(received, dev)
    assert t.device.type == dev.type and t.dtype == torch.float32
    t.add_(1)  # a tensor of its own: writable, and the message is untouched
    assert received[0, 0] == 0
    back = accelerator.to_host(t)
    assert isinstance(back, np.ndarray) and np.array_equal(back, received + 1)
    if dev.type == "cpu":  # on the CPU the wire reads the tensor's own memory: no copy
        assert np.shares_memory(back, t.numpy())


def test_the_accelerator_figures_are_absent_on_the_cpu() -> None:
    cpu = torch.device("cpu")
    accelerator.reset_memory_peaks(cpu)  # nothing to reset, nothing raised
    assert accelerator.memory_figures(cpu) == {}


# ------------------------------------------------------------------ a stage on its device


def _stage(technique: str, device: torch.device | None, bounds: tuple[int, int] = (0, 2)) -> Stage:
    with torch.device("meta"):
        infos = unit_table(cut(mixed(), "test", (0, 4)), SHAPE)
    units = cut(mixed(), "test", bounds)
    lo, hi = bounds
    return make_stage(
        units, infos[lo:hi], technique, HYPER, last=hi == 4, seed=0,
        input_shape=infos[lo].in_shape, microbatch=4, device=device,
    )  # fmt: skip


def test_every_weight_pair_and_buffer_of_a_stage_lives_on_its_device() -> None:
    """The meta device stands in for an accelerator (no CUDA needed): anything the stage left
    on the CPU would stay there, and mixing it with meta tensors would fail."""
    meta = torch.device("meta")
    st = _stage("mcpipe", meta)
    assert st.store.modes == ["pairs", "pairs"]
    assert {t.device for t in st.store.tensors()} == {meta}
    buffers = [b for u in st.units for m in u.modules() for b in m.buffers()]
    assert buffers and {b.device for b in buffers} == {meta}  # BatchNorm's statistics
    x = torch.zeros(4, *SHAPE, device=meta)
    out = [st.executor.forward(1, j, x) for j in range(2)]  # two in flight
    assert {o.device for o in out} == {meta}
    dx, micro = st.executor.backward(torch.zeros(out[0].shape, device=meta))
    assert dx is None  # the first stage sends no error upstream
    st.store.end_backward(micro.version, micro.calls)
    assert st.store.pending  # mcPipe keeps the pairs of the update microbatch 1 has not seen
    pairs = [t for p in st.store.pending for t in p.tensors()]
    assert pairs and {t.device for t in pairs} == {meta}
    assert {t.device for t in st.store.tensors()} == {meta}


def test_a_stage_left_on_the_cpu_cannot_take_device_inputs() -> None:
    """The check above has teeth: the same stage without its device refuses meta inputs."""
    st = _stage("mcpipe", None)
    assert {t.device.type for t in st.store.tensors()} == {"cpu"}
    with pytest.raises((RuntimeError, NotImplementedError)):
        st.executor.forward(1, 0, torch.zeros(4, *SHAPE, device="meta"))


def test_buffers_move_but_meta_parameters_stay() -> None:
    units = cut(mixed(), "test", (0, 4))
    from edgetrain.pipeline.executor import free_module_params

    free_module_params(units)
    move_buffers(units, torch.device("meta"))
    mods = [m for u in units for mod in u.modules() for m in mod.modules()]
    assert {b.device.type for m in mods for b in m.buffers()} == {"meta"}
    assert {p.device.type for m in mods for p in m.parameters()} == {"meta"}


# ------------------------------------------------------------------ the same bits, every device


RNG = np.random.default_rng(0)
X = RNG.standard_normal((160, *SHAPE)).astype(np.float32)
Y = RNG.integers(0, 10, 160).astype(np.int64)


def _sim(technique: str, **kw: object) -> simulate.SimResult:
    """Three stages, two epochs of ten microbatches."""
    bounds = [(0, 1), (1, 3), (3, 4)]
    return simulate.run(
        mixed, "test", SHAPE, X, Y, bounds, technique, epochs=2, microbatch=8, hyper=HYPER,
        cap=10, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.usefixtures("deterministic")
def test_mcpipe_equals_pipedream_through_the_device_path(device: str) -> None:
    dev = torch.device(device)
    pd, mc = (_sim(t, trace=True, device=dev) for t in ("pipedream", "mcpipe"))
    assert pd.trace == mc.trace  # every forward's and backward's weights, per microbatch
    assert set(pd.weights) == set(mc.weights)
    assert all(np.array_equal(pd.weights[k], mc.weights[k]) for k in pd.weights)
    assert all(np.isfinite(pd.losses))
    if dev.type == "cpu":  # the device path leaves the CPU's numbers as they were
        again = _sim("pipedream")
        assert all(np.array_equal(pd.weights[k], again.weights[k]) for k in pd.weights)


# ------------------------------------------------------------------ recipe and report


def test_the_family_takes_any_device() -> None:
    for device in ("cpu", "cuda", "auto"):
        recipe = parse_recipe(
            {
                "data": {"dataset": "digits"},
                "train": {"family": "pipeline", "technique": "mcpipe", "device": device},
                "workers": [{"role": "stage", "count": 2}],
            }
        )
        FAMILY.check(recipe)  # CUDA's presence is the launch's and the process's to check


def test_the_report_shows_the_accelerator_figures_only_where_a_stage_had_them() -> None:
    base = {"timers": {}, "technique": "mcpipe", "role_name": "stage", "m": 2, "units": ["1"]}
    cpu = {**base, "role_index": 0, "device": "cpu", "memory": {"resident_bytes": 2**20}}
    gpu_mem = {
        "resident_bytes": 2**20,
        "accelerator_allocated_peak_bytes": 3 * 2**20,
        "accelerator_reserved_peak_bytes": 4 * 2**20,
        "accelerator_allocated_bytes": 2**20,
    }
    gpu = {**base, "role_index": 1, "device": "cuda", "memory": gpu_mem}
    on_cpu = stage_report.render([stage_report.stage_row(0, cpu)], [])
    assert "Accelerator memory" not in on_cpu
    text = stage_report.render([stage_report.stage_row(0, cpu), stage_report.stage_row(1, gpu)], [])
    assert "Accelerator memory per stage" in text and "Jetson" in text
    assert "| stage 1 | cuda | 3.00 | 4.00 |" in text
    assert "| stage 0 | cpu |" not in text  # the CPU stage has no accelerator row
