"""When a live link fit may steer a re-plan, and what to use when it may not. Pure.

``seconds = dt + bytes / bandwidth`` has two unknowns; transmissions of one size give one
equation. A trainer running one segment per direction (a plan file's sequential-like cuts)
sees one size only, and the fit of :func:`~edgetrain.ps.livecosts.fit_link` then puts every
second on the bandwidth and calls ``dt`` 0: the planner, told transmissions cost nothing
apiece, cuts layer by layer, and the next epoch runs several times slower (issue 28).

The rule: a direction's fit is *identifiable* when at least :data:`MIN_PER_SIZE` of its
transmissions are at least :data:`SIZE_FACTOR` times the size of :data:`MIN_PER_SIZE` others.
Otherwise the trainer keeps a link it trusts, the last identifiable fit of the run or the link
the plan file was made with, scaled by one factor so that it gives the median transmission
seen its measured median time (the one equation the sizes do identify); with no such link it
keeps the cuts it runs. Either way the reason is recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edgetrain.plan.costs import LayerCosts
from edgetrain.plan.simulator import simulate
from edgetrain.ps.livecosts import SAME_SIZE, LinkFit, fit_link

SIZE_FACTOR = 2.0  # two sizes at least this far apart separate dt from the bandwidth
MIN_PER_SIZE = 2  # transmissions needed at each end of that spread

Cuts = tuple[list[int], list[int]]


def _kb(nbytes: float) -> str:
    return f"{nbytes / 1e3:.3g} kB"


def unidentified(samples: Sequence[tuple[int, float]]) -> str | None:
    """None when ``(bytes, seconds)`` samples identify dt and bandwidth apart; else why not,
    in a few words (``"one transfer size seen (245 kB)"``)."""
    sizes = sorted(int(s[0]) for s in samples)
    if len(sizes) < 2 * MIN_PER_SIZE:
        return f"{len(sizes)} transmissions seen, {2 * MIN_PER_SIZE} needed"
    lo, hi = sizes[MIN_PER_SIZE - 1], sizes[-MIN_PER_SIZE]
    if hi >= SIZE_FACTOR * lo:
        return None
    if sizes[-1] <= sizes[0] * (1 + SAME_SIZE):
        return f"one transfer size seen ({_kb(sizes[0])})"
    if sizes[-1] >= SIZE_FACTOR * sizes[0]:
        return f"under {MIN_PER_SIZE} transmissions at each end of a {SIZE_FACTOR:g}x size spread"
    return (
        f"transfer sizes {_kb(sizes[0])} to {_kb(sizes[-1])} are less than {SIZE_FACTOR:g}x apart"
    )


def scaled(prior: LinkFit, samples: Sequence[tuple[int, float]]) -> LinkFit:
    """``prior`` with dt and 1/bandwidth scaled by one factor so that it takes the measured
    median time for the median size seen (``prior`` itself when nothing was seen)."""
    if not samples:
        return prior
    size = float(np.median([s[0] for s in samples]))
    seconds = float(np.median([max(0.0, s[1]) for s in samples]))
    expected = prior.dt + size / prior.bandwidth
    if expected <= 0 or seconds <= 0:
        return prior
    k = seconds / expected
    return LinkFit(prior.dt * k, prior.bandwidth / k, len(samples))


@dataclass(frozen=True)
class LinkChoice:
    """The link a re-plan uses, per direction, and where it came from."""

    pull: LinkFit
    push: LinkFit
    identifiable: bool  # both directions' fits identifiable: the fit is used as it is
    source: str  # "fit"; the prior's name ("start probe", "plan file", "last fit"); "one size"
    why: str  # empty when identifiable; else why the fit was not used as it is
    replan: bool  # may the cuts change (False: no trusted link, the running cuts are kept)

    def to_dict(self) -> dict[str, object]:
        return {
            "link_source": self.source,
            "link_identifiable": self.identifiable,
            "link_note": self.why,
        }


def choose_link(
    pulls: Sequence[tuple[int, float]],
    pushes: Sequence[tuple[int, float]],
    prior: tuple[LinkFit, LinkFit] | None,
    prior_name: str,
    fitted: tuple[LinkFit | None, LinkFit | None] = (None, None),
) -> LinkChoice | None:
    """The fitted link when both directions identify it; else ``prior`` (pull, push) scaled to
    what was measured in a direction whose fit is not identifiable; else the unidentified fit,
    for predictions only (``replan`` False). None while a direction has under two samples.

    ``fitted`` (pull, push): a direction's line already read from its samples (over whole
    bursts, :mod:`.burst_fit`), used in place of the single transmissions' fit."""
    pull = fitted[0] if fitted[0] is not None and len(pulls) >= 2 else fit_link(pulls)
    push = fitted[1] if fitted[1] is not None and len(pushes) >= 2 else fit_link(pushes)
    if pull is None or push is None:
        return None
    reasons = {d: unidentified(s) for d, s in (("pull", pulls), ("push", pushes))}
    missing = {d: r for d, r in reasons.items() if r is not None}
    if not missing:
        return LinkChoice(pull, push, True, "fit", "", True)
    why = "; ".join(f"{d}: {r}" for d, r in missing.items())
    if prior is None:
        return LinkChoice(pull, push, False, "one size", why, False)
    if "pull" in missing:
        pull = scaled(prior[0], pulls)
    if "push" in missing:
        push = scaled(prior[1], pushes)
    return LinkChoice(pull, push, False, prior_name, why, True)


def guarded_cuts(
    costs: LayerCosts, running: Cuts, candidate: Cuts, choice: LinkChoice
) -> tuple[Cuts, str]:
    """The cuts to run next and a note (empty when the candidate is taken as it is).

    An identifiable fit may change the cuts freely. Otherwise the candidate is taken only if
    the same costs predict it faster than the running cuts, and with no trusted link at all
    the running cuts stay."""
    if choice.identifiable or candidate == running:
        return candidate, ""
    if not choice.replan:
        return running, "cuts kept: no trusted link to fall back on"
    now = simulate(costs, *running).iteration_s
    new = simulate(costs, *candidate).iteration_s
    if new < now:
        return candidate, ""
    return running, (
        f"cuts kept: the new plan is not predicted faster ({new:.4g} s against {now:.4g} s)"
    )
