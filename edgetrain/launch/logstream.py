"""Tee a process's output, line by line, to its log file and to a prefixed live sink."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

LineSink = Callable[[str], None]


class LogTee:
    """Reads ``stream`` on a daemon thread until end of file.

    Each line goes to ``log_path`` as it came (unprefixed) and, when ``sink`` is set, to
    ``sink`` as ``"{prefix} {line}"``. ``control`` sees every line first: when it returns True
    the line was a message for the launcher and goes nowhere else.
    """

    def __init__(
        self,
        stream: IO[bytes],
        log_path: Path,
        prefix: str,
        sink: LineSink | None = None,
        control: Callable[[str], bool] | None = None,
    ) -> None:
        self.stream = stream
        self.log_path = log_path
        self.prefix = prefix
        self.sink = sink
        self.control = control
        self.lines = 0
        self._thread = threading.Thread(target=self._pump, daemon=True, name=f"log {prefix}")

    def start(self) -> LogTee:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def _pump(self) -> None:
        with self.log_path.open("ab") as log:
            for raw in iter(self.stream.readline, b""):
                line = raw.decode(errors="replace").rstrip("\r\n")
                if self.control is not None and self.control(line):
                    continue
                log.write(raw if raw.endswith(b"\n") else raw + b"\n")
                log.flush()
                self.lines += 1
                if self.sink is not None:
                    self._emit(line)
        self.stream.close()

    def _emit(self, line: str) -> None:
        assert self.sink is not None
        try:
            self.sink(f"{self.prefix} {line}")
        except Exception:  # noqa: BLE001 - a broken terminal must not stop the log file
            self.sink = None

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for end of file; True once the whole output is written."""
        self._thread.join(timeout)
        return not self._thread.is_alive()
