"""YCSB client output -> DataFrames: the periodic status lines and the final summary.

Two entry points, one per table YCSB prints (its status thread writes to stderr, the
summary goes to stdout; a file holding either or both is fine):

``parse_ycsb(src)`` -- the status lines, both styles YCSB has used::

    # YCSB 0.1.x (old): average latency only, no wall clock
     10 sec: 17563 operations; 1753.49 current ops/sec; [INSERT AverageLatency(us)=302209.69]
    # YCSB 0.5 .. 0.17 (HdrHistogram measurement, the default): wall clock with ms
    2026-11-22 08:46:57:092 1 sec: 254 operations; 254 current ops/sec; est completion in
        1 minute [INSERT: Count=254, Max=110591, Min=1617, Avg=10046.31, 90=15767, 99=102015,
        99.9=110591, 99.99=110591]

One row per interval per operation in brackets, in input order; an interval with no
bracket (``0 sec: 0 operations;``) gives one row with ``op`` "" so no interval is lost.

    time        float64  wall clock of the line, seconds since the epoch (NaN when the
                         line has none: old YCSB). YCSB prints local time without a zone;
                         it is read in ``tz`` (default: this machine's local zone)
    elapsed_s   int64    seconds since the run started, as printed
    operations  int64    operations completed since the start (cumulative)
    ops_per_s   float64  "current ops/sec": throughput over the last status interval
                         (NaN when not printed)
    op          str      operation: INSERT, READ, UPDATE, SCAN, READ-MODIFY-WRITE,
                         CLEANUP, *-FAILED ... ("" for an interval without brackets)
    count       Int64    operations of this kind in the interval (<NA> in old YCSB)
    avg_us      float64  mean latency in the interval, microseconds
    min_us      float64  minimum, us          (NaN when not printed: old YCSB)
    max_us      float64  maximum, us
    p90_us      float64  90th percentile, us
    p99_us      float64  99th percentile, us
    p999_us     float64  99.9th percentile, us
    p9999_us    float64  99.99th percentile, us
    line        int64    the line's number in the input, from 1 (to find its receive time
                         in a run's load.out, or the invocation it belongs to)

An operation with ``Count=0`` prints ``Min=9223372036854775807, Avg=NaN, Max=0``: all its
latency columns are NaN. Keys other than Count/Avg/Min/Max/90/99/99.9/99.99 (other
measurement types) are ignored.

``parse_ycsb_summary(src)`` -- the ``[SECTION], METRIC, VALUE`` lines at the end::

    [OVERALL], RunTime(ms), 16001
    [READ], 95thPercentileLatency(us), 339199         (0.17; old YCSB printed (ms))
    [READ], Return=OK, 61                              (old: Return=0)
    [INSERT], 0, 4387109                               (old YCSB's 1-ms histogram buckets)

    section   str      OVERALL, READ, INSERT, CLEANUP, TOTAL_GC_TIME, ...
    metric    str      the metric as printed: "95thPercentileLatency(ms)", "Return=OK", "0"
    value     float64  the number as printed
    stat      str      what the row is: runtime_ms, throughput_ops_per_s, operations,
                       avg_us, min_us, max_us, p95_us, p99_us, p999_us (99.9th), ...,
                       return, bucket, count, time_ms, time_pct; "" for any other metric
    code      str      the return code (OK, 0, ERROR ...) of a ``return`` row, the bucket
                       label ("0", "1", ">1000") of a ``bucket`` row, else ""
    value_us  float64  a latency row's value in microseconds ((ms) metrics times 1000);
                       NaN for other rows
    lo_us     float64  a bucket row's range [lo_us, hi_us): bucket i holds the operations
    hi_us     float64  that took i ms to i+1 ms; ">N" is [N ms, inf). NaN for other rows

Everything else (banners, ``Command line:``, driver warnings, shell prompts, ``real 8m43s``,
the ``...`` elision lines of pasted excerpts) is skipped. A line that starts like a
status line (``[DATE] N sec:``) or a summary line (``[SECTION],``) but is not one, and an
input with none at all, raise ``FormatError`` naming the file and line.

USAGE::

    from mongoprobe.formats.ycsb import parse_ycsb, parse_ycsb_summary
    st = parse_ycsb("samples/ycsb/ycsb-0.17-load.status.txt")
    st[st.op == "INSERT"][["elapsed_s", "ops_per_s", "p99_us"]]
"""

from __future__ import annotations

import math
import os
import re
from datetime import datetime
from typing import IO
from zoneinfo import ZoneInfo

