"""The stack-sample table every stack format parses into, and the registry's parse
functions of the stack formats (perf script, bpftrace stack maps, DTrace stacks,
folded).

Each stack format module has ``is_format(head)`` and a streaming
``read(fh, source, stats[, meta])`` yielding samples ``(time, pid, tid, comm, frames,
count, weight)``; :func:`aggregate` turns samples into the table (columns documented
in ``mongoprobe.model.stack_samples``), one row per (time bucket, pid, tid, comm, stack).
"""

from __future__ import annotations

import inspect
import io
import math
from typing import Iterable, Iterator

from . import bpftrace_stacks, dtrace_stacks, folded, perf_script
from .source import read_input

COLUMNS = ["time", "second", "pid", "tid", "comm", "frames", "count", "weight"]


def table(rows: Iterable[tuple]):
    """Rows ``(time, pid, tid, comm, frames, count, weight)`` -> the typed table."""
    import numpy as np
    import pandas as pd

    df = pd.DataFrame(list(rows), columns=["time", "pid", "tid", "comm", "frames",
                                           "count", "weight"])
    df["time"] = df["time"].astype("float64")
    t = df["time"].to_numpy()
    df.insert(1, "second", np.where(np.isnan(t), -1, np.floor(np.nan_to_num(t, nan=-1.0)))
              .astype("int64"))
    for c in ("pid", "tid", "count", "weight"):
        df[c] = df[c].astype("int64")
    for c in ("comm", "frames"):
        df[c] = df[c].astype(str)
    df = df.sort_values(["time", "pid", "tid", "comm", "frames"], na_position="first",
                        kind="stable").reset_index(drop=True)
    return df[COLUMNS]


def aggregate(samples: Iterable[tuple], bucket: float | None = 1.0):
    """Samples -> the table, summed per (time bucket of ``bucket`` seconds, pid, tid,
    comm, frames); ``bucket=None`` keeps every sample time."""
    agg: dict[tuple, list[int]] = {}
    for t, pid, tid, comm, frames, count, weight in samples:
        if bucket and t == t:
            t = math.floor(t / bucket) * bucket
        key = (t if t == t else None, pid, tid, comm, frames)
        a = agg.get(key)
        if a is None:
            agg[key] = [count, weight]
        else:
            a[0] += count
            a[1] += weight
    return table((k[0], *k[1:], v[0], v[1]) for k, v in agg.items())


def stream(read, fh, source: str, stats: dict | None, meta: dict | None) -> Iterator[tuple]:
    """A format's samples from its ``read``; ``meta`` goes to the readers that fill one."""
    if "meta" in inspect.signature(read).parameters:
        return read(fh, source, stats, meta)
    return read(fh, source, stats)


def _parse(module, text_or_path, source: str | None):
    text, src = read_input(text_or_path, source)
    stats: dict = {}
    meta: dict = {}
    df = aggregate(stream(module.read, io.StringIO(text), src, stats, meta), bucket=None)
    df.attrs.update(format=module.NAME, source=src, stats=stats, meta=meta)
    return df


def parse_perf_script(text_or_path, source: str | None = None):
    return _parse(perf_script, text_or_path, source)


def parse_bpftrace_stacks(text_or_path, source: str | None = None):
    return _parse(bpftrace_stacks, text_or_path, source)


def parse_dtrace_stacks(text_or_path, source: str | None = None):
    return _parse(dtrace_stacks, text_or_path, source)


def parse_folded(text_or_path, source: str | None = None):
    return _parse(folded, text_or_path, source)
