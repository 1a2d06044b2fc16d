"""``edgetrain join RUN --worker ID [-H HOST]``: a lost worker started again by hand, through the
run's own launcher.

The command does not start the process itself: the run's secret and its hosts' connections live
in the launcher only. It leaves a request in ``RUN/control/join-<ID>.json``; the launcher reads it
within one poll, decides (:func:`verdict`, pure), starts the worker with its launch command (a
``[run] restart``'s, on its own host or on ``HOST``) and answers in
``RUN/control/join-<ID>.answer.json``, which the command waits for and prints. The new process
registers as a restarted one and rejoins the running run (:mod:`edgetrain.comm.rejoin`).

A request is a small JSON object (``worker``, ``host``, ``nonce``) written by a user of this
machine into the run directory; the launcher reads at most :data:`MAX_REQUEST_BYTES` of it and
treats anything else in it as absent.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgetrain.errors import EdgetrainError
from edgetrain.rundir import atomic_write_json

CONTROL = "control"
MAX_REQUEST_BYTES = 4096
# How long ``edgetrain join`` waits for the launcher's answer by default.
ANSWER_WAIT_S = 30.0
# Failures a worker comes back from neither by a restart nor by a join.
FINAL_KINDS = frozenset({"input", "diverged", "late"})


@dataclass(frozen=True)
class JoinRequest:
    """Start worker ``worker`` again (on ``host``; None: where it ran). ``nonce`` pairs the
    answer with this request."""

    worker: int
    host: str | None
    nonce: str

    def as_dict(self) -> dict[str, Any]:
        return {"worker": self.worker, "host": self.host, "nonce": self.nonce}


@dataclass(frozen=True)
class Refusal:
    """Why a join cannot happen now, and what to do instead."""

    reason: str
    fix: str


def control_dir(run: Path) -> Path:
    return run / CONTROL


def request_path(run: Path, worker: int) -> Path:
    return control_dir(run) / f"join-{worker}.json"


def answer_path(run: Path, worker: int) -> Path:
    return control_dir(run) / f"join-{worker}.answer.json"


def verdict(
    worker: int,
    *,
    rejoins: bool,
    what: str,
    phase: str,
    status: str,
    error_kind: str | None,
    mending: bool,
    running: bool,
    host: str | None,
    hosts: Sequence[str],
    path: str,
) -> Refusal | None:
    """None when worker ``worker`` may be started again now, else why not. ``what`` names the
    technique (``gossip/gosgd``); ``status`` and ``error_kind`` are the coordinator's for the
    worker; ``mending``: a ``[run] restart`` is planned or on its way; ``running``: its old
    process has not exited; ``hosts``: where the launcher can start it. Pure."""
    status_fix = f"watch it with: edgetrain status {path}"
    if not rejoins:
        return Refusal(
            f"a {what} worker cannot rejoin a running run yet",
            f"once the run ends, continue it from its last checkpoint: edgetrain launch "
            f"--resume {path}",
        )
    if phase != "training":
        return Refusal(
            f"the run is {phase}, not training: a worker joins only while the run trains",
            status_fix,
        )
    if status != "failed":
        return Refusal(
            f"worker {worker} is in the run ({status}): only a lost worker can join again",
            f"join a worker the run lost; {status_fix}",
        )
    if error_kind in FINAL_KINDS:
        return Refusal(
            f"worker {worker} was lost for good ({error_kind}): a new process would fail the same",
            f"read its log (edgetrain logs {path} --worker {worker}) and fix the cause",
        )
    if mending:
        return Refusal(f"worker {worker} is being restarted already ([run] restart)", status_fix)
    if running:
        return Refusal(
            f"worker {worker}'s lost process has not exited yet (it is told to stop when it "
            "speaks again)",
            f"wait for it to exit, or end it (kill -9 on its host), then join again; {status_fix}",
        )
    if host is not None and host not in hosts:
        return Refusal(
            f"host {host!r} is not one of the run's hosts ({', '.join(sorted(set(hosts)))})",
            "pass -H with one of them, or leave -H out to start it where it ran",
        )
    return None


def write_request(run: Path, worker: int, host: str | None) -> JoinRequest:
    """Leave a join request for the run's launcher (a stale answer for the worker removed);
    EdgetrainError when one is already waiting."""
    req = JoinRequest(worker, host, secrets.token_hex(8))
    path = request_path(run, worker)
    if path.exists():
        raise EdgetrainError(
            f"a join request for worker {worker} is already waiting ({path})",
            "wait for the launcher's answer, or remove that file if the launcher is gone",
        )
    try:
        control_dir(run).mkdir(exist_ok=True)
        answer_path(run, worker).unlink(missing_ok=True)
        atomic_write_json(path, req.as_dict())
    except OSError as exc:
        raise EdgetrainError(
            f"cannot write the join request in '{control_dir(run)}': {exc.strerror or exc}",
            "run edgetrain join as the user who launched the run",
        ) from None
    return req


def parse_request(text: str, worker: int) -> JoinRequest | None:
    """The request in ``text`` for ``worker`` (its file's name), or None when it is not one.
    Pure."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("worker") != worker:
        return None
    host, nonce = data.get("host"), data.get("nonce")
    if host is not None and (not isinstance(host, str) or not host):
        return None
    if not isinstance(nonce, str) or not 0 < len(nonce) <= 64:
        return None
    return JoinRequest(worker, host, nonce)


def take_requests(run: Path, workers: int) -> list[JoinRequest]:
    """The join requests waiting in the run's control directory, each taken (its file
    removed); what is not a request for one of the run's ``workers`` is removed and skipped."""
    folder = control_dir(run)
    if not folder.is_dir():
        return []
    out = []
    for w in range(workers):
        path = request_path(run, w)
        if not path.is_file():
            continue
        try:
            with path.open("rb") as f:
                raw = f.read(MAX_REQUEST_BYTES + 1)
        except OSError:
            continue
        with contextlib.suppress(OSError):
            path.unlink()
        text = raw.decode("utf-8", "replace") if len(raw) <= MAX_REQUEST_BYTES else ""
        req = parse_request(text, w)
        if req is not None:
            out.append(req)
    return out


def write_answer(run: Path, req: JoinRequest, answer: dict[str, Any]) -> None:
    """The launcher's answer to ``req`` (``accepted`` and what happened, or ``error`` and
    ``fix``)."""
    with contextlib.suppress(OSError):  # the command then times out and says so
        atomic_write_json(answer_path(run, req.worker), {**answer, "nonce": req.nonce})


def wait_answer(
    run: Path, req: JoinRequest, timeout_s: float, alive: Any = None
) -> dict[str, Any] | None:
    """The launcher's answer to ``req``, or None after ``timeout_s`` (or as soon as ``alive()``
    says the launcher is gone). The answer is a file the launcher writes: polled."""
    deadline = time.monotonic() + timeout_s
    path = answer_path(run, req.worker)
    while True:
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(path.read_text())
            if isinstance(data, dict) and data.get("nonce") == req.nonce:
                with contextlib.suppress(OSError):
                    path.unlink()
                return data
        if time.monotonic() >= deadline or (alive is not None and not alive()):
            return None
        time.sleep(0.1)
