"""Fuzzing a live worker's gossip inbox: it survives, counts every bad message, trains the same."""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import zmq

from edgetrain.comm.wire import MAX_FRAME_BYTES, MAX_HEADER_BYTES, Message, encode
from edgetrain.gossip.node import GOSSIP
from edgetrain.rundir import read_jsonl
from tests.helpers.launching import Launch

RECIPE = """
[run]
name = "fuzz"
seed = 7
[data]
dataset = "digits"
[model]
name = "mlp"
[train]
epochs = 12
batch_size = 16
lr = 0.05
[[workers]]
count = 1
slowdown = 3.0
"""

Frames = list[bytes]
PER_KIND = 1700  # six kinds: 10,200 counted messages, plus a few frames over the size limit
INBOX = re.compile(r"gossip inbox listening on (tcp://\S+)")
READY = re.compile(r"training samples, model")


def _launch(tmp_path: Path) -> Launch:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "recipe.toml").write_text(RECIPE)
    return Launch(tmp_path / "recipe.toml", tmp_path / "runs")


def _wait_for_worker(launch: Launch) -> tuple[str, str]:
    """The run id and the worker's gossip inbox endpoint, once it is ready to train."""
    ready = launch.wait_event(
        lambda r: r.get("event") == "ready" and r.get("worker") == 0, 120, "the worker is ready"
    )
    return str(launch.manifest()["run_id"]), str(ready["endpoints"]["gossip"])


def _valid(rng: random.Random, run_id: str, sender: str = "w0") -> Frames:
    tensors = {"fc.weight": np.full((4, 3), rng.random(), np.float32)}
    msg = Message(GOSSIP, sender, run_id, 1, 1, {"alpha": 0.5}, tensors)
    return [bytes(f) for f in encode(msg)]


def _header(frames: Frames) -> dict[str, object]:
    return dict(json.loads(frames[0]))


def _random(rng: random.Random, run_id: str) -> Frames:
    return [rng.randbytes(rng.randrange(0, 300)) for _ in range(rng.randrange(1, 4))]


def _truncated(rng: random.Random, run_id: str) -> Frames:
    frames = _valid(rng, run_id)
    if rng.random() < 0.5:
        return [frames[0][: rng.randrange(0, len(frames[0]))], *frames[1:]]
    return [frames[0], frames[1][: rng.randrange(0, len(frames[1]))]]


