"""DLion's cost model: its planned batches, each link's partial exchange, the weight exchange,
timed as one round of the exchange loop (:mod:`.cost_round`). Pure.

- Batches: the controller's planner (:mod:`.batching`) on the setting's compute, each worker's
  capacity constant in the batch (a step's time linear in it); T_unit is the plan's.
- Per link p -> q, as :meth:`.dlion.DLion.entries` chooses: dense with ``gradient_exchange =
  "full"``; ``threshold = "static"``: the link class's fraction; else the budget
  ``budget_factor x T_unit x`` the link's bandwidth estimate (8 bytes an entry; dense when it
  carries half the entries or more). The live estimate is the link's goodput while p's other
  flows share its interface (``shared_interface``), clamped as :mod:`.bandwidth` clamps it;
  static: the recipe's starting rate. With ``select_cost = "measured"`` a link whose top-k
  takes p longer than the smaller message saves on the estimate goes dense, and sparse again
  every ``PROBE_EVERY``-th iteration (its bytes and work are averaged over iterations).
- Work per link: the residual plus the gradient, then a dense take or a top-k and its gather;
  the receiver adds a dense vector or scatters the entries.
- The weight exchange (best -> worst, or all to all) is spread over the iterations it is due
  on (``we_when``, ``we_every``); each worker is the sender or the receiver 1/k of the time.
  With ``we_how = "sync"`` the iteration also waits for the weights on the slowest link.

Selective propagation (an extension) has no model: the hook answers None.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from edgetrain.gossip.config import DLionSection
from edgetrain.gossip.cost_model import (
    DEFAULT,
    FLOAT,
    Constants,
    check_setting,
    model_entries,
    ms,
    param_layers,
    step_work_s,
    wall_s,
)
from edgetrain.gossip.exchange.bandwidth import CLAMP, LAN, MBIT, link_class, starting_bandwidth
from edgetrain.gossip.exchange.batching import Curve, default_t_bs, plan_batches, uniform_plan
from edgetrain.gossip.exchange.cost_calibration import Calibration, with_extra
from edgetrain.gossip.exchange.cost_round import (
    ExchangeShape,
    Msg,
    Round,
    compute_work,
    exchange_prediction,
    time_round,
    update_work,
    with_unmodelled,
)
from edgetrain.gossip.exchange.sparse import (
    DENSE_BYTES,
    ENTRY_BYTES,
    PROBE_EVERY,
    entries_for,
    sparse_pays,
)
from edgetrain.runtime.predict import Prediction, Setting


@dataclass(frozen=True)
class LinkChoice:
    """What DLion's link ``src -> dst`` carries: ``entries`` when sparse (None: always dense),
    the share of iterations it is sparse, the bandwidth estimate and why (``full``,
    ``static``, ``budget-dense``, ``budget``, ``cost-dense``)."""

    src: int
    dst: int
    entries: int | None
    sparse_share: float
    estimate_Bps: float
    reason: str

    def nbytes(self, n: int) -> float:
        """The average message's bytes for a vector of ``n`` entries."""
        s = self.sparse_share
        return s * (self.entries or 0) * ENTRY_BYTES + (1 - s) * n * DENSE_BYTES


@dataclass(frozen=True)
class DLionPlan:
    """The planned batches and T_unit, and every link's choice."""

    batches: Mapping[int, int]
    t_unit: float
    links: Sequence[LinkChoice]


def select_work(n: int, k: int, c: Constants) -> float:
    """A top-k of ``k`` among ``n`` entries, reference seconds."""
    return n * c.select_s_per_entry + k * c.select_s_per_chosen


