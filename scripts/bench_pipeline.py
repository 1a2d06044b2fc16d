"""Benchmark: the pipeline family's per-step speed beside the PyTorch code a user would write.

Three comparisons, each on the same model (the MLP 256-256-256 on digits), the same seeded
microbatches (16 samples), the same optimiser (SGD, lr 0.05, momentum 0.9) and one thread per
process:

- ``local``: edgetrain's ``local`` against a plain PyTorch loop (forward, loss, backward,
  ``optimizer.step()``; the loss and the number right read every step, as edgetrain records
  them): samples per second; goal: ratio at least 0.9.
- ``dataparallel``: edgetrain's ``dataparallel``, 2 replicas over loopback, against
  ``torch.nn.parallel.DistributedDataParallel`` over gloo with 2 processes, each on half of
  every microbatch: seconds per iteration; goal: ratio at most 1.1.
- ``pipedream``: edgetrain's ``pipedream`` on 2 stages (units 2 + 2) against
  ``torch.distributed.pipelining``'s ``Schedule1F1B`` over gloo with the same cut, one schedule
  step per epoch by default (the pipeline fills and drains once per epoch, as edgetrain's does):
  samples per second; goal: ratio at least 1.0.

Every arm is timed over the same steady-state window, epochs 2..N of one run (epoch 1 holds the
warm-up: first-call allocations, lazy imports, gloo's and the schedule's first exchange), by
its training clock: edgetrain's arms from the run's own per-epoch figures (``epoch_s`` and
``epoch_steps`` in ``RUN/metrics/worker-*.jsonl``), not the process's wall time, so start-up,
data loading and the report are left out; the PyTorch arms time the same epochs with
``perf_counter`` in each process, after a barrier at the epoch's start, as edgetrain's epochs
start after the coordinator's. With several processes an epoch counts as its slowest one.
The arms run interleaved (AB, then BA in the next repetition), repeated; each repetition's
ratio pairs the two arms of that repetition. PyTorch's arms need ``torch.distributed`` (the
Jetson wheels lack it): where it is not available they are skipped with a line; edgetrain
itself never imports it.

``--link RATE`` (e.g. ``100mbit``) adds the ``dataparallel`` pair on a shaped link:
``dataparallel@RATE``, the same two arms across two emulated hosts (network namespaces joined
through veths shaped with ``tc tbf`` at RATE in both directions, built by edgetrain's own
emulator; needs root), edgetrain launched on them over ssh, DDP's two ranks started in the same
hosts with the rendezvous on the first host's address; each epoch capped at
``--link-microbatches`` microbatches for both arms (``bench_pipeline_link.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_pipeline_link as shaped  # noqa: E402  (the --link arms' testbed)

COMPARISONS = ("local", "dataparallel", "pipedream")
DEFAULT_OUT = "benchmarks/pipeline/bench-pipeline.json"
MICROBATCH = 16
LR = 0.05
MOMENTUM = 0.9
HIDDEN = (256, 256, 256)
SPLIT = (2, 2)  # units per stage for the pipelines (the MLP has 4)
LINK_MICROBATCHES = 30  # microbatches per epoch on the shaped link (both arms)


@dataclass(frozen=True)
class Spec:
    """One comparison: which edgetrain technique, its peer, what is measured and the goal."""

    name: str
    technique: str
    peer: str  # plain | ddp | pp
    peer_label: str
    processes: int
    metric: str  # samples_per_s | s_per_iter
    goal: float
    higher_is_better: bool


SPECS = {
    "local": Spec("local", "local", "plain", "plain PyTorch loop", 1, "samples_per_s", 0.9, True),
    "dataparallel": Spec(
        "dataparallel", "dataparallel", "ddp", "DDP over gloo", 2, "s_per_iter", 1.1, False
    ),
    "pipedream": Spec(
        "pipedream", "pipedream", "pp", "pipelining Schedule1F1B", 2, "samples_per_s", 1.0, True
    ),
}


# ---------------------------------------------------------------- pure parts


def summary(values: Sequence[float]) -> dict[str, float]:
    """Median, min and max of the repetitions' values."""
    if not values:
        raise ValueError("no values to summarise")
    return {
        "median": float(statistics.median(values)),
        "min": float(min(values)),
        "max": float(max(values)),
    }


