"""A family that exists only in the tests, plugged in through the registry alone.

``toy/mean``: trainers run local SGD on their shards and send a small tally message to a
``keeper`` (a role without epochs that the run cannot lose) at each epoch end; the controller
sends every worker a tagged directive at start, at each barrier and at drain; the final model
is the plain mean of the trainers' weights. Nothing in ``comm/``, ``launch/`` or ``worker/``
knows it: importing this module (``EDGETRAIN_PLUGINS=tests.helpers.toyfamily``) registers it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import zmq
from pydantic import BaseModel, ConfigDict, Field

from edgetrain import techniques
from edgetrain.comm import channel, sockets
from edgetrain.comm.wire import Message, arrays_from_state
from edgetrain.recipe import Recipe
from edgetrain.runtime.api import (
    Controller,
    CoordinationPolicy,
    Decision,
    Event,
    FamilyDefaults,
    Final,
    FinalModel,
    HandIn,
    Ready,
    Role,
    RunRecord,
    Serve,
    Session,
    WorkerContext,
    run_epochs,
)
from edgetrain.runtime.setup import build_run_model, load_run_data, worker_indices
from edgetrain.runtime.trainer import LocalTrainer
from edgetrain.runtime.weights import float_state, model_arrays, state_arrays

TALLY = "toy.tally"


class ToySection(BaseModel):
    """``[toy]``: one knob, to show a plugin's section validates like any other."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    tally_every: int = Field(1, ge=1)


class ToyController:
    """Tags every directive with where it was decided: the tests check each one arrived."""

    def __init__(self, roles: Sequence[Role]) -> None:
        self.roles = list(roles)

    def on_start(self, ready: Mapping[int, Mapping[str, Any]]) -> Decision:
        return Decision({i: {"tag": f"start-{i}"} for i in ready})

    def on_barrier(self, epoch: int, reports: Mapping[int, Mapping[str, Any]]) -> Decision:
        return Decision({i: {"tag": f"epoch-{epoch}-{i}"} for i in reports})

    def on_drain(self, done: Mapping[int, Mapping[str, Any]]) -> Decision:
        return Decision({i: {"tag": f"drain-{i}"} for i in range(len(self.roles))})


class ToyFamily(FamilyDefaults):
    name = "toy"

    def check(self, recipe: Recipe) -> None:
        return None

    def policy(self, recipe: Recipe) -> CoordinationPolicy:
        return CoordinationPolicy(
            epoch_roles=frozenset({"trainer"}),
            fatal_roles=frozenset({"keeper"}),
            checkpoint_roles=frozenset({"trainer"}),
        )

    def controller(self, recipe: Recipe, roles: Sequence[Role], run_dir: Path) -> Controller:
        return ToyController(roles)

    def artifacts(self, event: Event) -> dict[str, Any]:
        """One file per barrier: the directive tags of that epoch (the hook writes it)."""
        if event.kind != "barrier":
            return {}
        return {f"toy/barrier-{event.data['epoch']:04d}.json": {"epoch": event.data["epoch"]}}

    def final_model(
        self, recipe: Recipe, handins: Mapping[int, HandIn], roles: Sequence[Role]
    ) -> FinalModel:
        trainers = [h for i, h in handins.items() if roles[i].name == "trainer"]
        names = list(model_arrays(trainers[0].weights))
        mean = {
            n: np.mean([h.weights[n] for h in trainers], axis=0).astype(np.float32) for n in names
        }
        tallies = sum(int(h.meta.get("tallies", 0)) for h in handins.values())
        return FinalModel(mean, {"trainers": len(trainers), "tallies": tallies})

    def resume(
        self, recipe: Recipe, handins: Mapping[int, HandIn], roles: Sequence[Role]
    ) -> dict[int, HandIn]:
        return dict(handins)

    def report(self, run: RunRecord) -> dict[str, Any]:
        """The epochs each trainer reported, as a family's own report section."""
        rows_of = run.workers
        epochs = {w: sum(r.get("event") == "epoch" for r in rows) for w, rows in rows_of.items()}
        return {"epochs_reported": epochs, "markdown": f"toy epochs reported: {epochs}"}


FAMILY = ToyFamily()


