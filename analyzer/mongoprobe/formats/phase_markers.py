"""Benchmark phase markers -> DataFrame(name, start, end).

THE FORMAT (any tool may print it; mongoprobe's load driver prints exactly this)::

    ### phase start name=NAME time=EPOCH_SECONDS
    ### phase end name=NAME time=EPOCH_SECONDS

* One marker per line, starting the line (leading spaces allowed), the words separated
  by single spaces as shown, nothing after the last field but spaces. Other lines (the
  tool's own output) are ignored, so markers can be mixed into any log.
* ``NAME``: one or more characters other than spaces (``load``, ``run-a``, ``10i.1q``).
* ``time=EPOCH_SECONDS`` is optional: seconds since the Unix epoch, decimal digits with
  an optional fraction (``1795343482``, ``1795343482.125``). Without it the marker's time
  is the time the reader received the line, given by the caller as a list parallel to
  the lines (``receive_times``); a marker without either is an error.
* A phase starts with its ``start`` marker and ends with the ``end`` marker of the same
  NAME. Different phases may overlap or nest; the same NAME may run again after it
  ended (another row). An ``end`` without a running phase of that name, a second
  ``start`` of a running name, or an end before its start raise ``FormatError``. A phase
  still running when the input ends keeps ``end`` NaN (the tool was interrupted).

Columns, one row per phase, in order of their start markers:

    name   str      NAME
    start  float64  time of the start marker, seconds since the epoch
    end    float64  time of the end marker (NaN if none)

A line that starts with ``### phase`` but is not one of the two markers raises
``FormatError`` naming the file and line. An input without markers gives an empty frame.
``marker()`` writes a marker line (microsecond resolution).

USAGE::

    from mongoprobe.formats.phase_markers import parse_phase_markers, marker
    print(marker("start", "load", 1795343482.5))   # ### phase start name=load time=1795343482.5
    phases = parse_phase_markers("run/load.log")
    phases = parse_phase_markers(lines, receive_times=times)   # lines read live
"""

from __future__ import annotations

import math
import os
import re
from typing import IO, Iterable, Sequence

import pandas as pd

from .errors import FormatError
from .source import read_input

COLUMNS = ("name", "start", "end")
_PREFIX = re.compile(r"^\s*### phase\b")
_MARKER = re.compile(r"^\s*### phase (start|end) name=(\S+)(?: time=(\d+(?:\.\d+)?))?\s*$")


def marker(kind: str, name: str, time: float | None = None) -> str:
    """The marker line (without newline) a tool prints: ``kind`` is "start" or "end"."""
    if kind not in ("start", "end") or not name or any(c.isspace() for c in name):
        raise ValueError(f"a marker needs kind start|end and a NAME without spaces: "
                         f"{kind!r} {name!r}")  # fmt: skip
    if time is None:
        return f"### phase {kind} name={name}"
    if not math.isfinite(time) or time < 0:
        raise ValueError(f"a marker time is epoch seconds >= 0, not {time!r}")
    return f"### phase {kind} name={name} time=" + f"{float(time):.6f}".rstrip("0").rstrip(".")


def is_phase_markers(text: str) -> bool:
    """Cheap check: a phase marker line in the first 64 KiB."""
    return any(_MARKER.match(s) for s in text[:65536].splitlines())


def parse_phase_markers(
    text_or_path: str | os.PathLike[str] | IO[str] | Iterable[str],
    source: str | None = None,
    receive_times: Sequence[float] | None = None,
) -> pd.DataFrame:
    """The phases the markers delimit (columns: module docstring).

    ``text_or_path``: the text, a path (any one-line ``str`` is a path), an open file, or
    an iterable of lines (e.g. read live from a load tool). ``receive_times``: one time
    (epoch seconds) per line, used for markers without ``time=``. Raises ``FormatError``
    naming the file and line on a damaged or unmatched marker.
    """
    if isinstance(text_or_path, (str, os.PathLike)) or hasattr(text_or_path, "read"):
        text, src = read_input(text_or_path, source)  # type: ignore[arg-type]
        lines = text.splitlines()
    else:
        lines, src = [str(s).rstrip("\r\n") for s in text_or_path], source or "<lines>"
    if receive_times is not None and len(receive_times) != len(lines):
        raise ValueError(f"receive_times has {len(receive_times)} times for "
                         f"{len(lines)} lines")  # fmt: skip
    rows: list[list] = []
    running: dict[str, int] = {}
    for n, line in enumerate(lines, 1):
        if not _PREFIX.match(line):
            continue
        m = _MARKER.match(line)
        if not m:
            raise FormatError(src, n, "a phase marker '### phase start|end name=NAME "
                              "[time=EPOCH_SECONDS]'", line)  # fmt: skip
        kind, name = m[1], m[2]
        if m[3] is not None:
            t = float(m[3])
        elif receive_times is not None:
            t = float(receive_times[n - 1])
        else:
            raise FormatError(src, n, "time=EPOCH_SECONDS in the marker (or receive "
                              "times from the caller)", line)  # fmt: skip
        if kind == "start":
            if name in running:
                raise FormatError(src, n, f"phase {name!r} to end before it starts again",
                                  line)
            running[name] = len(rows)
            rows.append([name, t, math.nan])
        else:
            if name not in running:
                raise FormatError(src, n, f"a start marker of phase {name!r} before its "
                                  "end", line)  # fmt: skip
            i = running.pop(name)
            if t < rows[i][1]:
                raise FormatError(src, n, f"an end time at or after phase {name!r}'s "
                                  f"start ({rows[i][1]!r})", line)  # fmt: skip
            rows[i][2] = t
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    return df.astype({"name": "str", "start": "float64", "end": "float64"})
