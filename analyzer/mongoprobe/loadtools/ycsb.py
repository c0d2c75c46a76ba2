"""Adapter for YCSB (0.5-0.17 status lines with a wall clock; 0.1's without).

Each YCSB invocation (``Client -load`` or ``-t``; it starts with ``Command line: ...``)
is one phase, named from its command line: ``load`` for ``-load``, the workload file's
name (``-P workloads/workloada`` -> ``workloada``) for ``-t``; a repeated name is
numbered (``workloada-2``). Lines are parsed by ``formats.ycsb``; an invocation's
summary is the k-th ``[OVERALL]`` block for the k-th invocation (stdout and stderr
arrive separately, so their order is the link, not their interleaving).

Times. YCSB 0.17 prints its own wall clock (local time, ms); its differences give the
interval lengths, and it is anchored on record's receive times (the median offset per
invocation, which also absorbs the time zone). YCSB 0.1 prints elapsed seconds only:
the receive times are its clock. A plain capture without receive times keeps YCSB's
clock, or elapsed seconds with invocations laid end to end.

Bounds. A phase starts at its ``0 sec`` status line (printed as the client threads
start; without status lines, at ``Starting test.``) and lasts YCSB's ``RunTime(ms)``,
so its throughput is YCSB's own ``Throughput(ops/sec)``, also when a pasted output
left lines out; without a summary it ends at its last status line.

Rates. 0.17 counts each operation per interval (``[READ: Count=N, ...]``); 0.1 gives
only the total (``N operations``): its intervals carry op ``*``, or the one operation
when an invocation has only one. ``CLEANUP`` (per-thread cleanup) is not an operation.

Client latency: the summary's ``Operations``, ``AverageLatency(us)``,
``95thPercentileLatency(us)``, ``99thPercentileLatency(us)`` (any ``NthPercentile``
it prints), ``MaxLatency(us)``; without a summary, the count, mean and max of the
status lines.
"""

from __future__ import annotations

import math
import os
import re

import numpy as np
import pandas as pd

from ..formats import ycsb as fmt
from ..formats.errors import FormatError
from . import (ALL, CLIENT_COLUMNS, INTERVAL_COLUMNS, NOT_OPERATIONS, PHASE_COLUMNS,
               TOTAL_COLUMNS, ToolOutput, frame, number_repeats)

NAME = "ycsb"
_COMMAND = re.compile(r"^\s*Command line:\s*(.*)$")
_VERSION = re.compile(r"^\s*YCSB Client (\S+)")
_STARTING = re.compile(r"^\s*Starting test\.")


def refuses(out: pd.DataFrame) -> str | None:
    text = "\n".join(out["text"].head(2000))
    if fmt.is_ycsb(text) or fmt.is_ycsb_summary(text):
        return None
    return ("no status lines 'N sec: N operations;' nor '[OVERALL], RunTime(ms)' "
            "summary in the output")


def phase_name(command_line: str) -> str:
    """``load`` for ``-load``; for ``-t``, the workload file's name; else ``run``."""
    args = command_line.split()
    if "-load" in args:
        return "load"
    for i, a in enumerate(args[:-1]):
        if a == "-P":
            return os.path.basename(args[i + 1])
    return "run"


def _lines_text(out: pd.DataFrame) -> str:
    # one printed line per row, so a parser's line n is row n - 1
    return "\n".join(s.replace("\n", " ") for s in out["text"]) + "\n"


def _invocations(out: pd.DataFrame, first_data_row: int) -> list[tuple[int, str]]:
    """(first row, command line) of each invocation: each ``Command line:`` line starts
    one; output before the first of them (or without any) is an invocation of its own."""
    starts = [(i, m[1].strip()) for i, s in enumerate(out["text"])
              if (m := _COMMAND.match(s))]
    if not starts or first_data_row < starts[0][0]:
        starts.insert(0, (0, ""))
    return starts


def _summaries(summary: pd.DataFrame | None) -> list[pd.DataFrame]:
    """The summary rows cut into blocks, one per ``[OVERALL], RunTime(ms)``."""
    if summary is None or not len(summary):
        return []
    first = (summary["section"] == "OVERALL") & (summary["stat"] == "runtime_ms")
    block = first.cumsum()
    if not first.any():
        return [summary]
    return [summary[block == k] for k in range(1, int(block.max()) + 1)]


