"""The per-phase table of a recorded run: what the seeds' authors built by hand.

``phase_table(run)`` returns one row per phase (DataFrame, columns below) and
``phase_json(run)`` the ``mongoprobe phases --json`` shape of DESIGN's contract.

Throughput (the load tool's own numbers):
    name, start, end          phase and its wall-clock bounds (epoch seconds)
    ips_avg, ips_p95          inserts/s: mean, and the rate 95% of intervals reach
    qps_avg, qps_p95          queries/s: the same
    ops_avg                   ips_avg + qps_avg: the operations metrics are divided by
System (vmstat, iostat summed over devices; means of the samples inside the phase):
    r_s, rmb_s, wmb_s         storage reads/s, MB/s read and written
    cs, us, sy, us_sy         context switches/s, user/system CPU %
    r_per_op, rkb_per_op, wkb_per_op, cs_per_op, cpu_per_op   (seeds' r/o … (us+sy)/o)
    cpu_us_per_op             CPU microseconds per operation (us+sy over all CPUs)
Server (pidstat of the target; the last sample of the phase):
    rss_mb                    resident set size at phase end
    db_mb                     database size at phase end (the load's dbStats totalSize)
Latency (server side, from the probe's per-request events in the phase):
    latency_us                {command: {"count", "p50", "p95", "p99", "max"}} in µs
Client (the load's own response-time histograms, insert and query):
    client_ms                 {"insert"|"query": {"count", "p95_le_ms", "max_ms"}}: the
                              bucket bound 95% of operations stayed under, and the max
Network (when the run has a packet capture beside the latency probe):
    network_us                {"matched", "network_p50", "network_p99", "server_p50",
                               "server_p99", "transport_p50", "transport_p99"} in µs:
                              the capture's request-to-reply time, the probe's, and
                              their difference (transport + queueing), per request
Profile (when the run has on-CPU stacks and mongoprobe.stacks can read them):
    categories                {category: share of samples}
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from . import normalize

NUMERIC = ["ips_avg", "ips_p95", "qps_avg", "qps_p95", "ops_avg", "r_s", "rmb_s", "wmb_s",
           "cs", "us", "sy", "us_sy", "r_per_op", "rkb_per_op", "wkb_per_op", "cs_per_op",
           "cpu_per_op", "cpu_us_per_op", "rss_mb", "db_mb"]


def optional_table(getter):
    """``getter()``'s table, or None when it is empty, missing or unreadable: a
    collector that did not run leaves its columns NaN (or its report section out),
    and the manifest says why."""
    try:
        df = getter()
    except Exception:  # noqa: BLE001
        return None
    return df if df is not None and len(df) else None


def _latency(events: pd.DataFrame | None, start: float, end: float) -> dict:
    if events is None or not len(events):
        return {}
    ev = events[(events["time"] >= start) & (events["time"] < end)]
    out = {}
    for cmd, part in ev.groupby("command", sort=True):
        v = part["latency_ns"].to_numpy() / 1e3
        out[str(cmd)] = {"count": int(len(v)),
                         **{k: float(np.percentile(v, q)) for k, q in
                            (("p50", 50), ("p95", 95), ("p99", 99))},
                         "max": float(v.max())}
    return out


def _rss_mb(pidstat: pd.DataFrame | None, start: float, end: float) -> float:
    if pidstat is None or "RSS" not in pidstat.columns or "time" not in pidstat.columns:
        return math.nan
    p = pidstat[(pidstat["time"] > start) & (pidstat["time"] <= end)]
    if not len(p):
        return math.nan
    return float(p["RSS"].iloc[-1]) / 1024.0     # pidstat prints kB


# The load's response-time buckets (upper bounds, ms), as the insert benchmark prints them.
_BUCKETS_MS = {"256us": 0.256, "1ms": 1, "4ms": 4, "16ms": 16, "64ms": 64, "256ms": 256,
               "1s": 1000, "4s": 4000, "16s": 16000, "gt": math.inf}


def _client(intervals: pd.DataFrame | None, name: str) -> dict:
    """{"insert"|"query": {"count", "p95_le_ms", "max_ms"}} from the load's histograms:
    p95_le_ms is the bucket bound 95% of the phase's operations stayed under."""
    if intervals is None or "phase" not in intervals.columns:
        return {}
    part = intervals[intervals["phase"] == name]
    out = {}
    for k in ("insert", "query"):
        cols = [f"{k}_{b}" for b in _BUCKETS_MS]
        if not len(part) or not all(c in part for c in cols):
            continue
        counts = part[cols].sum().to_numpy()
        n = int(counts.sum())
        if not n:
            continue
        i = int(np.searchsorted(np.cumsum(counts), 0.95 * n))
        out[k] = {"count": n, "p95_le_ms": list(_BUCKETS_MS.values())[i],
                  "max_ms": float(part[f"{k}_max_s"].max() * 1e3)}
    return out


