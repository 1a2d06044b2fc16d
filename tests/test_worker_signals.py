"""A stop signal that lands inside a native destructor is not lost and prints no traceback.

The handler of :mod:`edgetrain.worker.main` raises where the main thread is; inside a
destructor (a ZeroMQ frame freed by Cython) Python cannot propagate it and would print
"Exception ignored in ..." with a traceback, losing the stop. A ``__del__`` that sends the
signal to its own process and keeps running reproduces that place exactly."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent(
    """
    import os, signal, sys, threading
    from edgetrain.worker import main

    main.install_stop_handlers()

    class Frame:
        def __del__(self):
            os.kill(os.getpid(), signal.{sig})
            total = 0
            for i in range(100_000):  # the handler runs here, inside the destructor
                total += i

    try:
        Frame()
        threading.Event().wait(30)  # the stop, delivered again, interrupts this wait
    except main.Terminated as exc:
        print("terminated", exc.args[0], flush=True)
        sys.exit(143)
    print("the stop was lost", flush=True)
    sys.exit(1)
    """
)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_stop_raised_inside_a_destructor_is_delivered_again(sig: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD.format(sig=sig)], capture_output=True, text=True, timeout=50
    )
    assert proc.returncode == 143, proc.stdout + proc.stderr
    assert proc.stdout.strip() == f"terminated {sig}"
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr


@pytest.mark.timeout(60)
def test_other_unraisable_exceptions_still_reach_pythons_hook() -> None:
    child = textwrap.dedent(
        """
        from edgetrain.worker import main
        main.install_stop_handlers()
        class Broken:
            def __del__(self):
                raise ValueError("from a destructor")
        Broken()
        """
    )
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=50)
    assert proc.returncode == 0
    assert "Exception ignored" in proc.stderr and "ValueError: from a destructor" in proc.stderr


CYTHON_CHILD = textwrap.dedent(
    """
    import os, signal, sys, threading, types
    from edgetrain.worker import main

    main.install_stop_handlers()

    def check_rc():
        # what Cython does when a signal handler raises where it cannot propagate (pyzmq's
        # _check_rc polls for signals): print the full traceback through sys.excepthook,
        # then hand the exception to the unraisable hook
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1_000_000):
                pass
        except main.Terminated as exc:
            sys.excepthook(type(exc), exc, exc.__traceback__)
            sys.unraisablehook(types.SimpleNamespace(
                exc_type=type(exc), exc_value=exc, exc_traceback=exc.__traceback__,
                err_msg=None, object=None))

    try:
        check_rc()
        threading.Event().wait(30)
    except main.Terminated as exc:
        print("terminated", exc.args[0], flush=True)
        sys.exit(143)
    print("the stop was lost", flush=True)
    sys.exit(1)
    """
)


@pytest.mark.timeout(60)
def test_a_stop_printed_from_native_code_prints_no_traceback_and_is_delivered_again() -> None:
    """CI, stop 44: SIGTERM landed in pyzmq's ``_check_rc`` and Cython printed its traceback
    through ``sys.excepthook`` before the unraisable hook delivered the stop again."""
    proc = subprocess.run(
        [sys.executable, "-c", CYTHON_CHILD], capture_output=True, text=True, timeout=50
    )
    assert proc.returncode == 143, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "terminated SIGTERM"
    assert "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.timeout(60)
def test_other_exceptions_still_reach_pythons_except_hook() -> None:
    child = "from edgetrain.worker import main\nmain.install_stop_handlers()\nraise ValueError('x')"
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=50)
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "ValueError: x" in proc.stderr
