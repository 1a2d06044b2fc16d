"""One iteration of the exchange loop (:mod:`.loop`) as the cost model times it, for DLion,
Gaia and Ako (their encodings: :mod:`.cost_dlion`, :mod:`.cost_gaia`, :mod:`.cost_ako`). Pure.

A :class:`Round` is one iteration's work in reference seconds (the compute at each worker's
batch, the technique's encoding, the loop's update) and its messages. Timing, per worker p:
its messages are ready after its compute, its encoding and the transport's CPU for them, and
arrive at q when p's interface has sent them all, or q's has taken in all of its own if later,
plus the link's latency. q takes in (decodes, adds into the sum) what came while it computed
right after its compute, the last message after it arrives, then updates (the sum, 1/k, the
optimiser's step). With staleness 0 everyone waits for everyone: the last worker to finish sets
the iteration. With staleness s the round may lag: the iteration is the round over s + 1, and
no shorter than the busiest worker's own work or the busiest interface. Asynchronous: the
busiest worker's own work or the busiest interface (every worker runs the same iterations, so
the slowest sets the run's pace).

A worker's own work is its reference seconds over its speed; on a CPU quota
(:attr:`~edgetrain.gossip.cost_model.Constants.quota_period_s`) a stretch of work before or
after a wait runs at the reference speed while the quota lasts
(:func:`~edgetrain.gossip.cost_model.wall_s`), and its own work over the iteration stays the
average bound.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from edgetrain.gossip.cost_model import (
    FLOAT,
    Constants,
    Transfer,
    ms,
    speed_label,
    step_work_s,
    wall_s,
    wire_times,
)
from edgetrain.gossip.exchange.cost_calibration import Calibration
from edgetrain.runtime.predict import Prediction, Setting


@dataclass(frozen=True)
class ExchangeShape:
    """What the recipe fixes: the trainers, b0 (the profiled batch), each worker's site (by
    worker id; None: one LAN), the training set's size (T_bs's default; None: not known, no
    cap), eta and the epochs (Gaia's share); and a pilot's measured terms (None: a priori,
    from the profile and the constants; :mod:`.cost_calibration`)."""

    workers: Sequence[int]
    b0: int
    sites: Sequence[str] | None = None
    n_train: int | None = None
    lr: float = 0.01
    epochs: int = 1
    calibration: Calibration | None = None

    def __post_init__(self) -> None:
        if self.calibration is not None and not self.calibration.covers(self.workers):
            raise ValueError("the calibration did not measure every worker of the shape")

    def site_map(self) -> dict[int, str | None]:
        named = self.sites
        return {w: named[w] if named is not None and w < len(named) else None for w in self.workers}


@dataclass(frozen=True)
class Msg:
    """One message of an iteration: its bytes (an average where it varies) and the reference
    seconds its receiver spends adding it in (the transport's CPU comes on top)."""

    src: int
    dst: int
    nbytes: float
    apply_s: float


@dataclass(frozen=True)
class Round:
    """One iteration's work in reference seconds: compute per worker, the technique's named
    work before sending (``encode``) and after the wait (``after``), and the messages."""

    workers: tuple[int, ...]
    compute: Mapping[int, float]
    encode: Mapping[int, Mapping[str, float]]
    after: Mapping[int, Mapping[str, float]]
    messages: Sequence[Msg]


@dataclass(frozen=True)
class RoundTime:
    """A round's period and, per worker, its own work, compute and named CPU parts (seconds on
    the worker, on average)."""

    period_s: float
    own: Mapping[int, float]
    compute: Mapping[int, float]
    cpu: Mapping[int, Mapping[str, float]]
    wire_s: float  # the busiest interface plus the longest latency

    @property
    def busiest(self) -> int:
        return max(self.own, key=lambda w: (self.own[w], -w))


def update_work(n: int, c: Constants, layers: int = 0) -> dict[str, float]:
    """The loop's own work every iteration, reference seconds: the flat gradient, the inbound
    sum's buffer, the sum, 1/k, the gradient set back, the optimiser's step; and the fixed work
    per layer with parameters (``layers``: the split and the optimiser's per-tensor loop)."""
    size = n * FLOAT
    per_byte = size * (3 * c.copy_s_per_byte + 2 * c.add_s_per_byte + c.step_s_per_byte)
    return {"update": per_byte + layers * c.update_s_per_layer}


def compute_work(
    setting: Setting, batches: Mapping[int, float], shape: ExchangeShape
) -> dict[int, float]:
    """Each worker's forward and backward at its batch, reference seconds: the profile's, or
    the calibration's (its capacity curve at its measured level)."""
    cal = shape.calibration
    if cal is not None:
        return {w: cal.gradient_s(w, m) for w, m in batches.items()}
    return {w: step_work_s(setting, m, shape.b0) for w, m in batches.items()}


def with_unmodelled(
    after: Mapping[int, Mapping[str, float]], shape: ExchangeShape
) -> dict[int, dict[str, float]]:
    """``after`` with the calibration's loop work the constants do not count, per worker
    (``unmodelled``; unchanged a priori)."""
    cal = shape.calibration
    out = {w: dict(after.get(w, {})) for w in shape.workers}
    if cal is not None:
        for w in shape.workers:
            out[w]["unmodelled"] = cal.extra(w)
    return out


def time_round(setting: Setting, rnd: Round, c: Constants, sync: str, staleness: int) -> RoundTime:
    """The period of ``rnd`` (see the module's docstring)."""
    speed = {w: setting.devices[w].speed for w in rnd.workers}
    out_bytes: defaultdict[int, float] = defaultdict(float)
    out_count: defaultdict[int, int] = defaultdict(int)
    inbox: defaultdict[int, list[Msg]] = defaultdict(list)
    for m in rnd.messages:
        out_bytes[m.src] += m.nbytes
        out_count[m.src] += 1
        inbox[m.dst].append(m)
    transfers = [Transfer(m.src, m.dst, m.nbytes) for m in rnd.messages]
    wire = wire_times(setting, transfers, c.shared_interface)
    work: dict[int, dict[str, float]] = {}
    for w in rnd.workers:
        named = dict(rnd.encode.get(w, {}))
        sent = out_count[w]
        named["send"] = out_bytes[w] * c.wire_s_per_byte + sent * c.send_s_per_message
        named["receive"] = sum(
            m.apply_s + m.nbytes * c.wire_s_per_byte + c.receive_s_per_message for m in inbox[w]
        )
        named.update(rnd.after.get(w, {}))
        # the transport's thread for every message and byte out and in, and the loop's own work
        named["loop"] = (
            (sent + len(inbox[w])) * c.transport_s_per_message
            + (out_bytes[w] + sum(m.nbytes for m in inbox[w])) * c.transport_s_per_byte
            + c.loop_s_per_iteration
        )
        work[w] = named
    done: dict[int, float] = {}
    ready: dict[int, float] = {}
    for w in rnd.workers:
        before = rnd.compute[w] + sum(work[w][n] for n in rnd.encode.get(w, {})) + work[w]["send"]
        ready[w] = wall_s(setting, w, before, c)
    latency = 0.0
    for q in rnd.workers:
        recv = work[q]["receive"]
        after = sum(work[q][n] for n in rnd.after.get(q, {})) + work[q]["loop"]
        upd = wall_s(setting, q, after, c)
        got = inbox[q]
        if not got:
            done[q] = ready[q] + wall_s(setting, q, recv, c) + upd
            continue
        lats = [setting.link(m.src, q).latency_s for m in got]
        latency = max(latency, *lats)
        arrive = max(
            max(ready[m.src] + wire.egress[m.src] + lt for m, lt in zip(got, lats, strict=True)),
            min(ready[m.src] for m in got) + wire.ingress[q] + min(lats),
        )
        last = wall_s(setting, q, recv / len(got), c)
        done[q] = max(ready[q] + wall_s(setting, q, recv, c), arrive + last) + upd
    own = {w: (rnd.compute[w] + sum(work[w].values())) / speed[w] for w in rnd.workers}
    bound = max(max(own.values()), wire.busiest)
    period = bound if sync == "async" else max(bound, max(done.values()) / (staleness + 1))
    compute = {w: rnd.compute[w] / speed[w] for w in rnd.workers}
    cpu = {w: {n: s / speed[w] for n, s in work[w].items()} for w in rnd.workers}
    return RoundTime(period, own, compute, cpu, wire.busiest + latency)


def exchange_prediction(
    technique: str,
    setting: Setting,
    rt: RoundTime,
    nbytes: float,
    samples: int,
    notes: Sequence[str],
) -> Prediction:
    """The :class:`Prediction` of a timed round: the busiest worker's compute and named work,
    the wire, what is exposed and the idlest worker's wait; ``samples`` per iteration."""
    b = rt.busiest
    cpu = rt.cpu[b]
    overhead = sum(cpu.values())
    parts: dict[str, float] = {"compute": rt.compute[b], "overhead": overhead, **cpu}
    parts["communication"] = rt.wire_s
    parts["exposed_communication"] = max(0.0, rt.period_s - rt.own[b])
    parts["idle"] = max(rt.period_s - o for o in rt.own.values())
    lead = [
        f"{speed_label(setting, b)} is the busiest: {ms(rt.compute[b])} compute and "
        f"{ms(overhead)} exchange work of a {ms(rt.period_s)} iteration"
    ]
    compute = max(rt.compute.values())
    if rt.wire_s > compute:
        lead.append(
            f"communication dominates ({rt.wire_s / compute:.1f}x compute): the busiest "
            f"interface is on the wire {ms(rt.wire_s)} an iteration"
        )
    idlest = min(rt.own, key=lambda w: (rt.own[w], w))
    idle = 1.0 - rt.own[idlest] / rt.period_s
    if len(rt.own) > 1 and idle > 0.005:
        lead.append(f"worker {idlest} idles {idle:.0%} of the iteration waiting for its peers")
    tail = [f"{samples / rt.period_s:,.0f} samples/s predicted across the cluster"]
    notes_all = (*lead, *notes, *tail)
    return Prediction(technique, rt.period_s, parts, int(round(nbytes)), notes_all)
