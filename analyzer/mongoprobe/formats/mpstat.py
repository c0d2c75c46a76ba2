"""sysstat ``mpstat`` CPU utilisation report -> DataFrame (what the sysstat reports
share -- the banner line, the timed-table scanner -- is in ``formats/sysstat.py``).

Input: what ``mpstat -P ALL 1 3`` (or ``mpstat 1``, ``mpstat -P 0,1 5``) prints, checked
against sysstat 12.6 (``samples/sysstat/mpstat-P-ALL-1-3.txt``)::

    Linux 6.18.44-fc-v595 (vm) 	11/22/26 	_x86_64_	(2 CPU)

    10:31:22     CPU    %usr   %nice    %sys %iowait    %irq   %soft  %steal  %guest  %gnice   %idle
    10:31:23     all   86.07    0.00   13.43    0.00    0.00    0.00    0.50    0.00    0.00    0.00
    10:31:23       0   79.00    0.00   21.00    0.00    0.00    0.00    0.00    0.00    0.00    0.00

    Average:     CPU    %usr ...

Columns, one row per CPU line of each interval (``all`` and every CPU printed):

    time     float64  end of the interval, seconds since the epoch: the banner's date with
                      the line's clock time, read in ``tz`` (default: this machine's local
                      zone), a day added each time the clock goes back by more than 12
                      hours (the run passed midnight)
    sample   int64    interval number, 0 for the first printed interval
    cpu      str      "all" or the CPU number as printed
    %usr ... float64  every other column as the header names it, in percent of the CPU
                      (sysstat 12: %usr %nice %sys %iowait %irq %soft %steal %guest
                      %gnice %idle; older versions print %user and no %gnice: kept as
                      printed)

The ``Average:`` blocks are left out unless ``averages=True`` (then ``time`` is NaN and
``sample`` -1). Other mpstat reports in the same output (``-I``, ``-n``) are skipped.
``df.attrs`` holds ``ncpu`` (from the banner's ``(N CPU)``), ``host``, ``kernel``.

Clock formats read: ``10:31:23`` (C/POSIX locale, ``LC_ALL=C``), ``10:31:23 AM`` (en_US);
banner dates ``11/22/26`` or ``11/22/2026`` (month first, as C and en_US print it) and
``2026-11-22`` (``S_TIME_FORMAT=ISO``). A locale that prints day first (en_GB) is misread:
record with ``LC_ALL=C`` or ``S_TIME_FORMAT=ISO``.

Damaged input -- a row whose number of fields differs from its header's, a value that is
not a number, a line that is not part of a table, no CPU table at all -- raises
``FormatError`` naming the file and line.

USAGE::

    from mongoprobe.formats.mpstat import parse_mpstat
    df = parse_mpstat("samples/sysstat/mpstat-P-ALL-1-3.txt")
    df[df.cpu == "all"][["time", "%usr", "%sys"]]
"""

from __future__ import annotations

import math
import os
from typing import IO

import pandas as pd

from .errors import FormatError
from .source import read_input
from .sysstat import Clock, parse_banner, scan_timed, split_label, to_float

# --- mpstat -----------------------------------------------------------------------------


def is_mpstat(text: str) -> bool:
    """Cheap check: a sysstat banner and an mpstat CPU header (``CPU ... %idle``)."""
    lines = text[:65536].splitlines()
    if not lines or not any(parse_banner(s) for s in lines[:3]):
        return False
    for s in lines[:40]:
        p = split_label(s)
        if p and p[1].split()[:1] == ["CPU"] and "%idle" in p[1].split():
            return True
    return False


def parse_mpstat(
    text_or_path: str | os.PathLike[str] | IO[str], source: str | None = None,
    tz: str | None = None, averages: bool = False,
) -> pd.DataFrame:
    """mpstat's CPU utilisation tables, one row per CPU line (columns: module docstring).

    ``text_or_path``: the text, a path (any one-line ``str`` is a path) or an open file.
    ``tz``: zone of the printed clock (None: local). ``averages``: keep the ``Average:``
    rows. Raises ``FormatError`` naming file and line on damaged input.
    """
    text, src = read_input(text_or_path, source)
    lines = text.splitlines()
    banner, blocks = scan_timed(text, src, "mpstat")
    clock = Clock(banner.day if banner else None, tz)
    rows, columns, first, sample = [], None, 0, 0
    for b in blocks:
        if not (b.header[:1] == ["CPU"] and "%idle" in b.header):
            continue  # another mpstat report (-I interrupts, -n nodes)
        avg = b.label == "Average:"
        clock.observe(b.label)  # the header's clock too: it may be the day before
        if avg and not averages:
            continue
        if columns is None:
            columns, first = b.header, b.line
        elif b.header != columns:
            raise FormatError(src, b.line, f"the same header as line {first}",
                              lines[b.line - 1])
        if not b.rows:
            raise FormatError(src, b.line + 1, "CPU rows after the mpstat header", "")
        for n, label, f in b.rows:
            if len(f) != len(b.header):
                raise FormatError(src, n, f"{len(b.header)} fields as in the header "
                                  f"(line {b.line})", lines[n - 1])  # fmt: skip
            row = {"time": math.nan if avg else clock(label),
                   "sample": -1 if avg else sample, "cpu": f[0]}  # fmt: skip
            for col, tok in zip(b.header[1:], f[1:]):
                row[col] = to_float(tok, src, n, col, lines[n - 1])
            rows.append(row)
        if not avg:
            sample += 1
    if columns is None:
        raise FormatError(src, max(len(lines), 1), "an mpstat CPU table "
                          "('HH:MM:SS  CPU  %usr ... %idle'); none found")  # fmt: skip
    out = ["time", "sample", "cpu"] + columns[1:]
    df = pd.DataFrame(rows, columns=out)
    df = df.astype({"time": "float64", "sample": "int64", "cpu": "str"})
    df = df.astype({c: "float64" for c in columns[1:]})
    if banner:
        df.attrs.update(banner.attrs())
    return df
