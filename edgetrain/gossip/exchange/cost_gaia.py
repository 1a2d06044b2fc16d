"""Gaia's cost model (DLion's baseline, :mod:`.gaia`): the significance filter's work and the
significant share it sends, timed as one round of the exchange loop (:mod:`.cost_round`), or
with a server per site as Gaia's three waited steps. Pure.

The share of entries a message carries is not known ahead: a measured one (the
``significant_share`` a run reports), else ``SHARE_AT_ANCHOR`` scaled by (eta / k) / v against
the anchor's (an assumption: the share of |eta acc / k| above v |w| taken to fall as 1 / v),
averaged over the epochs under ``sqrt-epoch`` decay.

``deployment = "worker"``: every worker adds its gradient to its accumulator, filters every
entry, sends the significant ones (8 bytes each) to every peer and scatters theirs in.
``"site"``: the site's workers push dense gradients to its server (its first worker), which
waits for them, filters, exchanges significant entries with the other servers and waits for
theirs, steps, and sends the dense weights back to every worker of its site, who wait for them:
the three steps follow one another (staleness does not apply to them).
"""

from __future__ import annotations

from collections.abc import Sequence

from edgetrain.gossip.config import GaiaSection
from edgetrain.gossip.cost_model import (
    DEFAULT,
    FLOAT,
    Constants,
    Transfer,
    WireTimes,
    check_setting,
    model_entries,
    param_layers,
    wall_s,
    wire_times,
)
from edgetrain.gossip.exchange.bandwidth import members
from edgetrain.gossip.exchange.cost_round import (
    ExchangeShape,
    Msg,
    Round,
    RoundTime,
    compute_work,
    exchange_prediction,
    time_round,
    update_work,
    with_unmodelled,
)
from edgetrain.gossip.exchange.significance import threshold_at
from edgetrain.gossip.exchange.sparse import ENTRY_BYTES
from edgetrain.runtime.predict import Prediction, Setting

# The DLion reproduction (cnn2 on MNIST, 4 workers, eta 0.02, v = 0.01) sent 359 MiB in 625
# iterations x 12 messages: 1.5% of 421,642 entries a message.
SHARE_AT_ANCHOR = 0.015
ANCHOR_STEP_OVER_V = (0.02 / 4) / 0.01


def significant_share(
    gaia: GaiaSection, lr: float, k: int, epochs: int, measured: float | None = None
) -> float:
    """The share of entries a message carries (see the module's docstring)."""
    if measured is not None:
        if not 0 < measured <= 1:
            raise ValueError("a measured significant share is a fraction in (0, 1]")
        return measured
    step = lr / max(1, k)
    shares = [
        min(
            1.0,
            SHARE_AT_ANCHOR
            * step
            / threshold_at(gaia.significance, e, gaia.significance_decay)
            / ANCHOR_STEP_OVER_V,
        )
        for e in range(1, max(1, epochs) + 1)
    ]
    return sum(shares) / len(shares)


def deployment(gaia: GaiaSection, shape: ExchangeShape) -> str:
    """The deployment :meth:`.gaia.Gaia.begin` picks."""
    if gaia.deployment != "auto":
        return gaia.deployment
    groups = members(shape.site_map(), shape.workers)
    several = len(groups) > 1 and any(len(ws) > 1 for ws in groups.values())
    return "site" if several else "worker"


def filter_work(n: int, entries: float, c: Constants) -> dict[str, float]:
    """The accumulator, the weights' copy, the filter over every entry, the significant
    entries' gather (and their zeros left behind), reference seconds."""
    size = n * FLOAT
    return {
        "encode": size * (c.add_s_per_byte + c.copy_s_per_byte)
        + 2 * entries * c.scatter_s_per_entry,
        "select": n * c.significance_s_per_entry,
    }


def worker_round(setting: Setting, shape: ExchangeShape, share: float, c: Constants) -> Round:
    """Every worker its own server (``deployment = "worker"``)."""
    n = model_entries(setting)
    e = share * n
    ws = list(shape.workers)
    msgs = [Msg(p, q, e * ENTRY_BYTES, e * c.scatter_s_per_entry) for p in ws for q in ws if q != p]
    encode = {w: filter_work(n, e, c) for w in ws}
    after = {w: update_work(n, c, param_layers(setting)) for w in ws}
    compute = compute_work(setting, {w: shape.b0 for w in ws}, shape)
    return Round(tuple(ws), compute, encode, with_unmodelled(after, shape), msgs)


def _arrival(
    setting: Setting, senders: Sequence[int], to: int, ready: dict[int, float], wire: WireTimes
) -> float:
    """When the last of ``senders``' messages to ``to`` has arrived."""
    lat = max(setting.link(s, to).latency_s for s in senders)
    return lat + max(
        max(ready[s] + wire.egress[s] for s in senders),
        min(ready[s] for s in senders) + wire.ingress[to],
    )


