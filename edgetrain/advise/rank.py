"""The ranking and its one-line reasons, from each technique's prediction. Pure: plain data in,
plain data out (tested against literal tables).

Techniques are ranked by predicted samples per second (the samples of one iteration over its
predicted time): an iteration means different work in each family (every trainer's batch in
gossip and the parameter servers, one microbatch through a pipeline), and an epoch is the
training split over that rate. A technique that does not fit a device's memory ranks after
every one that fits; one that cannot be predicted here is listed apart, with why. The cost
models predict speed, not accuracy: the time to a target accuracy also depends on how many
epochs each technique needs, which no cost model here predicts.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from edgetrain.runtime.predict import Prediction

__all__ = ["Entry", "Memory", "Ranked", "near_best", "rank", "reasons"]

GiB = 2**30
DOMINATES = 2.0  # one part this many times the other: it dominates
PACE = 1.25  # the slowest worker this much over the median: it sets the pace
# predicted within this share of the best's time per sample: a near tie, which the cost models
# cannot call (advise's check measures their median error at about 15%, benchmarks/advise)
TIE = 0.10


@dataclass(frozen=True)
class Memory:
    """One worker's predicted resident bytes beside its device's memory (None: not known)."""

    worker: int
    device: str
    need: int
    have: int | None

    @property
    def fits(self) -> bool:
        return self.have is None or self.need <= self.have


@dataclass(frozen=True)
class Entry:
    """One technique's prediction here: ``samples`` per iteration; ``error``: why it has no
    prediction (then ``prediction`` is None); ``baseline``: the technique its paper measures
    it against."""

    family: str
    technique: str
    prediction: Prediction | None
    samples: int = 0
    memory: tuple[Memory, ...] = ()
    baseline: str | None = None
    error: str | None = None
    # predicted bytes per iteration by link class: loopback, lan (within a site), wan
    bytes_by_class: Mapping[str, int] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        """Predicted samples per second (0: no prediction)."""
        p = self.prediction
        return self.samples / p.iteration_s if p is not None and p.iteration_s > 0 else 0.0

    @property
    def fits(self) -> bool:
        return all(m.fits for m in self.memory)


@dataclass(frozen=True)
class Ranked:
    """An entry in its place (1 = fastest that fits), with its epoch time and reasons."""

    place: int
    entry: Entry
    epoch_s: float | None
    reasons: tuple[str, ...] = field(default_factory=tuple)


def rank(entries: Sequence[Entry], train_samples: int | None) -> tuple[list[Ranked], list[Entry]]:
    """The predicted entries ranked (fitting ones first, then by samples per second, then
    by name), and the entries without a prediction."""
    predicted = [e for e in entries if e.prediction is not None and e.rate > 0]
    missing = [e for e in entries if not (e.prediction is not None and e.rate > 0)]
    ordered = sorted(predicted, key=lambda e: (not e.fits, -e.rate, e.technique))
    by_name = {e.technique: e for e in ordered}
    best = ordered[0] if ordered else None
    ties = near_best(ordered)
    out = []
    for k, e in enumerate(ordered, start=1):
        epoch = train_samples / e.rate if train_samples else None
        out.append(Ranked(k, e, epoch, tuple(reasons(e, best, by_name, ties))))
    return out, missing


def near_best(entries: Sequence[Entry]) -> list[Entry]:
    """The fitting entries predicted within :data:`TIE` of the fastest fitting one's time per
    sample, fastest first (the fastest included; one entry alone is no tie: [])."""
    fit = sorted(
        (e for e in entries if e.fits and e.rate > 0), key=lambda e: (-e.rate, e.technique)
    )
    if not fit:
        return []
    close = [e for e in fit if fit[0].rate <= (1 + TIE) * e.rate]
    return close if len(close) > 1 else []


def reasons(
    e: Entry,
    best: Entry | None,
    by_name: Mapping[str, Entry],
    ties: Sequence[Entry] | None = None,
) -> list[str]:
    """Why ``e`` lands where it does, one line each: its place against the best (and a near
    tie with it: ``ties``, :func:`near_best` of ``by_name`` when not given), what dominates
    its iteration, its memory, its slowest worker, its baseline, and the technique's own
    note."""
    p = e.prediction
    assert p is not None
    if ties is None:
        ties = near_best(list(by_name.values()))
    out = []
    if best is None or best is e:
        out.append(f"fastest predicted: {e.rate:,.0f} samples/s")
        close = [x.technique for x in ties if x is not e]
        if close:
            out.append(
                f"a near tie with {', '.join(close)} (within {TIE:.0%}: inside the cost "
                "models' error): measure them before choosing"
            )
    else:
        out.append(f"{best.rate / e.rate:.2f}x the time of {best.technique} per sample")
        if any(x is e for x in ties):
            out.append(f"a near tie with {best.technique}: measure both before choosing")
    for m in e.memory:
        if not m.fits and m.have is not None:
            out.append(
                f"does not fit: worker {m.worker} needs {m.need / GiB:.2f} GiB, device "
                f"{m.device} has {m.have / GiB:.2f} GiB"
            )
    balance = _balance(p)
    if balance:
        out.append(balance)
    pace = _pace(p)
    if pace:
        out.append(pace)
    wan = e.bytes_by_class.get("wan", 0)
    if wan > 0:
        share = wan / max(1, sum(e.bytes_by_class.values()))
        out.append(f"{wan / 1e6:.2f} MB an iteration cross the WAN ({share:.0%} of its traffic)")
    base = by_name.get(e.baseline or "")
    if base is not None and base.rate > 0:
        gain = e.rate / base.rate - 1
        word = "faster" if gain >= 0 else "slower"
        out.append(f"{abs(gain):.0%} {word} than its baseline {base.technique}")
    if p.notes:
        out.append(p.notes[0])
    return out


def _balance(p: Prediction) -> str | None:
    """Compute against communication, and how much overlap could hide at most."""
    compute = float(p.parts.get("compute", 0.0))
    comm = float(p.parts.get("communication", 0.0))
    if compute <= 0 or comm <= 0:
        return None
    ceiling = min(compute, comm) / (compute + comm)
    if comm >= DOMINATES * compute:
        return (
            f"communication dominates ({_times(comm / compute)} compute): overlapping it with "
            f"compute can hide at most {ceiling:.0%} of a sequential iteration"
        )
    if compute >= DOMINATES * comm:
        return f"compute dominates ({_times(compute / comm)} communication)"
    return (
        f"compute and communication comparable ({comm / compute:.2f}x): overlap can hide up "
        f"to {ceiling:.0%}"
    )


def _times(x: float) -> str:
    return f"{x:.1f}x" if x < 100 else "over 100x"


def _pace(p: Prediction) -> str | None:
    busy = [v for v in p.per_worker.values() if v > 0]
    if len(busy) < 2:
        return None
    slowest, median = max(busy), statistics.median(busy)
    if slowest < PACE * median:
        return None
    worker = max(p.per_worker, key=lambda w: p.per_worker[w])
    return f"the slowest worker ({worker}) sets the pace: {slowest / median:.1f}x the median"