class Trainer:
    """Local SGD; reports the directives it got; tallies to the keeper each epoch."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        self.tags: list[str] = []
        self.push: zmq.Socket | None = None

    def setup(self) -> Ready:
        recipe = self.ctx.recipe
        data = load_run_data(recipe)
        mine = worker_indices(recipe, data, self.ctx.worker_id)
        self.trainer = LocalTrainer(
            build_run_model(recipe, data), data.x_train[mine], data.y_train[mine],
            data.x_test, data.y_test, recipe.train, recipe.run.seed, self.ctx.worker_id,
        )  # fmt: skip
        return Ready({}, {"samples": self.trainer.num_samples, "steps_per_epoch": 1})

    def run(self, session: Session) -> Final:
        keeper = session.roster.endpoints("keeper", "tally")
        self.push = sockets.client(self.ctx.zmq, zmq.PUSH, self.ctx.keys)
        self.push.connect(next(iter(keeper.values())))
        epochs = self.ctx.recipe.train.epochs
        steps = run_epochs(session, self, epochs=epochs, worker_id=self.ctx.worker_id)
        drain = session.done({}, epochs, steps)
        self.tags.append(str(drain.get("tag")))
        handin = HandIn(arrays_from_state(float_state(self.trainer.model)), {"tags": self.tags})
        return Final(handin, {"steps": steps, "tags": self.tags})

    def close(self) -> None:
        if self.push is not None:
            self.push.close(linger=1000)

    def batches(self, epoch: int) -> Iterator[Any]:
        return self.trainer.batches(epoch)

    def step(self, epoch: int, batch: Any) -> float:
        return self.trainer.step(*batch)

    def evaluate(self) -> tuple[float, float]:
        return self.trainer.evaluate()

    def metrics(self) -> dict[str, Any]:
        assert self.push is not None
        msg = Message(TALLY, f"w{self.ctx.worker_id}", self.ctx.run_id, meta={"n": 1})
        channel.send(self.push, msg, self.ctx.traffic, peer="keeper")
        return {"tags": list(self.tags)}

    def checkpoint(self) -> HandIn:
        return HandIn(state_arrays(float_state(self.trainer.model), None), {})

    def apply(self, directive: Mapping[str, Any]) -> None:
        self.tags.append(str(directive.get("tag")))

    def serve(self) -> Serve:
        return []


class Keeper:
    """No epochs: counts tallies from ``start`` until the drain."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        self.tallies = 0
        self.inbox: zmq.Socket | None = None

    def setup(self) -> Ready:
        self.inbox = sockets.server(self.ctx.zmq, zmq.PULL, self.ctx.keys)
        endpoint = channel.bind_random(self.inbox, self.ctx.bind_host, self.ctx.announce_host)
        return Ready({"tally": endpoint})

    def _take(self) -> None:
        assert self.inbox is not None
        while self.inbox.poll(0, zmq.POLLIN):
            got = channel.recv(self.inbox, self.ctx.run_id, (TALLY,), self.ctx.traffic)
            if got is not None:
                self.tallies += 1

    def run(self, session: Session) -> Final:
        assert self.inbox is not None
        drain = session.wait_drain([(self.inbox, self._take)])
        self._take()
        return Final(HandIn({}, {"tallies": self.tallies}), {"drain_tag": drain.get("tag")})

    def close(self) -> None:
        if self.inbox is not None:
            self.inbox.close(linger=0)


def make_runner(ctx: WorkerContext) -> Trainer | Keeper:
    return Keeper(ctx) if ctx.role.name == "keeper" else Trainer(ctx)


techniques.register(
    techniques.FamilySpec(
        name="toy",
        family="tests.helpers.toyfamily:FAMILY",
        roles=("trainer", "keeper"),
        default_role="trainer",
        data_roles=("trainer",),
        sections={"toy": "tests.helpers.toyfamily:ToySection"},
        techniques={
            "mean": techniques.TechniqueSpec(
                "mean",
                "tests.helpers.toyfamily:make_runner",
                ("trainer", "keeper"),
                ("toy",),
                "local SGD, tallies to a keeper, the mean of the trainers' weights",
            )
        },
        summary="a family that exists only in the tests",
        placement={"keeper": "keep"},
    )
)
