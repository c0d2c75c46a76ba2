"""sysstat ``iostat`` device reports -> DataFrame (per device), and a summed-over-devices
view; the ``avg-cpu`` lines -> a second DataFrame.

Checked on real sysstat 12.6.1 output recorded on this project's machine
(``samples/sysstat/``): ``iostat -x 1 3``, ``iostat -xmt 1 3`` (MB/s, a time line per
report), ``iostat -xk -d 1 3`` (no avg-cpu), ``S_TIME_FORMAT=ISO iostat -xt 1 3 vda
zram0`` (two devices, ISO times), ``iostat -d 1 3`` (the basic ``tps`` report)::

    Linux 6.18.44-fc-v595 (vm) 	11/22/26 	_x86_64_	(2 CPU)

    11/22/26 10:31:23                                        <- with -t
    avg-cpu:  %user   %nice %system %iowait  %steal   %idle
              86.50    0.00   13.50    0.00    0.00    0.00

    Device            r/s     rMB/s   rrqm/s  %rrqm r_await rareq-sz     w/s ... %util
    vda            106.00    104.04     1.00   0.93    4.90  1005.09   64.00 ... 20.80

Columns are read from each ``Device`` header by name, so other sysstat layouts read the
same way: the sysstat <= 11.5 ``-x`` layout (``Device: rrqm/s wrqm/s r/s w/s rkB/s wkB/s
avgrq-sz avgqu-sz await r_await w_await svctm %util``, or ``rsec/s wsec/s``, or
``rMB/s``), the 11.6-12.0 one (``... aqu-sz rareq-sz wareq-sz svctm %util``) and
``--pretty`` (device name last). The older layouts are tested on a fixture that re-expresses
a real 12.6 recording in them (``tests/test_formats.py``), not on a recording made by
those versions: none could be installed here.

``parse_iostat`` columns, one row per device per report:

    sample   int64    report number; 0 is the first report, which iostat computes since
                      boot (``mongoprobe.analysis.normalize`` drops it; ``-y`` omits it)
    time     float64  with ``-t``: the report's time, seconds since the epoch (an ISO time
                      carries its offset; the others are read in ``tz``, default this
                      machine's local zone); NaN without ``-t``
    device   str      device name as printed
    ...      float64  every other header column, as printed, except that throughput is
                      always in kB/s: ``rMB/s``/``wMB/s``/``dMB/s`` become ``rkB/s``/...
                      (times 1024), ``rsec/s``/``wsec/s`` become ``rkB/s``/``wkB/s``
                      (512-byte sectors / 2), ``MB_read/s`` ... and ``Blk_read/s`` ...
                      become ``kB_read/s`` ..., and the old ``avgqu-sz`` is named
                      ``aqu-sz``. Units as sysstat documents them: r/s w/s d/s f/s
                      requests/s; rrqm/s wrqm/s merged requests/s; %rrqm %wrqm percent;
                      *_await and svctm ms; rareq-sz wareq-sz kB; avgrq-sz sectors; aqu-sz
                      requests; %util percent of elapsed time; tps transfers/s

``iostat_totals(df)`` sums over devices, one row per report (``sample``, ``time``,
``devices`` = how many were summed): every ``/s`` column, ``tps``, ``aqu-sz`` and the
``kB_read``/``kB_wrtn``/``kB_dscd`` totals summed; ``*_await`` and ``await`` averaged
weighted by their request rates; ``rareq-sz``/``wareq-sz``/``dareq-sz`` and ``avgrq-sz``
recomputed from the sums; ``%rrqm``/``%wrqm``/``%drqm`` recomputed; ``%util`` the busiest
device's; ``svctm`` dropped. Summing a disk with its
partitions (``-p``) or a dm device with the disk under it counts the same I/O twice:
pass ``devices=[...]`` to choose.

``parse_iostat_cpu`` columns: ``sample`` int64, ``time`` float64, then ``%user %nice
%system %iowait %steal %idle`` float64 (percent of total CPU time).

``df.attrs`` holds ``ncpu``, ``host``, ``kernel``, ``date`` from the banner, and ``units``
maps each renamed column to the one printed. Text before the banner is skipped; after it,
a line that is not part of a report, a row with a different number of fields than its
header, or a value that is not a number (``--human`` forms such as ``1.2M``) raises
``FormatError`` naming the file and line. JSON output (``-o JSON``) is not read.

USAGE::

    from mongoprobe.formats.iostat import parse_iostat, iostat_totals
    dev = parse_iostat("samples/sysstat/iostat-xmt-1-3.txt")
    iostat_totals(dev)[["time", "r/s", "rkB/s", "wkB/s"]]
"""

from __future__ import annotations

import math
import os
import re
from datetime import datetime
from typing import IO, Iterable

import numpy as np
import pandas as pd

from .errors import FormatError
from .sysstat import clock_seconds, epoch, parse_banner, parse_date, to_float
from .source import read_input

