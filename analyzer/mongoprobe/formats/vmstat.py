"""``vmstat`` interval output -> DataFrame, columns read from the header by name.

Forms checked on real output (``samples/sysstat/``): procps-ng 4.0.2 ``vmstat 1``,
``vmstat -t 1`` (timestamp), ``vmstat -n -w 1`` (header once, wide, with ``gu``), a long
``vmstat 1`` whose header repeats every 21 rows; and SmartOS/illumos ``vmstat 1`` from
seed 004 (``kthr memory page disk faults cpu``)::

    procs -----------memory---------- ---swap-- -----io---- -system-- ------cpu----- -----timestamp-----
     r  b   swpd   free   buff  cache   si   so    bi    bo   in   cs us sy id wa st                 UTC
    10  0      0 21939584  16632 1726932    0    0   913   837  468  773 18  3 78  0  0 2026-11-22 10:31:22

Columns:

    sample  int64    row number, 0 for the first row. vmstat's first row is the average
                     since boot, not an interval: ``mongoprobe.analysis.normalize`` drops it
    time    float64  with ``-t``: the row's timestamp, seconds since the epoch, read in
                     the zone the header names (``UTC``) when that zone is known to
                     zoneinfo, else in ``tz`` (default: this machine's local zone);
                     NaN without ``-t``
    ...     int64    every column the header names, in its order, as printed. Linux:
                     r b (processes), swpd free buff cache (KiB, or ``-S`` units), si so
                     (KiB/s swapped in/out), bi bo (KiB/s read/written to block devices),
                     in (interrupts/s), cs (context switches/s), us sy id wa st gu
                     (percent of total CPU time). SmartOS: r b w, swap free (KiB), re mf
                     pi po fr de sr (pages/s), one column per disk (s0, s1 ... I/O per
                     second), in, syscalls, cs, us sy id

SmartOS prints ``sy`` twice (system calls under ``faults``, system CPU under ``cpu``):
the first is renamed ``syscalls``; any other repeated name gets ``_2``, ``_3``... Repeated
headers are skipped when identical to the first (a different one is an error). Text
before the first header and lines that do not start with a number (a shell prompt,
``(^C)``) are skipped. A row whose number of fields differs from the header's or with a
value that is not an integer (``vmstat --unit`` human forms, FreeBSD's ``1.2G``) raises
``FormatError`` naming the file and line, as does an input with no vmstat header.
``vmstat -d``, ``-s``, ``-m`` (other reports) are not read.

USAGE::

    from mongoprobe.formats.vmstat import parse_vmstat
    df = parse_vmstat("samples/sysstat/vmstat-t-1.txt")
    df[["time", "cs", "us", "sy"]]
"""

from __future__ import annotations

import math
import os
import re
from datetime import datetime
from typing import IO
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import pandas as pd

from .errors import FormatError
from .source import read_input

_GROUPS = re.compile(r"^\s*-*(procs|kthr)\b")
_COLUMNS = re.compile(r"^\s*r\s+b\s")
_ROW = re.compile(r"^\s*-?\d")
_INT = re.compile(r"^-?\d+$")
_STAMP_DATE = re.compile(r"^\d{4}-\d\d-\d\d$")
_STAMP_TIME = re.compile(r"^\d\d:\d\d:\d\d$")


def _zone(name: str) -> str | None:
    try:
        ZoneInfo(name)
        return name
    except (ZoneInfoNotFoundError, ValueError):
        return None


def _names(header: list[str]) -> list[str]:
    """Column names, made unique: the first of two ``sy`` is SmartOS's system calls."""
    out: list[str] = []
    for i, h in enumerate(header):
        if h == "sy" and "sy" in header[i + 1:]:
            h = "syscalls"
        k, base = 2, h
        while h in out:
            h, k = f"{base}_{k}", k + 1
        out.append(h)
    return out


def is_vmstat(text: str) -> bool:
    """Cheap check: a vmstat group line (``procs``/``kthr``) followed by ``r b ...``."""
    lines = text[:65536].splitlines()
    return any(_GROUPS.match(a) and _COLUMNS.match(b) for a, b in zip(lines, lines[1:]))


def parse_vmstat(
    text_or_path: str | os.PathLike[str] | IO[str], source: str | None = None,
    tz: str | None = None,
) -> pd.DataFrame:
    """Every vmstat row, typed (columns: module docstring).

    ``text_or_path``: the text, a path (any one-line ``str`` is a path) or an open file.
    ``tz``: zone of ``-t`` timestamps when the header's zone is unknown (None: local); an
    explicit ``tz`` wins over the header. Raises ``FormatError`` naming file and line.
    """
    text, src = read_input(text_or_path, source)
    lines = text.splitlines()
    header: list[str] | None = None
    hdr_line = 0
    stamped, zone = False, tz
    rows: list[list] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if _GROUPS.match(line) and _COLUMNS.match(nxt):
            cols = nxt.split()
            if header is None:
                header, hdr_line = cols, i + 2
                stamped = "timestamp" in line
                if stamped:
                    zone = tz or _zone(cols[-1])
                    header = cols[:-1]  # the zone name heads the date and time fields
            elif cols != (header + [cols[-1]] if stamped else header):
                raise FormatError(src, i + 2, f"the same vmstat header as line {hdr_line}", nxt)
            i += 2
            continue
        if header is None or not _ROW.match(line):
            i += 1  # text before the header, prompts, "(^C)"
            continue
        f = line.split()
        want = len(header) + (2 if stamped else 0)
        if len(f) != want:
            raise FormatError(src, i + 1, f"{want} fields as in the vmstat header "
                              f"(line {hdr_line})", line)  # fmt: skip
        t = math.nan
        if stamped:
            d, c = f[-2], f[-1]
            if not (_STAMP_DATE.match(d) and _STAMP_TIME.match(c)):
                raise FormatError(src, i + 1, "a timestamp 'YYYY-MM-DD HH:MM:SS' at the end", line)
            t = datetime.strptime(f"{d} {c}", "%Y-%m-%d %H:%M:%S")
            t = (t.replace(tzinfo=ZoneInfo(zone)) if zone else t).timestamp()
            f = f[:-2]
        for tok, col in zip(f, header):
            if not _INT.match(tok):
                raise FormatError(src, i + 1, f"an integer in column {col!r}", line)
        rows.append([len(rows), t] + [int(x) for x in f])
        i += 1
    if header is None:
        raise FormatError(src, max(len(lines), 1), "a vmstat header ('procs ---memory---"
                          " ...' then ' r  b ...'); none found")  # fmt: skip
    cols = ["sample", "time"] + _names(header)
    df = pd.DataFrame(rows, columns=cols)
    df = df.astype({c: ("float64" if c == "time" else "int64") for c in cols})
    if stamped:
        df.attrs["tz"] = zone
    return df
