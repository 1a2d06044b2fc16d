"""``edgetrain plan``: rates need an unambiguous unit, and a plan file is never overwritten."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgetrain.plan.units import describe_bandwidth, parse_bandwidth
from tests.helpers.cli import run_cli
from tests.helpers.plan_profile import write_profile

_profile = write_profile


@pytest.mark.parametrize(
    ("text", "bytes_per_s"),
    [
        ("100mbit", 12.5e6),
        ("1gbit", 125e6),
        ("10kbit", 1250.0),
        ("1GBIT", 125e6),
        ("100Mbit/s", 12.5e6),
        ("100Mbps", 12.5e6),
        ("100mbps", 12.5e6),
        ("8bps", 1.0),
        ("12.5MBps", 12.5e6),
        ("12.5MB/s", 12.5e6),
        ("12.5MB", 12.5e6),
        ("3B", 3.0),
        ("2KBps", 2e3),
        ("1MiBps", 2.0**20),
        ("1MiB/s", 2.0**20),
        ("1GiB", 2.0**30),
        ("1e3kbit", 125e3),
    ],
)
def test_unambiguous_rates_keep_working(text: str, bytes_per_s: float) -> None:
    assert parse_bandwidth(text) == pytest.approx(bytes_per_s)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("10", "has no unit; write 10mbit for megabits/s or 10MBps for megabytes/s"),
        ("10mb", "is ambiguous: 'mb' may mean bits or bytes per second; write 10mbit"),
        ("10Mb", "is ambiguous"),
        ("10Mb/s", "is ambiguous"),
        ("10kb", "write 10kbit for kilobits/s or 10KBps for kilobytes/s"),
        ("10gb", "write 10gbit for gigabits/s or 10GBps for gigabytes/s"),
        ("10MBPS", "is ambiguous"),
        ("10b", "write 10bit for bits/s or 10Bps for bytes/s"),
        ("10mib", "is ambiguous"),
        ("10furlong", "unknown unit"),
    ],
)
def test_unitless_and_ambiguous_rates_are_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError) as exc:
        parse_bandwidth(text)
    assert message in str(exc.value)


def test_describe_bandwidth_names_the_units() -> None:
    assert describe_bandwidth(12.5e6) == "100 Mbit/s (12.5 MB/s)"
    assert describe_bandwidth(10.0) == "80 bit/s (10 B/s)"


@pytest.mark.parametrize("rate", ["10", "10mb", "100mbit,10"])
def test_plan_refuses_them_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rate: str
) -> None:
    prof = _profile(tmp_path)
    code, out, err = run_cli(
        capsys, "plan", "--profile", str(prof), "--bandwidth", rate, "--rtt", "10ms"
    )
    assert code == 2
    assert err.strip().count("\n") == 0 and "Traceback" not in err
    assert "mbit" in err and "MBps" in err  # the fix names accepted units
    assert not (prof.parent.parent / "plans").exists()


def test_plan_output_shows_the_units_and_help_names_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prof = _profile(tmp_path)
    code, out, err = run_cli(
        capsys, "plan", "--profile", str(prof), "--bandwidth", "12.5MBps", "--rtt", "10ms"
    )
    assert code == 0, err
    assert "plan at 100 Mbit/s (12.5 MB/s)" in out
    code, out, _ = run_cli(capsys, "plan", "--help")
    assert code == 0
    assert "100mbit" in out and "bits/s" in out and "bytes/s" in out


def test_plan_never_overwrites_an_existing_plan_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prof = _profile(tmp_path)
    plans = prof.parent.parent / "plans"
    args = ("plan", "--profile", str(prof), "--bandwidth", "100mbit", "--rtt", "10ms")
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    first = (plans / "h.json").read_bytes()
    assert json.loads(first)["bandwidth_Bps"] == 12.5e6

    code, out, err = run_cli(capsys, *args[:4], "10mbit", "--rtt", "10ms")  # a launched run's?
    assert code == 0, err
    assert (plans / "h.json").read_bytes() == first
    assert json.loads((plans / "h-2.json").read_text())["bandwidth_Bps"] == 1.25e6
    flat = " ".join(out.split())
    assert "h.json already exists" in flat and "is kept" in flat and "h-2.json" in flat

    code, out, err = run_cli(capsys, *args, "--plot", "--format", "json")
    assert code == 0, err
    assert json.loads(out) == json.loads((plans / "h-3.json").read_text())  # stdout: the plan
    flat = " ".join(err.split())  # stderr: where it went, and why
    assert f"{plans / 'h.json'} already exists" in flat and f"wrote {plans / 'h-3.json'}" in flat
    assert (plans / "h-3.png").is_file() and not (plans / "h.png").exists()
    assert (plans / "h.json").read_bytes() == first


PIPELINE_RECIPE = """
[run]
name = "p"
[data]
dataset = "digits"
[model]
name = "mlp"
[train]
family = "pipeline"
technique = "pipedream"
epochs = 1
[[workers]]
role = "stage"
count = 2
"""


def test_plan_pipeline_never_overwrites_an_existing_plan_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = tmp_path / "p.toml"
    recipe.write_text(PIPELINE_RECIPE)
    run = tmp_path / "RUN"
    run.mkdir()
    args = ("plan", "--pipeline", "--recipe", str(recipe), "--run-dir", str(run))
    code, _, err = run_cli(capsys, *args)
    assert code == 0, err
    first = (run / "plans" / "pipeline.json").read_bytes()
    code, out, err = run_cli(capsys, *args, "--bandwidth", "100mbit")
    assert code == 0, err
    assert (run / "plans" / "pipeline.json").read_bytes() == first
    assert (run / "plans" / "pipeline-2.json").is_file()
    flat = " ".join(out.split())
    assert "pipeline.json already exists" in flat and "pipeline-2.json" in flat
    assert "link bandwidth: 100 Mbit/s (12.5 MB/s)" in flat
    code, _, err = run_cli(capsys, *args, "--bandwidth", "10mb")
    assert code == 2 and err.strip().count("\n") == 0 and "is ambiguous" in err
    assert not (run / "plans" / "pipeline-3.json").exists()
