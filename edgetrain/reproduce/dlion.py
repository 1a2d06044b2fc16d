"""Reproduce DLion (Hong & Chandra, HotCloud'19) on the emulated testbed: capacity-aware batching,
DLion against Gaia and Ako under compute and network heterogeneity, the LR/BS combinations,
the batch threshold, weight exchange, and selective propagation as a marked extension.

``scripts/reproduce-dlion [--quick] [--seeds N] [--out DIR] [--format json]``

What runs (shared/specs/gossip.md D.2), cnn2 on the MNIST test set (8,000 train / 2,000 test,
2,000 a worker), SGD momentum 0.9, b0 = 32, the same seeds, data and learning rate in every arm:

- A pilot (seed 0, reported, never reused as a measured seed) on ``dlion-compute-4`` first picks
  eta from {0.01, 0.02, 0.05} for the uniform baseline (Ako), then fixes the targets: T_high =
  the lower final accuracy of DLion and DLion without batching - 1 point, T_low = the lowest of
  DLion, Gaia and Ako - 1 point; pilots on ``dlion-network-4`` and the 4-site testbed fix the
  time budgets (0.6 x the pilot DLion's training time: still improving there).
- R-DL-5 (first: it sets T_bs = min(10% of N, the 1-epoch knee) for every later DLion run):
  uniform batches of total 64 ... 2048, 10 epochs, accuracy after 1 and after 10 epochs.
- R-DL-1 (5 seeds at least): DLion against DLion without batching, time to T_high, with each
  worker's idle fraction; a cut above the ideal bound (1 - k C_min / sum C = 33% at 3:1) is
  flagged as a measuring error. R-DL-1i: the same runs' cut in time per iteration. R-DL-1w:
  DLion with sample-weighted gradients (gossip.md A-35) as a third arm, against the same
  baseline (ours: Eq. 5 weighs a worker's mean gradient by 1/k whatever its batch).
- R-DL-2: DLion, Gaia (every worker its own site) and Ako (p from the LAN) to T_low, with DLion
  without weight exchange and without adaptive LR/BS as attribution arms.
- R-DL-4: Table 1's six LR/BS combinations, 10 epochs: final accuracy and training time.
- R-DL-3 on ``dlion-network-4``: DLion, Gaia (a parameter server per site) and Ako (p from the
  WAN) at the fixed budget, LAN and WAN bytes; DLion with full gradient exchange for the WAN
  bytes per iteration of partial against dense exchange.
- R-DL-6 (network testbed): WE none/periodic/early/late x full/partial GE, time to T_low.
- R-DL-7 (network testbed): partial GE with periodic WE: none, full to all, partial, best to
  worst synchronous and asynchronous, accuracy at the budget.
- R-DL-8, an extension (the paper never evaluated it): four single-worker sites (CPU
  0.7/0.5/0.4/0.3, 100 Mbit/s WAN between all), all-to-all against selective propagation.

Every arm is interleaved seed by seed (A, B, A, B) on one testbed brought up and verified
(``emulate up --verify``, its table in the report) before its batch. ``--quick``: R-DL-1 alone
on digits (LeNet-5, 30 epochs), one seed. ``--smoke`` (the test suite): R-DL-1's two arms for
two epochs on digits, local processes. ``--testbed local`` runs on local processes with
slowdowns in the testbeds' ratios (no link limits; sites from the recipe). Resumable: a
completed run is kept.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgetrain.errors import EdgetrainError
from edgetrain.reproduce import cli, report
from edgetrain.reproduce.report import finite_median as _median
from edgetrain.reproduce.runs import Arm, data_section, interleave, run_arm, time_to
from edgetrain.reproduce.testbed import Testbed, testbed, verify_markdown

REPO = Path(__file__).resolve().parents[2]
TESTBEDS = REPO / "recipes" / "testbeds"
Say = Callable[[str], None]
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


@dataclass(frozen=True)
class BedSpec:
    """One testbed of the plan: its spec and, for local processes, its shares and sites."""

    name: str
    shares: tuple[float, ...]
    sites: tuple[str, ...]
    spec_text: str | None = None  # generated here (R-DL-8); else recipes/testbeds/<name>.toml


SITES_SPEC = """# R-DL-8 (an extension): four single-worker sites joined by a 100 Mbit/s WAN.
name = "dlion-sites-4"
description = "DLion R-DL-8: four one-host sites, CPU 0.7/0.5/0.4/0.3, 100 Mbit/s WAN"
wan = "100mbit"
""" + "".join(
    f'\n[[sites]]\nname = "s{i}"\nlan = "1gbit"\n\n[[sites.hosts]]\nname = "h{i}"\ncpu = {c}\n'
    for i, c in enumerate((0.7, 0.5, 0.4, 0.3), start=1)
)

BEDS = {
    "compute": BedSpec("dlion-compute-4", (0.9, 0.3, 0.3, 0.3), ("lan",) * 4),
    "network": BedSpec("dlion-network-4", (0.45,) * 4, ("cloud-a",) * 3 + ("cloud-b",)),
    "sites": BedSpec("dlion-sites-4", (0.7, 0.5, 0.4, 0.3), ("s1", "s2", "s3", "s4"), SITES_SPEC),
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
for _when in ("none", "periodic", "early", "late"):
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
WE_TIMES = ("none", "periodic", "early", "late")
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
    pilot_seed: int = 0
    # R-DL-4 to R-DL-8 (ablations and the extension): fewer seeds, so the default plan fits
    # about two hours on a 2-core machine (None: the same seeds as the headline claims)
    side: tuple[int, ...] | None = None
    # R-DL-1's arms: the default plan adds the sample-weighted one (R-DL-1w)
    r1_arms: tuple[str, ...] = R1_ARMS[:2]

    @property
    def side_seeds(self) -> tuple[int, ...]:
        return self.side if self.side is not None else self.seeds


def plan_for(args: argparse.Namespace) -> Plan:
    if args.seeds < 1:
        raise EdgetrainError("--seeds must be at least 1")
    seeds = tuple(range(1, args.seeds + 1))
    if args.smoke:
        return Plan((1,), (1,), True, "digits", "lenet5", 2, 16, 0.02, 0.5, ("R-DL-1",))
    local = args.testbed == "local"
    if args.quick:
        q = cli.quick_seeds(args, seeds)
        # 30 epochs: at 10 the digits runs (110 iterations) were still climbing and one seed's
        # DLion missed a target the pilot had passed
        return Plan(q, q, local, "digits", "lenet5", QUICK_EPOCHS, 32, QUICK_LR, 4.0, ("R-DL-1",))
    r1 = tuple(range(1, max(5, args.seeds) + 1))
    return Plan(
        seeds, r1, local, "mnist", "cnn2", 10, 32, None, 4.0, side=seeds[:2], r1_arms=R1_ARMS
    )


# ------------------------------------------------------------------ testbeds and recipes


@dataclass(frozen=True)
class Bed:
    """Where a batch of runs goes: an emulated testbed's hosts file, or local slowdowns."""

    spec: BedSpec
    hosts: Path | None = None
    tb: Testbed | None = None

    def workers(self) -> str:
        if self.hosts is not None:
            return f"[[workers]]\ncount = {len(self.spec.shares)}\n"
        fastest = max(self.spec.shares)
        return "".join(
            f'[[workers]]\nhost = "localhost"\nslowdown = {fastest / s:.4f}\n'
            for s in self.spec.shares
        )

    def section_lines(self) -> dict[str, Any]:
        """Local processes have no hosts file: the sites come from the recipe."""
        if self.hosts is None and len(set(self.spec.sites)) > 1:
            return {"sites": list(self.spec.sites)}
        return {}


