"""A technique that exists only in the tests, added to the built-in gossip family through
``EDGETRAIN_PLUGINS`` (``tests.helpers.annealgossip``): its module, its recipe section and one
registry line, as docs/runtime.md walks through.

``gossip/anneal``: GoSGD whose push probability decays by ``[anneal] decay`` every epoch
(epoch e pushes with ``probability * decay ** (e - 1)``). Its launcher side overrides two of
the family's hooks: ``check`` (a decay that anneals a zero probability is refused in one line)
and ``report`` (the family's spread table plus each epoch's probability); the policy, the drain
accounting, the averaged model and resume are the gossip family's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import torch
from pydantic import ConfigDict, Field

from edgetrain import techniques
from edgetrain.errors import RecipeError
from edgetrain.gossip.config import GossipSection
from edgetrain.gossip.gosgd import GoSGD
from edgetrain.gossip.spread_report import gossip_report
from edgetrain.recipe import Recipe
from edgetrain.runtime.api import RunRecord, TechniqueSide, WorkerContext
from edgetrain.section import Section


class AnnealSection(Section):
    """``[anneal]``: how fast the push probability decays, per epoch."""

    NAME: ClassVar[str] = "anneal"
    model_config = ConfigDict(extra="forbid", frozen=True)
    decay: float = Field(0.5, gt=0, le=1)


def probability_at(base: float, decay: float, epoch: int) -> float:
    """Epoch ``epoch``'s push probability (epochs count from 1). Pure."""
    return base * decay ** (epoch - 1)


class AnnealGoSGD(GoSGD):
    """A GoSGD worker whose push probability decays every epoch."""

    def __init__(self, ctx: WorkerContext) -> None:
        super().__init__(ctx)
        self.base = GossipSection.of(ctx.recipe).probability
        self.decay = AnnealSection.of(ctx.recipe).decay

    def batches(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Each epoch starts by setting its push probability (GoSGD's pushes read it)."""
        p = probability_at(self.base, self.decay, epoch)
        self.cfg = self.cfg.model_copy(update={"probability": p})
        return super().batches(epoch)

    def metrics(self) -> dict[str, Any]:
        return {**super().metrics(), "push_probability": self.cfg.probability}


def check(recipe: Recipe) -> None:
    if GossipSection.of(recipe).probability == 0:
        raise RecipeError(
            "[anneal] decays the push probability, and [gossip] probability = 0 pushes never",
            "set [gossip] probability above 0, or use technique = 'gosgd'",
        )


def report(run: RunRecord) -> dict[str, Any] | None:
    out = gossip_report(run.manifest, run.workers)
    if out is None:
        return None
    by_epoch: dict[str, float] = {}
    for rows in run.workers.values():
        for r in rows:
            if r.get("event") == "epoch" and isinstance(r.get("push_probability"), float):
                by_epoch[str(r["epoch"])] = r["push_probability"]
    out["anneal"] = {"probability": by_epoch}
    lines = ["## Anneal: push probability per epoch", ""]
    lines += [f"- epoch {e}: {p:.4f}" for e, p in sorted(by_epoch.items(), key=lambda x: int(x[0]))]
    out["markdown"] = f"{out['markdown']}\n\n" + "\n".join(lines)
    return out


SIDE = TechniqueSide(check=check, report=report)

techniques.register_technique(
    "gossip",
    techniques.TechniqueSpec(
        "anneal",
        "tests.helpers.annealgossip:AnnealGoSGD",
        ("trainer",),
        ("gossip", "anneal"),
        "GoSGD with a push probability that decays every epoch (a test plugin)",
        side="tests.helpers.annealgossip:SIDE",
    ),
    {"anneal": "tests.helpers.annealgossip:AnnealSection"},
)
