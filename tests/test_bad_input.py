"""Bad input never reaches an internal error: each of the faults a probe of 226 bad inputs found
(``../shared/reviews/bad-input.md``) is one ``error:`` line naming the problem and the fix, exit
code 2, and nothing left behind (no run directory, no half-written file, no process started).

Every command runs in-process; none of them gets as far as starting a process (a fixture makes
starting one fail the test)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from edgetrain.data.cifar import read_batch
from edgetrain.errors import DataError
from tests.helpers.cli import run_cli
from tests.helpers.run_files import write_run

RECIPE = """\
[run]
name = "bad"
checkpoint_every = 0
[data]
dataset = "digits"
[model]
name = "mlp"
options = { hidden = [8] }
[train]
family = "gossip"
technique = "gosgd"
epochs = 1
batch_size = 64
[[workers]]
count = 2
"""


def _set(text: str, section: str, line: str) -> str:
    """``text`` with ``line`` added at the top of ``[section]`` (``[[workers]]``: "[workers]")."""
    header = f"[{section}]\n"
    assert header in text
    return text.replace(header, header + line + "\n", 1)


def _deep_arrays(depth: int) -> str:
    return "x = " + "[" * depth + "]" * depth + "\n" + RECIPE


def _deep_tables(depth: int) -> str:
    return "x = " + "{a = " * depth + "1" + "}" * depth + "\n" + RECIPE


# (id, recipe text, a fragment of the one error line)
BAD_RECIPES: list[tuple[str, str, str]] = [
    ("nested-5000-arrays", _deep_arrays(5000), "nested more than 32 deep"),
    ("nested-3000-tables", _deep_tables(3000), "nested more than 32 deep"),
    ("nested-40-option", RECIPE.replace("[8]", "[" * 40 + "8" + "]" * 40), "options.hidden"),
    (
        "seed-beyond-64-bits",
        _set(RECIPE, "run", "seed = 99999999999999999999999"),
        "[run] seed: 99999999999999999999999 does not fit a 64-bit integer",
    ),
    ("seed-beyond-32-bits", _set(RECIPE, "run", "seed = 9223372036854775807"), "[run] seed"),
    ("seed-negative", _set(RECIPE, "run", "seed = -1"), "[run] seed: Input should be greater"),
    (
        "synthetic-huge-shape",
        _set(RECIPE, "data", "shape = [3, 100000, 100000]").replace('"digits"', '"synthetic"'),
        "shape entries must be at most 4096",
    ),
    (
        "synthetic-huge-count",
        _set(RECIPE, "data", "count = 10000000000").replace('"digits"', '"synthetic"'),
        "[data] count",
    ),
    (
        "synthetic-over-4-gib",
        _set(RECIPE, "data", "shape = [3, 1024, 1024]\ncount = 1000").replace(
            '"digits"', '"synthetic"'
        ),
        "lower count or shape",
    ),
    ("lr-inf", _set(RECIPE, "train", "lr = inf"), "[train] lr: Input should be a finite number"),
    ("lr-nan", _set(RECIPE, "train", "lr = nan"), "[train] lr"),
    ("slowdown-inf", _set(RECIPE, "[workers]", "slowdown = inf"), "[[workers]] #1 slowdown"),
    (
        "dirichlet-alpha-inf",
        _set(RECIPE, "data", 'partition = "dirichlet"\nalpha = inf'),
        "[data] alpha: Input should be a finite number",
    ),
    ("lr-true", _set(RECIPE, "train", "lr = true"), "[train] lr: Input should be a valid number"),
    ("lr-string", _set(RECIPE, "train", 'lr = "0.05"'), "[train] lr"),
    ("eval-every-true", _set(RECIPE, "train", "eval_every = true"), "[train] eval_every"),
    ("count-billion", RECIPE.replace("count = 2", "count = 1000000000"), "[[workers]] #1 count"),
    ("threads-million", _set(RECIPE, "[workers]", "threads = 1000000"), "[[workers]] #1 threads"),
    ("gossip-probability-nan", RECIPE + "[gossip]\nprobability = nan\n", "[gossip] probability"),
    ("technique-list", RECIPE.replace('"gosgd"', "[]"), "[train] technique"),
]


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with its size and modification time."""
    out = {}
    for p in root.rglob("*"):
        st = p.lstat()
        out[str(p.relative_to(root))] = (st.st_size if p.is_file() else 0, st.st_mtime_ns)
    return out


