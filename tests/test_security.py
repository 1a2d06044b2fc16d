"""CURVE security: key generation, refusal of bad keys, and sockets that shut strangers out."""

from __future__ import annotations

import contextlib
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zmq
from typer.testing import CliRunner

from edgetrain.cli import keys_cmd
from edgetrain.comm import channel, protocol, sockets
from edgetrain.comm.channel import Traffic
from edgetrain.comm.client import CoordinatorClient
from edgetrain.comm.control import assign_roles
from edgetrain.comm.coordinator import Coordinator
from edgetrain.comm.security import (
    CurveKeys,
    SecurityConfig,
    SecurityError,
    generate_keys,
    load_keys,
    security_config,
)
from edgetrain.comm.transport import Transport
from edgetrain.comm.wire import MAX_FRAME_BYTES, Message
from edgetrain.gossip.family import FAMILY
from edgetrain.gossip.node import GOSSIP, GossipNode
from edgetrain.recipe import parse_recipe
from edgetrain.tomlconfig import loads
from tests.helpers.cli import run_cli

RUN = "run-s"


@pytest.fixture
def keys(tmp_path: Path) -> CurveKeys:
    generate_keys(tmp_path / "keys")
    loaded = load_keys(SecurityConfig("curve", tmp_path / "keys"))
    assert loaded is not None
    return loaded


@pytest.fixture
def ctx() -> Iterator[zmq.Context]:
    c = zmq.Context()
    yield c
    c.destroy(linger=0)


def _gossip(sender: str, value: float) -> Message:
    return Message(GOSSIP, sender, RUN, 1, 1, {"alpha": 0.5},
                   {"x": np.full(4, value, np.float32)})  # fmt: skip


def test_generate_writes_private_key_files_that_load(tmp_path: Path) -> None:
    written = generate_keys(tmp_path / "k")
    assert sorted(p.name for p in written) == sorted(
        ["server.key", "server.key_secret", "client.key", "client.key_secret"]
    )
    assert stat.S_IMODE((tmp_path / "k").stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in written)
    assert "secret-key" not in (tmp_path / "k" / "client.key").read_text()
    keys = load_keys(SecurityConfig("curve", tmp_path / "k"))
    assert keys is not None and zmq.curve_public(keys.client_secret) == keys.client_public
    assert keys.server_public != keys.client_public
    with pytest.raises(SecurityError, match="--force"):
        generate_keys(tmp_path / "k")
    generate_keys(tmp_path / "k", force=True)
    assert load_keys(SecurityConfig("curve", tmp_path / "k")) != keys


def test_missing_or_broken_keys_are_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(SecurityError, match="edgetrain keys generate"):
        load_keys(SecurityConfig("curve", tmp_path / "absent"))
    generate_keys(tmp_path / "k")
    (tmp_path / "k" / "client.key_secret").write_text("garbage\n")
    with pytest.raises(SecurityError, match="edgetrain keys generate"):
        load_keys(SecurityConfig("curve", tmp_path / "k"))
    with pytest.raises(SecurityError, match="unknown security mode"):
        SecurityConfig("tls")
    assert load_keys(SecurityConfig()) is None


def test_security_config_resolves_keys_relative_to_the_recipe(tmp_path: Path) -> None:
    assert security_config("none", "k", tmp_path) == SecurityConfig("none")
    assert security_config("curve", None, tmp_path).keys_dir == tmp_path / "keys"
    assert security_config("curve", "/abs/k", tmp_path).keys_dir == Path("/abs/k")


def test_keys_generate_command(tmp_path: Path) -> None:
    runner = CliRunner()
    out = runner.invoke(keys_cmd.app, ["generate", str(tmp_path / "k"), "--format", "json"])
    assert out.exit_code == 0, out.output
    assert '"files"' in out.output and (tmp_path / "k" / "server.key_secret").is_file()
    again = runner.invoke(keys_cmd.app, ["generate", str(tmp_path / "k")])
    assert isinstance(again.exception, SecurityError)


