"""What the DynaComm reproduction runs: the settings the four schedules run in (model,
bandwidth, round trip, batch, trainers), its plan per mode and the recipe of one run. Pure."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgetrain.errors import EdgetrainError
from edgetrain.experiment import cli, recipes

REPO = Path(__file__).resolve().parents[1]
TESTBED = REPO / "recipes" / "testbeds" / "dynacomm-repro.toml"
TESTBED_1 = REPO / "recipes" / "testbeds" / "dynacomm-repro-1.toml"
SCHEDULES = ("sequential", "lbl", "ibatch", "dynacomm")
PAPER_CUTS = {"VGG-19": 41.10, "GoogLeNet": 30.19, "Inception-v4": 33.78, "ResNet-152": 37.06}
BATCHES = (16, 32, 64, 128, 256, 512)
FULL_SEEDS = 3  # the fewest seeds the full plan measures (its default is 5)
MNIST_SAMPLES = 8000  # of the 10,000-image MNIST test set: 80% train, 20% held out


@dataclass(frozen=True)
class Setting:
    """One configuration the four schedules run in."""

    model: str
    bandwidth_mbit: int
    hold_ms: float = 0.0
    batch: int = 64
    trainers: int = 3
    iterations: int = 30
    core: float = 0.45  # every host's CPU share on the setting's testbed (dynacomm-repro-1: 0.9)

    @property
    def key(self) -> str:
        bw, hold = self.bandwidth_mbit, self.hold_ms
        return f"{self.model}-{bw}mbit-h{hold:g}-b{self.batch}-t{self.trainers}"


@dataclass(frozen=True)
class Plan:
    """Everything a reproduction runs: models, bandwidths, round trips, seeds."""

    models: tuple[str, ...]
    bandwidths: tuple[int, ...]
    holds: tuple[float, ...]
    seeds: tuple[int, ...]
    prediction_check: bool  # the 0.9-core testbed
    replan_trace: bool  # R-DC4
    accuracy_check: bool  # R-DC5
    local: bool = False  # smoke: local processes, digits
    # (model, Mbit/s) pairs left out: mobilenet_v2 at 100 Mbit/s is communication-bound at any
    # batch the data allows, and its 105 layers make layer-by-layer runs minutes long
    skip: frozenset[tuple[str, int]] = frozenset()

    @property
    def trace_seeds(self) -> tuple[int, ...]:
        """R-DC4's seeds: the first three measured ones (at least three)."""
        return self.seeds[:3] if len(self.seeds) >= 3 else (1, 2, 3)


# the help of --quick and --smoke (and --testbed)
QUICK_HELP = "one model, one bandwidth, the four schedules (<10 min)"
SMOKE_HELP = "the test suite's path: local processes, digits (<2 min)"


def plan_for(args: argparse.Namespace) -> Plan:
    seeds = cli.measured_seeds(args)
    if args.smoke:
        return Plan(("mlp",), (100,), (0.0,), (1,), False, False, True, local=True)
    if args.quick:
        return Plan(("squeezenet1_1",), (300,), (10.0,), seeds, False, False, False)
    if len(seeds) < FULL_SEEDS:
        raise EdgetrainError(
            f"the full plan measures at least {FULL_SEEDS} seeds, not {len(seeds)}",
            f"pass --seeds {FULL_SEEDS} or more (default 5), or --quick",
        )
    return Plan(
        ("lenet5", "squeezenet1_1", "mobilenet_v2"),
        (100, 300),
        (0.0, 10.0),
        seeds,
        True,
        True,
        True,
        skip=frozenset({("mobilenet_v2", 100)}),
    )


def _samples(trainers: int, batch: int, iterations: int) -> int:
    return min(MNIST_SAMPLES, trainers * batch * (iterations + 2))


def epochs_for(s: Setting, local: bool) -> int:
    """Epochs that give about ``s.iterations`` measured iterations after the first epoch (its
    cold start and first plan are not measured): 8,000 samples hold only a few large batches
    per trainer and epoch, so large batches run several epochs, re-planned at each barrier."""
    if local:
        return 1
    train = int(_samples(s.trainers, s.batch, s.iterations) * (1 - recipes.MNIST_TEST_SPLIT))
    per_epoch = max(1, train // s.trainers // s.batch)
    if per_epoch >= s.iterations + 2:
        return 1
    return 1 + -(-(s.iterations + 2) // per_epoch)


def data(
    local: bool, root: Path | None, trainers: int, batch: int, iterations: int
) -> dict[str, Any]:
    """Digits for local processes, else as many MNIST samples as the iterations need."""
    if local:
        return recipes.data("digits", None)
    return recipes.data("mnist", root) | {"max_samples": _samples(trainers, batch, iterations)}


def recipe(
    s: Setting,
    technique: str,
    data: dict[str, Any],
    epochs: int = 1,
    replan: str = "epoch",
    replan_every: int | None = None,
    heartbeat_s: float = 2.0,
    ps_extra: dict[str, Any] | None = None,
) -> str:
    """A parameter-server recipe; ``{seed}`` is filled per run; ``ps_extra``: more ``[ps]``
    keys (a plan file to start from)."""
    ps: dict[str, Any] = {"hold_ms": s.hold_ms, "replan": replan, **(ps_extra or {})}
    if replan_every:
        ps["replan_every"] = replan_every
    train = {"family": "ps", "technique": technique, "epochs": epochs, "batch_size": s.batch}
    workers: list[dict[str, Any]] = [{"role": "server", "labels": ["ps"]}, {"count": s.trainers}]
    train |= {"lr": 0.01, "momentum": 0.9}
    return recipes.recipe(
        technique, data, s.model, train, workers, {"ps": ps}, heartbeat_s=heartbeat_s
    )
