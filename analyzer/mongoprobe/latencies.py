"""Server-side latency of a recorded run, in one representation whatever recorded it.

Every source -- the probes' per-request events (``formats/wire_events.py``) today,
per-interval log-linear histograms printed by the probes, a capture's request/reply
pairs -- becomes the same tables, and the views (phases, report, notebooks) read those:

``hist`` (one row per interval, command, opcode and bucket)::

    time      float64  wall-clock start of the interval, epoch seconds
    length_s  float64  the interval's length (seconds)
    command   str      command name as on the wire
    opcode    str      OP_MSG, OP_QUERY, ...
    bucket    int64    log-linear latency bucket (``mongoprobe.loglinear``)
    count     int64    requests answered in the interval with a latency in the bucket

``totals`` (one row per interval, command and opcode): ``time``, ``length_s``,
``command``, ``opcode`` as above; ``count`` int64 requests, ``sum_ns`` int64 their
summed latency (so averages are exact), ``max_ns`` int64 the slowest.

``events`` keeps the per-request rows when they were recorded: counts, rates and
percentiles over a window are then exact (nearest rank); from ``hist`` alone the
percentiles are within 1.6% (``loglinear.MAX_ERROR``) and a window [start, end) takes
the intervals whose middle falls inside it (a histogram cannot be cut inside an
interval).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from . import loglinear

HIST_COLUMNS = {"time": "float64", "length_s": "float64", "command": str, "opcode": str,
                "bucket": "int64", "count": "int64"}
TOTAL_COLUMNS = {"time": "float64", "length_s": "float64", "command": str, "opcode": str,
                 "count": "int64", "sum_ns": "int64", "max_ns": "int64"}
STATS = ("count", "avg", "p50", "p95", "p99", "max")


def nearest_rank(sorted_values: np.ndarray, q: float) -> float:
    """The nearest-rank ``q`` percentile of sorted values: the ceil(q/100 n)-th smallest
    (the definition the histograms' bound is stated for)."""
    n = len(sorted_values)
    return float(sorted_values[max(math.ceil(q / 100 * n), 1) - 1])


@dataclass
class Latencies:
    hist: pd.DataFrame
    totals: pd.DataFrame
    events: pd.DataFrame | None = None

    @classmethod
    def from_events(cls, events: pd.DataFrame, interval_s: float = 1.0) -> "Latencies":
        """The tables of per-request events, in intervals of ``interval_s`` aligned to
        the epoch; the events are kept for exact figures."""
        ev = events[events["time"].notna()]
        t = np.floor(ev["time"].to_numpy(dtype=float) / interval_s) * interval_s
        ns = ev["latency_ns"].to_numpy(dtype=np.int64)
        df = pd.DataFrame({"time": t, "command": ev["command"].to_numpy(),
                           "opcode": ev["opcode"].to_numpy(), "bucket": loglinear.index(ns),
                           "ns": ns})
        keys = ["time", "command", "opcode"]
        hist = (df.groupby(keys + ["bucket"], sort=True).size().rename("count").reset_index()
                .assign(length_s=interval_s))
        tot = (df.groupby(keys, sort=True)["ns"].agg(["size", "sum", "max"]).reset_index()
               .rename(columns={"size": "count", "sum": "sum_ns", "max": "max_ns"})
               .assign(length_s=interval_s))
        return cls(_typed(hist, HIST_COLUMNS), _typed(tot, TOTAL_COLUMNS), events)

    # --- windows ----------------------------------------------------------------------

    def _inside(self, df: pd.DataFrame, start: float, end: float) -> pd.DataFrame:
        mid = df["time"] + df["length_s"] / 2
        return df[(mid >= start) & (mid < end)]

    def stats(self, start: float, end: float) -> dict[str, dict[str, float]]:
        """{command: {"count", "avg", "p50", "p95", "p99", "max"}} in nanoseconds, of the
        requests answered in [start, end)."""
        out: dict[str, dict[str, float]] = {}
        if self.events is not None:
            ev = self.events
            part = ev[(ev["time"] >= start) & (ev["time"] < end)]
            for cmd, p in part.groupby("command", sort=True):
                v = np.sort(p["latency_ns"].to_numpy(dtype=np.int64))
                out[str(cmd)] = {"count": int(len(v)), "avg": float(v.mean()),
                                 **{f"p{q}": nearest_rank(v, q) for q in (50, 95, 99)},
                                 "max": float(v[-1])}
            return out
        tot = self._inside(self.totals, start, end)
        for cmd, t in tot.groupby("command", sort=True):
            n = int(t["count"].sum())
            h = self.histogram(str(cmd), start, end)
            out[str(cmd)] = {"count": n, "avg": float(t["sum_ns"].sum()) / n,
                             **{f"p{q}": loglinear.percentile(h, q) for q in (50, 95, 99)},
                             "max": float(t["max_ns"].max())}
        return out

    def histogram(self, command: str, start: float, end: float) -> dict[int, int]:
        """{bucket: requests} of ``command`` answered in [start, end) (exact with
        events; from the histograms, the intervals whose middle is inside)."""
        if self.events is not None:
            ev = self.events
            sel = (ev["command"] == command) & (ev["time"] >= start) & (ev["time"] < end)
            b, n = np.unique(loglinear.index(ev.loc[sel, "latency_ns"].to_numpy()),
                             return_counts=True)
            return {int(k): int(c) for k, c in zip(b, n)}
        h = self._inside(self.hist, start, end)
        h = h[h["command"] == command]
        return {int(k): int(c) for k, c in h.groupby("bucket")["count"].sum().items()}

    def rates(self, start: float, end: float) -> dict[str, float]:
        """{command: requests/s} answered in [start, end)."""
        if not end > start:
            return {}
        if self.events is not None:
            ev = self.events
            part = ev[(ev["time"] >= start) & (ev["time"] < end)]
            return {str(c): n / (end - start) for c, n in part["command"].value_counts().items()}
        tot = self._inside(self.totals, start, end)
        secs = tot["length_s"].groupby(tot["time"]).first().sum()
        return {str(c): float(n) / secs for c, n in tot.groupby("command")["count"].sum().items()
                } if secs > 0 else {}

    def per_second(self) -> pd.DataFrame:
        """(second, command, requests): requests answered per epoch second."""
        if self.events is not None:
            ev = self.events[self.events["time"].notna()]
            sec = np.floor(ev["time"].to_numpy(dtype=float)).astype("int64")
            return (pd.DataFrame({"second": sec, "command": ev["command"].to_numpy()})
                    .groupby(["second", "command"], sort=True).size().rename("requests")
                    .reset_index())
        t = self.totals
        sec = np.floor(t["time"] + t["length_s"] / 2).astype("int64")
        return (t.assign(second=sec).groupby(["second", "command"], sort=True)["count"].sum()
                .rename("requests").reset_index())

    def counts(self, command: str, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Requests of ``command`` answered in each window (lo, hi] (arrays of epoch s);
        from the histograms, intervals are counted by their middle."""
        if self.events is not None:
            ev = self.events
            t = np.sort(ev.loc[ev["command"] == command, "time"].to_numpy(dtype=float))
            return np.searchsorted(t, hi, side="right") - np.searchsorted(t, lo, side="right")
        tot = self.totals[self.totals["command"] == command]
        mid = (tot["time"] + tot["length_s"] / 2).to_numpy()
        order = np.argsort(mid, kind="stable")
        cum = np.concatenate([[0], np.cumsum(tot["count"].to_numpy()[order])])
        mid = mid[order]
        return cum[np.searchsorted(mid, hi, side="right")] - cum[np.searchsorted(mid, lo,
                                                                                side="right")]


def _typed(df: pd.DataFrame, cols: dict) -> pd.DataFrame:
    return df[list(cols)].astype(cols).reset_index(drop=True)
