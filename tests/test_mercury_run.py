"""Mercury end to end: four devices as real processes over ZeroMQ, each a trainer and the
shard server of a quarter of the parameters. Every replica ends with the same weights (their
hashes agree), resharding moves samples, and the report carries the speed-up model's terms."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgetrain.ps.mercury.device import under_cpu_quota
from edgetrain.rundir import read_jsonl
from tests.helpers.launching import Launch
from tests.helpers.procs import edgetrain_processes

RECIPE = """
[run]
name = "{technique}"
seed = 3
checkpoint_every = 0
[data]
dataset = "digits"
partition = "{partition}"
alpha = 0.5
[model]
name = "lenet5"
[train]
family = "ps"
technique = "{technique}"
epochs = 2
batch_size = 16
lr = 0.004
[mercury]
epoch_iterations = 8
reshard_every = 4
hash_every = 5
{extra}
[[workers]]
count = 4
"""


def _launch(tmp_path: Path, technique: str, extra: str = "", partition: str = "iid") -> Launch:
    path = tmp_path / f"{technique}.toml"
    path.write_text(RECIPE.format(technique=technique, extra=extra, partition=partition))
    return Launch(path, tmp_path / "runs")


def _finish(launch: Launch) -> dict:
    try:
        code, summary = launch.finish(timeout=150)
        manifest = launch.manifest()
    finally:
        launch.kill()
    assert code == 0, launch.stderr[-3000:]
    assert summary is not None and summary["status"] == "completed"
    assert edgetrain_processes(manifest["run_id"]) == {}
    return summary


def _final_hashes(run_dir: Path) -> set[str]:
    hashes = set()
    for w in range(4):
        rows = read_jsonl(run_dir / "metrics" / f"worker-{w}.jsonl")
        final = [r for r in rows if r.get("event") == "final"]
        assert final, f"worker {w} handed in nothing"
        hashes.add(final[-1]["weights_hash"])
    return hashes


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_four_devices_end_with_identical_replicas_and_reshard(tmp_path: Path) -> None:
    launch = _launch(tmp_path, "mercury")
    summary = _finish(launch)
    assert [w["role"] for w in summary["workers"]] == ["trainer"] * 4
    assert len(_final_hashes(launch.run_dir)) == 1  # every replica the same weights
    report = summary["technique_report"]
    assert len(set(report["weights_hashes"].values())) == 1
    assert report["hash_checks"] >= 3  # iterations 0, 5, 10, 15 checked on the wire
    assert report["reshard_rounds"] >= 3 and report["reshard_samples_placed"] > 0
    assert report["reshard_bytes"] > 0
    terms = report["per_iteration"]
    assert terms["t_cp_s"] > 0 and terms["t_cm_s"] > 0 and terms["t_is_s"] >= 0
    # the CPU the iterations used, against the cores the device may use (every thread's: a
    # share of the machine's cores, since no quota binds these local processes)
    assert terms["cpu_s"] > 0 and 0 < terms["cpu_use"] <= 1.0
    assert (
        report["settings"]["resharding"] == "aware"
        and report["settings"]["group_size"] == "anytime"
    )
    # ``auto`` keys: local processes resolve them as this process's cgroup says
    quota = under_cpu_quota()
    want = {"under_quota": quota, "batch_refresh": quota, "pace_utilisation": 0.6 if quota else 1.0}
    assert report["on_devices"] == {str(w): want for w in range(4)}
    if not quota:  # the paper's BACC: the anytime refresh scores at least one chunk
        assert report["cohort_mean"] >= 32
    assert "## Mercury" in (launch.run_dir / "report" / "summary.md").read_text()
    assert summary["test_accuracy"] > 0.3 and summary["iterations"] == 4 * 16


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_the_baseline_and_the_sequential_pipeline_on_non_iid_shards(tmp_path: Path) -> None:
    uniform = _launch(tmp_path, "multips-sgd", partition="dirichlet")
    summary = _finish(uniform)
    assert len(_final_hashes(uniform.run_dir)) == 1
    report = summary["technique_report"]
    assert report["settings"]["sampling"] == "uniform" and report["reshard_bytes"] == 0
    seq = _launch(
        tmp_path,
        "mercury",
        'scheduler = "sequential"\nresharding = "random"\nreshard_budget = 0.5',
        partition="dirichlet",
    )
    summary = _finish(seq)
    assert len(_final_hashes(seq.run_dir)) == 1
    report = summary["technique_report"]
    assert report["per_iteration"]["refresh_t1_s"] > 0  # the fixed group, on the training thread
    assert report["reshard_samples_placed"] > 0


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_the_batch_rescores_its_samples_and_the_replicas_stay_identical(tmp_path: Path) -> None:
    """``batch_refresh``: the training losses rescore the drawn samples, every refresh of T2
    is paced (here to half the cores), and the replicas still end bit for bit the same."""
    launch = _launch(tmp_path, "mercury", "batch_refresh = true\npace_utilisation = 0.5")
    summary = _finish(launch)
    assert len(_final_hashes(launch.run_dir)) == 1
    report = summary["technique_report"]
    assert report["settings"]["batch_refresh"] is True
    assert report["settings"]["pace_utilisation"] == 0.5
    assert summary["test_accuracy"] > 0.3 and summary["iterations"] == 4 * 16


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_a_recipe_without_lr_steps_adam_at_its_own_default_and_trains(tmp_path: Path) -> None:
    """``[train] lr``'s default (0.05) is an SGD step; Mercury steps Adam, which diverges at
    0.05 (a run of the benchmark ended at chance): without a recipe's lr it takes Adam's."""
    text = RECIPE.format(technique="multips-sgd", extra="", partition="iid")
    text = text.replace("lr = 0.004\n", "").replace("epochs = 2", "epochs = 4")
    text = text.replace("epoch_iterations = 8", "epoch_iterations = 25")
    path = tmp_path / "no-lr.toml"
    path.write_text(text)  # at lr 0.05 this run ends at 0.10; at Adam's 1e-3, at 0.90
    launch = Launch(path, tmp_path / "runs")
    summary = _finish(launch)
    assert summary["technique_report"]["settings"]["optimizer"] == "adam"
    assert summary["test_accuracy"] >= 0.8
