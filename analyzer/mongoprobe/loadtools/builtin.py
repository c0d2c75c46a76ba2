"""Adapter for the built-in load (``mongoprobe load``; its format: ``mongoprobe/load/insert_workload.py``).

Phases from its markers, one interval row per interval line and operation (``insert``
counts documents, ``query`` queries), the client latency of its response-time
histograms (per insert command and per query: percentiles are bucket bounds), and its
summary's totals and dbStats size per phase.
"""

from __future__ import annotations

import math

import pandas as pd

from ..formats import mongoprobe_load
from . import (CLIENT_COLUMNS, INTERVAL_COLUMNS, PHASE_COLUMNS, PHASE_INFO_COLUMNS,
               TOTAL_COLUMNS, ToolOutput, frame, hist_percentiles)

NAME = "mongoprobe-load"
# the load's buckets are "less than" bounds, in microseconds (gt: 16 s or more)
_HI_US = (256.0, 1e3, 4e3, 16e3, 64e3, 256e3, 1e6, 4e6, 16e6, math.inf)


def refuses(out: pd.DataFrame) -> str | None:
    lines = out.loc[out["stream"] != "stderr", "text"].head(5)
    if any(s.startswith("### load ") for s in lines):
        return None
    return "no '### load uri=...' header in the first lines of stdout"


def read(out: pd.DataFrame, source: str) -> ToolOutput:
    stdout = out[out["stream"] != "stderr"]
    # the parser takes stamped or plain lines; hand it the plain text and its times
    lo = mongoprobe_load.parse_mongoprobe_load(list(stdout["text"]), source)
    iv, ph = lo.intervals, lo.phases
    interval = float(lo.header.get("interval", 1))
    rows, client, totals = [], [], []
    for p in ph.itertuples(index=False):
        sub = iv[iv["phase"] == p.name]
        for op, cum, rate in (("insert", "inserts", "ips"), ("query", "queries", "qps")):
            counts = sub[cum].diff().fillna(sub[cum]).astype("int64")
            rows += [[p.name, t, ln, op, int(c), float(r), ln >= interval / 2]
                     for t, ln, c, r in zip(sub["time"], sub["length_s"], counts, sub[rate])]
            hist = [int(sub[f"{op}_{b}"].sum()) for b in mongoprobe_load.BUCKETS]
            mx = float(sub[f"{op}_max_s"].max()) * 1e6 if len(sub) else math.nan
            h = hist_percentiles(_HI_US, hist, mx)
            if h["count"]:
                client.append([p.name, op, h["count"], math.nan, h["p50_us"], h["p95_us"],
                               h["p99_us"], h["max_us"], "bucket bound"])
        totals += [[p.name, "insert", float(p.inserts), float(p.seconds), float(p.ips_avg)],
                   [p.name, "query", float(p.queries), float(p.seconds), float(p.qps_avg)]]
    phases = frame([[p.name, p.start, p.end, NAME, ""]
                    for p in ph.itertuples(index=False)], PHASE_COLUMNS)
    info = frame([[p.name, p.db_size_bytes] for p in ph.itertuples(index=False)],
                 PHASE_INFO_COLUMNS)
    return ToolOutput(NAME, phases, frame(rows, INTERVAL_COLUMNS),
                      frame(client, CLIENT_COLUMNS), frame(totals, TOTAL_COLUMNS), info,
                      units={"insert": "documents"},
                      notes=["insert latency is per insert command (batch of "
                             f"{lo.header.get('batch', '1')} documents); percentiles are "
                             "the load's histogram bucket bounds"])