def ratio(edgetrain: float, peer: float) -> float:
    """edgetrain's value over the peer's (samples/s: above 1 is faster; s/iteration: below)."""
    if peer <= 0:
        raise ValueError("the peer's value must be positive")
    return edgetrain / peer


def meets(spec: Spec, value: float) -> bool:
    return value >= spec.goal if spec.higher_is_better else value <= spec.goal


def window(processes: Sequence[Sequence[dict[str, Any]]], first: int) -> dict[str, float]:
    """Totals over epochs ``first`` and later, each epoch counted as its slowest process:
    ``processes[p]`` lists that process's epochs as rows with ``epoch``, ``seconds`` and
    ``steps`` (iterations). Returns seconds, steps, samples/s and seconds per iteration."""
    by_epoch: dict[int, list[dict[str, Any]]] = {}
    for rows in processes:
        for row in rows:
            if int(row["epoch"]) >= first:
                by_epoch.setdefault(int(row["epoch"]), []).append(row)
    complete = [e for e, rows in by_epoch.items() if len(rows) == len(processes)]
    if not complete:
        raise ValueError(f"no epoch from epoch {first} on was reported by every process")
    seconds = sum(max(float(r["seconds"]) for r in by_epoch[e]) for e in complete)
    steps = sum(max(int(r["steps"]) for r in by_epoch[e]) for e in complete)
    if seconds <= 0 or steps <= 0:
        raise ValueError("the window holds no training time")
    return {
        "epochs": len(complete),
        "seconds": seconds,
        "steps": steps,
        "samples_per_s": steps * MICROBATCH / seconds,
        "s_per_iter": seconds / steps,
    }


def edgetrain_rows(metrics_dir: Path) -> list[list[dict[str, Any]]]:
    """Per training process (stage or replica), its epochs' training seconds and steps, from
    the run's own metrics (``epoch`` rows of ``worker-*.jsonl``)."""
    out = []
    for f in sorted(metrics_dir.glob("worker-*.jsonl")):
        rows = []
        for line in f.read_text().splitlines():
            row = json.loads(line)
            if row.get("event") == "epoch" and row.get("epoch_s") is not None:
                rows.append(
                    {"epoch": row["epoch"], "seconds": row["epoch_s"], "steps": row["epoch_steps"]}
                )
        if rows:
            out.append(rows)
    return out


def comparisons(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    bad = [n for n in names if n not in COMPARISONS]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown comparison {', '.join(bad) or text!r}; use some of {', '.join(COMPARISONS)}"
        )
    return names


def positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return n