@contextmanager
def _bed(p: Plan, key: str, out: Path, say: Say) -> Iterator[Bed]:
    spec = BEDS[key]
    if p.local:
        yield Bed(spec)
        return
    path = TESTBEDS / f"{spec.name}.toml"
    if spec.spec_text is not None:
        path = out / "testbeds" / f"{spec.name}.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(spec.spec_text)
    say(f"bringing up and verifying testbed {spec.name}")
    with testbed(path, spec.name) as tb:
        yield Bed(spec, tb.hosts_file, tb)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, list)):
        return json.dumps(value)
    return str(value)


def recipe(
    p: Plan,
    arm: str,
    bed: Bed,
    data: str,
    lr: float,
    t_bs: int | None,
    epochs: int | None = None,
    b0: int | None = None,
) -> str:
    """The recipe of one arm; ``{seed}`` is filled per run."""
    technique, changes = ARMS[arm]
    section: dict[str, Any] = {"pilot_s": p.pilot_s, **bed.section_lines(), **changes}
    if technique == "dlion" and t_bs is not None and not arm.startswith("knee-"):
        section.setdefault("t_bs", t_bs)
    lines = "".join(f"{k} = {_toml(v)}\n" for k, v in section.items())
    batch = b0 if b0 is not None else p.b0
    return f"""[run]
name = "{arm}"
seed = {{seed}}
checkpoint_every = 0
heartbeat_s = 2.0
[data]
{data}[model]
name = "{p.model}"
[train]
family = "gossip"
technique = "{technique}"
epochs = {epochs or p.epochs}
batch_size = {batch}
lr = {lr}
momentum = 0.9
[gossip]
sync_epochs = true
[{technique}]
{lines}{bed.workers()}"""


# ------------------------------------------------------------------ reading runs


def accuracy_at(summary: dict[str, Any], budget: float | None) -> float | None:
    """The accuracy of the last epoch that ended within ``budget`` training seconds."""
    if budget is None:
        return None
    got = None
    for point in summary.get("curve", []):
        if point.get("train_s", math.inf) <= budget and point.get("test_accuracy") is not None:
            got = float(point["test_accuracy"])
    return got


def measure(
    summary: dict[str, Any],
    arm: str,
    seed: int,
    targets: dict[str, float],
    budget: float | None = None,
) -> dict[str, Any]:
    """One run's figures."""
    own = (summary.get("technique_report") or {}).get("exchange") or {}
    workers: dict[str, dict[str, Any]] = own.get("workers") or {}
    plan = own.get("plan") or {}
    curve = summary.get("curve", [])
    last = next((p["test_accuracy"] for p in reversed(curve) if p.get("test_accuracy")), None)
    iterations = max((int(w.get("iterations") or 0) for w in workers.values()), default=0)
    train_s = summary.get("train_s")
    lan = sum(int(w.get("bytes_lan") or 0) for w in workers.values())
    wan = sum(int(w.get("bytes_wan") or 0) for w in workers.values())
    samples = int(plan.get("n_train") or 0) * len(curve)  # a global epoch: N samples
    out: dict[str, Any] = {
        "arm": arm,
        "seed": seed,
        "run": summary.get("run"),
        "status": summary.get("status"),
        "train_s": train_s,
        "final_accuracy": last,
        "averaged_accuracy": summary.get("averaged_test_accuracy"),
        "first_epoch_accuracy": curve[0].get("test_accuracy") if curve else None,
        "iterations": iterations,
        "iteration_s": train_s / iterations if train_s and iterations else None,
        "samples_per_s": samples / train_s if train_s else None,
        "bytes_lan": lan,
        "bytes_wan": wan,
        "wan_per_iteration": wan / iterations if iterations else None,
        "idle": {w: v.get("idle_fraction") for w, v in workers.items()},
        "batches": {w: v.get("batch_first") for w, v in workers.items()},
        "t_unit": plan.get("t_unit"),
        "spread": plan.get("spread"),
        "t_bs": plan.get("t_bs"),
        "site_sender": {w: v.get("site_sender") for w, v in workers.items()},
        "site_receiver": {w: v.get("site_receiver") for w, v in workers.items()},
        "accuracy_at_budget": accuracy_at(summary, budget),
        "budget_s": budget,
        "curve": [[pt.get("train_s"), pt.get("test_accuracy")] for pt in curve],
    }
    for name, target in targets.items():
        out[f"time_to_{name}"] = time_to(summary, target)
    return out


