"""GoSGD's drain accounting, the gossip family's one per-worker decision: at drain, each worker
learns how many messages each live peer sent it, so it can wait until everything in flight has
arrived (messages from failed workers are not counted: they may or may not arrive)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from edgetrain.comm.control import Decision, NoDirectives


def drain_expectations(
    sent: Mapping[int, Mapping[int, int]], alive: Sequence[int]
) -> dict[int, dict[str, int]]:
    """For each alive worker, how many messages each other alive worker sent it.

    ``sent[j][i]``: messages worker j reports it sent to worker i. Pure."""
    return {i: {str(j): int(sent.get(j, {}).get(i, 0)) for j in alive if j != i} for i in alive}


def _sent_counts(report: Mapping[str, Any]) -> dict[int, int]:
    """A ``done`` report's per-peer send counts, with anything malformed left out."""
    sent = report.get("sent", {})
    if not isinstance(sent, dict):
        return {}
    return {
        int(k): v
        for k, v in sent.items()
        if str(k).isdigit() and isinstance(v, int) and not isinstance(v, bool) and v >= 0
    }


class GossipController(NoDirectives):
    """Drain accounting: the gossip family's only per-worker decision."""

    def on_drain(self, done: Mapping[int, Mapping[str, Any]]) -> Decision:
        alive = sorted(done)
        sent = {j: _sent_counts(report) for j, report in done.items()}
        expect = drain_expectations(sent, alive)
        return Decision({i: {"expect_from": expect[i]} for i in alive})
