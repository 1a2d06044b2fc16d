"""Mercury's recipe section, ``[mercury]`` (torch-free), and the settings a technique runs with.

Every parameter the paper leaves unset is a field here with the specification's default
(shared/specs/ps.md §2.3.3, §2.4, §2.5, §4 items 17-24): the number of fixed groups D, the
slots d, beta, the smoothing lambda, the initial importance, the loss mode, the resharding
cadence and budget. :func:`settings` resolves the defaults that depend on the technique
(``mercury`` or its baseline ``multips-sgd``) and refuses combinations that cannot run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field, model_validator

from edgetrain.errors import RecipeError
from edgetrain.section import Section

MERCURY = "mercury"
BASELINE = "multips-sgd"
TECHNIQUES = (MERCURY, BASELINE)

Sampling = Literal["groupwise", "uniform", "all"]
Resharding = Literal["aware", "agnostic", "random", "none"]
Scheduler = Literal["bacc", "sequential", "agnostic"]
GroupSize = Literal["anytime", "predict", "fixed"]
Auto = Literal["auto"]
AUTO: Auto = "auto"
# ``auto`` on a device under a CPU quota: the part of its quota a paced refresh may bring the
# process to. A refresh that spends the quota stalls the training thread and the aggregation
# until the quota period ends; on ``mercury-4u`` (0.45 core, 100 Mbit/s, two seeds each) the
# iteration was 1.02-1.06x uniform's at 0.6 and 0.3, 1.04-1.05x at 0.8, 1.07x at 0.9 and
# 1.10-1.16x at 1.0 (docs/ps.md, "Mercury on a CPU quota")
QUOTA_UTILISATION = 0.6


class MercurySection(Section):
    """``[mercury]``: sampling, resharding and scheduling of a Mercury run."""

    NAME: ClassVar[str] = "mercury"

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    # groupwise: the paper's group-wise importance sampling; uniform: shuffled local epochs
    # (standard distributed SGD); all: every sample re-scored every iteration (All-IS).
    sampling: Sampling = "groupwise"
    # exact: the specification's exactly unbiased weight (§2.3.4); paper: the plain p/q of
    # [MC §4.1], biased when beta > 0 (kept to show the bias).
    weights: Literal["exact", "paper"] = "exact"
    slots: int = Field(2, ge=1)  # d: groups drawn per iteration (i.i.d., with replacement)
    beta: float | None = Field(None, ge=0)  # freshness; None: 1 / D_eff (D_eff = N / mean G)
    smoothing: float = Field(0.5, ge=0)  # lambda: q ~ I + lambda * (group's mean I)
    initial_importance: float = Field(1.0, gt=0)  # I of a sample never refreshed
    # auto: eval mode without BatchNorm/Dropout, else train mode with BN buffers restored
    loss_mode: Literal["auto", "eval", "train"] = "auto"
    # anytime: refresh while the aggregation lasts (BACC); predict: G_t from the measured
    # aggregation time and forward rate; fixed: G = ceil(N / groups). None: the scheduler's
    # own (bacc: anytime; sequential and agnostic: fixed).
    group_size: GroupSize | None = None
    groups: int = Field(10, ge=1)  # D, for a fixed group size
    refresh_chunk: int = Field(32, ge=1)  # c: samples scored per forward pass
    # anytime BACC: the training forward pass's per-sample losses rescore the drawn samples
    # (same weights, same loss mode: free) and stand for the iteration's first chunk, so every
    # refresh of T2 is optional (paced by pace_refresh); no score is stamped, so the cache is
    # one group (importance sampling by each sample's last score). false: the paper's BACC,
    # T2 scores and stamps a first chunk every iteration whatever CPU it takes. auto (the
    # default): true on a device under a CPU quota (a cgroup's, as an emulated host's or a
    # container's), where that chunk comes out of the quota the training thread needs, else
    # false. Ignored with loss_mode "eval" on a model with BatchNorm or Dropout (the training
    # losses are not the scorer's).
    batch_refresh: bool | Auto = AUTO
    # bacc: two threads (refresh during aggregation, resharding during compute, paused at
    # aggregation); sequential: one thread, reshard piece -> refresh -> sample -> compute ->
    # aggregate; agnostic: two threads with a fixed G and a fixed resharding slot.
    scheduler: Scheduler = "bacc"
    # bacc, anytime: refresh beyond the first chunk only with CPU the device's other work
    # leaves (its cores, or its cgroup's quota); false: refresh all through the aggregation.
    pace_refresh: bool = True
    # the part of the device's cores a paced refresh may bring the process to: below 1 leaves
    # the training thread headroom in its CPU quota (a quota spent by a refresh stalls the
    # next compute or aggregation until the quota period ends). auto (the default):
    # QUOTA_UTILISATION (0.6) on a device under a CPU quota, else 1.0
    pace_utilisation: float | Auto = AUTO
    reshard_slot_ms: float = Field(50.0, gt=0)  # agnostic: resharding time per iteration
    # aware: N_o samples by importance, cohort by cohort; agnostic: N_p at random; random:
    # N_o at random (the control the paper lacks); none. None: aware (mercury, not
    # federated), else none.
    resharding: Resharding | None = None
    # data never leaves a device: no resharding, and (unless scheduler is set) the sequential
    # scheduler, as the paper's federated runs turned off both [MC §6.6]
    federated: bool = False
    reshard_fraction: float = Field(0.5, gt=0, lt=1)  # rho: N_p = rho * N_k per round
    # N_o as a fraction of N_p, or "bandwidth": what fits the round's compute windows at the
    # measured link rate, min(N_p, bw * T_cp * iterations / sample bytes)
    reshard_budget: float | Literal["bandwidth"] = "bandwidth"
    reshard_every: int | None = Field(None, ge=1)  # iterations per round; None: a local epoch
    chunk_bytes: int = Field(65536, ge=1024, le=16 * 2**20)  # one mc.swap at most
    optimizer: Literal["adam", "sgd"] = "adam"  # every device steps it on the averaged gradient
    epoch_iterations: int | None = Field(None, ge=1)  # None: a local epoch (min N_k / batch)
    stop_accuracy: float | None = Field(None, gt=0, le=1)  # stop once device 0 reaches it
    hash_every: int = Field(100, ge=1)  # iterations between replica hash checks
    reply_timeout_s: float = Field(120.0, gt=0)
    # R-M7: iterations at which device 0 scores a fixed subset (t, t+1, t+10)
    premise_probe: list[int] = Field(default_factory=list)
    premise_samples: int = Field(500, ge=10)

    @model_validator(mode="after")
    def _check(self) -> MercurySection:
        u = self.pace_utilisation
        if u != AUTO and not (isinstance(u, float) and 0 < u <= 1):
            raise ValueError("pace_utilisation must be in (0, 1] or 'auto'")
        if isinstance(self.reshard_budget, float) and not 0 < self.reshard_budget <= 1:
            raise ValueError("reshard_budget must be in (0, 1] (a fraction of N_p) or 'bandwidth'")
        if self.federated and self.resharding not in (None, "none"):
            raise ValueError(
                f"federated = true keeps data on its device: resharding = '{self.resharding}' "
                "cannot run (leave resharding out or set it to 'none')"
            )
        if self.scheduler != "bacc" and self.group_size in ("anytime", "predict"):
            raise ValueError(
                f"group_size = '{self.group_size}' needs the BACC threads; scheduler = "
                f"'{self.scheduler}' refreshes a fixed group (group_size = 'fixed')"
            )
        if self.sampling != "groupwise" and self.resharding == "aware":
            raise ValueError(
                f"resharding = 'aware' draws by the group-wise importance cache; sampling = "
                f"'{self.sampling}' has none (use 'agnostic' or 'random')"
            )
        if self.weights == "paper" and self.sampling != "groupwise":
            raise ValueError("weights = 'paper' applies to sampling = 'groupwise' only")
        return self


@dataclass(frozen=True)
class Settings:
    """What one device runs: the section with every technique-dependent default resolved."""

    technique: str
    sampling: str
    weights: str
    slots: int
    beta: float | None
    smoothing: float
    initial_importance: float
    loss_mode: str
    group_size: str
    groups: int
    refresh_chunk: int
    batch_refresh: bool | Auto
    scheduler: str
    pace_refresh: bool
    pace_utilisation: float | Auto
    reshard_slot_ms: float
    resharding: str
    federated: bool
    reshard_fraction: float
    reshard_budget: float | str
    reshard_every: int | None
    chunk_bytes: int
    optimizer: str
    epoch_iterations: int | None
    stop_accuracy: float | None
    hash_every: int
    reply_timeout_s: float
    premise_probe: tuple[int, ...]
    premise_samples: int

    @property
    def importance(self) -> bool:
        """Whether the run keeps an importance cache (group-wise or All-IS)."""
        return self.sampling != "uniform"

    @property
    def threads(self) -> bool:
        """Whether a second thread (T2) refreshes and reshards beside the training thread."""
        return self.scheduler in ("bacc", "agnostic")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def for_device(self, under_quota: bool) -> Settings:
        """These settings on one device, ``auto`` resolved: under a CPU quota the batch's
        losses are the refresh's first chunk and a paced refresh leaves the quota
        :data:`QUOTA_UTILISATION` headroom; elsewhere the paper's BACC (a first chunk every
        iteration, paced up to the whole share)."""
        batch = under_quota if self.batch_refresh == AUTO else bool(self.batch_refresh)
        if self.sampling != "groupwise" or self.group_size != "anytime":
            batch = False  # only an anytime refresh counts what it got
        util = self.pace_utilisation
        if util == AUTO:
            util = QUOTA_UTILISATION if under_quota else 1.0
        return replace(self, batch_refresh=batch, pace_utilisation=float(util))


def conflicts(section: MercurySection, technique: str) -> RecipeError | None:
    """What the recipe's own ``[mercury]`` keys ask that ``technique`` cannot do (only the
    keys the recipe sets; the launcher checks this, workers get every key filled in)."""
    given = section.model_fields_set
    if technique == BASELINE:
        for key, want in (("sampling", "uniform"), ("scheduler", "sequential")):
            value = getattr(section, key)
            if key in given and value != want:
                return RecipeError(
                    f"[mercury] {key} = '{value}' does not fit technique '{BASELINE}' "
                    f"(standard distributed SGD: {key} = '{want}')",
                    f"use technique = '{MERCURY}' for importance sampling and BACC",
                )
        if section.resharding == "aware":
            return RecipeError(
                f"[mercury] resharding = 'aware' needs importance sampling; technique "
                f"'{BASELINE}' samples uniformly",
                "use 'agnostic', 'random' or 'none'",
            )
    return None


def settings(section: MercurySection, technique: str, batch_size: int) -> Settings:
    """The settings of ``technique`` from ``[mercury]``; :class:`RecipeError` for what cannot
    run. ``multips-sgd`` is standard distributed SGD on the same multi-server layout: uniform
    sampling, no resharding unless asked, the sequential pipeline (§4 item 26)."""
    if technique not in TECHNIQUES:
        raise RecipeError(f"technique '{technique}' is not Mercury's")
    values = section.model_dump()
    if technique == BASELINE:
        values["sampling"], values["scheduler"] = "uniform", "sequential"
        if values["resharding"] == "aware":
            values["resharding"] = "none"
    if values["federated"] and "scheduler" not in section.model_fields_set:
        values["scheduler"] = "sequential"
    if values["resharding"] is None:
        aware = technique == MERCURY and not values["federated"]
        values["resharding"] = "aware" if aware and values["sampling"] == "groupwise" else "none"
    if values["scheduler"] != "bacc":
        values["group_size"] = "fixed"
    elif values["group_size"] is None:
        values["group_size"] = "anytime"
    if values["sampling"] != "groupwise" or values["group_size"] != "anytime":
        values["batch_refresh"] = False  # only an anytime refresh counts what it got
    if values["sampling"] != "uniform" and values["slots"] > batch_size:
        raise RecipeError(
            f"[mercury] slots = {values['slots']} is more than [train] batch_size = {batch_size}: "
            "every slot needs at least one draw",
            "lower slots or raise the batch",
        )
    values["premise_probe"] = tuple(values["premise_probe"])
    return Settings(technique=technique, **values)
