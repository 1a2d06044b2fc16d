"""Importance-aware data resharding in rounds (specs/ps.md §2.4). Pure.

A round plans **symmetric swaps**: every pair of devices exchanges the same number of samples
each way, so no device's dataset (or any cohort of it) changes size. A device chooses the
samples it will send at the round's start:

- ``aware``: ``N_o`` samples, ``N_o M_i / sum M`` from each cohort i, without replacement,
  with probability ~ the smoothed importance (the important samples move);
- ``agnostic``: ``N_p = rho N_k`` samples uniformly at random (the paper's random reshuffle);
- ``random``: ``N_o`` uniformly at random: agnostic with aware's budget, the control without
  which "aware" cannot be told from "less data".

``N_o`` is ``min(N_p, what fits the round's compute windows at the link rate)`` or a fixed
fraction of ``N_p``. The choice is split evenly over the K-1 peers. The lower device of a
pair sends a chunk; the other answers with as many of its own (fewer once its list for the
pair is used up, which ends the pair): each exchange is equal both ways. Each side then puts
each received sample into a slot freed by a sample it sent; the sample keeps the sender's
importance and takes the slot's stamp (its cohort).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from edgetrain.ps.mercury.group_sampling import groups, within_probs


def initiator(a: int, b: int) -> int:
    """The device of a pair that sends first (the lower)."""
    return min(a, b)


def bandwidth_budget(
    n_p: int, bandwidth_Bps: float, compute_s: float, iterations: int, sample_bytes: int
) -> int:
    """``min(N_p, floor(bw * T_cp * iterations / sample bytes))``: the samples that fit the
    round's compute windows, when the link would otherwise be idle."""
    if sample_bytes <= 0 or bandwidth_Bps <= 0 or compute_s <= 0:
        return 0
    fits = int(bandwidth_Bps * compute_s * iterations // sample_bytes)
    return max(0, min(n_p, fits))


def outgoing(mode: str, n_local: int, rho: float, budget: int) -> int:
    """Samples a device offers in a round: N_p for agnostic, N_o for aware and random."""
    n_p = int(rho * n_local)
    if mode == "agnostic":
        return n_p
    if mode in ("aware", "random"):
        return min(n_p, budget)
    return 0


def quotas(sizes: np.ndarray, total: int) -> np.ndarray:
    """``total`` spread over groups in proportion to ``sizes`` (largest remainder, ties to
    the lower group), never more than a group holds."""
    sizes = np.asarray(sizes, dtype=np.int64)
    total = int(min(total, sizes.sum()))
    if total <= 0 or not len(sizes):
        return np.zeros(len(sizes), dtype=np.int64)
    exact = total * sizes / sizes.sum()
    out = np.floor(exact).astype(np.int64)
    order = np.argsort(-(exact - out), kind="stable")
    out[order[: total - int(out.sum())]] += 1
    return np.asarray(np.minimum(out, sizes), dtype=np.int64)


def choose(
    importance: np.ndarray,
    stamp: np.ndarray,
    count: int,
    mode: str,
    smoothing: float,
    rng: np.random.Generator,
    exclude: np.ndarray | None = None,
) -> np.ndarray:
    """``count`` distinct local samples to send (aware: cohort by cohort, by importance;
    otherwise uniformly). ``exclude``: slots that may not move now (in flight, or holding a
    sample not yet placed)."""
    allowed = np.ones(len(importance), dtype=bool)
    if exclude is not None and len(exclude):
        allowed[exclude] = False
    count = int(min(count, allowed.sum()))
    if count <= 0:
        return np.zeros(0, dtype=np.int64)
    if mode != "aware":
        return np.sort(rng.choice(np.flatnonzero(allowed), size=count, replace=False))
    cohorts = [m[allowed[m]] for m in groups(stamp, 0).members]
    sizes = np.array([len(m) for m in cohorts], dtype=np.int64)
    picked = []
    for members, k in zip(cohorts, quotas(sizes, count), strict=True):
        if k:
            q = within_probs(importance[members], smoothing)
            picked.append(rng.choice(members, size=int(k), replace=False, p=q))
    return np.sort(np.concatenate(picked)) if picked else np.zeros(0, dtype=np.int64)


@dataclass
class RoundPlan:
    """One device's samples to send in one round, per peer, and how many each pair used."""

    round: int
    lists: dict[int, np.ndarray]
    used: dict[int, int] = field(default_factory=dict)
    closed: set[int] = field(default_factory=set)  # pairs the peer ended (its list ran out)

    @classmethod
    def split(
        cls, round_: int, chosen: np.ndarray, peers: list[int], rng: np.random.Generator
    ) -> RoundPlan:
        """The chosen samples shuffled and split evenly over the peers (sizes differ by at
        most one; peers in order)."""
        if not peers:
            return cls(round_, {})
        parts = np.array_split(rng.permutation(chosen), len(peers))
        return cls(round_, {p: np.sort(part) for p, part in zip(peers, parts, strict=True)})

    def remaining(self, peer: int) -> int:
        if peer in self.closed:
            return 0
        return len(self.lists.get(peer, ())) - self.used.get(peer, 0)

    def take(self, peer: int, count: int) -> np.ndarray:
        """The next ``count`` (or fewer) slots of the pair, marked as used."""
        start = self.used.get(peer, 0)
        got = self.lists.get(peer, np.zeros(0, dtype=np.int64))[start : start + max(0, count)]
        self.used[peer] = start + len(got)
        return got

    def give_back(self, peer: int, count: int) -> None:
        """Un-use the last ``count`` slots taken (the peer answered fewer)."""
        self.used[peer] = max(0, self.used.get(peer, 0) - count)

    def close(self, peer: int) -> None:
        self.closed.add(peer)

    def answer(self, peer: int, round_: int, asked: int) -> np.ndarray | None:
        """The answering side of a chunk of ``asked`` samples from ``peer`` for ``round_``:
        as many of its own slots for the pair (fewer once the list is used up, which ends the
        pair; none for an older round). None: that round is not planned here yet."""
        if self.round < round_:
            return None
        give = 0 if self.round > round_ else min(asked, self.remaining(peer))
        slots = self.take(peer, give)
        if self.round == round_ and give < asked:
            self.close(peer)
        return slots

    def settle(self, peer: int, sent: np.ndarray, answered: int) -> np.ndarray:
        """The sending side once ``peer`` answered ``answered`` of the ``sent`` slots: the
        slots whose samples were exchanged (the rest stay; fewer ends the pair)."""
        if answered < len(sent):
            self.give_back(peer, len(sent) - answered)
            self.close(peer)
        return sent[:answered]

    @property
    def offered(self) -> int:
        return sum(len(v) for v in self.lists.values())

    @property
    def moved(self) -> int:
        return sum(self.used.values())


@dataclass(frozen=True)
class Placement:
    """Received samples and the slots they go into (applied at an iteration boundary)."""

    slots: np.ndarray  # int64 (m,): local slots freed by the samples sent for them
    x: np.ndarray  # (m, C, H, W) float32, decoded
    y: np.ndarray  # (m,) int64
    importance: np.ndarray  # (m,) the sender's importance


def apply(
    x: np.ndarray, y: np.ndarray, importance: np.ndarray | None, placement: Placement
) -> None:
    """Put received samples into their slots (in place); stamps stay (the slot's cohort)."""
    x[placement.slots] = placement.x
    y[placement.slots] = placement.y
    if importance is not None:
        importance[placement.slots] = placement.importance
