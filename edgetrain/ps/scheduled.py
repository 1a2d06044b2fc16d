"""A parameter-server trainer whose pulls and pushes follow a layer-wise schedule, re-planned
from what it measures (the four techniques sequential, lbl, ibatch, dynacomm).

Each iteration: every forward segment's pull is queued back to back from the start, forward
waits segment by segment for its parameters, backward releases each segment's push the moment
its gradients exist; the iteration ends with the last acknowledgement (:mod:`.hooks`,
:mod:`.transmitter`). The trainer has no optimiser of its own: the shards apply it. It measures
every layer's compute and every transmission; at each epoch barrier (and every ``replan_every``
iterations) it fits the link (:mod:`.livecosts`), asks its technique's planner
(``plan.strategies.SCHEDULES``) for new cuts and predicts the iteration time with the same
simulator the planner uses, so prediction and measurement stand side by side. Without a plan
file, the first iteration goes layer by layer so the fit sees every layer's size.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from edgetrain.comm import sockets
from edgetrain.comm.client import Serve
from edgetrain.comm.control import HandIn
from edgetrain.comm.transport import Transport
from edgetrain.plan.baselines import lbl_cuts
from edgetrain.plan.costs import LayerCosts
from edgetrain.plan.simulator import simulate
from edgetrain.plan.strategies import SCHEDULES, verdict
from edgetrain.plan.units import describe_bandwidth
from edgetrain.ps.arrivals import Transmission
from edgetrain.ps.config import PsSection
from edgetrain.ps.hooks import SegmentHooks, backward_segments, segments
from edgetrain.ps.latency import Split, read_link, with_round_trip
from edgetrain.ps.layout import buffers, build_layout
from edgetrain.ps.link_trust import LinkChoice, choose_link, guarded_cuts, unidentified
from edgetrain.ps.livecosts import LinkFit, fit_link, layer_costs, mean_rows
from edgetrain.ps.plan_entry import PlanEntry, choice_line, nearest
from edgetrain.ps.server import ShardServer
from edgetrain.ps.transmitter import Transmitter
from edgetrain.runtime.base import Final, Ready, Runner, WorkerContext
from edgetrain.runtime.epochs import run_epochs
from edgetrain.runtime.session import Session
from edgetrain.runtime.setup import build_run_model, load_run_data, worker_indices
from edgetrain.runtime.trainer import LocalTrainer, evaluate, resolve_device

log = logging.getLogger(__name__)

# Iterations of compute timing kept for a plan (the most recent ones).
COMPUTE_WINDOW = 20
WARMUP_ITERATIONS = 2


class Runners:
    """The scheduled techniques' runner factory: a shard for role ``server``; else a trainer on
    the technique's schedule."""

    # A restarted trainer rejoins a running run ([run] restart, edgetrain join): its parameters
    # are the shards' current ones, pulled as every iteration pulls. A restarted shard is
    # rebuilt from the trainers' copies of its tensors (.recovery).
    rejoins = True
    joins_new = True  # a new trainer pulls the shards' parameters, as a rejoining one does
    restarts_roles = frozenset({"trainer", "server"})

    def __call__(self, ctx: WorkerContext) -> Runner:
        if ctx.role.name == "server":
            return ShardServer(ctx)
        return ScheduledTrainer(ctx)


make_runner = Runners()


def buckets(
    start: float,
    end: float,
    compute: Sequence[tuple[float, float]],
    comm: Sequence[tuple[float, float]],
) -> dict[str, float]:
    """Seconds of [start, end) with compute only, both, communication only, or neither. Pure."""
    edges = sorted({start, end, *[t for s in (*compute, *comm) for t in s if start < t < end]})
    out = {"compute_only": 0.0, "both": 0.0, "comm_only": 0.0, "neither": 0.0}
    for a, b in zip(edges, edges[1:], strict=False):
        mid = (a + b) / 2
        busy_c = any(s <= mid < e for s, e in compute)
        busy_m = any(s <= mid < e for s, e in comm)
        key = (
            "both"
            if busy_c and busy_m
            else "compute_only"
            if busy_c
            else "comm_only"
            if busy_m
            else "neither"
        )
        out[key] += b - a
    return out


