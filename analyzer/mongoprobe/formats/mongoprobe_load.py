"""``mongoprobe load`` output -> interval, phase and command DataFrames.

Reads what the built-in load driver prints (its format is documented in
``mongoprobe/load/insert_workload.py``), either as it printed it or as ``mongoprobe record`` kept it
in ``RUN/load.out`` (``EPOCH<TAB>STREAM<TAB>text`` lines, of which only the stdout
ones are read)::

    ### load uri=mongodb://127.0.0.1:41617/ db=mongoprobe ... interval=1 sort=1
    # time phase elapsed_s ips qps inserts queries insert_hist insert_max_s query_hist query_max_s
    ### phase start name=2i.1q time=1795343701.470241
    1795343702.472 2i.1q 1.002 119.8 157.7 120 158 0,15,22,58,21,4,0,0,0,0 0.250458 0,12,...
    ### phase end name=2i.1q time=1795343704.529631
    ### summary {"phases": [...], "commands": {...}, ...}

``parse_mongoprobe_load(lines, source)`` returns a :class:`LoadOutput`:

``intervals`` (one row per interval line)::

    time          float64  wall clock at the interval's end, epoch seconds
    phase         str
    elapsed_s     float64  since the phase start
    length_s      float64  this interval's length (elapsed_s minus the previous one)
    ips, qps      float64  documents inserted / queries per second in the interval
    inserts       int64    cumulative in the phase (documents)
    queries       int64    cumulative in the phase
    insert_256us ... insert_16s, insert_gt   int64   insert commands by response time
    insert_max_s  float64
    query_256us ... query_gt                 int64   queries by response time
    query_max_s   float64

``phases`` (one row per phase, in order)::

    name, start, end (wall epoch seconds, from the markers; end NaN if never ended),
    seconds, insert_threads, query_threads, rate (docs/s per insert thread, NaN = none),
    inserts, queries (int64), ips_avg, qps_avg, ips_p95, qps_p95, insert_max_s,
    query_max_s (float64), interrupted (bool), db_size_bytes (float64: dbStats
    totalSize at the phase's end, NaN when the output or the server has none)

The phase numbers come from the summary line when there is one, else from the
interval lines (output cut short: the phase's last cumulative counts; ``ips_p95``
and ``qps_p95`` are then NaN: the analysis computes them, ``mongoprobe.analysis.phase_table``).

``commands`` (from the summary): ``phase`` (a phase name, or ``setup``,
``teardown``, ``other``), ``command``, ``count`` -- what pymongo's command monitoring
saw the driver send.

``markers``: every ``### phase start|end name=NAME time=EPOCH`` line (any tool may
print them): ``event`` (start/end), ``name``, ``time``, and ``received`` (the
record-time receive stamp, NaN for raw output).

``summary`` is the summary JSON as a dict (None when the output has none) and
``header`` the ``### load`` line's key=value pairs.

``parse_mongoprobe_load`` raises FormatError (file and line) on a line it cannot
read; ``is_mongoprobe_load(text)`` is the cheap format check.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Iterable

import pandas as pd

from .errors import FormatError
from .loadout import STAMPED

BUCKETS = ("256us", "1ms", "4ms", "16ms", "64ms", "256ms", "1s", "4s", "16s", "gt")
HIST_COLUMNS = [f"{kind}_{b}" for kind in ("insert", "query") for b in BUCKETS]
INTERVAL_COLUMNS = (["time", "phase", "elapsed_s", "length_s", "ips", "qps", "inserts",
                     "queries"] + [f"insert_{b}" for b in BUCKETS] + ["insert_max_s"]
                    + [f"query_{b}" for b in BUCKETS] + ["query_max_s"])
PHASE_COLUMNS = ["name", "start", "end", "seconds", "insert_threads", "query_threads", "rate",
                 "inserts", "queries", "ips_avg", "qps_avg", "ips_p95", "qps_p95",
                 "insert_max_s", "query_max_s", "interrupted", "db_size_bytes"]
COMMAND_COLUMNS = ["phase", "command", "count"]
MARKER_COLUMNS = ["event", "name", "time", "received"]

MARKER = re.compile(r"^### phase (start|end) name=(\S+) time=(\d+(?:\.\d+)?)\s*$")
_INTERVAL = re.compile(
    r"^(\d+\.\d+) (\S+) (\d+\.\d+) (\d+\.\d+) (\d+\.\d+) (\d+) (\d+) "
    r"(\d+(?:,\d+){9}) (\d+\.\d+) (\d+(?:,\d+){9}) (\d+\.\d+)$")
_NAME_SPEC = re.compile(r"^(\d+)i(?:@(\d+(?:\.\d+)?))?\.(\d+)q(?:-\d+)?$")


@dataclass
class LoadOutput:
    intervals: pd.DataFrame
    phases: pd.DataFrame
    commands: pd.DataFrame
    markers: pd.DataFrame
    summary: dict | None = None
    header: dict = field(default_factory=dict)


def is_mongoprobe_load(text: str) -> bool:
    for line in text.splitlines()[:5]:
        m = STAMPED.match(line)
        if (m[3] if m else line).startswith("### load "):
            return True
    return False


def unstamp(lines: Iterable[str]) -> Iterable[tuple[int, str, float]]:
    """(line number, stdout text, receive time or NaN) from raw or load.out lines."""
    for n, line in enumerate(lines, 1):
        line = line.rstrip("\n")
        m = STAMPED.match(line)
        if m:
            if m[2] == "stdout":
                yield n, m[3], float(m[1])
        else:
            yield n, line, math.nan


def _markers_df(rows: list) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=MARKER_COLUMNS)
    return df.astype({"event": str, "name": str, "time": "float64", "received": "float64"})


def _spec_of(name: str) -> tuple[int, int, float]:
    m = _NAME_SPEC.match(name)
    if not m:
        return 0, 0, math.nan
    return int(m[1]), int(m[3]), float(m[2]) if m[2] else math.nan


def parse_mongoprobe_load(lines: Iterable[str], source: str = "<load>") -> LoadOutput:
    header: dict = {}
    intervals: list[list] = []
    markers: list[tuple] = []
    summary = None
    last_elapsed: dict[str, float] = {}
    for n, text, received in unstamp(lines):
        s = text.strip()
        if not s:
            continue
        if s.startswith("### "):
            m = MARKER.match(s)
            if m:
                markers.append((m[1], m[2], float(m[3]), received))
            elif s.startswith("### summary "):
                try:
                    summary = json.loads(s[len("### summary "):])
                except ValueError:
                    raise FormatError(source, n, "a JSON object after '### summary '", s)
            elif s.startswith("### load "):
                header = dict(kv.split("=", 1) for kv in s[9:].split() if "=" in kv)
            else:
                raise FormatError(source, n, "a '### phase', '### load' or '### summary' line",
                                  s)
            continue
        if s.startswith("#"):
            continue
        m = _INTERVAL.match(s)
        if not m:
            raise FormatError(source, n, "an interval line (time phase elapsed_s ips qps "
                              "inserts queries insert_hist insert_max_s query_hist query_max_s)",
                              s)
        elapsed = float(m[3])
        length = elapsed - last_elapsed.get(m[2], 0.0)
        last_elapsed[m[2]] = elapsed
        intervals.append([float(m[1]), m[2], elapsed, length, float(m[4]), float(m[5]),
                          int(m[6]), int(m[7]), *map(int, m[8].split(",")), float(m[9]),
                          *map(int, m[10].split(",")), float(m[11])])
    iv = pd.DataFrame(intervals, columns=INTERVAL_COLUMNS)
    iv = iv.astype({c: ("str" if c == "phase" else "float64" if c in (
        "time", "elapsed_s", "length_s", "ips", "qps", "insert_max_s", "query_max_s")
        else "int64") for c in INTERVAL_COLUMNS})
    mk = _markers_df(markers)
    return LoadOutput(iv, _phases(mk, iv, summary), _commands(summary), mk, summary, header)


def _phases(mk: pd.DataFrame, iv: pd.DataFrame, summary: dict | None) -> pd.DataFrame:
    by_name = {p["name"]: p for p in (summary or {}).get("phases", [])}
    rows = []
    for name in dict.fromkeys(mk.loc[mk["event"] == "start", "name"]):
        start = mk[(mk["name"] == name) & (mk["event"] == "start")]["time"].iloc[0]
        ends = mk[(mk["name"] == name) & (mk["event"] == "end")]["time"]
        end = float(ends.iloc[0]) if len(ends) else math.nan
        p = by_name.get(name)
        if p is not None:
            rows.append([name, start, end, p["seconds"], p["insert_threads"], p["query_threads"],
                         math.nan if p["rate"] is None else p["rate"], p["inserts"],
                         p["queries"], p["ips_avg"], p["qps_avg"], p["ips_p95"], p["qps_p95"],
                         p["insert_max_s"], p["query_max_s"], bool(p["interrupted"]),
                         math.nan if p.get("db_size_bytes") is None else p["db_size_bytes"]])
            continue
        sub = iv[iv["phase"] == name]
        ins, qry, rate = _spec_of(name)
        seconds = (end if not math.isnan(end) else
                   (sub["time"].iloc[-1] if len(sub) else start)) - start
        inserts = int(sub["inserts"].iloc[-1]) if len(sub) else 0
        queries = int(sub["queries"].iloc[-1]) if len(sub) else 0
        rows.append([name, start, end, seconds, ins, qry, rate, inserts, queries,
                     inserts / seconds if seconds > 0 else 0.0,
                     queries / seconds if seconds > 0 else 0.0,
                     math.nan, math.nan,   # printed in the summary only
                     float(sub["insert_max_s"].max()) if len(sub) else 0.0,
                     float(sub["query_max_s"].max()) if len(sub) else 0.0,
                     math.isnan(end), math.nan])
    df = pd.DataFrame(rows, columns=PHASE_COLUMNS)
    return df.astype({"name": str, "start": "float64", "end": "float64", "seconds": "float64",
                      "insert_threads": "int64", "query_threads": "int64", "rate": "float64",
                      "inserts": "int64", "queries": "int64", "ips_avg": "float64",
                      "qps_avg": "float64", "ips_p95": "float64", "qps_p95": "float64",
                      "insert_max_s": "float64", "query_max_s": "float64",
                      "interrupted": bool, "db_size_bytes": "float64"})


def _commands(summary: dict | None) -> pd.DataFrame:
    rows = []
    if summary:
        for p in summary.get("phases", []):
            rows += [(p["name"], c, int(k)) for c, k in p.get("commands", {}).items()]
        for label in ("setup", "teardown", "other"):
            rows += [(label, c, int(k))
                     for c, k in summary.get("commands", {}).get(label, {}).items()]
    df = pd.DataFrame(rows, columns=COMMAND_COLUMNS)
    return df.astype({"phase": str, "command": str, "count": "int64"})


def parse(lines: Iterable[str], source: str = "<load>") -> pd.DataFrame:
    """The interval table (the ``mongoprobe parse mongoprobe_load FILE`` view)."""
    return parse_mongoprobe_load(lines, source).intervals
