"""Layer-by-layer requests are pipelined as a real client would, and the emulated round trip
delays each message without serialising them (issue 28).

In process: a trainer's transmitter against a small shard that answers over a DelayLine with a
50 ms round trip. Five single-layer pulls (and five pushes) sent together take about one round
trip, well under five; answers that arrive in reverse order are applied in the order the
requests went out; a reply naming no request in flight is dropped. The link fit tells the
round trip, paid once a burst, from the per-transmission overhead, and the planner's costs then
carry it once per direction. On a real run, a
layer-by-layer trainer with ``[ps] hold_ms = 50`` pulls its five layers within one round trip
and a bit, and its link fit tells that round trip apart from the per-transmission overhead."""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import zmq

from edgetrain.comm.channel import Traffic
from edgetrain.comm.transport import Transport
from edgetrain.comm.wire import Message
from edgetrain.models import build_model
from edgetrain.plan.costs import LayerCosts
from edgetrain.plan.simulator import simulate
from edgetrain.ps import messages
from edgetrain.ps.delay import IDLE_S, DelayLine
from edgetrain.ps.latency import split_round_trip, with_round_trip
from edgetrain.ps.layout import Layout, build_layout
from edgetrain.ps.transmitter import Transmitter
from tests.helpers.launching import Launch

RTT = 0.050
RUN_ID = "run-pipelined"


def test_a_delay_line_delays_each_action_on_its_own() -> None:
    line = DelayLine()
    done: list[int] = []
    for i in range(5):  # sent 1 ms apart, each due a round trip after it was sent
        line.later(i * 0.001 + RTT, functools.partial(done.append, i))
    line.later(RTT, functools.partial(done.append, 9))  # a tie: after the one added first
    assert line.run_due(0.0) == pytest.approx(RTT)
    assert line.run_due(RTT) == pytest.approx(0.001) and done == [0, 9]
    assert line.run_due(RTT + 0.0035) == pytest.approx(0.0005) and done == [0, 9, 1, 2, 3]
    assert line.run_due(0.0, final=True) == IDLE_S and done == [0, 9, 1, 2, 3, 4]
    assert len(line) == 0


def test_the_round_trip_is_told_apart_from_the_overhead() -> None:
    # a burst per iteration: the leader waits the round trip, the followers only their
    # overhead (0.1 ms) and bytes (10 MB/s)
    sizes = [1_000, 40_000, 400_000, 2_000, 100_000]
    samples = []
    for _ in range(3):
        for i, b in enumerate(sizes):
            samples.append((b, (RTT if i == 0 else 0.0) + 1e-4 + b / 1e7, i == 0))
    split = split_round_trip(samples)
    assert split.rtt == pytest.approx(RTT)
    assert split.samples[0][1] == pytest.approx(1e-4 + 1_000 / 1e7)  # the round trip taken out
    assert split.samples[1:5] == [(b, s) for b, s, _ in samples[1:5]]
    # one transmission per direction (sequential): no follower tells it apart, it stays in dt
    alone = [(400_000, RTT + 0.04, True)] * 4
    assert split_round_trip(alone).rtt == 0.0
    assert split_round_trip(alone).samples == [(400_000, RTT + 0.04)] * 4
    # followers of one size cannot fit a line either
    same = [(1_000, RTT, True), (5_000, 0.0006, False), (5_000, 0.0006, False)] * 3
    assert split_round_trip(same).rtt == 0.0


def test_pipelined_costs_pay_the_round_trip_once_per_direction() -> None:
    sizes, fc, bc = np.array([0.1, 0.2, 0.3]), np.full(3, 0.01), np.full(3, 0.02)
    costs = LayerCosts(sizes, fc, bc, sizes.copy(), dt=0.001)
    piped = with_round_trip(costs, RTT, 2 * RTT)
    assert piped.pt.tolist() == pytest.approx([0.1 + RTT, 0.2, 0.3])
    assert piped.gt.tolist() == pytest.approx([0.1 + 2 * RTT, 0.2, 0.3])
    assert piped.dt == 0.001 and piped.fc.tolist() == costs.fc.tolist()
    # layer by layer: pull j ends at rtt + j*dt + PT[j], not j*(rtt + dt) + PT[j]
    pulls = [s.end for s in simulate(piped, [1, 2], [1, 2]).spans if s.kind == "pull"]
    assert pulls == pytest.approx([RTT + 0.001 + 0.1, RTT + 0.002 + 0.3, RTT + 0.003 + 0.6])
    with pytest.raises(ValueError, match="negative"):
        with_round_trip(costs, -1.0, 0.0)