import pandas as pd

from .errors import FormatError
from .source import read_input

STATUS_COLUMNS = ("time", "elapsed_s", "operations", "ops_per_s", "op", "count", "avg_us",
                  "min_us", "max_us", "p90_us", "p99_us", "p999_us", "p9999_us", "line")
SUMMARY_COLUMNS = ("section", "metric", "value", "stat", "code", "value_us", "lo_us", "hi_us",
                   "line")
_LAT = ("avg_us", "min_us", "max_us", "p90_us", "p99_us", "p999_us", "p9999_us")

_NUM = r"(?:-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|NaN|-?Infinity)"
_STATUS_START = re.compile(r"^(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3} )?-?\d+ sec:")
_STATUS = re.compile(
    r"^(?:(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d):(\d{3}) )?(-?\d+) sec: (\d+) operations;"
    rf"(?: ({_NUM}) current ops/sec;)?"
    r"(?: est completion in [^\[]*?)?"
    r"((?:\s*\[[^\[\]]*\])*)\s*$"
)
_BRACKET = re.compile(r"\[([^\[\]]*)\]")
# 0.5+: "INSERT: Count=254, Max=..." ; 0.1.x: "INSERT AverageLatency(us)=302209.69"
_OP_NEW = re.compile(r"^([A-Za-z0-9_-]+): (.*)$")
_OP_OLD = re.compile(r"^([A-Za-z0-9_-]+) (.*)$")
_KV = re.compile(rf"^\s*([^=,\s]+)=({_NUM})\s*$")
_KEYS = {"Count": "count", "Avg": "avg_us", "Min": "min_us", "Max": "max_us", "90": "p90_us",
         "99": "p99_us", "99.9": "p999_us", "99.99": "p9999_us",
         "AverageLatency(us)": "avg_us"}  # fmt: skip
_LONG_MAX = 9223372036854775807  # HdrHistogram's Min of an empty interval

_SUMMARY_START = re.compile(r"^\[[^\]\s]+\],")
_SUMMARY = re.compile(rf"^\[([^\]\s]+)\],\s*([^,]*?)\s*,\s*({_NUM})\s*$")
# "95thPercentileLatency(us)"; fractional percentiles have no suffix: "99.9PercentileLatency(us)"
_PCT = re.compile(r"^(\d+(?:\.\d+)?)(?:th|st|nd|rd)?PercentileLatency\((us|ms)\)$")


def _epoch(dt: datetime, tz: str | None) -> float:
    return (dt.replace(tzinfo=ZoneInfo(tz)) if tz else dt).timestamp()


def _num(s: str | None) -> float:
    if s is None:
        return math.nan
    return float(s.replace("Infinity", "inf"))


def _op_stats(body: str, src: str, n: int, line: str) -> tuple[str, dict[str, float]]:
    m = _OP_NEW.match(body.strip()) or _OP_OLD.match(body.strip())
    if not m:
        raise FormatError(src, n, "an operation bracket '[OP: Count=N, Avg=X, ...]' or "
                          "'[OP AverageLatency(us)=X]'", line)  # fmt: skip
    stats: dict[str, float] = {}
    for part in m[2].split(","):
        kv = _KV.match(part)
        if not kv:
            raise FormatError(src, n, f"KEY=NUMBER pairs inside [{m[1]} ...]", line)
        if kv[1] in _KEYS:
            stats[_KEYS[kv[1]]] = _num(kv[2])
    if not stats:
        raise FormatError(src, n, f"latency values (Count=, Avg=, AverageLatency(us)=) "
                          f"inside [{m[1]} ...]", line)  # fmt: skip
    if stats.get("count") == 0 or stats.get("min_us") == _LONG_MAX:
        for k in _LAT:
            stats[k] = math.nan
    return m[1], stats


def is_ycsb(text: str) -> bool:
    """Cheap check: a YCSB status line in the first 64 KiB."""
    return any(_STATUS.match(s.strip()) for s in text[:65536].splitlines())


def is_ycsb_summary(text: str) -> bool:
    """Cheap check: a YCSB ``[OVERALL], RunTime(ms), N`` or ``[OP], Operations, N`` line."""
    for s in text[:65536].splitlines():
        m = _SUMMARY.match(s.strip())
        if m and m[2] in ("RunTime(ms)", "Throughput(ops/sec)", "Operations"):
            return True
    return False