# ------------------------------------------------------------------ batches of runs


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


@dataclass
class Runner:
    """Runs arms into ``out`` and keeps their figures."""

    p: Plan
    out: Path
    data: str
    say: Say
    lr: float = 0.02
    t_bs: int | None = None
    targets: dict[str, float] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    beds: dict[str, str] = field(default_factory=dict)  # run name -> the testbed it ran on

    def arm(self, name: str, bed: Bed, tag: str = "", **kw: Any) -> Arm:
        text = recipe(self.p, name, bed, self.data, self.lr, self.t_bs, **kw)
        run = f"{name}{tag}"
        same_bed(self.beds, run, bed.spec.name)
        return Arm(run, text)

    def summary(self, arm: Arm, seed: int, bed: Bed) -> dict[str, Any]:
        return run_arm(self.out, arm, seed, bed.hosts, timeout_s=3600, say=self.say)

    def batch(
        self,
        names: Sequence[str],
        bed: Bed,
        group: str,
        seeds: Sequence[int],
        budget: float | None = None,
        tag: str = "",
        **kw: Any,
    ) -> list[dict[str, Any]]:
        """Every arm at every seed, interleaved seed by seed (A, B, A, B)."""
        base = {f"{n}{tag}": n for n in names}
        rows = []
        for arm, seed in interleave([self.arm(n, bed, tag, **kw) for n in names], seeds):
            summary = self.summary(arm, seed, bed)
            row = {**measure(summary, base[arm.name], seed, self.targets, budget), "group": group}
            self.rows.append(row)
            rows.append(row)
        return rows


# ------------------------------------------------------------------ pilots


def pick_lr(finals: dict[float, float | None]) -> float:
    """The learning rate whose pilot ended most accurate (ties: the smaller)."""
    known = {lr: a for lr, a in finals.items() if a is not None}
    if not known:
        raise EdgetrainError("no pilot learning rate finished with an accuracy")
    return min(known, key=lambda lr: (-known[lr], lr))


def targets_from(finals: dict[str, float | None]) -> dict[str, float]:
    """T_high: the lower final of DLion and DLion without batching, minus a point; T_low: the
    lowest final of every pilot arm minus a point (every arm reached it in the pilot)."""
    for arm, a in finals.items():
        if a is not None and a < DIVERGED_BELOW:
            raise EdgetrainError(
                f"the pilot's {arm} ended at accuracy {a:.3f}, near chance (10 classes): it "
                "diverged, and a target fixed from it would mean nothing; lower the learning "
                "rate (DLion warms up to k x eta)"
            )
    high = [a for arm, a in finals.items() if arm.startswith("dlion") and a is not None]
    every = [a for a in finals.values() if a is not None]
    if not high or not every:
        raise EdgetrainError("the pilot runs ended without an accuracy; no targets to fix")
    t_high = round(min(high) - 0.01, 4)
    t_low = round(min(min(every) - 0.01, t_high - 0.02), 4)
    return {"high": t_high, "low": t_low}


def knee(acc: dict[int, float | None], delta: float = KNEE_DELTA) -> int | None:
    """The largest total batch whose accuracy is within ``delta`` of the best one's."""
    known = {t: a for t, a in acc.items() if a is not None}
    if not known:
        return None
    best = max(known.values())
    return max(t for t, a in known.items() if a >= best - delta)


# ------------------------------------------------------------------ claims


def _by(rows: Sequence[dict[str, Any]], arm: str) -> dict[int, dict[str, Any]]:
    return {r["seed"]: r for r in rows if r["arm"] == arm}


def _all(values: Sequence[float | None], test: Callable[[float], bool]) -> bool | None:
    """Whether every seed's value passes ``test`` (a seed without one fails it); None when no
    seed has a value (not measured)."""
    if not any(v is not None for v in values):
        return None
    return all(v is not None and test(v) for v in values)


def _ratio(a: Any, b: Any) -> float | None:
    ok = isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0
    return float(a) / float(b) if ok else None


def cut(mine: Any, base: Any) -> float | None:
    """100 (1 - mine / base): how much less time ``mine`` took, in percent."""
    ok = isinstance(mine, (int, float)) and isinstance(base, (int, float)) and base > 0
    return 100.0 * (1.0 - float(mine) / float(base)) if ok else None


def cuts(rows: Sequence[dict[str, Any]], arm: str, base: str, key: str) -> list[float | None]:
    a, b = _by(rows, arm), _by(rows, base)
    return [cut(a[s].get(key), b[s].get(key)) for s in sorted(a) if s in b]


def ideal_cut(shares: Sequence[float]) -> float:
    """The bound on capacity-aware batching's cut at equal total batch (gossip.md 0.3):
    1 - k C_min / sum C, in percent."""
    return 100.0 * (1.0 - len(shares) * min(shares) / sum(shares))


def _setting(p: Plan) -> str:
    data = (
        "digits (1,437 train / 360 test), LeNet-5"
        if p.dataset == "digits"
        else "cnn2 on the MNIST test set (8,000 train / 2,000 test)"
    )
    where = "local processes with slowdowns in the testbed's ratios" if p.local else "emulated"
    return f"{data}; {where}; the paper: CIFAR-10, a 17 MB 2conv+2fc model, 4 servers"


