"""scripts/bench_pipeline.py's pure parts: the steady-state window, the summaries and ratios,
the recipes of its edgetrain arms, and its arguments (the benchmark itself is not run here);
``--link``'s plan (the emulated 2-host tbf link, the commands that reach its hosts), and where
root and namespaces are available, one short run of the shaped-link pair (a system test)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import tomllib

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_pipeline.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_pipeline", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_pipeline"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_summary_is_median_min_max(bench: ModuleType) -> None:
    assert bench.summary([3.0, 1.0, 2.0, 10.0]) == {"median": 2.5, "min": 1.0, "max": 10.0}
    assert bench.summary([4.0]) == {"median": 4.0, "min": 4.0, "max": 4.0}
    with pytest.raises(ValueError):
        bench.summary([])


def test_ratio_and_goals(bench: ModuleType) -> None:
    assert bench.ratio(27_000.0, 30_000.0) == pytest.approx(0.9)
    with pytest.raises(ValueError):
        bench.ratio(1.0, 0.0)
    local, dp = bench.SPECS["local"], bench.SPECS["dataparallel"]
    assert bench.meets(local, 0.9) and not bench.meets(local, 0.89)
    assert bench.meets(dp, 1.1) and not bench.meets(dp, 1.11)  # time: lower is better


def test_window_drops_warm_up_and_takes_the_slowest_process(bench: ModuleType) -> None:
    fast = [{"epoch": e, "seconds": 1.0, "steps": 10} for e in (1, 2, 3)]
    slow = [{"epoch": 1, "seconds": 9.0, "steps": 10}, {"epoch": 2, "seconds": 2.0, "steps": 10},
            {"epoch": 3, "seconds": 3.0, "steps": 10}]  # fmt: skip
    w = bench.window([fast, slow], first=2)
    assert w["epochs"] == 2 and w["seconds"] == 5.0 and w["steps"] == 20
    assert w["s_per_iter"] == 0.25
    assert w["samples_per_s"] == 20 * bench.MICROBATCH / 5.0
    # an epoch only one process reported (the run stopped early) is left out
    w = bench.window([fast, slow[:2]], first=2)
    assert w["epochs"] == 1 and w["seconds"] == 2.0
    with pytest.raises(ValueError, match="no epoch"):
        bench.window([fast], first=4)


def test_edgetrain_rows_read_the_runs_own_epoch_figures(bench: ModuleType, tmp_path: Path) -> None:
    rows = [
        {"event": "registered", "t": 0.1},
        {"event": "epoch", "epoch": 1, "epoch_s": 0.5, "epoch_steps": 89},
        {"event": "epoch", "epoch": 2, "epoch_s": 0.25, "epoch_steps": 89},
        {"event": "final", "steps": 178},
    ]
    (tmp_path / "worker-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "worker-1.jsonl").write_text(json.dumps({"event": "registered"}) + "\n")
    got = bench.edgetrain_rows(tmp_path)  # the evaluator-like worker with no epochs is skipped
    assert got == [[{"epoch": 1, "seconds": 0.5, "steps": 89},
                    {"epoch": 2, "seconds": 0.25, "steps": 89}]]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "technique", "role", "count"),
    [
        ("local", "local", "stage", 1),
        ("dataparallel", "dataparallel", "replica", 2),
        ("pipedream", "pipedream", "stage", 2),
    ],  # fmt: skip
)
def test_recipes_are_valid_and_the_same_training(
    bench: ModuleType, name: str, technique: str, role: str, count: int
) -> None:
    from edgetrain.recipe import parse_recipe

    data = tomllib.loads(bench.recipe_text(bench.SPECS[name], 7))
    recipe = parse_recipe(data)
    assert recipe.train.technique == technique and recipe.train.epochs == 7
    assert recipe.train.batch_size == bench.MICROBATCH and recipe.train.lr == bench.LR
    assert recipe.train.momentum == bench.MOMENTUM
    assert recipe.role_names() == [role] * count
    if technique == "pipedream":
        assert data["pipeline"]["split"] == list(bench.SPLIT)


def test_arguments(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    a = bench.parse_args([])
    assert (a.repeats, a.epochs, a.only) == (5, 10, list(bench.COMPARISONS))
    assert a.out == bench.DEFAULT_OUT
    q = bench.parse_args(["--quick", "--only", "local,pipedream"])
    assert (q.repeats, q.epochs, q.only) == (3, 6, ["local", "pipedream"])
    assert bench.parse_args(["--quick", "--repeats", "7"]).repeats == 7
    assert a.tree == bench.REPO
    bad_args = (["--only", "local,gpipe"], ["--repeats", "0"], ["--epochs", "1"], ["--tree", "/"])
    for bad in bad_args:
        with pytest.raises(SystemExit) as exc:
            bench.parse_args(bad)
        assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unknown comparison 'gpipe'" in err and "at least 2" in err
    assert "holds no edgetrain package" in err


# ---------------------------------------------------------------- --link: the shaped-link pair


def test_link_arguments_and_plan(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    keys = [p.key for p in bench.plan(bench.parse_args([]))]
    assert keys == list(bench.COMPARISONS)  # default: loopback only
    a = bench.parse_args(["--link", " 100Mbit", "--only", "local"])
    assert (a.link, a.link_only, a.link_microbatches) == ("100mbit", False, 30)
    planned = bench.plan(a)
    assert [(p.key, p.spec.name, p.link) for p in planned] == [
        ("local", "local", None), ("dataparallel@100mbit", "dataparallel", "100mbit")
    ]  # fmt: skip
    only = bench.plan(
        bench.parse_args(["--link", "1gbit", "--link-only", "--link-microbatches", "8"])
    )
    assert [(p.key, p.link) for p in only] == [("dataparallel@1gbit", "1gbit")]
    # a peer rank on the link: its rendezvous address and epoch cap
    r = bench.parse_args(["--peer", "ddp", "--master", "10.232.5.1", "--microbatches", "8"])
    assert (r.master, r.microbatches) == ("10.232.5.1", 8)
    assert bench.parse_args(["--peer", "ddp"]).master == "127.0.0.1"
    for bad in (["--link", "fast"], ["--link", "5kbit"], ["--link-only"],
                ["--link", "100mbit", "--link-microbatches", "0"]):  # fmt: skip
        with pytest.raises(SystemExit) as exc:
            bench.parse_args(bad)
        assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "'fast' is not a rate" in err and "outside 100kbit..100gbit" in err
    assert "--link-only needs --link RATE" in err


def test_link_recipe_caps_each_epoch(bench: ModuleType) -> None:
    from edgetrain.recipe import parse_recipe

    data = tomllib.loads(bench.recipe_text(bench.SPECS["dataparallel"], 3, 8))
    assert data["pipeline"] == {"microbatches": 8}
    assert parse_recipe(data).role_names() == ["replica", "replica"]
    pd = tomllib.loads(bench.recipe_text(bench.SPECS["pipedream"], 3, 8))
    assert pd["pipeline"] == {"split": list(bench.SPLIT), "microbatches": 8}
    assert "pipeline" not in tomllib.loads(bench.recipe_text(bench.SPECS["dataparallel"], 3))


def test_link_testbed_plan_shapes_both_directions(bench: ModuleType) -> None:
    shaped = bench.shaped
    bps = shaped.rate_bps("100mbit")
    assert bps == 100_000_000
    name = shaped.testbed_name(123456789)
    assert name == "benchlink23456789"  # a valid testbed name (at most 20 characters)
    topo = shaped.plan_topology(name, bps)
    assert [h.name for h in topo.hosts] == list(shaped.HOSTS)
    assert [h.link_bps for h in topo.hosts] == [bps, bps]
    assert all(h.cpu == shaped.HOST_CPU for h in topo.hosts)
    assert topo.path_bps(*shaped.HOSTS) == bps
    tbfs = {(c[2], c[6]) for c in topo.commands() if c[:2] == ["tc", "-n"] and "tbf" in c}
    shaped_at = {(c[2], c[6]): c[c.index("rate") + 1] for c in topo.commands() if "tbf" in c}
    for h in topo.hosts:  # each host's veth: its own end (egress) and the bridge's end (ingress)
        assert {(h.ns, "eth0"), (topo.fabric_ns, h.port)} <= tbfs
        assert shaped_at[h.ns, "eth0"] == shaped_at[topo.fabric_ns, h.port] == f"{bps}bit"
    assert len(tbfs) == 4  # one site: no WAN uplink in the way
    facts = shaped.link_facts(bps)
    assert facts["rate"] == "100 Mbit/s" and facts["rate_bps"] == bps


def test_link_commands_reach_the_emulated_hosts(bench: ModuleType, tmp_path: Path) -> None:
    from edgetrain.emulate.testbed import Testbed, hosts_toml
    from edgetrain.launch.hosts import parse_hosts
    from edgetrain.tomlconfig import loads

    shaped = bench.shaped
    name = shaped.testbed_name(42)
    topo = shaped.plan_topology(name, 100_000_000)
    link = shaped.Link(name, topo, tmp_path / "hosts.toml", 100_000_000)
    assert link.master == topo.hosts[0].address
    argv = link.rank_command(1, ["python", "x.py", "--peer", "ddp", "--note", "a b"])
    assert argv[:2] == ["sh", "-c"]
    script = argv[2]
    group = f"/sys/fs/cgroup/cpu/edgetrain-emulate/{name}/r1/cgroup.procs"
    assert topo.hosts[1].ns == f"etb-{name}.r1"
    assert script == (
        f"echo $$ > {group} && exec nsenter --net=/run/netns/etb-{name}.r1 "
        "python x.py --peer ddp --note 'a b'"
    )
    # the edgetrain arm's hosts file: the testbed's, every host starting in the tree under test
    parent = parse_hosts(loads(hosts_toml(Testbed(shaped.link_spec(name, 10**8), topo,
                                                  tmp_path, "/venv/python"))), "t")  # fmt: skip
    moved = parse_hosts(loads(shaped.hosts_for_workdir(parent, tmp_path / "tree")), "t")
    assert [h.workdir for h in moved.hosts] == [str(tmp_path / "tree")] * 2
    assert [h.address for h in moved.hosts] == [h.address for h in topo.hosts]
    assert moved.testbed == parent.testbed and moved.ssh_options == parent.ssh_options
    assert moved.python == "/venv/python" and moved.coordinator == topo.gateway_address


def test_link_refused_in_one_line_where_it_cannot_be_built(
    bench: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        bench.shaped, "requirements_unavailable", lambda: "network namespaces need root"
    )
    assert bench.main(["--link", "100mbit", "--out", "/nonexistent/x.json"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "network namespaces need root" in err
    assert "leave --link out" in err


def test_table_names_the_link(bench: ModuleType) -> None:
    one = bench.summary([0.05])
    c = {"metric": "s_per_iter", "peer": "DDP over gloo", "edgetrain_summary": one,
         "peer_summary": one, "ratio_summary": bench.summary([1.0]),
         "goal": {"ratio": 1.1, "at_least": False}, "meets_goal": True,
         "link": bench.shaped.link_facts(100_000_000)}  # fmt: skip
    text = bench.table({"repeats": 1, "epochs": 2, "comparisons": {"dataparallel@100mbit": c}})
    assert "dataparallel@100mbit 50.000 [50.000, 50.000] ms/iter" in text
    assert "(DDP over gloo, 100 Mbit/s tbf link)" in text


@pytest.mark.system
@pytest.mark.slow
@pytest.mark.timeout(150)
def test_link_end_to_end(bench: ModuleType, tmp_path: Path) -> None:
    """Both arms across 2 emulated hosts at 100 Mbit/s: each iteration moves the MLP's whole
    gradient (603 KB) each way, so it takes at least 48 ms there (about 2-3 ms over
    loopback); nothing of the testbed is left afterwards."""
    from edgetrain.emulate import cgroups
    from edgetrain.emulate.testbed import namespaces
    from tests.helpers.skips import skip_or_fail

    why = bench.shaped.requirements_unavailable()
    if why is not None:
        skip_or_fail(why)
    if not bench._distributed_available():
        skip_or_fail("torch.distributed is not available (the DDP arm needs it)")
    out = tmp_path / "bench.json"
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--link", "100mbit", "--link-only", "--repeats", "1",
         "--epochs", "2", "--link-microbatches", "6", "--out", str(out), "--timeout", "90"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    name = bench.shaped.testbed_name(proc.pid)
    assert proc.returncode == 0, stderr[-3000:] + stdout[-2000:]
    assert "dataparallel@100mbit" in stdout and f"removing testbed {name}" in stderr
    c = json.loads(out.read_text())["comparisons"]["dataparallel@100mbit"]
    assert c["link"]["rate_bps"] == 100_000_000 and c["link"]["microbatches_per_epoch"] == 6
    assert len(c["edgetrain"]) == len(c["peer_values"]) == len(c["ratio"]) == 1
    floor = 150_794 * 4 * 8 / 100e6  # the gradient's bytes each way at the link's rate
    assert c["edgetrain"][0] > 0.9 * floor and c["peer_values"][0] > 0.9 * floor, c
    assert not [n for n in namespaces() if n.startswith(f"etb-{name}")]
    assert not cgroups.testbed_dirs(name)