def parse_ycsb(
    text_or_path: str | os.PathLike[str] | IO[str], source: str | None = None,
    tz: str | None = None,
) -> pd.DataFrame:
    """The status lines of a YCSB run, one row per interval per operation.

    ``text_or_path``: the text, a path (any one-line ``str`` is a path) or an open file.
    ``tz``: the zone YCSB's wall clock was printed in (``None``: this machine's local
    zone). Columns and their units: the module docstring. Raises ``FormatError`` (file,
    line, what was expected) on a damaged status line or when there is none.
    """
    text, src = read_input(text_or_path, source)
    rows: list[dict] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not _STATUS_START.match(line):
            continue
        m = _STATUS.match(line)
        if not m:
            raise FormatError(src, n, "a YCSB status line '[DATE] N sec: N operations; "
                              "X current ops/sec; [OP: ...]'", line)  # fmt: skip
        t = math.nan
        if m[1]:
            y, mo, d, hh, mi, ss, ms = (int(m[i]) for i in range(1, 8))
            t = _epoch(datetime(y, mo, d, hh, mi, ss, ms * 1000), tz)
        base = {"time": t, "elapsed_s": int(m[8]), "operations": int(m[9]),
                "ops_per_s": _num(m[10]), "line": n}  # fmt: skip
        brackets = _BRACKET.findall(m[11] or "")
        if not brackets:
            rows.append({**base, "op": ""})
        for body in brackets:
            op, stats = _op_stats(body, src, n, line)
            rows.append({**base, "op": op, **stats})
    if not rows:
        raise FormatError(src, max(len(text.splitlines()), 1),
                          "YCSB status lines 'N sec: N operations; ...'; none found")
    df = pd.DataFrame(rows).reindex(columns=list(STATUS_COLUMNS))
    df = df.astype({"time": "float64", "elapsed_s": "int64", "operations": "int64",
                    "ops_per_s": "float64", "op": "str", "count": "Int64",
                    "line": "int64"})  # fmt: skip
    return df.astype({c: "float64" for c in _LAT})


def _summary_row(section: str, metric: str, value: float) -> dict:
    row = {"section": section, "metric": metric, "value": value, "stat": "", "code": "",
           "value_us": math.nan, "lo_us": math.nan, "hi_us": math.nan}  # fmt: skip
    simple = {"RunTime(ms)": "runtime_ms", "Throughput(ops/sec)": "throughput_ops_per_s",
              "Operations": "operations", "Count": "count", "Time(ms)": "time_ms",
              "Time(%)": "time_pct"}  # fmt: skip
    lat = {"AverageLatency(us)": "avg_us", "MinLatency(us)": "min_us",
           "MaxLatency(us)": "max_us"}  # fmt: skip
    if metric in simple:
        row["stat"] = simple[metric]
    elif metric in lat:
        row["stat"], row["value_us"] = lat[metric], value
    elif m := _PCT.match(metric):
        row["stat"] = "p" + m[1].replace(".", "") + "_us"
        row["value_us"] = value * (1000.0 if m[2] == "ms" else 1.0)
    elif metric.startswith("Return="):
        row["stat"], row["code"] = "return", metric[len("Return="):]
    elif re.fullmatch(r"\d+", metric):
        row["stat"], row["code"] = "bucket", metric
        row["lo_us"], row["hi_us"] = int(metric) * 1000.0, (int(metric) + 1) * 1000.0
    elif re.fullmatch(r">\d+", metric):
        row["stat"], row["code"] = "bucket", metric
        row["lo_us"], row["hi_us"] = int(metric[1:]) * 1000.0, math.inf
    return row


def parse_ycsb_summary(
    text_or_path: str | os.PathLike[str] | IO[str], source: str | None = None
) -> pd.DataFrame:
    """The ``[SECTION], METRIC, VALUE`` summary lines, in input order (columns: module
    docstring). Raises ``FormatError`` on a damaged summary line or when there is none."""
    text, src = read_input(text_or_path, source)
    rows = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not _SUMMARY_START.match(line):
            continue
        m = _SUMMARY.match(line)
        if not m:
            raise FormatError(src, n, "a YCSB summary line '[SECTION], METRIC, NUMBER'", line)
        rows.append({**_summary_row(m[1], m[2], _num(m[3])), "line": n})
    if not rows:
        raise FormatError(src, max(len(text.splitlines()), 1),
                          "YCSB summary lines '[SECTION], METRIC, NUMBER'; none found")
    df = pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))
    return df.astype({"section": "str", "metric": "str", "value": "float64", "stat": "str",
                      "code": "str", "value_us": "float64", "lo_us": "float64",
                      "hi_us": "float64", "line": "int64"})  # fmt: skip
