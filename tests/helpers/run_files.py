"""Run directories written by hand: a finished gossip run's manifest and metrics files, with
known values (and, on request, a second attempt resumed from a checkpoint), for the commands
that read runs without launching one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

START = "2026-11-20T10:00:00+00:00"
RESTART = "2026-11-20T11:00:00+00:00"
FIRST, SECOND = "a" * 16, "b" * 16


def loss(worker: int, epoch: int, attempt: int = 0) -> float:
    return round(1.0 / (epoch + worker + 1) + attempt * 0.001, 6)


def accuracy(worker: int, epoch: int, attempt: int = 0) -> float:
    return round(0.5 + 0.1 * epoch + 0.01 * worker + attempt * 0.001, 6)


def _lines(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _attempt(
    run_id: str, workers: int, epochs: range, attempt: int, resumed: int | None
) -> tuple[list[dict[str, Any]], dict[int, list[dict[str, Any]]]]:
    coordinator: list[dict[str, Any]] = []
    if resumed is not None:
        coordinator.append({"epoch": resumed, "run_id": run_id, "t": 0.5, "event": "resumed"})
    coordinator.append(
        {"workers": workers, "barriers": True, "run_id": run_id, "t": 1.0, "event": "started"}
    )
    rows: dict[int, list[dict[str, Any]]] = {}
    for w in range(workers):
        rows[w] = [
            {"host": "localhost", "role": f"trainer:{w}", "run_id": run_id, "t": 0.2,
             "event": "registered", "worker": w},
        ]  # fmt: skip
    for e in epochs:
        t = 1.0 + e
        for w in range(workers):
            rows[w].append(
                {
                    "loss": loss(w, e, attempt),
                    "steps": 10 * e,
                    "epoch_s": 0.5,
                    "eval_s": 0.1,
                    "bytes_sent": 1000 * e,
                    "bytes_received": 900 * e,
                    "test_accuracy": accuracy(w, e, attempt),
                    "test_loss": 2 * loss(w, e, attempt),
                    "epoch": e,
                    "step": 10 * e,
                    "t": t + 0.01 * w,
                    "event": "epoch",
                    "worker": w,
                }
            )
        coordinator.append({"epoch": e, "t": t + 0.5, "event": "barrier"})
    last = epochs[-1]
    for w in range(workers):
        final = accuracy(w, last, attempt)
        rows[w].append(
            {"steps": 10 * last, "t": 2.0 + last, "event": "final", "worker": w,
             "final_test_accuracy": final}
        )  # fmt: skip
    return coordinator, rows


def _worker(w: int) -> dict[str, Any]:
    return {
        "id": w,
        "role": "trainer",
        "role_index": w,
        "host": "localhost",
        "slowdown": 1.0,
        "status": "completed",
    }


def write_run(
    root: Path, name: str = "fake", workers: int = 2, epochs: int = 3, resumed: int | None = None
) -> Path:
    """A completed gosgd run of ``workers`` trainers and ``epochs`` epochs under ``root``; with
    ``resumed``, a first attempt ran all epochs and a second resumed from epoch ``resumed``
    with slightly different values (``attempt`` = 1 in :func:`loss` and :func:`accuracy`)."""
    run = root / f"{name}-20261120-100000"
    recipe = {
        "run": {"name": name, "seed": 0},
        "data": {"dataset": "digits"},
        "model": {"name": "mlp", "options": {"hidden": [16]}},
        "train": {"family": "gossip", "technique": "gosgd", "epochs": epochs, "lr": 0.05},
        "gossip": {"probability": 0.25},
        "dlion": {"sync": "iteration"},  # a section the technique does not read
        "workers": [{"host": "localhost", "count": workers, "slowdown": 1.0}],
    }
    manifest: dict[str, Any] = {
        "run_id": SECOND if resumed is not None else FIRST,
        "name": name,
        "status": "completed",
        "error": None,
        "family": "gossip",
        "technique": "gosgd",
        "seed": 0,
        "start_time": RESTART if resumed is not None else START,
        "end_time": "2026-11-20T12:00:00+00:00",
        "wall_s": 10.0,
        "git_revision": None,
        "recipe": recipe,
        "workers": [_worker(w) for w in range(workers)],
    }
    coordinator, rows = _attempt(FIRST, workers, range(1, epochs + 1), 0, None)
    if resumed is not None:
        manifest["attempts"] = [{"run_id": FIRST, "status": "interrupted", "start_time": START}]
        more, again = _attempt(SECOND, workers, range(resumed + 1, epochs + 1), 1, resumed)
        coordinator += more
        for w in range(workers):
            rows[w] += again[w]
    coordinator.append(
        {"test_accuracy": 0.91, "test_loss": 0.3, "model_sha256": "f" * 64,
         "model_file": "model/final.safetensors", "model_file_sha256": "e" * 64,
         "workers": workers, "alpha_sum": 1.0, "t": epochs + 3.0, "event": "averaged"}
    )  # fmt: skip
    coordinator.append({"status": "completed", "error": None, "t": epochs + 4.0, "event": "end"})
    _lines(run / "metrics" / "coordinator.jsonl", coordinator)
    for w in range(workers):
        _lines(run / "metrics" / f"worker-{w}.jsonl", rows[w])
    (run / "manifest.json").write_text(json.dumps(manifest, indent=2))
    (run / "recipe.toml").write_text('[run]\nname = "fake"\n')
    return run
