"""``edgetrain advise``: the ranking and its reasons against literal tables, the what-if
changes, each technique's layout and placement, the environment from profiles, and the command
end to end on literal profiles (in-process) and measuring its own (a process)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from edgetrain.advise import whatif
from edgetrain.advise.api import advice, samples_per_iteration
from edgetrain.advise.candidates import candidate, chosen_techniques, place_workers
from edgetrain.advise.environment import Environment, HostEntry, from_profiles, local
from edgetrain.advise.inputs import data_flags, profiled_host
from edgetrain.advise.plot import split
from edgetrain.advise.rank import Entry, Memory, near_best, rank, reasons
from edgetrain.advise.remote import median_profile, pace_s, parse_remote, remote_command
from edgetrain.errors import EdgetrainError
from edgetrain.recipe import ADAM_DEFAULT_LR, parse_recipe
from edgetrain.runtime.predict import Layer, Prediction
from edgetrain.runtime.setting_build import HostFacts
from edgetrain.runtime.setting_build import TestbedFacts as Facts
from tests.helpers.cli import run_cli
from tests.helpers.sshd import Sshd, sshd  # noqa: F401 - the fixture

MiB, GiB = 2**20, 2**30

# lenet5's profiled layers (names as the zoo's units), at batch 32, 1 thread
LAYERS = [
    ("1", 624, 602112, 0.00056, 0.00042),
    ("4", 9664, 204800, 0.00087, 0.00090),
    ("8", 192480, 15360, 0.00041, 0.00037),
    ("10", 40656, 10752, 0.00004, 0.00010),
    ("12", 3400, 1280, 0.00008, 0.00017),
]


def profile(host: str, scale: float = 1.0, links: list[dict] | None = None) -> dict:
    """A literal profile of lenet5 on ``host``, its times ``scale`` times the reference's."""
    return {
        "schema_version": 1,
        "host": host,
        "created": "2026-12-06T00:00:00+00:00",
        "device": {
            "cpu_model": "test",
            "cores": 2,
            "memory_bytes": 4 * GiB,
            "torch_threads": 1,
            "cuda": None,
        },
        "model": "lenet5",
        "input": [1, 8, 8],
        "batch_sizes": [32],
        "layers": [
            {
                "name": n,
                "param_bytes": p,
                "activation_bytes": a,
                "fwd_s": f * scale,
                "bwd_s": b * scale,
                "fwd_iqr_s": 0.0,
                "bwd_iqr_s": 0.0,
            }
            for n, p, a, f, b in LAYERS
        ],  # fmt: skip
        "step_s": 0.0039 * scale,
        "throughput": {"32": 32 / (0.0039 * scale)},
        "links": links or [],
        "peak_memory_bytes": None,
        "compute_source": "measured",
    }


def layers() -> list[Layer]:
    return [Layer(n, f, b, p, a) for n, p, a, f, b in LAYERS]


RECIPE = {
    "data": {"dataset": "digits"},
    "model": {"name": "lenet5"},
    "train": {"family": "ps", "technique": "dynacomm", "batch_size": 32},
    "workers": [{"role": "server", "count": 1}, {"count": 2}],
}


def recipe(**train: object) -> object:
    return parse_recipe({**RECIPE, "train": {**RECIPE["train"], **train}})


def env(*hosts: HostFacts, labels: dict | None = None) -> Environment:
    return Environment(Facts("t", hosts, {}), 1.0, 0.0, labels or {}, "test")


def host(name: str, cpu: float = 1.0, mbit: int = 100, workers: int = 1, **kw) -> HostFacts:
    return HostFacts(name, cpu, mbit * 10**6, workers, **kw)


# ---- the ranking (pure) ----------------------------------------------------------------------


def pred(name: str, it: float, **parts: float) -> Prediction:
    return Prediction(name, it, parts)


def test_rank_orders_by_samples_per_second_and_fitting_first() -> None:
    entries = [
        Entry("ps", "sequential", pred("sequential", 0.010), 64),  # 6,400/s
        Entry("pipeline", "local", pred("local", 0.004), 32),  # 8,000/s
        Entry("gossip", "gosgd", pred("gosgd", 0.005), 64),  # 12,800/s, does not fit
        Entry("ps", "mercury", None, error="no cost model yet"),
    ]
    entries[2] = Entry(
        "gossip", "gosgd", pred("gosgd", 0.005), 64, (Memory(0, "jetson", 3 * GiB, 2 * GiB),)
    )
    ranked, missing = rank(entries, train_samples=1600)
    assert [r.entry.technique for r in ranked] == ["local", "sequential", "gosgd"]
    assert [r.place for r in ranked] == [1, 2, 3]
    assert ranked[0].epoch_s == pytest.approx(0.2)  # 1600 / 8000
    assert ranked[1].epoch_s == pytest.approx(0.25)
    assert [m.technique for m in missing] == ["mercury"]
    assert "does not fit: worker 0 needs 3.00 GiB, device jetson has 2.00 GiB" in ranked[2].reasons
    assert ranked[0].reasons[0] == "fastest predicted: 8,000 samples/s"
    assert ranked[1].reasons[0] == "1.25x the time of local per sample"
    assert rank(entries, None)[0][0].epoch_s is None


