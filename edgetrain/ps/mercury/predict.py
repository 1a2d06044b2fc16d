"""Mercury's iteration-time model (``mercury`` and the uniform ``multips-sgd``), the terms of Eq. 5
([MC §3.2]) as this runtime spends them. Pure.

Every device computes its minibatch (``T_cp``: the profiled layers' forward + backward over its
speed; the slowest device sets the pace, since every shard waits for all K slices), then sends
each owner its slice and gets the average back: ``T_cm = 2 (K - 1) / K x P / bandwidth`` plus
one round trip, over the slowest link between devices. Importance sampling adds ``T_is``:

- sequential scheduler: the refresh of a group of ``G`` samples (one forward each) and the
  round's resharding piece both sit in the iteration;
- BACC: the refresh runs while the aggregation is on the network, so only what outlasts
  ``T_cm`` shows, and never less than its first chunk when the device has one core or less
  (the refresh then takes the core the aggregation's own work needs; the inflation the
  reproduction measured) unless the batch's own losses are that chunk (``batch_refresh``:
  every refresh is then optional, paced by the CPU the training leaves). Resharding fills
  the link while the device computes, sized by the link budget to fit there, so it adds
  nothing.

Not modelled: the optimiser step (Adam over the whole model on every device), drawing the
minibatch from the cache, the hash checks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from edgetrain.ps.mercury.config import Settings
from edgetrain.runtime.predict import Prediction, Setting


@dataclass(frozen=True)
class Shape:
    """What the recipe and data fix: the devices (worker indices), the minibatch, each
    device's samples (None: not known, the refresh is then one chunk) and one sample's
    bytes on the wire (for resharding)."""

    devices: Sequence[int]
    batch: int
    samples_per_device: int | None = None
    sample_bytes: int = 0
    cores: float | None = None  # the slowest device's cores (None: more than one)


def _refresh_samples(s: Settings, shape: Shape) -> int:
    if shape.samples_per_device is None:
        return s.refresh_chunk
    if s.group_size == "fixed":
        return math.ceil(shape.samples_per_device / s.groups)
    return shape.samples_per_device  # anytime/predict: at most the local dataset


def predict_mercury(s: Settings, setting: Setting, shape: Shape) -> Prediction:
    """The predicted iteration of ``s.technique`` on ``setting``."""
    if not setting.layers:
        raise ValueError("the setting has no profiled layers")
    k = len(shape.devices)
    if k < 1:
        raise ValueError("a Mercury run needs a device")
    speed = min(setting.devices[d].speed for d in shape.devices)
    forward = sum(u.forward_s for u in setting.layers) / speed
    t_cp = sum(u.forward_s + u.backward_s for u in setting.layers) / speed
    params = sum(u.param_bytes for u in setting.layers)
    t_cm = 0.0
    bandwidth = math.inf
    if k > 1:
        links = [setting.link(a, b) for a in shape.devices for b in shape.devices if a != b]
        bandwidth = min(link.bandwidth_Bps for link in links)
        latency = max(link.latency_s for link in links)
        t_cm = 2 * (k - 1) / k * params / bandwidth + 2 * latency
    per_sample = forward / max(1, shape.batch)
    scored = _refresh_samples(s, shape) if s.importance else 0  # samples a refresh scores
    refresh = scored * per_sample
    chunk = min(s.refresh_chunk, scored) * per_sample
    reshard = 0.0
    if s.resharding != "none" and shape.samples_per_device and math.isfinite(bandwidth):
        rounds = s.reshard_every or max(1, shape.samples_per_device // max(1, shape.batch))
        moved = s.reshard_fraction * shape.samples_per_device * shape.sample_bytes
        reshard = moved / rounds / bandwidth
    notes: list[str] = []
    if s.threads:
        hidden = max(0.0, refresh - t_cm)
        first = 0.0 if s.batch_refresh else chunk  # the chunk every iteration must score
        t_is = max(hidden, first) if (shape.cores or 2.0) <= 1.0 else hidden
        if t_is > 0:
            notes.append(
                f"the refresh shows {t_is * 1e3:.1f} ms beside {t_cm * 1e3:.1f} ms of aggregation"
            )
    else:
        t_is = refresh + reshard
    iteration = t_cp + t_cm + t_is
    parts = {
        "compute": t_cp,
        "communication": t_cm,
        "exposed_communication": t_cm,
        "importance": t_is,
        "overhead": t_is,
    }
    ratio = t_is / (t_cp + t_cm) if t_cp + t_cm > 0 else 0.0
    notes.insert(
        0,
        f"{s.technique}: importance sampling adds {ratio:.0%} per iteration "
        f"(Eq. 5: the speed-up is E/E_is over {1 + ratio:.2f})"
        if s.importance
        else f"{s.technique}: uniform sampling, no importance work",
    )
    nbytes = int(2 * (k - 1) * params)  # every device's slices out and averages back
    return Prediction(s.technique, iteration, parts, nbytes, tuple(notes))
