"""Chaos: the shipped recipes trained while random workers are killed, suspended and stopped,
and what survived (issue 31).

For each recipe whose technique takes lost workers back (``[run] restart``), and each seed, the
script launches the recipe once undisturbed, then once more with ``[run] restart`` while it
injects faults, one at a time, into random training workers, and, where the technique
restarts its parameter-server shards, into one shard first and then shards and trainers alike:

- ``kill``: SIGKILL; the launcher sees the exit and restarts it;
- ``stop``: SIGSTOP for longer than the heartbeat limit (the coordinator declares it lost),
  then SIGCONT; it is told to stop when it speaks again, exits, and is restarted;
- ``term``: SIGTERM, a clean exit before its hand-in; restarted.

After each fault it waits until the victim rejoined and ended an epoch again, then waits a
seeded random pause before the next. It records, per fault, when the victim left, was started
again and rejoined; per run, whether it completed with every worker, whether nothing was lost
(manifest, every worker's metrics with a final event, the final model whose SHA-256 the summary
names) and the final test accuracy beside the undisturbed run's. Recipes whose technique cannot
rejoin yet are listed as skipped, with why. ``OUT/chaos.json`` and ``OUT/chaos.md`` are written
after every run; a rerun with the same ``--out`` keeps the runs it has (resumable).

    scripts/chaos [--out DIR] [--faults 50] [--seeds 2] [--recipes quickstart,dynacomm]
    scripts/chaos --quick      # 12 faults, one seed per recipe

Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
KINDS = ("kill", "stop", "term")
# every shipped recipe, in the order the script runs them
RECIPES = ("quickstart", "edgegossip", "dynacomm", "dlion", "mercury", "mcpipe")
HEARTBEAT_S = 0.5  # the chaos runs' heartbeat (the silence limit is three of them)
STOP_FOR_S = 3 * HEARTBEAT_S + 2.0  # a suspension the coordinator must notice
RESTARTS = 50  # [run] restart: more than any worker needs here
# Each fault needs time: the launcher's back-off (1 s, 2 s, 4 s ... per worker), a new
# process's start-up and the next barrier. The runs' epochs are calibrated so that training
# lasts about this long per fault (at least MIN_TRAIN_S), from a short pilot at the recipe's
# own epochs.
SECONDS_PER_FAULT = 15.0
MIN_TRAIN_S = 60.0
# faults go in only during the first share of the epochs (a worker restarted later could come
# back after the last barrier: turned away, the run would end without it)
INJECT_SHARE = 0.75
ACCURACY_POINTS = 0.5  # issue 31: within half a point of the undisturbed run


# ------------------------------------------------------------------ pure parts


def calibrated_epochs(pilot_epochs: int, pilot_train_s: float, faults: int) -> int:
    """Epochs whose training lasts about :data:`SECONDS_PER_FAULT` per fault (at least
    :data:`MIN_TRAIN_S`), from a pilot that trained ``pilot_epochs`` in ``pilot_train_s``.
    Pure."""
    if pilot_epochs < 1 or not pilot_train_s > 0:
        raise ValueError("the pilot trained nothing")
    want = max(MIN_TRAIN_S, SECONDS_PER_FAULT * faults)
    return max(pilot_epochs, math.ceil(pilot_epochs * want / pilot_train_s))


def pick(
    rng: random.Random, eligible: Sequence[int], kinds: Sequence[str], must: Sequence[int] = ()
) -> tuple[str, int]:
    """The next fault: its kind and victim, drawn from ``rng``; from ``must`` when it is not
    empty (a run's first shard fault). Pure given the generator."""
    pool = sorted(must) if must else sorted(eligible)
    if not pool:
        raise ValueError("no worker to inject a fault into")
    return rng.choice(list(kinds)), rng.choice(pool)


def share(total: int, runs: int) -> list[int]:
    """``total`` faults over ``runs`` runs, as even as whole numbers go (earlier runs take the
    remainder). Pure."""
    if runs < 1:
        raise ValueError("at least one run")
    base, extra = divmod(max(0, total), runs)
    return [base + (1 if i < extra else 0) for i in range(runs)]


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def problems(run_dir: Path, summary: dict[str, Any] | None, model_sha: str | None) -> list[str]:
    """What the run lost or got inconsistent: every worker completed, each one's metrics with a
    ``final`` event, the summary, and the final model file whose SHA-256 its final-model event
    named (``model_sha``)."""
    out: list[str] = []
    try:
        manifest = json.loads((run_dir / "manifest.json").read_text())
    except (OSError, ValueError) as exc:
        return [f"manifest unreadable: {exc}"]
    if manifest.get("status") != "completed":
        out.append(f"status {manifest.get('status')}: {manifest.get('error')}")
    for w in manifest.get("workers") or []:
        if w.get("status") != "completed":
            out.append(f"worker {w.get('id')} {w.get('status')}")
        path = run_dir / "metrics" / f"worker-{w.get('id')}.jsonl"
        try:
            events = [json.loads(x).get("event") for x in path.read_text().splitlines() if x]
        except (OSError, ValueError) as exc:
            out.append(f"worker {w.get('id')} metrics unreadable: {exc}")
            continue
        if "final" not in events:
            out.append(f"worker {w.get('id')} has no final event")
    model = run_dir / "model" / "final.safetensors"
    if summary is None:
        out.append("no summary")
    elif not model.is_file():
        out.append("no final model")
    elif model_sha != file_sha256(model):
        out.append("the final model file is not the one the run recorded")
    return out


def totals(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The chaos runs' figures over every run: faults injected and recovered, runs completed,
    nothing lost, accuracy within :data:`ACCURACY_POINTS` of the undisturbed run. Pure."""
    chaos = [r for r in rows if r.get("arm") == "chaos"]
    faults = [f for r in chaos for f in r.get("faults", [])]
    rejoin = [f["rejoin_s"] for f in faults if isinstance(f.get("rejoin_s"), (int, float))]
    deltas = [
        r["accuracy_delta_points"] for r in chaos if r.get("accuracy_delta_points") is not None
    ]
    startup = [r["startup_s"] for r in rows if isinstance(r.get("startup_s"), (int, float))]
    back = [f["restart_to_join_s"] for f in faults if isinstance(f.get("restart_to_join_s"), float)]
    ratio = None
    if back and startup:
        ratio = _spread(back)["median"] / _spread(startup)["median"]  # type: ignore[index]
    return {
        "runs": len(chaos),
        "completed": sum(r.get("status") == "completed" for r in chaos),
        "nothing_lost": sum(not r.get("problems") for r in chaos),
        "faults": len(faults),
        "by_kind": {k: sum(f["kind"] == k for f in faults) for k in KINDS},
        "recovered": sum(f.get("rejoined") is True for f in faults),
        "within_accuracy": sum(abs(d) <= ACCURACY_POINTS for d in deltas),
        # runs that rewind (the pipeline family, Mercury): the undisturbed model, bit for bit
        "same_model": sum(r.get("same_model") is True for r in chaos),
        "compared_models": sum(isinstance(r.get("same_model"), bool) for r in chaos),
        "accuracy_delta_points": _spread(deltas),
        "rejoin_s": _spread(rejoin),
        "startup_s": _spread(startup),
        # a restarted process's start to its re-entry, against a run's start to training
        # (issue 31's goal: at most 2x)
        "restart_to_join_s": _spread(back),
        "restart_vs_startup": ratio,
    }


def _spread(xs: Sequence[float]) -> dict[str, float] | None:
    if not xs:
        return None
    s = sorted(xs)
    mid = len(s) // 2
    median = s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2
    return {"median": median, "min": s[0], "max": s[-1]}


# ------------------------------------------------------------------ one launch


class Launched:
    """``edgetrain launch RECIPE --events -``: its events on a queue, as they come."""

    def __init__(self, recipe: Path, runs: Path, sets: dict[str, Any], log: Path) -> None:
        argv = [sys.executable, "-m", "edgetrain", "launch", str(recipe), "--runs-root", str(runs)]
        for key, value in sets.items():
            argv += ["--set", f"{key}={json.dumps(value)}"]
        argv += ["--events", "-", "--format", "json"]
        self.err = log.open("w")
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=self.err, text=True, env=env, cwd=REPO,
            start_new_session=True,
        )  # fmt: skip
        self.rows: list[dict[str, Any]] = []
        self.q: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.ended = False

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                try:
                    self.q.put(json.loads(line))
                except ValueError:
                    continue
        self.q.put(None)

    def next(self, timeout: float) -> dict[str, Any] | None:
        """The next event (None: the launcher ended, or nothing within ``timeout``)."""
        if self.ended:
            return None
        try:
            row = self.q.get(timeout=timeout)
        except queue.Empty:
            return None
        if row is None:
            self.ended = True
            return None
        self.rows.append(row)
        return row

    def wait(self, match: Any, timeout: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            row = self.next(left)
            if row is None:
                return None
            if match(row):
                return row
        return None

    def finish(self, timeout: float) -> dict[str, Any] | None:
        while self.next(timeout) is not None:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.err.close()
        return next((r for r in reversed(self.rows) if r.get("event") == "summary"), None)

    def run_dir(self) -> Path | None:
        row = next((r for r in self.rows if r.get("event") == "launch"), None)
        return Path(row["run_dir"]) if row else None


def _pid(run_dir: Path, worker: int) -> int | None:
    try:
        rows = json.loads((run_dir / "manifest.json").read_text())["workers"]
        pid = rows[worker].get("pid")
    except (OSError, ValueError, KeyError, IndexError):
        return None
    return pid if isinstance(pid, int) else None


def _is(row: dict[str, Any], event: str, worker: int | None = None) -> bool:
    return row.get("event") == event and (worker is None or row.get("worker") == worker)


def run_once(
    recipe: str,
    seed: int,
    faults: int,
    out: Path,
    rng: random.Random,
    say: Any,
    epochs: int | None = None,
    arm: str | None = None,
) -> dict[str, Any]:
    """One launch of ``recipe`` at ``seed`` (``epochs``: None, the recipe's), injecting
    ``faults`` faults (0: undisturbed)."""
    arm = arm or ("chaos" if faults else "undisturbed")
    sets: dict[str, Any] = {"run.seed": seed}
    if epochs is not None:
        sets["train.epochs"] = epochs
    # a lost pipeline stage (or Mercury device) rewinds the run to the last checkpoint: one
    # after every epoch (in both arms, so that they differ only by the faults)
    every = 1 if rewinds(recipe) else 0
    sets.update({"run.heartbeat_s": HEARTBEAT_S, "run.checkpoint_every": every})
    if faults:
        sets.update({"run.restart": RESTARTS})
    tag = f"{recipe}-s{seed}-{arm}"
    launch = Launched(REPO / "recipes" / f"{recipe}.toml", out / "runs" / tag, sets,
                      out / "logs" / f"{tag}.log")  # fmt: skip
    t0 = time.monotonic()
    row: dict[str, Any] = {"recipe": recipe, "seed": seed, "arm": arm, "faults": []}
    row["commit"] = _commit()  # a resumed report can mix runs of several commits
    started = launch.wait(lambda r: _is(r, "started"), 300)
    if started is not None:
        row["startup_s"] = float(started.get("t", time.monotonic() - t0))
    roles: dict[int, str] = {}
    for r in launch.rows:
        if _is(r, "registered") and isinstance(r.get("worker"), int):
            roles[r["worker"]] = str(r.get("role", "")).split(":")[0]  # "trainer:2"
    trainers = sorted(w for w, role in roles.items() if role not in ("server", "evaluator"))
    servers = sorted(w for w, role in roles.items() if role == "server")
    servers = servers if "server" in restarts_of(recipe) else []
    run_dir = launch.run_dir()
    epoch_of = dict.fromkeys(trainers, 0)
    seen = 0

    def sync() -> None:
        """Each trainer's last ended epoch, from the events read so far."""
        nonlocal seen
        for r in launch.rows[seen:]:
            if _is(r, "epoch") and r.get("worker") in epoch_of:
                epoch_of[r["worker"]] = max(epoch_of[r["worker"]], int(r.get("epoch", 0)))
        seen = len(launch.rows)

    left = faults if started is not None and run_dir is not None else 0
    while left > 0 and not launch.ended:
        assert run_dir is not None
        until = time.monotonic() + rng.uniform(0.5, 2.0)  # a pause, reading meanwhile
        while (wait := until - time.monotonic()) > 0 and launch.next(wait) is not None:
            pass
        sync()
        total = epochs or 1
        eligible = [w for w in trainers if epoch_of[w] < INJECT_SHARE * total]
        if not eligible:
            say(f"  {tag}: too few epochs left for the {left} faults not injected")
            break
        hit = {f["worker"] for f in row["faults"]}
        must = servers if servers and not hit & set(servers) else []
        kind, victim = pick(rng, eligible + servers, KINDS, must)
        pid = _pid(run_dir, victim)
        if pid is None:
            break
        role = roles.get(victim, "trainer")
        fault: dict[str, Any] = {"kind": kind, "worker": victim, "role": role, "pid": pid}
        mark = len(launch.rows)
        fault["at_epoch"] = epoch_of.get(victim, min(epoch_of.values(), default=0))
        try:
            if kind == "kill":
                os.kill(pid, signal.SIGKILL)
            elif kind == "term":
                os.kill(pid, signal.SIGTERM)
            else:
                os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            continue
        left -= 1
        injected = time.monotonic()
        if kind == "stop":
            launch.wait(lambda r, v=victim: _is(r, "failed", v), STOP_FOR_S)
            time.sleep(max(0.0, STOP_FOR_S - (time.monotonic() - injected)))
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        joined = launch.wait(lambda r, v=victim: _is(r, "joined", v), 180)
        after = launch.rows[mark:]
        failed = next((r for r in after if _is(r, "failed", victim)), None)
        restarted = next((r for r in after if _is(r, "restarted", victim)), None)
        fault["rejoined"] = joined is not None
        if failed is not None:
            fault["reason"] = failed.get("reason")
        if joined is not None and failed is not None:
            fault["rejoin_s"] = float(joined["t"]) - float(failed["t"])
            fault["joined_epoch"] = joined.get("epoch")
        if joined is not None and restarted is not None:
            fault["restart_to_join_s"] = float(joined["t"]) - float(restarted["t"])
        row["faults"].append(fault)
        say(
            f"  {tag}: {kind} {role} {victim} at epoch {fault['at_epoch']}: "
            + (f"rejoined in {fault.get('rejoin_s', 0):.1f} s" if joined else "did not rejoin")
        )
        if joined is None:
            break
        # it trains again (a shard has no epochs: a trainer ends one after its return)
        again = [victim] if victim in epoch_of else trainers
        launch.wait(lambda r, v=again: _is(r, "epoch") and r.get("worker") in v, 120)
        sync()
    summary = launch.finish(timeout=1800)
    row["status"] = summary.get("status") if summary else "no summary"
    row["test_accuracy"] = summary.get("test_accuracy") if summary else None
    row["wall_s"] = time.monotonic() - t0
    row["run_dir"] = str(run_dir) if run_dir else None
    final = next((r for r in launch.rows if r.get("event") in ("final_model", "averaged")), {})
    sha = final.get("model_file_sha256")
    row["problems"] = problems(run_dir, summary, sha) if run_dir else ["no run directory"]
    if summary:
        row["train_s"] = summary.get("train_s")
        row["epochs"] = summary.get("epochs")
        row["model_sha256"] = summary.get("model_sha256")
    return row


# ------------------------------------------------------------------ the report


def rejoins(recipe: str) -> tuple[bool, str]:
    """Can the recipe's technique take a lost worker back (and why not)?"""
    from edgetrain.errors import EdgetrainError
    from edgetrain.launch.restart import technique_rejoins
    from edgetrain.recipe import load_recipe

    try:
        loaded, _ = load_recipe(REPO / "recipes" / f"{recipe}.toml")
    except EdgetrainError as exc:
        return False, str(exc)
    if technique_rejoins(loaded):
        return True, ""
    what = f"{loaded.train.family}/{loaded.train.technique}"
    return False, f"a {what} worker cannot rejoin a running run yet (no [run] restart)"


def restarts_of(recipe: str) -> frozenset[str]:
    """The roles whose lost workers the recipe's technique restarts."""
    from edgetrain.launch.restart import restarted_roles
    from edgetrain.recipe import load_recipe
    from edgetrain.runtime.side import launcher_side

    loaded, _ = load_recipe(REPO / "recipes" / f"{recipe}.toml")
    family = launcher_side(loaded.train.family, loaded.train.technique)
    return restarted_roles(loaded, family.policy(loaded).fatal_roles)


def rewinds(recipe: str) -> bool:
    """Whether a lost worker that comes back rewinds the recipe's run to its last checkpoint
    (the pipeline family, Mercury)."""
    from edgetrain.recipe import load_recipe
    from edgetrain.runtime.side import launcher_side

    loaded, _ = load_recipe(REPO / "recipes" / f"{recipe}.toml")
    return launcher_side(loaded.train.family, loaded.train.technique).policy(loaded).rewinds


def write(out: Path, doc: dict[str, Any]) -> None:
    doc["totals"] = totals(doc["runs"])
    tmp = out / "chaos.json.tmp"
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(out / "chaos.json")
    (out / "chaos.md").write_text(markdown(doc))


def markdown(doc: dict[str, Any]) -> str:
    t = doc["totals"]
    lines = [
        "# Chaos: lost workers during training",
        "",
        f"Made by commit {doc.get('commit')} on {doc.get('started')}; "
        f"{t['faults']} faults ({', '.join(f'{k} {v}' for k, v in t['by_kind'].items())}) "
        f"over {t['runs']} chaos runs.",
        "",
        f"- Runs completed with every worker: {t['completed']} of {t['runs']}",
        f"- Nothing lost (manifest, metrics, final model): {t['nothing_lost']} of {t['runs']}",
        f"- Faults recovered (the victim rejoined): {t['recovered']} of {t['faults']}",
        f"- Final accuracy within {ACCURACY_POINTS} points of the undisturbed run: "
        f"{t['within_accuracy']} of {t['runs']}",
        *(
            [
                f"- The undisturbed run's model, bit for bit (runs that rewind, where the "
                f"technique is deterministic): {t['same_model']} of {t['compared_models']}"
            ]
            if t.get("compared_models")
            else []
        ),
        "",
        "| recipe | seed | arm | faults | rejoined | status | test acc | delta (points) | lost |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["runs"]:
        acc = r.get("test_accuracy")
        delta = r.get("accuracy_delta_points")
        lines.append(
            f"| {r['recipe']} | {r['seed']} | {r['arm']} | {len(r.get('faults', []))} | "
            f"{sum(f.get('rejoined') is True for f in r.get('faults', []))} | {r.get('status')} | "
            + (f"{acc:.4f}" if isinstance(acc, float) else "-")
            + " | "
            + (f"{delta:+.2f}" if isinstance(delta, float) else "-")
            + f" | {'; '.join(r.get('problems') or []) or 'nothing'} |"
        )
    for name, why in doc.get("skipped", {}).items():
        lines.append(f"\n- {name}: skipped, {why}")
    pairs = (
        ("rejoin_s", "lost to rejoined"),
        ("restart_to_join_s", "a restarted process's start to its re-entry"),
        ("startup_s", "a run's start-up (launch to training)"),
    )
    for key, label in pairs:
        s = t.get(key)
        if s:
            lines.append(f"- {label}: median {s['median']:.1f} s [{s['min']:.1f}, {s['max']:.1f}]")
    if t.get("restart_vs_startup") is not None:
        lines.append(f"- re-entry against start-up: {t['restart_vs_startup']:.2f}x (goal 2x)")
    return "\n".join(lines) + "\n"


def _commit() -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
            check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("chaos-out"))
    ap.add_argument("--faults", type=int, default=50, help="faults in all (default 50)")
    ap.add_argument("--seeds", type=int, default=2, help="chaos runs per recipe (default 2)")
    ap.add_argument("--seed", type=int, default=0, help="the fault draw's seed")
    ap.add_argument("--recipes", default=",".join(RECIPES), help="shipped recipes, by name")
    ap.add_argument("--quick", action="store_true", help="12 faults, one seed")
    args = ap.parse_args(argv)
    if args.quick:
        args.faults, args.seeds = 12, 1
    names = [n.strip() for n in args.recipes.split(",") if n.strip()]
    unknown = [n for n in names if not (REPO / "recipes" / f"{n}.toml").is_file()]
    if unknown or args.faults < 1 or args.seeds < 1:
        print(
            f"error: {'unknown recipe ' + ', '.join(unknown) if unknown else 'faults and seeds'}"
            f"; pass shipped recipes ({', '.join(RECIPES)}) and positive counts",
            file=sys.stderr,
        )
        return 2
    out = args.out
    (out / "logs").mkdir(parents=True, exist_ok=True)
    path = out / "chaos.json"
    doc: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    doc.setdefault("runs", [])
    doc.update(commit=_commit(), started=doc.get("started") or time.strftime("%Y-%m-%d %H:%M"))
    doc["skipped"] = {}
    able = []
    for name in names:
        ok, why = rejoins(name)
        if ok:
            able.append(name)
        else:
            doc["skipped"][name] = why
    plan = share(args.faults, len(able) * args.seeds) if able else []
    say = print
    doc.setdefault("epochs", {})
    k = 0
    for name in able:
        faults_here = plan[k : k + args.seeds]
        if name not in doc["epochs"]:  # the pilot: the recipe as shipped, undisturbed
            say(f"{name}: pilot at the recipe's epochs, to size the runs")
            pilot = run_once(name, 0, 0, out, random.Random(0), say, arm="pilot")
            train_s, pilot_epochs = pilot.get("train_s"), pilot.get("epochs")
            if not isinstance(train_s, (int, float)) or not isinstance(pilot_epochs, int):
                doc["skipped"][name] = f"its pilot did not complete ({pilot.get('status')})"
                k += args.seeds
                continue
            doc["epochs"][name] = calibrated_epochs(pilot_epochs, train_s, max(faults_here))
            say(f"  {pilot_epochs} epochs trained in {train_s:.1f} s: "
                f"{doc['epochs'][name]} epochs per run")  # fmt: skip
        epochs = int(doc["epochs"][name])
        for seed in range(args.seeds):
            n = plan[k]
            k += 1
            for arm, faults in (("undisturbed", 0), ("chaos", n)):
                have = [
                    r for r in doc["runs"]
                    if (r["recipe"], r["seed"], r["arm"]) == (name, seed, arm)
                ]  # fmt: skip
                if have:
                    continue
                say(f"{name} seed {seed}: {arm}" + (f", {faults} faults" if faults else ""))
                rng = random.Random(f"{args.seed}-{name}-{seed}")
                row = run_once(name, seed, faults, out, rng, say, epochs)
                if arm == "chaos":
                    base = next(
                        (r for r in doc["runs"]
                         if (r["recipe"], r["seed"], r["arm"]) == (name, seed, "undisturbed")),
                        None,
                    )  # fmt: skip
                    a, b = row.get("test_accuracy"), base.get("test_accuracy") if base else None
                    if isinstance(a, float) and isinstance(b, float):
                        row["undisturbed_accuracy"] = b
                        row["accuracy_delta_points"] = 100.0 * (a - b)
                    if base is not None and base.get("model_sha256"):
                        # a rewinding run ends with the undisturbed model, bit for bit
                        row["same_model"] = row.get("model_sha256") == base["model_sha256"]
                doc["runs"].append(row)
                write(out, doc)
                lost = "; ".join(row["problems"]) or "nothing"
                acc = row.get("test_accuracy")
                n_f = len(row["faults"])
                say(f"  {row['status']}, test accuracy {acc}, {n_f} faults, lost: {lost}")
    write(out, doc)
    print((out / "chaos.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