def claims_r1(rows: list[dict[str, Any]], p: Plan) -> list[report.Claim]:
    """R-DL-1, the same runs' cut in time per iteration (what batching balances, apart from
    the accuracy a differently weighted gradient reaches), and R-DL-1w when the sample-weighted
    arm ran."""
    out = [claim_r1(rows, p)]
    bound = ideal_cut(BEDS["compute"].shares)
    per_it = cuts(rows, "dlion", "dlion-nobatch", "iteration_s")
    out.append(
        report.Claim(
            "R-DL-1i",
            "capacity-aware batching: cut in time per iteration (the same runs as R-DL-1)",
            None,
            report.Stat.of(per_it),
            "%",
            list(p.r1_seeds),
            _all(per_it, lambda v: v > 0),
            f"the bound {bound:.1f}% holds for compute alone; an iteration's exchange "
            "(top-k, encoding, applying k - 1 peers' gradients) does not shrink with the batch"
            + report.above_bound(per_it, bound + 1e-9, "the ideal cut at 3:1 capacities"),
            {"iteration_s": {a: _arm_values(rows, a, "iteration_s") for a in R1_ARMS}},
        )
    )
    if _by(rows, "dlion-sample"):
        vals = cuts(rows, "dlion-sample", "dlion-nobatch", "time_to_high")
        out.append(
            report.Claim(
                "R-DL-1w",
                "capacity-aware batching with sample-weighted gradients (A-35): cut in time to "
                "T_high against DLion without batching",
                None,
                report.Stat.of(vals),
                "%",
                sorted(_by(rows, "dlion-sample")),
                _all(vals, lambda v: v > 0),
                "ours: sum_j m_j g_j / sum_j m_j instead of Eq. 5's 1/k; same seeds, testbed "
                "and targets"
                + report.above_bound(vals, bound + 1e-9, "the ideal cut at 3:1 capacities"),
                {"time_to_high": _arm_values(rows, "dlion-sample", "time_to_high")},
            )
        )
    return out


def claim_r1(rows: list[dict[str, Any]], p: Plan) -> report.Claim:
    vals = cuts(rows, "dlion", "dlion-nobatch", "time_to_high")
    bound = ideal_cut(BEDS["compute"].shares)
    mine, base = _by(rows, "dlion"), _by(rows, "dlion-nobatch")
    never = sorted(s for s in mine if mine[s].get("time_to_high") is None)
    extra = f"; DLion never reached T_high at seed(s) {never}" if never else ""
    return report.Claim(
        "R-DL-1",
        "capacity-aware batching: cut in time to T_high against DLion without batching "
        "(same total batch), dlion-compute-4",
        PAPER["batching_cut"],
        report.Stat.of(vals),
        "%",
        list(p.r1_seeds),
        _all(vals, lambda v: v > 0),
        f"{_setting(p)}; ideal bound {bound:.1f}% (1 - k C_min / sum C); the goal is >= 25%"
        + extra
        + report.above_bound(vals, bound + 1e-9, "the ideal cut at 3:1 capacities"),
        {
            "bound": bound,
            **{
                key: {a: _arm_values(rows, a, key) for a in ("dlion", "dlion-nobatch")}
                for key in ("idle", "iteration_s", "samples_per_s")
            },
            "batches": {s: r["batches"] for s, r in mine.items()},
            "spread": {s: r["spread"] for s, r in mine.items()},
            "baseline_seeds": sorted(base),
        },
    )


def _arm_values(rows: Sequence[dict[str, Any]], arm: str, key: str) -> list[Any]:
    return [r[key] for r in rows if r["arm"] == arm]


def _faster(
    rows: list[dict[str, Any]], base: str, key: str
) -> tuple[list[float | None], bool | None]:
    """DLion's cut against ``base`` per seed, and whether DLion reached ``key``'s target first
    at every seed (a baseline that never reached it counts as later)."""
    d, b = _by(rows, "dlion"), _by(rows, base)
    vals = cuts(rows, "dlion", base, key)
    seeds = [s for s in d if s in b]
    if not seeds or all(d[s].get(key) is None for s in seeds):
        return vals, None
    first = all(
        d[s].get(key) is not None and (b[s].get(key) is None or d[s][key] < b[s][key])
        for s in seeds
    )
    return vals, first


def claims_r2(rows: list[dict[str, Any]], p: Plan) -> list[report.Claim]:
    out = []
    for cid, base, paper in (
        ("R-DL-2", "gaia", PAPER["vs_gaia_faster"]),
        ("R-DL-2b", "ako", PAPER["vs_ako_faster"]),
    ):
        vals, first = _faster(rows, base, "time_to_low")
        never = sorted(s for s, r in _by(rows, base).items() if r.get("time_to_low") is None)
        high = sorted(s for s, r in _by(rows, base).items() if r.get("time_to_high") is not None)
        out.append(
            report.Claim(
                cid,
                f"DLion against {base.capitalize()}: cut in time to T_low, dlion-compute-4",
                paper,
                report.Stat.of(vals),
                "%",
                list(p.seeds),
                first,
                f"{_setting(p)}; read as % less time (the paper's 'faster' is ambiguous: A-48)"
                + (f"; {base} never reached T_low at seed(s) {never}" if never else "")
                + f"; {base} reached T_high at seed(s) {high or 'none'}",
                {
                    "attribution": {
                        a: report.Stat.of(cuts(rows, a, base, "time_to_low"))
                        for a in ("dlion-nowe", "dlion-noadapt")
                    },
                    "time_ratio": [
                        (100.0 / (100.0 - v)) if v is not None and v < 100 else None for v in vals
                    ],
                },
            )
        )
    return out


