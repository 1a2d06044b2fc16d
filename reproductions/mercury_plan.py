"""What a Mercury reproduction runs: its arms, its plan per mode and the recipe of one run.
Pure (no files, no processes): the plan and the recipes are tested against literal text.

Every arm differs from the baseline (``multips-sgd``: uniform sampling on the same
multi-server layout, sequential pipeline) only in the technique and its ``[mercury]`` keys:
same seed, data, testbed, model, batch and learning rate (shared/specs/ps.md §3.2, §4 item 26).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from edgetrain.errors import EdgetrainError
from edgetrain.experiment import cli, recipes
from edgetrain.experiment.pilot import PILOT_SEED

# Each arm: its technique and the [mercury] keys it sets.
ARMS: dict[str, tuple[str, dict[str, Any]]] = {
    "uniform": ("multips-sgd", {}),  # standard distributed SGD (the paper's 1x)
    "mercury": ("mercury", {}),  # group-wise IS + aware resharding (bandwidth budget) + BACC
    "groupwise": ("mercury", {"resharding": "none"}),  # R-M2: group-wise IS alone
    "all-is": ("mercury", {"sampling": "all", "resharding": "none"}),  # R-M2: All-IS
    "sequential": ("mercury", {"scheduler": "sequential"}),  # R-M4: the sequential pipeline
    "bw-agnostic": ("mercury", {"scheduler": "agnostic"}),  # R-M5: fixed G, fixed slot
    "rs-none": ("mercury", {"resharding": "none"}),  # R-M3
    "rs-agnostic": ("mercury", {"resharding": "agnostic"}),  # N_p at random
    "rs-random": ("mercury", {"resharding": "random", "reshard_budget": 0.5}),  # our control
    "rs-aware": ("mercury", {"resharding": "aware", "reshard_budget": 0.5}),  # N_o = N_p / 2
    "fed-uniform": ("multips-sgd", {"federated": True}),  # R-M6, Non-IS
    "fed-mercury": ("mercury", {"federated": True, "scheduler": "sequential"}),  # R-M6
    "premises": ("multips-sgd", {}),  # R-M7: uniform training, probed (premise_probe)
}
R_M3 = ("rs-none", "rs-agnostic", "rs-random", "rs-aware")
SPEC_TARGETS = (0.98, 0.97)  # LeNet-5 on MNIST-8k, fixed before any run (ps.md §4 item 25)
# the primary target where every pilot shows it reachable: cnn2 reaches further than LeNet-5,
# and Mercury's gain grows with the target (issue 28: 98.5%)
TARGET_CAPS = {"lenet5": 0.98, "cnn2": 0.985}
FULL_SEEDS = 3  # the fewest seeds the full plan measures; the headline takes every seed
PROBES = (20, 100, 300)  # R-M7: iterations at which device 0 scores a fixed subset


@dataclass(frozen=True)
class Plan:
    """Everything one reproduction runs."""

    seeds: tuple[int, ...]
    local: bool  # local processes (no emulated testbed, no link limits)
    dataset: str  # mnist or digits
    model: str
    bandwidths: tuple[int, ...]  # R-M1, Mbit/s; the first also carries every other experiment
    budget: int  # iterations a run may take at most (the fixed budget of R-M3 and the pilot)
    every: int  # iterations per evaluation (one "epoch" of the run)
    lrs: tuple[float, ...]  # the pilot picks one of these on the uniform baseline
    experiments: frozenset[str]  # which of R-M2 .. R-M7 run
    alphas: tuple[float, ...] = (10.0, 1.0, 0.5)  # R-M6
    batch: int = 32
    devices: int = 4
    pilot_seed: int = PILOT_SEED
    # the headline: R-M1 of this model at these bandwidths over ``headline_seeds`` (the
    # issue's regime: cnn2 at 10 and 50 Mbit/s, 5 seeds), beside the model's cells above
    headline_model: str | None = None
    headline_bandwidths: tuple[int, ...] = ()
    headline_seeds: tuple[int, ...] = ()
    headline_budget: int = 0  # iterations a headline run may take at most
    pilot_arms: tuple[str, ...] = ("uniform",)  # the pilots whose curves fix the targets

    @property
    def home(self) -> int:
        """The bandwidth the pilot and the experiments beyond R-M1 run at."""
        return self.bandwidths[0]

    @property
    def cells(self) -> tuple[Cell, ...]:
        """R-M1's cells: the model at every bandwidth (keyed by the bandwidth), then the
        headline model at its bandwidths (keyed ``model-bandwidth``)."""
        own = tuple(Cell(str(bw), self.model, bw, self.seeds) for bw in self.bandwidths)
        if self.headline_model is None:
            return own
        seeds = self.headline_seeds or self.seeds
        return own + tuple(
            Cell(f"{self.headline_model}-{bw}", self.headline_model, bw, seeds)
            for bw in self.headline_bandwidths
        )

    def for_model(self, model: str) -> Plan:
        """This plan as the runs of ``model`` see it (the headline's budget and seeds)."""
        if model == self.model:
            return self
        return replace(
            self,
            model=model,
            budget=self.headline_budget or self.budget,
            seeds=self.headline_seeds or self.seeds,
        )

    @property
    def epochs(self) -> int:
        return max(1, math.ceil(self.budget / self.every))


@dataclass(frozen=True)
class Cell:
    """One cell of R-M1: a model at a bandwidth, over its seeds."""

    key: str
    model: str
    bandwidth: int
    seeds: tuple[int, ...]


ALL = frozenset({"R-M2", "R-M3", "R-M4", "R-M5", "R-M6", "R-M7"})


# the help of --quick and --smoke (and --testbed)
QUICK_HELP = "R-M1 alone at 100 Mbit/s on digits, one seed (<10 min)"
SMOKE_HELP = "the test suite's path: R-M1 on local processes, digits, a tiny budget (<2 min)"
TESTBED_HELP = "the emulated testbed mercury-4u (root) or local processes without link limits"
BANDWIDTHS_HELP = (
    "with --quick: R-M1 at these rates, Mbit/s, comma-separated (the pilot at the first; "
    "default 100), e.g. --quick --bandwidths 200,10"
)
MAX_MBIT = 10_000  # an access link's rate the emulated testbed's tbf is asked for, at most


def bandwidths_of(args: argparse.Namespace) -> tuple[int, ...]:
    """``--bandwidths`` (with ``--quick`` on the emulated testbed): distinct whole Mbit/s, 1 ..
    10,000, in the order given; (100,) without it. Pure."""
    text = getattr(args, "bandwidths", None)
    if text is None:
        return (100,)
    if not args.quick or args.smoke or cli.local(args):
        raise EdgetrainError(
            "--bandwidths is for --quick on the emulated testbed (the full plan runs 100, 10, "
            "50 and 200 Mbit/s; local processes have no link limits)",
            "drop --bandwidths, or add --quick and leave --testbed at emulated",
        )
    got: list[int] = []
    for part in str(text).split(","):
        word = part.strip()
        if not word.isdigit() or not 1 <= int(word) <= MAX_MBIT:
            raise EdgetrainError(
                f"--bandwidths: {word or 'an empty entry'!r} is not a rate in Mbit/s",
                f"give whole numbers from 1 to {MAX_MBIT:,}, comma-separated: --bandwidths 200,10",
            )
        if int(word) in got:
            raise EdgetrainError(f"--bandwidths names {word} Mbit/s twice", "give each rate once")
        got.append(int(word))
    return tuple(got)


def plan_for(args: argparse.Namespace) -> Plan:
    """The plan of a mode: ``--smoke`` (the test suite), ``--quick`` (R-M1 at ``--bandwidths`` on
    digits, < 10 min) or the default (about two hours on this 2-core machine)."""
    seeds = cli.measured_seeds(args)
    local = cli.local(args)
    rates = bandwidths_of(args)  # refuses --bandwidths outside --quick on the testbed
    if args.smoke:
        return Plan((1,), True, "digits", "lenet5", (100,), 40, 10, (0.001,), frozenset())
    if args.quick:
        return Plan(seeds, local, "digits", "lenet5", rates, 600, 10, (0.001,), frozenset())
    if len(seeds) < FULL_SEEDS:
        raise EdgetrainError(
            f"the full plan measures at least {FULL_SEEDS} seeds, not {len(seeds)}",
            f"pass --seeds {FULL_SEEDS} or more (default 5), or --quick",
        )
    bandwidths = (100,) if local else (100, 10, 50, 200)
    experiments = ALL - {"R-M5"} if local else ALL
    return Plan(
        seeds[:FULL_SEEDS],
        local,
        "mnist",
        "lenet5",
        bandwidths,
        1200,
        20,
        (0.001, 0.004),
        experiments,
        headline_model="cnn2",
        headline_bandwidths=(50,) if local else (10, 50),
        headline_seeds=seeds,
        headline_budget=1600,
        pilot_arms=("uniform", "mercury"),
    )


def plateau(curve: Sequence[Sequence[float]], budget: int) -> float | None:
    """A pilot's plateau: its best accuracy over the second half of the budget (its last point
    when it has none there); ``curve`` is [iterations, accuracy] pairs. Pure."""
    if not curve:
        return None
    tail = [float(a) for it, a in curve if it >= budget / 2]
    return max(tail) if tail else float(curve[-1][1])


def targets_of(
    curves: Mapping[str, Sequence[Sequence[float]]],
    budget: int,
    cap: float = SPEC_TARGETS[0],
    margin: float = 0.005,
) -> dict[str, Any]:
    """The targets, fixed by the pilots before any measured run: the primary is ``cap`` (98.5%
    for cnn2, the specification's 98% for LeNet-5) where every pilot's plateau shows it
    reachable with ``margin`` to spare, else the lowest pilot plateau less ``margin`` (0.5
    points; digits, whose 360 test images make one seed's accuracy noisy, 1.5): on the rising
    curve of every pilot, so that no single lucky pilot puts it where the other arm levels off.
    The secondary is a point lower (at most the specification's 97%). Never tuned afterwards.
    Pure."""
    plateaus = {arm: plateau(c, budget) for arm, c in curves.items()}
    seen = [v for v in plateaus.values() if v is not None]
    primary = cap
    if seen:
        primary = min(cap, math.floor((min(seen) - margin) * 1000 + 1e-6) / 1000)
    secondary = min(SPEC_TARGETS[1] if cap <= SPEC_TARGETS[0] else cap - 0.01, primary - 0.01)
    return {
        "primary": round(primary, 3),
        "secondary": round(secondary, 3),
        "cap": cap,
        "at_cap": primary >= cap,
        "plateaus": plateaus,
        "margin": margin,
    }


def data_table(p: Plan, root: str | None, alpha: float | None = None) -> dict[str, Any]:
    """The ``[data]`` table: IID, or a Dirichlet(alpha) start."""
    table = recipes.data(p.dataset, root)
    if alpha is not None:
        table |= {"partition": "dirichlet", "alpha": alpha}
    return table


def recipe(
    p: Plan,
    arm: str,
    data: dict[str, Any],
    lr: float,
    stop: float | None,
    extra: Mapping[str, Any] | None = None,
) -> str:
    """The recipe of one arm; ``{seed}`` is filled per run. ``stop``: end at that accuracy
    (time-to-target runs); None: the whole budget (fixed-budget runs)."""
    technique, keys = ARMS[arm]
    mercury = {"epoch_iterations": p.every, **keys, **(extra or {})}
    if stop is not None:
        mercury["stop_accuracy"] = stop
    train = {"family": "ps", "technique": technique, "epochs": p.epochs, "batch_size": p.batch}
    workers = [{"count": p.devices}]  # one device a host, or local processes
    train["lr"] = lr
    return recipes.recipe(arm, data, p.model, train, workers, {"mercury": mercury}, heartbeat_s=5.0)


def plan_dict(p: Plan) -> dict[str, Any]:
    """The plan as the report's JSON keeps it."""
    d = asdict(p)
    d["experiments"] = sorted(p.experiments)
    d["cells"] = [asdict(c) for c in p.cells]
    return d
