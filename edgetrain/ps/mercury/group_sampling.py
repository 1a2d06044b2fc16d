"""Group-wise importance sampling with the exactly unbiased weight (specs/ps.md §2.3). Pure.

The **cache** holds, per local sample, its importance ``I`` (the last feed-forward loss) and
its stamp ``s``, the iteration at which ``I`` was computed. A refresh takes the next samples
from a round-robin cursor over a fixed random permutation and stamps them, so a **group** is
a refresh cohort: the samples that share a stamp. Samples never refreshed have ``I`` = the
initial importance and form one group whose age is ``t + 1``.

A draw of a minibatch of ``B`` (§2.3.3, §2.3.4):

1. ``d`` slots, each a group drawn i.i.d. with ``r_i ~ exp(-beta * a_i)`` (``a_i``: age);
2. slot ``s`` takes ``b_s = round(B * M_i / sum of the slots' M)`` draws (largest remainder,
   every slot at least one: a slot without draws would drop its 1/d share and bias the mean);
3. each draw picks sample j of the slot's group with ``q_j ~ I_j + lambda * mean(I)``, with
   replacement, and carries ``w = (B / (d b_s)) / (N r_i q_j)``.

The loss ``(1/B) sum w loss`` is then an unbiased estimate of the local mean loss for every
beta; the paper's ``p/q = 1 / (M_i q_j)`` equals it only when beta = 0 with equal groups and
equal slot counts, and is biased otherwise (§0 finding 4). :func:`draw_many` draws many
minibatches at once (the unbiasedness test draws 200 000); :func:`draw` is one of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

NEVER = np.iinfo(np.int64).min  # the stamp of a sample never refreshed
FLOOR = 1e-12  # the smallest score a sample keeps: q > 0 wherever p > 0


@dataclass
class ImportanceCache:
    """Per-sample importance and stamp, and the refresh cursor."""

    importance: np.ndarray  # float64 (N,)
    stamp: np.ndarray  # int64 (N,); NEVER before the first refresh
    order: np.ndarray  # the refresh order, a permutation of range(N)
    cursor: int = 0

    @classmethod
    def fresh(cls, n: int, initial: float, rng: np.random.Generator) -> ImportanceCache:
        return cls(np.full(n, float(initial)), np.full(n, NEVER, np.int64), rng.permutation(n), 0)

    @property
    def size(self) -> int:
        return len(self.importance)

    def next_chunk(self, size: int) -> np.ndarray:
        """The next ``size`` samples of the refresh order (wrapping; at most N)."""
        n = self.size
        size = min(size, n)
        idx = self.order[(self.cursor + np.arange(size)) % n]
        self.cursor = (self.cursor + size) % n
        return idx

    def store(self, idx: np.ndarray, losses: np.ndarray, t: int) -> None:
        """Refreshed importances of ``idx``, computed at iteration ``t``."""
        self.importance[idx] = np.maximum(np.asarray(losses, dtype=np.float64), 0.0)
        self.stamp[idx] = t

    def rescore(self, idx: np.ndarray, losses: np.ndarray) -> None:
        """New importances of ``idx`` that keep their stamps (their cohorts stay whole)."""
        self.importance[idx] = np.maximum(np.asarray(losses, dtype=np.float64), 0.0)

    def refreshed(self) -> int:
        """Samples refreshed at least once."""
        return int((self.stamp != NEVER).sum())


@dataclass(frozen=True)
class Groups:
    """The cohorts of a cache at iteration ``t``: freshest first."""

    stamps: np.ndarray  # int64 (G,)
    members: tuple[np.ndarray, ...]
    ages: np.ndarray  # float64 (G,)
    sizes: np.ndarray  # int64 (G,): each cohort's member count


def groups(stamp: np.ndarray, t: int) -> Groups:
    """Group samples by stamp, each group's members in index order; age ``t - s`` (never
    refreshed: ``t + 1``). One stable sort: a draw makes these every iteration."""
    stamp = np.asarray(stamp)
    order = np.argsort(stamp, kind="stable")
    ordered = stamp[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    stamps = ordered[starts]
    members = np.split(order, starts[1:])
    sizes = np.diff(np.r_[starts, len(order)]).astype(np.int64)
    ages = np.where(stamps == NEVER, float(t + 1), (t - stamps).astype(np.float64))
    rev = slice(None, None, -1)  # freshest (largest stamp) first
    return Groups(stamps[rev], tuple(members[::-1]), ages[rev], sizes[rev])


def group_probs(ages: np.ndarray, beta: float, sizes: np.ndarray | None = None) -> np.ndarray:
    """``r_i ~ M_i exp(-beta a_i)``, computed stably (the softmax ignores shifts). With equal
    groups this is the paper's Eq. 6; with the unequal cohorts of an anytime refresh, a sliver
    of a few samples left of an old cohort no longer gets a whole group's share of the slots
    (and the batch's weight scale stops jumping between iterations; the spec's groups of
    different sizes are "reweighted by group size", §2.5). The exact weight divides by r, so it
    stays unbiased. ``sizes`` None: equal groups."""
    z = -beta * (ages - ages.min())
    e = np.exp(z)
    if sizes is not None:
        e = e * np.asarray(sizes, dtype=np.float64)
    return np.asarray(e / e.sum())


def default_beta(n: int, mean_group: float) -> float:
    """``1 / D_eff`` with ``D_eff = ceil(N / mean G)``: the oldest of D_eff round-robin groups
    gets e^-1 of the freshest one's weight."""
    if mean_group <= 0:
        return 0.0
    return 1.0 / max(1, math.ceil(n / mean_group))


