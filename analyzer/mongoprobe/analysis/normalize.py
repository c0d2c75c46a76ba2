"""The seeds' (field reports: docs/sources.md) throughput and per-operation metrics.

What the insert-benchmark seeds (000, 001) report, and how it is computed here. Each
formula was checked against the seeds' own tables (``tests/test_normalize.py``
recomputes every printed normalised cell from the raw cells of its row, within the
rounding of the printed numbers):

Throughput over a phase, from a cumulative operation count sampled over time:

    avg  = operations in the phase / its duration                  (ipsAvg, qpsAvg, ips.av)
    p95  = "rate at 95th percentile using 10-second intervals": the phase is cut into
           consecutive 10-second windows from its first sample; p95 is the 5th
           percentile of the window rates, nearest rank (sorted ascending, the
           ceil(0.05 n)-th): at least 95% of the windows meet or exceed it. The low tail:
           in every row of seed 000's tables ipsP95 < ipsAvg. A last, partial window counts in avg
           but not in p95. Fewer than one full window: p95 NaN.

Per operation (``ops`` = operations per second over the same time; us, sy, cpu in
percent of all CPUs, as vmstat prints them; r/s and kB/s from iostat summed over
devices; cs context switches per second from vmstat):

    r/o        = r/s / ops                   storage reads per operation
    rkb/o      = rkB/s / ops                 KB read per operation
    wkb/o      = wkB/s / ops                 KB written per operation
    cs/o       = cs / ops                    context switches per operation
    (us+sy)/o  = (us + sy) / ops             seed 000's "CPU utilisation / op rate"
    Mcpu/o     = (us + sy) * 1e6 / ops       seed 001's Mcpu/q (its cpu = us + sy):
                                             1184 for 31386 qps at cpu 37.2
    cpu_us/o   = (us + sy) / 100 * ncpu * 1e6 / ops    CPU microseconds per operation

The seeds' Mcpu/q does NOT include the number of CPUs: ``37.2 * 1e6 / 31386 = 1185``
(1184 printed; 37.2 is 37.15..37.25, so 1183.7..1186.8) while with the 40 hyperthreads
of seed 000's server it would be 474. ``cpu_us/o`` is the absolute figure (it needs
``ncpu``; Mcpu/o = cpu_us/o * 100 / ncpu).

MB to KB: seed 000 (2015) converts rmb/s and wmb/s with 1024 KB per MB (toku: 32.0 *
1024 / 850 = 38.6 rkb/o; with 1000 it would be 37.6), seed 001 (2018) with 1000 (36.09
wkb/i = 57.2 * 1000 / 1584; 1024 gives 36.98). ``kb_per_mb`` chooses (default 1024,
iostat's ``-m`` MB being 1024 kB); iostat's kB/s columns need no conversion.

Functions:

    window_rates(t, cum, interval)      full-window rates
    p95_rate(rates)                     nearest-rank 5th percentile
    throughput(t, cum, interval, start, end)   {"avg", "p95", "intervals", "ops"}
    ycsb_ops(df, ops)                   YCSB status rows -> (time, elapsed_s, operations)
    per_op(ops, r_s=..., rkb_s=..., ...)  the per-operation metrics above
    normalize_table(wide, kb_per_mb)    recompute a seed table's normalised columns
    system_means(vmstat, iostat, start, end)   mean r/s rkB/s wkB/s cs us sy

The phase table of a recorded run (``mongoprobe.analysis.phase_table``) uses these functions, for any
load tool; p95 there is over the tool's own reporting intervals.

Times are seconds (epoch seconds when aligned with phase markers and ``-t`` timestamps).
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np
import pandas as pd

P95_INTERVAL_S = 10.0


# --- throughput -------------------------------------------------------------------------


def _arrays(t: Iterable[float], cum: Iterable[float]) -> tuple[np.ndarray, np.ndarray]:
    ta = np.asarray(list(t) if not isinstance(t, (np.ndarray, pd.Series)) else t, dtype=float)
    ca = np.asarray(list(cum) if not isinstance(cum, (np.ndarray, pd.Series)) else cum,
                    dtype=float)  # fmt: skip
    if ta.shape != ca.shape:
        raise ValueError(f"times ({ta.size}) and counts ({ca.size}) differ in length")
    ok = ~(np.isnan(ta) | np.isnan(ca))
    ta, ca = ta[ok], ca[ok]
    if ta.size and (np.diff(ta) < 0).any():
        raise ValueError("sample times must not go backwards")
    return ta, ca


def window_rates(t: Iterable[float], cum: Iterable[float],
                 interval: float = P95_INTERVAL_S) -> np.ndarray:
    """Rates in consecutive full ``interval``-second windows from the first sample.

    ``cum`` is the cumulative operation count at times ``t``; counts at window edges
    between samples are interpolated linearly. A trailing partial window is left out.
    """
    ta, ca = _arrays(t, cum)
    if interval <= 0:
        raise ValueError("interval must be positive")
    if ta.size < 2:
        return np.array([], dtype=float)
    n = int(math.floor((ta[-1] - ta[0]) / interval + 1e-9))
    edges = ta[0] + interval * np.arange(n + 1)
    return np.diff(np.interp(edges, ta, ca)) / interval


def p95_rate(rates: Iterable[float]) -> float:
    """The 5th percentile of the interval rates, nearest rank: the ceil(0.05 n)-th slowest,
    a rate at least 95% of the intervals meet or exceed. NaN rates are left out."""
    r = np.sort(np.asarray(list(rates) if not isinstance(rates, np.ndarray) else rates,
                           dtype=float))  # fmt: skip
    r = r[~np.isnan(r)]
    if r.size == 0:
        return math.nan
    return float(r[max(math.ceil(0.05 * r.size), 1) - 1])


def throughput(t: Iterable[float], cum: Iterable[float], interval: float = P95_INTERVAL_S,
               start: float | None = None, end: float | None = None) -> dict[str, Any]:
    """``{"avg", "p95", "intervals", "ops", "seconds"}`` over ``[start, end]`` (default:
    the first to the last sample). The counts at ``start``/``end`` are interpolated; the
    windows for p95 start at ``start``."""
    ta, ca = _arrays(t, cum)
    nan = {"avg": math.nan, "p95": math.nan, "intervals": 0, "ops": 0.0, "seconds": 0.0}
    if ta.size < 2:
        return nan
    lo = ta[0] if start is None else max(float(start), ta[0])
    hi = ta[-1] if end is None else min(float(end), ta[-1])
    if hi <= lo:
        return nan
    inner = (ta > lo) & (ta < hi)
    tt = np.concatenate([[lo], ta[inner], [hi]])
    cc = np.interp(tt, ta, ca)
    rates = window_rates(tt, cc, interval)
    ops = float(cc[-1] - cc[0])
    return {"avg": float(ops / (hi - lo)), "p95": p95_rate(rates), "intervals": int(rates.size),
            "ops": ops, "seconds": float(hi - lo)}  # fmt: skip


def ycsb_ops(df: pd.DataFrame, ops: Iterable[str] | None = None) -> pd.DataFrame:
    """YCSB status rows (``formats.ycsb.parse_ycsb``) -> one row per interval: ``time``,
    ``elapsed_s``, ``operations`` (cumulative).

    ``ops=None`` takes YCSB's own cumulative count of all operations; otherwise the
    interval ``count`` of the named operations (e.g. ``["INSERT"]``) is summed and
    accumulated (old YCSB prints no count: use ``ops=None``). ``time`` is the wall clock,
    or ``elapsed_s`` when the lines have none.
    """
    # the rows of one status line repeat its time, elapsed_s, operations and ops/sec
    key = df[["time", "elapsed_s", "operations", "ops_per_s"]]
    prev = key.shift()
    changed = (key.ne(prev) & ~(key.isna() & prev.isna())).any(axis=1)
    line = changed.cumsum()
    out = df.groupby(line, sort=True)[["time", "elapsed_s", "operations"]].first()
    if ops is not None:
        sel = df["op"].isin(list(ops))
        if df.loc[sel, "count"].isna().any():
            raise ValueError("these YCSB lines print no per-operation Count: use ops=None")
        per = df.loc[sel, "count"].groupby(line[sel]).sum()
        out["operations"] = per.reindex(out.index, fill_value=0).astype("int64").cumsum()
    out = out.reset_index(drop=True)
    out["time"] = out["time"].where(out["time"].notna(), out["elapsed_s"].astype(float))
    return out[["time", "elapsed_s", "operations"]].astype(
        {"time": "float64", "elapsed_s": "int64", "operations": "int64"})


# --- per operation ----------------------------------------------------------------------


def _div(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return math.nan
    if isinstance(b, pd.Series):
        return a / b.where(b != 0)
    return a / b if b else math.nan


def per_op(ops: Any, r_s: Any = None, rkb_s: Any = None, wkb_s: Any = None,
           rmb_s: Any = None, wmb_s: Any = None, cs: Any = None, us: Any = None,
           sy: Any = None, cpu: Any = None, ncpu: int | None = None,
           kb_per_mb: float = 1024.0) -> dict[str, Any]:
    """The per-operation metrics of the module docstring (scalars or pandas Series).

    Give throughput in kB/s (``rkb_s``/``wkb_s``) or MB/s (``rmb_s``/``wmb_s``, times
    ``kb_per_mb``); CPU as ``us`` and ``sy`` or their sum ``cpu`` (percent). Missing
    inputs give NaN.
    """
    if rkb_s is None and rmb_s is not None:
        rkb_s = rmb_s * kb_per_mb
    if wkb_s is None and wmb_s is not None:
        wkb_s = wmb_s * kb_per_mb
    if cpu is None and us is not None and sy is not None:
        cpu = us + sy
    return {
        "r/o": _div(r_s, ops),
        "rkb/o": _div(rkb_s, ops),
        "wkb/o": _div(wkb_s, ops),
        "cs/o": _div(cs, ops),
        "(us+sy)/o": _div(cpu, ops),
        "Mcpu/o": _div(None if cpu is None else cpu * 1e6, ops),
        "cpu_us/o": _div(None if cpu is None or ncpu is None else cpu / 100 * ncpu * 1e6,
                         ops),  # fmt: skip
    }


# seed column -> (per_op key, denominator column candidates)
_SEED = {
    "r/o": ("r/o", ("qps", "ips")), "rkb/o": ("rkb/o", ("qps", "ips")),
    "wkb/o": ("wkb/o", ("qps", "ips")), "cs/o": ("cs/o", ("qps", "ips")),
    "(us+sy)/o": ("(us+sy)/o", ("qps", "ips")), "cs/i": ("cs/o", ("ips", "ips.av")),
    "(us+sy)/i": ("(us+sy)/o", ("ips", "ips.av")), "wkb/i": ("wkb/o", ("ips.av", "ips")),
    "r/q": ("r/o", ("qps.av", "qps")), "rkb/q": ("rkb/o", ("qps.av", "qps")),
    "Mcpu/q": ("Mcpu/o", ("qps.av", "qps")),
}  # fmt: skip


def normalize_table(wide: pd.DataFrame, kb_per_mb: float = 1024.0) -> pd.DataFrame:
    """Recompute the normalised columns a seed table prints from its raw columns.

    ``wide``: one table from ``formats.insert_benchmark.wide_tables``. For every
    normalised column it has (r/o rkb/o wkb/o cs/o (us+sy)/o cs/i (us+sy)/i wkb/i r/q
    rkb/q Mcpu/q) the result has the same column, computed with ``per_op`` from the raw
    columns of the row (r/s, rmb/s, wmb/s, cs, us+sy or us and sy, cpu) and the
    denominator the seed used (qps, ips, qps.av or ips.av). ``engine`` is kept.
    """
    out = pd.DataFrame({"engine": wide["engine"]})
    cols = set(wide.columns)

    def col(name: str) -> Any:
        return wide[name] if name in cols else None

    cpu = col("us+sy") if "us+sy" in cols else col("cpu")
    if cpu is None and {"us", "sy"} <= cols:
        cpu = wide["us"] + wide["sy"]
    for name, (key, dens) in _SEED.items():
        if name not in cols:
            continue
        den = next((d for d in dens if d in cols), None)
        if den is None:
            raise ValueError(f"column {name!r} needs one of {dens} in the table")
        m = per_op(wide[den], r_s=col("r/s"), rmb_s=col("rmb/s"), wmb_s=col("wmb/s"),
                   cs=col("cs"), cpu=cpu, kb_per_mb=kb_per_mb)  # fmt: skip
        out[name] = m[key]
    return out


# --- system metrics over a time range ---------------------------------------------------


class SystemSamples:
    """vmstat's and iostat's samples, read once, to take the means of many windows
    from (a phase table's phases, or a comparison's thousand blocks): the rows whose
    interval ends in ``(start, end]`` (a row ends its interval), the since-boot first
    rows excluded; iostat summed over ``devices`` (default all)."""

    VMSTAT = (("cs", "cs"), ("us", "us"), ("sy", "sy"))
    IOSTAT = (("r/s", ("r/s",)), ("rkB/s", ("rkB/s", "kB_read/s")),
              ("wkB/s", ("wkB/s", "kB_wrtn/s")))

    def __init__(self, vmstat: pd.DataFrame | None = None,
                 iostat: pd.DataFrame | None = None,
                 devices: Iterable[str] | None = None) -> None:
        self._tables = []
        if vmstat is not None:
            self._tables.append(self._prepare(
                vmstat, "vmstat", "record it with vmstat -t",
                {k: c for k, c in self.VMSTAT if c in vmstat.columns}))
        if iostat is not None:
            from mongoprobe.formats.iostat import iostat_totals

            tot = iostat if "devices" in iostat.columns else iostat_totals(iostat, devices)
            self._tables.append(self._prepare(
                tot, "iostat", "record it with iostat -t",
                {k: next(c for c in cs if c in tot.columns) for k, cs in self.IOSTAT
                 if any(c in tot.columns for c in cs)}))

    @staticmethod
    def _prepare(df: pd.DataFrame, what: str, hint: str, cols: dict[str, str]) -> dict:
        df = df[df["sample"] > 0]  # sample 0 is the since-boot average
        t = df["time"].to_numpy(dtype=float)
        timed = not np.isnan(t).any()
        order = np.argsort(t, kind="stable") if timed else np.arange(len(t))
        return {"what": what, "hint": hint, "timed": timed, "time": t[order],
                "cols": {k: df[c].to_numpy(dtype=float)[order] for k, c in cols.items()}}

    def means(self, start: float | None = None, end: float | None = None) -> dict[str, Any]:
        """``cs``, ``us``, ``sy`` (vmstat) and ``r/s``, ``rkB/s``, ``wkB/s`` (iostat):
        their means over the window (all rows when both bounds are None), NaN where
        absent; ``samples_vmstat``/``samples_iostat`` count the rows used."""
        out: dict[str, Any] = {k: math.nan for k in ("cs", "us", "sy", "r/s", "rkB/s", "wkB/s")}
        out["samples_vmstat"] = out["samples_iostat"] = 0
        for tab in self._tables:
            n = len(tab["time"])
            i0, i1 = 0, n
            if start is not None or end is not None:
                if not tab["timed"]:
                    raise ValueError(f"{tab['what']} rows have no timestamps to cut a phase "
                                     f"from: {tab['hint']}")
                lo = -math.inf if start is None else start
                hi = math.inf if end is None else end
                i0, i1 = (int(np.searchsorted(tab["time"], x, "right")) for x in (lo, hi))
                i1 = max(i1, i0)
            out[f"samples_{tab['what']}"] = i1 - i0
            for k, a in tab["cols"].items():
                if i1 > i0:
                    out[k] = _mean(a[i0:i1])
        return out


def _mean(a: np.ndarray) -> float:
    """pandas' mean (NaN skipped; NaN when none is left), of a float array."""
    ok = ~np.isnan(a)
    n = int(ok.sum())
    return float(np.where(ok, a, 0.0).sum() / n) if n else math.nan


def system_means(vmstat: pd.DataFrame | None = None, iostat: pd.DataFrame | None = None,
                 start: float | None = None, end: float | None = None,
                 devices: Iterable[str] | None = None) -> dict[str, Any]:
    """Means over the rows whose interval ends in ``(start, end]`` (all rows when both are
    None), the since-boot first rows excluded: ``cs``, ``us``, ``sy`` from vmstat;
    ``r/s``, ``rkB/s``, ``wkB/s`` from iostat summed over ``devices`` (default all);
    ``samples_vmstat``/``samples_iostat`` count the rows used. Absent data gives NaN.
    (``SystemSamples`` reads the tables once for many windows.)"""
    return SystemSamples(vmstat, iostat, devices).means(start, end)