def link_rate(text: str) -> str:
    """A ``--link`` rate, checked (``100mbit``, ``1gbit``, ``500kbit``), as written."""
    try:
        shaped.rate_bps(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text.strip().lower()


@dataclass(frozen=True)
class Planned:
    """One comparison to run: its key in the results, its spec, and its link (None: loopback)."""

    key: str
    spec: Spec
    link: str | None = None


def plan(args: argparse.Namespace) -> list[Planned]:
    """The comparisons a run makes, in order: ``--only``'s over loopback (none with
    ``--link-only``), then with ``--link RATE`` the ``dataparallel`` pair on the shaped link."""
    out = [] if args.link_only else [Planned(n, SPECS[n]) for n in args.only]
    if args.link:
        out.append(Planned(f"dataparallel@{args.link}", SPECS["dataparallel"], args.link))
    return out


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="scripts/bench_pipeline", description=(__doc__ or "").split("\n\n")[0]
    )
    ap.add_argument("--quick", action="store_true", help="3 repetitions of 6 epochs")
    ap.add_argument("--repeats", type=positive, help="repetitions (default 5; --quick 3)")
    ap.add_argument("--epochs", type=positive, help="epochs per run (default 10; --quick 6)")
    ap.add_argument(
        "--only", type=comparisons, default=list(COMPARISONS),
        help="comparisons to run, e.g. local,pipedream (default: all three)",
    )  # fmt: skip
    ap.add_argument(
        "--pp-microbatches", type=positive, default=None,
        help="microbatches per Schedule1F1B step (default: an epoch's, one step per epoch)",
    )  # fmt: skip
    ap.add_argument(
        "--tree", type=Path, default=REPO,
        help="the edgetrain checkout whose code the edgetrain arms run (default: this one), "
        "e.g. an exported older revision for a before/after",
    )  # fmt: skip
    ap.add_argument("--out", default=DEFAULT_OUT, help=f"JSON file (default {DEFAULT_OUT})")
    ap.add_argument("--format", choices=("text", "json"), default="text")
    ap.add_argument("--timeout", type=positive, default=300, help="seconds per run (300)")
    ap.add_argument(
        "--link", type=link_rate, metavar="RATE",
        help="also compare dataparallel with DDP across 2 emulated hosts on a tc tbf link at "
        "RATE both ways, e.g. 100mbit (needs root; default: loopback only)",
    )  # fmt: skip
    ap.add_argument(
        "--link-only", action="store_true",
        help="with --link: only the shaped-link comparison, none over loopback",
    )  # fmt: skip
    ap.add_argument(
        "--link-microbatches", type=positive, default=LINK_MICROBATCHES, metavar="N",
        help=f"microbatches per epoch on the link, both arms (default {LINK_MICROBATCHES})",
    )  # fmt: skip
    ap.add_argument("--master", default="127.0.0.1", help=argparse.SUPPRESS)
    ap.add_argument("--microbatches", type=positive, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--peer", choices=("plain", "ddp", "pp"), help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.repeats = args.repeats or (3 if args.quick else 5)
    args.epochs = args.epochs or (6 if args.quick else 10)
    if args.epochs < 2 and not args.peer:
        ap.error("--epochs must be at least 2 (epoch 1 is the warm-up, left out)")
    if args.link_only and not args.link:
        ap.error("--link-only needs --link RATE (e.g. --link 100mbit)")
    args.tree = args.tree.resolve()
    if not (args.tree / "edgetrain" / "__init__.py").is_file():
        ap.error(f"--tree {args.tree} holds no edgetrain package; give a checkout's root")
    return args


def recipe_text(spec: Spec, epochs: int, microbatches: int | None = None) -> str:
    """The edgetrain recipe of a comparison's edgetrain arm (``microbatches``: at most that
    many per epoch)."""
    workers = {"local": ("stage", 1), "dataparallel": ("replica", 2), "pipedream": ("stage", 2)}
    role, count = workers[spec.technique]
    keys = [f"split = {list(SPLIT)}"] if spec.technique == "pipedream" else []
    keys += [f"microbatches = {microbatches}"] if microbatches else []
    pipeline = "\n[pipeline]\n" + "".join(k + "\n" for k in keys) if keys else ""
    return (
        f'[run]\nname = "bench-{spec.name}"\nseed = 0\ncheckpoint_every = 0\n\n'
        '[data]\ndataset = "digits"\n\n'
        f'[model]\nname = "mlp"\noptions = {{ hidden = {list(HIDDEN)} }}\n\n'
        f'[train]\nfamily = "pipeline"\ntechnique = "{spec.technique}"\nepochs = {epochs}\n'
        f"batch_size = {MICROBATCH}\nlr = {LR}\nmomentum = {MOMENTUM}\n"
        f"{pipeline}\n"
        f'[[workers]]\nrole = "{role}"\ncount = {count}\n'
    )


# ---------------------------------------------------------------- the PyTorch peers


def _peer_setup() -> tuple[Any, Any, Any, Any]:
    """The recipe, data, model and training tensors every peer starts from (edgetrain's own
    builders: the same seeded weights and split as the edgetrain arm)."""
    import tomllib
    import torch

    from edgetrain.pipeline.proc import training_tensors
    from edgetrain.recipe import parse_recipe
    from edgetrain.runtime.setup import build_run_model, load_run_data

    torch.set_num_threads(1)
    recipe = parse_recipe(tomllib.loads(recipe_text(SPECS["local"], 2)))
    data = load_run_data(recipe)
    model = build_run_model(recipe, data)
    model.train()
    xt, yt = training_tensors(data)
    return recipe, model, xt, yt


def _init_gloo(rank: int, world: int, port: int, master: str = "127.0.0.1") -> Any:
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://{master}:{port}", rank=rank, world_size=world
    )
    return dist