def claims_r3(rows: list[dict[str, Any]], p: Plan) -> list[report.Claim]:
    out = []
    d = _by(rows, "dlion")
    for cid, base, paper in (
        ("R-DL-3", "gaia", PAPER["vs_gaia_acc"]),
        ("R-DL-3b", "ako", PAPER["vs_ako_acc"]),
    ):
        b = _by(rows, base)
        rel, pts = [], []
        for s in sorted(d):
            da, ba = d[s].get("accuracy_at_budget"), b.get(s, {}).get("accuracy_at_budget")
            if da is not None and ba is not None and ba > 0:
                rel.append(100.0 * (da / ba - 1.0))
                pts.append(100.0 * (da - ba))
            else:
                rel.append(None)
                pts.append(None)
        out.append(
            report.Claim(
                cid,
                f"DLion against {base.capitalize()}: accuracy at the fixed budget, "
                "dlion-network-4 (relative)",
                paper,
                report.Stat.of(rel),
                "%",
                list(p.seeds),
                _all(rel, lambda v: v > 0),
                f"{_setting(p)}; relative gain; in points: "
                f"{_fmt_stat(report.Stat.of(pts))} pp (A-48: the paper does not say which)",
                {
                    "points": report.Stat.of(pts),
                    "bytes": {
                        a: {
                            "lan": _median([r["bytes_lan"] for r in rows if r["arm"] == a]),
                            "wan": _median([r["bytes_wan"] for r in rows if r["arm"] == a]),
                            "iterations": _median(
                                [r["iterations"] for r in rows if r["arm"] == a]
                            ),  # fmt: skip
                        }
                        for a in R3_ARMS
                    },
                },
            )
        )
    full = _by(rows, "dlion-fullge")
    share, gap = [], []
    for s in sorted(d):
        pw, fw = d[s].get("wan_per_iteration"), full.get(s, {}).get("wan_per_iteration")
        share.append(100.0 * pw / fw if pw is not None and fw else None)
        # "equal accuracy": both arms train the same epochs, so their final accuracies are
        # compared; dense exchange over the WAN is so slow that its first evaluation comes
        # after the budget, where it has no accuracy at all
        pa, fa = d[s].get("final_accuracy"), full.get(s, {}).get("final_accuracy")
        gap.append(100.0 * (fa - pa) if pa is not None and fa is not None else None)
    agrees = _all(share, lambda v: v <= 25.0)
    if agrees is not None:
        agrees = agrees and bool(_all(gap, lambda v: v <= 1.0))
    out.append(
        report.Claim(
            "R-DL-3c",
            "WAN bytes per iteration, partial against full gradient exchange (goal: <= 25% "
            "at accuracy within 1 point)",
            "partial GE cuts training time (Fig. 4; no byte figure)",
            report.Stat.of(share),
            "%",
            list(p.seeds),
            agrees,
            f"final accuracy (same epochs), full minus partial: {_fmt_stat(report.Stat.of(gap))} "
            "pp; "
            "the threshold comes from each link's bandwidth (budget = T_unit x bandwidth)",
        )
    )
    return out


def claim_r4(rows: list[dict[str, Any]], p: Plan) -> report.Claim:
    acc = {a: _median([r["final_accuracy"] for r in rows if r["arm"] == a]) for a, *_ in TABLE1}
    time = {a: _median([r["train_s"] for r in rows if r["arm"] == a]) for a, *_ in TABLE1}
    full, small = _by(rows, "t1-full"), _by(rows, "t1-small")
    gain = [
        100.0 * (full[s]["final_accuracy"] - small[s]["final_accuracy"])
        for s in sorted(full)
        if s in small and full[s]["final_accuracy"] is not None and small[s]["final_accuracy"]
    ]
    agrees: bool | None = None
    if all(v is not None for v in acc.values()) and all(v is not None for v in time.values()):
        known = {a: float(v) for a, v in acc.items() if v is not None}
        best = max(known.values())
        agrees = (
            known["t1-large"] == min(known.values())
            and known["t1-full"] >= best - 0.01
            and (time["t1-warmup-speedup"] or 0) < (time["t1-warmup"] or 0)
        )
    slow = time.get("t1-warmup-increase")
    return report.Claim(
        "R-DL-4",
        "Table 1: WarmUpLR + SpeedUpBS + DecayLR against SmallLR + StaticBS, final accuracy",
        round(100 * (0.7220 - 0.6956), 2),
        report.Stat.of(gain),
        "pp",
        list(p.side_seeds),
        agrees,
        f"{_setting(p)}; agrees = LargeLR lowest, the full combination within 1 point of the "
        "best, SpeedUpBS shorter than WarmUpLR + StaticBS; IncreaseBS's time over the "
        f"baseline: {_f(_ratio(slow, time.get('t1-small')))}x "
        "(the paper: 2.2x)",
        {"accuracy": acc, "train_s": time, "paper": {a: (x, t) for a, _, x, t in TABLE1}},
    )


def claim_r5(res: dict[str, Any], p: Plan) -> report.Claim:
    k1, k10 = res.get("knee_1"), res.get("knee_10")
    n = res.get("n_train") or 0
    agrees = None
    if k1 is not None and k10 is not None:
        drops = res.get("drop_10") is not None and res["drop_10"] > KNEE_DELTA
        agrees = drops and k1 == k10
    return report.Claim(
        "R-DL-5",
        "the total-batch knee from a 1-epoch sweep (largest total within 2 points of the best)",
        "640-960 (4 workers, CIFAR-10 50k); ~10% of N",
        report.Stat.of([k1]),
        "",
        list(p.side_seeds),
        agrees,
        f"10-epoch knee {k10}; 10% of N = {int(0.1 * n)}; T_bs = {res.get('t_bs')} for every "
        "later DLion run; agrees = a drop of more than 2 points exists and both sweeps find "
        "the same knee",
        {"accuracy_1": res.get("acc_1"), "accuracy_10": res.get("acc_10")},
    )


def claim_r6(rows: list[dict[str, Any]], p: Plan) -> report.Claim:
    t = {a: _median([r["time_to_low"] for r in rows if r["arm"] == a]) for a in R6_ARMS}
    partial_cut = cuts(rows, "we6-early-partial", "we6-early-full", "time_to_low")
    agrees: bool | None = None
    if all(v is not None for v in t.values()):
        v = {a: float(x) for a, x in t.items() if x is not None}
        partial_wins = all(v[f"we6-{w}-partial"] <= v[f"we6-{w}-full"] for w in WE_TIMES)
        early = min(v["we6-early-partial"], v["we6-periodic-partial"])
        agrees = partial_wins and early <= min(v["we6-late-partial"], v["we6-none-partial"])
    return report.Claim(
        "R-DL-6",
        "when to exchange weights: partial against full GE with early WE, cut in time to T_low, "
        "dlion-network-4",
        "early ~ periodic; partial GE cuts time in every case (Fig. 4)",
        report.Stat.of(partial_cut),
        "%",
        list(p.side_seeds),
        agrees,
        f"{_setting(p)}; agrees = partial <= full for every WE timing, and early/periodic "
        "no later than late/none",
        {"time_to_low": t},
    )