class ScheduledTrainer:
    """A trainer of the parameter-server family (role ``trainer``)."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        self.cfg = PsSection.of(ctx.recipe)
        self.technique = ctx.recipe.train.technique
        self.schedule = SCHEDULES[self.technique]
        self.link: Transmitter | None = None
        self.plans: list[dict[str, Any]] = []
        self._fc: list[np.ndarray] = []
        self._bc: list[np.ndarray] = []
        self._iters: list[dict[str, Any]] = []  # this epoch's measured iterations
        self._costs: LayerCosts | None = None
        self._predicted: float | None = None
        self._plan_s = 0.0
        self._last_eval: tuple[float, float] | None = None
        # the link trusted while the live fit is not identifiable (link_trust): the start
        # probe's (else the plan file's), then the last identifiable fit's
        self._prior: tuple[LinkFit, LinkFit] | None = None
        self._prior_name = ""
        self._link: LinkChoice | None = None
        self._said = ""  # the last re-plan note in the log
        self._rtt = (0.0, 0.0)  # the round trip (pull, push) of the last link fit (.latency)
        self.rejoin_report: dict[str, Any] | None = None  # reported with the first epoch

    # ------------------------------------------------------------------ runner

    def setup(self) -> Ready:
        recipe, ctx = self.ctx.recipe, self.ctx
        group = recipe.expanded_workers()[ctx.worker_id]
        torch.set_num_threads(group.threads)
        data = load_run_data(recipe)
        mine = worker_indices(recipe, data, ctx.worker_id)
        model = build_run_model(recipe, data)
        self.layout = build_layout(model, data.input_shape, recipe.role_names().count("server"))
        self.trainer = LocalTrainer(
            model, data.x_train[mine], data.y_train[mine], data.x_test, data.y_test,
            recipe.train, recipe.run.seed, ctx.worker_id, group.slowdown,
            resolve_device(recipe.train.device),
        )  # fmt: skip
        if ctx.resume is not None:  # BatchNorm statistics (the parameters come from the shards)
            state = buffers(model)
            with torch.no_grad():
                for k, v in state.items():
                    if k in ctx.resume.weights:
                        v.copy_(torch.from_numpy(np.array(ctx.resume.weights[k])))
        self.params = dict(model.named_parameters())
        if self.cfg.keep_buffers:  # pulled parameters land in warm memory
            nbytes = sum(p.numel() * p.element_size() for p in self.params.values())
            sockets.keep_freed_buffers(sockets.keep_bytes_for(nbytes))
        meta = {"samples": self.trainer.num_samples, "layers": len(self.layout.specs)}
        return Ready({}, meta)

    def run(self, session: Session) -> Final:
        recipe, ctx = self.ctx.recipe, self.ctx
        self.session = session
        self.iterations = int(session.start_directive.get("iterations", 0) or 0)
        servers = {m.role.index: m.endpoints["ps"] for m in session.roster.of("server")}
        self._shards = {m.id: m.role.index for m in session.roster.of("server")}
        self.link = Transmitter(
            Transport.of(ctx), servers, self.layout, self.params, self.cfg.reply_timeout_s,
            keep_pushes=recipe.run.restart > 0,
        )  # fmt: skip
        self.link.on_wait = session.poll  # a lost or rebuilt shard is heard of while waiting
        session.on_failed(self._shards_lost)
        session.on_joined(self._shards_back)
        self.link.start()
        device = next(self.trainer.model.parameters()).device
        sync = torch.cuda.synchronize if device.type == "cuda" else None
        self.hooks = SegmentHooks(self.trainer.model, self.layout, self.link.wait, sync)
        # a restarted process re-enters at the coordinator's epoch ([run] restart, edgetrain
        # join): its parameters are the shards' current ones, pulled as every iteration pulls
        first = session.rejoin_epoch or ctx.start_epoch
        self.iteration = (first - 1) * self.iterations
        if session.rejoin_epoch is not None:
            self.rejoin_report = {"epoch": first, "source": "servers", "iteration": self.iteration}
            log.info("rejoined at epoch %d (iteration %d)", first, self.iteration)
        self._initial_cuts(session.start_directive.get("plan"))
        steps = run_epochs(
            session, self, epochs=recipe.train.epochs, start_epoch=first,
            eval_every=recipe.train.eval_every, worker_id=ctx.worker_id,
        )  # fmt: skip
        # the last epoch was evaluated after its last update; the shards stop at drain
        acc, loss = self._last_eval if self._last_eval is not None else self.evaluate()
        session.done({}, recipe.train.epochs, steps)
        mine = buffers(self.trainer.model) if ctx.role.index == 0 else {}
        weights = {k: v.detach().cpu().numpy().copy() for k, v in mine.items()}
        metrics = {
            "final_test_accuracy": acc,
            "final_test_loss": loss,
            "steps": steps,
            **ctx.traffic.as_dict(),
        }
        if self.link.recoveries:  # shards rebuilt from this trainer's copy
            metrics["shard_recoveries"] = self.link.recoveries
        return Final(HandIn(weights, {"trainer": ctx.role.index}), metrics)

    def _shards_lost(self, failed: set[int]) -> None:
        """Shards the run lost: their replies are not overdue while they are restarted (a
        shard that is not restarted ends the run: the launcher stops every worker)."""
        assert self.link is not None
        for wid in failed & set(self._shards):
            self.link.shard_lost(self._shards[wid])

    def _shards_back(self, joined: Mapping[int, Mapping[str, str]]) -> None:
        """Restarted shards are back: the link rebuilds each from this trainer's copy."""
        assert self.link is not None
        for wid, endpoints in joined.items():
            if wid in self._shards and "ps" in endpoints:
                log.info("shard %d is back at %s", self._shards[wid], endpoints["ps"])
                self.link.shard_back(self._shards[wid], endpoints["ps"])

    def close(self) -> None:
        if self.link is not None:
            self.link.stop()
        if hasattr(self, "hooks"):
            self.hooks.remove()

    # ------------------------------------------------------------------ planning

    def _initial_cuts(self, plan: object) -> None:
        L = len(self.layout.specs)
        if isinstance(plan, dict) and isinstance(plan.get("entries"), list):
            entry, line = self._plan_entry(plan)
            self.forward_cuts = [c for c in entry.forward_cuts if 0 < c < L]
            self.backward_cuts = [c for c in entry.backward_cuts if 0 < c < L]
            self._needs_plan = False
            if self._prior is None and entry.bandwidth_Bps is not None and entry.dt_s is not None:
                link = LinkFit(entry.dt_s, entry.bandwidth_Bps, 0)
                self._prior, self._prior_name = (link, link), "plan file"
            log.info("%s", line)
            self.plans.append(
                {
                    "at_iteration": self.iteration,
                    "source": "plan file",
                    **self._cuts(),
                    "plan_file": plan.get("file"),
                    "plan_bandwidth_Bps": entry.bandwidth_Bps,
                    "plan_choice": line,
                    "trusted_link": self._prior_name or None,
                }
            )
        elif not self.schedule.cost_aware:  # cuts that do not depend on costs
            self.forward_cuts, self.backward_cuts = self.schedule.cutter(self._dummy_costs())
            self._needs_plan = False
            self.plans.append({"at_iteration": self.iteration, "source": "fixed", **self._cuts()})
        else:  # measure the first iteration layer by layer, then plan
            self.forward_cuts, self.backward_cuts = lbl_cuts(self._dummy_costs())
            self._needs_plan = True

    def _plan_entry(self, plan: Mapping[str, Any]) -> tuple[PlanEntry, str]:
        """The plan file's entry this trainer uses, and the line that says which and why: the
        launcher's choice, else the entry nearest the bandwidth this trainer measures now.

        A trainer that will re-plan measures its link here in any case: an identifiable probe
        becomes the link it trusts while its live fit is not (a plan file's link is what
        someone declared; the probe is this run's)."""
        entries = [PlanEntry.from_dict(e) for e in plan["entries"]]
        chosen = plan.get("chosen")
        given = isinstance(chosen, int) and 0 <= chosen < len(entries)
        probe = self._probe() if not given or self.cfg.replan != "never" else []
        fit = fit_link(probe)
        if fit is not None and unidentified(probe) is None:
            self._prior, self._prior_name = (fit, fit), "start probe"
        if given:
            assert isinstance(chosen, int)
            return entries[chosen], str(plan.get("why") or "")
        measured = fit.bandwidth if fit is not None else None
        index = nearest(entries, measured) if measured is not None else 0
        how = "measured by this trainer at start"
        return entries[index], choice_line(str(plan.get("file")), entries, index, measured, how)

    def _probe(self) -> list[tuple[int, float]]:
        """``(bytes, seconds)`` of two pulls of the smallest layer and two of the whole model,
        alternated (segment 0: kept out of the live fit)."""
        link = self.link
        assert link is not None
        sizes = self.layout.layer_bytes
        layer = 1 + sizes.index(min((b for b in sizes if b > 0), default=sizes[0]))
        small, whole = self.layout.tensors(layer, layer), list(self.layout.shapes)
        before = len(link.log)
        for names in (small, whole, small, whole):
            link.wait(link.pull(self.iteration, 0, names), "the link probe")
        return [(t.nbytes, t.seconds - t.held_s) for t in link.log[before:]]

    def _dummy_costs(self) -> LayerCosts:
        ones = np.ones(len(self.layout.specs))
        return LayerCosts(ones, ones, ones, ones, 0.0)

    def _cuts(self) -> dict[str, list[int]]:
        return {"forward_cuts": list(self.forward_cuts), "backward_cuts": list(self.backward_cuts)}

    def _splits(self) -> list[Split]:
        """Pulls' and pushes' link over the last ``fit_window`` transmissions of segments, the
        round trip of the pipelined link taken out where it can be told apart (then kept in
        ``_rtt`` for the costs, :mod:`.latency`)."""
        assert self.link is not None
        window = self.cfg.fit_window
        log_ = [t for t in self.link.log if t.segment > 0]
        split = [
            read_link([t for t in log_ if t.direction == d][-window:]) for d in ("pull", "push")
        ]
        self._rtt = (split[0].rtt, split[1].rtt)
        return split

    def _choose_link(self) -> LinkChoice | None:
        """The link to plan and predict with (:mod:`.link_trust`): the fit when it is
        identifiable (which then becomes the link trusted later), else the trusted one."""
        pull, push = self._splits()
        fitted = (pull.fit, push.fit)
        choice = choose_link(pull.samples, push.samples, self._prior, self._prior_name, fitted)
        if choice is not None and choice.identifiable:
            self._prior, self._prior_name = (choice.pull, choice.push), "last fit"
        return choice

    def estimate(self) -> LayerCosts | None:
        """The planner's costs from what this trainer measured lately (None: not enough)."""
        choice = self._choose_link()
        if choice is None or not self._fc:
            return None
        self._link = choice
        pull, push = choice.pull, choice.push
        names = [s.name for s in self.layout.specs]
        # the first iterations warm up (allocator, first touch of every buffer): left out once
        # there are enough others
        skip = WARMUP_ITERATIONS if len(self._fc) > WARMUP_ITERATIONS + 2 else 0
        fc = mean_rows(self._fc[skip:][-COMPUTE_WINDOW:])
        bc = mean_rows(self._bc[skip:][-COMPUTE_WINDOW:])
        costs = layer_costs(self.layout.layer_bytes, fc, bc, pull, push, names)
        return with_round_trip(costs, *self._rtt)  # once per direction: requests are pipelined

    def replan(self, reason: str) -> None:
        """Fit, plan with the technique's planner, and predict; the cuts apply from the next
        iteration."""
        t0 = time.perf_counter()
        costs = self.estimate()
        if costs is None:
            return
        choice = self._link
        assert choice is not None
        note = ""
        if self.schedule.cost_aware:
            running = (list(self.forward_cuts), list(self.backward_cuts))
            candidate = self.schedule.cutter(costs)
            (self.forward_cuts, self.backward_cuts), note = guarded_cuts(
                costs, running, candidate, choice
            )
        self._costs = costs
        self._predicted = simulate(costs, self.forward_cuts, self.backward_cuts).iteration_s
        self._plan_s += time.perf_counter() - t0
        said = _link_line(choice, costs, note) if choice.why or note else ""
        if said and self.schedule.cost_aware and choice.why + note != self._said:
            self._said = choice.why + note  # (said once while it holds, not every re-plan)
            log.info("re-plan at iteration %d: %s", self.iteration, said)
        self.plans.append(
            {
                "at_iteration": self.iteration,
                "source": reason,
                **self._cuts(),
                "predicted_iteration_s": self._predicted,
                "dt_s": costs.dt,
                "bandwidth_pull_Bps": choice.pull.bandwidth,
                "bandwidth_push_Bps": choice.push.bandwidth,
                **choice.to_dict(),
                "cuts_note": note,
                "plan_s": time.perf_counter() - t0,
            }
        )

    # ------------------------------------------------------------------ one iteration

    def _iterate(self, xb: torch.Tensor, yb: torch.Tensor) -> float:
        link = self.link
        assert link is not None
        L = len(self.layout.specs)
        fwd = segments(self.forward_cuts, L)
        bwd = backward_segments(self.backward_cuts, L)
        it = self.iteration
        model = self.trainer.model
        model.train()
        model.zero_grad(set_to_none=True)  # the last iteration's pushes were all acknowledged
        start = time.perf_counter()
        pulls = [link.pull(it, j + 1, self.layout.tensors(a, b)) for j, (a, b) in enumerate(fwd)]
        grads = [link.signal() for _ in bwd]  # (setting one wakes the link's thread)
        pushes = [
            link.push(it, j + 1, self.layout.tensors(a, b), grads[j])
            for j, (a, b) in enumerate(bwd)
        ]
        self.hooks.arm(fwd, pulls, bwd, grads)
        loss = nn.functional.cross_entropy(model(xb), yb)
        value = float(loss.detach())
        times = self.hooks.times
        times.loss_end = time.perf_counter()
        times.backward_start = times.loss_end
        loss.backward()
        self.hooks.backward_done()
        for j, done in enumerate(pushes):
            link.wait(done, f"push {j + 1} of iteration {it}")
        end = time.perf_counter()
        self._fc.append(times.forward(L))
        self._bc.append(times.backward(L))
        mine = [t for t in link.log if t.iteration == it and t.segment > 0]
        comm = [(t.start, t.end) for t in mine]
        self._iters.append(
            {
                "iteration": it,
                "seconds": end - start,
                "forward_s": times.loss_end - start,
                "backward_s": end - times.loss_end,
                "cuts": (tuple(self.forward_cuts), tuple(self.backward_cuts)),
                "buckets": buckets(start, end, times.compute_spans(L), comm),
                "comm_s": sum(t.seconds for t in mine),
                "held_s": sum(t.held_s for t in mine),
                "spans": _spans(start, times, L, mine),
                "predicted_s": self._predicted,
            }
        )
        self.iteration += 1
        return value

    # ------------------------------------------------------------------ EpochWork

    def batches(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """This epoch's first ``iterations`` full minibatches (every trainer takes as many)."""
        size = self.ctx.recipe.train.batch_size
        for taken, (xb, yb) in enumerate(self.trainer.batches(epoch)):
            if taken == self.iterations or len(xb) < size:
                return
            yield xb, yb

    def step(self, epoch: int, batch: tuple[torch.Tensor, torch.Tensor]) -> float:
        value = self._iterate(*batch)
        self.trainer.steps += 1
        if self._needs_plan and len(self._fc) >= self.cfg.cold_start_iterations:
            n = self.cfg.cold_start_iterations
            self.replan(f"cold start (after {n} layer-by-layer iterations)")
            self._needs_plan = self._costs is None
        elif self.cfg.replan_every and self.iteration % self.cfg.replan_every == 0:
            self.replan(f"every {self.cfg.replan_every} iterations")
        return value

    def evaluate(self) -> tuple[float, float]:
        """Accuracy of the model after this epoch's last update (a pull of every tensor)."""
        link = self.link
        assert link is not None
        done = link.pull(self.iteration, 0, list(self.layout.shapes))
        link.wait(done, "the evaluation pull")
        t = self.trainer
        self._last_eval = evaluate(t.model, t.x_test, t.y_test)
        return self._last_eval

    def metrics(self) -> dict[str, Any]:
        # measured: the iterations that ran the epoch's last cuts, but the first of them
        # (a warm-up: new segments, first use of buffers)
        last_cuts = self._iters[-1]["cuts"] if self._iters else None
        same = [i for i in self._iters if i["cuts"] == last_cuts]
        iters = same[1:] if len(same) > 2 else same
        self._iters = []
        measured = float(np.median([i["seconds"] for i in iters])) if iters else None
        now = self.estimate()  # this epoch's own costs, for the cuts it ran
        predicted_now = (
            simulate(now, self.forward_cuts, self.backward_cuts).iteration_s if now else None
        )
        used = [i["predicted_s"] for i in iters if i["predicted_s"] is not None]
        predicted = float(np.median(used)) if used else None
        median_iter = sorted(iters, key=lambda i: i["seconds"])[len(iters) // 2] if iters else None
        b = (
            {
                k: float(np.median([i["buckets"][k] for i in iters]))
                for k in ("compute_only", "both", "comm_only", "neither")
            }
            if iters
            else {}
        )
        comm = float(np.median([i["comm_s"] for i in iters])) if iters else 0.0
        phases = {
            k: float(np.median([i[k] for i in iters])) if iters else None
            for k in ("forward_s", "backward_s")
        }
        tl = simulate(now, self.forward_cuts, self.backward_cuts) if now else None
        out: dict[str, Any] = {
            "technique": self.technique,
            **phases,
            "predicted_forward_s": tl.forward_s if tl else None,
            "predicted_backward_s": tl.backward_s if tl else None,
            "costs": verdict(now) if now else None,
            **self._cuts(),
            "iterations": len(iters),
            "iteration_s": measured,
            # without the time shards held this trainer's pulls for the other trainers' pushes
            # (BSP synchronisation): what the one-trainer cost model predicts
            "iteration_unheld_s": (
                float(np.median([i["seconds"] - i["held_s"] for i in iters])) if iters else None
            ),
            "predicted_s": predicted,
            "predicted_now_s": predicted_now,
            "prediction_error": (measured / predicted - 1) if measured and predicted else None,
            "buckets": b,
            "hidden_share": (b["both"] / comm) if b and comm > 0 else None,
            "held_s": float(np.median([i["held_s"] for i in iters])) if iters else None,
            "dt_s": now.dt if now else None,
            # the pipelined link's round trip per direction (pull, push), paid once a burst;
            # 0 where it could not be told from dt (one segment: it is then in dt)
            "rtt_s": list(self._rtt) if now else None,
            "hold_ms": self.cfg.hold_ms,
            "plan_s": self._plan_s,
            "gantt": median_iter["spans"] if median_iter else [],
            "gantt_planned": _planned_spans(now, self.forward_cuts, self.backward_cuts),
            "samples": self.trainer.num_samples,
            **self.ctx.traffic.as_dict(),
        }
        if now is not None and self._link is not None:  # the link the costs above used
            out["bandwidth_pull_Bps"] = self._link.pull.bandwidth
            out["bandwidth_push_Bps"] = self._link.push.bandwidth
            out.update(self._link.to_dict())
        if self.cfg.replan == "epoch" and not self._needs_plan:
            self.replan("epoch barrier")  # the cuts of the next epoch
            out["plan_s"] = self._plan_s
        out["plans"] = self.plans
        out["next_cuts"] = self._cuts()
        if self.rejoin_report is not None:  # the first epoch after a rejoin says so
            out["rejoin"], self.rejoin_report = self.rejoin_report, None
        self.plans = []
        self._plan_s = 0.0
        return out

    def checkpoint(self) -> HandIn:  # trainers hold no state of their own but BatchNorm's
        return HandIn(
            {k: v.detach().cpu().numpy().copy() for k, v in buffers(self.trainer.model).items()}, {}
        )

    def apply(self, directive: Mapping[str, Any]) -> None:
        return None

    def serve(self) -> Serve:
        return []


def _link_line(choice: LinkChoice, costs: LayerCosts, note: str) -> str:
    """What a re-plan that could not use its live link fit as it is says in the worker log."""
    line = f"the live link fit is not identifiable ({choice.why})"
    if choice.source != "one size":  # a trusted link stood in
        line += (
            f"; planned with the {choice.source}'s link scaled to the measured times (dt "
            f"{costs.dt * 1e3:.3g} ms, pull {describe_bandwidth(choice.pull.bandwidth)}, "
            f"push {describe_bandwidth(choice.push.bandwidth)})"
        )
    return f"{line}; {note}" if note else line


def _spans(start: float, times: Any, layers: int, comm: Sequence[Transmission]) -> list[list[Any]]:
    """One measured iteration as Gantt spans ``[lane, kind, segment, start, end]`` (seconds
    from the iteration's start)."""
    out: list[list[Any]] = []
    for layer in range(layers):
        if layer in times.starts:
            nxt = times.starts.get(layer + 1)
            end = nxt[0] if nxt is not None else times.loss_end
            out.append(
                ["compute", "forward", layer + 1, times.starts[layer][1] - start, end - start]
            )
    prev = times.backward_start
    for layer, t in sorted(times.done.items(), key=lambda kv: kv[1]):
        out.append(["compute", "backward", layer + 1, prev - start, t - start])
        prev = t
    for t in comm:
        out.append(["comm", t.direction, t.segment, t.start - start, t.end - start])
    return out


def _planned_spans(costs: LayerCosts | None, fcuts: list[int], bcuts: list[int]) -> list[list[Any]]:
    """The simulator's timeline of the same cuts, as the same kind of spans."""
    if costs is None:
        return []
    tl = simulate(costs, fcuts, bcuts)
    out: list[list[Any]] = []
    for s in tl.spans:
        offset = tl.forward_s if s.phase == "backward" else 0.0
        out.append([s.lane, s.kind, s.segment, s.start + offset, s.end + offset])
    return out