def read(out: pd.DataFrame, source: str) -> ToolOutput:
    text = _lines_text(out)
    status = fmt.parse_ycsb(text, source) if fmt.is_ycsb(text) else None
    summary = fmt.parse_ycsb_summary(text, source) if fmt.is_ycsb_summary(text) else None
    received = out["time"].to_numpy(dtype=float)
    has_received = bool(np.isfinite(received).any())
    # summaries are matched by order, so only status lines can show output that came
    # before the first command line
    data = status if status is not None else summary
    inv = _invocations(out, int(data["line"].min()) - 1 if data is not None else len(out))
    bounds = [r for r, _ in inv] + [len(out)]
    names = number_repeats([phase_name(c) if c else "run" for _, c in inv])
    blocks = _summaries(summary)
    versions = {m[1] for s in out["text"] if (m := _VERSION.match(s))}
    notes = []
    if len(blocks) not in (0, len(inv)):
        notes.append(f"{len(inv)} YCSB invocations but {len(blocks)} summaries: "
                     "summaries matched by order")
    phases, intervals, client, totals = [], [], [], []
    clock_end = 0.0  # plain capture without any clock: invocations laid end to end
    for k, ((row0, cmd), name) in enumerate(zip(inv, names)):
        row1 = bounds[k + 1]
        st = None
        if status is not None:
            st = status[(status["line"] - 1 >= row0) & (status["line"] - 1 < row1)]
        sm = blocks[k] if k < len(blocks) else None
        runtime_s = _stat(sm, "OVERALL", "runtime_ms") / 1e3
        times = _times(st, received, has_received, clock_end)
        if st is not None and len(st):
            lines = st.drop_duplicates("line")
            # the '0 sec' line is printed as the client threads start
            start = float(times[0]) - float(lines["elapsed_s"].iloc[0])
            end = float(times[-1])
        else:
            # no status lines (YCSB without -s): from 'Starting test.' to the summary
            start = _first_time(out, row0, row1, _STARTING, received)
            end = (float(received[int(sm["line"].iloc[0]) - 1])
                   if sm is not None and has_received else math.nan)
        if not math.isnan(runtime_s) and not math.isnan(start):
            end = start + runtime_s
        clock_end = end if not math.isnan(end) else clock_end
        phases.append([name, start, end, NAME, cmd])
        if st is not None and len(st):
            intervals += _intervals(name, st, times, start)
        client += _client(name, st, sm)
        totals += _totals(name, sm, runtime_s)
    if not has_received:
        notes.append("no receive times (a plain capture): times are YCSB's own clock, or "
                     "elapsed seconds")
    return ToolOutput(NAME, frame(phases, PHASE_COLUMNS), frame(intervals, INTERVAL_COLUMNS),
                      frame(client, CLIENT_COLUMNS), frame(totals, TOTAL_COLUMNS),
                      units={}, notes=notes, version=", ".join(sorted(versions)))


def _stat(sm: pd.DataFrame | None, section: str, stat: str) -> float:
    if sm is None:
        return math.nan
    v = sm.loc[(sm["section"] == section) & (sm["stat"] == stat), "value"]
    return float(v.iloc[0]) if len(v) else math.nan


def _first_time(out, row0, row1, pattern, received) -> float:
    for i in range(row0, row1):
        if pattern.match(out["text"].iat[i]):
            return float(received[i])
    return math.nan


def _times(st: pd.DataFrame | None, received: np.ndarray, has_received: bool,
           clock_end: float) -> np.ndarray:
    """One time per status row (rows of one line share it)."""
    if st is None or not len(st):
        return np.array([])
    own = st["time"].to_numpy(dtype=float)
    recv = received[st["line"].to_numpy() - 1] if has_received else np.full(len(st), np.nan)
    if np.isfinite(own).all():
        if has_received and np.isfinite(recv).any():
            return own + float(np.nanmedian(recv - own))
        return own
    if has_received:
        return recv
    return clock_end + st["elapsed_s"].to_numpy(dtype=float)


