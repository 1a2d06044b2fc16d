"""A Mercury run's own report: the settings it ran with (every parameter the paper leaves
unset), the terms of the speed-up model per iteration, refresh and resharding figures."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from edgetrain.errors import EdgetrainError
from edgetrain.ps.mercury.config import MercurySection, Settings, settings

TERMS = ("t_cp_s", "t_cm_s", "t_is_s", "t_it_s")
SUMS = ("refresh_t1_s", "reshard_t1_s", "draw_s", "step_wait_s", "boundary_s", "cpu_s", *TERMS)


def _f(x: Any, fmt: str) -> str:
    return format(x, fmt) if isinstance(x, (int, float)) and not isinstance(x, bool) else "-"


def _median(xs: Sequence[Any]) -> float | None:
    vals = [float(x) for x in xs if isinstance(x, (int, float)) and not isinstance(x, bool)]
    return statistics.median(vals) if vals else None


def resolved_settings(manifest: Mapping[str, Any]) -> Settings | None:
    """The run's [mercury] settings, every default resolved, from its recorded recipe."""
    recipe = manifest.get("recipe", {})
    train = recipe.get("train", {})
    try:
        section = MercurySection(**recipe.get("mercury", {}))
        return settings(section, str(train.get("technique")), int(train.get("batch_size", 32)))
    except (ValueError, EdgetrainError):  # a report of an old or odd run still renders
        return None


