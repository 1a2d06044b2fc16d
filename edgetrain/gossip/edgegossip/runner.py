"""EdgeGossip (Han et al., TPDS 2021): GoSGD whose workers each train on a share r_i of their
data per epoch, chosen by loss rank, so that workers of different speeds finish together.

The worker side of ALGORITHMS.md section 2 with the fixes of the specification (gossip.md A):

- before training, on this worker's own shard only: the aggregated points (reduce, divide
  within classes, average; ``[edgegossip] reduce/divide/ratio``), timed as ``aggregate_s``
  (training time in the paper's accounting; the run's clock starts later, at ``start``, so
  reports add it), and a calibration of the time per sample (``calibrate_s`` of real steps,
  undone afterwards) for the first prediction;
- all along, the resource sampler scoped to this worker's cgroup on an emulated host
  (:mod:`edgetrain.profile.scope`), sampling at least five times an epoch;
- each epoch: r_i from the coordinator (the balancer, :mod:`.side`),
  then Algorithm 2 (:mod:`.ranking`): the loss of every aggregated point ranks
  the subsets, and subsets are kept from the top until r_i |X_i| samples; by default the kept
  samples are shuffled into minibatches (``[edgegossip] order``: rank order, the paper's,
  loses accuracy, see :mod:`edgetrain.gossip.config`); its time is
  ``rank_s``, inside the epoch's training time; GoSGD's exchange runs unchanged after every
  step; at the end, the measured and the next predicted throughput (``p_obs``, ``p_next``,
  :mod:`.predictor`) go to the balancer in ``epoch_end``.

The slowdown emulation (``[[workers]] slowdown``) stretches the aggregation, the calibration and
the ranking as it stretches training steps: a slow device is slow at all of them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from copy import deepcopy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from edgetrain.aggregate import AggregateConfig, build_aggregates
from edgetrain.aggregate.divide import load_library
from edgetrain.gossip.config import EdgeGossipSection
from edgetrain.gossip.edgegossip import ranking
from edgetrain.gossip.edgegossip.predictor import (
    History,
    LivePredictor,
    load_history,
    prediction_error,
)
from edgetrain.gossip.gosgd import GoSGD
from edgetrain.profile.sampler import Sampler
from edgetrain.profile.scope import resolve_scope
from edgetrain.runtime.base import Ready, WorkerContext
from edgetrain.runtime.trainer import StepTimes

log = logging.getLogger(__name__)

MAX_RATIO = 64.0  # a directive's r above this is not believed (r > 1 only redistributes)
_SALT_ORDER = 0xE6
_SALT_SAMPLE = 0xE7
_CALIBRATION_EPOCH = 1_000_000  # minibatch order of the calibration steps (no real epoch's)


@dataclass
class EpochLog:
    """What one epoch of EdgeGossip did, for its ``epoch_end`` metrics."""

    ratio: float = 1.0
    target: float = 0.0
    rank_s: float = 0.0
    order_s: float = 0.0  # of rank_s: the ranking's forward passes (0: the last order reused)
    spread_s: float = 0.0  # the ranking this epoch used, its cost spread over rank_every epochs
    started: float = 0.0  # before the ranking
    steps_started: float = 0.0
    u_since: int = 0
    sizes: list[int] = field(default_factory=list)

    @property
    def kept(self) -> int:
        return sum(self.sizes)


class EdgeGossip(GoSGD):
    """One EdgeGossip worker (role ``trainer``)."""

    # A restarted process rejoins as GoSGD's does (the live model from a peer). While it is
    # away the balancer counts it failed (p_i = 0, against f_threshold); it re-enters with
    # its first process's start ratio, and from its next barrier report on it is balanced
    # again like every other worker.
    rejoins = True
    # No new workers ([run] join_slots): the balancer plans each epoch's shares from every
    # worker's measured pace and start ratio, which a worker that never ran does not have.
    joins_new = False

    def __init__(self, ctx: WorkerContext) -> None:
        super().__init__(ctx)
        self.eg = EdgeGossipSection.of(ctx.recipe)
        self.ratio = 1.0
        self.predictor = LivePredictor(self.eg.balance, History.none(), self.eg.t0_lambda)
        self.sampler: Sampler | None = None
        self.aggregate_s = 0.0
        self.points: torch.Tensor | None = None
        self.point_labels: torch.Tensor | None = None
        self.offsets = np.zeros(1, dtype=np.int64)
        self.members = np.zeros(0, dtype=np.int64)
        self.bad_directives = 0
        self.log = EpochLog()
        # the last ranking's order, the epoch it was made at and its cost ([edgegossip]
        # rank_every reuses it for the epochs between)
        self._order: np.ndarray | None = None
        self._ranked_at = 0
        self._ranked_n = 0  # points the held order ranked
        self._order_s = 0.0

    # ------------------------------------------------------------------ setup

    def setup(self) -> Ready:
        ready = super().setup()
        ctx, eg = self.ctx, self.eg
        if eg.order in ("aggregated", "shuffled"):
            self._aggregate()
        history = History.none()
        if eg.history:
            path = Path(eg.history.replace("{host}", ctx.host)).expanduser()
            history = load_history(path, ctx.recipe.model.name, eg.rg_max_error)
            if not history.records:
                log.warning("no contention history at %s: RG(U) = 1", path)
            elif not history.rg_used:
                log.warning(
                    "contention history at %s: held-out error %s above rg_max_error %.0f%%: "
                    "RG(U) = 1, t0 adapts alone",
                    path,
                    "unmeasured" if history.held_out is None else f"{history.held_out:.0%}",
                    100 * eg.rg_max_error,
                )
        self.predictor.history = history
        scope = resolve_scope(eg.monitor)
        self.sampler = Sampler(
            interval_s=max(0.05, eg.calibrate_s / 5), own_net_bytes=self._own_bytes, scope=scope
        )
        self.sampler.__enter__()
        t_cal, u_cal = self._calibrate()
        p_first = self.predictor.first(t_cal, u_cal)
        log.info(
            "EdgeGossip: %d points from %d samples in %.3f s; %.5f s/sample calibrated, "
            "co-running %s (%s), first prediction %.1f samples/s",
            len(self.offsets) - 1,
            self.trainer.num_samples,
            self.aggregate_s,
            t_cal,
            u_cal,
            scope.path if scope else "machine",
            p_first,
        )
        meta = {
            **ready.meta,
            "host": ctx.host,
            "p_next": p_first,
            "t_cal": t_cal,
            "u_cal": list(u_cal) if u_cal is not None else None,
            "t0": self.predictor.t0,
            "aggregate_s": self.aggregate_s,
            "points": len(self.offsets) - 1,
            "rg_records": history.records,
            "rg_held_out": history.held_out,
            "rg_used": history.rg_used,
            "monitor": scope.path if scope else "machine",
            "monitor_cores": self.sampler.cores,
        }
        return Ready(ready.endpoints, meta)

    def _own_bytes(self) -> int:
        return self.ctx.traffic.bytes_sent + self.ctx.traffic.bytes_received

    def _aggregate(self) -> None:
        """Build this shard's aggregated points (timed, slowed down like training)."""
        recipe, eg = self.ctx.recipe, self.eg
        agg = recipe.aggregate
        cfg = AggregateConfig(
            reduce=eg.reduce,
            divide=eg.divide,
            ratio=eg.ratio,
            seed=agg.seed if agg.seed is not None else recipe.run.seed,
            dims=agg.dims,
            kmeans_iterations=agg.kmeans_iterations,
            kmeans_flat_limit=agg.kmeans_flat_limit,
            chunk_size=agg.chunk_size,
        )
        t = self.trainer
        load_library(eg.divide)  # the library's import is start-up, not aggregation
        started = time.perf_counter()
        built = build_aggregates(t.x.cpu().numpy(), t.y.cpu().numpy(), cfg)
        work = time.perf_counter() - started
        self.aggregate_s = work + t.throttle.after(work)
        self.points = torch.from_numpy(built.points).to(t.device)
        self.point_labels = torch.from_numpy(built.labels).to(t.device)
        self.offsets, self.members = built.member_offsets, built.member_indices

    def _calibrate(self) -> tuple[float, tuple[float, float, float] | None]:
        """Seconds per sample of an epoch as :meth:`metrics` measures them (real training
        steps, undone afterwards, plus one ranking over the whole shard), and the mean
        contention meanwhile. The steps are timed as a window, wall time over samples, as an
        epoch is: under a CPU quota the throttled time falls between steps as well as in them
        (the steps' own times made a 0.35-core worker look 0.45 of a 1-core one)."""
        t, eg = self.trainer, self.eg
        rank_s = 0.0
        if eg.order != "random":  # a ranking of every point, as a worker at r = 1 / F ranks
            started = time.perf_counter()
            self._rank(0, len(self._ranked()[1]))
            work = time.perf_counter() - started
            # per kept sample at r < 1 / F: F x this / N; spread over its epochs
            rank_s = (work + t.throttle.after(work)) * (eg.rank_sample or 1.0) / eg.rank_every
        model_state = deepcopy(t.model.state_dict())
        opt_state = deepcopy(t.optimizer.state_dict())
        assert self.sampler is not None
        since = self.sampler.count
        samples, steps = 0, 0
        batches = t.batches(_CALIBRATION_EPOCH)
        window = time.perf_counter()
        deadline = window + self.eg.calibrate_s
        while steps < 3 or time.perf_counter() < deadline:
            try:
                xb, yb = next(batches)
            except StopIteration:
                batches = t.batches(_CALIBRATION_EPOCH + steps)
                continue
            t.step(xb, yb)
            samples += len(yb)
            steps += 1
        spent = time.perf_counter() - window
        t.model.load_state_dict(model_state)  # in place: the gossip state shares its storage
        t.optimizer.load_state_dict(opt_state)
        t.times, t.steps = StepTimes(), 0
        self.sampler.interval_s = 0.2
        mean = self.sampler.mean(since)
        per_sample = spent / max(samples, 1) + rank_s / max(t.num_samples, 1)
        return per_sample, mean.contention if mean is not None else None

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.__exit__(None, None, None)
            self.sampler = None
        super().close()

    # ------------------------------------------------------------------ Algorithm 2

    @torch.no_grad()
    def _losses(self, x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
        """Each sample's loss under the current model (forward only, eval mode)."""
        model = self.trainer.model
        was = model.training
        model.eval()
        out = [
            nn.functional.cross_entropy(model(x[i : i + 1024]), y[i : i + 1024], reduction="none")
            for i in range(0, len(x), 1024)
        ]
        model.train(was)
        return torch.cat(out).cpu().numpy() if out else np.zeros(0)

    def _ranked(self) -> tuple[torch.Tensor, torch.Tensor]:
        """What a ranking orders: the aggregated points, or the samples for the oracle."""
        t = self.trainer
        if self.eg.order == "oracle":  # the exact losses select
            return t.x, t.y
        assert self.points is not None and self.point_labels is not None
        return self.points, self.point_labels

    def _rank(self, epoch: int, n: int) -> np.ndarray:
        """The subsets' order under the current model (Algorithm 2's ranking: the forward
        passes of the aggregated points, or of the samples for the oracle): of all of them, or
        of a random ``n`` of them (``rank_sample``), the unranked ones after those."""
        x, labels = self._ranked()
        total = len(labels)
        if n >= total:
            order = ranking.rank_order(self._losses(x, labels))
        else:
            rng = np.random.default_rng(
                [self.ctx.recipe.run.seed, self.ctx.worker_id, epoch, _SALT_SAMPLE]
            )
            perm = rng.permutation(total)
            pick = torch.from_numpy(perm[:n]).to(x.device)
            order = ranking.sample_order(perm[:n], self._losses(x[pick], labels[pick]), perm[n:])
        if self.eg.select == "per-class":
            order = ranking.per_class(order, labels.cpu().numpy())
        return order

    def _order_for(self, epoch: int, share: float, keep: bool) -> np.ndarray:
        """A fresh ranking every ``rank_every`` epochs (and whenever none is held: the first
        epoch, after a restart, or one that ranked fewer points than this share keeps), the
        held one in between; none where the share keeps every subset anyway (r = 1, shuffled).
        ``keep``: hold what is ranked."""
        eg = self.eg
        total = len(self._ranked()[1])
        shuffled = eg.order in ranking.SHUFFLED_ORDERS
        need = ranking.to_rank(total, share, eg.rank_sample, shuffled)
        held = self._order is not None and epoch - self._ranked_at < eg.rank_every
        if keep:
            self.log.order_s = 0.0
        if need == 0:  # whole passes: every subset is kept whatever the order
            return np.arange(total, dtype=np.int64)
        # the held order serves while what this share keeps lies among the points it ranked
        if keep and held and ranking.to_rank(total, share, 1.0, shuffled) <= self._ranked_n:
            assert self._order is not None
            self.log.spread_s = self._order_s / eg.rank_every
            return self._order
        started = time.perf_counter()
        order = self._rank(epoch, need)
        work = time.perf_counter() - started
        cost = work + self.trainer.throttle.after(work)
        if keep:
            self._order, self._ranked_at, self._order_s = order, epoch, cost
            self._ranked_n = need
            self.log.order_s, self.log.spread_s = cost, cost / eg.rank_every
        return order

    def _plan(self, epoch: int, target: float, keep: bool = True) -> ranking.Batches:
        eg, t = self.eg, self.trainer
        b = self.ctx.recipe.train.batch_size
        rng = np.random.default_rng(
            [self.ctx.recipe.run.seed, self.ctx.worker_id, epoch, _SALT_ORDER]
        )
        if eg.order == "random":
            return ranking.random_fill(t.num_samples, target, b, rng)
        share = target / t.num_samples if t.num_samples else 1.0
        order = self._order_for(epoch, share, keep)
        if eg.order == "oracle":  # the kept samples are shuffled
            offsets, members = ranking.singletons(t.num_samples)
            kept = ranking.rank_and_fill(offsets, members, order, target, b, eg.exact_batches)
            return ranking.shuffled(kept, b, rng)
        batches = ranking.rank_and_fill(
            self.offsets, self.members, order, target, b, eg.exact_batches
        )
        return ranking.shuffled(batches, b, rng) if eg.order == "shuffled" else batches

    def batches(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        t = self.trainer
        ratio = max(self.ratio, self.eg.r_min)
        target = ratio * t.num_samples
        assert self.sampler is not None
        self.log = EpochLog(ratio, target)
        started = time.perf_counter()
        plan = self._plan(epoch, target)
        work = time.perf_counter() - started - self.log.order_s  # the fill and the shuffle
        fill_s = work + t.throttle.after(work)
        log_ = self.log
        log_.rank_s, log_.started = fill_s + log_.order_s, started
        log_.steps_started, log_.u_since = time.perf_counter(), self.sampler.count
        for idx in plan:
            sel = torch.from_numpy(idx).to(t.device)
            yield t.x[sel], t.y[sel]

    def step(self, epoch: int, batch: tuple[torch.Tensor, torch.Tensor]) -> float:
        self.log.sizes.append(len(batch[1]))
        return super().step(epoch, batch)

    # ------------------------------------------------------------------ reporting

    def metrics(self) -> dict[str, Any]:
        base = super().metrics()
        log_ = self.log
        now = time.perf_counter()
        steps_s = now - log_.steps_started
        kept = log_.kept
        # The epoch's time per sample, ranking included: balancing on it gives the fixed cost
        # of ranking (a larger share where r is small) to the balancer too. With rank_every
        # above 1 the last ranking's cost is spread over its epochs, so that the epochs that
        # rank and those that reuse the order predict the same; an epoch that needs no
        # ranking (r = 1) carries none.
        spent = now - log_.started - log_.order_s + log_.spread_s
        t_obs = spent / kept if kept else float("nan")
        assert self.sampler is not None
        mean = self.sampler.mean(log_.u_since)
        u = mean.contention if mean is not None else None
        predicted = self.predictor.predicted
        p_obs = 1.0 / t_obs if kept and t_obs > 0 else None
        p_next = self.predictor.after_epoch(t_obs, u)
        self.sampler.interval_s = min(1.0, max(0.05, (steps_s + log_.rank_s) / 5))
        sizes = log_.sizes or [0]
        return {
            **base,
            "ratio": log_.ratio,
            "target": log_.target,
            "kept": kept,
            "batches": len(log_.sizes),
            "batch_min": min(sizes),
            "batch_max": max(sizes),
            "batch_mean": sum(sizes) / len(sizes),
            "rank_s": log_.rank_s,
            "ranked": log_.order_s > 0,
            "steps_s": steps_s,
            "t_obs": t_obs,
            "p_pred": predicted,
            "p_obs": p_obs,
            "p_next": p_next,
            "predictor_error": prediction_error(predicted, p_obs),
            "t0": self.predictor.t0,
            "rg": self.predictor.rg,
            "u": list(u) if u is not None else None,
            "u_samples": self.sampler.count - log_.u_since,
            "sampler_cost": self.sampler.cost_fraction,
            "aggregate_s": self.aggregate_s,
            "bad_directives": self.bad_directives,
        }

    def apply(self, directive: Mapping[str, Any]) -> None:
        """Take r_i from the balancer's directive; anything malformed keeps the last one."""
        if "ratio" not in directive:
            return
        r = directive["ratio"]
        ok = isinstance(r, (int, float)) and not isinstance(r, bool)
        if ok and 0.0 <= float(r) <= MAX_RATIO:
            self.ratio = float(r)
        else:
            self.bad_directives += 1
            log.warning("ignoring a directive with ratio %r; keeping %.3f", r, self.ratio)