class Shard(threading.Thread):
    """A one-shard parameter server in a thread: answers every pull (weights filled with the
    segment number) and push (an ack) ``rtt`` after it came, on a DelayLine; ``skew`` answers
    later segments sooner (reverse order)."""

    def __init__(self, layout: Layout, rtt: float, skew: float = 0.0) -> None:
        super().__init__(daemon=True)
        self.layout, self.rtt, self.skew = layout, rtt, skew
        self.transport = Transport(zmq.Context.instance(), RUN_ID, 0, Traffic())
        self.router, self.endpoint = self.transport.bind(zmq.ROUTER, what="test shard")
        self.stopping = threading.Event()
        self.extra: list[Message] = []  # sent once, before the first real answer
        self.line = DelayLine()

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                wait = min(self.line.run_due(time.monotonic()), 0.05)
                if self.router.poll(int(wait * 1000), zmq.POLLIN):
                    got = self.transport.recv(self.router, messages.TO_SERVER, router=True)
                    assert got is not None and got[0] is not None
                    self._answer(got[0], got[1])
        finally:
            self.router.close(linger=0)

    def _answer(self, identity: bytes, msg: Message) -> None:
        meta = {k: msg.meta[k] for k in ("iter", "seg", "req")}
        if msg.type == messages.PULL:
            kind = messages.PARAMS
            seg = float(msg.meta["seg"])
            tensors = {
                n: np.full(self.layout.shapes[n], seg, dtype=np.float32) for n in msg.meta["names"]
            }
        else:
            kind, tensors = messages.ACK, {}
        for stray in self.extra:
            self.transport.send(self.router, stray, identity=identity)
        self.extra = []
        reply = self.transport.message(kind, {**meta, "held_s": 0.0}, tensors)
        due = time.monotonic() + self.rtt - self.skew * int(msg.meta["seg"])
        send = functools.partial(self.transport.send, self.router, reply, identity=identity)
        self.line.later(due, send)


@pytest.fixture
def lenet() -> tuple[Layout, dict[str, torch.Tensor]]:
    model = build_model("lenet5", (1, 28, 28), 10)
    layout = build_layout(model, (1, 28, 28), servers=1)
    assert len(layout.specs) == 5
    return layout, dict(model.named_parameters())


@contextlib.contextmanager
def _running(
    layout: Layout, params: dict[str, torch.Tensor], shard: Shard
) -> Iterator[Transmitter]:
    shard.start()
    transport = Transport(zmq.Context.instance(), RUN_ID, 2, Traffic())
    link = Transmitter(transport, {0: shard.endpoint}, layout, params, reply_timeout_s=20)
    link.start()
    try:
        yield link
    finally:
        link.stop()
        shard.stopping.set()
        shard.join(timeout=10)
        assert not link.is_alive() and not shard.is_alive()


