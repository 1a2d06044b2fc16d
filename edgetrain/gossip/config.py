"""The gossip family's recipe sections: ``[gossip]``, ``[edgegossip]``, ``[dlion]``, ``[gaia]``
and ``[ako]`` (torch-free: recipes validate without torch)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import ConfigDict, Field, model_validator

from edgetrain.gossip.edgegossip.predictor import RG_MAX_ERROR
from edgetrain.section import Section


class GossipSection(Section):
    """``[gossip]``: GoSGD's exchange probability, epoch synchronisation and outbox depth."""

    NAME: ClassVar[str] = "gossip"

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    probability: float = Field(0.25, ge=0, le=1)
    sync_epochs: bool = True
    drain_timeout_s: float = Field(60.0, gt=0)
    # Messages that may wait in one peer's outbox. A full outbox skips the push (and keeps the
    # mixing weight), so a slow peer never pins more than this many model copies in memory.
    outbox: int = Field(2, ge=1, le=64)
    # Keep freed receive buffers in this process's heap (glibc mallopt: up to 1 GiB of freed
    # memory stays with the worker) so received weights land in warm memory: on loopback
    # about twice the receive throughput (benchmarks/transport), at a memory cost a 2-4 GiB
    # edge device may not afford. Off by default.
    keep_buffers: bool = False


class EdgeGossipSection(Section):
    """``[edgegossip]``: the aggregator, the predictor, the balancer and the ranked trainer
    (docs/gossip.md). Defaults are the paper's where it gives one."""

    NAME: ClassVar[str] = "edgegossip"

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    # Input data aggregation, once per worker on its own shard before training. The other
    # knobs (dims, k-means iterations, seed) come from the recipe's [aggregate] section.
    reduce: Literal["svd-sample", "svd", "isvd", "hash", "pca", "histogram"] = "svd-sample"
    divide: Literal["kmeans", "lsh", "gmm"] = "kmeans"
    ratio: int = Field(10, ge=1)
    # The balancer's input: predictive (t0 RG(U), t0 adapted), reactive (last epoch's measured
    # throughput), static (t0 before training only), off (r = 1 for every worker).
    balance: Literal["predictive", "reactive", "static", "off"] = "predictive"
    # What an epoch trains on: shuffled (Algorithm 2 selects the subsets by their aggregated
    # point's loss, and the kept samples are shuffled into minibatches), aggregated (the same
    # subsets in rank order, as the paper prints it), random (a random share, no aggregates),
    # oracle (samples selected by their exact loss, timed, shuffled).
    #
    # Our choice, not the paper's: shuffled is the default. In rank order, minibatches are
    # built from a few single-class clusters, hardest first; measured on the emulated testbed
    # (scripts/reproduce-edgegossip --quick: digits, LeNet-5, 20 epochs) that lost 14.4
    # points of accuracy against epoch-synchronous GoSGD where the shuffled order lost 0.2 and
    # reached the target 2.4x sooner, and the paper reports a loss of 0.78 points. The kept
    # share is the same either way: only the order within the epoch changes.
    order: Literal["aggregated", "shuffled", "random", "oracle"] = "shuffled"
    # Which subsets the ranking keeps: per-class (the top r share of every class, in a sequence
    # that cycles through the classes) or global (the paper's one ranking, which early in
    # training keeps whole classes and drops others).
    select: Literal["per-class", "global"] = "per-class"
    # Rank the aggregated points every N epochs (1: every epoch, the paper's); in between, the
    # last ranking's order chooses the kept subsets (r_i still applies every epoch).
    #
    # Our choice, not the paper's: every 3 epochs by default. The ranking's forward passes are
    # a fixed cost per epoch: on recipes/edgegossip.toml, five seeds interleaved, ranking
    # every epoch took 9.7% of epoch time and every third epoch 3.8%, at the same accuracy
    # (benchmarks/edgegossip-rank/).
    rank_every: int = Field(3, ge=1, le=1000)
    # Rank a random sample of the points in proportion to this epoch's share r_i: min(all,
    # rank_sample x r_i x points), the kept subsets the best of that sample, the unranked
    # points after them in random order (0: rank every point, the paper's). A slow worker
    # keeps a small share of its data but ranked all of it: at r = 0.2 its ranking cost a
    # quarter of its training compute. Our choice, not the paper's (benchmarks/edgegossip-rank/).
    rank_sample: float = Field(2.0, ge=0, le=1000)
    p_threshold: float = Field(0.001, ge=0)  # samples/s below which a worker has failed
    # Failed fraction above which the balancer stops the run (None: [run] max_failed_fraction;
    # the paper's example is 0.10, which halts on one failure among 4 workers).
    f_threshold: float | None = Field(None, ge=0, le=1)
    on_failure: Literal["halt", "redistribute"] = "halt"
    r_min: float = Field(0.0, ge=0, le=1)  # a worker's smallest share of its data per epoch
    exact_batches: bool = False  # cut batches of exactly batch_size (split the last subset)
    # Contention history of `edgetrain profile --contention` for RG(U), read on each worker's
    # host; "{host}" is the worker's host name. None, or no file there: RG = 1.
    history: str | None = None
    # RG(U) is used only where the history's held-out error (what `edgetrain profile
    # --contention` prints) is at most this; above it RG = 1 and t0 adapts alone. On the
    # emulated testbed the histories missed their held-out levels by 24-222% (the paper: 4.3%),
    # and with them the in-run error of the host that missed most was 18-30% a run (R-EG-1, R-EG-8).
    rg_max_error: float = Field(RG_MAX_ERROR, ge=0)
    # Whose load is co-running: auto (an emulated host's cgroup, else the machine), machine,
    # or cgroup (the worker's own cgroup, whatever it is).
    monitor: Literal["auto", "machine", "cgroup"] = "auto"
    calibrate_s: float = Field(1.0, gt=0, le=60)  # timed steps before training, for t0
    t0_lambda: float = Field(0.5, gt=0, le=1)  # weight of the last epoch in t0's adaptation


