"""Adapter for the insert benchmark's Python client, ``iibench.py``.

Each progress header (``i_sec t_sec i_ips ...``) starts one run of iibench: one phase,
named ``iibench`` (``iibench-2`` ... when the output holds several). Its lines are
parsed by ``formats.iibench`` (progress lines, totals) and
``formats.insert_benchmark`` (the ``Insert rt:`` / ``Query rt:`` histograms).

Units. iibench counts rows: ``insert`` counts documents (each insert command carries
``rows_per_commit`` of them), so ips are documents per second as the insert benchmark
and its published tables count them, while the server sees insert commands. Its
response-time histogram is per insert command. ``query`` counts queries; iibench
advances its query count every 16 queries, so per-interval query rates are coarse
(the phase table shows the server's find rate beside them).

Times. A progress line's receive time is its interval's end; the phase starts one
``i_sec`` before the first line and ends at the last. Without receive times (a plain
capture) ``t_sec`` is the clock. The ``Totals: S secs`` line counts iibench's whole
run, which may be longer than its progress lines (it waits for its query thread).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..formats import iibench as fmt
from ..formats import insert_benchmark
from . import (CLIENT_COLUMNS, INTERVAL_COLUMNS, PHASE_COLUMNS, TOTAL_COLUMNS, ToolOutput,
               frame, hist_percentiles, number_repeats)

NAME = "iibench"
_OPS = {"Insert rt:": "insert", "Query rt:": "query"}


def refuses(out: pd.DataFrame) -> str | None:
    if any(fmt.is_header(s.strip()) for s in out["text"]):
        return None
    return "no iibench.py progress header 'i_sec t_sec i_ips ... retry_q'"


def read(out: pd.DataFrame, source: str) -> ToolOutput:
    texts = list(out["text"])
    received = out["time"].to_numpy(dtype=float)
    heads = [i for i, s in enumerate(texts) if fmt.is_header(s.strip())]
    cuts = [0] + heads[1:] + [len(texts)]
    names = number_repeats([NAME] * len(heads))
    phases, intervals, client, totals = [], [], [], []
    label = next((s.strip() for s in texts if s.startswith("Using Mongo")), "")
    clock_end = 0.0
    for k, name in enumerate(names):
        lo, hi = cuts[k], cuts[k + 1]
        part = "\n".join(texts[lo:hi]) + "\n"
        iv = fmt.parse_iibench(part, source)
        rows = iv["line"].to_numpy() - 1 + lo
        t_recv = received[rows] if len(rows) else np.array([])
        if len(iv) and np.isfinite(t_recv).all():
            t = t_recv
        else:
            t = clock_end + iv["t_sec"].to_numpy(dtype=float)
        start = float(t[0] - iv["i_sec"].iloc[0]) if len(iv) else math.nan
        end = float(t[-1]) if len(iv) else math.nan
        clock_end = end if len(iv) else clock_end
        phases.append([name, start, end, NAME, label])
        typical = float(iv["i_sec"].median()) if len(iv) else math.nan
        full = ((iv["i_sec"] >= 0.5 * typical) & (iv["i_sec"] <= 1.5 * typical)).to_numpy()
        for op, cum, rate in (("insert", "t_ins", "i_ips"), ("query", "t_query", "i_qps"),
                              ("delete", "t_del", "i_dps")):
            if op == "delete" and not iv[cum].any():
                continue
            counts = iv[cum].diff().fillna(iv[cum]).astype("int64")
            intervals += [[name, ti, ln, op, int(c), float(r), bool(f)] for ti, ln, c, r, f in
                          zip(t, iv["i_sec"], counts, iv[rate], full)]
        if insert_benchmark.is_insert_benchmark_hist(part):
            h = insert_benchmark.parse_insert_benchmark_hist(part, source)
            for (_, lab), rows_h in h.groupby(["hist", "label"], sort=True):
                op = _OPS.get(lab.strip())
                if op is None:
                    continue
                p = hist_percentiles(rows_h["hi_us"], rows_h["count"],
                                     float(rows_h["max_s"].iloc[0]) * 1e6)
                client.append([name, op, p["count"], math.nan, p["p50_us"], p["p95_us"],
                               p["p99_us"], p["max_us"], "bucket bound"])
        if fmt.is_iibench_summary(part):
            sm = fmt.parse_iibench_summary(part, source)
            v = {(w, m): x for w, m, x in zip(sm["what"], sm["metric"], sm["value"])}
            secs = v.get(("totals", "seconds"), math.nan)
            if ("totals", "rows") in v:
                totals.append([name, "insert", v[("totals", "rows")], secs,
                               v.get(("totals", "rows_per_s"), math.nan)])
            if ("query_thread", "queries") in v:
                totals.append([name, "query", v[("query_thread", "queries")], secs,
                               math.nan])
    return ToolOutput(NAME, frame(phases, PHASE_COLUMNS), frame(intervals, INTERVAL_COLUMNS),
                      frame(client, CLIENT_COLUMNS), frame(totals, TOTAL_COLUMNS),
                      units={"insert": "documents", "delete": "documents"},
                      notes=["iibench counts rows: ips are documents/s, its insert latency "
                             "is per insert command; its query count moves in steps of 16 "
                             "(coarse qps: compare the server's find rate)"])