def within_probs(importance: np.ndarray, smoothing: float) -> np.ndarray:
    """``q_j ~ I_j + lambda * mean(I)`` over one group (uniform when every score is 0)."""
    score = np.asarray(importance, dtype=np.float64)
    score = score + smoothing * float(score.mean()) if len(score) else score
    score = np.maximum(score, FLOOR)
    return np.asarray(score / score.sum())


def slot_counts(sizes: np.ndarray, batch: int) -> np.ndarray:
    """Draws per slot, row by row: ``batch * M / sum M`` by largest remainder (ties: the
    lower slot), then every slot at least one (taken from the largest, lowest slot first).
    ``sizes``: (n, d) group sizes of each row's slots; needs ``batch >= d``."""
    sizes = np.atleast_2d(np.asarray(sizes, dtype=np.float64))
    n, d = sizes.shape
    if batch < d:
        raise ValueError(f"a batch of {batch} cannot give {d} slots a draw each")
    quota = batch * sizes / sizes.sum(axis=1, keepdims=True)
    counts = np.floor(quota).astype(np.int64)
    rem = batch - counts.sum(axis=1)
    frac = quota - counts
    order = np.argsort(-frac, axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(d)[None, :].repeat(n, axis=0), axis=1)
    counts += (rank < rem[:, None]).astype(np.int64)
    for _ in range(d):
        rows, cols = np.nonzero(counts == 0)
        if not len(rows):
            break
        first = np.unique(rows, return_index=True)[1]
        rows, cols = rows[first], cols[first]
        big = np.argmax(counts[rows], axis=1)  # (argmax takes the lowest slot on ties)
        counts[rows, big] -= 1
        counts[rows, cols] += 1
    return np.asarray(counts, dtype=np.int64)


def slot_counts_row(sizes: list[int], batch: int) -> list[int]:
    """:func:`slot_counts` of one row, in plain Python (a draw's one minibatch: numpy's
    per-call cost is most of the vectorised version's time for two slots); the same floats,
    ties and fix-ups, so the same counts."""
    d = len(sizes)
    if batch < d:
        raise ValueError(f"a batch of {batch} cannot give {d} slots a draw each")
    total = float(sum(float(m) for m in sizes))
    quota = [batch * float(m) / total for m in sizes]
    counts = [math.floor(q) for q in quota]
    rem = batch - sum(counts)
    order = sorted(range(d), key=lambda i: -(quota[i] - counts[i]))  # stable: ties the lower
    for rank, i in enumerate(order):
        if rank < rem:
            counts[i] += 1
    for _ in range(d):
        if 0 not in counts:
            break
        empty = counts.index(0)
        big = counts.index(max(counts))  # the lowest slot on ties
        counts[big] -= 1
        counts[empty] += 1
    return counts


@dataclass(frozen=True)
class Draw:
    """Minibatches drawn from the cache: sample indices and their loss weights, (n, B)."""

    indices: np.ndarray
    weights: np.ndarray
    slot_groups: np.ndarray  # (n, d): the group of each slot (index into Groups)
    counts: np.ndarray  # (n, d): draws per slot