def peer(
    kind: str,
    rank: int,
    world: int,
    port: int,
    epochs: int,
    pp_mb: int | None,
    master: str = "127.0.0.1",
    cap: int | None = None,
) -> None:
    """Train one PyTorch peer process (``cap``: at most that many microbatches per epoch, as
    edgetrain's ``[pipeline] microbatches``); print its epochs as one JSON line."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch import nn

    from edgetrain.pipeline import feed

    _, model, xt, yt = _peer_setup()
    samples = len(xt)
    dist = _init_gloo(rank, world, port, master) if kind != "plain" else None
    rows = []
    if kind == "pp":
        assert dist is not None
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B

        from edgetrain.pipeline.chain import build_units

        units = build_units(model, "mlp")
        lo = sum(SPLIT[:rank])
        part = nn.Sequential(*[m for u in units[lo : lo + SPLIT[rank]] for m in u.modules()])
        m = feed.per_epoch(samples, MICROBATCH, cap)
        chunk = min(pp_mb or m, m)
        stage = PipelineStage(part, rank, world, torch.device("cpu"))
        schedule = Schedule1F1B(stage, n_microbatches=chunk, loss_fn=F.cross_entropy)
        opt = torch.optim.SGD(part.parameters(), lr=LR, momentum=MOMENTUM)
        for epoch in range(1, epochs + 1):
            order = feed.epoch_order(samples, MICROBATCH, 0, epoch, cap)
            steps = len(order) // chunk
            dist.barrier()
            t0 = time.perf_counter()
            for s in range(steps):
                idx = torch.from_numpy(np.concatenate(order[s * chunk : (s + 1) * chunk]))
                if rank == 0:
                    schedule.step(xt[idx])
                else:
                    losses: list[torch.Tensor] = []
                    schedule.step(target=yt[idx], losses=losses)
                    _ = [float(loss.detach()) for loss in losses]  # read, as edgetrain does
                opt.step()
                opt.zero_grad()
            rows.append(
                {"epoch": epoch, "seconds": time.perf_counter() - t0, "steps": steps * chunk}
            )
    else:
        net: nn.Module = model
        if kind == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            net = DistributedDataParallel(model)
        opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)
        for epoch in range(1, epochs + 1):
            order = feed.epoch_order(samples, MICROBATCH, 0, epoch, cap)
            if dist is not None:
                dist.barrier()
            t0 = time.perf_counter()
            seen = correct = 0
            for full in order:
                rows_idx = feed.replica_slice(full, rank, world) if kind == "ddp" else full
                idx = torch.from_numpy(rows_idx)
                x, y = xt[idx], yt[idx]
                out = net(x)
                loss = F.cross_entropy(out, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                float(loss.detach())  # the loss and the number right, read every step
                correct += int((out.detach().argmax(1) == y).sum())
                seen += len(y)
            rows.append({"epoch": epoch, "seconds": time.perf_counter() - t0, "steps": len(order)})
    print(json.dumps({"rank": rank, "epochs": rows}), flush=True)
    if dist is not None:
        # gloo's threads can abort the interpreter's exit ("terminate called without an active
        # exception"): once every rank is done, leave without running destructors
        dist.barrier()
        sys.stderr.flush()
        os._exit(0)


# ---------------------------------------------------------------- running the arms


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(text: str, n: int = 2000) -> str:
    return text.strip()[-n:]


def run_peer(
    spec: Spec,
    epochs: int,
    pp_mb: int | None,
    timeout: int,
    link: shaped.Link | None = None,
    cap: int | None = None,
) -> list[list[dict[str, Any]]]:
    """Start the peer's processes (with ``link``, each rank on its emulated host), wait for
    them, and return each one's epochs."""
    port = _free_port()  # free here; a fresh host namespace listens on nothing but ssh
    ifname = shaped.IFNAME if link else "lo"
    env = {**os.environ, "GLOO_SOCKET_IFNAME": ifname, "OMP_NUM_THREADS": "1"}
    procs = []
    for rank in range(spec.processes):
        argv = [
            sys.executable, str(Path(__file__).resolve()), "--peer", spec.peer,
            "--rank", str(rank), "--world", str(spec.processes), "--port", str(port),
            "--epochs", str(epochs),
        ]  # fmt: skip
        if pp_mb:
            argv += ["--pp-microbatches", str(pp_mb)]
        if cap:
            argv += ["--microbatches", str(cap)]
        if link:
            argv = link.rank_command(rank, [*argv, "--master", link.master])
        procs.append(
            subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
            )
        )
    outs: list[list[dict[str, Any]]] = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            if p.returncode != 0:
                raise RuntimeError(f"the {spec.peer_label} process failed: {_tail(err)}")
            outs.append(json.loads(out.strip().splitlines()[-1])["epochs"])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outs


