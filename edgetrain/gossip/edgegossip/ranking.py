"""EdgeGossip's accuracy-aware trainer (Algorithm 2, with the specification's fixes): which
samples an epoch trains on, and in which minibatches. Pure numpy.

Each aggregated point's effect is its loss under the current model; the points are ranked by
effect, highest first, and their subsets (CSR ``offsets``/``members``: the samples each point
stands for) fill minibatches in that order, whole, until a batch holds at least ``b`` samples.
Batches are taken while fewer than ``target`` = r_i |X_i| samples have been processed. The
fixes to the printed loop:

- (a) the subset index advances after every subset appended, so no subset is used twice;
- (b) ``processed < target`` (the printed ``<=`` overshoots, and runs with a target of 0), and
  at least one minibatch every epoch, so a worker with r = 0 still takes part in gossip;
- (c) the loop stops when the subsets run out; a last partial batch is kept if it is not empty.

A target above the data (r > 1: a failed worker's share redistributed) takes further passes
over the same ranking, each subset once per pass. ``exact`` cuts batches of exactly ``b``
(the last subset of a batch split), an option the paper does not have.
"""

from __future__ import annotations

import math

import numpy as np

Batches = list[np.ndarray]


def rank_order(effects: np.ndarray) -> np.ndarray:
    """Point indices by effect, highest first; ties keep index order, non-finite effects last."""
    e = np.asarray(effects, dtype=np.float64)
    key = np.where(np.isfinite(e), -e, np.inf)
    return np.argsort(key, kind="stable")


def sampled(total: int, share: float, factor: float) -> int:
    """How many of ``total`` points a ranking with ``[edgegossip] rank_sample = factor`` ranks
    for a kept share ``share``: all for factor 0 (the paper's), else ceil(factor x share x
    total), at least one and at most all."""
    if total <= 0:
        return 0
    if factor <= 0:
        return total
    return max(1, min(total, math.ceil(factor * max(share, 0.0) * total - 1e-9)))


SHUFFLED_ORDERS = ("shuffled", "oracle")  # [edgegossip] order values that shuffle kept samples


def last_pass(share: float, shuffled: bool) -> float | None:
    """The share of the points an epoch at kept share ``share`` must rank for: all of it,
    except that where the kept samples are shuffled (``order = "shuffled"`` or ``"oracle"``)
    whole passes over the shard need no ranking, only a last partial pass does: r = 1 (the
    fastest worker under the balancer) keeps every subset whatever the order (None: rank
    nothing)."""
    if shuffled and share >= 1.0:
        share -= math.floor(share)
        if share <= 0.0:
            return None
    return share


def to_rank(total: int, share: float, factor: float, shuffled: bool) -> int:
    """How many of ``total`` points an epoch's ranking needs: :func:`sampled` for the share
    :func:`last_pass` leaves (0 where it leaves none)."""
    last = last_pass(share, shuffled)
    return 0 if last is None else sampled(total, last, factor)


def ranked_share(share: float, factor: float, shuffled: bool) -> float:
    """:func:`to_rank` as a share of the points, without rounding (the cost model's): none,
    all for factor 0 (the paper's), else min(1, factor x the last pass's share)."""
    last = last_pass(share, shuffled)
    if last is None:
        return 0.0
    return 1.0 if factor <= 0 else min(1.0, factor * max(last, 0.0))


def sample_order(pick: np.ndarray, effects: np.ndarray, rest: np.ndarray) -> np.ndarray:
    """The order of a sampled ranking: the ranked points ``pick`` by effect (as
    :func:`rank_order`), then the unranked ``rest`` as given."""
    pick = np.asarray(pick, dtype=np.int64)
    return np.concatenate([pick[rank_order(effects)], np.asarray(rest, dtype=np.int64)])


def per_class(order: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """``order`` re-sequenced so that every prefix holds each class in proportion to its
    subsets, each class's own subsets still highest-loss first.

    Subset m of class c, j-th of the n_c in ``order``, goes to position key (j + 1/2) / n_c
    (ties by first appearance): a prefix of r of the subsets is about the top r of every class,
    and consecutive subsets cycle through the classes. Early in training a model's loss
    differs more between classes than within them, so one global ranking keeps whole classes
    and drops others (measured on MNIST at initialisation: the top 25% held 2 classes)."""
    order = np.asarray(order, dtype=np.int64)
    labels = np.asarray(labels)[order]
    key = np.empty(len(order), dtype=np.float64)
    for c in np.unique(labels):
        where = np.flatnonzero(labels == c)
        key[where] = (np.arange(len(where)) + 0.5) / len(where)
    return order[np.argsort(key, kind="stable")]


def _passes(target: float, total: int) -> int:
    return max(1, math.ceil(target / total)) if total > 0 else 1


def rank_and_fill(
    offsets: np.ndarray,
    members: np.ndarray,
    order: np.ndarray,
    target: float,
    batch: int,
    exact: bool = False,
) -> Batches:
    """Minibatches (arrays of sample indices) from the subsets in ``order``, as above."""
    if batch < 1:
        raise ValueError(f"batch must be at least 1 (got {batch})")
    offsets = np.asarray(offsets, dtype=np.int64)
    members = np.asarray(members, dtype=np.int64)
    total = int(offsets[-1] - offsets[0]) if len(offsets) > 1 else 0
    if total == 0:
        return []
    order = np.tile(np.asarray(order, dtype=np.int64), _passes(target, total))
    if exact:
        flat = np.concatenate([members[offsets[m] : offsets[m + 1]] for m in order])
        return _cut(flat, target, batch)
    out: Batches = []
    processed, i = 0, 0
    while (processed < target or not out) and i < len(order):
        parts: list[np.ndarray] = []
        size = 0
        while size < batch and i < len(order):
            m = order[i]
            part = members[offsets[m] : offsets[m + 1]]
            parts.append(part)
            size += len(part)
            i += 1  # fix (a): advance after every subset, the one that filled the batch too
        if size:
            out.append(np.concatenate(parts))
            processed += size
    return out


def _cut(samples: np.ndarray, target: float, batch: int) -> Batches:
    """Batches of exactly ``batch`` (the last may be smaller) while fewer than ``target``
    samples are taken; at least one."""
    out: Batches = []
    processed = 0
    for start in range(0, len(samples), batch):
        if processed >= target and out:
            break
        part = samples[start : start + batch]
        out.append(part)
        processed += len(part)
    return out


def singletons(n: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR membership in which every sample is its own subset (the oracle ranks samples)."""
    return np.arange(n + 1, dtype=np.int64), np.arange(n, dtype=np.int64)


def random_fill(n: int, target: float, batch: int, rng: np.random.Generator) -> Batches:
    """The random arm: a random kept subset of the samples, shuffled, in batches of ``batch``
    (a fresh permutation for each further pass when r > 1)."""
    if n == 0:
        return []
    order = np.concatenate([rng.permutation(n) for _ in range(_passes(target, n))])
    return _cut(order.astype(np.int64), target, batch)


def shuffled(batches: Batches, batch: int, rng: np.random.Generator) -> Batches:
    """The kept samples of ``batches`` shuffled and cut into batches of ``batch`` (the
    shuffle arm: the aggregated ranking chooses what is kept, not the order)."""
    if not batches:
        return []
    kept = rng.permutation(np.concatenate(batches))
    return [kept[i : i + batch] for i in range(0, len(kept), batch)]


def kept(batches: Batches) -> int:
    """Samples the batches process."""
    return int(sum(len(b) for b in batches))
