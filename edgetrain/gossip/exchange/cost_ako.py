"""Ako's cost model (DLion's baseline, :mod:`.ako`): p partitions, one slice of the sum of the
last p gradients to every peer per iteration, timed as one round of the exchange loop
(:mod:`.cost_round`). Pure.

p is the recipe's ``partitions``, else what the worker computes
(:func:`.partitions.partition_count`): from the recipe's link rate (the WAN's when there are
sites, else the LAN's), not the setting's, and t_iter, one iteration's compute at b0 on the
slowest worker. A worker keeps a copy of each gradient in its window, adds the slice of the
last p (n entries in all) and takes it as float32; every peer adds the slice in.
"""

from __future__ import annotations

import math

from edgetrain.gossip.config import AkoSection
from edgetrain.gossip.cost_model import (
    DEFAULT,
    FLOAT,
    Constants,
    check_setting,
    model_entries,
    param_layers,
    step_compute_s,
)
from edgetrain.gossip.exchange.bandwidth import MBIT
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
from edgetrain.gossip.exchange.partitions import partition_count
from edgetrain.gossip.exchange.sparse import DENSE_BYTES
from edgetrain.runtime.predict import Prediction, Setting


def partitions(setting: Setting, shape: ExchangeShape, ako: AkoSection) -> int:
    """p as :meth:`.ako.Ako.begin` computes it."""
    n = model_entries(setting)
    if ako.partitions is not None:
        return min(ako.partitions, n)
    t_iter = max(step_compute_s(setting, w, shape.b0, shape.b0) for w in shape.workers)
    several = len({s or "" for s in shape.site_map().values()}) > 1
    bottleneck = (ako.wan_mbit if several else ako.lan_mbit) * MBIT
    return min(n, partition_count(len(shape.workers), n * FLOAT, bottleneck, t_iter, n))


def ako_round(setting: Setting, shape: ExchangeShape, p: int, c: Constants) -> Round:
    n = model_entries(setting)
    size = n * FLOAT
    part = math.ceil(n / p)
    ws = list(shape.workers)
    apply = part * FLOAT * c.add_s_per_byte
    msgs = [Msg(a, b, part * DENSE_BYTES, apply) for a in ws for b in ws if b != a]
    window = size * (c.copy_s_per_byte + c.add_s_per_byte) + part * FLOAT * c.take_s_per_byte
    encode = {w: {"encode": window} for w in ws}
    after = {w: update_work(n, c, param_layers(setting)) for w in ws}
    compute = compute_work(setting, {w: shape.b0 for w in ws}, shape)
    return Round(tuple(ws), compute, encode, with_unmodelled(after, shape), msgs)


def predict_ako(
    setting: Setting, shape: ExchangeShape, ako: AkoSection, constants: Constants = DEFAULT
) -> Prediction:
    """Ako's predicted iteration."""
    check_setting(setting, shape.workers)
    p = partitions(setting, shape, ako)
    rnd = ako_round(setting, shape, p, constants)
    rt = time_round(setting, rnd, constants, ako.sync, ako.staleness)
    nbytes = sum(m.nbytes for m in rnd.messages)
    source = "the recipe's" if ako.partitions is not None else "from the recipe's link rate"
    note = f"p = {p} partitions ({source}): 1/{p} of the gradient to every peer an iteration"
    return exchange_prediction("ako", setting, rt, nbytes, len(shape.workers) * shape.b0, [note])
