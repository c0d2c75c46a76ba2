"""Load-tool adapters: what any load tool printed -> one model of phases, rates and
client latency.

Each adapter (one module per tool) reads a run's captured output -- the ``load.out``
table of ``formats/loadout.py`` (time, stream, text; both streams, in receive order)
-- and, when it recognises its tool, returns a :class:`ToolOutput` whose tables have
the same columns whatever the tool. The analysis (``mongoprobe.analysis.phase_table``) computes
throughput, interval p95 rates and per-operation costs from these tables only, once.

Adapters, tried in this order (``ADAPTERS``):

    mongoprobe-load  the built-in load (``### load`` header, interval lines, summary)
    ycsb             YCSB 0.17 status lines and summaries, and YCSB 0.1's
    iibench          the insert benchmark's iibench.py progress lines and histograms
    markers          any tool that prints ``### phase start|end name=NAME`` lines

``read_output(out, source)`` returns (ToolOutput or None, [(adapter, why it refused)]).
When none recognises the output, ``mongoprobe.analysis.traffic_phases`` finds the phases in the
server's own traffic instead.

THE TABLES (times are wall seconds since the epoch when the output carries receive
times, as a run's load.out does; a plain capture without them gives seconds since the
tool's own start, or its own clock)::

    phases    one row per phase, in order
        name      str      as the tool names it (YCSB: load, workloada; iibench;
                           the built-in load's 2i.1q)
        start     float64  its bounds
        end       float64
        tool      str      the adapter that read it
        label     str      what ran: the tool's command line when it prints one

    intervals one row per reporting interval and operation
        phase     str
        time      float64  the interval's end
        length_s  float64  its length, seconds
        op        str      the tool's operation name (READ, UPDATE, INSERT, insert,
                           query); ``*`` when the tool counts all operations together
        count     int64    operations of that kind completed in the interval (what
                           ``units`` says an operation is)
        rate      float64  the tool's own printed rate for it (iibench's i_ips, the
                           built-in load's ips), more precise than count / length_s
                           when the tool rounds its interval lengths; NaN when it
                           prints none (then the rate is count / length_s)
        full      bool     a full reporting interval: the ones interval p95 rates use
                           (a last, partial interval and gaps in pasted output are not)

    client    the tool's own client latency, one row per phase and operation
        phase, op  str
        count     float64  operations (NaN when the tool does not say)
        avg_us, p50_us, p95_us, p99_us, max_us   float64  NaN where the tool gives none
        how       str      summary (the tool's own end-of-run figures), bucket bound
                           (the upper bound of the histogram bucket the percentile is
                           in), status lines (weighted from per-interval figures)

    totals    the tool's own totals, for cross-checks
        phase, op  str     op ``*``: all operations
        operations float64
        seconds    float64 the tool's own run time (NaN when it prints none)
        ops_per_s  float64 its own throughput figure (NaN when it prints none)

    phase_info  per-phase facts some tools give: phase str, db_size_bytes float64

``units``: {op: what one counted operation is} -- "documents" for inserts the tool
counts per document (iibench, the built-in load: batched inserts); an operation not
named there is one request.
``notes``: lines the report shows (how times were anchored, what is missing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from mongoprobe.model.phase import phases_from

PHASE_COLUMNS = {"name": "str", "start": "float64", "end": "float64", "tool": "str",
                 "label": "str"}
INTERVAL_COLUMNS = {"phase": "str", "time": "float64", "length_s": "float64", "op": "str",
                    "count": "int64", "rate": "float64", "full": "bool"}
CLIENT_COLUMNS = {"phase": "str", "op": "str", "count": "float64", "avg_us": "float64",
                  "p50_us": "float64", "p95_us": "float64", "p99_us": "float64",
                  "max_us": "float64", "how": "str"}
TOTAL_COLUMNS = {"phase": "str", "op": "str", "operations": "float64", "seconds": "float64",
                 "ops_per_s": "float64"}
PHASE_INFO_COLUMNS = {"phase": "str", "db_size_bytes": "float64"}

ALL = "*"

# A tool's operation -> (its role in ips/qps, the server command that carries it). One
# definition: the phase table's ips/qps columns and the client-vs-server rows use it.
OPS: dict[str, tuple[str | None, str | None]] = {
    "INSERT": ("insert", "insert"), "READ": ("query", "find"), "SCAN": ("query", "find"),
    "UPDATE": (None, "update"), "DELETE": (None, "delete"),
    "READ-MODIFY-WRITE": (None, None),           # a find then an update: no one command
    "insert": ("insert", "insert"), "query": ("query", "find"),
}
# Counted by a tool but not operations on the server: YCSB's per-thread cleanup.
NOT_OPERATIONS = frozenset({"CLEANUP"})


def op_role(op: str) -> tuple[str | None, str | None]:
    """(ips|qps role, server command) of a tool's operation; YCSB's READ-FAILED etc.
    are the operation that failed."""
    return OPS.get(op.removesuffix("-FAILED"), (None, None))


def frame(rows: list, columns: dict[str, str]) -> pd.DataFrame:
    """A typed table of this module's columns from a list of row lists or dicts."""
    df = pd.DataFrame(rows, columns=list(columns)) if rows else pd.DataFrame(
        {c: pd.Series(dtype=t) for c, t in columns.items()})
    return df.astype(columns)


