"""``probes/flush.bt`` output -> flush calls, latency histograms, threads, files, stacks.

What it parses: what ``flush.bt PID`` prints at its end, either as bpftrace's JSON
lines (``bpftrace -f json probes/flush.bt PID``, what ``mongoprobe flush`` runs) or
as bpftrace's text (``bpftrace probes/flush.bt PID``, what ``mongoprobe record``
stores as ``flush.bt.txt``). The maps are described in the probe's header. Real
example: ``samples/profile/ferretdb-flush.bt.txt`` (text) and
``samples/profile/ferretdb-flush.bt.json`` (JSON), FerretDB v1.24.0 under
``mongoprobe.load.mixed_workload``. Text input, trimmed::

    @flush_ns[fsync]:
    [32K, 64K)            13 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@                        |
    @flush_stacks[fsync,
        internal/runtime/syscall/linux.Syscall6+14
        modernc.org/libc.Xfsync+46
    ]: 19
    @flush_stats[fsync]: count 60, average 2093202, total 125592124

``parse_flush(text_or_lines)`` returns a :class:`FlushResult` of DataFrames:

    calls    syscall str, count int64 (completed calls), total_ns int64, avg_ns int64,
             errors int64, bytes int64 (msync len / sync_file_range nbytes summed;
             0 for the syscalls without a length)
    hist     {syscall: histogram DataFrame (lo, hi, count)} of latency in ns
    threads  tid int64, comm str, syscall str, count int64
    fds      syscall str, fd int64 (-1 for msync), count int64
    msync    addr int64, len int64, flags int64, count int64
    stacks   syscall str, frames tuple[str] (leaf first, as printed), count int64

bpftrace 0.17 keys a user stack with the thread that took it, so one stack called
from several threads prints as several entries with the same text (in JSON: the
same key several times in one object); they are summed here into one row. Read
from bpftrace 0.17, 0.23 and 0.27: in JSON, 0.23 escapes the newlines of a stack
key twice and 0.27 prints its frames unindented; 0.27's text has no blank line
between maps.

``is_flush_output(text)`` is the cheap "is this mine?" check. Damaged input raises
:class:`FormatError` naming the source and line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

import pandas as pd

from mongoprobe.model import log2_histogram as histogram
from . import bpftrace_json
from .bpftrace_json import unescape_key
from .errors import FormatError

SYSCALLS = ("msync", "fsync", "fdatasync", "sync_file_range", "syncfs")


@dataclass
class FlushResult:
    calls: pd.DataFrame
    hist: dict[str, pd.DataFrame] = field(default_factory=dict)
    threads: pd.DataFrame = None
    fds: pd.DataFrame = None
    msync: pd.DataFrame = None
    stacks: pd.DataFrame = None

    def to_json(self) -> dict:
        """``{"flushes": {NAME: {"count", "avg_ns", "total_ns", "errors", "bytes",
        "p50_ns", "p99_ns", "max_ns", "hist"}}, "threads": [...], "fds": [...],
        "msync_ranges": [...], "stacks": [{"syscall", "count", "frames"}]}``.

        ``p50_ns``/``p99_ns`` are estimated from the log2 buckets and ``max_ns`` is the
        upper bound of the highest one (``histogram.summary``); ``avg_ns`` and
        ``total_ns`` are exact."""
        out: dict = {"flushes": {}}
        for r in self.calls.itertuples(index=False):
            h = self.hist.get(r.syscall, histogram.empty())
            s = histogram.summary(h, exact_sum=int(r.total_ns)) if histogram.total(h) else {}
            out["flushes"][r.syscall] = {
                "count": int(r.count), "avg_ns": int(r.avg_ns), "total_ns": int(r.total_ns),
                "errors": int(r.errors), "bytes": int(r.bytes),
                "p50_ns": _int(s.get("p50_ns")), "p99_ns": _int(s.get("p99_ns")),
                "max_ns": _int(s.get("max_ns")), "hist": histogram.to_json_buckets(h)}
        out["threads"] = _records(self.threads)
        out["fds"] = _records(self.fds)
        out["msync_ranges"] = _records(self.msync)
        out["stacks"] = [{"syscall": r.syscall, "count": int(r.count), "frames": list(r.frames)}
                         for r in self.stacks.itertuples(index=False)]
        return out


def _int(v) -> int | None:
    return None if v is None else int(round(v))


def _records(df: pd.DataFrame) -> list[dict]:
    """Rows as plain Python values (numpy integers are not JSON)."""
    return [{k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}
            for row in df.to_dict("records")]


# --- the two input forms -> one set of raw maps -----------------------------------------

class _Maps:
    """Raw map contents: name -> {key tuple: value}; hists as bucket lists."""

    def __init__(self) -> None:
        self.counts: dict[str, dict[tuple, int]] = {}
        self.stats: dict[str, dict] = {}
        self.hists: dict[str, list[tuple[int, int, int]]] = {}
        self.stacks: dict[tuple[str, tuple[str, ...]], int] = {}
        self.seen = False


def _split_key(map_name: str, key: str) -> tuple:
    """A joined key (bpftrace joins with "," in JSON, ", " in text) -> fields."""
    if map_name == "flush_by_thread":          # tid, comm (may hold commas), syscall
        tid, rest = key.split(",", 1)
        comm, name = rest.rsplit(",", 1)
        return int(tid), comm.strip(), name.strip()
    if map_name == "flush_by_fd":
        name, fd = key.rsplit(",", 1)
        return name.strip(), int(fd)
    if map_name == "msync_by_addr":
        return tuple(int(x) for x in key.split(","))
    return (key.strip(),)


def _from_json(lines: Iterable[str], source: str) -> _Maps:
    m = _Maps()

    def hist(name: str, value, rec) -> None:
        m.seen = True
        try:
            for k, buckets in value.items():
                m.hists[k] = [(int(b["min"]), int(b["max"]) + 1, int(b["count"]))
                              for b in buckets]
        except (ValueError, KeyError, TypeError, AttributeError):
            raise rec.error(f"a flush.bt map {name}") from None

    def stats(name: str, value, rec) -> None:
        m.seen = True
        try:
            m.stats.update(value)
        except (ValueError, TypeError):
            raise rec.error(f"a flush.bt map {name}") from None

    def flush_stacks(name: str, value, rec) -> None:
        m.seen = True
        try:
            for k, c in value.items():
                # 0.23 escapes the key's newlines twice; 0.27 leaves frames unindented
                sys_name, _, stack = unescape_key(k).partition(",")
                frames = tuple(f.strip() for f in stack.split("\n") if f.strip())
                k = (sys_name, frames)
                m.stacks[k] = m.stacks.get(k, 0) + int(c)
        except (ValueError, TypeError, AttributeError):
            raise rec.error(f"a flush.bt map {name}") from None

    def counts(name: str, value, rec) -> None:
        m.seen = True
        name = name.lstrip("@")
        try:
            m.counts.setdefault(name, {}).update(
                {_split_key(name, k): int(c) for k, c in value.items()})
        except (ValueError, KeyError, TypeError, AttributeError):
            raise rec.error(f"a flush.bt map @{name}") from None

    # a stack key repeats once per thread that flushed from it: every one counts
    bpftrace_json.read_all(lines, source, {"hist": hist, "stats": stats, "map": counts,
                                           "@flush_stacks": flush_stacks},
                           repeated_keys=True)
    return m


_T_SCALAR = re.compile(r"^@(\w+)\[(.*)\]: (-?\d+)$")
# stats(): "count N, average N, total N" up to bpftrace 0.23, "{ .count = N, .average = N,
# .total = N }" in 0.27
_T_STATS = re.compile(r"^@flush_stats\[(\w+)\]: (?:count (\d+), average (\d+), total (\d+)"
                      r"|\{ \.count = (\d+), \.average = (\d+), \.total = (\d+) \})$")
_T_HIST = re.compile(r"^@flush_ns\[(\w+)\]:\s*$")
_T_STACK = re.compile(r"^@flush_stacks\[(\w+),\s*$")
_T_STACK_END = re.compile(r"^\]: (\d+)$")


def _from_text(lines: list[str], source: str) -> _Maps:
    from . import quantize

    m = _Maps()
    text = "\n".join(lines)
    if quantize.is_quantize(text):
        q = quantize.parse_quantize(text, source)
        for key, g in q[q["name"] == "flush_ns"].groupby("key", sort=False):
            m.hists[str(key)] = list(zip(g["lo"].tolist(), g["hi"].tolist(), g["count"].tolist()))
            m.seen = True
    i = 0
    while i < len(lines):
        line = lines[i].rstrip("\n")
        i += 1
        if _T_HIST.match(line):      # read above by the quantize parser
            continue
        ms = _T_STACK.match(line)
        if ms:
            start, frames = i, []
            while i < len(lines):
                end = _T_STACK_END.match(lines[i].strip())
                i += 1
                if end:
                    k = (ms[1], tuple(frames))
                    m.stacks[k] = m.stacks.get(k, 0) + int(end[1])
                    break
                if lines[i - 1].strip():     # DTrace's %k may add blank lines
                    frames.append(lines[i - 1].strip())
            else:
                raise FormatError(source, start, "the end of a @flush_stacks entry (]: N)")
            m.seen = True
            continue
        st = _T_STATS.match(line)
        if st:
            c, a, t = (st[2], st[3], st[4]) if st[2] is not None else (st[5], st[6], st[7])
            m.stats[st[1]] = {"count": int(c), "average": int(a), "total": int(t)}
            m.seen = True
            continue
        sc = _T_SCALAR.match(line)
        if sc and sc[1] == "flush_stacks":          # an empty stack: "@flush_stacks[fsync, ]: 3"
            k = (sc[2].rstrip(", "), ())
            m.stacks[k] = m.stacks.get(k, 0) + int(sc[3])
            m.seen = True
        elif sc and sc[1] in ("flush_by_thread", "flush_by_fd", "flush_bytes", "flush_errors",
                            "msync_by_addr"):
            try:
                m.counts.setdefault(sc[1], {})[_split_key(sc[1], sc[2])] = int(sc[3])
            except ValueError:
                raise FormatError(source, i, f"a flush.bt map @{sc[1]}", line)
            m.seen = True
        elif line.startswith("@flush") or line.startswith("@msync"):
            raise FormatError(source, i, "a flush.bt map line", line)
    return m


# --- raw maps -> DataFrames ---------------------------------------------------------------

def _build(m: _Maps) -> FlushResult:
    names = sorted(set(m.stats) | set(m.hists) | {k[0] for k in m.counts.get("flush_bytes", {})}
                   | {s for s, _ in m.stacks}, key=lambda s: (SYSCALLS + (s,)).index(s))
    errors = {k[0]: v for k, v in m.counts.get("flush_errors", {}).items()}
    nbytes = {k[0]: v for k, v in m.counts.get("flush_bytes", {}).items()}
    rows = []
    for s in names:
        st = m.stats.get(s, {"count": 0, "average": 0, "total": 0})
        rows.append((s, int(st["count"]), int(st["total"]), int(st["average"]),
                     int(errors.get(s, 0)), int(nbytes.get(s, 0))))
    calls = pd.DataFrame(rows, columns=["syscall", "count", "total_ns", "avg_ns", "errors",
                                        "bytes"])
    calls = calls.astype({c: "int64" for c in calls.columns if c != "syscall"})
    hist = {s: histogram.from_buckets(b) for s, b in m.hists.items()}

    def frame(name: str, cols: list[str]) -> pd.DataFrame:
        data = [(*k, v) for k, v in m.counts.get(name, {}).items()]
        df = pd.DataFrame(data, columns=cols)
        df = df.astype({c: "int64" for c in cols if c not in ("comm", "syscall")})
        return df.sort_values("count", ascending=False, kind="stable").reset_index(drop=True)

    stacks = pd.DataFrame([(s, f, c) for (s, f), c in m.stacks.items()],
                          columns=["syscall", "frames", "count"])
    stacks = stacks.astype({"count": "int64"}).sort_values(
        "count", ascending=False, kind="stable").reset_index(drop=True)
    return FlushResult(
        calls=calls, hist=hist,
        threads=frame("flush_by_thread", ["tid", "comm", "syscall", "count"]),
        fds=frame("flush_by_fd", ["syscall", "fd", "count"]),
        msync=frame("msync_by_addr", ["addr", "len", "flags", "count"]),
        stacks=stacks)


def is_flush_output(text: str) -> bool:
    return "@flush_" in text[:1_000_000] or "Tracing flushes of PID" in text[:4096]


def parse_flush(text_or_lines: str | Iterable[str], source: str = "<flush.bt>") -> FlushResult:
    """flush.bt output (JSON lines or text) -> :class:`FlushResult`.

    No flush at all is a valid result (every frame empty): a server that did not
    flush during the trace. Input that is neither form raises FormatError.
    """
    lines = (text_or_lines.splitlines() if isinstance(text_or_lines, str)
             else list(text_or_lines))
    first = next((ln for ln in lines if ln.strip()), "")
    if first.lstrip().startswith("{"):
        m = _from_json(lines, source)
    else:
        m = _from_text(lines, source)
        if not m.seen and not any("Tracing flushes of PID" in ln for ln in lines):
            raise FormatError(source, 1, "flush.bt output (its banner or @flush_ maps)", first)
    return _build(m)