class ExchangeSection(Section):
    """What ``[dlion]``, ``[gaia]`` and ``[ako]`` share, so that the baselines run under the same
    synchronisation, links and pre-profiling as DLion (docs/gossip.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    # iteration: before applying update t a worker waits for the iteration-(t - staleness)
    # messages of every worker that sends to it (gossip.md B.2, ours); async: never waits.
    sync: Literal["iteration", "async"] = "iteration"
    staleness: int = Field(0, ge=0, le=64)
    # A message that has not come after this long is given up on (counted; a dead peer is
    # dropped at once when the coordinator names it).
    wait_timeout_s: float = Field(120.0, gt=0)
    # Link rates to start from (Mbit/s): LAN within a site, WAN between sites (the hosts file's
    # `site`); each worker shares its LAN rate among its destinations and a site its WAN rate.
    lan_mbit: float = Field(1000.0, gt=0)
    wan_mbit: float = Field(100.0, gt=0)
    # Each worker's site when the hosts name none (local processes): one name per worker.
    sites: list[str] | None = Field(None, min_length=1)
    # Capacity C_j(m) before training: a pilot of timed steps at a few batch sizes
    # (`pilot_s` seconds in all, not in the run's clock), or `edgetrain profile`'s throughput
    # read on each worker's host from `profile` ("{host}": the worker's host name).
    capacity: Literal["pilot", "profile"] = "pilot"
    profile: str | None = None
    pilot_s: float = Field(2.0, gt=0, le=120)
    # How the pilot times a step on one CPU thread: "cpu", its CPU time scaled by the pilot's
    # CPU share (CPU over wall across the pilot), steady under a CPU quota's stalls; "wall",
    # the best window's wall time (a GPU or several threads always).
    pilot_clock: Literal["cpu", "wall"] = "cpu"
    # Eq. 5 weighs each worker's mean gradient by 1/k (worker); sample: by m_j / sum m (DLion's
    # default, below; Gaia's and Ako's batches are equal, so both read the same there).
    gradient_weighting: Literal["worker", "sample"] = "worker"

    @model_validator(mode="after")
    def _check_exchange(self) -> ExchangeSection:
        if self.sync == "async" and self.staleness:
            raise ValueError(
                "staleness bounds how far sync = 'iteration' runs ahead; with sync = 'async' "
                "nobody waits: remove staleness or use sync = 'iteration'"
            )
        if self.capacity == "profile" and not self.profile:
            raise ValueError(
                "capacity = 'profile' reads `edgetrain profile` output: set profile = "
                '"~/profiles/{host}.json" (or capacity = "pilot")'
            )
        if self.sites is not None and any(not s for s in self.sites):
            raise ValueError("sites must be non-empty names, one per worker")
        return self


class DLionSection(ExchangeSection):
    """``[dlion]``: DLion's mechanisms, each switchable (docs/gossip.md). Where the paper gives
    no formula the specification's proposal is the default (gossip.md B.3-B.6)."""

    NAME: ClassVar[str] = "dlion"

    # Ours (gossip.md A-35): DLion's batches differ by design, so by default each worker's mean
    # gradient weighs m_j / sum m (its samples), not Eq. 5's 1/k: over five seeds of
    # recipes/dlion.toml (then at lr 0.02) the same median accuracy (0.964 against 0.961) and a
    # higher worst seed (0.933 against 0.881). "worker": the paper's Eq. 5.
    gradient_weighting: Literal["worker", "sample"] = "sample"
    # Compute-capacity-aware batching: m_j in proportion to C_j, equal step time T_unit.
    batching: bool = True
    t_unit: Literal["equal-total", "slowest"] = "equal-total"
    epsilon: float = Field(0.10, gt=0, le=1)  # allowed step-time spread, share of T_unit
    t_bs: int | None = Field(None, ge=1)  # total batch cap; unset: 10% of N, at least k b0
    # Ours: no worker's batch below this (a one-sample gradient is noise); unset: b0 / 4.
    min_batch: int | None = Field(None, ge=1)
    # Adaptive learning rate and batch size (Table 1).
    lr_policy: Literal["small", "large", "warmup"] = "warmup"
    warmup_until: float = Field(0.10, gt=0, le=1)
    # Ours: a raised LR (warm-up, LargeLR) is capped where this worker's smoothed loss climbs
    # loss_guard_rise above its lowest (schedules.LossGuard); false: the paper's schedule as is.
    loss_guard: bool = True
    loss_guard_rise: float = Field(0.10, gt=0, le=10)
    decay_lr: bool = True
    decay_at: float = Field(0.80, ge=0, le=1)
    decay_factor: float = Field(0.1, gt=0, le=1)
    bs_policy: Literal["static", "speedup", "increase"] = "speedup"
    speedup_at: float = Field(0.70, ge=0, le=1)
    speedup_factor: float = Field(2.0, ge=1)
    increase_at: list[float] = Field(default_factory=lambda: [0.25, 0.50, 0.75])
    increase_factor: float = Field(1.5, ge=1)
    # Network-aware gradient exchange: partial (a per-link threshold) or full (dense).
    gradient_exchange: Literal["partial", "full"] = "partial"
    threshold: Literal["budget", "static"] = "budget"
    budget_factor: float = Field(1.0, gt=0)  # GE may take budget_factor x T_unit per link
    # Ours (beyond the paper): measured, a link goes dense when choosing its top k costs this
    # worker more time than the smaller message saves on the link (sparse.sparse_pays);
    # ignored: the paper's rule, the byte budget alone.
    select_cost: Literal["measured", "ignored"] = "measured"
    lan_fraction: float = Field(0.10, gt=0, le=1)  # threshold = "static": share of entries
    wan_fraction: float = Field(0.01, gt=0, le=1)
    contribution: Literal["magnitude", "relative"] = "magnitude"
    bandwidth: Literal["live", "static"] = "live"  # live: EWMA of acknowledged goodput
    bandwidth_alpha: float = Field(0.3, gt=0, le=1)
    # Weight exchange: when, what, whom, how.
    we_when: Literal["none", "periodic", "early", "late"] = "early"
    we_every: int = Field(10, ge=1)
    we_early_until: float = Field(0.20, gt=0, le=1)
    we_late_from: float = Field(0.80, ge=0, lt=1)
    we_what: Literal["full", "partial"] = "full"
    we_fraction: float = Field(0.10, gt=0, le=1)
    we_whom: Literal["worst", "all"] = "worst"
    we_how: Literal["async", "sync"] = "async"
    we_beta: float = Field(0.5, gt=0, le=1)
    loss_window: int = Field(20, ge=1)
    # Selective data propagation between sites (an extension: the paper never evaluated it).
    selective: bool = False
    selective_senders: int | None = Field(None, ge=1)
    selective_receivers: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _check_dlion(self) -> DLionSection:
        # value-based only: a recipe reaches the workers with every field filled in
        if self.gradient_exchange == "full" and self.threshold == "static":
            raise ValueError(
                "threshold = 'static' cuts partial gradients, but gradient_exchange = 'full' "
                "sends them whole: use gradient_exchange = 'partial' or threshold = 'budget'"
            )
        if self.we_how == "sync" and self.we_when == "none":
            raise ValueError(
                "we_how = 'sync' waits for exchanged weights, but we_when = 'none' exchanges "
                "none: pick we_when = 'periodic', 'early' or 'late', or we_how = 'async'"
            )
        if self.we_how == "sync" and (self.sync == "async" or self.selective):
            raise ValueError(
                "we_how = 'sync' makes the worst worker wait for the best one's weights, which "
                "needs every worker to agree on who they are: use sync = 'iteration' without "
                "selective propagation, or we_how = 'async'"
            )
        if any(not 0 < x < 1 for x in self.increase_at):
            raise ValueError("increase_at must hold progress points between 0 and 1")
        if (self.selective_senders or self.selective_receivers) and not self.selective:
            raise ValueError("selective_senders/receivers need selective = true")
        return self


class GaiaSection(ExchangeSection):
    """``[gaia]``: Gaia's significance filter (the DLion paper's baseline; gossip.md B.8)."""

    NAME: ClassVar[str] = "gaia"

    significance: float = Field(0.01, gt=0)  # send an entry when |change| > v |w|
    significance_decay: Literal["none", "sqrt-epoch"] = "none"
    # worker: every worker is its own site and parameter server (one LAN, DLion §4.1); site:
    # workers push full gradients to their site's first worker, whose parameter server
    # exchanges significant updates with the other sites' (DLion §4.2); auto: site when the
    # workers span several sites and one of them has more than one worker.
    deployment: Literal["auto", "worker", "site"] = "auto"


class AkoSection(ExchangeSection):
    """``[ako]``: Ako's partitioned gradient exchange (gossip.md B.8)."""

    NAME: ClassVar[str] = "ako"

    # p, the number of partitions; unset: from the smallest bandwidth between workers and one
    # iteration's compute time (p = ceil((k - 1) S / (B t_iter))).
    partitions: int | None = Field(None, ge=1)