def _phases(run) -> pd.DataFrame:
    ph = run.phases.copy()
    end = run.manifest.get("end") or (ph["end"].max() if len(ph) else math.nan)
    ph["end"] = ph["end"].fillna(end)
    return ph


def phase_table(run) -> pd.DataFrame:
    ph = _phases(run)
    vm, io = optional_table(lambda: run.vmstat), optional_table(lambda: run.iostat)
    pid, ev = optional_table(lambda: run.pidstat), optional_table(lambda: run.events)
    intervals = optional_table(lambda: run.load_intervals)
    ncpu = (run.manifest.get("host") or {}).get("cpus")
    cats = _categories(run, ph)
    joined = _joined(run, ev)
    rows = []
    for p in ph.itertuples(index=False):
        r: dict[str, Any] = {"name": p.name, "start": float(p.start), "end": float(p.end)}
        for k in ("ips_avg", "ips_p95", "qps_avg", "qps_p95"):
            r[k] = float(getattr(p, k)) if hasattr(p, k) else math.nan
        r["ops_avg"] = np.nansum([r["ips_avg"], r["qps_avg"]])
        sm = normalize.system_means(vm, io, r["start"], r["end"])
        r.update({"r_s": sm["r/s"], "rmb_s": sm["rkB/s"] / 1024, "wmb_s": sm["wkB/s"] / 1024,
                  "cs": sm["cs"], "us": sm["us"], "sy": sm["sy"], "us_sy": sm["us"] + sm["sy"]})
        m = normalize.per_op(r["ops_avg"], r_s=sm["r/s"], rkb_s=sm["rkB/s"], wkb_s=sm["wkB/s"],
                             cs=sm["cs"], us=sm["us"], sy=sm["sy"], ncpu=ncpu)
        r.update({"r_per_op": m["r/o"], "rkb_per_op": m["rkb/o"], "wkb_per_op": m["wkb/o"],
                  "cs_per_op": m["cs/o"], "cpu_per_op": m["(us+sy)/o"],
                  "cpu_us_per_op": m["cpu_us/o"]})
        r["rss_mb"] = _rss_mb(pid, r["start"], r["end"])
        db = getattr(p, "db_size_bytes", math.nan)
        r["db_mb"] = float(db) / 2**20 if db is not None else math.nan
        r["latency_us"] = _latency(ev, r["start"], r["end"])
        r["client_ms"] = _client(intervals, p.name)
        r["categories"] = cats.get(p.name, {})
        r["network_us"] = _network(joined, r["start"], r["end"])
        rows.append(r)
    df = pd.DataFrame(rows, columns=["name", "start", "end", *NUMERIC, "latency_us",
                                     "client_ms", "network_us", "categories"])
    return df.astype({c: "float64" for c in NUMERIC})