def claim_r7(rows: list[dict[str, Any]], p: Plan) -> report.Claim:
    acc = {a: _median([r["accuracy_at_budget"] for r in rows if r["arm"] == a]) for a in R7_ARMS}
    one, none = _by(rows, "we7-one-async"), _by(rows, "we7-none")
    gain = [
        100.0 * (one[s]["accuracy_at_budget"] - none[s]["accuracy_at_budget"])
        for s in sorted(one)
        if s in none
        and one[s]["accuracy_at_budget"] is not None
        and none[s]["accuracy_at_budget"] is not None
    ]
    agrees: bool | None = None
    if all(v is not None for v in acc.values()):
        v = {a: float(x) for a, x in acc.items() if x is not None}
        agrees = (
            v["we7-all"] > v["we7-partial"]
            and abs(v["we7-partial"] - v["we7-none"]) <= 0.01
            and v["we7-one-async"] >= max(v["we7-all"], v["we7-one-sync"]) - 0.005
        )
    return report.Claim(
        "R-DL-7",
        "what, whom, how of WE: best -> worst, asynchronous, against no WE, accuracy at the "
        "budget, dlion-network-4",
        "WE helps except partial WE; one (to the worst) and asynchronous best (Fig. 5)",
        report.Stat.of(gain),
        "pp",
        list(p.side_seeds),
        agrees,
        f"{_setting(p)}; agrees = full-to-all beats partial, partial within 1 point of none, "
        "best->worst asynchronous at least as good as all and as synchronous",
        {"accuracy_at_budget": acc},
    )


def claim_r8(rows: list[dict[str, Any]], p: Plan) -> report.Claim:
    share = []
    on, off = _by(rows, "sel-on"), _by(rows, "sel-off")
    for s in sorted(on):
        a, b = on[s].get("wan_per_iteration"), off.get(s, {}).get("wan_per_iteration")
        share.append(100.0 * a / b if a is not None and b else None)
    iters = cuts(rows, "sel-on", "sel-off", "iteration_s")
    freq: dict[str, dict[str, float | None]] = {}
    for r in (x for x in rows if x["arm"] == "sel-on"):
        for w, n in (r.get("site_sender") or {}).items():
            it = r.get("iterations") or 0
            freq.setdefault(w, {})["send"] = n / it if it and n is not None else None
            recv = (r.get("site_receiver") or {}).get(w)
            freq[w]["receive"] = recv / it if it and recv is not None else None
    return report.Claim(
        "R-DL-8",
        "EXTENSION (never evaluated in the paper): selective propagation, WAN bytes per "
        "iteration against all-to-all, four one-worker sites",
        None,
        report.Stat.of(share),
        "%",
        list(p.side_seeds),
        None,
        "an extension, not a reproduction: S = R = 2 of 4 sites per iteration, senders drawn by "
        f"capacity; iteration time cut {_fmt_stat(report.Stat.of(iters))}%",
        {
            "send_receive_frequency": freq,
            "capacities": dict(zip(BEDS["sites"].sites, BEDS["sites"].shares, strict=True)),
            "accuracy_at_budget": {
                a: _median([r["accuracy_at_budget"] for r in rows if r["arm"] == a])
                for a in ("sel-off", "sel-on")
            },
        },
    )


def build_claims(res: dict[str, Any], p: Plan) -> list[report.Claim]:
    claims: list[report.Claim] = []
    if res.get("r_dl_1"):
        claims += claims_r1(res["r_dl_1"], p)
    if res.get("r_dl_2"):
        claims += claims_r2(res["r_dl_2"], p)
    if res.get("r_dl_3"):
        claims += claims_r3(res["r_dl_3"], p)
    if res.get("r_dl_4"):
        claims.append(claim_r4(res["r_dl_4"], p))
    if res.get("r_dl_5"):
        claims.append(claim_r5(res["r_dl_5"], p))
    if res.get("r_dl_6"):
        claims.append(claim_r6(res["r_dl_6"], p))
    if res.get("r_dl_7"):
        claims.append(claim_r7(res["r_dl_7"], p))
    if res.get("r_dl_8"):
        claims.append(claim_r8(res["r_dl_8"], p))
    return claims


# ------------------------------------------------------------------ the report text


def _f(x: Any, fmt: str = ".3g") -> str:
    return format(x, fmt) if isinstance(x, (int, float)) and not isinstance(x, bool) else "-"


def _fmt_stat(s: report.Stat | None) -> str:
    return f"{_f(s.median)} [{_f(s.min)}, {_f(s.max)}]" if s else "-"


def _stat(values: Sequence[Any], fmt: str = ".3g") -> str:
    s = report.Stat.of([v for v in values if isinstance(v, (int, float))])
    return f"{_f(s.median, fmt)} [{_f(s.min, fmt)}, {_f(s.max, fmt)}]" if s else "-"


