"""Summarise a run directory: per-worker results, the run's model, the training clock, traffic.

``report/summary.json`` carries, besides status and wall time: ``family`` and ``technique``;
each worker's ``role``; ``test_accuracy``, ``test_loss`` and ``model_sha256`` of the final model
(the gossip family's averaged model is also ``averaged_test_accuracy``); ``train_s``, the
training time with evaluation excluded (:mod:`edgetrain.report.clock`), and the ``curve`` of
accuracy, training loss and test loss against it per epoch; ``iterations``; and bytes sent per
link class (``lan`` within a site, ``wan`` between sites, ``peer`` where the hosts name no
sites, ``control`` to the coordinator). The report's plots (:mod:`edgetrain.report.plot`) draw
accuracy and loss against the same clock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from edgetrain.report.clock import (
    DEFERRED,
    Point,
    Report,
    WorkerPoint,
    attempt_curve,
    join_attempts,
    join_worker_points,
    worker_points,
)
from edgetrain.rundir import (
    COORDINATOR_STEM,
    RunDir,
    read_jsonl,
    worker_stem,
)

if TYPE_CHECKING:
    from edgetrain.runtime.base import Family

SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
ACCURACY_PNG = "accuracy.png"
LOSS_PNG = "loss.png"
MODEL_EVENTS = ("averaged", "final_model")
ATTEMPT_OPENERS = ("registered", "resumed", "started")


TECHNIQUE_COUNTERS = ("gossip_sent", "gossip_merged")


def _last(events: list[dict[str, Any]], kind: str | tuple[str, ...]) -> dict[str, Any] | None:
    kinds = (kind,) if isinstance(kind, str) else kind
    ev: dict[str, Any]  # (mypy infers Any for reversed() of a list of Any-valued dicts)
    for ev in reversed(events):
        if ev.get("event") in kinds:
            return ev
    return None


def link_class(src_site: str | None, dest: str, sites: Mapping[str, str | None]) -> str:
    """``control`` (to the coordinator), ``lan`` (same site), ``wan`` (other site), or
    ``peer`` (a site unknown: no hosts file, or one that names no sites)."""
    if dest == "coordinator":
        return "control"
    dest_site = sites.get(dest)
    if src_site is None or dest_site is None:
        return "peer"
    return "lan" if src_site == dest_site else "wan"


def _by_class(
    sent_to: object, src_site: str | None, sites: Mapping[str, str | None]
) -> dict[str, int]:
    out: Counter[str] = Counter()
    if isinstance(sent_to, dict):
        for dest, n in sent_to.items():
            if isinstance(n, int):
                out[link_class(src_site, str(dest), sites)] += n
    return dict(out)


def _worker_summary(
    worker: dict[str, Any], events: list[dict[str, Any]], sites: Mapping[str, str | None]
) -> dict[str, Any]:
    final = _last(events, "final")
    last_epoch = _last(events, "epoch")
    src = final or last_epoch or {}
    accuracy = final.get("final_test_accuracy") if final else None
    if accuracy is None:
        evaluated = [e for e in events if e.get("event") == "epoch" and "test_accuracy" in e]
        accuracy = evaluated[-1]["test_accuracy"] if evaluated else None
    return {
        "id": worker["id"],
        "role": worker.get("role", "trainer"),
        "role_index": worker.get("role_index"),
        "host": worker.get("host", "localhost"),
        "site": worker.get("site"),
        "status": worker.get("status", "unknown"),
        "final_test_accuracy": accuracy,
        "epochs": last_epoch.get("epoch", 0) if last_epoch else 0,
        "steps": src.get("steps", 0),
        "bytes_sent": src.get("bytes_sent", 0),
        "bytes_received": src.get("bytes_received", 0),
        "bytes_by_class": _by_class(src.get("bytes_sent_to"), worker.get("site"), sites),
        # counters a technique reports of its own (GoSGD's pushes and merges) pass through
        **{k: src[k] for k in TECHNIQUE_COUNTERS if k in src},
        "dropped": src.get("dropped", {}),
        "slowdown": worker.get("slowdown", 1.0),
        "exit_code": worker.get("exit_code"),
        "error": worker.get("error"),
    }


def _attempts(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Rows of an appended metrics file, by the attempt (run id) that wrote them: an
    attempt's rows follow its ``registered`` (worker) or ``resumed``/``started`` event."""
    out: dict[str, list[dict[str, Any]]] = {}
    current: str | None = None
    for row in rows:
        if row.get("event") in ATTEMPT_OPENERS and isinstance(row.get("run_id"), str):
            current = row["run_id"]
        if current is not None:
            out.setdefault(current, []).append(row)
    return out


