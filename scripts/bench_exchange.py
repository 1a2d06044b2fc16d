"""Benchmark: what the gossip family's gradient exchange costs a worker per iteration, part by
part, against the iteration's own compute, in one process (no network: the link's time is the
cost model's business, this is the CPU the exchange takes from training).

A real training loop (the recipe's model and data, its batch, SGD) produces each iteration's
flat gradient; every exchange mode then handles that same gradient, interleaved in the same
iteration, with its own state (residuals, accumulator) as a worker with ``--peers`` peers would:

- ``select``: choosing what goes (DLion: one residual take per link, dense or the top-k a link
  budget allows; Gaia: the significance filter once, the same payload to every peer; Ako: one
  partition slice);
- ``encode``: the wire message of each send (:func:`edgetrain.comm.wire.encode`);
- ``decode``: each received message decoded, validated and turned into a payload, as a
  receiver does (:func:`edgetrain.comm.wire.decode`, :func:`.sparse.payload_from`);
- ``apply``: each peer's payload added into the iteration's inbound sum.

It prints, per mode, the median milliseconds of each part and the exchange's share of the
iteration's compute (forward, backward and the optimiser step, median). Issue goal: selection,
encoding and applying peers' updates together at most 10% of a compute-bound iteration.

    scripts/bench_exchange [--recipe recipes/dlion.toml] [--iterations 200] [--peers 3]
                           [--threads 1] [--format json] [--out FILE]

Run it alone on the machine; ``--threads 1`` matches an emulated host of one core or less.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PARTS = ("select", "encode", "decode", "apply")


def median_ms(xs: list[float]) -> float:
    return 1000.0 * statistics.median(xs) if xs else 0.0


def share(parts: dict[str, float], compute_ms: float) -> float:
    """The exchange's parts together as a share of the compute (pure)."""
    return sum(parts[p] for p in PARTS) / compute_ms if compute_ms > 0 else float("inf")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", default=str(REPO / "recipes" / "dlion.toml"))
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--peers", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=None, help="default: the recipe's batch_size")
    ap.add_argument("--fractions", default="0.1,0.01", help="DLion's sparse k as shares of n")
    ap.add_argument("--format", choices=("table", "json"), default="table")
    ap.add_argument("--out", default=None, help="also write the JSON here")
    args = ap.parse_args(argv)
    if args.iterations < 1 or args.peers < 1 or args.threads < 1:
        ap.error("--iterations, --peers and --threads must be positive")
    return args


class Mode:
    """One exchange mode's state and its per-iteration parts."""

    def __init__(self, name: str, n: int, peers: int, select: Callable[[Any], list[Any]]) -> None:
        self.name, self.n, self.peers, self.select = name, n, peers, select
        self.times: dict[str, list[float]] = {p: [] for p in PARTS}
        self.bytes: list[int] = []

    def step(self, g: Any, record: bool) -> None:
        import numpy as np
        import torch

        from edgetrain.comm.wire import Message, decode, encode, limits_for
        from edgetrain.gossip.exchange.sparse import payload_from

        t0 = time.perf_counter()
        payloads = self.select(g)  # one per peer (Gaia: the same object each time)
        t1 = time.perf_counter()
        frames = []
        for p in payloads:
            msg = Message("grad", "w0", "bench", 0, 0, {"t": 0, **p.meta()}, p.tensors())
            frames.append(encode(msg))
        t2 = time.perf_counter()
        # what a receiver gets: bytes off the socket
        received = [[bytes(f) for f in fr] for fr in frames]
        limits = limits_for(4 * self.n, 4, 0)
        t3 = time.perf_counter()
        decoded = []
        for fr in received:
            msg = decode(fr, "bench", limits=limits)
            got = payload_from(msg.meta, msg.tensors, self.n)
            assert not isinstance(got, str), got
            decoded.append(got)
        t4 = time.perf_counter()
        inbound = torch.zeros(self.n)
        for p in decoded:
            p.add_into(inbound)
        t5 = time.perf_counter()
        if record:
            for part, dt in zip(PARTS, (t1 - t0, t2 - t1, t4 - t3, t5 - t4), strict=True):
                self.times[part].append(dt)
            self.bytes.append(int(sum(np.asarray(p.nbytes) for p in payloads)))