def plan_of(
    setting: Setting, shape: ExchangeShape, cfg: DLionSection
) -> tuple[dict[int, int], float]:
    """Each worker's batch and T_unit, as the controller plans them (:func:`.controller.make_plan`)
    from capacity curves: here the setting's compute."""
    ws = list(shape.workers)
    b0 = shape.b0
    curves: list[Curve]
    if shape.calibration is not None:  # the curves the run planned from
        curves = [shape.calibration.curves[w] for w in ws]
    else:
        caps = [b0 / (step_work_s(setting, b0, b0) / setting.devices[w].speed) for w in ws]
        curves = [[(b0, cap), (2 * b0, cap)] for cap in caps]
    t_bs = cfg.t_bs
    if t_bs is None and shape.n_train is not None:
        t_bs = default_t_bs(shape.n_train, None, len(ws) * b0)
    if cfg.batching:
        floor = cfg.min_batch if cfg.min_batch is not None else max(1, b0 // 4)
        plan = plan_batches(curves, b0, t_bs, cfg.epsilon, cfg.t_unit, floor)
    else:
        plan = uniform_plan(curves, b0, t_bs, cfg.epsilon)
    return dict(zip(ws, plan.batches, strict=True)), plan.t_unit


def link_choices(
    setting: Setting,
    shape: ExchangeShape,
    cfg: DLionSection,
    batches: Mapping[int, int],
    t_unit: float,
    c: Constants,
) -> list[LinkChoice]:
    """Every link's choice (see the module's docstring)."""
    ws = list(shape.workers)
    n = model_entries(setting)
    sites = shape.site_map()
    out: list[LinkChoice] = []
    for p in ws:
        peers = [q for q in ws if q != p]
        start = starting_bandwidth(p, peers, sites, ws, cfg.lan_mbit * MBIT, cfg.wan_mbit * MBIT)
        flows = len(peers) if c.shared_interface else 1
        compute = compute_work(setting, {p: batches[p]}, shape)[p]
        for q in peers:
            est = start[q]
            if cfg.bandwidth == "live":
                goodput = setting.link(p, q).bandwidth_Bps / flows
                est = min(start[q] * CLAMP[1], max(start[q] * CLAMP[0], goodput))
            if cfg.gradient_exchange == "full":
                out.append(LinkChoice(p, q, None, 0.0, est, "full"))
            elif cfg.threshold == "static":
                lan = link_class(p, q, sites) == LAN
                k = max(1, round((cfg.lan_fraction if lan else cfg.wan_fraction) * n))
                dense = 2 * k >= n
                out.append(LinkChoice(p, q, None if dense else k, float(not dense), est, "static"))
            else:
                k_budget = entries_for(cfg.budget_factor * t_unit * est, n)
                if k_budget is None:
                    out.append(LinkChoice(p, q, None, 0.0, est, "budget-dense"))
                    continue
                took = select_timed(setting, p, n, k_budget, compute, len(peers), c)
                if cfg.select_cost == "measured" and not sparse_pays(n, k_budget, est, took):
                    out.append(LinkChoice(p, q, k_budget, 1.0 / PROBE_EVERY, est, "cost-dense"))
                else:
                    out.append(LinkChoice(p, q, k_budget, 1.0, est, "budget"))
    return out


def select_timed(
    setting: Setting, p: int, n: int, k: int, compute: float, peers: int, c: Constants
) -> float:
    """What worker ``p`` times for one top-k: its work at the pace of the stretch it runs in,
    ``compute`` reference seconds and a top-k for each of its ``peers`` (under a CPU quota the
    later ones stall)."""
    work = select_work(n, k, c)
    whole = compute + peers * work
    return work * wall_s(setting, p, whole, c) / whole


def dlion_round(
    setting: Setting, shape: ExchangeShape, cfg: DLionSection, c: Constants
) -> tuple[Round, DLionPlan]:
    """One iteration of DLion at its planned batches."""
    if cfg.selective:
        raise ValueError("DLion's selective propagation (an extension) has no cost model")
    batches, t_unit = plan_of(setting, shape, cfg)
    links = link_choices(setting, shape, cfg, batches, t_unit, c)
    n = model_entries(setting)
    size = n * FLOAT
    encode: defaultdict[int, dict[str, float]] = defaultdict(lambda: {"encode": 0.0, "select": 0.0})
    msgs: list[Msg] = []
    for ln in links:
        s, k = ln.sparse_share, ln.entries or 0
        enc = encode[ln.src]
        enc["encode"] += size * c.add_s_per_byte + (1 - s) * size * c.take_s_per_byte
        enc["encode"] += c.encode_s_per_message  # each link's own take or top-k: its call
        enc["encode"] += s * 2 * k * c.scatter_s_per_entry  # the gather and the residual's zeros
        enc["select"] += s * select_work(n, k, c)
        apply = s * k * c.scatter_s_per_entry + (1 - s) * size * c.add_s_per_byte
        msgs.append(Msg(ln.src, ln.dst, ln.nbytes(n), apply))
    k_workers = len(shape.workers)
    layers = param_layers(setting)
    after = {
        w: {**update_work(n, c, layers), **weights_work(k_workers, n, cfg, c)}
        for w in shape.workers
    }
    compute = compute_work(setting, batches, shape)
    rnd = Round(tuple(shape.workers), compute, dict(encode), with_unmodelled(after, shape), msgs)
    return rnd, DLionPlan(batches, t_unit, tuple(links))


def we_rate(cfg: DLionSection) -> float:
    """Weight exchanges per iteration over the run (:func:`.weightex.due`)."""
    due = {
        "none": 0.0,
        "periodic": 1.0,
        "early": cfg.we_early_until,
        "late": 1.0 - cfg.we_late_from,
    }
    return due[cfg.we_when] / cfg.we_every


def we_bytes(n: int, cfg: DLionSection) -> float:
    """One weight-exchange message's bytes."""
    if cfg.we_what == "full":
        return n * DENSE_BYTES
    return max(1, round(cfg.we_fraction * n)) * ENTRY_BYTES


def we_messages(k: int, cfg: DLionSection) -> int:
    return k * (k - 1) if cfg.we_whom == "all" else 1


def weights_work(k: int, n: int, cfg: DLionSection, c: Constants) -> dict[str, float]:
    """The weight exchange's work per iteration per worker, reference seconds."""
    rate = we_rate(cfg)
    if rate == 0 or k < 2:
        return {}
    size = n * FLOAT
    nbytes = we_bytes(n, cfg)
    send = size * 2 * c.copy_s_per_byte + nbytes * c.wire_s_per_byte  # weights, snapshot
    if cfg.we_what == "full":
        send += size * c.take_s_per_byte
    else:
        send += size * c.add_s_per_byte + select_work(n, round(cfg.we_fraction * n), c)
    receive = nbytes * c.wire_s_per_byte + size * (4 * c.add_s_per_byte + 3 * c.copy_s_per_byte)
    each = (k - 1) if cfg.we_whom == "all" else 1.0 / k
    return {"weights": rate * each * (send + receive)}


def calibrated(
    setting: Setting,
    shape: ExchangeShape,
    cfg: DLionSection,
    measured: Calibration,
    constants: Constants = DEFAULT,
) -> Calibration:
    """``measured`` (a run of DLion without capacity-aware batching: ``cfg`` with ``batching``
    off) with each worker's loop work beyond what this model counts for that run
    (:func:`.cost_calibration.with_extra`; the loop's terms do not depend on the batch)."""
    uniform = cfg.model_copy(update={"batching": False})
    rnd, _ = dlion_round(setting, replace(shape, calibration=measured), uniform, constants)
    rt = time_round(setting, rnd, constants, uniform.sync, uniform.staleness)
    speed = {w: setting.devices[w].speed for w in shape.workers}
    modelled = {w: sum(rt.cpu[w].values()) * speed[w] for w in shape.workers}
    return with_extra(measured, modelled)


def predict_dlion(
    setting: Setting,
    shape: ExchangeShape,
    cfg: DLionSection,
    constants: Constants = DEFAULT,
    compare: bool = True,
) -> Prediction:
    """DLion's predicted iteration at its planned batches; ``compare``: a note with the cut in
    time per sample that capacity-aware batching is predicted to make against b0 each."""
    check_setting(setting, shape.workers)
    rnd, plan = dlion_round(setting, shape, cfg, constants)
    rt = time_round(setting, rnd, constants, cfg.sync, cfg.staleness)
    n = model_entries(setting)
    k = len(shape.workers)
    rate = we_rate(cfg)
    if cfg.we_how == "sync" and rate > 0 and k > 1:
        wait = max(
            we_bytes(n, cfg) / setting.link(a, b).bandwidth_Bps + setting.link(a, b).latency_s
            for a in shape.workers
            for b in shape.workers
            if a != b
        )
        rt = replace(rt, period_s=rt.period_s + rate * wait)
    nbytes = sum(m.nbytes for m in rnd.messages) + rate * we_messages(k, cfg) * we_bytes(n, cfg)
    samples = sum(plan.batches.values())
    notes = [links_note(setting, plan, n, constants)]
    batches = "/".join(str(plan.batches[w]) for w in shape.workers)
    if cfg.batching and compare:
        even_cfg = cfg.model_copy(update={"batching": False})
        even = predict_dlion(setting, shape, even_cfg, constants, compare=False)
        cut = 1.0 - (rt.period_s / samples) / (even.iteration_s / (shape.b0 * k))
        notes.append(
            f"capacity-aware batches {batches} (T_unit {ms(plan.t_unit)}) predicted to cut the "
            f"time per sample by {cut:.0%} against b0 each ({ms(even.iteration_s)} an iteration)"
        )
    else:
        notes.append(f"batches {batches} (T_unit {ms(plan.t_unit)})")
    if cfg.bs_policy != "static":
        notes.append(f"at the planned batches: the {cfg.bs_policy} policy lengthens later ones")
    return exchange_prediction("dlion", setting, rt, nbytes, samples, notes)


def links_note(setting: Setting, plan: DLionPlan, n: int, c: Constants) -> str:
    """One line on what the links carry, by reason."""
    by: defaultdict[str, list[LinkChoice]] = defaultdict(list)
    for ln in plan.links:
        by[ln.reason].append(ln)
    texts = []
    for reason, links in sorted(by.items()):
        count = f"{len(links)} of {len(plan.links)} links"
        one = links[0]
        k = one.entries or 0
        if reason == "full":
            texts.append(f"{count} dense (gradient_exchange = full)")
        elif reason == "budget-dense":
            texts.append(
                f"{count} dense: the budget (T_unit x {one.estimate_Bps / 1e6:.1f} MB/s) "
                "carries half the entries or more"
            )
        elif reason == "cost-dense":
            took = select_work(n, k, c) / setting.devices[one.src].speed
            saved = DENSE_BYTES * n - ENTRY_BYTES * k
            texts.append(
                f"{count} dense by cost: a top-{k} takes {ms(took)}, more than the "
                f"{saved / 1e3:.0f} kB it saves on the link (sparse every {PROBE_EVERY}th)"
            )
        else:
            texts.append(f"{count} sparse: {k} of {n} entries ({k / n:.1%})")
    return "DLion's partial exchange: " + "; ".join(texts)