def _ours(argv: Any) -> bool:
    """A process edgetrain would start for a run: a worker (python, edgetrain), ssh, a shell
    (a worker in a cgroup); not what a library runs for itself (``ldconfig -p`` when torch
    first looks for its CUDA libraries)."""
    words = [str(a) for a in (argv if isinstance(argv, (list, tuple)) else [argv])]
    first = Path(words[0]).name if words else ""
    return (
        first.startswith(("python", "ssh", "scp", "rsync", "sh", "bash"))
        or any("edgetrain" in w for w in words)
        or words[:1] == [sys.executable]
    )


@pytest.fixture()
def no_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Starting a run's process fails the test: a bad input is refused before anything
    starts."""
    start = subprocess.Popen.__init__

    def refuse(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        if _ours(args):
            raise AssertionError(f"a process was started: {args}")
        start(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


@pytest.fixture()
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_processes: None) -> Path:
    """A fresh current directory (the default runs root is ./runs) with a good recipe."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ok.toml").write_text(RECIPE)
    (tmp_path / "file.txt").write_text("a file, not a directory\n")
    return tmp_path


def _refused(capsys: pytest.CaptureFixture[str], root: Path, *argv: str) -> str:
    """Run ``edgetrain argv``: exit 2, one ``error:`` line and nothing else on stderr, and
    nothing under ``root`` changed. The error line."""
    before = _tree(root)
    code, _, err = run_cli(capsys, *argv)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "internal error" not in err
    assert _tree(root) == before, "a bad input left something behind"
    return lines[0]


@pytest.mark.parametrize(
    ("text", "fragment"), [r[1:] for r in BAD_RECIPES], ids=[r[0] for r in BAD_RECIPES]
)
def test_a_bad_recipe_is_one_line_for_check_and_launch(
    capsys: pytest.CaptureFixture[str], here: Path, text: str, fragment: str
) -> None:
    (here / "bad.toml").write_text(text)
    assert fragment in _refused(capsys, here, "check", "bad.toml")
    assert fragment in _refused(capsys, here, "launch", "bad.toml")  # no run directory made


def test_a_local_cuda_run_without_cuda_is_refused_before_the_run_directory(
    capsys: pytest.CaptureFixture[str], here: Path
) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: device = 'cuda' is a good input here")
    (here / "cuda.toml").write_text(_set(RECIPE, "train", 'device = "cuda"'))
    for cmd in ("check", "launch"):
        line = _refused(capsys, here, cmd, "cuda.toml")
        assert "no CUDA device is available" in line and "device = 'cpu'" in line


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--name", "a/b"], "--name: [run] name: use letters, digits and . _ -"),
        (["--name", "../../escaped"], "--name: [run] name"),
        (["--events", "."], "is a directory"),
        (["--events", "/proc/events.jsonl"], "--events"),
        (["--runs-root", "/proc"], "runs root '/proc': '/proc' is not writable"),
        (["--runs-root", "file.txt/runs"], "'file.txt' is not a directory"),
        (["--run-dir", "/proc/run"], "--run-dir '/proc/run'"),
        (["--run-dir", "file.txt/run"], "--run-dir"),
    ],
    ids=[
        "name-slash",
        "name-dotdot",
        "events-dir",
        "events-proc",
        "runs-root-proc",
        "runs-root-under-file",
        "run-dir-proc",
        "run-dir-under-file",
    ],
)
def test_bad_launch_options_leave_no_run_directory(
    capsys: pytest.CaptureFixture[str], here: Path, args: list[str], fragment: str
) -> None:
    line = _refused(capsys, here, "launch", "ok.toml", *args)
    assert fragment in line
    assert not (here / "runs").exists()
    assert not list(here.parent.glob("escaped-*"))