def modes(n: int, peers: int, fractions: list[float], lr: float, flat_w: Any) -> list[Mode]:
    from edgetrain.gossip.exchange.partitions import bounds
    from edgetrain.gossip.exchange.significance import Accumulator
    from edgetrain.gossip.exchange.sparse import Payload, Residual, to_float32

    out: list[Mode] = []
    dense_res = [Residual(n) for _ in range(peers)]
    out.append(Mode("dlion-dense", n, peers, lambda g: [r.take(g, None) for r in dense_res]))

    def sparse(k: int) -> Callable[[Any], list[Any]]:
        res = [Residual(n) for _ in range(peers)]
        return lambda g: [r.take(g, k) for r in res]

    for frac in fractions:
        out.append(Mode(f"dlion-top{frac:g}", n, peers, sparse(max(1, int(frac * n)))))
    acc = Accumulator(n)

    def gaia(g: Any) -> list[Any]:
        acc.add(g)
        p = acc.take(flat_w(), lr, 0.01)
        return [p] * peers

    out.append(Mode("gaia", n, peers, gaia))
    parts = bounds(n, peers + 1)
    ako_acc = [Residual(n) for _ in range(1)]
    turn = [0]

    def ako(g: Any) -> list[Any]:
        ako_acc[0].add(g)
        lo, hi = parts[turn[0] % len(parts)]
        turn[0] += 1
        v = ako_acc[0].r[lo:hi]
        vals, lost = to_float32(v)
        ako_acc[0].r[lo:hi] = lost
        p = Payload("slice", n, vals, None, lo)
        return [p] * peers

    out.append(Mode("ako", n, peers, ako))
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    import torch

    from edgetrain.models import build_model
    from edgetrain.recipe import load_recipe
    from edgetrain.runtime.setup import load_run_data

    torch.set_num_threads(args.threads)
    recipe, _ = load_recipe(Path(args.recipe))
    torch.manual_seed(recipe.run.seed)
    data = load_run_data(recipe)
    model = build_model(recipe.model.name, data.input_shape, data.classes, recipe.model.options)
    opt = torch.optim.SGD(model.parameters(), lr=recipe.train.lr)
    params = [p for p in model.parameters() if p.requires_grad]
    n = sum(p.numel() for p in params)
    batch = args.batch or recipe.train.batch_size
    x = torch.as_tensor(np.asarray(data.x_train), dtype=torch.float32)
    y = torch.as_tensor(np.asarray(data.y_train), dtype=torch.int64)
    loss_fn = torch.nn.CrossEntropyLoss()

    def flat_w() -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for p in params])

    fractions = [float(f) for f in args.fractions.split(",") if f.strip()]
    all_modes = modes(n, args.peers, fractions, recipe.train.lr / (args.peers + 1), flat_w)
    compute: list[float] = []
    rng = np.random.default_rng(recipe.run.seed)
    for i in range(args.warmup + args.iterations):
        idx = torch.as_tensor(rng.integers(0, len(x), batch))
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        g = torch.cat([p.grad.reshape(-1) for p in params if p.grad is not None])
        record = i >= args.warmup
        if record:
            compute.append(t1 - t0)
        for m in all_modes:
            m.step(g.clone(), record)
    compute_ms = median_ms(compute)
    rows = []
    for m in all_modes:
        parts = {p: median_ms(m.times[p]) for p in PARTS}
        rows.append(
            {
                "mode": m.name,
                **{f"{p}_ms": round(v, 4) for p, v in parts.items()},
                "exchange_ms": round(sum(parts.values()), 4),
                "share_of_compute": round(share(parts, compute_ms), 4),
                "bytes_per_iteration": int(statistics.median(m.bytes)) if m.bytes else 0,
            }
        )
    rev = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    return {
        "recipe": args.recipe,
        "model": recipe.model.name,
        "parameters": n,
        "batch": batch,
        "peers": args.peers,
        "threads": args.threads,
        "iterations": args.iterations,
        "compute_ms": round(compute_ms, 4),
        "modes": rows,
        "commit": rev,
        "machine": platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def render(doc: dict[str, Any]) -> str:
    lines = [
        f"{doc['model']}: {doc['parameters']:,} parameters, batch {doc['batch']}, "
        f"{doc['peers']} peers, {doc['threads']} thread(s), {doc['iterations']} iterations",
        f"compute (forward + backward + step), median: {doc['compute_ms']:.3f} ms",
        "",
        f"{'mode':<16}{'select':>9}{'encode':>9}{'decode':>9}{'apply':>9}{'total':>9}"
        f"{'/compute':>10}{'KB/iter':>10}",
    ]
    for r in doc["modes"]:
        lines.append(
            f"{r['mode']:<16}{r['select_ms']:>9.3f}{r['encode_ms']:>9.3f}{r['decode_ms']:>9.3f}"
            f"{r['apply_ms']:>9.3f}{r['exchange_ms']:>9.3f}{r['share_of_compute']:>10.1%}"
            f"{r['bytes_per_iteration'] / 1e3:>10.1f}"
        )
    lines.append("(milliseconds per iteration, medians; goal: at most 10% of compute)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    doc = run(args)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2) if args.format == "json" else render(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
