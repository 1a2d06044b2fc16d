"""Profile checks: layer-sum / step ratios, per-layer stability vs repeats, link figures."""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import threading
from typing import Any

import numpy as np
import torch

from edgetrain.models import build_model, layer_specs
from edgetrain.profile.compute import ComputeConfig, profile_compute
from edgetrain.profile.probe import ProbeConfig, ProbeServer, probe_link

MODELS = {"resnet18": (3, 32, 32), "lenet5": (1, 28, 28), "mlp": (1, 28, 28)}
CLI = (
    "import sys; from edgetrain.cli import app as a, profile_cmd as p; "
    "'profile' in [g.name for g in a.app.registered_groups] or "
    "a.app.add_typer(p.app, name='profile'); a.main(sys.argv[1:])"
)


def ratios(models: list[str], batch_sizes: tuple[int, ...], repeats: int) -> list[dict[str, Any]]:
    """Sum of per-layer fwd+bwd over the measured step_s, per model."""
    out = []
    for name in models:
        shape = MODELS[name]
        model = build_model(name, shape, 10)
        cfg = ComputeConfig(batch_sizes=batch_sizes, repeats=repeats)
        cp = profile_compute(model, layer_specs(model, shape), shape, cfg)
        out.append(
            {
                "model": name,
                "step_s": cp.step_s,
                "layer_sum_s": cp.layer_sum_s,
                "ratio": cp.layer_sum_ratio,
                "throughput": cp.throughput,
            }
        )
    return out


def stability(name: str, repeat_counts: list[int], trials: int) -> list[dict[str, Any]]:
    """Per-layer time spread across ``trials`` profiles, for each repeat count (0: the default,
    repeats filling 1 s): the median over layers of (max - min) / mean of fwd+bwd time."""
    shape = MODELS[name]
    model = build_model(name, shape, 10)
    specs = layer_specs(model, shape)
    out = []
    for r in repeat_counts:
        cfg = ComputeConfig(batch_sizes=(32,), repeats=r or 10, min_time_s=0.0 if r else 1.0)
        runs = np.array(
            [
                [lp.fwd_s + lp.bwd_s for lp in profile_compute(model, specs, shape, cfg).layers]
                for _ in range(trials)
            ]
        )
        spread = (runs.max(0) - runs.min(0)) / runs.mean(0)
        out.append({"repeats": r, "median_layer_spread": float(np.median(spread))})
    return out


def loopback() -> dict[str, Any]:
    stop = threading.Event()
    with ProbeServer("127.0.0.1") as srv:
        t = threading.Thread(target=srv.serve, args=(stop, 20), daemon=True)
        t.start()
        try:
            return probe_link(srv.endpoint, ProbeConfig()).to_dict()
        finally:
            stop.set()
            t.join()


def tbf(rate: str) -> dict[str, Any]:
    from edgetrain.emulate import netns

    reason = netns.netns_unavailable()
    if reason is not None:
        return {"skipped": reason}
    py = [sys.executable, "-c", CLI]
    with netns.veth_pair(rate) as link:
        serve = [*py, "profile", "serve", "--bind", link.addr_b, "--format", "json"]
        server = subprocess.Popen(
            netns.ns_command(link.ns_b, serve), stdout=subprocess.PIPE, text=True
        )
        try:
            assert server.stdout is not None
            lines = []
            for line in server.stdout:
                lines.append(line)
                if line.startswith("}"):
                    break
            endpoint = json.loads("".join(lines))["endpoint"]
            probe = [*py, "profile", "--peer", endpoint, "--format", "json"]
            done = subprocess.run(
                netns.ns_command(link.ns_a, probe), capture_output=True, text=True, timeout=300
            )
            if done.returncode != 0:
                return {"error": done.stderr.strip()}
            return dict(json.loads(done.stdout)["links"][0], rate=rate)
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--models", default="resnet18,lenet5,mlp")
    p.add_argument("--batch-sizes", default="8,16,32")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--stability", default="3,10,30,100,0", help="repeat counts ('' to skip)")
    p.add_argument("--links", action="store_true", help="also probe loopback and a tbf link")
    p.add_argument("--rate", default="100mbit")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    report: dict[str, Any] = {"torch_threads": torch.get_num_threads()}
    bs = tuple(int(b) for b in args.batch_sizes.split(","))
    models = [m for m in args.models.split(",") if m]
    report["ratios"] = ratios(models, bs, args.repeats)
    if args.stability:
        counts = [int(r) for r in args.stability.split(",")]
        report["stability_lenet5"] = stability("lenet5", counts, trials=3)
    if args.links:
        report["loopback"] = loopback()
        report["tbf"] = tbf(args.rate)
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
