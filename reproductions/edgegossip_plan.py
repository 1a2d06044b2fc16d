"""What the EdgeGossip reproduction runs: its testbeds (edgegossip-4 and the imbalance
variants), its arms (each a technique and what it changes), its plan per mode and the recipe
of one arm. Pure but for reading the committed testbed spec."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from edgetrain.experiment import cli, recipes
from edgetrain.experiment.beds import Bed, BedSpec, hosts_of, spec_doc
from edgetrain.experiment.pilot import PILOT_SEED

REPO = Path(__file__).resolve().parents[1]
TESTBED = REPO / "recipes" / "testbeds" / "edgegossip-4.toml"
HOSTS = ("gpu-a", "gpu-b", "cpu-a", "cpu-b")
SHARES = (0.76, 0.57, 0.38, 0.19)
IMBALANCE = {
    1: (0.45, 0.45, 0.45, 0.45),
    3: (0.70, 0.70, 0.233, 0.233),
    5: (0.75, 0.75, 0.15, 0.15),
}
# R-EG-6's scale: 2, 3 and 6 platforms beside edgegossip-4's 4, the fastest 4x the slowest
# (gossip.md R-EG-6; 6 hosts: its 0.5/0.4/0.3/0.3/0.2/0.125 cores), LeNet-5 on each
SCALE = {
    2: (0.76, 0.19),
    3: (0.76, 0.38, 0.19),
    6: (0.5, 0.4, 0.3, 0.3, 0.2, 0.125),
}
R_EG_6 = ("gosgd-sync", "edgegossip")  # the heavier model on edgegossip-4, and every scale
T_A = 0.95
LEVELS = tuple(round(i / 12, 4) for i in range(13))
PAPER = {"speedup": 2.70, "loss_pp": 0.78, "mape": 4.30, "share": 3.0}
SPEEDUP_BOUND = 4.0  # gossip.md 0.3: 4:3:2:1 speeds, at most 4x per epoch

# Every arm: its technique and what it changes in the recipe.
ARMS: dict[str, dict[str, Any]] = {
    "gosgd-sync": {"technique": "gosgd"},
    "edgegossip": {"technique": "edgegossip"},
    "gosgd-async": {"technique": "gosgd", "sync": False},
    "eg-random": {"technique": "edgegossip", "eg": {"order": "random"}},
    "eg-oracle": {"technique": "edgegossip", "eg": {"order": "oracle"}},
    "eg-ranked": {"technique": "edgegossip", "eg": {"order": "aggregated"}},
    "eg-literal": {"technique": "edgegossip", "eg": {"select": "global", "order": "aggregated"}},
    "eg-ratio5": {"technique": "edgegossip", "eg": {"ratio": 5}},
    "eg-ratio20": {"technique": "edgegossip", "eg": {"ratio": 20}},
    "eg-predictive": {"technique": "edgegossip", "eg": {"balance": "predictive"}},
    "eg-reactive": {"technique": "edgegossip", "eg": {"balance": "reactive"}},
    "eg-static": {"technique": "edgegossip", "eg": {"balance": "static"}},
}
R_EG_1 = (
    "gosgd-sync",
    "edgegossip",
    "gosgd-async",
    "eg-random",
    "eg-oracle",
    "eg-ranked",
    "eg-literal",
)
BALANCES = ("eg-predictive", "eg-reactive", "eg-static")  # R-EG-7
PILOT_ARMS = ("gosgd-sync", "edgegossip")  # T_b: below the lower of their curves
REGIME_MODELS = ("lenet5", "cnn2")  # R-EG-6's pair: LeNet-5 and the heavier model
R_EG_8 = ("gosgd-sync", "edgegossip", "eg-random")  # on non-IID shards (tagged -niid)
NONIID = {"partition": "dirichlet", "alpha": 0.5}  # R-EG-8's shards: Dirichlet(0.5) per class


@dataclass(frozen=True)
class Plan:
    """Everything a reproduction runs."""

    seeds: tuple[int, ...]
    local: bool
    dataset: str  # mnist or digits
    model: str
    epochs: int  # R-EG-1 and R-EG-3
    side_epochs: int  # R-EG-2 and R-EG-7
    arms: tuple[str, ...] = R_EG_1
    imbalance: bool = True
    ratios: bool = True
    aggregation: bool = True
    predictor: bool = True
    contention: bool = True
    pilot_seed: int = PILOT_SEED
    regime_models: tuple[str, ...] = REGIME_MODELS  # the regime map's models (the plan's first)
    noniid: bool = True  # R-EG-8: GoSGD, EdgeGossip and a random kept share on non-IID shards
    heavy: bool = True  # R-EG-6: the heavier model on edgegossip-4 (time per epoch)
    scale: bool = True  # R-EG-6: LeNet-5 at 2, 3 and 6 platforms (time per epoch)
    heavy_epochs: int = 5  # R-EG-6's heavier model: cnn2 takes about 9 s a GoSGD epoch
    scale_epochs: int = 8  # R-EG-6's scale runs (LeNet-5)


# the help of --quick and --smoke (and --testbed)
QUICK_HELP = "R-EG-1 alone on digits, one seed (<10 min)"
SMOKE_HELP = "the test suite's path: two arms, two epochs, local processes (<2 min)"
TESTBED_HELP = "the emulated testbed (root) or local processes with slowdowns"


def plan_for(args: argparse.Namespace) -> Plan:
    seeds = cli.measured_seeds(args)
    off = (False,) * 5  # no imbalance, ratios, aggregation, predictor or contention
    if args.smoke:
        smoke = Plan((1,), True, "digits", "mlp", 2, 2, ("gosgd-sync", "edgegossip"), *off)
        return replace(smoke, regime_models=(), noniid=False, heavy=False, scale=False)
    local = cli.local(args)
    if args.quick:
        quick = Plan(seeds, local, "digits", "lenet5", 20, 20, R_EG_1, *off, noniid=False)
        return replace(quick, heavy=False, scale=False)
    return Plan(seeds, local, "mnist", "lenet5", 40, 20, contention=not local)


def bed_spec(name: str, shares: tuple[float, ...]) -> BedSpec:
    """edgegossip-4 as ``name`` with its hosts' CPU shares set to ``shares``; another number
    of shares than its 4 hosts (R-EG-6's scale) gives hosts ``p1``, ``p2``, ... on its LAN."""
    doc = spec_doc(TESTBED) | {"name": name}
    if len(shares) != len(HOSTS):
        site = doc["sites"][0]
        site["hosts"] = [{"name": f"p{i + 1}", "cpu": 0.0} for i in range(len(shares))]
        doc["description"] = f"EdgeGossip at {len(shares)} platforms (R-EG-6) on one LAN"
    for host, share in zip(hosts_of(doc), shares, strict=True):
        host["cpu"] = share
    return BedSpec(name, shares, spec=doc)


def scale_bed(platforms: int) -> str:
    """The testbed R-EG-6 runs at ``platforms`` platforms (4: edgegossip-4 itself)."""
    return "edgegossip-4" if platforms == len(HOSTS) else f"eg-scale{platforms}"


def scale_beds(p: Plan) -> list[tuple[str, tuple[float, ...]]]:
    """R-EG-6's scale testbeds (none unless the plan runs them)."""
    return [(scale_bed(n), shares) for n, shares in SCALE.items()] if p.scale else []


def heavy_model(p: Plan) -> str | None:
    """R-EG-6's heavier model: the map's model other than the plan's (None: the plan has none,
    or does not run it)."""
    return next((m for m in p.regime_models if m != p.model), None) if p.heavy else None


def batch_of(p: Plan) -> int:
    """The batch every arm trains with."""
    return 64 if p.dataset == "mnist" else 32


def models_of(p: Plan) -> list[str]:
    """The regime map's models: the plan's, then R-EG-6's other."""
    return [p.model, *(m for m in p.regime_models if m != p.model)]


def recipe(
    p: Plan, arm: str, bed: Bed, epochs: int, data: str | dict[str, Any], history: str | None
) -> str:
    """The recipe of one arm; ``{seed}`` is filled per run."""
    spec = ARMS[arm]
    eg = dict(spec.get("eg", {}))
    if history is not None:
        eg.setdefault("history", history)
    sections: dict[str, dict[str, Any]] = {
        "gossip": {"probability": 0.25, "sync_epochs": spec.get("sync", True)}
    }
    if spec["technique"] == "edgegossip":
        sections["edgegossip"] = eg
    mnist = p.dataset == "mnist"
    train = {"family": "gossip", "technique": spec["technique"], "epochs": epochs}
    train |= {"batch_size": batch_of(p), "lr": 0.01 if mnist else 0.05, "momentum": 0.9}
    # epoch-end snapshots scored after training: a quota'd host spends no CPU evaluating while
    # the clock runs (docs/launch.md, "Training time")
    train["eval_deferred"] = True
    return recipes.recipe(arm, recipes.table(data), p.model, train, bed.workers(), sections)
