"""The round trip of a pipelined link, told apart from the per-transmission overhead. Pure.

The transmitter keeps a trainer's transmissions in flight together, as a real client would: a
burst of them pays one round trip of latency, then each its overhead and its transfer. Its log
marks the transmission that led a burst (sent with nothing of its direction in flight) and
when each answer came in; the first answer of a burst to come in waited the round trip, every
other one is timed from the one before it (its overhead and transfer only, :mod:`.arrivals`).
So the others alone fit ``seconds = dt + bytes / bandwidth`` with ``dt`` the per-transmission
overhead, read over whole stretches of each burst (:mod:`.burst_fit`: a small device's freezes
move time between them), and what the first took beyond that line is the round trip.

The planner's costs (the paper's model, every transmission pays ``dt`` one after another) then
describe the pipelined runtime when the round trip is added once per direction
(:func:`with_round_trip`): to the first layer's pull, since the first pull of an iteration waits
for it and every later one comes right behind, and to the first layer's push, the last of an
iteration, whose acknowledgement ends the iteration a round trip after its bytes left. Pull j
then ends at ``rtt + j*dt + PT[k_j]``. With one segment per direction there are no followers:
the round trip stays in ``dt``, which is then exact as well.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edgetrain.plan.costs import LayerCosts
from edgetrain.ps.arrivals import Transmission, link_samples
from edgetrain.ps.burst_fit import fit_bursts
from edgetrain.ps.link_trust import unidentified
from edgetrain.ps.livecosts import LinkFit


@dataclass(frozen=True)
class Split:
    """One direction's samples with the leaders' round trip taken out, and that round trip."""

    samples: list[tuple[int, float]]  # (bytes, seconds)
    rtt: float  # seconds; 0 when the followers cannot tell it apart (it then stays in dt)
    fit: LinkFit | None = None  # the followers' line, when they identify one


def split_round_trip(samples: Sequence[tuple[int, float, bool]]) -> Split:
    """``(bytes, seconds, lead)`` of one direction's transmissions: the round trip is the median
    excess of the leaders over the followers' fit, when the followers identify a line (at
    least two sizes apart, :func:`~edgetrain.ps.link_trust.unidentified`), with that line;
    otherwise 0 and the samples as they are."""
    leads = [(b, s) for b, s, lead in samples if lead]
    follow = [(b, s) for b, s, lead in samples if not lead]
    fit = fit_bursts(samples) if leads and unidentified(follow) is None else None
    if fit is None:
        return Split([(b, s) for b, s, _ in samples], 0.0)
    return _against(samples, fit)


def _against(samples: Sequence[tuple[int, float, bool]], fit: LinkFit) -> Split:
    """The round trip as the leaders' median excess over ``fit``, taken out of them."""
    excess = [s - fit.dt - b / fit.bandwidth for b, s, lead in samples if lead]
    rtt = max(0.0, float(np.median(excess)))
    return Split([(b, s - rtt if lead else s) for b, s, lead in samples], rtt, fit)


def read_link(rows: Sequence[Transmission]) -> Split:
    """One direction's link from its transmissions (:mod:`.arrivals`): the round trip read with
    it unknown (the first answer of each burst holds it, against the others' line), then the
    others' line read again with it, since a follower sent after the one before it had gone out
    waited a round trip of its own, not the link."""
    first = link_samples(rows)
    split = split_round_trip(first)
    if split.fit is None or split.rtt == 0:
        return split
    second = link_samples(rows, split.rtt)
    if [s for s in second if not s[2]] == [s for s in first if not s[2]]:
        return split  # no answer waited on its own round trip: the line stands
    return _against(first, fit_bursts(second) or split.fit)


def with_round_trip(costs: LayerCosts, pull_rtt: float, push_rtt: float) -> LayerCosts:
    """The planner's costs of a pipelined link: ``costs`` (``dt`` the per-transmission
    overhead) with one round trip on the first layer's pull and one on its push."""
    if pull_rtt < 0 or push_rtt < 0:
        raise ValueError("a round trip cannot be negative")
    pt, gt = costs.pt.copy(), costs.gt.copy()
    pt[0] += pull_rtt
    gt[0] += push_rtt
    return LayerCosts(pt, costs.fc, costs.bc, gt, costs.dt, costs.names)