def test_reasons_balance_pace_baseline_and_note() -> None:
    comm = Entry(
        "ps",
        "dynacomm",
        Prediction("dynacomm", 0.09, {"compute": 0.01, "communication": 0.08}, notes=("n1", "n2")),
        32,
        baseline="sequential",
    )
    base = Entry("ps", "sequential", pred("sequential", 0.1, compute=0.01, communication=0.08), 32)
    lines = reasons(comm, comm, {"dynacomm": comm, "sequential": base})
    assert lines == [
        "fastest predicted: 356 samples/s",
        "communication dominates (8.0x compute): overlapping it with compute can hide at most "
        "11% of a sequential iteration",
        "11% faster than its baseline sequential",
        "n1",
    ]
    even = Entry("g", "x", pred("x", 0.02, compute=0.01, communication=0.008), 32)
    assert reasons(even, comm, {})[1] == (
        "compute and communication comparable (0.80x): overlap can hide up to 44%"
    )
    cpu = Entry("g", "y", pred("y", 0.02, compute=0.01, communication=0.001), 32)
    assert reasons(cpu, comm, {})[1] == "compute dominates (10.0x communication)"
    paced = Entry("g", "z", Prediction("z", 0.03, {}, per_worker={0: 0.01, 1: 0.01, 2: 0.03}), 32)
    assert reasons(paced, comm, {})[1] == "the slowest worker (2) sets the pace: 3.0x the median"
    slower = Entry("g", "w", pred("w", 0.2), 32, baseline="sequential")
    assert (
        reasons(slower, comm, {"sequential": base})[1] == "50% slower than its baseline sequential"
    )


def test_near_ties_are_named_where_the_models_cannot_call_them() -> None:
    """Within 10% of the fastest's time per sample (inside the models' ~15% error) a runner-up
    is a near tie, named in both entries' reasons and in the document; one that does not fit
    never is, nor one just past 10%."""
    a = Entry("gossip", "gosgd", pred("gosgd", 0.0100), 64)  # 6,400/s
    b = Entry("gossip", "edgegossip", pred("edgegossip", 0.0109), 64)  # 1.09x the time
    c = Entry("pipeline", "greedy", pred("greedy", 0.0111), 64)  # 1.11x: past 10%
    big = Entry("ps", "mercury", pred("mercury", 0.0101), 64, (Memory(0, "j", 3 * GiB, GiB),))
    assert [e.technique for e in near_best([c, b, a, big])] == ["gosgd", "edgegossip"]
    assert near_best([a, c]) == [] and near_best([a]) == [] and near_best([]) == []
    ranked, _ = rank([a, b, c, big], None)
    lines = {r.entry.technique: r.reasons for r in ranked}
    assert lines["gosgd"][1] == (
        "a near tie with edgegossip (within 10%: inside the cost models' error): measure them "
        "before choosing"
    )
    assert lines["edgegossip"][:2] == (
        "1.09x the time of gosgd per sample",
        "a near tie with gosgd: measure both before choosing",
    )
    assert not any("near tie" in x for x in lines["greedy"] + lines["mercury"])


def test_plot_split_adds_up_to_the_iteration_per_sample() -> None:
    row = {
        "samples_per_iteration": 10,
        "iteration_s": 0.010,
        "parts": {"compute": 0.006, "exposed_communication": 0.003, "overhead": 0.004},
    }
    got = split(row)
    assert got == pytest.approx(
        {"compute": 600.0, "exposed_communication": 300.0, "overhead": 100.0, "other": 0.0}
    )
    assert split({**row, "parts": {}})["other"] == pytest.approx(1000.0)


# ---- what-if (pure) ----------------------------------------------------------------------------


def test_what_if_changes() -> None:
    base = Environment(
        Facts("t", (host("a", site="s1"), host("b", site="s2")), {"s1": 10**9, "s2": 10**9}),
        1.0,
    )
    got = whatif.apply(base, whatif.parse(["bandwidth=10mbit,rtt=20ms", "hosts=+2"]))
    assert [h.name for h in got.facts.hosts] == ["a", "b", "b+1", "b+2"]
    assert {h.link_bps for h in got.facts.hosts} == {10**7}
    assert got.facts.wan_bps == {"s1": 10**7, "s2": 10**7}
    assert got.latency_s == pytest.approx(0.010)
    assert [h.name for h in whatif.apply(base, whatif.parse(["hosts=1"])).facts.hosts] == ["a"]
    small = whatif.apply(base, whatif.parse(["cpu=0.5", "memory=2g", "wan=50mbit"]))
    assert {(h.cpu, h.memory) for h in small.facts.hosts} == {(0.5, 2 * GiB)}
    assert small.facts.wan_bps == {"s1": 5 * 10**7, "s2": 5 * 10**7}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("bandwidth", "expected KEY=VALUE"),
        ("speed=2", "expected KEY=VALUE with KEY one of"),
        ("bandwidth=fast", "is not a rate"),
        ("rtt=soon", "write a round trip like 20ms"),
        ("hosts=two", "write hosts=+2"),
        ("cpu=0", "cpu is a share of cores"),
        ("memory=1k", "below 32 MiB"),
    ],
)
def test_what_if_refuses_bad_changes(text: str, fragment: str) -> None:
    with pytest.raises(whatif.WhatIfError) as info:
        whatif.parse([text])
    assert fragment in str(info.value)


def test_what_if_host_count_and_wan_limits() -> None:
    one_site = env(host("a"), host("b"))
    with pytest.raises(whatif.WhatIfError, match="leaves 0 hosts"):
        whatif.apply(one_site, whatif.parse(["hosts=-2"]))
    with pytest.raises(whatif.WhatIfError, match="on one site"):
        whatif.apply(one_site, whatif.parse(["wan=10mbit"]))


