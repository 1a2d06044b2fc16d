"""DLion's selective data propagation between sites (gossip.md B.6): an extension, since the
paper describes it as a design and never evaluated it. Pure and deterministic.

Each iteration a subset of *sender* sites sends gradients over the WAN to a subset of
*receiver* sites instead of every site to every other. Larger-capacity sites (larger minibatches,
more informative gradients) are likelier to send, smaller ones likelier to receive. The
probabilities and set sizes are the specification's (ours): senders are a weighted sample
without replacement of S sites with P proportional to the site's capacity, receivers one of R
of the remaining sites with P proportional to 1 / capacity (a site never does both in one
iteration). The draw is seeded by (run seed, iteration), so every worker makes the same one
without a message. A sender site's load is spread over its workers: worker u of sender site c
sends to worker (u mod |d|) of receiver site d, which forwards it over d's LAN to d's other
workers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

_SALT = 0xD110


@dataclass(frozen=True)
class Route:
    """``origin``'s gradient reaches ``dest`` through ``via`` (``via == dest``: directly over
    the WAN; else ``via`` forwards it over its LAN)."""

    origin: int
    via: int
    dest: int


def default_count(sites: int) -> int:
    """S = R = ceil(n_s / 2), at most n_s - 1."""
    return max(1, min(sites - 1, math.ceil(sites / 2)))


def choose_sites(
    seed: int, t: int, capacities: Mapping[str, float], senders: int, receivers: int
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The sender and receiver sites of iteration ``t`` (each sorted by name)."""
    names = sorted(capacities)
    if len(names) < 2:
        return (), ()
    caps = np.array([max(float(capacities[s]), 1e-12) for s in names])
    rng = np.random.default_rng([seed, t, _SALT])
    n_send = max(1, min(senders, len(names) - 1))
    chosen = rng.choice(len(names), size=n_send, replace=False, p=caps / caps.sum())
    rest = [i for i in range(len(names)) if i not in set(chosen.tolist())]
    n_recv = max(1, min(receivers, len(rest)))
    inv = 1.0 / caps[rest]
    got = rng.choice(len(rest), size=n_recv, replace=False, p=inv / inv.sum())
    send = tuple(sorted(names[i] for i in chosen.tolist()))
    recv = tuple(sorted(names[rest[i]] for i in got.tolist()))
    return send, recv


def wan_routes(
    senders: Sequence[str], receivers: Sequence[str], members: Mapping[str, Sequence[int]]
) -> list[Route]:
    """Every (origin, via, dest) of one iteration's WAN traffic."""
    out: list[Route] = []
    for c in senders:
        for d in receivers:
            dest_members = list(members[d])
            for u, origin in enumerate(members[c]):
                via = dest_members[u % len(dest_members)]
                out.extend(Route(origin, via, dest) for dest in dest_members)
    return out
