"""The heat maps: request latency over time for the report, and sub-second offset
heat maps (FlameScope's view) as PNG, for CPU samples and for request latency.

* ``latency_over_time``: x = seconds from ``t0`` (the report gives the recording's
  start, as every plot of it), y = log2 latency bucket, colour = requests: a
  periodic stall shows as a column reaching up.

The view: x = whole seconds since the first event, y = offset within that second
(``rows`` bands, 20 ms each by default, 0 at the bottom), colour = what happened in
that cell. Periodic work (a flush every N seconds, a timer every 100 ms, GC cycles)
shows up as stripes or repeated spots; a stall shows as a pale column.

* ``cpu_heatmap``: colour = CPU samples in the cell, from per-sample timestamps.
  ``perf script`` prints one per sample; bpftrace prints aggregated maps, so a
  bpftrace profile has the resolution of its time key (``time_ms`` keys give a real
  sub-second view; with one-second keys every sample sits at offset 0 -- see
  ``mongoprobe.formats.bpftrace_stacks``); DTrace aggregations have no time at all.
* ``latency_heatmap``: requests from the wire events table (``time``, wall-clock
  seconds of the first reply, and ``latency_ns``; ``elapsed_s`` when ``time`` is
  NaN) or from a run's event source in batches (any number of events): colour = the
  slowest request's latency in the cell (``stat="max"``; or ``"count"``, ``"mean"``,
  ``"sum"``), on a log scale.

Rendered with matplotlib's Agg backend (no display needed) at a fixed size
(``SIZE_PX``, 1200 x 480 by default) so reports and tests know what they get.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from mongoprobe.model.phase import phases_from

ROWS = 50                  # bands per second: 20 ms each
SIZE_PX = (1200, 480)
DPI = 100


class Cells:
    """The cells of a heat map fed batch by batch (times in seconds from any origin,
    values), so events that do not fit in memory are drawn from batches of them.
    ``stat``: count (events) | sum | max | mean of the values per cell (a CPU heat
    map sums its rows' sample counts; ``--stat count`` of latency counts requests,
    not their milliseconds). ``t0``: the origin (column 0 is the second from it);
    earlier times are left out."""

    def __init__(self, t0: float, rows: int = ROWS, stat: str = "count") -> None:
        if stat not in ("count", "sum", "max", "mean"):
            raise ValueError(f"unknown stat {stat!r} (count, sum, max, mean)")
        self.t0, self.rows, self.stat = float(t0), rows, stat
        self.n = np.zeros((rows, 0), dtype=np.int64)       # events per cell
        self.sum = np.zeros((rows, 0))                     # their values summed
        self.max = np.zeros((rows, 0))                     # their largest value (NaN: none)

    def feed(self, times, values=None) -> None:
        t = np.asarray(times, dtype="float64")
        v = np.ones_like(t) if values is None else np.asarray(values, dtype="float64")
        keep = ~np.isnan(t) & (t >= self.t0)
        t, v = t[keep] - self.t0, v[keep]
        if not len(t):
            return
        col = np.floor(t).astype(np.int64)
        row = np.minimum(((t - col) * self.rows).astype(np.int64), self.rows - 1)
        ncol = max(int(col.max()) + 1, self.n.shape[1])
        if ncol > self.n.shape[1]:
            more = ((0, 0), (0, ncol - self.n.shape[1]))
            self.n, self.sum = np.pad(self.n, more), np.pad(self.sum, more)
            self.max = np.pad(self.max, more, constant_values=np.nan)
        idx, size = row * ncol + col, self.rows * ncol
        self.n += np.bincount(idx, minlength=size).reshape(self.rows, ncol)
        self.sum += np.bincount(idx, weights=v, minlength=size).reshape(self.rows, ncol)
        if self.stat == "max":
            m = np.full(size, np.nan)
            order = np.argsort(v, kind="stable")
            m[idx[order]] = v[order]                # the last write per cell is the largest
            self.max = np.fmax(self.max, m.reshape(self.rows, ncol))

    def matrix(self) -> np.ndarray:
        """[rows, seconds]: the stat per cell (NaN where empty, for max and mean;
        count and sum are 0 there). ValueError when nothing was drawn."""
        if not self.n.any():
            raise ValueError("no timed events to draw (none with a timestamp after the "
                             "origin)")
        if self.stat == "count":
            return self.n.astype("float64")
        if self.stat == "sum":
            return self.sum
        if self.stat == "max":
            return self.max
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.n > 0, self.sum / self.n, np.nan)


def grid(times, values=None, rows: int = ROWS, stat: str = "count", t0: float | None = None):
    """(t0, matrix[rows, seconds]) of the values at ``times`` (seconds, any origin):
    :class:`Cells` fed once. ``t0``: by default the floor of the first time."""
    t = np.asarray(times, dtype="float64")
    if t0 is None:
        if np.isnan(t).all():
            raise ValueError("no timed events to draw (the input has no timestamps)")
        t0 = math.floor(np.nanmin(t))
    cells = Cells(t0, rows, stat)
    cells.feed(t, values)
    return cells.t0, cells.matrix()


def _plot(t0: float, m, out, title: str, label: str, log: bool, size=SIZE_PX,
          cmap: str = "YlOrRd") -> Path:
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.colors as mcolors
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    rows, ncol = m.shape
    fig = plt.figure(figsize=(size[0] / DPI, size[1] / DPI), dpi=DPI)
    ax = fig.add_axes((0.07, 0.12, 0.82, 0.78))
    cax = fig.add_axes((0.91, 0.12, 0.015, 0.78))
    data = np.ma.masked_invalid(np.where(m == 0, np.nan, m))     # empty cells: white
    finite = data.compressed()
    norm = None
    if log and len(finite) and finite.min() > 0:
        norm = mcolors.LogNorm(vmin=finite.min(), vmax=max(finite.max(), finite.min() * 1.0001))
    cm = matplotlib.colormaps[cmap].with_extremes(bad="white")
    mesh = ax.pcolormesh(np.arange(ncol + 1), np.linspace(0, 1000, rows + 1), data,
                         cmap=cm, norm=norm, shading="flat")
    ax.set_xlim(0, ncol)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(0, 1000)
    ax.set_xlabel(f"seconds since {_when(t0)}")
    ax.set_ylabel("offset within the second (ms)")
    ax.set_title(title, fontsize=11)
    fig.colorbar(mesh, cax=cax, label=label)
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp.png")
    fig.savefig(tmp, dpi=DPI, format="png")
    plt.close(fig)
    os.replace(tmp, out)
    return out


def _when(t0: float) -> str:
    """An epoch time as UTC; any other time base (perf's clock, bpftrace's elapsed) as
    its seconds."""
    if t0 > 1e9:
        import datetime as dt
        return dt.datetime.fromtimestamp(t0, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"{t0:.0f} s"


def cpu_heatmap(df, out, title: str = "CPU samples", rows: int = ROWS,
                size=SIZE_PX, t0: float | None = None) -> Path:
    """PNG of a stack-sample table (``mongoprobe.model.stack_samples.load(path, bucket=None)``, one
    row per sample time): colour = samples per cell."""
    t0, m = grid(df["time"].to_numpy(), df["count"].to_numpy(), rows, "sum", t0)
    return _plot(t0, m, out, title, "samples", log=False, size=size)


def latency_heatmap(events, out, title: str = "request latency", rows: int = ROWS,
                    stat: str = "max", size=SIZE_PX, t0: float | None = None) -> Path:
    """PNG of request latency over time: colour = ``stat`` of the latency (ms) of the
    requests whose reply fell in the cell. ``events``: a wire events table (``time``
    or ``elapsed_s``, and ``latency_ns``), or an ``event_store.EventSource`` -- a
    run's events read in batches, however many (``t0`` then from a first pass when
    not given)."""
    from mongoprobe.model.event_store import EventSource

    if isinstance(events, EventSource):
        if t0 is None:
            firsts = [np.nanmin(t) for t, _c, _ns in events.batches(latency=False,
                                                                     what="heat map origin")
                      if len(t) and not np.isnan(t).all()]
            if not firsts:
                raise ValueError("no timed events to draw (the input has no timestamps)")
            t0 = math.floor(min(firsts))
        cells = Cells(t0, rows, stat)
        for t, _code, ns in events.batches(what="heat map"):
            cells.feed(t, ns / 1e6)
        m = cells.matrix()
    else:
        t = events["time"].to_numpy(dtype="float64")
        if np.isnan(t).all() and "elapsed_s" in events:
            t = events["elapsed_s"].to_numpy(dtype="float64")
        t0, m = grid(t, events["latency_ns"].to_numpy(dtype="float64") / 1e6, rows, stat, t0)
    label = "requests" if stat == "count" else f"{stat} latency (ms)"
    return _plot(t0, m, out, title, label, log=stat != "count", size=size, cmap="viridis_r"
                 if stat != "count" else "YlOrRd")


def latency_over_time(hist, phases, command: str, t0: float, bucket_s: float = 1.0
                      ) -> bytes:
    """PNG bytes: one command's requests (``latencies`` hist table: ``time``,
    ``command``, ``bucket``, ``count``) per ``bucket_s`` of time from ``t0`` and log2
    latency band, the phases (``name``, ``start``, ``end``) marked where they start."""
    from mongoprobe.model import loglinear_buckets as loglinear
    from mongoprobe.views import plots

    plt = plots.plt
    h = hist[hist["command"] == command]
    fig, ax = plt.subplots(figsize=(9, 3))
    if len(h):
        x = np.maximum(((h["time"] - t0) // bucket_s).astype(int).to_numpy(), 0)
        mids = np.array([loglinear.midpoint(int(b)) for b in h["bucket"]])
        y = np.floor(np.log2(np.maximum(mids, 1))).astype(int)
        nx, ylo, yhi = x.max() + 1, y.min(), y.max() + 1
        cells = np.zeros((yhi - ylo, nx))
        np.add.at(cells, (y - ylo, x), h["count"].to_numpy())
        mesh = ax.pcolormesh(np.arange(nx + 1) * bucket_s, np.arange(ylo, yhi + 1),
                             np.ma.masked_equal(cells, 0), cmap="inferno_r", shading="flat")
        fig.colorbar(mesh, ax=ax, label="requests")
        ticks = range(ylo, yhi + 1, max(1, (yhi - ylo) // 6))
        ax.set_yticks(list(ticks), [plots.fmt_ns(2 ** t) for t in ticks])
    for p in phases_from(phases):
        ax.axvline(p.start - t0, color="#3060a0", lw=0.8)
        ax.text(p.start - t0, 1.0, p.name, transform=ax.get_xaxis_transform(),
                fontsize=8, va="bottom")
    ax.set_xlim(left=0)
    ax.set_xlabel("seconds")
    ax.set_ylabel("server latency")
    ax.set_title(f"{command}: server-side latency over time", pad=14)
    return plots.png(fig)


def png_size(path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    with open(path, "rb") as fh:
        head = fh.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG")
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
