"""Benchmark: ``edgetrain advise`` checked against runs. On the emulated testbeds of the five
reproductions and on two settings of our own (all fixed in :data:`SETTINGS` before any run),
and on two settings where a user has chosen the family (:data:`FAMILY_SETTINGS`: advise asked
with ``--techniques``, fixed before any run of them), advise ranks every technique from its
cost model; the predicted best and the runners-up are then launched on the same testbed, one
after the other, and each run's measured iteration is set beside its prediction.

Per setting: the testbed brought up and verified (its table kept), advise run as a user runs it
(``edgetrain advise RECIPE --hosts HOSTS --run-dir ADV --format json``: with no profile it
measures one of the model inside the testbed's fastest host over ssh, one thread at that host's
CPU quota, then answers again from that profile, timed), the :data:`TOP` fastest fitting
techniques launched and the fastest of each other family (so that every setting ranks across
families too), one after the other (the recipe advise built for each, ``[data] max_samples``
sized so that the predicted best trains an epoch in about :data:`EPOCH_S` seconds and the
slowest launched in at most :data:`SLOWEST_EPOCH_S`, between 800 and 8,000 samples,
:data:`EPOCHS` epochs, evaluation only at the end, at each seed of ``--seeds``, every technique
at a seed before the next seed; default seed 1), and each run's measured iteration read as the
run's report reads it (each worker's median seconds per iteration over its epochs after the
first; the slowest worker's where the model predicts each worker, else the median:
:func:`edgetrain.report.predicted.compare`).

Beside each run, and once right after advise has measured its profile, the machine's own
speed is probed outside the testbed (:func:`machine_probe`: the median seconds of a plain
PyTorch SGD step of the setting's model at its batch, one thread, random data, for
:data:`PROBE_S` seconds). This machine's speed has moved by tens of percent between runs of one
check; the probe tells a slower machine from a model's miss. Each run's ``probe_ratio`` (its
probe over the profile's) and ``error_at_probe_speed`` (its error against the prediction scaled
by that ratio, as if every second of it followed the machine's speed: an upper bound of the
machine's share where links count) are written beside the raw error, and
``median_iteration_error_at_probe_speed`` beside the raw median, which alone is the goal's.

Figures (issue 32): ``predicted_best_share``, the share of settings whose predicted best was
measured best or within 10% of it (measured samples per second: the samples of one iteration
over its measured seconds); ``median_iteration_error``, the median |measured / predicted - 1|
over every run (each seed's run of each technique; a technique's rate for the ranking is its
median over the seeds). Writes JSON (per setting and run, the commit, the verification
tables). Run it alone, as root:
``sudo scripts/bench_advise [--settings a,b] [--seeds 1,2] [--work DIR] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DEFAULT_OUT = "benchmarks/advise/advise-check.json"
TOP = 3  # the predicted best and two runners-up are launched, and each other family's best
EPOCHS = 4
EPOCH_S = 4.0  # seconds the predicted best takes per epoch (sets max_samples) ...
SLOWEST_EPOCH_S = 30.0  # ... and the slowest launched at most (predicted)
WITHIN = 0.10  # the predicted best counts as right within 10% of the measured best
GOALS = {"predicted_best_share": 0.8, "median_iteration_error": 0.15}
PROBE_S = 1.5  # seconds of the machine probe beside each run


@dataclass(frozen=True)
class Case:
    """One setting: a testbed spec, the model, its options, batch and where it comes from."""

    name: str
    testbed: str
    model: str
    batch: int
    source: str
    options: dict[str, Any] = field(default_factory=dict)
    techniques: tuple[str, ...] = ()  # advise's --techniques (empty: every technique)


# Fixed before any run of this script: the five reproductions' testbeds with their models, and
# two of our own (a 3-stage LAN with a convolutional model, a WAN-limited 4-host testbed).
SETTINGS = (
    Case("dynacomm", "dynacomm.toml", "lenet5", 64, "DynaComm's reproduction (its testbed)"),
    Case("edgegossip-4", "edgegossip-4.toml", "lenet5", 32, "EdgeGossip's reproduction, R-EG-1"),
    Case("dlion-compute-4", "dlion-compute-4.toml", "lenet5", 128, "DLion's reproduction, b0 128"),
    Case("mercury-4u", "mercury-4u.toml", "lenet5", 32, "Mercury's reproduction, R-M1"),
    Case("mcpipe-2", "mcpipe-2.toml", "mlp", 16, "mcPipe's reproduction, the FC-heavy MLP",
         {"hidden": [2048, 2048, 2048]}),
    Case("own-mcpipe-3-cnn2", "mcpipe-3.toml", "cnn2", 32, "ours: 3 hosts on a LAN, cnn2"),
    Case("own-dlion-network-4", "dlion-network-4.toml", "lenet5", 32,
         "ours: 4 hosts, two sites behind a WAN"),
)  # fmt: skip

# Added 2026-12-06 (twenty-fifth session), before any run of them: a user who has chosen the
# family and asks which of its techniques, where the gossip family, fastest everywhere above,
# is left out: the parameter servers on DynaComm's WAN testbed, and the pipelines with Local
# on mcpipe-3 with the FC-heavy MLP.
FAMILY_SETTINGS = (
    Case("own-ps-dynacomm", "dynacomm.toml", "lenet5", 64,
         "ours: the parameter-server family alone on DynaComm's testbed",
         techniques=("dynacomm", "ibatch", "lbl", "sequential", "multips-sgd", "mercury")),
    Case("own-pipeline-mcpipe-3-mlp", "mcpipe-3.toml", "mlp", 16,
         "ours: the pipeline family alone on 3 laptops, the FC-heavy MLP",
         {"hidden": [2048, 2048, 2048]},
         techniques=("local", "pipedream", "mcpipe", "greedy", "dataparallel")),
)  # fmt: skip
ALL_SETTINGS = SETTINGS + FAMILY_SETTINGS


def base_recipe(case: Case, root: Path, seed: int = 1) -> dict[str, Any]:
    """The recipe advise reads for ``case`` (its family decides nothing: every technique gets
    its own layout on the testbed's slots)."""
    from edgetrain.experiment import recipes

    return {
        "run": {"name": f"advise-{case.name}", "seed": seed, "checkpoint_every": 0},
        "data": recipes.data("mnist", root),
        "model": {"name": case.model, **({"options": case.options} if case.options else {})},
        "train": {"family": "gossip", "technique": "gosgd", "batch_size": case.batch},
        "workers": [{"count": 1}],
    }


def launched(ranking: list[dict[str, Any]]) -> list[str]:
    """The techniques a setting launches, in advise's order (pure): the :data:`TOP` fastest
    that fit, then the fastest fitting one of every family not among them."""
    fits = [r for r in ranking if r["fits"]]
    chosen = [r["technique"] for r in fits[:TOP]]
    families = {r["family"] for r in fits[:TOP]}
    for r in fits[TOP:]:
        if r["family"] not in families:
            chosen.append(r["technique"])
            families.add(r["family"])
    return chosen


def judge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One setting's verdict from its runs (pure): the predicted and the measured order, and
    whether the predicted best was measured best or within :data:`WITHIN` of it."""
    done = [r for r in runs if r.get("measured_rate")]
    predicted = [r["technique"] for r in sorted(runs, key=lambda r: -r["predicted_rate"])]
    measured = [r["technique"] for r in sorted(done, key=lambda r: -r["measured_rate"])]
    if not done or predicted[0] not in measured:
        return {"predicted": predicted, "measured": measured, "best_right": None}
    top = max(r["measured_rate"] for r in done)
    mine = next(r["measured_rate"] for r in done if r["technique"] == predicted[0])
    return {
        "predicted": predicted,
        "measured": measured,
        "best_right": mine >= (1 - WITHIN) * top,
        "best_over_measured_best": round(mine / top, 3),
    }


def figures(settings: list[dict[str, Any]]) -> dict[str, Any]:
    """The two figures of the check over every judged setting and run (pure)."""
    judged = [
        s["verdict"]["best_right"] for s in settings if s["verdict"]["best_right"] is not None
    ]
    ones = [one for s in settings for r in s["runs"] for one in r.get("per_seed", [r])]
    errors = [abs(one["error"]) for one in ones if one.get("error") is not None]
    probed = [
        abs(one["error_at_probe_speed"])
        for one in ones
        if one.get("error_at_probe_speed") is not None
    ]
    return {
        "predicted_best_share": round(sum(judged) / len(judged), 3) if judged else None,
        "settings_judged": len(judged),
        "median_iteration_error": round(statistics.median(errors), 3) if errors else None,
        "runs_measured": len(errors),
        "median_iteration_error_at_probe_speed": (
            round(statistics.median(probed), 3) if probed else None
        ),
    }


def machine_probe(
    model: str,
    options: dict[str, Any],
    shape: tuple[int, int, int],
    classes: int,
    batch: int,
    seconds: float = PROBE_S,
) -> float:
    """The median seconds of a plain PyTorch SGD step (forward, loss, backward, step) of
    ``model`` at ``batch`` on random data, one thread, over ``seconds``: this machine's speed
    now, outside the testbed (:func:`edgetrain.profile.compute.plain_step_s`)."""
    import torch

    from edgetrain.models import build_model
    from edgetrain.profile.compute import plain_step_s

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        net = build_model(model, shape, classes, options)
        return plain_step_s(net, shape, batch, seconds, classes)
    finally:
        torch.set_num_threads(threads)


def at_probe_speed(measured_s: float | None, predicted_s: float, ratio: float) -> float | None:
    """A run's error against its prediction scaled by the machine's speed ``ratio`` (its probe
    over the profile's; pure)."""
    if not measured_s or not predicted_s or not ratio > 0:
        return None
    return measured_s / (predicted_s * ratio) - 1


def _advise(
    recipe: Path, hosts: Path, adv: Path, techniques: tuple[str, ...] = ()
) -> tuple[dict[str, Any], float]:
    import subprocess

    argv = [sys.executable, "-m", "edgetrain", "advise", str(recipe), "--hosts", str(hosts),
            "--run-dir", str(adv), "--format", "json"]  # fmt: skip
    if techniques:
        argv += ["--techniques", ",".join(techniques)]
    first = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if first.returncode != 0:
        raise SystemExit(f"advise failed: {first.stderr.strip()}")
    t0 = time.perf_counter()
    again = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    took = time.perf_counter() - t0
    if again.returncode != 0:
        raise SystemExit(f"advise failed: {again.stderr.strip()}")
    return json.loads(again.stdout), took


def over_seeds(per_seed: list[dict[str, Any]], predicted_s: float) -> dict[str, Any]:
    """A technique's figures over its seeds (pure): the median measured iteration and its error
    against the prediction, with the min and max (None where no seed measured one)."""
    got = [r["measured_s"] for r in per_seed if r.get("measured_s")]
    if not got:
        return {"measured_s": None, "error": None, "measured_min_s": None, "measured_max_s": None}
    mid = statistics.median(got)
    return {
        "measured_s": mid,
        "error": mid / predicted_s - 1 if predicted_s else None,
        "measured_min_s": min(got),
        "measured_max_s": max(got),
    }


def one_setting(
    case: Case,
    work: Path,
    root: Path,
    say: Any,
    tables: dict[str, str],
    seeds: tuple[int, ...] = (1,),
) -> dict:
    from edgetrain import tomlconfig
    from edgetrain.advise.api import entries
    from edgetrain.advise.candidates import chosen_techniques, hosts_for
    from edgetrain.advise.inputs import gather
    from edgetrain.experiment.arms import Arm
    from edgetrain.experiment.runner import Runner
    from edgetrain.experiment.testbed import testbed, verify_markdown
    from edgetrain.launch.hosts import load_hosts
    from edgetrain.recipe import parse_recipe
    from edgetrain.report.predicted import compare, measured_workers
    from edgetrain.rundir import read_jsonl, worker_stem
    from edgetrain.runtime.setup import load_run_data

    out = work / case.name
    out.mkdir(parents=True, exist_ok=True)
    base = parse_recipe(base_recipe(case, root))
    recipe_path = out / "recipe.toml"
    recipe_path.write_text(tomlconfig.recipe_toml(base_recipe(case, root)))
    say(f"{case.name}: bringing up and verifying testbed {case.testbed}")
    with testbed(REPO / "recipes" / "testbeds" / case.testbed, "adv") as tb:
        tables[case.name] = verify_markdown(tb)
        doc, took = _advise(recipe_path, tb.hosts_file, out / "advise", case.techniques)
        own_data = load_run_data(base)  # (``data`` below is each candidate's section)
        shape = tuple(int(v) for v in own_data.input_shape)
        classes = own_data.classes
        assert len(shape) == 3

        def probe() -> float:
            return machine_probe(case.model, case.options, shape, classes, case.batch)

        probe_ref = probe()  # beside the profile advise has just measured (or found)
        say(f"{case.name}: machine probe {probe_ref * 1e3:.2f} ms a step beside the profile")
        hosts, _ = load_hosts(tb.hosts_file)
        inputs = gather(base, out / "advise", hosts, None)
        found = {e.technique: (e, c) for e, c in entries(
            base, inputs.env, inputs.layers,
            chosen_techniques(base, list(case.techniques) or None))}  # fmt: skip
        chosen = launched(doc["ranking"])
        rates = [r["samples_per_s"] for r in doc["ranking"] if r["technique"] in chosen]
        samples = int(min(8000, max(800, min(rates[0] * EPOCH_S, rates[-1] * SLOWEST_EPOCH_S))))
        say(f"{case.name}: advise ranks {', '.join(chosen)} first ({took:.1f} s); "
            f"running them on {samples} samples an epoch")  # fmt: skip
        runner = Runner(out, say, timeout_s=900)
        arms = {}
        for technique in chosen:
            entry, cand = found[technique]
            data = cand.recipe.model_dump(mode="json", exclude_unset=True)
            data["data"] = {**data["data"], "max_samples": samples}
            data["train"] = {**data["train"], "epochs": EPOCHS, "eval_every": EPOCHS}
            text = tomlconfig.recipe_toml(data).replace("{", "{{").replace("}", "}}")
            text = text.replace("seed = 1\n", "seed = {seed}\n", 1)
            placed = out / f"hosts-{technique}.toml"
            placed.write_text(hosts_for(tb.hosts_file.read_text(), cand.hosts))
            arms[technique] = (Arm(technique, text), placed)
        measured: dict[str, list[dict[str, Any]]] = {t: [] for t in chosen}
        for seed in seeds:  # every technique at a seed, then the next seed: arms interleaved
            for technique in chosen:
                entry, cand = found[technique]
                arm, placed = arms[technique]
                probe_s = probe()
                summary = runner.summary(arm, seed, None, placed)
                run = out / "runs" / f"{technique}-s{seed}"
                manifest = json.loads((run / "manifest.json").read_text())
                rows = {
                    w["id"]: read_jsonl(run / "metrics" / f"{worker_stem(w['id'])}.jsonl")
                    for w in manifest.get("workers", [])
                }
                got = compare(entry.prediction, measured_workers(rows))
                ratio = probe_s / probe_ref
                measured[technique].append({
                    "seed": seed,
                    "measured_s": got["measured_s"],
                    "error": got["error"],
                    "probe_s": probe_s,
                    "probe_ratio": round(ratio, 4),
                    "error_at_probe_speed": at_probe_speed(
                        got["measured_s"], entry.prediction.iteration_s, ratio),
                    "status": summary.get("status"),
                    "final_accuracy": summary.get("test_accuracy"),  # the run's own, at its end
                    "workers": got["workers"],
                })  # fmt: skip
                seen = (f"measured {got['measured_s'] * 1e3:.1f} ms per iteration"
                        if got["measured_s"] else
                        f"no iteration measured (run {summary.get('status')})")  # fmt: skip
                say(f"{case.name}/{technique} seed {seed}: predicted "
                    f"{got['predicted_s'] * 1e3:.1f} ms, {seen} "
                    f"(machine at {1 / ratio:.2f}x the profile's speed)")  # fmt: skip
        runs = []
        for technique in chosen:
            entry, cand = found[technique]
            figs = over_seeds(measured[technique], entry.prediction.iteration_s)
            runs.append({
                "technique": technique,
                "family": entry.family,
                "samples_per_iteration": entry.samples,
                "predicted_s": entry.prediction.iteration_s,
                **figs,
                "predicted_rate": entry.rate,
                "measured_rate": entry.samples / figs["measured_s"] if figs["measured_s"] else None,
                "per_seed": measured[technique],
                "hosts": list(cand.hosts),
            })  # fmt: skip
    return {
        "setting": case.name,
        "testbed": case.testbed,
        "model": case.model,
        "batch": case.batch,
        "source": case.source,
        "techniques": list(case.techniques) or "all",
        "max_samples": samples,
        "seeds": list(seeds),
        "advise_s": round(took, 2),
        "probe_ref_s": probe_ref,
        "advice": {
            "best": doc["best"],
            "ranking": [
                {
                    k: r[k]
                    for k in (
                        "place",
                        "technique",
                        "family",
                        "iteration_s",
                        "samples_per_s",
                        "fits",
                    )
                }  # fmt: skip
                for r in doc["ranking"]
            ],
            "not_predicted": doc["not_predicted"],
        },
        "runs": runs,
        "verdict": judge(runs),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", default=None, help="only these settings (comma-separated)")
    ap.add_argument(
        "--work",
        type=Path,
        default=Path("bench-advise"),
        help="where the runs go (default ./bench-advise; completed runs are kept)",
    )
    ap.add_argument("--out", type=Path, default=REPO / DEFAULT_OUT, help="the JSON written")
    ap.add_argument("--data-root", type=Path, default=None, help="the MNIST test set")
    ap.add_argument("--seeds", default="1", help="seeds, comma-separated (default 1)")
    args = ap.parse_args(argv)  # fmt: skip
    try:
        seeds = tuple(int(x) for x in args.seeds.split(",") if x.strip())
    except ValueError:
        seeds = ()
    if not seeds or any(x < 0 for x in seeds):
        print(f"error: --seeds {args.seeds!r}: write seeds as numbers, like 1,2,3",
              file=sys.stderr)  # fmt: skip
        return 2
    names = [n.strip() for n in (args.settings or "").split(",") if n.strip()]
    known = {c.name: c for c in ALL_SETTINGS}
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"error: unknown setting(s) {', '.join(unknown)}; known: {', '.join(known)}",
              file=sys.stderr)  # fmt: skip
        return 2
    from edgetrain.errors import EdgetrainError
    from edgetrain.experiment import cli
    from edgetrain.experiment.report import code_commit

    try:
        root = cli.data_root(args.data_root)
    except EdgetrainError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    work = args.work.resolve()
    cases = [known[n] for n in names] if names else list(ALL_SETTINGS)
    tables: dict[str, str] = {}
    started = time.time()
    settings = []
    try:
        with cli.sigterm_interrupts():  # SIGTERM too: the testbed comes down on the way out
            for case in cases:
                settings.append(one_setting(case, work, root, cli.say, tables, seeds))
    except KeyboardInterrupt:
        print(f"interrupted: the completed runs are kept in {work}; run the same command "
              "again to resume", file=sys.stderr)  # fmt: skip
        return 130
    commit = code_commit()
    doc = {
        "benchmark": "advise-check",
        "commit": commit.get("commit"),
        "commit_dirty": commit.get("dirty"),
        **figures(settings),
        "goals": GOALS,
        "top": TOP,
        "epochs": EPOCHS,
        "seeds": list(seeds),
        "within": WITHIN,
        "wall_s": round(time.time() - started),
        "settings": settings,
        "testbed_verification": tables,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    for s in settings:
        v = s["verdict"]
        print(f"{s['setting']}: predicted {v['predicted']}, measured {v['measured']}, "
              f"best right: {v['best_right']}")  # fmt: skip
        for r in s["runs"]:
            err = "-" if r["error"] is None else f"{r['error']:+.0%}"
            print(f"  {r['technique']}: predicted {r['predicted_s'] * 1e3:.2f} ms, measured "
                  f"{(r['measured_s'] or 0) * 1e3:.2f} ms ({err})")  # fmt: skip
    print(f"predicted_best_share {doc['predicted_best_share']} over {doc['settings_judged']} "
          f"settings; median_iteration_error {doc['median_iteration_error']} over "
          f"{doc['runs_measured']} runs ({doc['median_iteration_error_at_probe_speed']} at the "
          "machine's probed speed)")  # fmt: skip
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