def _oversized(rng: random.Random, run_id: str) -> Frames:
    frames = _valid(rng, run_id)
    head = _header(frames)
    if rng.random() < 0.02:  # a header frame over the header limit
        return [b" " * (MAX_HEADER_BYTES + 1), frames[1]]
    spec = head["tensors"][0]  # type: ignore[index]
    spec.update(shape=[2**20, 2**14], nbytes=2**36, frames=2**36 // MAX_FRAME_BYTES)
    return [json.dumps(head).encode(), frames[1]]


def _wrong_dtype(rng: random.Random, run_id: str) -> Frames:
    frames = _valid(rng, run_id)
    head = _header(frames)
    head["tensors"][0]["dtype"] = rng.choice(["object", "complex128", "<U3", "V8", 7, None])  # type: ignore[index]
    return [json.dumps(head).encode(), frames[1]]


def _wrong_run(rng: random.Random, run_id: str) -> Frames:
    return _valid(rng, f"not-{run_id}-{rng.randrange(10**6)}")


def _stranger(rng: random.Random, run_id: str) -> Frames:
    return _valid(rng, run_id, sender=f"w{rng.randrange(1, 10**6)}")  # a 1-worker run: no peers


KINDS: dict[str, Callable[[random.Random, str], Frames]] = {
    "random": _random,
    "truncated": _truncated,
    "oversized": _oversized,
    "wrong_dtype": _wrong_dtype,
    "wrong_run": _wrong_run,
    "stranger": _stranger,
}


def _fuzz(endpoint: str, run_id: str) -> Counter[str]:
    """Throw every kind of bad message at ``endpoint``; return how many of each were sent."""
    ctx = zmq.Context()
    sent: Counter[str] = Counter()
    try:
        giant = ctx.socket(zmq.PUSH)  # 17 MiB frames: ZeroMQ drops the connection
        giant.connect(endpoint)
        for _ in range(3):
            giant.send_multipart([b"{}", b"\0" * (MAX_FRAME_BYTES + 2**20)], copy=False)
        push = ctx.socket(zmq.PUSH)
        push.setsockopt(zmq.SNDTIMEO, 120_000)
        push.connect(endpoint)
        rng = random.Random(1234)
        plan = [kind for kind in KINDS for _ in range(PER_KIND)]
        rng.shuffle(plan)
        for kind in plan:
            push.send_multipart(KINDS[kind](rng, run_id))
            sent[kind] += 1
        push.close(linger=120_000)  # returns once everything is handed to the worker
    finally:
        ctx.destroy(linger=0)
    return sent


def _finish(launch: Launch) -> dict[str, object]:
    try:
        code, summary = launch.finish(timeout=120)
    finally:
        launch.kill()
    assert code == 0 and summary is not None, launch.stderr
    return summary


def _trajectory(runs: Path) -> list[tuple[object, ...]]:
    (run,) = [p for p in runs.iterdir() if p.is_dir()]
    events = read_jsonl(run / "metrics" / "worker-0.jsonl")
    return [
        (e["epoch"], e["loss"], e.get("test_accuracy"), e.get("test_loss"))
        for e in events
        if e["event"] == "epoch"
    ]


@pytest.mark.timeout(300)
def test_a_fuzzed_worker_survives_counts_everything_and_trains_the_same(tmp_path: Path) -> None:
    clean_run = _launch(tmp_path / "clean")
    fuzzed_run = _launch(tmp_path / "fuzzed")
    clean_runs, fuzzed_runs = tmp_path / "clean" / "runs", tmp_path / "fuzzed" / "runs"
    try:
        run_id, endpoint = _wait_for_worker(fuzzed_run)
        sent = _fuzz(endpoint, run_id)
        assert sum(sent.values()) >= 10_000
        fuzzed, clean = _finish(fuzzed_run), _finish(clean_run)
    finally:
        for launch in (clean_run, fuzzed_run):
            launch.kill()

    assert fuzzed["status"] == clean["status"] == "completed"
    (run,) = [p for p in fuzzed_runs.iterdir() if p.is_dir()]
    final = [e for e in read_jsonl(run / "metrics" / "worker-0.jsonl") if e["event"] == "final"]
    dropped: dict[str, int] = final[0]["dropped"]
    # every message that reached the worker was counted, by reason ...
    assert sum(dropped.values()) == sum(sent.values()), (dropped, sent)
    assert dropped["wrong_run"] == sent["wrong_run"]
    assert dropped["unknown_peer"] == sent["stranger"]
    assert dropped["bad_dtype"] == sent["wrong_dtype"]
    assert dropped["too_large"] + dropped["header_too_large"] == sent["oversized"]
    assert final[0]["gossip_merged"] == 0  # none of it got through as gossip
    # ... and by the sender it claimed (bounded: a flood of names cannot grow it without end)
    by_peer: dict[str, dict[str, int]] = final[0]["dropped_by_peer"]
    assert by_peer["w0"]["bad_dtype"] == sent["wrong_dtype"]
    assert by_peer["unknown"]["bad_json"] > 0 and len(by_peer) <= 65
    # the training itself is bit-for-bit the run nobody attacked
    assert _trajectory(fuzzed_runs) == _trajectory(clean_runs)
    fw, cw = fuzzed["workers"][0], clean["workers"][0]  # type: ignore[index]
    assert fw["final_test_accuracy"] == cw["final_test_accuracy"]
    assert fuzzed["averaged_test_accuracy"] == clean["averaged_test_accuracy"]
