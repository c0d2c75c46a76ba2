"""sysstat ``mpstat`` CPU utilisation report -> DataFrame (and the sysstat helpers that
``iostat`` and ``pidstat`` share: the banner line and the timed-table scanner).

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
import re
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import IO
from zoneinfo import ZoneInfo

import pandas as pd

from .errors import FormatError
from .source import read_input

# "Linux 6.18.44-fc-v595 (vm) \t11/22/26 \t_x86_64_\t(2 CPU)"; older: "Linux 2.6.18 10/11/2012"
_BANNER = re.compile(
    r"^(Linux|SunOS|FreeBSD|Darwin)\s+(\S+)(?:\s+\(([^)]*)\))?\s+"
    r"(\d\d/\d\d/\d\d(?:\d\d)?|\d{4}-\d\d-\d\d)(?:\s+_(\S+)_)?(?:\s+\((\d+) CPU\))?\s*$"
)
_CLOCK = re.compile(r"^(\d\d):(\d\d):(\d\d)(?: ([AP]M))?$")
# a table line: its clock (HH:MM:SS, with AM/PM in some locales; epoch seconds with
# pidstat -H; "Average:"), then the fields. pidstat -h heads its tables "# Time ...".
_TIMED = re.compile(r"^(\d\d:\d\d:\d\d(?: [AP]M)?|Average:|\d{9,}|# Time)\s+(\S.*)$")


# --- shared with iostat and pidstat -----------------------------------------------------


@dataclass
class Banner:
    """sysstat's first line: kernel, host, date, arch, number of CPUs (None if absent)."""

    system: str
    kernel: str
    host: str | None
    day: date
    arch: str | None
    ncpu: int | None

    def attrs(self) -> dict:
        return {"kernel": f"{self.system} {self.kernel}", "host": self.host,
                "date": self.day.isoformat(), "ncpu": self.ncpu}  # fmt: skip


def parse_date(s: str) -> date | None:
    """A sysstat date: ``MM/DD/YY``, ``MM/DD/YYYY`` or ISO ``YYYY-MM-DD``; None if not one."""
    try:
        if "-" in s:
            return date.fromisoformat(s)
        mo, d, y = (int(p) for p in s.split("/"))
        return date(y + 2000 if y < 100 else y, mo, d)
    except ValueError:
        return None


def parse_banner(line: str) -> Banner | None:
    m = _BANNER.match(line.strip())
    if not m:
        return None
    day = parse_date(m[4])
    if day is None:
        return None
    return Banner(m[1], m[2], m[3], day, m[5], int(m[6]) if m[6] else None)


def clock_seconds(label: str) -> int | None:
    """``10:31:23`` or ``10:31:23 PM`` -> seconds since midnight; None if not a clock."""
    m = _CLOCK.match(label)
    if not m:
        return None
    h, mi, s = int(m[1]), int(m[2]), int(m[3])
    if m[4]:
        h = h % 12 + (12 if m[4] == "PM" else 0)
    return h * 3600 + mi * 60 + s


def epoch(dt: datetime, tz: str | None) -> float:
    """A printed wall-clock time as seconds since the epoch (``tz`` None: local zone)."""
    return (dt.replace(tzinfo=ZoneInfo(tz)) if tz else dt).timestamp()


class Clock:
    """Turns the clock labels of successive lines into epoch seconds: the banner's date,
    plus one day each time the clock goes back by more than 12 hours (past midnight)."""

    def __init__(self, day: date | None, tz: str | None):
        self.day, self.tz, self.last = day, tz, None

    def observe(self, label: str) -> int | None:
        """Note a clock label (a table header's too): seconds since midnight, or None."""
        secs = clock_seconds(label)
        if secs is None or self.day is None:
            return None
        # back by more than half a day: past midnight (pidstat's table headers repeat the
        # interval's start, a second or so before the rows above them)
        if self.last is not None and secs < self.last - 43200:
            self.day += timedelta(days=1)
        self.last = secs
        return secs

    def __call__(self, label: str) -> float:
        if label.isdigit():
            return float(label)  # pidstat -H: already epoch seconds
        secs = self.observe(label)
        if secs is None:
            return math.nan
        return epoch(datetime.combine(self.day, datetime.min.time())
                     + timedelta(seconds=secs), self.tz)  # fmt: skip


@dataclass
class Block:
    """One table of a timed sysstat report: a header line, then rows, up to a blank line."""

    line: int  # 1-based line number of the header
    label: str  # the header's clock label or "Average:"
    header: list[str]
    rows: list[tuple[int, str, list[str]]] = field(default_factory=list)  # (line, label, fields)


def split_label(line: str) -> tuple[str, str] | None:
    m = _TIMED.match(line.rstrip())
    return (m[1], m[2]) if m else None


def scan_timed(text: str, source: str, what: str) -> tuple[Banner | None, list[Block]]:
    """The banner and every ``CLOCK  COL COL ...`` table of an mpstat/pidstat/sar report.

    Tables are separated by blank lines; the first line of each is its header (``# Time
    COL ...`` with pidstat -h, whose rows carry their own clock). Text before the banner
    is skipped; any other non-blank line raises ``FormatError`` (``what`` names the tool).
    """
    banner, blocks, cur = None, [], None
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            cur = None
            continue
        if banner is None and not blocks and (b := parse_banner(raw)):
            banner = b
            continue
        parts = split_label(raw)
        if parts is None and banner is None and not blocks:
            continue  # text before the report: a shell prompt, the command line
        if parts is None:
            raise FormatError(source, n, f"a {what} line 'HH:MM:SS  COLUMNS...' (or "
                              "'Average:') after the 'Linux ... (N CPU)' banner", raw)  # fmt: skip
        if cur is None:
            cur = Block(n, parts[0], parts[1].split())
            blocks.append(cur)
        else:
            cur.rows.append((n, parts[0], parts[1].split()))
    return banner, blocks


def to_float(tok: str, source: str, n: int, col: str, line: str) -> float:
    try:
        return float(tok)
    except ValueError:
        raise FormatError(source, n, f"a number in column {col!r}", line) from None


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