def test_keys_generate_through_the_edgetrain_cli(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = run_cli(capsys, "keys", "generate", str(tmp_path / "k"))
    assert code == 0 and "wrote 4 key files" in out
    code, _, err = run_cli(capsys, "keys", "generate", str(tmp_path / "k"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--force" in err


def test_worker_refuses_to_start_without_readable_keys(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "edgetrain", "worker", "--coordinator", "tcp://127.0.0.1:9",
         "--worker-id", "0", "--run-id", RUN, "--keys", str(tmp_path / "nokeys")],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "edgetrain keys generate" in lines[0], done.stderr


def test_a_gossip_inbox_takes_only_messages_from_key_holders(
    ctx: zmq.Context, keys: CurveKeys
) -> None:
    node = GossipNode(Transport(ctx, RUN, 1, Traffic(), keys))
    honest = GossipNode(Transport(ctx, RUN, 0, Traffic(), keys))
    plain = sockets.client(ctx, zmq.PUSH)  # no CURVE at all
    stranger = zmq.curve_keypair()  # CURVE with the server's public key but a foreign client key
    forger = sockets.client(ctx, zmq.PUSH, CurveKeys(keys.server_public, b"", *stranger))
    try:
        node.connect({0: honest.endpoint})
        for sock in (plain, forger):
            sock.connect(node.endpoint)
            for _ in range(20):  # queued on our side; the handshake never lets them through
                with contextlib.suppress(zmq.Again):
                    channel.send(sock, _gossip("w0", -1.0), flags=zmq.NOBLOCK)
        honest.connect({1: node.endpoint})
        assert honest.send(1, _gossip("w0", 7.0))
        got: list[Message] = []
        while not got:
            assert node.inbox.poll(10_000)
            got = node.receive_all()
        assert [float(m.tensors["x"][0]) for m in got] == [7.0]
        assert not node.inbox.poll(300)
        assert node.traffic.messages_received == 1 and not node.traffic.dropped
    finally:
        for sock in (plain, forger):
            sock.close(0)
        node.close()
        honest.close()


def test_full_16_mib_frames_cross_an_encrypted_link(ctx: zmq.Context, keys: CurveKeys) -> None:
    inbox = sockets.server(ctx, zmq.PULL, keys)
    push = sockets.client(ctx, zmq.PUSH, keys)
    try:
        push.connect(channel.bind_random(inbox))
        big = np.arange((MAX_FRAME_BYTES * 2 + 4096) // 4, dtype=np.float32)  # 3 frames
        channel.send(push, Message(GOSSIP, "w0", RUN, tensors={"big": big}))
        assert inbox.poll(30_000)
        got = channel.recv(inbox, RUN)
        assert got is not None
        np.testing.assert_array_equal(got[1].tensors["big"], big)
    finally:
        push.close(0)
        inbox.close(0)


def test_two_runs_in_one_process_accept_only_their_own_clients(
    ctx: zmq.Context, keys: CurveKeys, tmp_path: Path
) -> None:
    generate_keys(tmp_path / "other")
    other = load_keys(SecurityConfig("curve", tmp_path / "other"))
    assert other is not None
    inboxes = [sockets.server(ctx, zmq.PULL, k) for k in (keys, other)]
    endpoints = [channel.bind_random(s) for s in inboxes]
    # the other run's client knows our server key, yet its client key is not ours
    crossed = CurveKeys(keys.server_public, b"", other.client_public, other.client_secret)
    senders = [sockets.client(ctx, zmq.PUSH, k) for k in (crossed, keys, other)]
    try:
        for sock, endpoint, value in zip(
            senders, [endpoints[0], *endpoints], [-1.0, 1.0, 2.0], strict=True
        ):
            sock.connect(endpoint)
            channel.send(sock, _gossip("w0", value))
        got = []
        for inbox in inboxes:
            assert inbox.poll(10_000)
            msg = channel.recv(inbox, RUN)
            assert msg is not None
            got.append(float(msg[1].tensors["x"][0]))
        assert got == [1.0, 2.0] and not inboxes[0].poll(300)
    finally:
        for sock in [*senders, *inboxes]:
            sock.close(0)


def test_the_coordinator_hears_only_clients_with_the_key(ctx: zmq.Context, keys: CurveKeys) -> None:
    coord = Coordinator(RUN, {}, assign_roles(["trainer"]), context=ctx, security=keys)
    outsider = CoordinatorClient(ctx, coord.endpoint, 0, RUN, Traffic())
    member = CoordinatorClient(ctx, coord.endpoint, 0, RUN, Traffic(), security=keys)
    try:
        outsider.send(protocol.REGISTER, {"host": "evil", "pid": 1})
        member.send(protocol.REGISTER, {"host": "good", "pid": 2})
        events = []
        while not events:
            events = [e for e in coord.poll(10_000) if e.kind == "registered"]
        assert [e.data["host"] for e in events] == ["good"]
        assert not [e for e in coord.poll(300) if e.kind == "registered"]
        assert coord.traffic.messages_received == 1
    finally:
        outsider.close()
        member.close()
        coord.close()


E2E_RECIPE = """
[run]
name = "secure"
seed = 2
security = "curve"
[data]
dataset = "digits"
[model]
name = "mlp"
[train]
epochs = 4
batch_size = 16
lr = 0.05
[gossip]
probability = 0.5
[[workers]]
count = 2
"""


@pytest.mark.timeout(120)
def test_an_encrypted_run_trains_and_shuts_out_a_plain_sender(
    ctx: zmq.Context, keys: CurveKeys, tmp_path: Path
) -> None:
    recipe = parse_recipe(loads(E2E_RECIPE))
    roles = assign_roles(recipe.role_names())
    policy, controller = FAMILY.policy(recipe), FAMILY.controller(recipe, roles, tmp_path)
    coord = Coordinator(
        RUN, recipe.to_dict(), roles, policy, controller, context=ctx, security=keys, epochs=4
    )
    logs = [(tmp_path / f"worker-{i}.log").open("w") for i in range(2)]
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "edgetrain",
                "worker",
                "--coordinator",
                coord.endpoint,
                "--worker-id",
                str(i),
                "--run-id",
                RUN,
                "--keys",
                str(tmp_path / "keys"),
            ],
            stdin=subprocess.PIPE,
            stdout=logs[i],
            stderr=subprocess.STDOUT,
        )
        for i in range(2)
    ]
    plain = sockets.client(ctx, zmq.PUSH)
    member = sockets.client(ctx, zmq.PUSH, keys)
    try:
        deadline = time.monotonic() + 100
        attacked = False
        finals: dict[int, dict] = {}
        while not coord.finished and time.monotonic() < deadline:
            events = coord.poll(200)
            assert not [e for e in events if e.kind in ("failed", "error")], events
            finals.update({e.worker: e.data for e in events if e.kind == "final"})
            exited = [p.returncode for p in workers if p.poll() is not None]
            assert coord.phase == "draining" or not exited, f"a worker exited early: {exited}"
            if not attacked and coord.phase == "training":
                attacked = True
                for sock, run in ((plain, "plain-sender"), (member, "key-holder")):
                    sock.connect(coord.workers[1].endpoints["gossip"])  # worker 1's inbox
                    channel.send(sock, Message(GOSSIP, "w0", run, meta={"alpha": 0.1}))
        worker_logs = [(tmp_path / f"worker-{i}.log").read_text()[-1500:] for i in range(2)]
        assert coord.finished, f"run stuck in phase {coord.phase}: {worker_logs}"
        assert sorted(coord.finals) == sorted(finals) == [0, 1]
        assert sum(f["gossip_merged"] for f in finals.values()) > 0  # gossip over CURVE
        dropped = finals[1]["dropped_by_peer"]
        # the key holder's bad message arrived and was counted; the plain one never arrived
        # (pushes to w0 skipped while its outbox was full count under w0 too: leave them out)
        received = {
            p: {r: n for r, n in c.items() if r != "send_queue_full"} for p, c in dropped.items()
        }
        assert received == {"w0": {"wrong_run": 1}}, dropped
    finally:
        coord.stop_all()
        plain.close(0)
        member.close(0)
        for proc in workers:
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in logs:
            log.close()
        coord.close()