def _arms_table(rows: list[dict[str, Any]], arms: Sequence[str]) -> str:
    lines = [
        "| arm | time to T_high s | time to T_low s | accuracy at budget | final accuracy | "
        "train s | iteration ms | idle (max worker) | LAN MiB | WAN MiB | batches |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for arm in arms:
        mine = [r for r in rows if r["arm"] == arm]
        if not mine:
            continue
        idle = [max((v for v in r["idle"].values() if v is not None), default=None) for r in mine]
        cells = [
            arm,
            _stat([r.get("time_to_high") for r in mine]),
            _stat([r.get("time_to_low") for r in mine]),
            _stat([r.get("accuracy_at_budget") for r in mine], ".4f"),
            _stat([r["final_accuracy"] for r in mine], ".4f"),
            _stat([r["train_s"] for r in mine]),
            _stat([1000 * r["iteration_s"] for r in mine if r["iteration_s"]]),
            _stat(idle, ".2f"),
            _stat([r["bytes_lan"] / 2**20 for r in mine], ".1f"),
            _stat([r["bytes_wan"] / 2**20 for r in mine], ".1f"),
            " ".join(str(b) for _, b in sorted(mine[0]["batches"].items())),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Median [min, max] over seeds. Times are training seconds (evaluation and the capacity "
        "pilot excluded) from the common start; idle is the largest worker's share of training "
        "time spent waiting for peers; batches are the first measured seed's.",
    ]
    return "\n".join(lines)


def _knee_table(res: dict[str, Any]) -> str:
    lines = ["| total batch | accuracy after 1 epoch | after 10 epochs |", "|---:|---:|---:|"]
    for total in TOTALS:
        a1 = (res.get("acc_1") or {}).get(str(total))
        a10 = (res.get("acc_10") or {}).get(str(total))
        lines.append(f"| {total} | {_f(a1, '.4f')} | {_f(a10, '.4f')} |")
    lines += ["", f"Knee after 1 epoch: {res.get('knee_1')}, after 10: {res.get('knee_10')}."]
    return "\n".join(lines)


def _sections(res: dict[str, Any], p: Plan) -> list[tuple[str, str]]:
    out = [("Setup", _setup_text(p, res))]
    groups = (
        ("r_dl_1", "R-DL-1: capacity-aware batching", R1_ARMS),
        ("r_dl_2", "R-DL-2: DLion against Gaia and Ako (compute heterogeneity)", R2_ARMS),
        ("r_dl_3", "R-DL-3: network heterogeneity", R3_ARMS),
        ("r_dl_4", "R-DL-4: Table 1 combinations", tuple(a for a, *_ in TABLE1)),
        ("r_dl_6", "R-DL-6: when to exchange weights", R6_ARMS),
        ("r_dl_7", "R-DL-7: what, whom and how of WE", R7_ARMS),
        ("r_dl_8", "R-DL-8 (extension): selective propagation", ("sel-off", "sel-on")),
    )
    for key, title, arms in groups:
        if res.get(key):
            out.append((title, _arms_table(res[key], arms)))
    if res.get("r_dl_5"):
        out.append(("R-DL-5: batch threshold", _knee_table(res["r_dl_5"])))
    for name, text in res.get("testbeds", {}).items():
        out.append((f"Testbed verification: {name}", text))
    out.append(("Pilot (seed 0, not reused)", _pilot_table(res["pilot"])))
    return out


def _pilot_table(pilot: dict[str, Any]) -> str:
    """The pilot's runs (their accuracy curves are in the JSON report) and the learning rates
    it tried."""
    lines = [
        f"Seed {pilot.get('seed')}. Each arm's accuracy curve is in `paper-vs-edgetrain.json`.",
        "",
        "| run | final accuracy | train s |",
        "|---|---:|---:|",
    ]
    for r in pilot.get("runs", []):
        name = f"{r['arm']}{r.get('tag') or ''}"
        lines.append(
            f"| {name} | {_f(r.get('final_accuracy'), '.4f')} | {_f(r.get('train_s'), '.1f')} |"
        )
    finals = pilot.get("lr_finals")
    if finals:
        tried = ", ".join(f"{lr}: {_f(a, '.4f')}" for lr, a in finals.items())
        lines += ["", f"Learning rates tried (final accuracy): {tried}."]
    return "\n".join(lines)


def _setup_text(p: Plan, res: dict[str, Any]) -> str:
    where = (
        "local processes with slowdowns in each testbed's CPU ratios (no link limits; the "
        "recipe names the sites)"
        if p.local
        else "the emulated testbeds dlion-compute-4 (CPU 0.9/0.3/0.3/0.3, 1 Gbit/s LAN), "
        "dlion-network-4 (3 + 1 hosts of 0.45 core, 1 Gbit/s LANs, 100 Mbit/s WAN) and, for "
        "R-DL-8, four one-host sites (0.7/0.5/0.4/0.3, 100 Mbit/s WAN)"
    )
    t = res.get("targets", {})
    return (
        f"{_setting(p)}, IID shards, one worker per host on {where}. SGD momentum 0.9, "
        f"b0 = {p.b0}, eta = {res.get('lr')} ({'pilot-chosen' if p.lr is None else 'fixed'}), "
        f"{p.epochs} epochs (a global epoch: N samples across the cluster); iteration-"
        "synchronous (staleness 0) in every arm; Eq. 5 weighting (1/k per worker). DLion: "
        "capacity-aware batches from a pilot of timed steps (not in the clock), WarmUpLR + "
        "SpeedUpBS + DecayLR, partial GE with per-link residuals under a budget of T_unit x "
        "the link's bandwidth, dense where choosing the top k costs the worker more than it "
        "saves on the link (select_cost, ours), full WE best -> worst every 10 iterations while "
        "pi < 0.2. "
        f"T_bs = {res.get('t_bs')}. Targets: T_high = {_f(t.get('high'), '.4f')}, T_low = "
        f"{_f(t.get('low'), '.4f')}; budgets: {res.get('budgets') or '-'} s. Measured seeds "
        f"{', '.join(map(str, p.seeds))} (R-DL-1: {', '.join(map(str, p.r1_seeds))}; R-DL-4 to "
        f"R-DL-8: {', '.join(map(str, p.side_seeds))}, to bound the plan's time); pilot "
        f"seed {p.pilot_seed}."
    )


# ------------------------------------------------------------------ main


def _pilot(
    runner: Runner, names: Sequence[str], bed: Bed, res: dict[str, Any], tag: str, **kw: Any
) -> dict[str, float | None]:
    """Pilot runs of ``names`` at the pilot seed: their final accuracies (recorded)."""
    finals: dict[str, float | None] = {}
    for name in names:
        arm = runner.arm(name, bed, f"-pilot{tag}", **kw)
        summary = runner.summary(arm, runner.p.pilot_seed, bed)
        row = measure(summary, name, runner.p.pilot_seed, {})
        finals[name] = row["final_accuracy"]
        res["pilot"].setdefault("runs", []).append(
            {k: row[k] for k in ("arm", "run", "final_accuracy", "train_s", "curve")} | {"tag": tag}
        )
    return finals


def _knee_sweep(runner: Runner, bed: Bed, seeds: Sequence[int]) -> dict[str, Any]:
    """R-DL-5: uniform batches, one total at a time, 10 epochs (1-epoch accuracy from the
    same runs' first epoch)."""
    rows: list[dict[str, Any]] = []
    for total in TOTALS:
        b0 = max(1, total // len(bed.spec.shares))
        rows += runner.batch([f"knee-{total}"], bed, "R-DL-5", seeds, b0=b0, epochs=10)
    acc_1 = {t: _median(_arm_values(rows, f"knee-{t}", "first_epoch_accuracy")) for t in TOTALS}
    acc_10 = {t: _median(_arm_values(rows, f"knee-{t}", "final_accuracy")) for t in TOTALS}
    k1, k10 = knee(acc_1), knee(acc_10)
    known = [a for a in acc_10.values() if a is not None]
    return {
        "acc_1": {str(t): a for t, a in acc_1.items()},
        "acc_10": {str(t): a for t, a in acc_10.items()},
        "knee_1": k1,
        "knee_10": k10,
        "drop_10": max(known) - min(known) if known else None,
    }


def reproduce(args: argparse.Namespace) -> dict[str, Any]:
    p = plan_for(args)
    out: Path = args.out.resolve()
    root = cli.data_root(args.data_root) if p.dataset == "mnist" else None
    out.mkdir(parents=True, exist_ok=True)
    runner = Runner(p, out, data_section(p.dataset, root), cli.say)
    n_train = 8000 if p.dataset == "mnist" else 1437
    res: dict[str, Any] = {"pilot": {"seed": p.pilot_seed}, "testbeds": {}, "budgets": {}}
    claims = set(p.claims)
    with _bed(p, "compute", out, cli.say) as bed:
        if bed.tb is not None:
            res["testbeds"]["dlion-compute-4"] = verify_markdown(bed.tb)
        if p.lr is None:
            finals = {lr: _lr_pilot(runner, bed, lr, res) for lr in LRS}
            runner.lr = pick_lr(finals)
            res["pilot"]["lr_finals"] = {str(k): v for k, v in finals.items()}
        else:
            runner.lr = p.lr
        res["lr"] = runner.lr
        if "R-DL-5" in claims:
            res["r_dl_5"] = _knee_sweep(runner, bed, p.side_seeds)
            k1 = res["r_dl_5"]["knee_1"]
            floor = len(BEDS["compute"].shares) * p.b0  # T_bs below the starting total: none
            runner.t_bs = max(floor, min(int(0.1 * n_train), k1)) if k1 else None
            res["r_dl_5"].update(n_train=n_train, t_bs=runner.t_bs)
        res["t_bs"] = runner.t_bs or int(0.1 * n_train)
        pilot_arms: tuple[str, ...] = ("dlion", "dlion-nobatch", "gaia", "ako")
        if claims == {"R-DL-1"}:
            pilot_arms = ("dlion", "dlion-nobatch")
        runner.targets = targets_from(_pilot(runner, pilot_arms, bed, res, ""))
        res["targets"] = runner.targets
        if "R-DL-1" in claims:
            res["r_dl_1"] = runner.batch(p.r1_arms, bed, "R-DL-1", p.r1_seeds)
        if "R-DL-2" in claims:
            res["r_dl_2"] = runner.batch(R2_ARMS, bed, "R-DL-2", p.seeds)
        if "R-DL-4" in claims:
            res["r_dl_4"] = runner.batch([a for a, *_ in TABLE1], bed, "R-DL-4", p.side_seeds)
    if claims & {"R-DL-3", "R-DL-6", "R-DL-7"}:
        with _bed(p, "network", out, cli.say) as bed:
            if bed.tb is not None:
                res["testbeds"]["dlion-network-4"] = verify_markdown(bed.tb)
            budget = _budget(runner, bed, res, "network")
            if "R-DL-3" in claims:
                res["r_dl_3"] = runner.batch(
                    R3_ARMS, bed, "R-DL-3", p.seeds, budget, tag=NETWORK_TAG
                )
            if "R-DL-6" in claims:
                res["r_dl_6"] = runner.batch(R6_ARMS, bed, "R-DL-6", p.side_seeds)
            if "R-DL-7" in claims:
                res["r_dl_7"] = runner.batch(R7_ARMS, bed, "R-DL-7", p.side_seeds, budget)
    if "R-DL-8" in claims:
        with _bed(p, "sites", out, cli.say) as bed:
            if bed.tb is not None:
                res["testbeds"]["dlion-sites-4"] = verify_markdown(bed.tb)
            budget = _budget(runner, bed, res, "sites", "sel-off")
            res["r_dl_8"] = runner.batch(("sel-off", "sel-on"), bed, "R-DL-8", p.side_seeds, budget)
    claims_out = build_claims(res, p)
    return report.write(
        out, "dlion", "DLion", claims_out, runner.rows, _sections(res, p), {"results": res}
    )


def _lr_pilot(runner: Runner, bed: Bed, lr: float, res: dict[str, Any]) -> float | None:
    runner.lr = lr
    return _pilot(runner, ("ako",), bed, res, f"-lr{lr:g}")["ako"]


def _budget(runner: Runner, bed: Bed, res: dict[str, Any], key: str, arm: str = "dlion") -> float:
    """A fixed time budget for ``key``'s testbed: 0.6 x the pilot's training time there."""
    _pilot(runner, (arm,), bed, res, f"-{key}")
    pilot = res["pilot"]["runs"][-1]
    budget = round(0.6 * float(pilot["train_s"] or 0.0), 2)
    res["budgets"][key] = budget
    return budget


def main(argv: Sequence[str] | None = None) -> int:
    ap = cli.parser(
        "dlion",
        __doc__,
        quick="R-DL-1 alone on digits, one seed (<10 min)",
        smoke="the test suite's path: R-DL-1's two arms, two epochs, local processes (<2 min)",
        seeds=3,
    )
    ap.add_argument(
        "--testbed",
        choices=("emulated", "local"),
        default="emulated",
        help="the emulated testbeds (root) or local processes with slowdowns",
    )
    return cli.run(ap, argv, reproduce)


if __name__ == "__main__":
    raise SystemExit(main())
