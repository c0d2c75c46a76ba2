"""The insert benchmark's Python client (``iibench.py``) output -> DataFrames.

What iibench.py prints while it runs (``samples/iibench/``), a progress line per
interval under one header, then response-time histograms and totals::

    Using Mongo w=1, r=local, j=0, trx=False
    i_sec  t_sec  i_ips  t_ips  i_dps  t_dps  i_qps  t_qps  max_i  max_d  max_q  t_ins  t_del  t_query  retry_i  retry_d  retry_q
    1.0    1.0    1000   1000   0      0      32     32     101444 0      64935  1000   0      32       0        0        0
    ...
    Insert rt:     256us       1ms  ...       gt         max
    Insert rt:         0         0  ...        0    0.193524
     Query rt:     256us       1ms  ...
     Query rt:         0        12  ...        0    1.653138
    Query thread: 112 queries, fetched/query(expected, actual) = ( 10 , 7.946 )
    Totals: 45.9 secs, 654.2 rows/sec, 30000 rows, 0 0 0 insert-delete-query retry

``parse_iibench(src)`` -- the progress lines, one row per interval (columns named as
iibench.py names them; what they count)::

    i_sec    float64  the interval's length, seconds
    t_sec    float64  seconds since the benchmark started, at the interval's end
    i_ips    float64  rows (documents) inserted per second in the interval; iibench
                      inserts ``rows_per_commit`` documents per insert command
    t_ips    float64  the same since the start
    i_dps, t_dps      rows deleted per second (interval, since the start)
    i_qps, t_qps      queries per second (interval, since the start). iibench advances
                      its query count every 16 queries, so i_qps moves in steps of 16
                      per interval: a coarse rate
    max_i    int64    the slowest insert command in the interval, microseconds
    max_d    int64    the slowest delete, microseconds
    max_q    int64    the slowest query, microseconds (0 when none ended)
    t_ins    int64    rows inserted since the start
    t_del    int64    rows deleted since the start
    t_query  int64    queries since the start (steps of 16, see i_qps)
    retry_i, retry_d, retry_q   int64   retries since the start
    line     int64    the line's number in the input, from 1

``parse_iibench_summary(src)`` -- what it prints at the end, one row per figure::

    what     str      totals | query_thread | getmin
    metric   str      seconds, rows_per_s, rows, retry_insert, retry_delete,
                      retry_query (totals); queries, fetched_expected, fetched_actual
                      (query_thread); queries, seconds, seconds_per_query (getmin)
    value    float64
    line     int64

The ``Insert rt:`` / ``Query rt:`` histograms are the insert benchmark's histogram rows:
``formats.insert_benchmark.parse_insert_benchmark_hist`` reads them.

A line that starts like a progress line (after the header: a number) but has the wrong
number of cells, and an input without the header, raise ``FormatError`` naming the file
and line. Other lines (``Using Mongo ...``, ``Done``, warnings) are skipped.

USAGE::

    from mongoprobe.formats.iibench import parse_iibench
    iv = parse_iibench("samples/iibench/iibench-mongo-1i-1q-30k.stdout.txt")
    iv[["t_sec", "i_ips", "i_qps", "max_i"]]
"""

from __future__ import annotations

import os
import re
from typing import IO

import pandas as pd

from .errors import FormatError
from .source import read_input

HEADER = ("i_sec", "t_sec", "i_ips", "t_ips", "i_dps", "t_dps", "i_qps", "t_qps", "max_i",
          "max_d", "max_q", "t_ins", "t_del", "t_query", "retry_i", "retry_d", "retry_q")
_FLOATS = ("i_sec", "t_sec", "i_ips", "t_ips", "i_dps", "t_dps", "i_qps", "t_qps")
COLUMNS = HEADER + ("line",)
SUMMARY_COLUMNS = ("what", "metric", "value", "line")

_NUM = r"-?\d+(?:\.\d+)?"
_TOTALS = re.compile(rf"^Totals: ({_NUM}) secs, ({_NUM}) rows/sec, (\d+) rows, (\d+) (\d+) "
                     r"(\d+) insert-delete-query retry\s*$")
_QUERY_THREAD = re.compile(rf"^Query thread: (\d+) queries, fetched/query\(expected, actual\) "
                           rf"= \( ({_NUM}) , ({_NUM}) \)\s*$")
_GETMIN = re.compile(rf"^getmin (\d+) queries, ({_NUM}) total secs, ({_NUM}) secs/query\s*$")


def is_header(line: str) -> bool:
    """A line that is iibench.py's progress header."""
    return tuple(line.split()) == HEADER


def is_iibench(text: str) -> bool:
    """Cheap check: iibench.py's progress header in the first 64 KiB."""
    return any(is_header(s) for s in text[:65536].splitlines())


def is_iibench_summary(text: str) -> bool:
    """Cheap check: iibench.py's ``Totals:`` or ``Query thread:`` line."""
    return any(_TOTALS.match(s.strip()) or _QUERY_THREAD.match(s.strip())
               for s in text.splitlines())


def parse_iibench(text_or_path: str | os.PathLike[str] | IO[str],
                  source: str | None = None) -> pd.DataFrame:
    """The progress lines, one row per interval (columns: the module docstring)."""
    text, src = read_input(text_or_path, source)
    rows: list[list] = []
    seen_header = False
    for n, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if is_header(s):
            seen_header = True
            continue
        if not seen_header or not s or not (s[0].isdigit() or s[0] == "-"):
            continue
        cells = s.split()
        if len(cells) != len(HEADER):
            raise FormatError(src, n, f"{len(HEADER)} cells under iibench's header "
                              f"({' '.join(HEADER[:4])} ...)", s)
        try:
            rows.append([float(c) if h in _FLOATS else int(c) for h, c in zip(HEADER, cells)]
                        + [n])
        except ValueError:
            raise FormatError(src, n, "numbers under iibench's header", s) from None
    if not seen_header:
        raise FormatError(src, max(len(text.splitlines()), 1),
                          "iibench.py's progress header 'i_sec t_sec i_ips ...'; none found")
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    return df.astype({c: ("float64" if c in _FLOATS else "int64") for c in COLUMNS})


def parse_iibench_summary(text_or_path: str | os.PathLike[str] | IO[str],
                          source: str | None = None) -> pd.DataFrame:
    """The totals at the end (columns: the module docstring)."""
    text, src = read_input(text_or_path, source)
    rows: list[tuple] = []
    for n, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if m := _TOTALS.match(s):
            rows += [("totals", k, float(v), n) for k, v in zip(
                ("seconds", "rows_per_s", "rows", "retry_insert", "retry_delete",
                 "retry_query"), m.groups())]
        elif m := _QUERY_THREAD.match(s):
            rows += [("query_thread", k, float(v), n) for k, v in zip(
                ("queries", "fetched_expected", "fetched_actual"), m.groups())]
        elif m := _GETMIN.match(s):
            rows += [("getmin", k, float(v), n) for k, v in zip(
                ("queries", "seconds", "seconds_per_query"), m.groups())]
        elif s.startswith(("Totals:", "Query thread:")):
            raise FormatError(src, n, "iibench.py's 'Totals: S secs, R rows/sec, N rows, "
                              "I D Q insert-delete-query retry' or 'Query thread: N "
                              "queries, ...' line", s)
    if not rows:
        raise FormatError(src, max(len(text.splitlines()), 1),
                          "iibench.py's 'Totals:' or 'Query thread:' lines; none found")
    df = pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))
    return df.astype({"what": str, "metric": str, "value": "float64", "line": "int64"})