@dataclass
class ToolOutput:
    tool: str
    phases: pd.DataFrame
    intervals: pd.DataFrame = field(default_factory=lambda: frame([], INTERVAL_COLUMNS))
    client: pd.DataFrame = field(default_factory=lambda: frame([], CLIENT_COLUMNS))
    totals: pd.DataFrame = field(default_factory=lambda: frame([], TOTAL_COLUMNS))
    phase_info: pd.DataFrame = field(default_factory=lambda: frame([], PHASE_INFO_COLUMNS))
    units: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    version: str = ""

    def with_phases(self, phases: pd.DataFrame) -> "ToolOutput":
        """The same output cut into other phases (``--phases`` overrides): intervals
        move to the phase their end falls in; the per-phase client figures, totals and
        facts of the tool's own phases no longer apply and are left out."""
        iv = self.intervals.copy()
        # each phase's intervals found by their end in time order (a comparison's
        # blocks are thousands of phases); where phases overlap, the later one's
        t = iv["time"].to_numpy(dtype=float)
        order = np.argsort(t, kind="stable")
        ends = t[order]
        name = np.full(len(iv), "", dtype=object)
        for p in phases_from(phases):
            if not p.end > p.start:     # (not ended, or empty: holds none)
                continue
            # (an interval ends in (start, end])
            name[order[np.searchsorted(ends, p.start, "right"):
                       np.searchsorted(ends, p.end, "right")]] = p.name
        iv["phase"] = pd.Series(name, index=iv.index, dtype=iv["phase"].dtype)
        iv = iv[iv["phase"] != ""].reset_index(drop=True)
        ph = phases.copy()
        ph["tool"], ph["label"] = self.tool, "--phases"
        return ToolOutput(self.tool, frame(ph[list(PHASE_COLUMNS)].values.tolist(),
                                           PHASE_COLUMNS), iv,
                          units=dict(self.units), notes=[*self.notes, (
                              "phases given by --phases: the tool's own per-phase latency "
                              "and totals are left out")], version=self.version)


def hist_percentiles(hi_us, counts, max_us: float = math.nan) -> dict[str, float]:
    """{count, p50_us, p95_us, p99_us, max_us} of a printed response-time histogram:
    each percentile is the upper bound of the bucket it falls in (at most the max)."""
    counts = np.asarray(counts, dtype=float)
    hi = np.asarray(hi_us, dtype=float)
    n = float(counts.sum())
    out = {"count": n, "max_us": float(max_us)}
    cum = np.cumsum(counts)
    for k, q in (("p50_us", 0.50), ("p95_us", 0.95), ("p99_us", 0.99)):
        if not n:
            out[k] = math.nan
            continue
        bound = float(hi[int(np.searchsorted(cum, q * n))])
        out[k] = min(bound, max_us) if not math.isnan(max_us) else bound
    return out


def number_repeats(names: list[str]) -> list[str]:
    """Names made unique as the built-in load does: the second ``x`` is ``x-2``."""
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n}-{seen[n]}")
    return out


def read_output(out: pd.DataFrame, source: str = "load.out",
                ) -> tuple[ToolOutput | None, list[tuple[str, str]]]:
    """The first adapter's reading of ``out`` (a load.out table), and why each adapter
    before it refused. A recognised output that is damaged raises ``FormatError``."""
    from . import builtin, iibench, markers, ycsb

    tried = []
    for mod in (builtin, ycsb, iibench, markers):
        why = mod.refuses(out)
        if why is None:
            return mod.read(out, source), tried
        tried.append((mod.NAME, why))
    return None, tried


ADAPTERS = ("mongoprobe-load", "ycsb", "iibench", "markers")
