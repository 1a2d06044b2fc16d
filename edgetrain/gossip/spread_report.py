"""The gossip family's own report: each epoch's finish-time spread (slowest worker's epoch time
over the fastest's), and for EdgeGossip each worker's r_i, the predictor's error (predicted
against measured throughput), and the aggregation and ranking overheads. Pure: it reads the
workers' metrics rows (``epoch`` events, and ``ready`` for the aggregation time)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _f(x: Any, fmt: str) -> str:
    return format(x, fmt) if isinstance(x, (int, float)) else "-"


def spread(times: Mapping[int, float]) -> float | None:
    """Slowest over fastest of positive epoch times (None: fewer than two)."""
    xs = [t for t in times.values() if t > 0]
    return max(xs) / min(xs) if len(xs) >= 2 else None


def _epoch_rows(
    workers: Mapping[int, list[dict[str, Any]]],
) -> dict[int, dict[int, dict[str, Any]]]:
    """epoch -> worker -> its last ``epoch`` row for that epoch."""
    out: dict[int, dict[int, dict[str, Any]]] = {}
    for wid, rows in workers.items():
        for r in rows:
            if r.get("event") == "epoch" and isinstance(r.get("epoch"), int):
                out.setdefault(r["epoch"], {})[int(wid)] = r
    return out


def _aggregate_s(workers: Mapping[int, list[dict[str, Any]]]) -> dict[int, float]:
    out: dict[int, float] = {}
    for wid, rows in workers.items():
        for r in rows:
            v = _num(r.get("aggregate_s"))
            if r.get("event") in ("ready", "epoch") and v is not None:
                out[int(wid)] = v
    return out


def gossip_report(
    manifest: Mapping[str, Any], workers: Mapping[int, list[dict[str, Any]]], edge: bool = False
) -> dict[str, Any] | None:
    """The report section (None when no epoch was reported); ``edge``: with EdgeGossip's
    shares, predictor error and overheads."""
    by_epoch = _epoch_rows(workers)
    if not by_epoch:
        return None
    ids = sorted({w for rows in by_epoch.values() for w in rows})
    hosts = {w["id"]: w.get("host", "") for w in manifest.get("workers", [])}
    epochs: list[dict[str, Any]] = []
    errors: dict[int, list[float]] = {w: [] for w in ids}
    rank_total = epoch_total = clock = 0.0
    for epoch in sorted(by_epoch):
        rows = by_epoch[epoch]
        times = {w: t for w, r in rows.items() if (t := _num(r.get("epoch_s"))) is not None}
        entry: dict[str, Any] = {"epoch": epoch, "epoch_s": times, "spread": spread(times)}
        clock += max(times.values(), default=0.0)
        if edge:
            entry["ratio"] = {w: _num(r.get("ratio")) for w, r in rows.items()}
            entry["kept"] = {w: r.get("kept") for w, r in rows.items()}
            err = {w: _num(r.get("predictor_error")) for w, r in rows.items()}
            entry["predictor_error"] = err
            for w, e in err.items():
                if e is not None:
                    errors[w].append(e)
            known = [e for e in err.values() if e is not None]
            entry["predictor_mape"] = statistics.fmean(known) if known else None
            rank = {w: v for w, r in rows.items() if (v := _num(r.get("rank_s"))) is not None}
            entry["rank_s"] = rank
            rank_total += sum(rank.values())
            epoch_total += sum(times[w] for w in rank if w in times)
            shares = [rank[w] / times[w] for w in rank if times.get(w)]
            entry["rank_share"] = statistics.fmean(shares) if shares else None
        epochs.append(entry)
    spreads = [e["spread"] for e in epochs if e["spread"] is not None]
    out: dict[str, Any] = {
        "epochs": epochs,
        "spread_median": statistics.median(spreads) if spreads else None,
        "spread_max": max(spreads) if spreads else None,
        "epoch_clock_s": clock,  # sum over epochs of the slowest worker's epoch time
    }
    if edge:
        agg = _aggregate_s(workers)
        agg_max = max(agg.values(), default=0.0)
        by_worker = {w: statistics.fmean(e) if e else None for w, e in errors.items()}
        flat = [e for es in errors.values() for e in es]
        out.update(
            aggregate_s=agg,
            aggregate_max_s=agg_max,
            aggregate_share=agg_max / (agg_max + clock) if agg_max + clock > 0 else None,
            rank_share=rank_total / epoch_total if epoch_total > 0 else None,
            predictor_mape=statistics.fmean(flat) if flat else None,
            predictor_mape_by_worker=by_worker,
            hosts={w: hosts.get(w, "") for w in ids},
        )
    out["markdown"] = _markdown(out, ids, edge)
    return out


def _markdown(rep: dict[str, Any], ids: list[int], edge: bool) -> str:
    title = "EdgeGossip: balance per epoch" if edge else "Gossip: finish-time spread per epoch"
    lines = [f"## {title}", ""]
    if edge:
        lines += [
            "r: each worker's share of its data this epoch (the balancer's r_i); s: its epoch "
            "time; spread: slowest over fastest; error: |predicted - measured| / measured "
            "throughput, mean over workers; rank: the ranking's share of the epoch.",
            "",
        ]
        head = ["epoch", *[f"r w{w}" for w in ids], *[f"s w{w}" for w in ids]]
        head += ["spread", "error", "rank"]
    else:
        head = ["epoch", *[f"s w{w}" for w in ids], "spread"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for e in rep["epochs"]:
        cells = [str(e["epoch"])]
        if edge:
            cells += [_f(e["ratio"].get(w), ".3f") for w in ids]
        cells += [_f(e["epoch_s"].get(w), ".2f") for w in ids]
        cells.append(_f(e["spread"], ".2f"))
        if edge:
            cells += [_f(e["predictor_mape"], ".1%"), _f(e["rank_share"], ".1%")]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"- finish-time spread: median {_f(rep['spread_median'], '.2f')}, "
              f"max {_f(rep['spread_max'], '.2f')}"]  # fmt: skip
    if edge:
        agg = ", ".join(f"w{w} {v:.2f} s" for w, v in sorted(rep["aggregate_s"].items()))
        per = ", ".join(
            f"w{w} ({rep['hosts'].get(w) or '?'}) {_f(v, '.1%')}"
            for w, v in sorted(rep["predictor_mape_by_worker"].items())
        )
        lines += [
            f"- aggregation (before training, not in the run's clock): {agg or '-'}; the "
            f"slowest, {_f(rep['aggregate_max_s'], '.2f')} s, is "
            f"{_f(rep['aggregate_share'], '.1%')} of it plus the epochs",
            f"- ranking (inside the epochs): {_f(rep['rank_share'], '.1%')} of epoch time",
            f"- predictor error (MAPE of throughput): {_f(rep['predictor_mape'], '.1%')}; "
            f"per worker: {per}",
        ]
    return "\n".join(lines)
