"""Phase 4 of the mcPipe reproduction: PipeDream's activations and errors on a 10 Mbit/s tbf
link between two emulated laptops, timed at the stage that waits for each one."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from reproductions import mcpipe_measure as measure
from reproductions.mcpipe_recipes import RunSpec
from reproductions.mcpipe_runs import Ctx, bed, laptops, launch

LINK_RATE = "10mbit"
LINK_BPS = 10e6
LINK_EXTRA = 2


def phase_link(ctx: Ctx) -> dict[str, Any]:
    """PipeDream's activations and errors on a 10 Mbit/s tbf link."""
    if not ctx.p.link:
        return {}
    # One hidden layer of 2048: activations of 128 KiB per microbatch (105 ms at 10 Mbit/s)
    # against a few ms of compute, and few weights to hand in at the end over the slow link
    # (a long hand-in delays heartbeats behind it: they get 10 s here). Stage 1 holds only the
    # classifier, so it waits for every activation and takes it the moment it lands: its inbox
    # times the link exactly. (Stage 0 computes while errors arrive and takes some late, which
    # makes their link look slower than it is.)
    w = replace(ctx.p.accuracy, options={"hidden": [2048]})
    r = RunSpec(
        "pipedream", 2, LINK_EXTRA, (1, 1), evaluator=False, microbatches=150, epochs=1,
        heartbeat_s=10.0,
    )  # fmt: skip
    about = "two mcpipe-3 hosts on a 10 Mbit/s link: transfers are the bottleneck"
    with bed(ctx, "mcpipe-link", laptops(2), LINK_RATE, about) as b:
        summary = launch(ctx, b, w, r, f"link-{w.label}-pipedream-e{LINK_EXTRA}", 1)
        verified = [
            link.get("measured_bps")
            for link in (b.tb.verify.get("links", []) if b.tb else [])
            if link.get("measured_bps")
        ]
    from edgetrain.emulate.topology import burst_bytes

    st = measure.stages(summary)
    inboxes = {
        "activations": (st[1]["link_arrived"].get("act") or {}) if len(st) > 1 else {},
        "errors": (st[0]["link_arrived"].get("grad") or {}) if st else {},
    }
    return {
        "rate_bps": LINK_BPS,
        "burst_bytes": burst_bytes(int(LINK_BPS)),
        "inboxes": inboxes,
        "verified_bps": verified[0] if verified else None,
        "activations_bps": measure.link_rate(st[1], "act") if len(st) > 1 else None,
        "errors_bps": measure.link_rate(st[0], "grad") if st else None,
        "span_activations_bps": (st[1]["link_arrived"].get("act") or {}).get("rate_bps")
        if len(st) > 1
        else None,
        "busy": [s["busy"] for s in st],
        "run": summary.get("run"),
    }
