"""The evaluator (role ``evaluator``): collects the stages' snapshots during the run, scores
them after it.

While the stages train it only receives: each part is checked (a stage's own units, the
model's names and shapes, float32) and written to a scratch directory on its host, so it holds
no snapshot in memory and takes no CPU from training. A part that comes again (a run that
rewound to a checkpoint trains those microbatches again, to the same weights) replaces the
first: parts are counted once each. After the drain it waits for every part
the stages reported sending, then loads each complete snapshot into the recipe's model and
scores it on the test split (with the snapshot's ``sha256``, so two runs' snapshots after the
same microbatches can be compared bit for bit). The scores (with each snapshot's training
time) go out with its final report; the family's report turns them into the accuracy curve.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import zmq

from edgetrain.comm import protocol
from edgetrain.comm.control import HandIn
from edgetrain.comm.transport import Transport
from edgetrain.pipeline import messages
from edgetrain.pipeline.chain import build_units
from edgetrain.pipeline.proc import start_process
from edgetrain.pipeline.stage_channels import bind_inbox
from edgetrain.runtime.accelerator import start_device
from edgetrain.runtime.base import Final, Ready, WorkerContext
from edgetrain.runtime.session import Session
from edgetrain.runtime.setup import build_run_model, load_run_data
from edgetrain.runtime.trainer import evaluate
from edgetrain.runtime.weights import model_sha256

log = logging.getLogger(__name__)

DRAIN_WAIT_S = 120.0


class Evaluator:
    """Receives snapshot parts, scores complete snapshots after the run."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        self.transport = Transport.of(ctx)
        self.sock: zmq.SyncSocket | None = None
        self.scratch: Path | None = None
        self.got: dict[str, set[tuple[int, int]]] = {}  # (snap, unit) received per sender
        self.parts: dict[int, dict[str, Any]] = {}  # snap -> its facts and files
        self.session: Session | None = None  # for progress reports (the live view's row)

    def setup(self) -> Ready:
        ctx = self.ctx
        start_process(ctx)
        self.device = start_device(ctx.recipe.train.device)  # scores there, after the run
        self.data = load_run_data(ctx.recipe)
        self.model = build_run_model(ctx.recipe, self.data).to(self.device)
        self.shapes = {k: tuple(v.shape) for k, v in self.model.state_dict().items()}
        self.scratch = Path(tempfile.mkdtemp(prefix="edgetrain-snapshots-"))
        self.sock, endpoint = bind_inbox(self.transport, 10_000, "snapshot inbox")
        return Ready({"snap": endpoint}, {})

    def run(self, session: Session) -> Final:
        self.session = session
        self._expect_senders(session)
        assert self.sock is not None
        drain = session.wait_drain([(self.sock, self._take)])
        self._finish_receiving(session, drain)
        t0 = time.monotonic()
        scores = self._score()
        metrics = {
            "snapshots": scores,
            "snapshot_eval_s": time.monotonic() - t0,
            "steps": 0,
            **self.ctx.traffic.as_dict(),
        }
        return Final(HandIn({}, {"role": str(self.ctx.role)}), metrics)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close(linger=0)
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)

    # ------------------------------------------------------------------ receiving

    def _expect_senders(self, session: Session) -> None:
        """Who may send which names: each stage its units' tensors (replica 0 all of them)."""
        d = session.start_directive
        units = build_units(self.model, self.ctx.recipe.model.name)
        state = set(self.model.state_dict())
        bounds = [tuple(b) for b in d.get("bounds", [])] or [(0, len(units))]
        names: dict[int, list[str]] = {}
        for part, (lo, hi) in enumerate(bounds):
            own = [u.state_name(k) for u in units[lo:hi] for k in u.module.state_dict()]
            names[part] = [n for n in own if n in state]
        self.names = names
        self.units_per_part = {p: hi - lo for p, (lo, hi) in enumerate(bounds)}
        senders = {}
        for m in session.roster.of("stage"):
            senders[protocol.worker_name(m.id)] = m.role.index
        for m in session.roster.of("replica"):
            if m.role.index == 0:
                senders[protocol.worker_name(m.id)] = 0
        self.senders = senders

    def _take(self) -> None:
        assert self.sock is not None and self.scratch is not None
        while self.sock.poll(0, zmq.POLLIN):
            got = self.transport.recv(self.sock, (messages.SNAP,))
            if got is None:
                continue
            msg = got[1]
            reason = messages.snapshot_problem(msg, self.senders, self.names, self.shapes)
            if reason is None and msg.meta["part"] != self.senders[msg.sender]:
                reason = "not_owned"
            if reason is not None:
                self.ctx.traffic.drop(reason, msg.sender)
                continue
            snap, unit = int(msg.meta["snap"]), int(msg.meta["unit"])
            self.got.setdefault(msg.sender, set()).add((snap, unit))
            entry = self.parts.setdefault(
                snap,
                {
                    "epoch": int(msg.meta["epoch"]),
                    "train_s": 0.0,
                    "files": {},
                    "units": {},
                    "epoch_end": bool(msg.meta.get("epoch_end", False)),
                    "parts": int(msg.meta["parts"]),
                },
            )
            entry["train_s"] = max(entry["train_s"], float(msg.meta["train_s"]))
            part = int(msg.meta["part"])
            entry["units"].setdefault(part, set()).add(unit)
            path = self.scratch / f"snap-{snap}-{part}-{unit}.npz"
            np.savez(path, **{k: np.asarray(v) for k, v in msg.tensors.items()})  # type: ignore[arg-type]
            entry["files"][path.name] = path
            self._progress(snapshots_received=len(self.parts))

    def _missing(self, expect: dict[str, int]) -> int:
        return sum(
            max(0, n - len(self.got.get(protocol.worker_name(int(w)), ())))
            for w, n in expect.items()
        )

    def _finish_receiving(self, session: Session, drain: dict[str, Any]) -> None:
        """Wait until every part the stages sent has arrived (the drain says how many)."""
        raw = drain.get("expect", {})
        expect = {
            str(k): v
            for k, v in (raw.items() if isinstance(raw, dict) else [])
            if str(k).isdigit() and isinstance(v, int) and v >= 0
        }
        deadline = time.monotonic() + DRAIN_WAIT_S
        assert self.sock is not None
        while self._missing(expect) and time.monotonic() < deadline:
            if self.sock.poll(200, zmq.POLLIN):
                self._take()
            session.poll()
        if missing := self._missing(expect):
            log.warning("%d snapshot parts never arrived", missing)

    # ------------------------------------------------------------------ scoring

    def _score(self) -> list[dict[str, Any]]:
        out = []
        x = torch.from_numpy(self.data.x_test).to(self.device)
        y = torch.from_numpy(self.data.y_test).to(self.device)
        for snap in sorted(self.parts):
            entry = self.parts[snap]
            complete = all(
                len(entry["units"].get(p, ())) == self.units_per_part.get(p, 0)
                for p in range(entry["parts"])
            )
            row: dict[str, Any] = {
                "snap": snap,
                "epoch": entry["epoch"],
                "microbatches": snap,
                "train_s": entry["train_s"],
                "epoch_end": entry["epoch_end"],
                "complete": complete,
                "test_accuracy": None,
                "test_loss": None,
                "sha256": None,
            }
            if complete:
                arrays: dict[str, np.ndarray] = {}
                for path in entry["files"].values():
                    with np.load(path, allow_pickle=False) as z:
                        arrays.update({k: z[k] for k in z.files})
                self.model.load_state_dict(
                    {k: torch.from_numpy(v) for k, v in arrays.items()}, strict=False
                )
                acc, loss = evaluate(self.model, x, y)
                row.update(test_accuracy=acc, test_loss=loss, sha256=model_sha256(arrays))
            out.append(row)
            scored = sum(1 for r in out if r["test_accuracy"] is not None)
            self._progress(snapshots_scored=scored, snapshot_accuracy=row["test_accuracy"])
        return out

    def _progress(self, **counts: Any) -> None:
        """Report what this evaluator did so far (at most twice a second)."""
        if self.session is not None:
            self.session.progress(0, 0, 0, **counts)
