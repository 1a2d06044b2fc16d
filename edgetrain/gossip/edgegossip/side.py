"""EdgeGossip's launcher side: the recipe check that its balancer can run, the balancer as the
run's controller, and the report with each worker's r_i, the predictor's error and the
aggregation and ranking overheads.

The balancer (Algorithm 1) runs before every epoch, r_i as each worker's directive, with
GoSGD's drain accounting. Before the first epoch the workers' ``ready`` reports give |X_i| and
their first predictions; at every epoch barrier their ``epoch_end`` metrics give the next
(``p_next``; ``p_obs``, the measured throughput, for ``balance = "reactive"``). A worker that
reports nothing usable, or that the coordinator lost, counts as failed (p_i = 0). When the
failed fraction is above ``f_threshold`` the run stops with one line naming the failed workers
(the driver's halt), or, with ``on_failure = "redistribute"``, the survivors take over their
share. ``balance = "off"`` gives every worker r = 1: the ranked trainer alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from edgetrain.comm.control import Controller, Decision, Role
from edgetrain.errors import RecipeError
from edgetrain.gossip.config import EdgeGossipSection, GossipSection
from edgetrain.gossip.drain import GossipController
from edgetrain.gossip.spread_report import gossip_report
from edgetrain.plan.balancer import balance, halt_reason
from edgetrain.recipe import Recipe
from edgetrain.runtime.base import TechniqueSide
from edgetrain.runtime.context import RunRecord
from edgetrain.runtime.predict import Prediction, Setting


def _number(value: Any) -> float | None:
    """A finite, non-negative number from a (possibly malformed) report, or None."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    v = float(value)
    return v if math.isfinite(v) and v >= 0 else None


class EdgeGossipController:
    """The balancer at start and at each barrier; drain accounting as GoSGD's."""

    def __init__(
        self, cfg: EdgeGossipSection, roles: Sequence[Role], f_threshold: float, epochs: int
    ) -> None:
        self.cfg = cfg
        self.f_threshold = f_threshold
        self.epochs = epochs
        self.trainers = [i for i, r in enumerate(roles) if r.name == "trainer"]
        self.sizes: dict[int, int] = {i: 0 for i in self.trainers}
        self.labels: dict[int, str] = {i: f"worker {i}" for i in self.trainers}
        self.decisions: list[dict[str, Any]] = []  # each balance taken: before which epoch, what
        self._drain = GossipController()

    def _throughputs(
        self, reports: Mapping[int, Mapping[str, Any]], key: str = "p_next"
    ) -> dict[int, float | None]:
        return {i: _number(reports[i].get(key)) for i in self.trainers if i in reports}

    def _decide(self, epoch: int, p: dict[int, float | None]) -> Decision:
        """The directives for ``epoch``: every reporting worker's r_i, or a halt."""
        cfg = self.cfg
        if cfg.balance == "off":
            ratios = {i: 1.0 for i in p}
            self.decisions.append({"epoch": epoch, "ratios": ratios, "p": p, "failed": []})
            return Decision({i: {"ratio": 1.0} for i in p})
        result = balance(p, self.sizes, cfg.p_threshold, self.f_threshold, cfg.on_failure)
        self.decisions.append(
            {"epoch": epoch, "ratios": result.ratios, "p": p, "failed": list(result.failed)}
        )
        if result.halted:
            labels = self.labels
            return Decision(halt=halt_reason(result, labels, cfg.p_threshold, self.f_threshold))
        return Decision(
            {
                i: {
                    "ratio": result.ratios[i],
                    "p": p[i],
                    "failed": list(result.failed),
                    "redistributed": result.redistributed,
                }
                for i in p
            }
        )

    def on_start(self, ready: Mapping[int, Mapping[str, Any]]) -> Decision:
        for i in self.trainers:
            report = ready.get(i, {})
            samples = report.get("samples")
            if isinstance(samples, int) and not isinstance(samples, bool) and samples >= 0:
                self.sizes[i] = samples
            host = report.get("host")
            if isinstance(host, str) and host:
                self.labels[i] = f"worker {i} (host {host[:64]})"
        return self._decide(1, self._throughputs(ready))

    def on_barrier(self, epoch: int, reports: Mapping[int, Mapping[str, Any]]) -> Decision:
        if epoch >= self.epochs:  # no epoch follows: nothing to balance
            return Decision()
        key = "p_obs" if self.cfg.balance == "reactive" else "p_next"
        return self._decide(epoch + 1, self._throughputs(reports, key))

    def on_drain(self, done: Mapping[int, Mapping[str, Any]]) -> Decision:
        return self._drain.on_drain(done)


def check_recipe(recipe: Recipe) -> None:
    """Refuse an EdgeGossip recipe whose balancer would never run."""
    cfg = EdgeGossipSection.of(recipe)
    barriers = GossipSection.of(recipe).sync_epochs
    if not barriers and cfg.balance in ("predictive", "reactive"):
        raise RecipeError(
            f'[edgegossip] balance = "{cfg.balance}" re-balances at every epoch barrier, but '
            "[gossip] sync_epochs = false has none",
            'set sync_epochs = true, or balance = "static" (once, before training) or "off"',
        )


def controller_for(recipe: Recipe, roles: Sequence[Role]) -> EdgeGossipController:
    """The run's controller: ``f_threshold`` defaults to ``[run] max_failed_fraction``."""
    cfg = EdgeGossipSection.of(recipe)
    f_threshold = cfg.f_threshold if cfg.f_threshold is not None else recipe.run.max_failed_fraction
    return EdgeGossipController(cfg, roles, f_threshold, recipe.train.epochs)


def controller(recipe: Recipe, roles: Sequence[Role], run_dir: Path) -> Controller:
    return controller_for(recipe, roles)


def report(run: RunRecord) -> dict[str, Any] | None:
    return gossip_report(run.manifest, run.workers, edge=True)


def predict(recipe: Recipe, setting: Setting) -> Prediction:
    """EdgeGossip's cost model (:mod:`edgetrain.gossip.cost_gosgd`)."""
    from edgetrain.gossip.cost_gosgd import predict_edgegossip

    return predict_edgegossip(recipe, setting)


SIDE = TechniqueSide(check=check_recipe, controller=controller, report=report, predict=predict)
