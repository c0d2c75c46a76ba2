"""What sysstat's reports share, for the parsers of each (``mpstat``, ``iostat``,
``pidstat``): the banner line (``Linux 6.18.44 (vm) 11/22/26 _x86_64_ (2 CPU)``), its
date and clock formats, the clock that turns a line's time into epoch seconds (a day
added when it passes midnight), and the scanner of timed tables (a header line, then
rows, each led by the same time label).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from .errors import FormatError

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
