"""The mcPipe reproduction's runs: its testbeds of emulated laptops, one run's hosts file
(its stages one to a host, the evaluator away from stage 0), and what the phases found."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgetrain.experiment.arms import Arm
from edgetrain.experiment.beds import Bed, BedSpec, bring_up
from edgetrain.experiment.runner import Runner, Summary
from edgetrain.tomlconfig import loads
from reproductions.mcpipe_plan import Plan
from reproductions.mcpipe_recipes import (
    HostSpec,
    RunSpec,
    Workload,
    hosts_text,
    recipe,
    slots,
    testbed_doc,
)

LAPTOP = HostSpec("laptop-1", 0.6, "2g")  # mcpipe-3's hosts (recipes/testbeds/mcpipe-3.toml)
BIG_MEMORY = "8g"
RUN_TIMEOUT_S = 1800.0


@dataclass
class Ctx:
    """The reproduction's plan, its runner, progress lines and what it found."""

    p: Plan
    runner: Runner
    results: dict[str, Any] = field(default_factory=dict)
    summaries: dict[str, Summary] = field(default_factory=dict)

    @property
    def out(self) -> Path:
        return self.runner.out

    @property
    def say(self) -> Callable[[str], None]:
        return self.runner.say


def laptops(n: int, memory: str = "2g", cpu: float = LAPTOP.cpu) -> list[HostSpec]:
    return [HostSpec(f"laptop-{k}", cpu, memory) for k in range(1, n + 1)]


def bed(
    ctx: Ctx, name: str, hosts: Sequence[HostSpec], lan: str, about: str
) -> AbstractContextManager[Bed]:
    """``edgetrain emulate up --verify`` a testbed of ``hosts`` for a batch of runs, then
    down (local processes for a smoke)."""
    spec = BedSpec(name, tuple(h.cpu for h in hosts), spec=testbed_doc(name, hosts, lan, about))
    tables = None if ctx.p.local else ctx.results.setdefault("testbeds", {})
    return bring_up(spec, ctx.out, ctx.p.local, ctx.say, tables)


def run_hosts(out: Path, b: Bed, r: RunSpec) -> Path | None:
    """The hosts file of one run: the testbed's hosts with the run's slots (None: local)."""
    if b.tb is None:
        return None
    per = slots(r, len(b.spec.shares))
    data = loads(b.tb.hosts_file.read_text())
    path = out / "hosts" / f"{b.tb.name}-{'-'.join(map(str, per))}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(hosts_text(data, per))
    return path


def launch(ctx: Ctx, b: Bed, w: Workload, r: RunSpec, name: str, seed: int) -> Summary:
    """One arm at one seed (kept if it completed before)."""
    arm = Arm(name, recipe(w, r, name))
    summary = ctx.runner.summary(arm, seed, hosts=run_hosts(ctx.out, b, r))
    ctx.summaries[f"{name}-s{seed}"] = summary
    return summary