# ---- the environment from profiles (pure) --------------------------------------------------


def test_environment_from_each_hosts_profile() -> None:
    probes = [{"peer": "tcp://b:1", "bandwidth_Bps": 12.5e6, "rtt_s": 0.004, "dt_s": 1e-4}]
    profiles = {"a": profile("a", links=probes), "b": profile("b", 2.0)}
    hosts = [HostEntry("a", 1, None, None, ("ps",)), HostEntry("b", 2, 1 * GiB)]
    got = from_profiles(hosts, profiles, "a", 1.0, default_bps=8e6)
    a, b = got.facts.hosts
    assert (a.cpu, a.link_bps, a.memory) == (1.0, 100_000_000, 4 * GiB)
    assert (b.cpu, b.link_bps, b.memory, b.workers) == (0.5, 8_000_000, 1 * GiB, 2)
    assert got.latency_s == pytest.approx(0.002)
    assert got.labels == {"a": ("ps",), "b": ()}
    with pytest.raises(ValueError, match="host b has no link figure"):
        from_profiles(hosts, profiles, "a", 1.0)
    with pytest.raises(ValueError, match="host c has no profile"):
        from_profiles([HostEntry("c")], profiles, "a", 1.0)


def test_local_environment_shares_this_machines_cores() -> None:
    got = local(2.0, [1.0, 1.0, 1.0, 3.0], reference_cpu=1.0)
    assert [round(h.cpu, 4) for h in got.facts.hosts] == [0.5, 0.5, 0.5, 0.1667]
    assert got.slots == 4


# ---- candidates: layout and placement -------------------------------------------------------


def test_every_family_lays_out_its_workers_on_the_slots() -> None:
    r = recipe()
    e = env(host("a", 2.0), host("b"), host("c", 0.5), labels={"c": ("ps",)})
    got = {t: candidate(r, f, t, e, layers()) for f, t in chosen_techniques(r, None)}
    assert got["dynacomm"].roles == ("server", "trainer", "trainer")  # the user's own
    assert got["dynacomm"].hosts == ("c", "a", "b")  # the server on the host labelled ps
    assert got["mercury"].roles == ("trainer",) * 3
    assert got["gosgd"].roles == ("trainer",) * 3
    assert got["pipedream"].roles == ("stage",) * 3
    assert got["local"].roles == ("stage",)
    assert got["local"].hosts == ("a",)  # the fastest host
    assert got["dataparallel"].roles == ("replica",) * 2  # 3 do not split a microbatch of 32
    assert all(c.error is None for c in got.values())
    two = env(host("a"))
    alone = candidate(r, "gossip", "gosgd", two, layers())
    assert alone.error == "gossip needs at least 2 workers to exchange"
    assert samples_per_iteration(got["gosgd"].recipe) == 96
    assert samples_per_iteration(got["dynacomm"].recipe) == 64
    assert samples_per_iteration(got["pipedream"].recipe) == 32


def test_a_pipelines_recipe_carries_the_cuts_its_prediction_assumed() -> None:
    """A launch without a split cuts by multiply-accumulates on equal devices; advise writes
    the cuts its model chose on these hosts into the recipe, so the run is the one predicted."""
    from edgetrain.advise.candidates import recipe_text
    from edgetrain.pipeline.family import launch_partition, model_table
    from edgetrain.runtime.side import launcher_side

    r = recipe()
    e = env(host("a", 2.0), host("b", 1.0), host("c", 0.25))
    got = candidate(r, "pipeline", "pipedream", e, layers())
    split = got.recipe.model_dump(mode="json", exclude_unset=True)["pipeline"]["split"]
    side = launcher_side("pipeline", "pipedream")
    train = {**RECIPE["train"], "family": "pipeline", "technique": "pipedream"}
    stages = [{"role": "stage", "count": 3}]
    bare = parse_recipe({**RECIPE, "train": train, "workers": stages})
    assert side.planned(bare, got.setting) == {"pipeline": {"split": split}}
    assert sum(split) == len(LAYERS) and len(split) == 3
    assert split[-1] == 1  # the 0.25-core host takes one unit, the 2-core host the most
    assert split[0] >= 2
    # the launch would cut otherwise: by multiply-accumulates on equal devices
    infos, _, _ = model_table(bare)
    launched = [hi - lo for lo, hi in launch_partition(bare, infos, 3).bounds]
    assert launched != split
    # the prediction is the same before and after the cuts are written in
    assert side.predict(got.recipe, got.setting) == side.predict(bare, got.setting)
    assert "split = [" in recipe_text(got)
    # a user's split stays; one stage (Local) and replicas have nothing to cut
    own = parse_recipe(
        {**RECIPE, "train": train, "workers": stages, "pipeline": {"split": [3, 1, 1]}}
    )
    assert side.planned(own, got.setting) is None
    assert candidate(own, "pipeline", "pipedream", e, layers()).recipe.model_dump(
        mode="json", exclude_unset=True)["pipeline"]["split"] == [3, 1, 1]  # fmt: skip
    for name in ("local", "dataparallel"):
        data = candidate(r, "pipeline", name, e, layers()).recipe.model_dump(mode="json")
        assert (data.get("pipeline") or {}).get("split") is None