def run_edgetrain(
    spec: Spec,
    epochs: int,
    tmp: Path,
    rep: int,
    timeout: int,
    tree: Path = REPO,
    hosts: Path | None = None,
    microbatches: int | None = None,
    key: str | None = None,
) -> Path:
    """Launch the comparison's edgetrain run as a user does (with ``hosts``, on those hosts
    over ssh); its run directory."""
    key = key or spec.name
    recipe = tmp / f"{key}.toml"
    recipe.write_text(recipe_text(spec, epochs, microbatches))
    run_dir = tmp / f"{key}-{rep}"
    argv = [sys.executable, "-m", "edgetrain", "launch", str(recipe), "--run-dir", str(run_dir)]
    if hosts is not None:
        argv += ["--hosts", str(hosts)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, cwd=tmp, env=env, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"edgetrain {spec.technique} failed: {_tail(out.stdout + out.stderr)}")
    return run_dir


def measure(
    spec: Spec,
    args: argparse.Namespace,
    tmp: Path,
    has_dist: bool,
    log: Any,
    link: shaped.Link | None = None,
    key: str | None = None,
) -> dict[str, Any]:
    """The comparison's repetitions, arms interleaved; per-repetition values and summaries.
    With ``link``, both arms run across its two emulated hosts, ``--link-microbatches`` per
    epoch."""
    key = key or spec.name
    cap = args.link_microbatches if link else None
    et_vals: list[float] = []
    peer_vals: list[float] = []
    ratios: list[float] = []
    first = 2
    for rep in range(args.repeats):
        arms = ["edgetrain", "peer"] if rep % 2 == 0 else ["peer", "edgetrain"]
        got: dict[str, float] = {}
        for arm in arms:
            if arm == "peer" and not has_dist and spec.peer != "plain":
                continue
            if arm == "edgetrain":
                hosts = link.hosts_file if link else None
                run_dir = run_edgetrain(
                    spec, args.epochs, tmp, rep, args.timeout, args.tree, hosts, cap, key
                )
                w = window(edgetrain_rows(run_dir / "metrics"), first)
            else:
                outs = run_peer(spec, args.epochs, args.pp_microbatches, args.timeout, link, cap)
                w = window(outs, first)
            got[arm] = w[spec.metric]
            print(f"  {key} {rep + 1}/{args.repeats} {arm}: {w[spec.metric]:.6g}", file=log)
        et_vals.append(got["edgetrain"])
        if "peer" in got:
            peer_vals.append(got["peer"])
            ratios.append(ratio(got["edgetrain"], got["peer"]))
    result: dict[str, Any] = {
        "technique": spec.technique,
        "peer": spec.peer_label,
        "metric": spec.metric,
        "goal": {"ratio": spec.goal, "at_least": spec.higher_is_better},
        "edgetrain": et_vals,
        "edgetrain_summary": summary(et_vals),
    }
    if link:
        result["link"] = {**shaped.link_facts(link.bps), "microbatches_per_epoch": cap}
    if ratios:
        result.update(
            {
                "peer_values": peer_vals,
                "peer_summary": summary(peer_vals),
                "ratio": ratios,
                "ratio_summary": summary(ratios),
                "meets_goal": meets(spec, statistics.median(ratios)),
            }
        )
    else:
        result["peer_skipped"] = "torch.distributed is not available in this torch build"
    return result


def _distributed_available() -> bool:
    try:
        import torch.distributed as dist
    except ImportError:
        return False
    return bool(dist.is_available())


def _fmt(metric: str, s: dict[str, float]) -> str:
    if metric == "s_per_iter":
        return f"{s['median'] * 1e3:.3f} [{s['min'] * 1e3:.3f}, {s['max'] * 1e3:.3f}] ms/iter"
    return f"{s['median']:,.0f} [{s['min']:,.0f}, {s['max']:,.0f}] samples/s"


