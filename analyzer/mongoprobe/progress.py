"""A one-line progress indicator for reading big inputs, on a terminal only.

``Line(what, total, unit)`` (``unit`` " rows", or "B" to count bytes) rewrites
``what:  41% (74/180 M rows)`` in place on stderr, at most five times a second, and
erases itself at ``close()`` so that what the command prints next (its results,
another progress line) starts on a clean line.
Nothing is printed when stderr is not a terminal (pipes, files, tests), so machine
output and logs stay free of it. Used where the analyzer reads a recorded run's big
files: the latency probe's JSON (``rundir``) and every pass over the events' Parquet
file (``event_store``).
"""

from __future__ import annotations

import sys
import time

INTERVAL_S = 0.2
WIDTH = 79


class Line:
    """Progress of reading ``total`` units of ``what``; ``update(done)`` as it goes."""

    def __init__(self, what: str, total: float, unit: str = "", stream=None,
                 active: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.active = (self.stream.isatty() if active is None else active) and total > 0
        self.what, self.total, self.unit = what, float(total), unit
        self._last = 0.0
        self._shown = False

    def _scale(self) -> tuple[float, str]:
        for div, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
            if self.total >= div:
                return div, prefix
        return 1.0, ""

    def update(self, done: float) -> None:
        if not self.active:
            return
        now = time.monotonic()
        if now - self._last < INTERVAL_S:
            return
        self._last = now
        div, prefix = self._scale()
        dec = 1 if prefix and self.total < 10 * div else 0
        text = (f"{self.what}: {100 * done / self.total:3.0f}% ({done / div:.{dec}f}/"
                f"{self.total / div:.{dec}f} {(prefix + self.unit).strip()})")
        self.stream.write(f"\r{text[:WIDTH]:{WIDTH}s}")
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self.stream.write("\r" + " " * WIDTH + "\r")
            self.stream.flush()
            self._shown = False