def test_a_candidate_that_raises_its_lr_in_the_run_reaches_the_users_lr() -> None:
    """DLion warms its lr up to k times [train] lr: built from another technique's recipe, its
    lr is the user's over k, so the largest step is the user's; and the other way round."""
    r = recipe()  # SGD at the default 0.05
    e = env(host("a", 2.0), host("b"), host("c", 0.5))
    dlion = candidate(r, "gossip", "dlion", e, layers())
    assert dlion.error is None and dlion.recipe.train.lr == pytest.approx(0.05 / 3)
    assert candidate(r, "gossip", "gosgd", e, layers()).recipe.train.lr == pytest.approx(0.05)
    small = parse_recipe({**RECIPE, "dlion": {"lr_policy": "small"}})
    got = candidate(small, "gossip", "dlion", e, layers()).recipe
    assert got.train.lr == pytest.approx(0.05)  # SmallLR keeps the lr as it is
    own = parse_recipe({**RECIPE, "train": {**RECIPE["train"], "family": "gossip",
                        "technique": "dlion", "lr": 0.01}, "workers": [{"count": 3}]})  # fmt: skip
    assert candidate(own, "gossip", "dlion", e, layers()).recipe.train.lr == pytest.approx(0.01)
    assert candidate(own, "gossip", "gosgd", e, layers()).recipe.train.lr == pytest.approx(0.03)
    doc = advice(r, e, layers(), [("gossip", "dlion"), ("gossip", "gosgd")], None)
    assert {x["technique"]: round(x["lr"], 5) for x in doc["ranking"]} == {
        "dlion": round(0.05 / 3, 5), "gosgd": 0.05}  # fmt: skip


def test_placement_follows_labels_like_launch() -> None:
    r = parse_recipe({**RECIPE, "workers": [{"count": 2}, {"role": "server", "labels": ["big"]}]})
    e = env(host("a"), host("b"), host("c"), labels={"a": ("big",)})
    assert place_workers(r, e) == ["b", "c", "a"]
    bad = env(host("a"), host("b"), host("c"))
    with pytest.raises(EdgetrainError, match="needs a host labelled big"):
        place_workers(r, bad)


def test_chosen_techniques() -> None:
    r = recipe()
    assert chosen_techniques(r, ["mcpipe", "dynacomm", "mcpipe"]) == [
        ("pipeline", "mcpipe"),
        ("ps", "dynacomm"),
    ]
    assert chosen_techniques(r, None)[0] == ("ps", "sequential")
    with pytest.raises(EdgetrainError, match="'nope' is not a technique"):
        chosen_techniques(r, ["nope"])


def test_advice_document_ranks_a_slow_link_against_a_fast_one() -> None:
    r = recipe()
    fast = env(host("a", mbit=10_000), host("b", mbit=10_000), host("c", mbit=10_000))
    slow = whatif.apply(fast, whatif.parse(["bandwidth=1mbit"]))
    pairs = [("ps", "sequential"), ("ps", "dynacomm"), ("pipeline", "local")]
    doc_fast = advice(r, fast, layers(), pairs, 1437)
    doc_slow = advice(r, slow, layers(), pairs, 1437, ["bandwidth=1mbit"])
    assert doc_slow["what_if"] == ["bandwidth=1mbit"]
    assert doc_slow["best"] == "local"  # 250 KB per iteration each way over 1 Mbit/s
    its = {x["technique"]: x["iteration_s"] for x in doc_slow["ranking"]}
    fast_its = {x["technique"]: x["iteration_s"] for x in doc_fast["ranking"]}
    assert its["sequential"] > 10 * fast_its["sequential"]
    assert its["local"] == pytest.approx(fast_its["local"])
    row = next(x for x in doc_slow["ranking"] if x["technique"] == "dynacomm")
    assert row["workers"] == [
        {"role": "server", "host": "a"},
        {"role": "trainer", "host": "b"},
        {"role": "trainer", "host": "c"},
    ]
    assert row["epoch_s"] == pytest.approx(1437 / row["samples_per_s"])
    assert any("communication dominates" in line for line in row["reasons"])
    json.dumps(doc_slow)  # plain data


# ---- the command --------------------------------------------------------------------------------

DYNACOMM = """\
[data]
dataset = "digits"
[model]
name = "lenet5"
[train]
family = "ps"
technique = "dynacomm"
batch_size = 32
[[workers]]
role = "server"
[[workers]]
count = 2
"""


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "profiles").mkdir(parents=True)
    (run / "profiles" / "ref.json").write_text(json.dumps(profile("ref")))
    (tmp_path / "r.toml").write_text(DYNACOMM)
    return run


def test_advise_on_a_testbed_spec_writes_advice_json(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe_path = run_dir.parent / "r.toml"
    plot = run_dir.parent / "advice.png"
    code, out, err = run_cli(
        capsys, "advise", str(recipe_path), "--testbed", "recipes/testbeds/mercury-4u.toml",
        "--run-dir", str(run_dir), "--techniques", "sequential,dynacomm,gosgd,local",
        "--what-if", "bandwidth=10mbit", "--plot", str(plot), "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert doc == json.loads((run_dir / "advice.json").read_text())
    assert doc["environment"]["name"] == "mercury-4u"
    assert {h["link_bps"] for h in doc["environment"]["hosts"]} == {10**7}
    assert sorted(x["technique"] for x in doc["ranking"]) == [
        "dynacomm", "gosgd", "local", "sequential",
    ]  # fmt: skip
    assert doc["train_samples"] == 1437 and doc["profile"] == "ref"
    assert plot.stat().st_size > 1000
    code, out, _ = run_cli(capsys, "advise", str(recipe_path), "--run-dir", str(run_dir))
    assert code == 0
    assert "fastest predicted" in out and "wrote" in out


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--what-if", "speed=2"], "expected KEY=VALUE"),
        (["--techniques", "nope"], "'nope' is not a technique"),
        (["--techniques", ","], "--techniques is empty"),
        (["--testbed", "x.toml", "-H", "a:2"], "give --testbed or the hosts"),
        (["-H", "nohost.invalid:1,b:2"], "nohost.invalid"),
        (["--what-if", "hosts=-9"], "that leaves"),
    ],
)
def test_advise_bad_input_is_one_line(
    run_dir: Path, capsys: pytest.CaptureFixture[str], args: list[str], fragment: str
) -> None:
    before = sorted(p.name for p in run_dir.iterdir())
    code, out, err = run_cli(
        capsys, "advise", str(run_dir.parent / "r.toml"), "--run-dir", str(run_dir), *args
    )
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert fragment in err
    assert sorted(p.name for p in run_dir.iterdir()) == before  # no advice.json written