def test_check_refuses_an_unwritable_runs_root_too(
    capsys: pytest.CaptureFixture[str], here: Path
) -> None:
    (here / "r.toml").write_text(_set(RECIPE, "run", 'runs_root = "/proc/runs"'))
    assert "runs root '/proc/runs'" in _refused(capsys, here, "check", "r.toml")


def test_the_run_directory_is_not_left_when_it_cannot_be_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Below the checks, :meth:`RunDir.create` itself turns any OSError into one line and
    removes the parents it made: a runs root whose directory refuses a new entry (the
    review's unwritable --runs-root, which root cannot reproduce, is simulated)."""
    from edgetrain.errors import EdgetrainError
    from edgetrain.rundir import RunDir

    with pytest.raises(EdgetrainError, match="cannot create a run directory in '/proc'"):
        RunDir.create("/proc", "x")
    (tmp_path / "f").write_text("")
    with pytest.raises(EdgetrainError, match="cannot create run directory parent"):
        RunDir.create(tmp_path / "f" / "runs", "x")
    mkdir = Path.mkdir

    def refuse(self: Path, *args: Any, **kwargs: Any) -> None:
        if self.name.startswith("x-"):
            raise PermissionError(13, "Permission denied", str(self))
        mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", refuse)
    with pytest.raises(EdgetrainError, match="Permission denied; set \\[run\\] runs_root"):
        RunDir.create(tmp_path / "new" / "runs", "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


@pytest.mark.parametrize(
    "run_dir", ["/proc/profile-run", "file.txt/run"], ids=["proc", "under-a-file"]
)
def test_profile_refuses_an_unwritable_run_dir_before_measuring(
    capsys: pytest.CaptureFixture[str],
    here: Path,
    monkeypatch: pytest.MonkeyPatch,
    run_dir: str,
) -> None:
    import edgetrain.profile.run

    def measure(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("measured a profile it could not save")

    monkeypatch.setattr(edgetrain.profile.run, "make_profile", measure)
    argv = ("profile", "--model", "mlp", "--input", "1x8x8", "--run-dir", run_dir)
    assert "--run-dir" in _refused(capsys, here, *argv)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--lr", "0"], "--lr 0 must be a positive, finite number"),
        (["--lr", "inf"], "--lr inf must be"),
        (["--out", "/proc/eval"], "--out '/proc/eval'"),
    ],
    ids=["lr-zero", "lr-inf", "out-proc"],
)
def test_aggregate_eval_refuses_bad_options_before_training(
    capsys: pytest.CaptureFixture[str], here: Path, args: list[str], fragment: str
) -> None:
    assert fragment in _refused(capsys, here, "aggregate-eval", "--epochs", "1", *args)


@pytest.fixture()
def run(here: Path) -> Path:
    """A finished two-worker gossip run written by hand under ./runs."""
    return write_run(here / "runs")


def _manifest(run: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((run / "manifest.json").read_text())
    return doc


@pytest.mark.parametrize(
    ("damage", "fragment"),
    [
        (lambda m: b"\xc0\xff" + bytes(range(256)), "manifest.json is damaged: not UTF-8 text"),
        (lambda m: b"{" * 100000, "manifest.json is damaged"),
        (lambda m: json.dumps({**m, "workers": "abc"}).encode(), "workers: Input should be"),
        (lambda m: json.dumps({**m, "workers": [{"id": "0"}]}).encode(), "workers.0.id"),
        (lambda m: json.dumps({**m, "recipe": {"train": 3}}).encode(), "recipe.train"),
        (lambda m: json.dumps({**m, "attempts": [1]}).encode(), "attempts.0"),
        (lambda m: json.dumps([m]).encode(), "not a JSON object"),
    ],
    ids=[
        "binary",
        "deep",
        "workers-string",
        "worker-id-string",
        "recipe-train-int",
        "attempt-int",
        "array",
    ],
)
def test_a_damaged_manifest_is_one_line_for_every_reader(
    capsys: pytest.CaptureFixture[str], here: Path, run: Path, damage: Any, fragment: str
) -> None:
    (run / "manifest.json").write_bytes(damage(_manifest(run)))
    for argv in (["report", str(run)], ["compare", str(run), str(run)], ["status", str(run)]):
        line = _refused(capsys, here, *argv)
        assert fragment in line and "restore it from a copy" in line
    code, out, _ = run_cli(capsys, "runs", "--runs-root", str(here / "runs"), "--format", "json")
    assert code == 0 and json.loads(out)[0]["status"] == "unreadable"


def test_a_damaged_metrics_line_is_skipped(
    capsys: pytest.CaptureFixture[str], here: Path, run: Path
) -> None:
    with (run / "metrics" / "worker-0.jsonl").open("ab") as fh:
        fh.write(b"\xc0\xff\xfe garbage \x00\n" + b"[" * 100000 + b"\n")
    with (run / "metrics" / "coordinator.jsonl").open("a") as fh:  # a damaged key, a type
        fh.write('{"epocx": 3, "t": 4.5, "event": "barrier"}\n')
        fh.write('{"epoch": "3", "t": 4.5, "event": "barrier"}\n{"t": "x", "event": "started"}\n')
    for argv in (["compare", str(run), str(run)], ["status", str(run)], ["report", str(run)]):
        code, _, err = run_cli(capsys, *argv, "--format", "json")
        assert code == 0, err
    assert json.loads((run / "report" / "summary.json").read_text())["test_accuracy"] == 0.91


def test_report_into_a_run_directory_it_cannot_write_leaves_it_as_it_was(
    capsys: pytest.CaptureFixture[str], here: Path, run: Path
) -> None:
    (run / "report").write_text("a file where report/ goes\n")  # as unwritable as it gets for root
    assert "the report directory" in _refused(capsys, here, "report", str(run))


@pytest.mark.parametrize(
    ("plot", "fragment"),
    [
        (".", "is a directory"),
        ("/proc/compare.png", "'/proc' is not writable"),
        ("file.txt/compare.png", "does not exist"),
    ],
    ids=["directory", "proc", "under-a-file"],
)
def test_compare_plot_to_a_path_it_cannot_write(
    capsys: pytest.CaptureFixture[str], here: Path, run: Path, plot: str, fragment: str
) -> None:
    assert fragment in _refused(capsys, here, "compare", str(run), str(run), "--plot", plot)


def _huge_bytearray_pickle() -> bytes:
    """A pickle whose BYTEARRAY8 length claims 4 EiB: the unpickler tries to allocate it."""
    return b"\x80\x05\x96" + (2**62).to_bytes(8, "little") + b"x" * 10 + b"."


def test_a_corrupt_cifar_batch_is_one_line_with_a_reason(
    capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """No stray ``SystemError ... exported buffers`` line, never an empty reason."""
    path = tmp_path / "data_batch_1"
    for blob in (_huge_bytearray_pickle(), b"", b"\x80\x02}q\x00(", bytes(range(256)) * 4):
        path.write_bytes(blob)
        with pytest.raises(DataError) as exc:
            read_batch(path)
        assert exc.value.problem.startswith(f"'{path}' is not a CIFAR batch: ")
        assert not exc.value.problem.endswith(": ")
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")


def test_data_inspect_on_a_corrupt_cifar_root(
    capsys: pytest.CaptureFixture[str], here: Path
) -> None:
    root = here / "cifar"
    root.mkdir()
    for name in ("data_batch_1", "test_batch"):
        (root / name).write_bytes(_huge_bytearray_pickle())
    line = _refused(capsys, here, "data", "inspect", "--dataset", "cifar10", "--root", str(root))
    assert "is not a CIFAR batch: damaged pickle" in line and "intact copy" in line