def _number(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok else None


def rewinds_of(rows: list[dict[str, Any]]) -> list[tuple[float, int]]:
    """``(t, epoch)`` of every rewind to a checkpoint in the coordinator's rows."""
    return [
        (float(r["t"]), int(r["epoch"]))
        for r in rows
        if r.get("event") == "rewound" and isinstance(r.get("epoch"), int) and "t" in r
    ]


def kept_reports(reports: list[Report], rewinds: list[tuple[float, int]]) -> list[Report]:
    """The epoch reports a later rewind did not throw away (an epoch after the checkpoint it
    went back to, reported before it: trained again after it). Pure."""
    return [r for r in reports if not any(r.t < t and r.epoch > e for t, e in rewinds)]


def deferred_scores(
    reports: list[Report],
    worker_parts: Mapping[int, Mapping[str, list[dict[str, Any]]]],
    run_id: str,
) -> list[Report]:
    """The reports with each worker's epoch-end snapshots, scored after training
    (``[train] eval_deferred``: a later report's ``deferred_eval``, ``[[epoch, accuracy,
    loss], ...]``), filled in where the epoch's own report has no accuracy. Pure."""
    scored: dict[tuple[int, int], tuple[float | None, float | None]] = {}
    for w, parts in worker_parts.items():
        for e in parts.get(run_id, []):
            rows = e.get(DEFERRED) if e.get("event") == "epoch" else None
            for row in rows if isinstance(rows, list) else []:
                if isinstance(row, list) and len(row) == 3 and isinstance(row[0], int):
                    scored[(w, row[0])] = (_number(row[1]), _number(row[2]))
    out = []
    for r in reports:
        acc, loss = scored.get((r.worker, r.epoch), (None, None))
        if r.accuracy is None and acc is not None:
            r = replace(r, accuracy=acc, test_loss=r.test_loss if loss is None else loss)
        out.append(r)
    return out


def _attempt_reports(
    coordinator: list[dict[str, Any]], workers: Mapping[int, list[dict[str, Any]]]
) -> list[tuple[int, float, list[Report], dict[int, float] | None]]:
    """Each attempt of the run (a resumed run has several) that started: the epoch it resumed
    after, its start, the workers' epoch reports and its barrier releases (None: no barriers)."""
    worker_parts = {w: _attempts(rows) for w, rows in workers.items()}
    out = []
    for run_id, part in _attempts(coordinator).items():
        started = _last(part, "started")
        if started is None:
            continue
        resumed = _last(part, "resumed")
        releases = {int(e["epoch"]): float(e["t"]) for e in part if e.get("event") == "barrier"}
        reports = [
            Report(
                w,
                int(e["epoch"]),
                float(e["t"]),
                float(e.get("eval_s") or 0.0),
                _number(e.get("test_accuracy")),
                _number(e.get("loss")),
                _number(e.get("test_loss")),
            )
            for w, parts in worker_parts.items()
            for e in parts.get(run_id, [])
            if e.get("event") == "epoch" and isinstance(e.get("epoch"), int)
        ]
        reports = deferred_scores(kept_reports(reports, rewinds_of(part)), worker_parts, run_id)
        barriers = bool(started.get("barriers", bool(releases)))
        after = int(resumed["epoch"]) if resumed else 0
        out.append((after, float(started["t"]), reports, releases if barriers else None))
    return out


def training_curve(
    coordinator: list[dict[str, Any]], workers: Mapping[int, list[dict[str, Any]]]
) -> list[Point]:
    """The run's curve from its metrics files (every attempt of a resumed run)."""
    return join_attempts(
        [
            (after, attempt_curve(start, reports, releases))
            for after, start, reports, releases in _attempt_reports(coordinator, workers)
        ]
    )


def worker_curves(
    coordinator: list[dict[str, Any]], workers: Mapping[int, list[dict[str, Any]]]
) -> dict[int, list[WorkerPoint]]:
    """Each worker's epochs on the run's training clock (every attempt of a resumed run)."""
    joined = join_worker_points(
        [
            (after, worker_points(start, reports, releases))
            for after, start, reports, releases in _attempt_reports(coordinator, workers)
        ]
    )
    out: dict[int, list[WorkerPoint]] = {}
    for p in joined:
        out.setdefault(p.worker, []).append(p)
    return out


def build_summary(run_dir: RunDir) -> dict[str, Any]:
    """Read the manifest and the metrics files into the summary (pure reading, no writing)."""
    manifest = run_dir.read_manifest()
    recipe = manifest.get("recipe", {})
    train = recipe.get("train", {})
    family = manifest.get("family") or train.get("family") or train.get("technique")
    technique = manifest.get("technique") or (
        train.get("technique") if "family" in train else train.get("algorithm")
    )
    worker_rows = {
        w["id"]: read_jsonl(run_dir.metrics_file(worker_stem(w["id"])))
        for w in manifest.get("workers", [])
    }
    sites = {f"w{w['id']}": w.get("site") for w in manifest.get("workers", [])}
    workers = [_worker_summary(w, worker_rows[w["id"]], sites) for w in manifest.get("workers", [])]
    coordinator = read_jsonl(run_dir.metrics_file(COORDINATOR_STEM))
    model = _last(coordinator, MODEL_EVENTS)
    curve = training_curve(coordinator, worker_rows)
    by_class: Counter[str] = Counter()
    for w in workers:
        by_class.update(w["bytes_by_class"])
    side = _launcher(family, technique)
    own = _technique_report(side, manifest, worker_rows, coordinator)
    curve = family_accuracy(curve, own)
    prediction = _prediction(side, run_dir, manifest, worker_rows)
    return {
        "run": str(run_dir.path),
        "name": manifest.get("name"),
        "run_id": manifest.get("run_id"),
        "status": manifest.get("status"),
        "error": manifest.get("error"),
        "wall_s": manifest.get("wall_s"),
        "train_s": curve[-1].train_s if curve else None,
        "family": family,
        "technique": technique,
        "model": recipe.get("model", {}).get("name"),
        "dataset": recipe.get("data", {}).get("dataset"),
        "epochs": train.get("epochs"),
        "seed": manifest.get("seed"),
        "test_accuracy": model.get("test_accuracy") if model else None,
        "test_loss": model.get("test_loss") if model else None,
        "averaged_test_accuracy": (
            model.get("test_accuracy") if model and model.get("event") == "averaged" else None
        ),
        "model_sha256": model.get("model_sha256") if model else None,
        "iterations": sum(int(w["steps"] or 0) for w in workers),
        "bytes_sent": sum(w["bytes_sent"] for w in workers),
        "bytes_received": sum(w["bytes_received"] for w in workers),
        "bytes_by_class": dict(by_class),
        "curve": [p.as_dict() for p in curve],
        "workers": workers,
        # [run] restart: every leave and join (the manifest's), seconds since the start
        **({"membership": manifest["membership"]} if manifest.get("membership") else {}),
        **({"technique_report": own} if own else {}),
        **({"prediction": prediction} if prediction else {}),
    }


def _prediction(
    side: Family | None,
    run_dir: RunDir,
    manifest: dict[str, Any],
    workers: Mapping[int, list[dict[str, Any]]],
) -> dict[str, Any] | None:
    """The technique's cost model beside the run's measurement (:mod:`.predicted`)."""
    if side is None:
        return None
    from edgetrain.report.predicted import prediction_report

    return prediction_report(run_dir.path, manifest, workers, side)


def _launcher(family: object, technique: object) -> Family | None:
    """The run's composed launcher side (None: its family is not registered here; a technique
    not registered here gets the family's own hooks)."""
    from edgetrain import techniques
    from edgetrain.runtime.base import TechniqueSide
    from edgetrain.runtime.side import Launcher, launcher_side

    if not isinstance(family, str) or family not in techniques.families():
        return None
    if isinstance(technique, str) and technique in techniques.families()[family].techniques:
        return launcher_side(family, technique)
    return Launcher(techniques.load_family(family), TechniqueSide())


def _technique_report(
    side: Family | None,
    manifest: dict[str, Any],
    workers: Mapping[int, list[dict[str, Any]]],
    coordinator: list[dict[str, Any]],
) -> dict[str, Any] | None:
    """What the run's technique adds to its report (its ``report`` hook: plain data, with an
    optional ``markdown`` section), from the same metrics rows."""
    if side is None:
        return None
    from edgetrain.runtime.context import RunRecord

    result = side.report(RunRecord(manifest, workers, coordinator))
    return dict(result) if result else None


def family_accuracy(curve: list[Point], own: Mapping[str, Any] | None) -> list[Point]:
    """The curve with the accuracies (and test losses) a family scored after the run filled in
    (its report's ``epoch_accuracy`` and ``epoch_test_loss``, ``{epoch: value}``) for epochs
    its workers did not evaluate: the pipeline family's evaluator scores epoch-end snapshots
    once training is over."""
    scored = (own or {}).get("epoch_accuracy")
    losses = (own or {}).get("epoch_test_loss")
    if not isinstance(scored, dict):
        return curve
    out = []
    for p in curve:
        acc = _number(scored.get(str(p.epoch)))
        if p.accuracy is None and acc is not None:
            p = replace(p, accuracy=acc)
        loss = _number(losses.get(str(p.epoch))) if isinstance(losses, dict) else None
        if p.test_loss is None and loss is not None:
            p = replace(p, test_loss=loss)
        out.append(p)
    return out


def technique_files(summary: dict[str, Any], run_dir: RunDir) -> list[str]:
    """Files the technique draws for its report (its ``report_files`` hook)."""
    side = _launcher(summary.get("family"), summary.get("technique"))
    return list(side.report_files(run_dir.report, summary["technique_report"])) if side else []


def _fmt_acc(x: Any) -> str:
    return f"{x:.4f}" if isinstance(x, (int, float)) else "-"


def human_bytes(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _seconds(x: Any) -> str:
    return f"{x:.1f} s" if isinstance(x, (int, float)) else "-"


def render_markdown(summary: dict[str, Any]) -> str:
    classes = ", ".join(
        f"{k} {human_bytes(v)}" for k, v in sorted(summary.get("bytes_by_class", {}).items())
    )
    lines = [
        f"# Run {summary.get('name')} ({summary.get('run_id')})",
        "",
        f"- status: **{summary.get('status')}**"
        + (f" - {summary['error']}" if summary.get("error") else ""),
        f"- {summary.get('family')}/{summary.get('technique')}, model {summary.get('model')}, "
        f"dataset {summary.get('dataset')}, {summary.get('epochs')} epochs",
        f"- wall time: {_seconds(summary.get('wall_s'))}; training time (evaluation "
        f"excluded): {_seconds(summary.get('train_s'))}",
        f"- final model test accuracy: {_fmt_acc(summary.get('test_accuracy'))}"
        + (f" (sha256 {summary['model_sha256'][:16]}...)" if summary.get("model_sha256") else ""),
        f"- traffic: {human_bytes(summary.get('bytes_sent'))} sent, "
        f"{human_bytes(summary.get('bytes_received'))} received"
        + (f" ({classes})" if classes else ""),
        "",
        "| worker | role | host | slowdown | status | test accuracy | steps | sent | received |",
        "|---:|---|---|---:|---|---:|---:|---:|---:|",
    ]
    for w in summary["workers"]:
        lines.append(
            f"| {w['id']} | {w['role']} | {w['host']} | {w['slowdown']:g} | {w['status']} | "
            f"{_fmt_acc(w['final_test_accuracy'])} | {w['steps']} | "
            f"{human_bytes(w['bytes_sent'])} | {human_bytes(w['bytes_received'])} |"
        )
    if summary.get("membership"):
        from edgetrain.report.runs import membership_text

        lines += ["", "Workers that left and joined:", ""]
        lines += [f"- {membership_text(m)}" for m in summary["membership"]]
    own = summary.get("technique_report") or {}
    if own.get("markdown"):
        lines += ["", str(own["markdown"]).rstrip()]
    from edgetrain.report.predicted import markdown

    lines += markdown(summary.get("prediction") or {})
    return "\n".join(lines) + "\n"