@dataclass(frozen=True)
class Sampler:
    """The groups and group probabilities of one cache state; a group's within-group
    probabilities are computed when a draw first picks it (a draw picks ``d`` of dozens of
    cohorts; the draws are the same as with every group's computed first)."""

    groups: Groups
    r: np.ndarray
    importance: np.ndarray
    smoothing: float
    n: int
    _q: dict[int, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def of(
        cls, importance: np.ndarray, stamp: np.ndarray, t: int, beta: float, smoothing: float
    ) -> Sampler:
        g = groups(stamp, t)
        return cls(g, group_probs(g.ages, beta, g.sizes), importance, smoothing, len(importance))

    def q(self, g: int) -> np.ndarray:
        """``q_j`` over group ``g``'s members (:func:`within_probs`)."""
        got = self._q.get(g)
        if got is None:
            got = self._q[g] = within_probs(self.importance[self.groups.members[g]], self.smoothing)
        return got

    def draw_many(
        self, batch: int, slots: int, rng: np.random.Generator, count: int, weights: str = "exact"
    ) -> Draw:
        """``count`` independent minibatches of ``batch`` draws over ``slots`` slots."""
        G = len(self.r)
        chosen = rng.choice(G, size=(count, slots), p=self.r)
        counts = slot_counts(self.groups.sizes[chosen], batch)
        flat_groups = np.repeat(chosen.reshape(-1), counts.reshape(-1))
        flat_counts = np.repeat(counts.reshape(-1), counts.reshape(-1))
        idx = np.empty(count * batch, dtype=np.int64)
        qv = np.empty(count * batch, dtype=np.float64)
        for g in np.unique(flat_groups):
            mask = flat_groups == g
            q = self.q(int(g))
            local = rng.choice(len(q), size=int(mask.sum()), p=q)
            idx[mask] = self.groups.members[g][local]
            qv[mask] = q[local]
        if weights == "paper":  # p/q with p = 1/M_i
            w = 1.0 / (self.groups.sizes[flat_groups] * qv)
        else:
            w = (batch / (slots * flat_counts)) / (self.n * self.r[flat_groups] * qv)
        return Draw(idx.reshape(count, batch), w.reshape(count, batch), chosen, counts)

    def draw(
        self, batch: int, slots: int, rng: np.random.Generator, weights: str = "exact"
    ) -> tuple[np.ndarray, np.ndarray]:
        """One minibatch: indices and weights. The same random calls, in the same order, as
        :meth:`draw_many` with ``count`` 1, so the same draw; a device makes one every
        iteration, so the slots' counts and each group's share are taken without numpy's
        per-call overhead."""
        G = len(self.r)
        chosen = [int(g) for g in rng.choice(G, size=(1, slots), p=self.r)[0]]
        sizes = self.groups.sizes
        counts = slot_counts_row([int(sizes[g]) for g in chosen], batch)
        share: dict[int, list[int]] = {}  # group -> the draw positions it fills
        per_draw: list[int] = []  # each draw position's slot count
        pos = 0
        for g, c in zip(chosen, counts, strict=True):
            share.setdefault(g, []).extend(range(pos, pos + c))
            per_draw.extend([c] * c)
            pos += c
        idx = np.empty(batch, dtype=np.int64)
        qv = np.empty(batch, dtype=np.float64)
        rg = np.empty(batch, dtype=np.float64)
        msz = np.empty(batch, dtype=np.float64)
        for g in sorted(share):
            at = share[g]
            q = self.q(g)
            local = rng.choice(len(q), size=len(at), p=q)
            idx[at] = self.groups.members[g][local]
            qv[at] = q[local]
            rg[at] = self.r[g]
            msz[at] = sizes[g]
        if weights == "paper":  # p/q with p = 1/M_i
            w = 1.0 / (msz * qv)
        else:
            w = (batch / (slots * np.asarray(per_draw, dtype=np.int64))) / (self.n * rg * qv)
        return idx, w


def all_inclusive(
    importance: np.ndarray, batch: int, smoothing: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """All-IS: every sample freshly scored, one group; ``w = 1 / (N q)``."""
    q = within_probs(importance, smoothing)
    idx = rng.choice(len(q), size=batch, p=q)
    return idx, 1.0 / (len(q) * q[idx])


def uniform_batch(n: int, batch: int, t: int, seed: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Standard sampling (weight 1): iteration ``t``'s minibatch of shuffled local epochs of
    ``n // batch`` minibatches, without replacement within an epoch. Stateless: the epoch's
    order comes from ``seed`` and the epoch number, so a resumed run draws the same."""
    per_epoch = max(1, n // batch)
    epoch, pos = divmod(t, per_epoch)
    order = np.random.default_rng([*seed, epoch]).permutation(n)
    return order[pos * batch : (pos + 1) * batch], np.ones(batch)