def per_iteration(rows: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """One device's run means per iteration of every timed term (sums over its epochs divided
    by its iterations)."""
    iterations = sum(int(r.get("iterations") or 0) for r in rows)
    if not iterations:
        return dict.fromkeys(SUMS)
    return {k: sum(float(r.get(k) or 0.0) for r in rows) / iterations for k in SUMS}


def cpu_use(means: Mapping[str, float | None], cores: Any) -> float | None:
    """The part of its cores a device's iterations kept busy: CPU per iteration over the cores
    times the iteration (1.0: the share used whole, so work the scheduler means to hide
    lengthens the iteration instead). None where a term is missing (a run from before
    ``cpu_s``)."""
    cpu, it = means.get("cpu_s"), means.get("t_it_s")
    if not isinstance(cores, (int, float)) or cores <= 0 or not cpu or not it:
        return None
    return float(cpu) / (float(cores) * float(it))


def mercury_report(
    manifest: Mapping[str, Any], workers: Mapping[int, list[dict[str, Any]]]
) -> dict[str, Any] | None:
    """The run's Mercury figures (None when no device reported any): the resolved settings,
    the per-iteration terms (median over devices; ``cpu_use``: :func:`cpu_use`), resharding,
    cohorts, hashes and the first device's curve."""
    roles = {w["id"]: w.get("role") for w in manifest.get("workers", [])}
    devices: dict[int, list[dict[str, Any]]] = {}
    for wid, events in sorted(workers.items()):
        if roles.get(wid) != "trainer":
            continue
        rows = [e for e in events if e.get("event") == "epoch" and e.get("mercury")]
        if rows:
            devices[wid] = rows
    if not devices:
        return None
    means = {wid: per_iteration(rows) for wid, rows in devices.items()}
    terms = {k: _median([m[k] for m in means.values()]) for k in SUMS}
    last = {wid: rows[-1] for wid, rows in devices.items()}
    terms["cpu_use"] = _median([cpu_use(means[w], last[w].get("cores")) for w in devices])
    reshard_bytes = sum(int(r.get("reshard_bytes_sent") or 0) for r in last.values())
    placed = sum(int(r.get("reshard_placed") or 0) for r in last.values())
    rounds = max(int(r.get("reshard_rounds") or 0) for r in last.values())
    cohorts = [r.get("cohort_mean") for rows in devices.values() for r in rows]
    pause = [r.get("pause_latency_max_s") for r in last.values()]
    first = min(devices)
    curve = [
        {
            "epoch": r.get("epoch"),
            "iterations": r.get("steps"),
            "test_accuracy": r.get("test_accuracy"),
        }
        for r in devices[first]
    ]
    premises = [p for rows in devices.values() for r in rows for p in r.get("premises") or []]
    cfg = resolved_settings(manifest)
    summary: dict[str, Any] = {
        "settings": cfg.as_dict() if cfg is not None else None,
        "per_iteration": terms,
        "reshard_bytes": reshard_bytes,
        "reshard_samples_placed": placed,
        "reshard_rounds": rounds,
        "cohort_mean": _median(cohorts),
        "beta": _median([r.get("beta") for rows in devices.values() for r in rows]),
        "pause_latency_max_s": max((p for p in pause if isinstance(p, (int, float))), default=None),
        "hash_checks": max(int(r.get("hash_checks") or 0) for r in last.values()),
        "weights_hashes": {str(w): r.get("weights_hash") for w, r in last.items()},
        "curve": curve,
        "premises": premises,
        "devices": {str(w): means[w] for w in devices},
        "on_devices": {str(w): device_keys(r) for w, r in last.items()},
    }
    summary["markdown"] = _markdown(summary)
    return summary


def device_keys(row: Mapping[str, Any]) -> dict[str, Any]:
    """The keys a device resolved itself (``auto``: by whether it runs under a CPU quota)."""
    return {k: row.get(k) for k in ("under_quota", "batch_refresh", "pace_utilisation")}


def _on_devices(on: Mapping[str, Mapping[str, Any]]) -> str | None:
    """One line per distinct resolution: which devices ran with which ``auto`` keys."""
    by: dict[tuple[Any, ...], list[str]] = {}
    for w, keys in on.items():
        if keys.get("batch_refresh") is None:  # a device of an older version reported none
            continue
        by.setdefault(tuple(keys.values()), []).append(w)
    if not by:
        return None
    parts = [
        f"batch_refresh = {str(b).lower()}, pace_utilisation = {u} on device(s) "
        f"{', '.join(ws)} ({'under' if q else 'not under'} a CPU quota)"
        for (q, b, u), ws in by.items()
    ]
    return "On the devices ('auto' resolved): " + "; ".join(parts) + "."


def _markdown(s: Mapping[str, Any]) -> str:
    lines = ["## Mercury", ""]
    cfg = s.get("settings")
    if cfg:
        shown = ", ".join(f"{k} = {v}" for k, v in cfg.items() if k != "premise_probe")
        lines += [f"Settings (every default resolved; 'auto' by each device, below): {shown}.", ""]
    on = _on_devices(s.get("on_devices") or {})
    if on:
        lines += [on, ""]
    t = s["per_iteration"]
    lines += [
        "Per iteration (median over devices of each device's run mean), the terms of the "
        "speed-up model:",
        "",
        "| T_cp s | T_cm s | T_is s | iteration s | refresh on T1 s | reshard on T1 s | "
        "wait for T2 s | CPU s | of the cores |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {_f(t['t_cp_s'], '.4f')} | {_f(t['t_cm_s'], '.4f')} | {_f(t['t_is_s'], '.4f')} | "
        f"{_f(t['t_it_s'], '.4f')} | {_f(t['refresh_t1_s'], '.4f')} | "
        f"{_f(t['reshard_t1_s'], '.4f')} | {_f(t['step_wait_s'], '.4f')} | "
        f"{_f(t['cpu_s'], '.4f')} | {_f(t.get('cpu_use'), '.0%')} |",
        "",
        f"Refresh cohorts: {_f(s.get('cohort_mean'), '.1f')} samples per iteration (median of "
        f"epoch means); beta {_f(s.get('beta'), '.4f')}. Resharding: {s['reshard_rounds']} "
        f"round(s), {s['reshard_samples_placed']} samples placed, "
        f"{s['reshard_bytes'] / 1e6:.2f} MB sent by all devices; largest pause latency "
        f"{_f(s.get('pause_latency_max_s'), '.3f')} s. Replica hash checks on the wire: "
        f"{s['hash_checks']}; final hashes "
        f"{'agree' if len(set(s['weights_hashes'].values())) == 1 else 'DIFFER'}.",
    ]
    return "\n".join(lines)
