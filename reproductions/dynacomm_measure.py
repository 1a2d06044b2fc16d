"""What the DynaComm reproduction reads from a run: per trainer and measured epoch, the
iteration and its phases, measured and predicted, and the costs C and M; across schedules, the
final weights (R-DC5). Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from edgetrain.experiment.claims import Row, median

PER_EPOCH = (
    "worker",
    "epoch",
    "forward_cuts",
    "backward_cuts",
    "dt_s",
    "bandwidth_pull_Bps",
    "bandwidth_push_Bps",
    "iteration_s",
    "epoch_s",
    "eval_s",
    "t",
)


def trainer_rows(run: dict[str, Any]) -> list[Row]:
    """The per-epoch rows of every trainer of a run (from the family's report)."""
    rep = run.get("technique_report") or {}
    return list(rep.get("epochs", []))


def _error(measured: float | None, predicted: float | None) -> float | None:
    return abs(measured / predicted - 1) if measured and predicted else None


def _share(part: float | None, whole: float | None) -> float | None:
    return part / whole if isinstance(part, (int, float)) and whole else None


def measure(run: dict[str, Any]) -> Row:
    """A run's figures, the median over trainers and measured epochs (every epoch after the
    first, whose cold start and first plan are warm-up; the only one when there is one):
    measured and predicted iteration and phase times, C and M, hidden share, the prediction
    error (against the iteration with and without the time shards held pulls for the other
    trainers: BSP waiting, which the one-trainer cost model leaves out)."""
    rows = trainer_rows(run)
    epochs = sorted({r["epoch"] for r in rows})
    last = [r for r in rows if r["epoch"] in (epochs[1:] or epochs)]

    def med(key: str) -> float | None:
        return median([r.get(key) for r in last])

    def cost(key: str) -> float | None:
        return median([(r.get("costs") or {}).get(key) for r in last])

    shares = [_share(r.get("plan_s"), r.get("epoch_s")) for r in rows]
    return {
        "iteration_s": median([r["iteration_s"] for r in last]),
        "iteration_unheld_s": med("iteration_unheld_s"),
        "predicted_s": med("predicted_now_s"),
        "prediction_error": median(
            [_error(r.get("iteration_unheld_s"), r.get("predicted_now_s")) for r in last]
        ),
        "prediction_error_with_waits": median(
            [_error(r.get("iteration_s"), r.get("predicted_now_s")) for r in last]
        ),
        "measured_epochs": len(epochs[1:] or epochs),
        "forward_s": med("forward_s"),
        "backward_s": med("backward_s"),
        "hidden_share": med("hidden_share"),
        "compute_s": cost("compute_s"),
        "communication_s": cost("communication_s"),
        "ceiling": cost("max_saving_fraction"),
        "dt_s": med("dt_s"),
        "forward_cuts": last[0].get("forward_cuts") if last else None,
        # re-planning's cost: the time spent planning in an epoch over the epoch's training time
        "replan_share": median(shares),
        "replan_share_max": max((x for x in shares if x is not None), default=None),
        "per_epoch": [{k: r.get(k) for k in PER_EPOCH} for r in rows],
        "model_sha256": run.get("model_sha256"),
        "train_s": run.get("train_s"),
        "test_accuracy": run.get("test_accuracy"),
    }


def same_weights(entries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """R-DC5's figures: per seed, each schedule's final ``model_sha256``. Different seeds train
    different models, so schedules are compared within a seed; ``distinct`` is the largest
    number of different models any one seed gave."""
    by_seed: dict[str, dict[str, str]] = {}
    for entry in entries:
        for technique, rows in entry["results"].items():
            for r in rows:
                by_seed.setdefault(str(r["seed"]), {})[technique] = r["model_sha256"]
    distinct = max((len(set(v.values())) for v in by_seed.values()), default=0)
    return {"identical": distinct == 1, "distinct": distinct, "shas": by_seed}


def failure(message: str) -> str:
    """The reason inside a failed run's error, without its log paths (one table cell)."""
    reason = message.split('"error": "', 1)[-1].split(" (log: ", 1)[0]
    return reason.replace("|", "/")
