"""Server-side latency, in one representation whatever measured it.

Every source -- the probes' per-second log-linear histograms (``formats/wire_slices``,
``formats/bpftrace_latency``), their per-request events (``formats/wire_events``), a
capture's request/reply pairs -- becomes the same tables, and every view reads those:
the live ``latency`` command, ``record``'s run, phases, the report, notebooks.

``hist`` (one row per interval, command, opcode and bucket)::

    time      float64  wall-clock start of the interval, epoch seconds
    length_s  float64  the interval's length (seconds)
    command   str      command name as on the wire
    opcode    str      OP_MSG, OP_QUERY, ...
    bucket    int64    log-linear latency bucket (``mongoprobe.model.loglinear_buckets``)
    count     int64    requests answered in the interval with a latency in the bucket

``totals`` (one row per interval, command and opcode): ``time``, ``length_s``,
``command``, ``opcode`` as above; ``count`` int64 requests answered, ``sum_ns`` int64
their summed latency (so averages are exact), ``max_ns`` int64 the slowest, ``noreply``
int64 complete requests that expected no reply (moreToCome, legacy writes), ``errors``
int64 of the answered ones, those whose reply failed (``ok: 0``; the probes read it from
OP_MSG replies: ``probes/README.md``).

``errors`` (one row per interval, command, opcode and error code of failed replies):
``time``, ``length_s``, ``command``, ``opcode``, ``code`` int64 (-1: none readable;
names in ``mongoprobe.wire.error_codes``), ``count`` int64. Empty when nothing failed.

``conn_hist`` and ``conn_totals``: the same per connection (``fd`` int64 instead of
``command`` and ``opcode``) when the probe was asked for them, else empty.

``counters`` (one row per interval, the probe's counters when it ended, cumulative):
``time``, ``requests``, ``replies``, ``stream_replies``, ``no_reply``,
``unmatched_replies``, ``requests_without_reply``, ``malformed``, ``dropped`` (int64);
a window's losses are differences. Empty when the source has none (a capture).

``source`` keeps the per-request rows when they were recorded
(``mongoprobe.model.event_store``: a DataFrame in memory, or a run's Parquet file read in
batches, so an hour at 50k requests/s is analysed without holding it): counts, rates
and percentiles over a window are then exact (nearest rank); from ``hist`` alone the
percentiles are within 1.6% (``loglinear.MAX_ERROR``) and a window [start, end) takes
the whole intervals inside it (a histogram cannot be cut inside an interval, and an
edge second holds the traffic of the phase before or after; a window with no whole
interval inside takes the one it overlaps most).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import TypedDict

import numpy as np
import pandas as pd

from mongoprobe.model import event_store, loglinear_buckets as loglinear
from mongoprobe.model.clock import Clock
from mongoprobe.wire import facts as wirefacts
from mongoprobe.formats.wire_slices import COUNT_KEYS, LOST_KEYS

HIST_COLUMNS = {"time": "float64", "length_s": "float64", "command": str, "opcode": str,
                "bucket": "int64", "count": "int64"}
TOTAL_COLUMNS = {"time": "float64", "length_s": "float64", "command": str, "opcode": str,
                 "count": "int64", "sum_ns": "int64", "max_ns": "int64", "noreply": "int64",
                 "errors": "int64"}
ERROR_COLUMNS = {"time": "float64", "length_s": "float64", "command": str, "opcode": str,
                 "code": "int64", "count": "int64"}
CONN_HIST_COLUMNS = {"time": "float64", "length_s": "float64", "fd": "int64",
                     "bucket": "int64", "count": "int64"}
CONN_TOTAL_COLUMNS = {"time": "float64", "length_s": "float64", "fd": "int64",
                      "count": "int64", "sum_ns": "int64", "max_ns": "int64",
                      "noreply": "int64"}
COUNTER_COLUMNS = {"time": "float64", **{k: "int64" for k in (*COUNT_KEYS, *LOST_KEYS)}}
STATS = ("count", "avg", "p50", "p95", "p99", "max")


class CommandStats(TypedDict):
    """One command's figures over a window (:meth:`Latencies.stats`), in nanoseconds.
    ``count`` is the requests answered (timed); ``no_reply`` those that asked for no
    reply (moreToCome, legacy writes), counted but never timed. A command with no
    answered request has None for every latency figure: there is none to give."""
    count: int
    no_reply: int
    avg: float | None
    p50: float | None
    p95: float | None
    p99: float | None
    max: float | None


def nearest_rank(sorted_values: np.ndarray, q: float) -> float:
    """The nearest-rank ``q`` percentile of sorted values: the ceil(q/100 n)-th smallest
    (the definition the histograms' bound is stated for)."""
    return float(sorted_values[event_store.rank(q, len(sorted_values)) - 1])


@dataclass
class Latencies:
    hist: pd.DataFrame
    totals: pd.DataFrame
    # the per-request events (an EventSource; a wire_events DataFrame becomes one)
    source: event_store.EventSource | pd.DataFrame | None = None
    conn_hist: pd.DataFrame = field(default_factory=lambda: _empty(CONN_HIST_COLUMNS))
    conn_totals: pd.DataFrame = field(default_factory=lambda: _empty(CONN_TOTAL_COLUMNS))
    counters: pd.DataFrame = field(default_factory=lambda: _empty(COUNTER_COLUMNS))
    # the whole source's counters at its end (requests still waiting counted as lost)
    counts: dict = field(default_factory=lambda: dict.fromkeys(COUNT_KEYS, 0))
    lost: dict = field(default_factory=lambda: dict.fromkeys(LOST_KEYS, 0))
    # False when events are a sample (1 in N): then counts and percentiles come from
    # the histograms, not the events
    events_complete: bool = True
    errors: pd.DataFrame = field(default_factory=lambda: _empty(ERROR_COLUMNS))
    # what the probe saw but could not decode: {"mmsg_calls", "io_uring_calls",
    # "io_uring_fds"} (``latency.untraced_line``); empty when the source does not say
    untraced: dict = field(default_factory=dict)
    # what TLS hooks decoded (bcc): {"hooked": [library...], "connections", "calls"};
    # None when no TLS hook ran
    tls: dict | None = None
    # {command: replies} the server sent anyway to requests that asked for none
    # (moreToCome), over the whole source: not losses (``counts["answered_no_reply"]``)
    answered_no_reply: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.source, pd.DataFrame):
            self.source = event_store.FrameEvents(self.source)
        # the histograms' figures of windows prepared at once (``prepare``), and the
        # tables in time order (``_by_time``), computed once
        self._windows: dict[tuple[float, float], _HistWindow] = {}
        self._ordered: dict[int, tuple[pd.DataFrame, pd.DataFrame, np.ndarray]] = {}
        self._answered: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._failed: pd.DataFrame | None = None
        self._failed_read = False
        self._origin: tuple[pd.DataFrame, float] | None = None

    @property
    def events(self) -> pd.DataFrame | None:
        """Every kept event as one wire_events DataFrame, None when none were kept;
        ``event_store.TooManyEvents`` (a LookupError) when they are too many to hold in
        memory (the figures of this class read ``source`` in batches instead)."""
        return None if self.source is None else self.source.frame()

    @classmethod
    def from_slices(cls, slices, clock: Clock | int,
                    events: pd.DataFrame | event_store.EventSource | None = None,
                    counts: dict | None = None, lost: dict | None = None,
                    events_complete: bool = True,
                    answered_no_reply: dict | None = None) -> "Latencies":
        """The probes' slices (``formats.wire_slices.Slice``, CLOCK_MONOTONIC) on the wall
        clock (``clock``: a ``model.clock.Clock`` or its offset_ns); ``events`` a
        wire_events table or an ``event_store.EventSource``; ``answered_no_reply`` the
        probe's final {command: replies to requests that asked for none}."""
        clock = Clock.of(clock)
        tot, hists, ctot, chists, ctr, err = [], [], [], [], [], []
        # (in time order: a probe may give a second late, see bpftrace_latency)
        for s in sorted(slices, key=lambda s: s.start_ns):
            t, length = clock.wall_s(s.start_ns), s.length_ns / 1e9
            for (cmd, op), a in s.rows.items():
                tot.append((t, length, cmd, op, a.count, a.sum_ns, a.max_ns, a.noreply,
                            a.errors))
                hists.append(a.hist)
                err.extend((t, length, cmd, op, c, n) for c, n in a.codes.items())
            for fd, a in s.conn_rows.items():
                ctot.append((t, length, fd, a.count, a.sum_ns, a.max_ns, a.noreply))
                chists.append(a.hist)
            # (a counter an older probe did not have is 0)
            ctr.append((t + length, *(s.counts.get(k, 0) for k in COUNT_KEYS),
                        *(s.lost[k] for k in LOST_KEYS)))
        last = slices[-1] if slices else None
        counts = {**dict.fromkeys(COUNT_KEYS, 0),
                  **(counts or (last.counts if last else {}))}
        return cls(_hist_rows(tot, hists, HIST_COLUMNS), _rows(tot, TOTAL_COLUMNS), events,
                   _hist_rows(ctot, chists, CONN_HIST_COLUMNS), _rows(ctot, CONN_TOTAL_COLUMNS),
                   _rows(ctr, COUNTER_COLUMNS), counts,
                   dict(lost or (last.lost if last else dict.fromkeys(LOST_KEYS, 0))),
                   events_complete, _rows(err, ERROR_COLUMNS),
                   answered_no_reply=dict(answered_no_reply or {}))

    @classmethod
    def from_events(cls, events: pd.DataFrame, interval_s: float = 1.0) -> "Latencies":
        """The tables of per-request events (``time``, ``latency_ns``, ``command``,
        ``opcode``; with ``fd``, the per-connection tables too), in intervals of
        ``interval_s`` aligned to the epoch; the events are kept for exact figures."""
        ev = events[events["time"].notna()]
        t = np.floor(ev["time"].to_numpy(dtype=float) / interval_s) * interval_s
        ns = ev["latency_ns"].to_numpy(dtype=np.int64)
        code = (ev["error_code"].to_numpy(dtype=np.int64) if "error_code" in ev.columns
                else np.zeros(len(ev), dtype=np.int64))
        df = pd.DataFrame({"time": t, "command": ev["command"].to_numpy(),
                           "opcode": ev["opcode"].to_numpy(), "bucket": loglinear.index(ns),
                           "ns": ns, "failed": code != 0, "code": code})
        if "fd" in ev.columns:
            df["fd"] = ev["fd"].to_numpy(dtype=np.int64)

        def tables(keys: list[str], hcols: dict, tcols: dict):
            hist = (df.groupby(keys + ["bucket"], sort=True).size().rename("count")
                    .reset_index().assign(length_s=interval_s))
            tot = (df.groupby(keys, sort=True).agg(count=("ns", "size"), sum_ns=("ns", "sum"),
                                                   max_ns=("ns", "max"),
                                                   errors=("failed", "sum"))
                   .reset_index().assign(length_s=interval_s, noreply=0))
            return _typed(hist, hcols), _typed(tot, tcols)

        keys = ["time", "command", "opcode"]
        hist, tot = tables(keys, HIST_COLUMNS, TOTAL_COLUMNS)
        chist, ctot = (tables(["time", "fd"], CONN_HIST_COLUMNS, CONN_TOTAL_COLUMNS)
                       if "fd" in df.columns else
                       (_empty(CONN_HIST_COLUMNS), _empty(CONN_TOTAL_COLUMNS)))
        err = (df[df["failed"]].groupby(keys + ["code"], sort=True).size().rename("count")
               .reset_index().assign(length_s=interval_s))
        n = len(ev)
        return cls(hist, tot, events, chist, ctot,
                   counts={"requests": n, "replies": n, "stream_replies": 0, "no_reply": 0},
                   errors=_typed(err, ERROR_COLUMNS))

    @property
    def exact(self) -> bool:
        """Every request's event is here: figures come from the events, exactly."""
        return self.source is not None and self.events_complete

    def prepare(self, windows, edges=None, per_second: bool = False, binned=()) -> None:
        """The figures of ``windows`` [(start, end)] computed at once before they are
        asked for one by one: with every event, they and the counts at ``edges``
        (``answered``) and per second in two scans of the events
        (``event_store.EventSource.prepare``); from the histograms (all of the figures
        without events, the no-reply counts with them), every window's whole
        intervals (``_grid``) summed in one pass over the tables (a thousand one-second
        blocks of an hour's run cost one pass, not a thousand)."""
        if self.exact:
            # (binned: [(start, end, edges_ns)], event_store.EventSource.binned's)
            self.source.prepare(windows, edges, per_second, binned=binned)
        # (with events too: the no-reply requests are counted in the histograms only)
        todo = [(float(a), float(b)) for a, b in dict.fromkeys(windows)
                if (float(a), float(b)) not in self._windows]
        if todo:
            self._windows.update(zip(todo, _hist_windows(self, todo)))

    def losses(self, start: float, end: float, keys=LOST_KEYS) -> dict[str, int]:
        """The growth of the probe's counters ``keys`` (the loss counters) over the
        window's seconds: the counters as they stood when the window's last second was
        handed over, less when the second before it was."""
        c = self.counters
        if c.empty:
            return {}
        lo, hi = self._grid(start, end)
        before = c[c["time"] <= lo + 1e-6]
        upto = c[c["time"] <= hi + 1e-6]
        if not len(upto):
            return dict.fromkeys(keys, 0)
        top = upto.iloc[-1]
        base = before.iloc[-1] if len(before) else None
        return {k: int(top[k]) - (int(base[k]) if base is not None else 0) for k in keys}

    # --- windows ----------------------------------------------------------------------

    def _grid(self, start: float, end: float) -> tuple[float, float]:
        """[lo, hi): the whole intervals (seconds) of the histograms inside [start, end),
        so that a window never takes in an edge second shared with the traffic before or
        after it; a window with no whole interval inside takes the one it overlaps most.
        Intervals are 1 s long, on one grid (the probe's seconds)."""
        g = self._grid_origin()
        lo, hi = g + math.ceil(start - g - 1e-9), g + math.floor(end - g + 1e-9)
        if hi - lo < 1 and end > start:
            # no whole second inside: the one the window overlaps most
            a = g + math.floor(start - g)
            lo = a if (a + 1 - start) >= (end - (a + 1)) else a + 1
            hi = lo + 1
        return lo, max(hi, lo)

    def _grid_origin(self) -> float:
        """Where the probe's seconds start within a second (its first interval's)."""
        t = self.totals if len(self.totals) else self.hist
        if self._origin is None or self._origin[0] is not t:
            self._origin = (t, float(t["time"].iloc[0]) % 1.0 if len(t) else 0.0)
        return self._origin[1]

    def _inside(self, df: pd.DataFrame, start: float, end: float) -> pd.DataFrame:
        """The rows of ``df`` (a table of intervals) whose interval is inside the
        window's whole intervals (``_grid``), found by their start in time order."""
        lo, hi = self._grid(start, end)
        part = self._rows_between(df, lo, hi)
        return part[part["time"] + part["length_s"] <= hi + 1e-6]

    def _by_time(self, df: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
        """(``df`` in time order, its times): sorted once (stable) and kept, as long as
        the table is the one sorted."""
        key = id(df)
        got = self._ordered.get(key)
        if got is None or got[0] is not df:
            t = df["time"].to_numpy(dtype=float)
            srt = df if bool(np.all(t[1:] >= t[:-1])) else df.sort_values("time", kind="stable")
            got = self._ordered[key] = (df, srt, srt["time"].to_numpy(dtype=float))
        return got[1], got[2]

    def _rows_between(self, df: pd.DataFrame, lo: float, hi: float) -> pd.DataFrame:
        """The rows of ``df`` starting in [lo, hi] (within a microsecond's rounding)."""
        srt, t = self._by_time(df)
        return srt.iloc[np.searchsorted(t, lo - 1e-6, "left"):
                        np.searchsorted(t, hi + 1e-6, "right")]

    def seconds(self, start: float, end: float) -> float:
        """How long the window is, as its histograms cover it (all of it with events)."""
        if self.exact:
            return max(end - start, 0.0)
        lo, hi = self._grid(start, end)
        return hi - lo

    def _window(self, start: float, end: float) -> "_HistWindow":
        """The histograms' figures of [start, end): prepared, or computed now (by the
        same rule: ``_hist_windows``)."""
        key = (float(start), float(end))
        w = self._windows.get(key)
        return w if w is not None else _hist_windows(self, [key])[0]

    def stats(self, start: float, end: float) -> dict[str, CommandStats]:
        """{command: CommandStats} of the requests of [start, end): those answered in
        it, and those that asked for no reply (from the whole intervals inside the
        window: events are of answered requests only). A command may have no_reply
        requests and no answered one: its latency figures are None."""
        w = self._window(start, end)
        if not self.exact:
            return w.stats()
        out = {c: {**d, "no_reply": 0} for c, d in self.source.window(start, end).stats().items()}
        return w.add_no_reply(out)

    def failures(self, start: float | None = None, end: float | None = None
                 ) -> dict[str, dict[int, int]]:
        """{command: {error code: replies}} of the replies with ``ok: 0`` in [start, end)
        (all of them when both are None); exact from events, else from the intervals
        inside the window. Commands with no failure are left out."""
        failed = self._failed_events() if self.exact else None
        if failed is not None and not len(failed):
            return {}
        if failed is not None:
            t = failed["time"].to_numpy(dtype=float)
            if start is not None:
                failed = failed.iloc[np.searchsorted(t, start, "left"):
                                     np.searchsorted(t, end, "left")]
            rows = failed.groupby(["command", "error_code"]).size().items()
        elif start is not None:
            return self._window(start, end).failed()
        else:
            rows = self.errors.groupby(["command", "code"])["count"].sum().items()
        out: dict[str, dict[int, int]] = {}
        for (cmd, code), n in rows:
            if n:
                out.setdefault(str(cmd), {})[int(code)] = int(n)
        return out

    def _failed_events(self) -> pd.DataFrame | None:
        """The events of failed replies in time order (kept), None when the events do
        not say or are too many to hold (an hour's: the probe's per-second counts of
        failed replies, whole seconds inside the window, serve instead)."""
        if not self._failed_read:
            try:
                ev = self.events
            except event_store.TooManyEvents:
                ev = None
            self._failed = (None if ev is None or "error_code" not in ev.columns else
                            ev[ev["error_code"] != 0].sort_values("time", kind="stable"))
            self._failed_read = True
        return self._failed

    def histogram(self, command: str, start: float, end: float) -> dict[int, int]:
        """{bucket: requests} of ``command`` answered in [start, end) (exact with
        events; from the histograms, the whole intervals inside: ``_grid``)."""
        if self.exact:
            return self.source.window(start, end, exact=False).histogram(command)
        return dict(self._window(start, end).hists.get(command, {}))

    def rates(self, start: float, end: float) -> dict[str, float]:
        """{command: requests/s} answered in [start, end)."""
        if not end > start:
            return {}
        if self.exact:
            return {c: n / (end - start) for c, n in
                    self.source.window(start, end, exact=False).counts().items()}
        secs = self.seconds(start, end)
        return ({c: float(t[0]) / secs for c, t in sorted(self._window(start, end).totals.items())}
                if secs > 0 else {})

    def per_second(self) -> pd.DataFrame:
        """(second, command, requests): requests answered per epoch second."""
        if self.exact:
            return self.source.per_second()[["second", "command", "requests"]]
        t = self.totals
        return (t.assign(second=interval_second(t)).groupby(["second", "command"], sort=True)["count"].sum()
                .rename("requests").reset_index())

    def answered(self, command: str, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Requests of ``command`` answered in each window (lo, hi] (arrays of epoch s);
        from the histograms, intervals are counted by their middle."""
        if self.exact:
            return self.source.answered(command, lo, hi)
        if command not in self._answered:
            tot = self.totals[self.totals["command"] == command]
            mid = (tot["time"] + tot["length_s"] / 2).to_numpy()
            order = np.argsort(mid, kind="stable")
            self._answered[command] = (
                mid[order], np.concatenate([[0], np.cumsum(tot["count"].to_numpy()[order])]))
        mid, cum = self._answered[command]
        return cum[np.searchsorted(mid, hi, side="right")] - cum[np.searchsorted(mid, lo,
                                                                                side="right")]


@dataclass
class _HistWindow:
    """One window's figures from the histograms (``Latencies.prepare``): ``totals``
    {command: (answered, their summed ns, the slowest's ns, no-reply requests)},
    ``hists`` {command: {bucket: answered}}."""
    totals: dict[str, tuple[int, int, int, int]]
    hists: dict[str, dict[int, int]]
    failures: dict[str, dict[int, int]] = field(default_factory=dict)
    _stats: dict | None = None

    def stats(self) -> dict[str, CommandStats]:
        """:meth:`Latencies.stats` of the window (the same figures, in the same order;
        computed once, a copy given)."""
        if self._stats is None:
            self._stats = self._compute()
        return {c: dict(d) for c, d in self._stats.items()}  # type: ignore[misc]

    def _compute(self) -> dict[str, CommandStats]:
        out: dict[str, CommandStats] = {}
        for cmd in sorted(c for c, t in self.totals.items() if t[0] > 0):
            n, sum_ns, max_ns, _nr = self.totals[cmd]
            # wirefacts.stats: bucket middles, capped by the exact max
            d = wirefacts.stats(wirefacts.hist_buckets(self.hists.get(cmd, {})), sum_ns,
                                max_ns)
            out[cmd] = {"count": d["count"], "no_reply": 0,
                        **{k: d[f"{k}_ns"] for k in STATS[1:]}}
        return self.add_no_reply(out)

    def add_no_reply(self, out: dict) -> dict:
        """``out`` {command: CommandStats} with the window's no-reply requests (a
        command with only those: every latency figure None)."""
        for cmd in sorted(self.totals):
            if self.totals[cmd][3]:
                d = out.setdefault(cmd, {"count": 0, "no_reply": 0,
                                         **dict.fromkeys(STATS[1:], None)})
                d["no_reply"] = self.totals[cmd][3]
        return out

    def failed(self) -> dict[str, dict[int, int]]:
        """:meth:`Latencies.failures` of the window: {command: {code: replies}}."""
        return {c: {k: f[k] for k in sorted(f)} for c, f in sorted(self.failures.items())}


def _hist_windows(lat: Latencies, windows: list[tuple[float, float]]) -> list[_HistWindow]:
    """Each window's whole intervals (``Latencies._grid``, as ``_inside`` takes them)
    summed per command from ``totals`` and per command and bucket from ``hist``, in one
    pass over each table (rows of a window found by their start in time order)."""
    grid = np.array([lat._grid(a, b) for a, b in windows], dtype=float).reshape(-1, 2)

    def rows_of(df: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
        """(the table in time order, its row numbers inside each window, the window's)."""
        srt, t = lat._by_time(df)
        i0 = np.searchsorted(t, grid[:, 0] - 1e-6, "left")
        n = np.maximum(np.searchsorted(t, grid[:, 1] + 1e-6, "right") - i0, 0)
        win = np.repeat(np.arange(len(grid)), n)
        rows = np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n) + np.repeat(i0, n)
        keep = t[rows] + srt["length_s"].to_numpy(dtype=float)[rows] <= grid[win, 1] + 1e-6
        return srt, rows[keep], win[keep]

    def groups(win: np.ndarray, cmd: np.ndarray, *more: np.ndarray):
        """(the order that sorts rows by window, command, more; the first row of each
        group in it)."""
        order = np.lexsort((*reversed(more), cmd, win))
        keys = np.stack([win, cmd, *more])[:, order]
        first = np.flatnonzero(np.r_[True, np.any(keys[:, 1:] != keys[:, :-1], axis=0)])
        return order, first[first < len(order)]

    out = [_HistWindow({}, {}) for _ in windows]
    tot, rows, win = rows_of(lat.totals)
    if len(rows):
        code, names = pd.factorize(tot["command"].to_numpy()[rows])
        order, first = groups(win, code)
        col = {k: tot[k].to_numpy(dtype=np.int64)[rows][order]
               for k in ("count", "sum_ns", "max_ns", "noreply")}
        timed = col["count"] > 0        # (as stats(): sum and max of answered rows)
        n = np.add.reduceat(col["count"], first)
        total = np.add.reduceat(np.where(timed, col["sum_ns"], 0), first)
        top = np.maximum.reduceat(np.where(timed, col["max_ns"], 0), first)
        nr = np.add.reduceat(col["noreply"], first)
        for i, w, c in zip(range(len(first)), win[order][first], code[order][first]):
            out[w].totals[str(names[c])] = (int(n[i]), int(total[i]), int(top[i]), int(nr[i]))
    hist, rows, win = rows_of(lat.hist)
    if len(rows):
        code, names = pd.factorize(hist["command"].to_numpy()[rows])
        bucket = hist["bucket"].to_numpy(dtype=np.int64)[rows]
        order, first = groups(win, code, bucket)
        counts = np.add.reduceat(hist["count"].to_numpy(dtype=np.int64)[rows][order], first)
        w_, c_, b_ = win[order][first], code[order][first], bucket[order][first]
        # one dict per (window, command): where either changes
        cut = np.flatnonzero(np.r_[True, (w_[1:] != w_[:-1]) | (c_[1:] != c_[:-1]), True])
        for a, b in zip(cut[:-1], cut[1:]):
            out[w_[a]].hists[str(names[c_[a]])] = dict(zip(b_[a:b].tolist(),
                                                          counts[a:b].tolist()))
    err, rows, win = rows_of(lat.errors)
    for w, cmd, code, n in zip(win, err["command"].to_numpy()[rows],
                               err["code"].to_numpy()[rows], err["count"].to_numpy()[rows]):
        if n:           # (few rows: replies that failed)
            f = out[w].failures.setdefault(str(cmd), {})
            f[int(code)] = f.get(int(code), 0) + int(n)
    return out


def interval_second(t: pd.DataFrame) -> pd.Series:
    """The epoch second a histogram interval (``time``, ``length_s``) is counted in: the
    one holding its middle (a probe's intervals need not start on a whole second)."""
    return np.floor(t["time"] + t["length_s"] / 2).astype("int64")


def _typed(df: pd.DataFrame, cols: dict) -> pd.DataFrame:
    return df[list(cols)].astype(cols).reset_index(drop=True)


def _empty(cols: dict) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in cols.items()})


def _hist_rows(groups: list[tuple], hists: list[dict], cols: dict) -> pd.DataFrame:
    """Rows (*group, bucket, count) for each entry of each group's histogram, the
    group being the first ``len(cols) - 2`` fields of its totals row; built column by
    column (an hour at 50k requests/s has millions of entries)."""
    sizes = np.fromiter(map(len, hists), dtype=np.int64, count=len(hists))
    if not sizes.sum():
        return _empty(cols)
    keys = list(cols)[:-2]
    g = pd.DataFrame([r[:len(keys)] for r in groups], columns=keys)
    g = g.take(np.repeat(np.arange(len(g)), sizes)).reset_index(drop=True)
    g["bucket"] = np.fromiter(itertools.chain.from_iterable(hists), dtype=np.int64)
    g["count"] = np.fromiter(itertools.chain.from_iterable(h.values() for h in hists),
                             dtype=np.int64)
    return g.astype(cols)


def _rows(rows: list[tuple], cols: dict) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(cols)).astype(cols) if rows else _empty(cols)