_TIME_LOCAL = re.compile(r"^(\d\d/\d\d/\d\d(?:\d\d)?) (\d\d:\d\d:\d\d(?: [AP]M)?)$")
_TIME_ISO = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)([+-]\d{4}|Z)?$")
_CPU_HEADER = re.compile(r"^avg-cpu:\s+(.*)$")
_DEV_HEADER = re.compile(r"^(Device:?)\s+(.*)$|^(.*\S)\s+(Device:?)\s*$")

# printed name -> (canonical name, factor to kB or 1)
_RENAME = {
    "rMB/s": ("rkB/s", 1024.0), "wMB/s": ("wkB/s", 1024.0), "dMB/s": ("dkB/s", 1024.0),
    "rsec/s": ("rkB/s", 0.5), "wsec/s": ("wkB/s", 0.5), "avgqu-sz": ("aqu-sz", 1.0),
    "MB_read/s": ("kB_read/s", 1024.0), "MB_wrtn/s": ("kB_wrtn/s", 1024.0),
    "MB_dscd/s": ("kB_dscd/s", 1024.0), "MB_read": ("kB_read", 1024.0),
    "MB_wrtn": ("kB_wrtn", 1024.0), "MB_dscd": ("kB_dscd", 1024.0),
    "Blk_read/s": ("kB_read/s", 0.5), "Blk_wrtn/s": ("kB_wrtn/s", 0.5),
    "Blk_dscd/s": ("kB_dscd/s", 0.5), "Blk_read": ("kB_read", 0.5),
    "Blk_wrtn": ("kB_wrtn", 0.5), "Blk_dscd": ("kB_dscd", 0.5),
}  # fmt: skip
# summed over devices besides the "/s" rates
_SUMMED = ("tps", "aqu-sz", "kB_read", "kB_wrtn", "kB_dscd")
# await column -> the request rate it is weighted by in the summed view
_AWAIT = {"r_await": ("r/s",), "w_await": ("w/s",), "d_await": ("d/s",),
          "f_await": ("f/s",), "await": ("r/s", "w/s")}  # fmt: skip
_REQ_SZ = {"rareq-sz": ("rkB/s", "r/s"), "wareq-sz": ("wkB/s", "w/s"),
           "dareq-sz": ("dkB/s", "d/s")}  # fmt: skip
_MERGE_PCT = {"%rrqm": ("rrqm/s", "r/s"), "%wrqm": ("wrqm/s", "w/s"),
              "%drqm": ("drqm/s", "d/s")}  # fmt: skip


