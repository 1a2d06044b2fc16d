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
