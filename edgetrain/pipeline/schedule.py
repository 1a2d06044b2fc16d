"""Each stage's fixed operation order (1F1B with a window) and the weight version each operation
uses. Pure (specification §5.1, §5.2).

Stage s of N keeps ``m_s = N - s + e`` microbatches in flight (``e``: extra window depth), or
``m`` at every stage in the uniform mode (``m = 1``: no pipelining at all). It runs ``w_s =
m_s - 1`` warm-up forwards, then alternates ``F_j, B_{j-w}``, and drains at the epoch's end.
The order never depends on timing, so neither do the weights. Every backward is followed by
one update, so version v is a stage's weights after v updates; a forward uses the newest
version, a backward the version its forward used (PipeDream, mcPipe) or the newest one
(GreedyUpdates).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# How a stage keeps its weights (:mod:`.stores`): which version a backward uses.
Store = Literal["versions", "latest", "pairs"]


@dataclass(frozen=True)
class Op:
    """Forward (``F``) or backward (``B``) of microbatch ``mb`` (its index in the epoch)."""

    kind: Literal["F", "B"]
    mb: int

    def __str__(self) -> str:
        return f"{self.kind}{self.mb}"


def in_flight(s: int, n: int, extra: int = 0, uniform: int | None = None) -> int:
    """m_s: microbatches stage ``s`` of ``n`` keeps in flight."""
    if not 0 <= s < n:
        raise ValueError(f"stage {s} is not one of 0..{n - 1}")
    return uniform if uniform is not None else n - s + extra


def warmup(s: int, n: int, m: int, extra: int = 0, uniform: int | None = None) -> int:
    """w_s: forwards before the first backward, in an epoch of ``m`` microbatches."""
    return min(in_flight(s, n, extra, uniform) - 1, m)


def order(s: int, n: int, m: int, extra: int = 0, uniform: int | None = None) -> list[Op]:
    """Stage ``s``'s operations in an epoch of ``m`` microbatches."""
    w = warmup(s, n, m, extra, uniform)
    ops = [Op("F", j) for j in range(w)]
    for j in range(w, m):
        ops += [Op("F", j), Op("B", j - w)]
    ops += [Op("B", j) for j in range(m - w, m)]
    return ops


def versions(
    s: int,
    n: int,
    m: int,
    extra: int = 0,
    uniform: int | None = None,
    store: Store = "versions",
    start: int = 0,
) -> list[tuple[Op, int]]:
    """Each operation with the version it uses, starting at version ``start``."""
    done = start
    used: dict[int, int] = {}
    out = []
    for op in order(s, n, m, extra, uniform):
        if op.kind == "F":
            used[op.mb] = done
            out.append((op, done))
        else:
            out.append((op, done if store == "latest" else used[op.mb]))
            done += 1
    return out


def table(
    s: int, n: int, m: int, extra: int = 0, uniform: int | None = None, store: Store = "versions"
) -> str:
    """``F0@0 F1@0 B0@0 ...``: the specification's literal notation."""
    return " ".join(f"{op}@{v}" for op, v in versions(s, n, m, extra, uniform, store))


@dataclass(frozen=True)
class Simulation:
    """A run of every stage's order with unit-time operations and instant links."""

    makespan: int
    max_queued: dict[tuple[int, str], int]  # (link from stage s, "act" | "grad") -> max queued


def simulate(n: int, m: int, extra: int = 0, uniform: int | None = None) -> Simulation:
    """Every stage runs its next operation as soon as its message is there (one tick each);
    raises RuntimeError on a deadlock. The weights never depend on this interleaving; it checks
    that the orders fit together and that queues stay bounded."""
    orders = [order(s, n, m, extra, uniform) for s in range(n)]
    pos = [0] * n
    acts: list[set[int]] = [set() for _ in range(n)]  # activations waiting at stage s
    grads: list[set[int]] = [set() for _ in range(n)]  # errors waiting at stage s
    queued: dict[tuple[int, str], int] = {}
    tick = 0
    while any(p < len(o) for p, o in zip(pos, orders, strict=True)):
        ran = []
        for s in range(n):
            if pos[s] == len(orders[s]):
                continue
            op = orders[s][pos[s]]
            if op.kind == "F" and s > 0 and op.mb not in acts[s]:
                continue
            if op.kind == "B" and s < n - 1 and op.mb not in grads[s]:
                continue
            ran.append((s, op))
        if not ran:
            raise RuntimeError(f"deadlock at tick {tick}: positions {pos}")
        for s, op in ran:  # messages sent this tick arrive for the next
            pos[s] += 1
            if op.kind == "F":
                acts[s].discard(op.mb)
            else:
                grads[s].discard(op.mb)
        for s, op in ran:
            if op.kind == "F" and s < n - 1:
                acts[s + 1].add(op.mb)
                key = (s, "act")
                queued[key] = max(queued.get(key, 0), len(acts[s + 1]))
            if op.kind == "B" and s > 0:
                grads[s - 1].add(op.mb)
                key = (s, "grad")
                queued[key] = max(queued.get(key, 0), len(grads[s - 1]))
        tick += 1
    return Simulation(tick, queued)