def test_advise_hosts_with_their_profiles(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    probes = [{"peer": "tcp://x:1", "bandwidth_Bps": 1.25e6, "rtt_s": 0.01, "dt_s": 1e-4}]
    for name, scale in (("a", 1.0), ("b", 1.0), ("c", 4.0)):
        path = run_dir / "profiles" / f"{name}.json"
        path.write_text(json.dumps(profile(name, scale, probes)))
    code, out, err = run_cli(
        capsys, "advise", str(run_dir.parent / "r.toml"), "-H", "a:1,b:1,c:1",
        "--run-dir", str(run_dir), "--techniques", "gosgd,sequential", "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    cpus = {h["name"]: h["cpu"] for h in doc["environment"]["hosts"]}
    assert cpus == pytest.approx({"a": 1.0, "b": 1.0, "c": 0.25})
    assert {h["link_bps"] for h in doc["environment"]["hosts"]} == {10**7}
    assert doc["environment"]["latency_s"] == pytest.approx(0.005)


@pytest.mark.timeout(240)
def test_advise_measures_a_profile_of_this_machine_when_none_exists(tmp_path: Path) -> None:
    """A separate process, as a user runs it: no profile anywhere, so advise measures one
    (seconds), keeps it in the run directory and answers from it."""
    (tmp_path / "r.toml").write_text(DYNACOMM)
    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "edgetrain", "advise", str(tmp_path / "r.toml"), "--run-dir",
         str(run), "--techniques", "dynacomm,gosgd,mcpipe", "--format", "json"],
        capture_output=True, text=True, timeout=200,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (run / "profiles" / "local.json").is_file()
    # its steps timed on the recipe's own samples (a step's time depends on its inputs)
    assert json.loads((run / "profiles" / "local.json").read_text())["timed_on"] == "data:digits"
    assert doc["profile"] == "local"
    assert doc["environment"]["source"] == "local processes on this machine"
    assert {x["technique"] for x in doc["ranking"]} == {"dynacomm", "gosgd", "mcpipe"}
    for row in doc["ranking"]:
        assert row["iteration_s"] > 0 and row["reasons"]


# ---- profiles over ssh -----------------------------------------------------------------------


def test_remote_command_and_what_a_host_prints() -> None:
    cmd = remote_command(
        "/opt/py", "/srv/x y", "jet-1", "mlp", {"hidden": [8, 8]}, (1, 8, 8), 10, 16, "tcp://h:5"
    )
    assert cmd == (
        "cd '/srv/x y' && /opt/py -m edgetrain profile --model mlp --input 1x8x8 --classes 10 "
        "--batch-sizes 16 --repeats 5 --warmup 2 --min-time 0.5 --threads 1 --host-name jet-1 "
        "--format json --model-option 'hidden=[8,8]' --peer tcp://h:5 --probe-timeout 10"
    )
    # a testbed's host: advise's own timing, its steps on the recipe's data, no probe
    cmd = remote_command(
        "py", None, "d-2", "cnn2", {}, (1, 28, 28), 10, 32, None, (10, 1.5), ("mnist", "/d/m")
    )
    assert cmd == (
        "py -m edgetrain profile --model cnn2 --input 1x28x28 --classes 10 --batch-sizes 32 "
        "--repeats 10 --warmup 2 --min-time 1.5 --threads 1 --host-name d-2 --format json "
        "--data mnist --data-root /d/m"
    )
    good = json.dumps(profile("a"))
    assert parse_remote(good, "a", "lenet5")["host"] == "a"
    with pytest.raises(ValueError, match="its profile is of lenet5 on a"):
        parse_remote(good, "b", "lenet5")
    with pytest.raises(ValueError, match="no valid profile"):
        parse_remote('{"host": "a"}', "a", "lenet5")
    with pytest.raises(ValueError, match="no valid profile"):
        parse_remote("Traceback (most recent call last):", "a", "lenet5")
    with pytest.raises(ValueError, match="over 4 MiB"):
        parse_remote(" " * (4 * MiB + 1), "a", "lenet5")


def test_the_profile_of_median_pace_is_kept_with_the_first_rounds_links() -> None:
    link = [{"peer": "tcp://c:1", "bandwidth_Bps": 1e7, "rtt_s": 1e-3, "size_bytes": 1}]
    base = sum(f + b for _, _, _, f, b in LAYERS)  # 0.00372 s
    docs = [profile("a", 1.3, link), profile("a", 0.9), profile("a", 1.1)]
    assert [round(pace_s(d) / base, 6) for d in docs] == [1.3, 0.9, 1.1]
    kept = median_profile(docs)
    assert kept["layers"] == docs[2]["layers"] and kept["links"] == link
    assert kept["rounds"]["kept"] == 2
    assert [round(x / base, 6) for x in kept["rounds"]["pace_s"]] == [1.3, 0.9, 1.1]
    # under a quota the pace is the layers scaled by the sustained step's throttling
    slow = {**profile("a"), "step_s": 0.004, "sustained_step_s": 0.010}
    assert pace_s(slow) == pytest.approx(base * 2.5)
    assert median_profile([profile("a"), slow, profile("a", 3.0)])["rounds"]["kept"] == 1
    # an even count keeps the slower middle one; one profile is kept as it is
    assert median_profile([profile("a", 1.0), profile("a", 2.0)])["rounds"]["kept"] == 1
    assert median_profile([docs[1]])["layers"] == docs[1]["layers"]
    with pytest.raises(ValueError, match="no profile"):
        median_profile([])


@pytest.mark.system
@pytest.mark.timeout(300)
def test_advise_profiles_each_host_over_ssh(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    """Two hosts (one real sshd on 127.0.0.1) without profiles: advise, a separate process,
    profiles each over ssh with its link probed back to it, keeps the profiles and ranks."""
    opts = ", ".join(json.dumps(o) for o in sshd.ssh_options)
    text = f"ssh_options = [{opts}]\n"
    for name in ("h0", "h1"):
        text += (
            f'\n[[hosts]]\nname = "{name}"\naddress = "{sshd.address}"\nport = {sshd.port}\n'
            f'user = "{sshd.user}"\nidentity = "{sshd.identity}"\npython = "{sys.executable}"\n'
        )
    (tmp_path / "hosts.toml").write_text(text)
    (tmp_path / "r.toml").write_text(DYNACOMM)
    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "edgetrain", "advise", str(tmp_path / "r.toml"), "--hosts",
         str(tmp_path / "hosts.toml"), "--run-dir", str(run), "--techniques",
         "gosgd,sequential,local", "--format", "json"],
        capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    for name in ("h0", "h1"):
        kept = json.loads((run / "profiles" / f"{name}.json").read_text())
        assert kept["host"] == name and kept["model"] == "lenet5"
        assert kept["links"] and kept["links"][0]["bandwidth_Bps"] > 0  # probed back to advise
        assert len(kept["rounds"]["pace_s"]) == 3 and kept["rounds"]["kept"] in (0, 1, 2)
    assert doc["environment"]["source"] == "each host's profile"
    assert [h["name"] for h in doc["environment"]["hosts"]] == ["h0", "h1"]
    assert {x["technique"] for x in doc["ranking"]} == {"gosgd", "sequential", "local"}


def test_the_testbed_host_advise_profiles_in_and_its_data_flags() -> None:
    def bed(*cpus: float) -> Facts:
        hosts = tuple(HostFacts(f"d-{k}", c, 10**8) for k, c in enumerate(cpus, 1))
        return Facts("t", hosts, {})

    assert profiled_host(bed(0.45, 0.45, 0.45)) == "d-1"
    assert profiled_host(bed(0.3, 0.8, 0.5, 0.8)) == "d-2"  # the fastest, the first of those
    recipe = parse_recipe(tomllib.loads(DYNACOMM))
    assert data_flags(recipe) == ("digits", None)
    mnist = recipe.model_copy(update={"data": recipe.data.model_copy(update={
        "dataset": "mnist", "root": "data/m"})})  # fmt: skip
    assert data_flags(mnist) == ("mnist", str(Path("data/m").resolve()))
    synthetic = recipe.model_copy(update={"data": recipe.data.model_copy(update={
        "dataset": "synthetic"})})  # fmt: skip
    assert data_flags(synthetic) is None


def _testbed_hosts(path: Path, sshd: Sshd, port: int) -> Path:  # noqa: F811
    """A hosts file as ``emulate up`` writes one (its testbed table), both hosts on ``port``
    of 127.0.0.1: h1 the faster."""
    opts = ", ".join(json.dumps(o) for o in sshd.ssh_options)
    text = f"ssh_options = [{opts}]\nconnect_timeout_s = 5\n"
    for name in ("h0", "h1"):
        text += (
            f'\n[[hosts]]\nname = "{name}"\naddress = "{sshd.address}"\nport = {port}\n'
            f'user = "{sshd.user}"\nidentity = "{sshd.identity}"\npython = "{sys.executable}"\n'
        )
    text += '\n[testbed]\nname = "t"\n'
    for name, cpu in (("h0", 0.5), ("h1", 1.0)):
        text += f'\n[[testbed.hosts]]\nname = "{name}"\ncpu = {cpu}\nlink_bps = 100000000\n'
    path.write_text(text)
    return path


@pytest.mark.system
@pytest.mark.timeout(300)
def test_advise_profiles_in_the_testbeds_fastest_host(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    """A testbed's hosts file without profiles: advise profiles the model inside its fastest
    host over ssh (as the runs will meet it), on the recipe's data, keeps it and reads the
    links from the testbed table; with the testbed down it measures here and says so."""
    (tmp_path / "r.toml").write_text(DYNACOMM)
    hosts = _testbed_hosts(tmp_path / "up.toml", sshd, sshd.port)
    argv = [sys.executable, "-m", "edgetrain", "advise", str(tmp_path / "r.toml"), "--hosts",
            str(hosts), "--techniques", "gosgd,local", "--format", "json"]  # fmt: skip
    proc = subprocess.run(
        [*argv, "--run-dir", str(tmp_path / "up")], capture_output=True, text=True, timeout=200
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["profile"] == "h1" and doc["profiled_over_ssh"] == ["h1"]
    assert "testbed_host_unreachable" not in doc
    kept = json.loads((tmp_path / "up" / "profiles" / "h1.json").read_text())
    assert kept["timed_on"] == "data:digits" and not kept.get("links")
    assert len(kept["rounds"]["pace_s"]) == 3  # three profiles, the median one kept
    assert doc["environment"]["source"] == "testbed t"

    with socket.socket() as closed:  # a port nothing listens on: the testbed is down
        closed.bind(("127.0.0.1", 0))
        down = _testbed_hosts(tmp_path / "down.toml", sshd, closed.getsockname()[1])
        proc = subprocess.run(
            [*argv[:6], str(down), *argv[7:], "--run-dir", str(tmp_path / "down")],
            capture_output=True, text=True, timeout=200,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["profile"] == "local" and doc["profiled_over_ssh"] == []
    assert "h1" in doc["testbed_host_unreachable"]
    assert (tmp_path / "down" / "profiles" / "local.json").is_file()


def test_memory_is_a_whole_replica_where_the_model_predicts_none() -> None:
    from edgetrain.advise.api import replica_bytes

    params, acts = 246_824, 834_304  # LAYERS' sums
    assert replica_bytes(layers(), 32, 1) == 3 * params + 2 * acts
    assert replica_bytes(layers(), 32, 2) == 4 * params + 2 * acts
    r = recipe()
    small = env(host("a", memory=2**20), host("b", memory=2**20), host("c", memory=2**20))
    doc = advice(r, small, layers(), [("gossip", "gosgd"), ("pipeline", "local")], None)
    gosgd = next(x for x in doc["ranking"] if x["technique"] == "gosgd")
    assert not gosgd["fits"] and gosgd["memory_source"] == "a whole replica per worker"
    assert gosgd["memory"][0] == {
        "worker": 0, "device": "a", "need_bytes": 3 * params + 2 * acts, "have_bytes": 2**20,
    }  # fmt: skip
    assert any(line.startswith("does not fit: worker 0 needs") for line in gosgd["reasons"])
    assert doc["ranking"][-1]["technique"] == "gosgd"  # after every technique that fits


def test_a_technique_takes_its_sections_defaults_where_the_users_do_not_fit_it() -> None:
    r = parse_recipe(
        {
            "data": {"dataset": "digits"},
            "model": {"name": "lenet5"},
            "train": {"family": "ps", "technique": "mercury", "batch_size": 16, "lr": 0.004},
            "mercury": {"scheduler": "bacc", "resharding": "aware"},
            "workers": [{"count": 3}],
        }
    )
    e = env(host("a"), host("b"), host("c"))
    own = candidate(r, "ps", "mercury", e, layers())
    base = candidate(r, "ps", "multips-sgd", e, layers())
    assert own.error is None and base.error is None
    assert own.recipe is not None and base.recipe is not None
    assert own.recipe.model_dump()["mercury"]["scheduler"] == "bacc"  # the user's, kept
    assert "mercury" not in base.recipe.model_dump(exclude_unset=True)  # its defaults
    assert base.recipe.train.lr == 0.004  # Adam like the user's technique: the user's lr
    gossip = candidate(r, "gossip", "gosgd", e, layers())
    assert gossip.recipe is not None and gossip.recipe.optimizer == "sgd"
    assert gossip.recipe.train.lr == 0.05  # an Adam step is not SGD's: SGD's default


def test_a_candidate_on_adam_drops_the_users_sgd_step() -> None:
    """An SGD recipe's lr (0.05) makes Adam diverge (the benchmark's multips-sgd runs ended at
    chance): a candidate that steps with Adam takes Adam's default lr instead."""
    r = parse_recipe(
        {
            "data": {"dataset": "digits"},
            "train": {"technique": "gosgd", "batch_size": 16, "lr": 0.05},
            "workers": [{"count": 3}],
        }
    )
    e = env(host("a"), host("b"), host("c"))
    merc = candidate(r, "ps", "multips-sgd", e, layers())
    assert merc.recipe is not None and merc.recipe.optimizer == "adam"
    assert merc.recipe.train.lr == ADAM_DEFAULT_LR
    same = candidate(r, "gossip", "edgegossip", e, layers())
    assert same.recipe is not None and same.recipe.train.lr == 0.05  # SGD too: the user's


def test_hosts_for_keeps_only_the_hosts_a_run_uses() -> None:
    from edgetrain.advise.candidates import hosts_for

    text = (
        'ssh_options = ["-o", "X=1"]\n\n[[hosts]]\nname = "a"\naddress = "10.0.0.1"\n'
        'workers = 2\n\n[[hosts]]\naddress = "b"\n\n[[hosts]]\naddress = "c"\n'
    )
    from edgetrain.tomlconfig import loads

    got = loads(hosts_for(text, ["c", "a", "a"]))
    assert got["ssh_options"] == ["-o", "X=1"]
    assert got["hosts"] == [
        {"name": "a", "address": "10.0.0.1", "workers": 2},
        {"address": "c", "workers": 1},
    ]


def test_advise_writes_a_recipe_each_ranked_technique_launches_with(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from edgetrain.recipe import load_recipe

    code, _, err = run_cli(
        capsys, "advise", str(run_dir.parent / "r.toml"), "--run-dir", str(run_dir),
        "--testbed", "recipes/testbeds/mercury-4u.toml", "--techniques", "dynacomm,local",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads((run_dir / "advice.json").read_text())
    files = {r["technique"]: r["recipe_file"] for r in doc["ranking"]}
    assert files == {"dynacomm": "advice/dynacomm.toml", "local": "advice/local.toml"}
    dyn, _ = load_recipe(run_dir / files["dynacomm"])
    assert (dyn.train.technique, dyn.role_names()) == ("dynacomm", ["server"] + ["trainer"] * 3)
    local_recipe, _ = load_recipe(run_dir / files["local"])
    assert local_recipe.role_names() == ["stage"]


def test_a_profile_of_another_size_of_the_model_is_skipped(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = profile("big")
    other["layers"][2]["param_bytes"] *= 2  # another width of the same model name
    (run_dir / "profiles" / "a-big.json").write_text(json.dumps(other))
    wrong_input = {**profile("tiny"), "input": [1, 28, 28]}
    (run_dir / "profiles" / "b-tiny.json").write_text(json.dumps(wrong_input))
    code, out, err = run_cli(
        capsys, "advise", str(run_dir.parent / "r.toml"), "--run-dir", str(run_dir),
        "--techniques", "gosgd", "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert doc["profile"] == "ref"
    assert doc["skipped_profiles"] == [
        "a-big.json: its model has 439,304 bytes of parameters, the recipe's 246,824",
        "b-tiny.json: its input is [1, 28, 28], the recipe's data [1, 8, 8]",
    ]


def test_a_model_that_fits_no_device_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from edgetrain.models import build_model

    wide = {"hidden": [4096, 4096]}  # 17 M parameters: 200 MB a replica with momentum
    params = sum(4 * p.numel() for p in build_model("mlp", (1, 8, 8), 10, wide).parameters())
    big = profile("ref")
    big["model"] = "mlp"
    big["layers"] = [{**big["layers"][0], "name": "0", "param_bytes": params}]
    (tmp_path / "r.toml").write_text(
        DYNACOMM.replace('name = "lenet5"', 'name = "mlp"\noptions = { hidden = [4096, 4096] }')
    )
    run = tmp_path / "run"
    (run / "profiles").mkdir(parents=True)
    (run / "profiles" / "ref.json").write_text(json.dumps(big))
    spec = tmp_path / "small.toml"
    spec.write_text(
        'name = "small"\n\n[[sites]]\nname = "s"\nlan = "100mbit"\n'
        + "".join(f'\n[[sites.hosts]]\nname = "h{i}"\ncpu = 0.5\nmemory = "1g"\n' for i in range(3))
    )
    args = ["advise", str(tmp_path / "r.toml"), "--run-dir", str(run), "--testbed", str(spec),
            "--techniques", "gosgd,sequential"]  # fmt: skip
    code, _, err = run_cli(capsys, *args)
    assert code == 0, err  # 1 GiB devices hold it
    before = (run / "advice.json").read_text()
    code, _, err = run_cli(capsys, *args, "--what-if", "memory=64m")
    assert code == 2
    assert err.startswith("error: mlp fits no device's memory with any technique: the least is")
    assert "the largest device has 0.06 GiB" in err and err.count("\n") == 1
    assert (run / "advice.json").read_text() == before  # the earlier answer kept


def test_bytes_split_by_link_class_over_the_pairs_that_carry_them() -> None:
    from edgetrain.advise.api import by_link_class

    sites = {"a": "s1", "b": "s2", "c": "s1"}
    got = by_link_class(1200, [(0, 1), (0, 2), (1, 2)], ["a", "a", "b"], sites)
    assert got == {"loopback": 400, "lan": 0, "wan": 800}
    assert by_link_class(600, [(0, 1), (1, 2)], ["a", "c", "b"], sites) == {
        "loopback": 0, "lan": 300, "wan": 300,
    }  # fmt: skip
    assert by_link_class(600, [(0, 1)], ["x", "y"], {}) == {"loopback": 0, "lan": 600, "wan": 0}
    assert by_link_class(600, [], ["a"], sites) == {"loopback": 0, "lan": 0, "wan": 0}


def test_each_family_says_which_pairs_carry_its_traffic() -> None:
    from edgetrain.runtime.side import launcher_side

    r = recipe()  # server, trainer, trainer
    e = env(host("a"), host("b"), host("c"), host("d"))
    got = {t: candidate(r, f, t, e, layers()) for f, t in chosen_techniques(r, None)}

    def pairs(t: str) -> object:
        c = got[t]
        return launcher_side(c.family, c.technique).traffic(c.recipe)

    assert pairs("dynacomm") == [(1, 0), (2, 0), (3, 0)]  # each trainer with the server
    assert pairs("mercury") is None and pairs("gosgd") is None  # every pair
    assert pairs("pipedream") == [(0, 1), (1, 2), (2, 3)]
    assert pairs("dataparallel") == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    assert pairs("local") == []
    wan = Environment(
        Facts("w", (host("a", site="s1"), host("b", site="s1"), host("c", site="s2")), {}), 1.0
    )
    doc = advice(r, wan, layers(), [("ps", "sequential")], None)
    row = doc["ranking"][0]
    assert row["workers"][0] == {"role": "server", "host": "a"}
    assert row["bytes_per_link_class"]["wan"] == pytest.approx(
        row["bytes_per_iteration"] / 2, abs=1
    )
    assert any("cross the WAN (50% of its traffic)" in line for line in row["reasons"])