def _report_time(line: str, tz: str | None) -> float | None:
    """The time line ``iostat -t`` prints before each report; None if ``line`` is not one."""
    s = line.strip()
    if m := _TIME_ISO.match(s):
        if m[2]:
            off = "+0000" if m[2] == "Z" else m[2]
            return datetime.strptime(m[1] + off, "%Y-%m-%dT%H:%M:%S%z").timestamp()
        return epoch(datetime.strptime(m[1], "%Y-%m-%dT%H:%M:%S"), tz)
    if m := _TIME_LOCAL.match(s):
        day, secs = parse_date(m[1]), clock_seconds(m[2])
        if day is None or secs is None:
            return None
        dt = datetime(day.year, day.month, day.day, secs // 3600, secs // 60 % 60, secs % 60)
        return epoch(dt, tz)
    return None


def is_iostat(text: str) -> bool:
    """Cheap check: a sysstat banner and an iostat ``Device`` or ``avg-cpu:`` header."""
    lines = text[:65536].splitlines()
    if not any(parse_banner(s) for s in lines[:5]):
        return False
    return any(_DEV_HEADER.match(s.strip()) or _CPU_HEADER.match(s.strip()) for s in lines)


def _scan(text: str, src: str, tz: str | None):
    lines = text.splitlines()
    banner = None
    dev_rows, cpu_rows = [], []
    dev_sample = cpu_sample = -1
    t = math.nan
    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        s = line.strip()
        if not s:
            i += 1
            continue
        if banner is None:
            banner = parse_banner(line)
            i += 1
            continue
        if (rt := _report_time(s, tz)) is not None:
            t = rt
            i += 1
            continue
        if m := _CPU_HEADER.match(s):
            cols = m[1].split()
            if i + 1 >= len(lines) or not lines[i + 1].strip():
                raise FormatError(src, i + 2, "the avg-cpu values under 'avg-cpu:'", "")
            vals = lines[i + 1].split()
            if len(vals) != len(cols):
                raise FormatError(src, i + 2, f"{len(cols)} avg-cpu values", lines[i + 1])
            cpu_sample += 1
            row = {"sample": cpu_sample, "time": t}
            for c, v in zip(cols, vals):
                row[c] = to_float(v, src, i + 2, c, lines[i + 1])
            cpu_rows.append(row)
            i += 2
            continue
        if m := _DEV_HEADER.match(s):
            last = m[1] is None  # --pretty: the device name is the last field
            cols = (m[3] if last else m[2]).split()
            hdr = i + 1
            dev_sample += 1
            i += 1
            while i < len(lines) and lines[i].strip():
                f = lines[i].split()
                if len(f) != len(cols) + 1:
                    raise FormatError(src, i + 1, f"{len(cols) + 1} fields as in the Device "
                                      f"header (line {hdr})", lines[i])  # fmt: skip
                name, vals = (f[-1], f[:-1]) if last else (f[0], f[1:])
                row = {"sample": dev_sample, "time": t, "device": name}
                for c, v in zip(cols, vals):
                    row[c] = to_float(v, src, i + 1, c, lines[i])
                dev_rows.append(row)
                i += 1
            continue
        raise FormatError(src, i + 1, "an iostat report line (a time, 'avg-cpu:', its "
                          "values, a 'Device' header or a device row)", line)  # fmt: skip
    if banner is None:
        raise FormatError(src, max(len(lines), 1), "the sysstat banner 'Linux VERSION "
                          "(HOST) DATE _ARCH_ (N CPU)'; none found")  # fmt: skip
    return banner, dev_rows, cpu_rows


def parse_iostat(
    text_or_path: str | os.PathLike[str] | IO[str], source: str | None = None,
    tz: str | None = None,
) -> pd.DataFrame:
    """iostat device rows, one per device per report (columns: module docstring).

    ``text_or_path``: the text, a path (any one-line ``str`` is a path) or an open file.
    ``tz``: zone of non-ISO ``-t`` times (None: local). Raises ``FormatError`` naming the
    file and line on damaged input or when there is no device report.
    """
    text, src = read_input(text_or_path, source)
    banner, rows, _ = _scan(text, src, tz)
    if not rows:
        raise FormatError(src, max(len(text.splitlines()), 1),
                          "an iostat 'Device' report; none found")
    df = pd.DataFrame(rows)  # columns in the order the header printed them
    units, rename = {}, {}
    for col in df.columns[3:]:
        if col in _RENAME:
            new, factor = _RENAME[col]
            df[col] = df[col] * factor
            rename[col], units[new] = new, col
    df = df.rename(columns=rename)
    df = df.astype({"sample": "int64", "time": "float64", "device": "str"})
    df = df.astype({c: "float64" for c in df.columns[3:]})
    df.attrs.update(banner.attrs())
    df.attrs["units"] = units
    return df


def parse_iostat_cpu(
    text_or_path: str | os.PathLike[str] | IO[str], source: str | None = None,
    tz: str | None = None,
) -> pd.DataFrame:
    """iostat's ``avg-cpu`` lines, one row per report (columns: module docstring)."""
    text, src = read_input(text_or_path, source)
    banner, _, rows = _scan(text, src, tz)
    if not rows:
        raise FormatError(src, max(len(text.splitlines()), 1),
                          "an iostat 'avg-cpu:' report; none found (-d omits it)")
    df = pd.DataFrame(rows)
    df = df.astype({"sample": "int64", "time": "float64"})
    df = df.astype({c: "float64" for c in df.columns[2:]})
    df.attrs.update(banner.attrs())
    return df


def iostat_totals(df: pd.DataFrame, devices: Iterable[str] | None = None) -> pd.DataFrame:
    """Per-report sums over devices (all, or those in ``devices``); see the module docstring."""
    if devices is not None:
        df = df[df["device"].isin(list(devices))]
    rates = [c for c in df.columns[3:] if c.endswith("/s") or c in _SUMMED]
    g = df.groupby(["sample", "time"], sort=True, dropna=False)
    out = g[rates].sum()
    out.insert(0, "devices", g.size().astype("int64"))
    for col, by in _AWAIT.items():
        if col in df.columns and all(b in df.columns for b in by):
            w = df[list(by)].sum(axis=1)
            num = (df[col] * w).groupby([df["sample"], df["time"]], dropna=False).sum()
            den = w.groupby([df["sample"], df["time"]], dropna=False).sum()
            out[col] = (num / den.replace(0, np.nan)).fillna(0.0)
    for col, (kb, rq) in _REQ_SZ.items():
        if col in df.columns and kb in out and rq in out:
            out[col] = (out[kb] / out[rq].replace(0, np.nan)).fillna(0.0)
    if "avgrq-sz" in df.columns and {"rkB/s", "wkB/s", "r/s", "w/s"} <= set(out.columns):
        req = (out["r/s"] + out["w/s"]).replace(0, np.nan)
        out["avgrq-sz"] = ((out["rkB/s"] + out["wkB/s"]) * 2 / req).fillna(0.0)
    for col, (mrg, rq) in _MERGE_PCT.items():
        if col in df.columns and mrg in out and rq in out:
            tot = (out[mrg] + out[rq]).replace(0, np.nan)
            out[col] = (100.0 * out[mrg] / tot).fillna(0.0)
    if "%util" in df.columns:
        out["%util"] = g["%util"].max()
    out = out.reset_index()
    keep = ["sample", "time", "devices"] + [c for c in df.columns[3:] if c in out.columns]
    out = out[keep].astype({"sample": "int64", "time": "float64", "devices": "int64"})
    out.attrs.update(df.attrs)
    return out