def table(result: dict[str, Any]) -> str:
    lines = [
        f"pipeline per-step speed, edgetrain beside PyTorch: median [min, max] of "
        f"{result['repeats']} repetitions, arms interleaved, epochs 2-{result['epochs']} of "
        "each run by its training clock",
    ]
    wide = max([13, *(len(name) for name in result["comparisons"])])
    lines.append(f"{'comparison':<{wide}} {'edgetrain':<36} {'PyTorch':<36} {'ratio':<22} goal")
    for name, c in result["comparisons"].items():
        et = _fmt(c["metric"], c["edgetrain_summary"])
        if "ratio_summary" in c:
            peer_s = _fmt(c["metric"], c["peer_summary"])
            r = c["ratio_summary"]
            rs = f"{r['median']:.2f} [{r['min']:.2f}, {r['max']:.2f}]"
            op = ">=" if c["goal"]["at_least"] else "<="
            goal = f"{op} {c['goal']['ratio']}  {'met' if c['meets_goal'] else 'not met'}"
        else:
            peer_s, rs, goal = "skipped: no torch.distributed", "-", "-"
        lines.append(f"{name:<{wide}} {et:<36} {peer_s:<36} {rs:<22} {goal}")
        where = f", {c['link']['rate']} tbf link" if "link" in c else ""
        lines.append(f"{'':<{wide}} {'':<36} ({c['peer']}{where})")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.peer:
        peer(
            args.peer, args.rank, args.world, args.port, args.epochs, args.pp_microbatches,
            args.master, args.microbatches,
        )  # fmt: skip
        return 0
    if args.link:
        why = shaped.requirements_unavailable()
        if why is not None:
            print(
                f"scripts/bench_pipeline: --link cannot build its emulated hosts here: {why}; "
                "run it as root where `edgetrain emulate up` works, or leave --link out",
                file=sys.stderr,
            )
            return 2
    has_dist = _distributed_available()
    if not has_dist:
        print("torch.distributed is not available: the DDP and Schedule1F1B arms are skipped")
    load_before = os.getloadavg()
    started = time.time()
    comps: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as tmp:
        for item in plan(args):
            if item.link is None:
                comps[item.key] = measure(item.spec, args, Path(tmp), has_dist, sys.stderr)
                continue
            with shaped.emulated_link(
                shaped.rate_bps(item.link), Path(tmp) / "emulate", args.tree, sys.executable,
                lambda msg: print(msg, file=sys.stderr),
            ) as link:  # fmt: skip
                comps[item.key] = measure(
                    item.spec, args, Path(tmp), has_dist, sys.stderr, link, item.key
                )
    import torch

    result = {
        "benchmark": "pipeline",
        "repeats": args.repeats,
        "epochs": args.epochs,
        "edgetrain_tree": str(args.tree),
        "window": "epochs 2..N of each run; edgetrain from its metrics (epoch_s, epoch_steps), "
        "PyTorch from perf_counter around each epoch after a barrier; slowest process",
        "settings": {
            "model": f"mlp {list(HIDDEN)}",
            "dataset": "digits",
            "microbatch": MICROBATCH,
            "optimizer": f"SGD lr={LR} momentum={MOMENTUM}",
            "threads_per_process": 1,
            "pipeline_split": list(SPLIT),
            "pp_microbatches_per_step": args.pp_microbatches or "one epoch's",
            "link": (
                {
                    **shaped.link_facts(shaped.rate_bps(args.link)),
                    "microbatches_per_epoch": args.link_microbatches,
                }
                if args.link
                else "loopback"
            ),
        },  # fmt: skip
        "machine": {
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "loadavg_before": list(load_before),
            "loadavg_after": list(os.getloadavg()),
            "seconds": round(time.time() - started, 1),
        },  # fmt: skip
        "comparisons": comps,
    }
    out = Path(args.out)
    if not out.is_absolute():
        out = REPO / out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    if args.format == "json":
        print(json.dumps(result, indent=2))
    else:
        print(table(result))
        print(f"written: {out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM (with --link): the clean-up has run
        print("scripts/bench_pipeline: interrupted; nothing written", file=sys.stderr)
        sys.exit(130)
