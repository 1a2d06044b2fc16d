"""What every ``scripts/reproduce-<paper>`` shares: its common flags, the seeds a mode
measures, the MNIST directory, progress lines on stderr, and the run-and-print of ``main``."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from edgetrain.errors import EdgetrainError
from edgetrain.experiment import report

REPO = Path(__file__).resolve().parents[2]
Say = Callable[[str], None]


class Main(Protocol):
    """A script's ``main``: its arguments (None: the command line's), its exit status."""

    def __call__(self, argv: Sequence[str] | None = None, /) -> int: ...


def parser(
    paper: str, doc: str, quick: str, smoke: str, seeds: int, testbed: str | None = None
) -> argparse.ArgumentParser:
    """``--quick``, ``--smoke``, ``--seeds``, ``--out``, ``--format``, ``--data-root`` and, with
    ``testbed`` (its help), ``--testbed emulated|local``; a script adds its own flags to what
    this returns."""
    ap = argparse.ArgumentParser(prog=f"reproduce-{paper}", description=doc.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help=quick)
    ap.add_argument("--smoke", action="store_true", help=smoke)
    ap.add_argument(
        "--seeds",
        type=int,
        default=None,
        help=f"measured seeds (the pilot is seed 0); default {seeds}, with --quick 1",
    )
    ap.set_defaults(seeds_default=seeds)
    ap.add_argument("--out", type=Path, default=Path("reproductions") / paper)
    ap.add_argument("--format", choices=("text", "json"), default="text")
    ap.add_argument(
        "--data-root",
        type=Path,
        default=None,
        help="the MNIST directory (default: $EDGETRAIN_TEST_DATA/mnist-test)",
    )
    if testbed is not None:
        ap.add_argument(
            "--testbed", choices=("emulated", "local"), default="emulated", help=testbed
        )
    return ap


def parse(ap: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """The arguments, with ``--seeds`` resolved to the script's default when not given (and
    ``seeds_given`` saying whether it was)."""
    args = ap.parse_args(argv)
    args.seeds_given = args.seeds is not None
    if args.seeds is None:
        args.seeds = args.seeds_default
    return args


def run(
    ap: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    reproduce: Callable[[argparse.Namespace], dict[str, Any]],
) -> int:
    """Parse, reproduce, print the report (markdown, or the JSON with ``--format json``); an
    :class:`EdgetrainError` is one line and its exit code, and so is Ctrl-C or SIGTERM (exit
    130): the running launch is stopped and the testbed has come down on the way out, and the
    runs that completed are kept for a resume. (SIGTERM is the way to stop a reproduction
    started in the background, which ignores SIGINT.)"""
    args = parse(ap, argv)
    try:
        with sigterm_interrupts():
            doc = reproduce(args)
    except EdgetrainError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write(
            f"interrupted: the completed runs are kept in {args.out}; "
            "run the same command again to resume\n"
        )
        return 130
    if args.format == "json":
        sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
    else:
        sys.stdout.write((args.out / report.MD_NAME).read_text())
    return 0


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt inside the block (the main thread only: elsewhere a
    handler cannot be set), so that the same clean-up runs as for Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def entry(
    paper: str,
    doc: str | None,
    reproduce: Callable[[argparse.Namespace], dict[str, Any]],
    seeds: int,
    quick: str,
    smoke: str,
    testbed: str | None = None,
) -> Main:
    """A reproduction's ``main(argv)``: :func:`parser` (``doc``'s first paragraph, the modes'
    help, the default number of seeds, ``--testbed`` when given its help), then :func:`run`."""

    def main(argv: Sequence[str] | None = None) -> int:
        return run(parser(paper, doc or "", quick, smoke, seeds, testbed), argv, reproduce)

    return main


def quick_seeds(args: argparse.Namespace, seeds: tuple[int, ...]) -> tuple[int, ...]:
    """``--quick`` measures one seed unless ``--seeds N`` says how many."""
    return seeds if getattr(args, "seeds_given", False) else seeds[:1]


def measured_seeds(args: argparse.Namespace) -> tuple[int, ...]:
    """Seeds 1 .. ``--seeds`` (at least one); with ``--quick`` the first unless ``--seeds`` was
    given."""
    if args.seeds < 1:
        raise EdgetrainError(f"--seeds must be at least 1, not {args.seeds}")
    seeds = tuple(range(1, args.seeds + 1))
    return quick_seeds(args, seeds) if args.quick else seeds


def local(args: argparse.Namespace) -> bool:
    """``--testbed local``: local processes instead of the emulated testbed."""
    return bool(getattr(args, "testbed", "emulated") == "local")


def say(line: str) -> None:
    """One timestamped progress line on stderr."""
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {line}\n")
    sys.stderr.flush()


def data_root(arg: Path | None) -> Path:
    """``--data-root``, else ``$EDGETRAIN_TEST_DATA/mnist-test`` (the project's shared data)."""
    default = Path(os.environ.get("EDGETRAIN_TEST_DATA", REPO.parent / "shared" / "data"))
    root = arg or default / "mnist-test"
    if not root.is_dir():
        raise EdgetrainError(
            f"MNIST directory {root} not found", "pass --data-root DIR (the MNIST IDX files)"
        )
    return root.resolve()


def out_dir(
    args: argparse.Namespace, mnist: bool, resolve: bool = True
) -> tuple[Path, Path | None]:
    """``--out`` (created; resolved unless ``resolve`` is false, and then the runs' paths in the
    report are as relative as ``--out``) and the MNIST directory when the plan trains on MNIST
    (None otherwise); the data root is checked first, so that a wrong one leaves no ``--out``
    behind its error."""
    root = data_root(args.data_root) if mnist else None
    out: Path = args.out.resolve() if resolve else args.out
    out.mkdir(parents=True, exist_ok=True)
    return out, root
