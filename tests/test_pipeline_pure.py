"""The pipeline family's pure parts against literal tables and brute force: the per-stage
operation order and versions (specification §5.1), the pipeline simulator (T2), the min-max
partitioner (§9.5), the memory formulas (§7.3, §7.5), the data order, the message checks, the
plan file and the report."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest

from edgetrain.comm.wire import Message
from edgetrain.errors import RecipeError
from edgetrain.pipeline import bounds, feed, messages, schedule
from edgetrain.pipeline.partition import PartitionError, bounds_of, partition
from edgetrain.pipeline.partition_file import bounds_from_plan
from edgetrain.pipeline.stage_report import pipeline_report
from edgetrain.report.clock import Point
from edgetrain.report.summary import family_accuracy
from tests.helpers.vision import needs_torchvision

# ------------------------------------------------------------------ T1: orders and versions

# (s, N, M, e) -> the specification's notation: op, microbatch, @ the version it uses
TABLES = {
    (0, 1, 4, 0): "F0@0 B0@0 F1@1 B1@1 F2@2 B2@2 F3@3 B3@3",
    (0, 2, 8, 0): "F0@0 F1@0 B0@0 F2@1 B1@0 F3@2 B2@1 F4@3 B3@2 F5@4 B4@3 F6@5 B5@4 F7@6 B6@5 B7@6",
    (1, 2, 8, 0): "F0@0 B0@0 F1@1 B1@1 F2@2 B2@2 F3@3 B3@3 F4@4 B4@4 F5@5 B5@5 F6@6 B6@6 F7@7 B7@7",
    # N = 3, e = 0, M = 8: the specification's §5.1 table, verbatim
    (0, 3, 8, 0): "F0@0 F1@0 F2@0 B0@0 F3@1 B1@0 F4@2 B2@0 F5@3 B3@1 F6@4 B4@2 F7@5 B5@3 B6@4 B7@5",
    (1, 3, 8, 0): "F0@0 F1@0 B0@0 F2@1 B1@0 F3@2 B2@1 F4@3 B3@2 F5@4 B4@3 F6@5 B5@4 F7@6 B6@5 B7@6",
    (2, 3, 8, 0): "F0@0 B0@0 F1@1 B1@1 F2@2 B2@2 F3@3 B3@3 F4@4 B4@4 F5@5 B5@5 F6@6 B6@6 F7@7 B7@7",
    (0, 3, 8, 1): "F0@0 F1@0 F2@0 F3@0 B0@0 F4@1 B1@0 F5@2 B2@0 F6@3 B3@0 F7@4 B4@1 B5@2 B6@3 B7@4",
    (2, 3, 8, 1): "F0@0 F1@0 B0@0 F2@1 B1@0 F3@2 B2@1 F4@3 B3@2 F5@4 B4@3 F6@5 B5@4 F7@6 B6@5 B7@6",
    (0, 4, 6, 0): "F0@0 F1@0 F2@0 F3@0 B0@0 F4@1 B1@0 F5@2 B2@0 B3@0 B4@1 B5@2",
    (3, 4, 6, 0): "F0@0 B0@0 F1@1 B1@1 F2@2 B2@2 F3@3 B3@3 F4@4 B4@4 F5@5 B5@5",
}


@pytest.mark.parametrize("key", sorted(TABLES))
def test_each_stage_order_and_versions_match_the_literal_tables(key: tuple[int, ...]) -> None:
    s, n, m, e = key
    assert schedule.table(s, n, m, e) == TABLES[key]
    # mcPipe uses exactly PipeDream's versions (its backward's version is the base)
    assert schedule.table(s, n, m, e, store="pairs") == TABLES[key]


def test_greedy_backwards_use_the_newest_version() -> None:
    # stage 0 of 3: B_j uses version j (every earlier backward applied); PipeDream's j - 2
    got = schedule.versions(0, 3, 8, store="latest")
    assert [v for op, v in got if op.kind == "B"] == list(range(8))
    stashed = schedule.versions(0, 3, 8)
    assert [v for op, v in stashed if op.kind == "B"] == [max(0, j - 2) for j in range(8)]


def test_the_uniform_window_of_one_is_stop_and_wait_at_every_stage() -> None:
    for s in range(3):
        assert schedule.table(s, 3, 3, uniform=1) == "F0@0 B0@0 F1@1 B1@1 F2@2 B2@2"


def test_an_epoch_shorter_than_the_window_runs_every_forward_then_every_backward() -> None:
    assert schedule.table(0, 4, 2) == "F0@0 F1@0 B0@0 B1@0"


# ------------------------------------------------------------------ T2: no deadlock, bounded


def test_every_order_completes_with_bounded_queues_and_the_ideal_makespan() -> None:
    for n in range(1, 7):
        for m in range(1, 21):
            for e in range(4):
                sim = schedule.simulate(n, m, e)
                for (s, direction), queued in sim.max_queued.items():
                    receiver = s + 1 if direction == "act" else s - 1
                    assert queued <= schedule.in_flight(receiver, n, e), (n, m, e, s)
                if e == 0 and m >= n:
                    assert sim.makespan == 2 * m + 2 * (n - 1), (n, m)


# ------------------------------------------------------------------ the partitioner


def _brute(units: int, stages: int, cost, tol: float = 1e-9):
    """Every cut set: the smallest bottleneck, then squared sum (within tol), then cuts."""
    best = None
    for cuts in itertools.combinations(range(1, units), stages - 1):
        edges = (0, *cuts, units)
        costs = [cost(edges[s], edges[s + 1], s) for s in range(stages)]
        if any(math.isinf(c) for c in costs):
            continue
        best_key = (max(costs), sum(c * c for c in costs))
        if best is None or best_key[0] < best[0][0]:
            best = (best_key, [(cuts, costs)])
        elif best_key[0] == best[0][0]:
            best[1].append((cuts, costs))
    if best is None:
        return None
    candidates = best[1]
    low = min(sum(c * c for c in costs) for _, costs in candidates)
    ok = [cuts for cuts, costs in candidates if sum(c * c for c in costs) <= low * (1 + tol) + tol]
    return min(ok)


def test_the_partitioner_matches_brute_force_on_random_instances() -> None:
    rng = random.Random(7)
    checked = 0
    for trial in range(400):
        units = rng.randint(1, 10)
        stages = rng.randint(1, min(4, units))
        w = [rng.choice([rng.randint(1, 9), rng.random() * 10]) for _ in range(units)]
        speed = [rng.choice([1.0, 1.5, 2.0]) for _ in range(stages)]
        caps = [rng.choice([None, 12.0, 20.0]) for _ in range(stages)]

        def cost(i: int, k: int, s: int, w=w, speed=speed, caps=caps) -> float:
            load = math.fsum(w[i:k]) * speed[s]
            return math.inf if caps[s] is not None and load > caps[s] else load

        want = _brute(units, stages, cost)
        if want is None:
            with pytest.raises(PartitionError):
                partition(units, stages, cost)
            continue
        got = partition(units, stages, cost)
        assert got.cuts == want, (trial, w, speed, caps)
        checked += 1
    assert checked > 200


def test_torchgpipes_literal_case() -> None:
    costs = [1, 2, 3, 4, 5, 6]
    got = partition(6, 2, lambda i, k, s: float(sum(costs[i:k])))
    assert got.sizes == [4, 2] and got.bottleneck == 11


def test_ties_go_to_the_evenest_then_the_earliest_cuts() -> None:
    ones = [1.0] * 4
    # bottleneck 2 either way for [1,1 | 1,1]; 3 stages of 4 units: [2,1,1] vs [1,2,1] vs
    # [1,1,2] tie on both keys: the lexicographically smallest cut vector wins
    got = partition(4, 3, lambda i, k, s: math.fsum(ones[i:k]))
    assert got.cuts == (1, 2) and got.sizes == [1, 1, 2]


def test_an_infeasible_partition_says_so() -> None:
    with pytest.raises(PartitionError, match="3 stages cannot share 2 units"):
        partition(2, 3, lambda i, k, s: 1.0)
    with pytest.raises(PartitionError, match="no partition fits"):
        partition(
            3,
            2,
            lambda i, k, s: (
                math.inf if k - i > 1 and s == 0 else 1.0 * (k - i) + (math.inf if k - i > 1 else 0)
            ),
        )


@needs_torchvision
def test_vgg16_by_parameters_reproduces_the_specifications_cuts() -> None:
    """§7.5: N = 2 by params cuts after fc1, N = 3 puts every conv, fc1, fc2-fc3 apart."""
    import torch

    from edgetrain.models import build_model
    from edgetrain.pipeline.chain import build_units
    from edgetrain.pipeline.predict import Shape, choose, stage_memory, store_of, unit_layers
    from edgetrain.pipeline.table import unit_table
    from edgetrain.runtime.predict import Device, Link, Setting

    with torch.device("meta"):
        model = build_model("vgg16", (1, 28, 28), 10)
    infos = unit_table(build_units(model, "vgg16"), (1, 28, 28))
    assert len(infos) == 16 and infos[0].pair_elems * 16 / infos[0].params == 1664
    names = [u.name for u in infos]
    pairs = tuple(u.pair_elems for u in infos)

    def shape(n: int) -> Shape:
        return Shape(tuple(range(n)), [(0, 16)] * n, 16, store_of("mcpipe"), pair_elems=pairs)

    def setting(n: int) -> Setting:
        return Setting(
            tuple(Device(f"s{s}") for s in range(n)), (Link(1e9),), unit_layers(infos, 16)
        )

    for n, first in ((2, ["1.classifier.3"]), (3, ["1.classifier.0", "1.classifier.3"])):
        got = choose(setting(n), shape(n), "params", infos)
        assert [names[lo] for lo, _ in got.bounds[1:]] == first
    got = choose(setting(2), shape(2), "params", infos)
    cut = Shape((0, 1), got.bounds, 16, "pairs", pair_elems=pairs)
    mib = [round(stage_memory(infos, cut, s).resident / 2**20) for s in range(2)]
    assert mib == [478, 64]  # the specification's table: 478 (mcPipe) and 64 MiB


# ------------------------------------------------------------------ memory formulas


def test_the_formulas_give_the_specifications_mlp_figures() -> None:
    """§7.5, FC-heavy MLP 784-2048-2048-2048-10, N = 3, stage 0 = [L1 L2], b = 16."""
    l1 = bounds.UnitSize(784 * 2048 + 2048, 784 + 2048)
    l2 = bounds.UnitSize(2048 * 2048 + 2048, 2048 + 2048)
    stage0 = [l1, l2]
    floats = {m: (bounds.resident("versions", m, stage0, 16) / 4,
                  bounds.resident("pairs", m, stage0, 16) / 4) for m in (3, 4)}  # fmt: skip
    assert round(floats[3][0] / 1e6, 2) == 17.41 and round(floats[3][1] / 1e6, 2) == 6.03
    assert round(floats[4][0] / 1e6, 2) == 23.22 and round(floats[4][1] / 1e6, 2) == 6.14
    assert round(floats[3][0] / floats[3][1], 2) == 2.89
    assert round(floats[4][0] / floats[4][1], 2) == 3.78
    # the theorem's bound, N = 3 stage 0 at b = 1: P + 4 sqrt(P) floats, exceeded by the pairs
    p = l1.params + l2.params
    assert p == 5_804_032
    assert round(bounds.paper_bound(p * 3, 3, 3) / 4) == 5_813_669  # P + 4 sqrt(P)
    assert bounds.resident("pairs", 3, stage0, 1) / 4 == 5_817_888  # the pairs need more
    assert bounds.resident("latest", 3, stage0, 16) == 4 * p
    # mcPipe-auto keeps the cheaper form per unit; momentum adds one copy
    last = bounds.UnitSize(2048 * 10 + 10, 2048 + 10)
    assert bounds.resident("auto", 4, [last], 16) == 4 * 4 * last.params
    assert bounds.resident("versions", 2, [l1], 16, momentum=True) == 4 * 3 * l1.params


# ------------------------------------------------------------------ data order


def test_every_technique_draws_the_same_microbatches() -> None:
    a = feed.epoch_order(100, 16, seed=3, epoch=2)
    b = feed.epoch_order(100, 16, seed=3, epoch=2)
    assert len(a) == 6 and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0], feed.epoch_order(100, 16, 3, 1)[0])
    assert len(feed.epoch_order(100, 16, 3, 1, cap=4)) == 4
    halves = [feed.replica_slice(a[0], r, 2) for r in range(2)]
    assert np.array_equal(np.concatenate(halves), a[0])


# ------------------------------------------------------------------ messages


def _act(**over: object) -> Message:
    meta = {"epoch": 1, "mb": 3, "version": 0}
    tensors = {"act": np.zeros((4, 5), np.float32), "labels": np.zeros(4, np.int64)}
    msg = Message(messages.ACT, "w0", "run", meta=meta, tensors=tensors)
    for k, v in over.items():
        setattr(msg, k, v)
    return msg


EXPECT = messages.Expect(messages.ACT, "w0", 1, 3, (4, 5), classes=10)


def test_a_good_activation_passes_and_bad_ones_are_dropped_by_reason() -> None:
    assert messages.problem(_act(), EXPECT) is None
    assert messages.problem(_act(sender="w9"), EXPECT) == "unknown_sender"
    assert messages.problem(_act(meta={"epoch": "1", "mb": 3}), EXPECT) == "bad_meta"
    bad = {"act": np.zeros((4, 5), np.float64), "labels": np.zeros(4, np.int64)}
    assert messages.problem(_act(tensors=bad), EXPECT) == "bad_tensor_dtype"
    bad = {"act": np.zeros((4, 6), np.float32), "labels": np.zeros(4, np.int64)}
    assert messages.problem(_act(tensors=bad), EXPECT) == "bad_tensor_shape"
    bad = {"act": np.zeros((4, 5), np.float32), "labels": np.full(4, 10, np.int64)}
    assert messages.problem(_act(tensors=bad), EXPECT) == "bad_labels"
    assert messages.problem(_act(tensors={"act": np.zeros((4, 5), np.float32)}), EXPECT) == (
        "bad_tensor_names"
    )


def test_a_message_for_another_microbatch_stops_the_stage_naming_both() -> None:
    messages.check_order(_act(), EXPECT, "stage 1")
    with pytest.raises(messages.OutOfOrder, match="waited for the activation of microbatch 3"):
        messages.check_order(_act(meta={"epoch": 1, "mb": 4}), EXPECT, "stage 1")


# ------------------------------------------------------------------ plan file, report


def test_a_plan_is_checked_against_the_model_and_the_stages() -> None:
    doc = {
        "kind": "pipeline-partition",
        "units": [{"name": n} for n in ("a", "b", "c")],
        "stages": [{"units": [0, 2]}, {"units": [2, 3]}],
    }
    assert bounds_from_plan(doc, ["a", "b", "c"], 2, "p.json") == [(0, 2), (2, 3)]
    with pytest.raises(RecipeError, match="another model"):
        bounds_from_plan(doc, ["a", "b"], 2, "p.json")
    with pytest.raises(RecipeError, match="has 2 stages, the recipe has 3"):
        bounds_from_plan(doc, ["a", "b", "c"], 3, "p.json")
    gap = {**doc, "stages": [{"units": [0, 1]}, {"units": [2, 3]}]}
    with pytest.raises(RecipeError, match="not contiguous"):
        bounds_from_plan(gap, ["a", "b", "c"], 2, "p.json")
    assert bounds_of([3, 1]) == ((0, 3), (3, 4))


def test_the_report_tables_stages_and_fills_the_epoch_curve_from_snapshots() -> None:
    manifest = {"workers": [{"id": 0, "role": "stage"}, {"id": 1, "role": "evaluator"}]}
    stage = {
        "event": "final", "technique": "mcpipe", "role_name": "stage", "role_index": 0,
        "units": ["1", "3"], "store_modes": ["pairs", "pairs"], "m": 3, "bytes_sent": 2**20,
        "train_clock_s": 10.0,
        "timers": {"compute_s": 6.0, "wait_s": 3.0, "replay_s": 1.0},
        "memory": {"resident_bytes": 3 * 2**20, "rss_delta_bytes": 5 * 2**20},
        "formulas": {"resident_bytes": 3 * 2**20, "paper_bound_bytes": 2 * 2**20},
        "links": {"sent": {"act": 2**19}, "arrived": {"grad": {"rate_bps": 8e6}}},
    }  # fmt: skip
    snaps = [
        {"snap": 5, "epoch": 1, "microbatches": 5, "train_s": 1.0, "epoch_end": False,
         "test_accuracy": 0.5},
        {"snap": 10, "epoch": 1, "microbatches": 10, "train_s": 2.0, "epoch_end": True,
         "test_accuracy": 0.7},
    ]  # fmt: skip
    rows = {0: [stage], 1: [{"event": "final", "snapshots": snaps}]}
    rep = pipeline_report(manifest, rows)
    assert rep is not None
    row = rep["stages"][0]
    assert row["busy"] == 0.6 and row["bubble"] == 0.3
    assert row["replay_share"] == pytest.approx(0.2) and row["replay_expected"] == 2 / 3
    assert rep["epoch_accuracy"] == {"1": 0.7}
    # bytes sent in all, then to the next stage and the one before; arrival rates per inbox
    want = "| stage 0 | 1..3 (2) | pairs | 3 | 60% | 30% | 1.00 (0.50 / -) | - / 8.0 |"
    assert want in rep["markdown"]
    curve = family_accuracy([Point(1, 2.0, 2.5, None, 1), Point(2, 4.0, 5.0, None, 1)], rep)
    assert [p.accuracy for p in curve] == [0.7, None]


def test_the_budget_stops_after_the_epoch_the_slowest_clock_passes_it() -> None:
    from edgetrain.pipeline.family import stop_after

    reports = [{"train_clock_s": 9.0}, {"train_clock_s": 10.5}, {"train_clock_s": None}]
    assert stop_after(10.0, reports) and not stop_after(11.0, reports)
    assert not stop_after(None, reports) and not stop_after(1.0, [{}, {"train_clock_s": True}])


def test_an_inbox_rate_is_what_arrived_after_the_first_message_over_the_span() -> None:
    from edgetrain.pipeline.stage_channels import Arrivals

    a = Arrivals()
    assert a.as_dict()["rate_bps"] is None
    for k in range(5):  # 1,000 bytes every 0.1 s: the first only opens the span
        a.add(10.0 + 0.1 * k, 1000)
    got = a.as_dict()
    assert got["messages"] == 5 and got["bytes_after_first"] == 4000
    assert got["span_s"] == pytest.approx(0.4) and got["rate_bps"] == pytest.approx(80_000)
    assert got["busy_rate_bps"] is None  # no sender stamps


def test_the_links_busy_time_is_the_union_of_each_messages_sent_to_arrived_interval() -> None:
    from edgetrain.pipeline.stage_channels import Arrivals

    a = Arrivals()
    # two messages queued back to back (the second handed over before the first arrived), a
    # pause, then one alone; a stamp later than the arrival (clocks apart) is not counted
    for sent, arrived in ((0.0, 0.1), (0.05, 0.2), (1.0, 1.1), (2.0, 1.9)):
        a.add(arrived, 1000, sent, arrived)
    got = a.as_dict()
    assert got["busy_s"] == pytest.approx(0.3) and got["bytes_stamped"] == 3000
    assert got["busy_periods"] == 2 and got["idle_gaps_s"] == [pytest.approx(0.8)]
    assert got["busy_rate_bps"] == pytest.approx(8 * 3000 / 0.3)


def test_an_inbox_lists_its_first_idle_gaps_and_sums_the_rest() -> None:
    from edgetrain.pipeline.stage_channels import MAX_GAPS, Arrivals
    from reproductions.mcpipe_claims import link_efficiency

    a = Arrivals()
    for k in range(MAX_GAPS + 11):  # one message a second, each on the link for 0.5 s
        a.add(k + 0.5, 1000, float(k), k + 0.5)
    got = a.as_dict()
    assert len(got["idle_gaps_s"]) == MAX_GAPS and got["idle_gaps_more"] == 10
    assert got["idle_gaps_more_s"] == pytest.approx(5.0)
    # the gaps past the list refill at most what they could together: a lower bound still
    listed = dict(got, idle_gaps_more=0, idle_gaps_more_s=0.0)
    whole = link_efficiency(got, 1e5, 100)
    assert whole is not None and whole < link_efficiency(listed, 1e5, 100)  # type: ignore[operator]
