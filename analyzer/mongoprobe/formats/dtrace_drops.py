"""What DTrace itself lost, from its stderr -> DataFrame.

DTrace counts its own losses and prints them on stderr while it runs and at the end
(libdtrace's ``dt_handle_cpudrop``/``dt_handle_status``; the same messages on illumos,
FreeBSD, macOS and Oracle DTrace for Linux)::

    dtrace: 12 dynamic variable drops
    dtrace: 3 dynamic variable drops with non-empty dirty list
    dtrace: 5 drops on CPU 1
    dtrace: 2 aggregation drops on CPU 0
    dtrace: 1 speculative drop
    dtrace: 4 jstack()/ustack() string table overflows
    dtrace: error on enabled probe ID 7 (ID 812: syscall::read:return): invalid address
            (0xffffffffce20a760) in action #3 at DIF offset 40

A drop line says how many events (probe firings' records, dynamic variables, aggregation
entries) were lost; an "error on enabled probe" line is one firing whose clause was cut
short (one lost event each). Other lines (``matched N probes``, warnings) are not losses.

Columns:

    kind    str    "dynamic variable", "principal" (the trace buffer: raise bufsize),
                   "aggregation" (raise aggsize), "speculative", "failed speculation",
                   "stack string table", "error in ERROR probe", "probe error"
    cpu     int64  the CPU for per-CPU drops, -1 otherwise
    count   int64  events lost
    detail  str    the rest of the line (for probe errors: the probe and the message)

USAGE::

    from mongoprobe.formats.dtrace_drops import parse_dtrace_drops, lost_events
    df = parse_dtrace_drops(stderr_text)
    lost_events(df)            # the total, for a tool's "dropped events" counter
"""

from __future__ import annotations

import os
import re
from typing import IO

import pandas as pd

from .source import read_input

COLUMNS = ["kind", "cpu", "count", "detail"]

_DROP = re.compile(
    r"^dtrace: (?:\[\w+\] )?(\d+) (dynamic variable drop|aggregation drop|drop|"
    r"speculative drop|failed speculation|jstack\(\)/ustack\(\) string table overflow|"
    r"error)s?( on CPU (\d+))?(.*)$")
_PROBE_ERROR = re.compile(r"^dtrace: error on enabled probe ID \d+ \((.*)$")
_KIND = {"dynamic variable drop": "dynamic variable", "aggregation drop": "aggregation",
         "drop": "principal", "speculative drop": "speculative",
         "failed speculation": "failed speculation",
         "jstack()/ustack() string table overflow": "stack string table",
         "error": "error in ERROR probe"}
# what to raise when each kind shows up (printed with the loss counters)
FIX = {"dynamic variable": "raise -x dynvarsize", "principal": "raise -x bufsize",
       "aggregation": "raise -x aggsize", "speculative": "raise -x nspec/specsize",
       "failed speculation": "raise -x nspec", "stack string table": "raise -x jstackstrsize",
       "error in ERROR probe": "", "probe error": "see the error lines on stderr"}


def is_dtrace_drops(text: str) -> bool:
    """Cheap check: a DTrace drop or probe-error line in the first 64 KiB."""
    return any(_DROP.match(s) or _PROBE_ERROR.match(s)
               for s in text[:65536].splitlines())


def parse_dtrace_drops(text_or_path: str | os.PathLike[str] | IO[str] | list[str],
                       source: str | None = None) -> pd.DataFrame:
    """Every loss line of a dtrace's stderr (a text, path, open file or list of lines), in
    order; an input with none gives an empty frame (no loss is the usual answer)."""
    if isinstance(text_or_path, list):
        lines = [ln.rstrip("\n") for ln in text_or_path]
    else:
        lines = read_input(text_or_path, source)[0].splitlines()
    rows = []
    for line in lines:
        s = line.strip()
        if m := _DROP.match(s):
            rows.append((_KIND[m[2]], int(m[4]) if m[4] else -1, int(m[1]), m[5].strip()))
        elif m := _PROBE_ERROR.match(s):
            rows.append(("probe error", -1, 1, m[1].rstrip(")")))
    df = pd.DataFrame(rows, columns=COLUMNS)
    return df.astype({"kind": str, "cpu": "int64", "count": "int64", "detail": str})


def lost_events(df: pd.DataFrame) -> int:
    """Everything DTrace lost, as one number (a tool's "dropped events")."""
    return int(df["count"].sum()) if len(df) else 0


def summary(df: pd.DataFrame) -> str:
    """One line for the ``lost:`` report: ``"dynamic variable 12 (raise -x dynvarsize),
    principal 5 (raise -x bufsize)"``, or ``"DTrace reported no drops or errors"``."""
    if not len(df):
        return "DTrace reported no drops or errors"
    parts = []
    for kind, n in df.groupby("kind", sort=False)["count"].sum().items():
        fix = FIX.get(str(kind), "")
        parts.append(f"{kind} {int(n)}" + (f" ({fix})" if fix else ""))
    return "DTrace lost: " + ", ".join(parts)