def site_time(
    setting: Setting, shape: ExchangeShape, share: float, c: Constants
) -> tuple[RoundTime, float]:
    """A server per site (see the module's docstring): the period and the cluster's bytes."""
    n = model_entries(setting)
    size = n * FLOAT
    e = share * n
    groups = [ws for _, ws in sorted(members(shape.site_map(), shape.workers).items())]
    servers = [ws[0] for ws in groups]
    compute = compute_work(setting, {w: shape.b0 for w in shape.workers}, shape)
    work: dict[int, dict[str, float]] = {w: {} for w in shape.workers}

    def wall(w: int, s: float) -> float:
        return wall_s(setting, w, s, c)

    # 1. every worker of a site pushes its dense gradient to the site's server
    push = [Transfer(m, ws[0], size) for ws in groups for m in ws[1:]]
    wire1 = wire_times(setting, push, c.shared_interface)
    ready: dict[int, float] = {}
    for ws in groups:
        for m in ws[1:]:
            work[m]["encode"] = size * c.take_s_per_byte
            work[m]["send"] = size * c.wire_s_per_byte
            ready[m] = wall(m, compute[m] + work[m]["encode"] + work[m]["send"])
    gathered: dict[int, float] = {}
    for ws in groups:
        server, rest = ws[0], ws[1:]
        recv = len(rest) * (size * (c.wire_s_per_byte + c.add_s_per_byte) + c.receive_s_per_message)
        work[server]["receive"] = recv
        gathered[server] = wall(server, compute[server] + recv)
        if rest:
            arrive = _arrival(setting, rest, server, ready, wire1)
            gathered[server] = max(gathered[server], arrive + wall(server, recv / len(rest)))
    # 2. the servers exchange their significant entries and step
    between = [Transfer(a, b, e * ENTRY_BYTES) for a in servers for b in servers if a != b]
    wire2 = wire_times(setting, between, c.shared_interface)
    sent: dict[int, float] = {}
    for s in servers:
        work[s].update(filter_work(n, e, c))
        work[s]["send"] = (len(servers) - 1) * e * ENTRY_BYTES * c.wire_s_per_byte
        encoded = work[s]["encode"] + work[s]["select"] + work[s]["send"]
        sent[s] = gathered[s] + wall(s, encoded)
    done: dict[int, float] = {}
    for ws in groups:
        s, rest = ws[0], ws[1:]
        others = [x for x in servers if x != s]
        per = e * (ENTRY_BYTES * c.wire_s_per_byte + c.scatter_s_per_entry)
        recv2 = len(others) * (per + c.receive_s_per_message)
        work[s]["receive"] += recv2
        work[s]["update"] = update_work(n, c, param_layers(setting))["update"]
        stepped = sent[s] + wall(s, recv2)
        if others:
            last = wall(s, recv2 / len(others))
            stepped = max(stepped, _arrival(setting, others, s, sent, wire2) + last)
        # 3. the weights back to the site's workers
        work[s]["weights"] = size * c.take_s_per_byte + len(rest) * size * c.wire_s_per_byte
        done[s] = stepped + wall(s, work[s]["update"] + work[s]["weights"])
        out = sum(size / setting.link(s, m).bandwidth_Bps for m in rest)  # one after another
        for m in rest:
            work[m]["receive"] = (
                size * (c.wire_s_per_byte + c.copy_s_per_byte) + c.receive_s_per_message
            )
            if c.shared_interface:
                at = done[s] + out
            else:
                at = done[s] + size / setting.link(s, m).bandwidth_Bps
            done[m] = at + setting.link(s, m).latency_s + wall(m, work[m]["receive"])
    if shape.calibration is not None:  # the loop work the constants do not count
        for w in shape.workers:
            work[w]["unmodelled"] = shape.calibration.extra(w)
            done[w] += wall(w, work[w]["unmodelled"])
    speed = {w: setting.devices[w].speed for w in shape.workers}
    own = {w: (compute[w] + sum(work[w].values())) / speed[w] for w in shape.workers}
    period = max(max(done.values()), max(own.values()))
    pull = wire_times(setting, [Transfer(t.dst, t.src, t.nbytes) for t in push], c.shared_interface)
    busiest = max(wire1.busiest + pull.busiest, wire2.busiest)
    latency = max(
        [setting.link(a, b).latency_s for a in shape.workers for b in shape.workers if a != b]
        or [0.0]
    )
    cpu = {w: {k: s / speed[w] for k, s in work[w].items()} for w in shape.workers}
    comp = {w: compute[w] / speed[w] for w in shape.workers}
    nbytes = 2 * len(push) * size + len(between) * e * ENTRY_BYTES
    return RoundTime(period, own, comp, cpu, busiest + latency), nbytes


def predict_gaia(
    setting: Setting,
    shape: ExchangeShape,
    gaia: GaiaSection,
    constants: Constants = DEFAULT,
    measured_share: float | None = None,
) -> Prediction:
    """Gaia's predicted iteration; ``measured_share``: the significant share a run reported
    (else from the threshold)."""
    check_setting(setting, shape.workers)
    k = len(shape.workers)
    share = significant_share(gaia, shape.lr, k, shape.epochs, measured_share)
    source = "measured" if measured_share is not None else f"assumed from v = {gaia.significance:g}"
    n = model_entries(setting)
    if deployment(gaia, shape) == "site":
        rt, nbytes = site_time(setting, shape, share, constants)
        note = (
            f"a server per site: dense pushes and pulls inside sites, {share:.1%} of the "
            f"{n} entries between servers ({source})"
        )
    else:
        rnd = worker_round(setting, shape, share, constants)
        rt = time_round(setting, rnd, constants, gaia.sync, gaia.staleness)
        nbytes = sum(m.nbytes for m in rnd.messages)
        note = f"significant share {share:.1%} of {n} entries to every peer ({source})"
    return exchange_prediction("gaia", setting, rt, nbytes, k * shape.b0, [note])
