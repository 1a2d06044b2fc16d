"""What the DLion reproduction runs: its testbeds, its arms (each a technique and what it
changes in its section), its plan per mode and the recipe of one arm. Pure."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgetrain.errors import EdgetrainError
from edgetrain.experiment import cli, recipes
from edgetrain.experiment.beds import Bed, BedSpec
from edgetrain.experiment.pilot import PILOT_SEED, below, refuse_diverged

REPO = Path(__file__).resolve().parents[1]
TESTBEDS = REPO / "recipes" / "testbeds"
LRS = (0.01, 0.02, 0.05)
TOTALS = (64, 128, 256, 512, 1024, 2048)
QUICK_EPOCHS = 30
QUICK_LR = 0.01  # DLion warms up to k x eta = 0.04: at 0.02 (0.08) a digits pilot diverged
DIVERGED_BELOW = 0.2  # a pilot's final accuracy this near chance (10 classes) diverged
KNEE_DELTA = 0.02  # R-DL-5: within 2 points of the best total batch
PAPER = {
    "batching_cut": 34.0,
    "vs_gaia_faster": 73.0,
    "vs_ako_faster": 74.0,
    "vs_gaia_acc": 42.0,
    "vs_ako_acc": 25.0,
}
SITE_SHARES = (0.7, 0.5, 0.4, 0.3)
SITES_SPEC: dict[str, Any] = {  # R-DL-8 (an extension): generated, not a file
    "name": "dlion-sites-4",
    "description": "DLion R-DL-8: four one-host sites, CPU 0.7/0.5/0.4/0.3, 100 Mbit/s WAN",
    "wan": "100mbit",
    "sites": [
        {"name": f"s{i}", "lan": "1gbit", "hosts": [{"name": f"h{i}", "cpu": c}]}
        for i, c in enumerate(SITE_SHARES, start=1)
    ],
}
BEDS = {
    "compute": BedSpec(
        "dlion-compute-4", (0.9, 0.3, 0.3, 0.3), ("lan",) * 4, TESTBEDS / "dlion-compute-4.toml"
    ),
    "network": BedSpec(
        "dlion-network-4",
        (0.45,) * 4,
        ("cloud-a",) * 3 + ("cloud-b",),
        TESTBEDS / "dlion-network-4.toml",
    ),
    "sites": BedSpec("dlion-sites-4", SITE_SHARES, ("s1", "s2", "s3", "s4"), SITES_SPEC),
}

NO_ADAPT = {"lr_policy": "small", "decay_lr": False, "bs_policy": "static"}
PLAIN = {**NO_ADAPT, "batching": False, "we_when": "none", "gradient_exchange": "full"}
# Every arm: its technique and what it changes in its section.
ARMS: dict[str, tuple[str, dict[str, Any]]] = {
    "dlion": ("dlion", {}),
    "dlion-nobatch": ("dlion", {"batching": False}),
    # R-DL-1w: Eq. 5 weighs a worker's mean gradient by 1/k whatever its batch; the full
    # version's "weighted" batching (gossip.md A-35) weighs it by its samples
    "dlion-sample": ("dlion", {"gradient_weighting": "sample"}),
    "dlion-nowe": ("dlion", {"we_when": "none"}),
    "dlion-noadapt": ("dlion", NO_ADAPT),
    "dlion-fullge": ("dlion", {"gradient_exchange": "full"}),
    "gaia": ("gaia", {}),
    "ako": ("ako", {}),
    # R-DL-4: Table 1
    "t1-small": ("dlion", NO_ADAPT),
    "t1-large": ("dlion", {**NO_ADAPT, "lr_policy": "large"}),
    "t1-warmup": ("dlion", {**NO_ADAPT, "lr_policy": "warmup"}),
    "t1-warmup-speedup": ("dlion", {"decay_lr": False, "bs_policy": "speedup"}),
    "t1-warmup-increase": ("dlion", {"decay_lr": False, "bs_policy": "increase"}),
    "t1-full": ("dlion", {"lr_policy": "warmup", "decay_lr": True, "bs_policy": "speedup"}),
    # R-DL-7: what, whom and how of WE (partial GE, periodic WE)
    "we7-none": ("dlion", {"we_when": "none"}),
    "we7-all": ("dlion", {"we_when": "periodic", "we_whom": "all"}),
    "we7-partial": ("dlion", {"we_when": "periodic", "we_what": "partial"}),
    "we7-one-sync": ("dlion", {"we_when": "periodic", "we_how": "sync"}),
    "we7-one-async": ("dlion", {"we_when": "periodic", "we_how": "async"}),
    # R-DL-8 (extension)
    "sel-off": ("dlion", {"selective": False}),
    "sel-on": ("dlion", {"selective": True}),
}
WE_TIMES = ("none", "periodic", "early", "late")
for _when in WE_TIMES:
    for _ge in ("full", "partial"):
        ARMS[f"we6-{_when}-{_ge}"] = ("dlion", {"we_when": _when, "gradient_exchange": _ge})
for _total in TOTALS:
    ARMS[f"knee-{_total}"] = ("dlion", PLAIN)
TABLE1 = (
    ("t1-small", "SmallLR + StaticBS", 0.6956, 2343),
    ("t1-large", "LargeLR + StaticBS", 0.6256, 2404),
    ("t1-warmup", "WarmUpLR + StaticBS", 0.7052, 2401),
    ("t1-warmup-speedup", "WarmUpLR + SpeedUpBS", 0.7090, 2186),
    ("t1-warmup-increase", "WarmUpLR + IncreaseBS", 0.7212, 5216),
    ("t1-full", "WarmUpLR + SpeedUpBS + DecayLR", 0.7220, 2183),
)
NETWORK_TAG = "-net"  # R-DL-3's arms also run on dlion-compute-4 under the same names
R1_ARMS = ("dlion", "dlion-nobatch", "dlion-sample")
R2_ARMS = ("dlion", "gaia", "ako", "dlion-nowe", "dlion-noadapt")
R3_ARMS = ("dlion", "gaia", "ako", "dlion-fullge")
R6_ARMS = tuple(f"we6-{w}-{g}" for w in WE_TIMES for g in ("full", "partial"))
R7_ARMS = ("we7-none", "we7-all", "we7-partial", "we7-one-sync", "we7-one-async")
ALL_CLAIMS = tuple(f"R-DL-{i}" for i in range(1, 9))


@dataclass(frozen=True)
class Plan:
    """Everything a reproduction runs."""

    seeds: tuple[int, ...]
    r1_seeds: tuple[int, ...]  # R-DL-1: its effect is near the noise, so more seeds
    local: bool
    dataset: str  # mnist or digits
    model: str
    epochs: int
    b0: int
    lr: float | None  # None: the pilot picks eta from LRS
    pilot_s: float
    claims: tuple[str, ...] = ALL_CLAIMS
    pilot_seed: int = PILOT_SEED
    # R-DL-4 to R-DL-8 (ablations and the extension): fewer seeds, so the default plan fits
    # about two hours on a 2-core machine (None: the same seeds as the headline claims)
    side: tuple[int, ...] | None = None
    # R-DL-1's arms: the default plan adds the sample-weighted one (R-DL-1w)
    r1_arms: tuple[str, ...] = R1_ARMS[:2]

    @property
    def side_seeds(self) -> tuple[int, ...]:
        return self.side if self.side is not None else self.seeds


# the help of --quick and --smoke (and --testbed)
QUICK_HELP = "R-DL-1 alone on digits, one seed (<10 min)"
SMOKE_HELP = "the test suite's path: R-DL-1's two arms, two epochs, local processes (<2 min)"
TESTBED_HELP = "the emulated testbeds (root) or local processes with slowdowns"


def plan_for(args: argparse.Namespace) -> Plan:
    seeds = cli.measured_seeds(args)
    if args.smoke:
        return Plan((1,), (1,), True, "digits", "lenet5", 2, 16, 0.02, 0.5, ("R-DL-1",))
    local = cli.local(args)
    if args.quick:
        # 30 epochs: at 10 the digits runs (110 iterations) were still climbing and one seed's
        # DLion missed a target the pilot had passed
        q = seeds
        return Plan(q, q, local, "digits", "lenet5", QUICK_EPOCHS, 32, QUICK_LR, 4.0, ("R-DL-1",))
    r1 = tuple(range(1, max(5, args.seeds) + 1))
    return Plan(
        seeds, r1, local, "mnist", "cnn2", 10, 32, None, 4.0, side=seeds[:2], r1_arms=R1_ARMS
    )


def recipe(
    p: Plan,
    arm: str,
    bed: Bed,
    data: str | dict[str, Any],
    lr: float,
    t_bs: int | None,
    epochs: int | None = None,
    b0: int | None = None,
) -> str:
    """The recipe of one arm; ``{seed}`` is filled per run."""
    technique, changes = ARMS[arm]
    section: dict[str, Any] = {"pilot_s": p.pilot_s, **bed.sites(), **changes}
    if technique == "dlion" and t_bs is not None and not arm.startswith("knee-"):
        section.setdefault("t_bs", t_bs)
    train = {"family": "gossip", "technique": technique, "epochs": epochs or p.epochs}
    train |= {"batch_size": b0 if b0 is not None else p.b0, "lr": lr, "momentum": 0.9}
    sections = {"gossip": {"sync_epochs": True}, technique: section}
    return recipes.recipe(arm, recipes.table(data), p.model, train, bed.workers(), sections)


def same_bed(beds: dict[str, str], run: str, bed: str) -> None:
    """Record that ``run`` runs on ``bed``; a run name met before on another testbed would
    resume (keep) the other testbed's runs as this one's, so it is refused. A recipe is the
    same text on every emulated testbed (the hosts file differs), hence names must differ."""
    seen = beds.setdefault(run, bed)
    if seen != bed:
        raise EdgetrainError(
            f"run {run!r} is planned on {bed} but already ran on {seen}: its kept results "
            "would stand for the wrong testbed",
            "give the batch a tag (a bug in the reproduction's plan; please report it)",
        )


def pick_lr(finals: dict[float, float | None]) -> float:
    """The learning rate whose pilot ended most accurate (ties: the smaller)."""
    known = {lr: a for lr, a in finals.items() if a is not None}
    if not known:
        raise EdgetrainError("no pilot learning rate finished with an accuracy")
    return min(known, key=lambda lr: (-known[lr], lr))


def targets_from(finals: dict[str, float | None]) -> dict[str, float]:
    """T_high: the lower final of DLion and DLion without batching, minus a point; T_low: the
    lowest final of every pilot arm minus a point (every arm reached it in the pilot)."""
    refuse_diverged(finals, DIVERGED_BELOW, "lower the learning rate (DLion warms up to k x eta)")
    high = [a for arm, a in finals.items() if arm.startswith("dlion") and a is not None]
    every = [a for a in finals.values() if a is not None]
    if not high or not every:
        raise EdgetrainError("the pilot runs ended without an accuracy; no targets to fix")
    t_high = below(min(high), 0.01)
    return {"high": t_high, "low": round(min(min(every) - 0.01, t_high - 0.02), 4)}


def knee(acc: dict[int, float | None], delta: float = KNEE_DELTA) -> int | None:
    """The largest total batch whose accuracy is within ``delta`` of the best one's."""
    known = {t: a for t, a in acc.items() if a is not None}
    if not known:
        return None
    best = max(known.values())
    return max(t for t, a in known.items() if a >= best - delta)