@pytest.mark.timeout(60)
def test_five_layer_pulls_and_pushes_take_about_one_round_trip(
    lenet: tuple[Layout, dict[str, torch.Tensor]],
) -> None:
    layout, params = lenet
    with _running(layout, params, Shard(layout, RTT)) as link:
        t0 = time.perf_counter()
        pulls = [link.pull(0, j, layout.tensors(j, j)) for j in range(1, 6)]
        for j, done in enumerate(pulls, start=1):
            link.wait(done, f"pull {j}")
        pulled = time.perf_counter() - t0
        for j in range(1, 6):  # every layer's weights came from its own answer
            assert all(float(params[n].detach()[0].flatten()[0]) == j for n in layout.tensors(j, j))
        grads = [link.signal() for _ in range(5)]
        t0 = time.perf_counter()
        pushes = [link.push(0, j, layout.tensors(6 - j, 6 - j), grads[j - 1]) for j in range(1, 6)]
        for g in grads:  # the gradients exist: every push may go
            g.set()
        for j, done in enumerate(pushes, start=1):
            link.wait(done, f"push {j}")
        pushed = time.perf_counter() - t0
        # serial transmissions would take 5 round trips each way (250 ms); a busy two-core
        # machine gets a generous bound
        assert RTT <= pulled < 2.5 * RTT, pulled
        assert RTT <= pushed < 2.5 * RTT, pushed
        log = link.log
        assert [(t.direction, t.segment) for t in log] == [("pull", j) for j in range(1, 6)] + [
            ("push", j) for j in range(1, 6)
        ]
        # each direction's first transmission led (it waited the round trip); the others came
        # right behind it and are timed from the end of the one before
        assert [t.lead for t in log] == [True, False, False, False, False] * 2
        for a, b in zip(log, log[1:], strict=False):
            if b.direction == a.direction:
                assert b.start == a.end and b.sent <= a.end
        assert log[0].seconds >= RTT and all(t.seconds < RTT for t in log[1:5])


@pytest.mark.timeout(60)
def test_answers_are_applied_in_request_order_and_strays_dropped(
    lenet: tuple[Layout, dict[str, torch.Tensor]],
) -> None:
    layout, params = lenet
    shard = Shard(layout, RTT, skew=0.008)  # segment 5 answered first, segment 1 last
    stray = shard.transport.message(messages.PARAMS, {"iter": 0, "seg": 1, "req": 999}, {})
    shard.extra = [stray]
    with _running(layout, params, shard) as link:
        order: list[int] = []
        pulls = [link.pull(0, j, layout.tensors(j, j)) for j in range(1, 6)]
        for j, done in enumerate(pulls, start=1):
            link.wait(done, f"pull {j}")
            order.append(j)
        assert [t.segment for t in link.log] == [1, 2, 3, 4, 5]  # applied in request order
        assert [t.end for t in link.log] == sorted(t.end for t in link.log)
        assert link.transport.traffic.dropped["unexpected_reply"] == 1
        assert link.error is None


RECIPE = """
[run]
name = "pipelined"
seed = 1
[data]
dataset = "digits"
[model]
name = "lenet5"
[train]
family = "ps"
technique = "lbl"
epochs = 1
batch_size = 64
lr = 0.05
[ps]
hold_ms = 50
[[workers]]
role = "server"
count = 1
[[workers]]
count = 1
"""


@pytest.mark.timeout(240)
def test_a_layer_by_layer_run_pulls_its_layers_in_about_one_round_trip(tmp_path: Path) -> None:
    recipe = tmp_path / "lbl.toml"
    recipe.write_text(RECIPE)
    launch = Launch(recipe, tmp_path / "runs")
    try:
        code, summary = launch.finish(timeout=200)
    finally:
        launch.kill()
    assert code == 0, launch.stderr
    assert summary is not None and summary["status"] == "completed"
    row = next(r for r in launch.rows if r.get("event") == "epoch" and "iteration_s" in r)
    assert row["forward_cuts"] == [1, 2, 3, 4]
    pulls = [s for s in row["gantt"] if s[0] == "comm" and s[1] == "pull"]
    assert len(pulls) == 5
    # the median iteration's five pulls ended within 2.5 round trips of its start (serially:
    # five round trips); the whole iteration, pushes included, under five
    assert max(s[4] for s in pulls) < 2.5 * RTT, pulls
    assert row["iteration_s"] < 5 * RTT, row["iteration_s"]
    # the link fit told the 50 ms round trip apart from the per-transmission overhead
    pull_rtt, push_rtt = row["rtt_s"]
    assert 0.6 * RTT < pull_rtt < 1.6 * RTT and 0.6 * RTT < push_rtt < 1.6 * RTT, row["rtt_s"]
    assert row["dt_s"] < 0.5 * RTT