def _joined(run, events: pd.DataFrame | None) -> pd.DataFrame | None:
    """The probe's events joined with the capture's request/reply pairs, if both exist."""
    path = run.file("pcap") if hasattr(run, "file") else None
    if path is None or events is None:
        return None
    try:
        from . import pcap
        port = (run.manifest.get("target") or {}).get("port")
        j = pcap.join_with_probe(pcap.pairs(pcap.messages(str(path), port)), events)
    except Exception:  # noqa: BLE001 - an unreadable capture leaves the columns out
        return None
    return j[j["matched"]]


def _network(joined: pd.DataFrame | None, start: float, end: float) -> dict:
    if joined is None:
        return {}
    j = joined[(joined["time"] >= start) & (joined["time"] < end)]
    if not len(j):
        return {}
    out = {"matched": int(len(j))}
    for name in ("network", "server", "transport"):
        v = j[f"{name}_ns"].to_numpy() / 1e3
        out[f"{name}_p50"] = float(np.percentile(v, 50))
        out[f"{name}_p99"] = float(np.percentile(v, 99))
    return out


def _categories(run, ph: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Share of on-CPU samples per category and phase, when the run has a profile."""
    try:
        from . import stacks
        return stacks.run_category_shares(run, ph)
    except Exception:  # noqa: BLE001 - no profile, or the stacks module lacks it
        return {}


def _clean(v: Any) -> Any:
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    return v


def phase_json(run) -> dict:
    t = phase_table(run)
    out = []
    for rec in t.to_dict(orient="records"):
        rec = {k: _clean(v) for k, v in rec.items()}
        rec["latency_us"] = {c: {k: v for k, v in d.items() if k != "count"}
                             for c, d in rec["latency_us"].items()}
        out.append(rec)
    return {"phases": out}


def render(t: pd.DataFrame) -> str:
    """Shell tables (< 80 columns): throughput, system per operation, latency."""
    def num(v, fmt):
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)

    lines = [f"{'phase':14s} {'ipsAvg':>8s} {'ipsP95':>8s} {'qpsAvg':>8s} {'qpsP95':>8s}"
             f" {'dbSize':>7s} {'rssSize':>7s}"]
    for r in t.itertuples():
        lines.append(f"{r.name[:14]:14s} {num(r.ips_avg, '8.0f')} {num(r.ips_p95, '8.0f')} "
                     f"{num(r.qps_avg, '8.0f')} {num(r.qps_p95, '8.0f')} "
                     f"{num(r.db_mb, '5.1f')}MB {num(r.rss_mb, '5.1f')}MB")
    lines += ["", f"{'phase':14s} {'r/s':>6s} {'rMB/s':>6s} {'wMB/s':>6s} {'r/o':>6s} "
                  f"{'rKB/o':>6s} {'wKB/o':>6s} {'cs/o':>6s} {'us+sy':>6s} {'cpuus/o':>8s}"]
    for r in t.itertuples():
        lines.append(f"{r.name[:14]:14s} {num(r.r_s, '6.0f')} {num(r.rmb_s, '6.1f')} "
                     f"{num(r.wmb_s, '6.1f')} {num(r.r_per_op, '6.2f')} "
                     f"{num(r.rkb_per_op, '6.1f')} {num(r.wkb_per_op, '6.1f')} "
                     f"{num(r.cs_per_op, '6.1f')} {num(r.us_sy, '6.1f')} "
                     f"{num(r.cpu_us_per_op, '8.0f')}")
    lines += ["", f"{'phase':14s} {'command':12s} {'count':>7s} {'p50us':>8s} {'p95us':>8s} "
                  f"{'p99us':>8s} {'maxus':>9s}"]
    for r in t.itertuples():
        for cmd, d in sorted(r.latency_us.items(), key=lambda kv: -kv[1]["count"]):
            lines.append(f"{r.name[:14]:14s} {cmd[:12]:12s} {d['count']:7d} {d['p50']:8.0f} "
                         f"{d['p95']:8.0f} {d['p99']:8.0f} {d['max']:9.0f}")
    return "\n".join(lines) + "\n"
