"""Per-request events as a columnar source: exact figures over any window without
holding every event in memory.

A run recorded with ``record --events`` keeps every request in
``latency.events.parquet`` (the ``formats/wire_events`` table): an hour at 50,000
requests/s is 180 million rows, 1.6 GB of Parquet and some 18 GB as a pandas table.
``mongoprobe.model.latencies.Latencies`` takes its exact figures from an :class:`EventSource`
instead of a DataFrame. Two sources, one interface:

* :class:`FrameEvents`: a wire_events DataFrame in memory (the live tools, a run cut
  before record wrote its Parquet, tests);
* :class:`ParquetEvents`: a Parquet file, read in batches of ``BATCH`` rows, only the
  columns a figure needs (``time``, ``command``, ``latency_ns``; ``command`` kept
  dictionary-encoded), only the row groups whose ``time`` statistics meet the window.

Every figure is computed here once, for both sources, from batches of three numpy
arrays (time, command code, latency)::

    window(start, end)   the requests answered in [start, end): per command the
                         count, the latency sum (exact integers), the log-linear
                         bucket counts (first pass); then, when asked, the exact
                         nearest-rank p50/p95/p99 and the max (second pass: only the
                         values in the buckets that hold those ranks, and in the
                         highest bucket, are kept and sorted)
    per_second()         requests and busy time (summed latency) per epoch second and
                         command, in one pass
    answered(cmd, lo, hi)  requests of ``cmd`` answered in each window (lo, hi]: the
                         requests up to every edge counted per command in one pass
                         over the edges' span (cached: the next command is free)
    prepare(windows, edges, per_second)  all of these at once, before they are asked
                         for one by one: one scan counts every window (and the
                         seconds), a second finds every window's exact percentiles
                         and counts up to the edges (a table of four phases reads the
                         events twice, not twelve times a quarter of them)

Each figure is an accumulator (``_Counts``, ``_Ranks``, ``_PerSecond``, ``_Upto``) fed
the batches of its own time range; a scan feeds several. Memory stays bounded by a
batch and the accumulators (per command, 2,048 buckets); the second pass keeps the
values of a few buckets only. A pass over a big file shows its progress on a
terminal (``mongoprobe.progress``; nothing when stderr is not one).

:meth:`EventSource.frame` gives the whole table as pandas for what needs every event
at once (the capture join, per-request phase inference, the sub-second heat map); a
Parquet source refuses it above ``IN_MEMORY_MAX`` rows with :class:`TooManyEvents` (a
LookupError saying so in one line).

Why pyarrow and numpy, not DuckDB: pyarrow is already a pinned dependency (it writes
the Parquet), and its batch reader with row-group pruning is all the I/O this needs;
the aggregation is a few ``np.bincount`` per batch. DuckDB is not among the pinned
dependencies, and an exact quantile is a holistic aggregate there (every value of a
group gathered, then selected), which the two-pass bucket selection avoids: only the
values of the buckets holding the ranks are kept.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import pandas as pd

from mongoprobe import progress
from mongoprobe.model import loglinear_buckets as loglinear
from mongoprobe.wire import facts as wirefacts

BATCH = 1 << 20                 # rows per batch read
NB = 2048                       # log-linear buckets: every int64 latency has one
QUANTILES = (50, 95, 99)
IN_MEMORY_MAX = 5_000_000       # events a Parquet source loads as pandas (~100 B each)
PROGRESS_ROWS = 4 * BATCH       # a pass over more rows shows progress on a terminal


def rank(q: float, n: int) -> int:
    """The nearest-rank ``q`` percentile of ``n`` values is the rank(q, n)-th smallest
    (1-based): ceil(q/100 n), at least 1 (``wirefacts.rank``: one statistic)."""
    return wirefacts.rank(q, n)


class TooManyEvents(LookupError):
    """The events are too many to hold in memory as one table."""


def _exact_sums(code: np.ndarray, ns: np.ndarray, n: int) -> list[int]:
    """Per code, the exact integer sum of ``ns`` (int64 >= 0, at most 2**21 of them):
    float sums of 32-bit halves are exact (below 2**53); one sum when every value is
    below 2**32 (4.3 s)."""
    if len(ns) > 1 << 21:
        out = [0] * n
        for i in range(0, len(ns), 1 << 21):
            for c, s in enumerate(_exact_sums(code[i:i + (1 << 21)], ns[i:i + (1 << 21)], n)):
                out[c] += s
        return out
    out = [0] * n
    big = len(ns) and int(ns.max()) >= 1 << 32
    for shift in ((0, 32) if big else (0,)):
        part = np.bincount(code, weights=(ns >> shift) & 0xFFFFFFFF if big else ns,
                           minlength=n)
        for c in np.flatnonzero(part):
            out[c] += int(part[c]) << shift
    return out


@dataclass
class Window:
    """The requests answered in [start, end) of one source (``EventSource.window``)."""

    start: float
    end: float
    commands: list[str]                        # code -> name, as the source saw them
    count: np.ndarray                          # per code
    sum_ns: list[int]                          # per code, exact
    hist: np.ndarray                           # [code, bucket] counts
    exact: dict[int, dict] = field(default_factory=dict)   # code -> {"p50".., "max"}

    def counts(self) -> dict[str, int]:
        """{command: requests}, busiest first."""
        order = sorted(np.flatnonzero(self.count), key=lambda c: (-self.count[c],
                                                                   self.commands[c]))
        return {self.commands[c]: int(self.count[c]) for c in order}

    def histogram(self, command: str) -> dict[int, int]:
        if command not in self.commands:
            return {}
        h = self.hist[self.commands.index(command)]
        return {int(b): int(h[b]) for b in np.flatnonzero(h)}

    def targets(self) -> dict[int, list[tuple[str, int]]]:
        """{code * NB + bucket: [(stat, rank inside the bucket)]}: where each nearest-
        rank percentile and the max of every command lie."""
        out: dict[int, list[tuple[str, int]]] = {}
        for c in np.flatnonzero(self.count):
            n = int(self.count[c])
            cum = np.cumsum(self.hist[c])
            for q in QUANTILES:
                k = rank(q, n)
                b = int(np.searchsorted(cum, k))
                out.setdefault(int(c) * NB + b, []).append(
                    (f"p{q}", k - (int(cum[b - 1]) if b else 0)))
            top = int(np.flatnonzero(self.hist[c])[-1])
            out.setdefault(int(c) * NB + top, []).append(("max", -1))
        return out

    def stats(self) -> dict[str, dict[str, float]]:
        """{command: {"count", "avg", "p50", "p95", "p99", "max"}} in nanoseconds, by
        command name (the pass that finds the exact values must have run)."""
        out = {}
        for c in sorted(np.flatnonzero(self.count), key=lambda c: self.commands[c]):
            n = int(self.count[c])
            out[self.commands[c]] = {"count": n, "avg": self.sum_ns[c] / n,
                                     **{k: float(v) for k, v in self.exact[c].items()}}
        return out


class EventSource:
    """Per-request events, read in batches; the subclasses say how. Figures (windows,
    per-second counts, cumulative counts) are cached on the source."""

    def __init__(self) -> None:
        self.commands: list[str] = []
        self._code: dict[str, int] = {}
        self._windows: dict[tuple[float, float], Window] = {}
        self._per_second: pd.DataFrame | None = None
        self._upto: list[tuple[np.ndarray, np.ndarray]] = []   # (edges, [code, edge])
        # (start, end, bin edges in ns) -> [code, bin] requests (``binned``)
        self._binned: dict[tuple, np.ndarray] = {}

    # --- what a subclass provides -------------------------------------------------------

    def __len__(self) -> int:
        raise NotImplementedError

    def batches(self, lo: float | None = None, hi: float | None = None,
                latency: bool = True, what: str = ""
                ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(time, code, latency_ns) arrays of the events with lo <= time < hi (every
        timed event when both are None); latency_ns is None when not asked for.
        ``what`` names the pass on the progress line of a big file read on a
        terminal."""
        raise NotImplementedError

    def frame(self) -> pd.DataFrame:
        """Every event as one wire_events DataFrame."""
        raise NotImplementedError

    def _codes_of(self, names: list[str]) -> np.ndarray:
        """Global codes of command names (new names get new codes)."""
        out = np.empty(len(names), dtype=np.int64)
        for i, name in enumerate(names):
            c = self._code.get(name)
            if c is None:
                c = self._code[name] = len(self.commands)
                self.commands.append(name)
            out[i] = c
        return out

    def code_of(self, name: str) -> int | None:
        """The code :meth:`batches` gives command ``name`` (None while no batch read so
        far held it)."""
        return self._code.get(name)

    # --- figures ------------------------------------------------------------------------

    def window(self, start: float, end: float, exact: bool = True) -> Window:
        """The requests answered in [start, end); with ``exact`` their percentiles and
        maxima too (a second pass over the window)."""
        key = (float(start), float(end))
        w = self._windows.get(key)
        if w is None or (exact and not w.exact):
            self.prepare([key] if exact else [], counts=[] if exact else [key])
        return self._windows[key]

    def binned(self, start: float, end: float, edges_ns) -> np.ndarray:
        """[code, bin] requests answered in [start, end) by latency bin: bin k holds
        latencies of at most ``edges_ns[k]`` and above the bin before's (the last,
        those above every edge). Rows of codes :meth:`batches` gave so far."""
        key = (float(start), float(end), tuple(float(e) for e in edges_ns))
        if key not in self._binned:
            self.prepare(binned=[key])
        got = self._binned[key]
        out = np.zeros((len(self.commands), got.shape[1]), dtype=np.int64)
        out[:len(got)] = got
        return out

    def per_second(self) -> pd.DataFrame:
        """(second, command, requests, busy_s): requests answered per epoch second and
        command, and their summed latency in seconds."""
        if self._per_second is None:
            self.prepare([], per_second=True)
        return self._per_second

    def answered(self, command: str, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Requests of ``command`` answered in each window (lo, hi] (epoch seconds)."""
        lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
        if not lo.size:
            return np.zeros(0, dtype=np.int64)
        edges, upto = self._counts_upto(np.concatenate([lo.ravel(), hi.ravel()]))
        c = self._code.get(command)
        if c is None or c >= len(upto):
            return np.zeros(lo.shape, dtype=np.int64)
        row = upto[c]
        return row[np.searchsorted(edges, hi)] - row[np.searchsorted(edges, lo)]

    def prepare(self, windows=(), edges=None, per_second: bool = False,
                counts=(), binned=()) -> None:
        """Compute, in two scans of the events at most, what the figures will ask for:
        the exact ``windows`` [(start, end)], the counts only of ``counts``, the
        per-second table, the cumulative counts at ``edges`` (epoch seconds, for
        :meth:`answered`), the requests by latency bin of ``binned`` [(start, end,
        edges_ns)] (:meth:`binned`). The first scan counts (windows, bins, per
        second), the second finds the exact percentiles and counts up to the edges:
        one table of phases reads the events twice, not three times per phase."""
        windows = [(float(a), float(b)) for a, b in windows]
        first: list[_Acc] = [_Counts(self, a, b) for a, b in dict.fromkeys(
            [*windows, *((float(a), float(b)) for a, b in counts)]) if (a, b) not in
            self._windows]
        first += [_Binned(self, key) for key in dict.fromkeys(
            (float(a), float(b), tuple(float(e) for e in e_)) for a, b, e_ in binned)
            if key not in self._binned]
        if per_second and self._per_second is None:
            first.append(_PerSecond(self))
        self._scan(first)
        second: list[_Acc] = [_Ranks(self, self._windows[k]) for k in dict.fromkeys(windows)
                              if not self._windows[k].exact
                              and self._windows[k].count.any()]
        if edges is not None:
            e = np.unique(np.asarray(edges, dtype=float))
            e = e[~np.isnan(e)]
            if len(e) and self._cached_upto(e) is None:
                second.append(_Upto(self, e))
        self._scan(second)

    def _scan(self, accs: list[_Acc]) -> None:
        """One read of the events the accumulators need, each fed its own part."""
        if not accs:
            return
        what = " + ".join(dict.fromkeys(a.what for a in accs))
        lo = None if any(a.lo is None for a in accs) else min(a.lo for a in accs)
        hi = None if any(a.hi is None for a in accs) else max(a.hi for a in accs)
        latency = any(a.latency for a in accs)
        # each request's bucket key (code * NB + bucket) figured once per batch for
        # every accumulator that counts buckets (a phase and its blocks overlap)
        keyed = latency and any(a.keyed for a in accs)
        # (the bounds as arrays: a batch finds the accumulators it overlaps at once,
        # among the thousands of a comparison's blocks)
        los = np.array([-np.inf if a.lo is None else a.lo for a in accs], dtype=float)
        his = np.array([np.inf if a.hi is None else a.hi for a in accs], dtype=float)
        for t, code, ns in self.batches(lo, hi, latency=latency, what=what):
            key = code * NB + loglinear.index(ns) if keyed else None
            if len(accs) == 1:          # the batches are its range already
                accs[0].feed(t, code, ns, key)
                continue
            first, last = (t.min(), t.max()) if len(t) else (0.0, -1.0)
            # a batch in time order (as recorded) is cut by bisection, into views
            ordered = len(t) > 1 and not np.isnan(first) and bool((t[1:] >= t[:-1]).all())
            if ordered:
                t = np.ascontiguousarray(t)     # (searchsorted copies a strided one)
            near = (np.arange(len(accs)) if np.isnan(first) or np.isnan(last) else
                    np.flatnonzero((los <= last) & (his > first)))    # (NaN: as before)
            for i in near:
                a = accs[i]
                if (a.lo is None or first >= a.lo) and (a.hi is None or last < a.hi):
                    a.feed(t, code, ns, key)
                    continue
                if ordered:
                    sl = slice(np.searchsorted(t, los[i], "left"),
                               np.searchsorted(t, his[i], "left"))
                else:
                    sl = _inside(t, a.lo, a.hi)
                    sl = slice(None) if sl is None else sl
                a.feed(t[sl], code[sl], None if ns is None else ns[sl],
                       None if key is None else key[sl])
        for a in accs:
            a.finish()

    def _cached_upto(self, points: np.ndarray):
        """Cumulative counts already computed at edges including every point."""
        for edges, upto in self._upto:
            i = np.searchsorted(edges, points)
            if (i < len(edges)).all() and (edges[np.minimum(i, len(edges) - 1)] == points).all():
                return edges, upto
        return None

    def _counts_upto(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(edges, [code, edge] requests with edges[0] <= time <= edge): one pass over
        the span of the edges, unless edges including these were counted already."""
        edges = np.unique(points[~np.isnan(points)])
        got = self._cached_upto(edges)
        if got is None:
            self.prepare(edges=edges)
            got = self._cached_upto(edges)
        if got is None:         # no edges
            return edges, np.zeros((len(self.commands), 0), dtype=np.int64)
        return got


class _Acc:
    """What one scan computes for a figure: fed the batches with lo <= time < hi (lo,
    hi None: unbounded), then finished (the figure stored on the source)."""

    lo: float | None = None
    hi: float | None = None
    latency = True
    keyed = False                   # feed's key: code * NB + bucket of each latency
    what = ""                       # the scan's name on a progress line

    def feed(self, t: np.ndarray, code: np.ndarray, ns: np.ndarray | None,
             key: np.ndarray | None) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        raise NotImplementedError


class _Counts(_Acc):
    """A window's counts, exact latency sums and bucket counts per command."""

    what = "counts"
    keyed = True

    def __init__(self, src: EventSource, start: float, end: float) -> None:
        self.src, self.lo, self.hi = src, start, end
        self.hist = np.zeros((0, NB), dtype=np.int64)
        self.sums: list[int] = []

    def feed(self, t, code, ns, key):
        n = len(self.src.commands)
        if len(self.hist) < n:
            self.hist = np.vstack([self.hist, np.zeros((n - len(self.hist), NB),
                                                       dtype=np.int64)])
            self.sums += [0] * (n - len(self.sums))
        self.hist += np.bincount(key, minlength=n * NB).reshape(n, NB)
        for c, s in enumerate(_exact_sums(code, ns, n)):
            self.sums[c] += s

    def finish(self):
        n = len(self.hist)
        self.src._windows[(self.lo, self.hi)] = Window(
            self.lo, self.hi, list(self.src.commands[:n]), self.hist.sum(axis=1),
            self.sums, self.hist)


class _Binned(_Acc):
    """A window's requests per command and latency bin (``EventSource.binned``)."""

    what = "histograms"

    def __init__(self, src: EventSource, key: tuple) -> None:
        self.src, self.key = src, key
        self.lo, self.hi = key[0], key[1]
        self.edges = np.asarray(key[2], dtype=float)
        # an integer latency is above an edge when it is above the edge's floor: the
        # comparisons in int64, one per edge (a third of a float searchsorted's time)
        self.floors = [int(e) for e in np.floor(self.edges)]
        self.counts = np.zeros((0, len(self.edges) + 1), dtype=np.int64)

    def feed(self, t, code, ns, key):
        n, nb = len(self.src.commands), len(self.edges) + 1
        if len(self.counts) < n:
            self.counts = np.vstack([self.counts, np.zeros((n - len(self.counts), nb),
                                                           dtype=np.int64)])
        b = code * nb           # + the edges below each latency: its bin (side "left")
        for e in self.floors:
            b += ns > e
        self.counts += np.bincount(b, minlength=n * nb).reshape(n, nb)

    def finish(self):
        self.src._binned[self.key] = self.counts


class _Ranks(_Acc):
    """A window's exact percentiles and maxima (``Window.targets``): its values in the
    buckets that hold them, sorted, at their ranks."""

    what = "percentiles"
    keyed = True

    def __init__(self, src: EventSource, w: Window) -> None:
        self.w, self.lo, self.hi = w, w.start, w.end
        self.targets = w.targets()
        self.want = np.zeros(len(w.commands) * NB, dtype=bool)
        self.want[list(self.targets)] = True
        self.keys: list[np.ndarray] = []
        self.vals: list[np.ndarray] = []

    def feed(self, t, code, ns, key):
        known = code < len(self.w.commands)
        sel = np.zeros(len(key), dtype=bool)
        sel[known] = self.want[key[known]]
        self.keys.append(key[sel])
        self.vals.append(ns[sel])

    def finish(self):
        k = np.concatenate(self.keys) if self.keys else np.zeros(0, dtype=np.int64)
        v = np.concatenate(self.vals) if self.vals else np.zeros(0, dtype=np.int64)
        order = np.lexsort((v, k))
        k, v = k[order], v[order]
        exact: dict[int, dict] = {}
        for key, wanted in self.targets.items():
            lo, hi = np.searchsorted(k, key), np.searchsorted(k, key, side="right")
            for stat, r in wanted:
                exact.setdefault(key // NB, {})[stat] = int(v[hi - 1] if r < 0
                                                            else v[lo + r - 1])
        self.w.exact = exact


class _PerSecond(_Acc):
    """Requests and summed latency per epoch second and command, over every event."""

    what = "per second"

    def __init__(self, src: EventSource) -> None:
        self.src = src
        self.acc: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def feed(self, t, code, ns, key):
        if not len(t):
            return
        sec = np.floor(t).astype(np.int64)
        s0, span, n = int(sec.min()), int(sec.max() - sec.min()) + 1, len(self.src.commands)
        if span > 4 * len(sec) + 1024:     # scattered times: only the seconds present
            secs, rel = np.unique(sec, return_inverse=True)
        else:
            secs, rel = np.arange(s0, s0 + span), sec - s0
        key = rel * n + code
        cnt = np.bincount(key, minlength=len(secs) * n).reshape(-1, n)
        busy = np.bincount(key, weights=ns, minlength=len(secs) * n).reshape(-1, n)
        for i in np.flatnonzero(cnt.any(axis=1)):
            s = int(secs[i])
            a, b = self.acc.get(s, (np.zeros(0, dtype=np.int64), np.zeros(0)))
            if len(a) < n:
                a = np.concatenate([a, np.zeros(n - len(a), dtype=np.int64)])
                b = np.concatenate([b, np.zeros(n - len(b))])
            self.acc[s] = (a + cnt[i], b + busy[i])

    def finish(self):
        acc, names = self.acc, self.src.commands
        rows = [(s, names[c], int(a[c]), float(b[c]) / 1e9)
                for s in sorted(acc) for a, b in [acc[s]] for c in np.flatnonzero(a)]
        df = pd.DataFrame(rows, columns=["second", "command", "requests", "busy_s"])
        df = df.astype({"second": "int64", "command": str, "requests": "int64",
                        "busy_s": "float64"})
        self.src._per_second = df.sort_values(["second", "command"], kind="stable",
                                              ignore_index=True)


class _Upto(_Acc):
    """Per command, the requests with edges[0] <= time <= edge, at every edge: each
    request counted at the first edge at or after it, then summed along the edges."""

    latency = False
    what = "per interval"

    def __init__(self, src: EventSource, edges: np.ndarray) -> None:
        self.src, self.edges = src, edges
        self.lo, self.hi = float(edges[0]), float(np.nextafter(edges[-1], np.inf))
        self.at = np.zeros((0, len(edges)), dtype=np.int64)     # [code, first edge]

    def feed(self, t, code, ns, key):
        n, e = len(self.src.commands), len(self.edges)
        first = np.searchsorted(self.edges, t, side="left")     # t <= edges[first]
        at = np.bincount(code * (e + 1) + first, minlength=n * (e + 1)).reshape(n, e + 1)
        if len(self.at) < n:
            self.at = np.vstack([self.at, np.zeros((n - len(self.at), e), dtype=np.int64)])
        self.at[:n] += at[:, :e]

    def finish(self):
        upto = np.zeros((len(self.src.commands), len(self.edges)), dtype=np.int64)
        upto[:len(self.at)] = np.cumsum(self.at, axis=1)
        self.src._upto.append((self.edges, upto))


def _inside(t: np.ndarray, lo: float | None, hi: float | None) -> np.ndarray | None:
    """The mask of lo <= t < hi (NaN never inside), or None when every t is inside
    (most batches of a window: no copy then)."""
    if not len(t):
        return np.zeros(0, dtype=bool)
    a, b = t.min(), t.max()
    if not np.isnan(a) and (lo is None or a >= lo) and (hi is None or b < hi):
        return None
    sel = ~np.isnan(t)
    if lo is not None:
        sel &= t >= lo
    if hi is not None:
        sel &= t < hi
    return sel


class FrameEvents(EventSource):
    """A wire_events DataFrame (``formats/wire_events``) in memory."""

    def __init__(self, events: pd.DataFrame) -> None:
        super().__init__()
        self.events = events
        self._t = events["time"].to_numpy(dtype=np.float64)
        self._ns = events["latency_ns"].to_numpy(dtype=np.int64)
        codes, names = pd.factorize(events["command"].astype(str), sort=True)
        self._c = self._codes_of(list(names))[codes] if len(names) else \
            np.zeros(len(events), dtype=np.int64)

    def __len__(self) -> int:
        return len(self.events)

    def frame(self) -> pd.DataFrame:
        return self.events

    def batches(self, lo=None, hi=None, latency=True, what=""):
        for i in range(0, len(self._t), BATCH):
            t = self._t[i:i + BATCH]
            sel = _inside(t, lo, hi)
            if sel is None:
                yield t, self._c[i:i + BATCH], self._ns[i:i + BATCH] if latency else None
            elif sel.any():
                yield (t[sel], self._c[i:i + BATCH][sel],
                       self._ns[i:i + BATCH][sel] if latency else None)


class ParquetEvents(EventSource):
    """A Parquet file of the wire_events table (a run's ``latency.events.parquet``),
    read in batches: only the columns asked for, only the row groups whose ``time``
    statistics meet the window."""

    COLUMNS = ("time", "command", "latency_ns")

    def __init__(self, path) -> None:
        import pyarrow.parquet as pq

        super().__init__()
        self.path = str(path)
        self._pf = pq.ParquetFile(self.path, read_dictionary=["command"])
        names = self._pf.schema_arrow.names
        missing = [c for c in self.COLUMNS if c not in names]
        if missing:
            raise ValueError(f"{self.path}: not a wire events table (no "
                             f"{', '.join(missing)} column)")
        md, col = self._pf.metadata, names.index("time")
        self._ranges = []                   # per row group: (min, max) time, or None
        for i in range(md.num_row_groups):
            st = md.row_group(i).column(col).statistics
            ok = st is not None and st.has_min_max
            self._ranges.append((float(st.min), float(st.max)) if ok else None)
        self._frame: pd.DataFrame | None = None

    def __len__(self) -> int:
        return self._pf.metadata.num_rows

    def frame(self) -> pd.DataFrame:
        if len(self) > IN_MEMORY_MAX:
            raise TooManyEvents(
                f"{self.path}: {len(self):,} events are too many to hold in memory as one "
                f"table (more than {IN_MEMORY_MAX:,})")
        if self._frame is None:
            from mongoprobe.formats import wire_events
            self._frame = wire_events.read_parquet(self.path)
        return self._frame

    def _groups(self, lo, hi) -> list[int]:
        return [i for i, r in enumerate(self._ranges)
                if r is None or ((lo is None or r[1] >= lo) and (hi is None or r[0] < hi))]

    def _read(self, groups: list[int], cols: list[str], what: str):
        """Record batches of ``groups``, one row group at a time: a reader given many
        keeps what it pre-buffered of all of them (a gigabyte for an hour). A pass
        over more than ``PROGRESS_ROWS`` rows shows its progress on a terminal."""
        md = self._pf.metadata
        rows = [md.row_group(g).num_rows for g in groups]
        line = progress.Line(f"{os.path.basename(self.path)}: {what or 'reading'}",
                             sum(rows), " rows", active=None if sum(rows) > PROGRESS_ROWS
                             else False)
        done = 0
        try:
            for g, n in zip(groups, rows):
                yield from self._pf.iter_batches(batch_size=BATCH, row_groups=[g],
                                                 columns=cols, use_threads=True)
                done += n
                line.update(done)
        finally:
            line.close()

    def batches(self, lo=None, hi=None, latency=True, what=""):
        cols = ["time", "command"] + (["latency_ns"] if latency else [])
        for b in self._read(self._groups(lo, hi), cols, what):
            t = b.column(0).to_numpy(zero_copy_only=False)
            sel = _inside(t, lo, hi)
            if sel is not None and not sel.any():
                continue
            cmd = b.column(1)
            names = [str(x) if x is not None else "" for x in cmd.dictionary.to_pylist()]
            idx = cmd.indices
            if idx.null_count:      # a request without a command name: "" (its own code)
                idx = idx.fill_null(len(names))
                names.append("")
            lut = self._codes_of(names)
            idx = idx.to_numpy(zero_copy_only=False)
            ns = b.column(2).to_numpy(zero_copy_only=False) if latency else None
            if sel is not None:
                t, idx, ns = t[sel], idx[sel], ns[sel] if latency else None
            # the file's dictionary is most often the codes themselves
            same = len(lut) and (lut == np.arange(len(lut))).all()
            code = (idx.astype(np.int64) if same else lut[idx] if len(lut)
                    else np.zeros(len(t), dtype=np.int64))
            yield t, code, ns