def _intervals(phase: str, st: pd.DataFrame, times: np.ndarray, start: float) -> list:
    lines = st.assign(_t=times).groupby("line", sort=True)
    firsts = lines.first()
    ops_named = sorted({o for o in st["op"] if o and o not in NOT_OPERATIONS})
    per_op_counts = st["count"].notna().any()
    rows, prev_t, prev_ops = [], None, 0
    for line, head in firsts.iterrows():
        t = float(head["_t"])
        total = int(head["operations"])
        if prev_t is None and total == 0:
            prev_t, prev_ops = t, 0     # the '0 sec: 0 operations' start line
            continue
        length = t - (prev_t if prev_t is not None else start)
        body = st[st["line"] == line]
        if per_op_counts:
            got = body[body["op"].ne("") & ~body["op"].isin(NOT_OPERATIONS)]
            rows += [[phase, t, length, op, int(c), math.nan, True] for op, c in
                     zip(got["op"], got["count"].fillna(0))]
        else:
            op = ops_named[0] if len(ops_named) == 1 else ALL
            rows.append([phase, t, length, op, total - prev_ops, math.nan, True])
        prev_t, prev_ops = t, total
    if rows:
        typical = _status_interval(firsts["elapsed_s"].to_numpy(dtype=float))
        if not math.isfinite(typical):
            typical = float(np.median([r[2] for r in rows]))
        for r in rows:   # the last, partial interval and pasted-out gaps are not full
            r[6] = bool(0.5 * typical <= r[2] <= 1.5 * typical)
    return rows


def _status_interval(elapsed: np.ndarray) -> float:
    """YCSB's status.interval, as the most common step of its printed whole seconds
    (the median of measured lengths misleads when a phase has only two lines)."""
    steps = np.diff(elapsed[np.isfinite(elapsed)])
    steps = steps[steps > 0]
    if steps.size == 0:
        return math.nan
    values, counts = np.unique(steps, return_counts=True)
    return float(values[np.argmax(counts)])


_LAT = {"avg_us": "avg_us", "p50_us": "p50_us", "p95_us": "p95_us", "p99_us": "p99_us",
        "max_us": "max_us"}


def _client(phase: str, st: pd.DataFrame | None, sm: pd.DataFrame | None) -> list:
    rows = []
    if sm is not None:
        for op, part in sm.groupby("section", sort=False):
            if op == "OVERALL" or op.startswith("TOTAL_GC") or op in NOT_OPERATIONS:
                continue
            vals = dict(zip(part["stat"], part["value_us"].where(part["value_us"].notna(),
                                                                 part["value"])))
            if "operations" not in vals:
                continue
            rows.append([phase, op, float(vals["operations"])]
                        + [float(vals.get(k, math.nan)) for k in _LAT] + ["summary"])
        return rows
    if st is None:
        return rows
    for op, part in st[st["op"].ne("") & ~st["op"].isin(NOT_OPERATIONS)].groupby("op"):
        n = part["count"].astype("float64")
        if n.isna().all():
            continue
        ok = part["avg_us"].notna()
        avg = float((part["avg_us"][ok] * n[ok]).sum() / n[ok].sum()) if n[ok].sum() else math.nan
        rows.append([phase, op, float(n.sum()), avg, math.nan, math.nan, math.nan,
                     float(part["max_us"].max()), "status lines"])
    return rows


def _totals(phase: str, sm: pd.DataFrame | None, runtime_s: float) -> list:
    if sm is None:
        return []
    ops = sm[(sm["stat"] == "operations") & ~sm["section"].isin(NOT_OPERATIONS)
             & (sm["section"] != "OVERALL")]
    rows = [[phase, op, float(v), runtime_s, math.nan] for op, v in zip(ops["section"],
                                                                      ops["value"])]
    rows.append([phase, ALL, float(ops["value"].sum()), runtime_s,
                 _stat(sm, "OVERALL", "throughput_ops_per_s")])
    return rows


__all__ = ["NAME", "refuses", "read", "phase_name", "FormatError"]
