"""matplotlib figures of a recorded run, each from documented DataFrame columns.

Every function returns PNG bytes (Agg backend, no display needed) so the report
can embed them, and draws the phases as shaded bands with their names, so a
stall can be read against the benchmark step that caused it.

Inputs (times are wall-clock seconds since the epoch):

    phases     name, start, end (or ``model.phase.Phase``s)
    rates      time, and any rate columns to draw (e.g. ips, qps)
    events     time, command, latency_ns              (wire_events table)

Heat maps (latency over time, sub-second offsets) are in ``mongoprobe.views.heatmap``.
    series     time, and numeric columns (vmstat, iostat summed, pidstat)
"""

from __future__ import annotations

import io
import math

import matplotlib

matplotlib.use("Agg")   # files only: never a display

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from mongoprobe.model.phase import phases_from  # noqa: E402

_BAND_COLOURS = ["#e8eef7", "#f7efe6"]


def png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _bands(ax, phases: pd.DataFrame, t0: float) -> None:
    for i, p in enumerate(phases_from(phases)):
        ax.axvspan(p.start - t0, p.end - t0, color=_BAND_COLOURS[i % 2], zorder=0)
        ax.text((p.start + p.end) / 2 - t0, 1.0, p.name, transform=ax.get_xaxis_transform(),
                ha="center", va="bottom", fontsize=8)


def _t0(phases: pd.DataFrame, *frames: pd.DataFrame, t0: float | None = None) -> float:
    """The time origin: ``t0`` when given (the report gives every plot the recording's
    start, so their axes agree), else the earliest time drawn."""
    if t0 is not None:
        return float(t0)
    starts = [min(p.start for p in phases_from(phases))] if len(phases) else []
    starts += [f["time"].min() for f in frames if len(f)]
    return float(min(starts)) if starts else 0.0


def rates_over_time(rates: pd.DataFrame, phases: pd.DataFrame, columns: list[str],
                    title: str = "throughput", ylabel: str = "ops/s",
                    dashed: list[str] = (), t0: float | None = None) -> bytes:
    """Rate columns over time (``dashed``: drawn dashed, e.g. the server's side)."""
    t0 = _t0(phases, rates, t0=t0)
    fig, ax = plt.subplots(figsize=(9, 3))
    _bands(ax, phases, t0)
    for c in list(columns) + list(dashed):
        if c in rates:
            ax.plot(rates["time"] - t0, rates[c], label=c, lw=1.2,
                    ls="--" if c in dashed else "-")
    ax.set_xlabel("seconds")
    ax.set_ylabel(ylabel)
    ax.set_title(title, pad=14)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_ylim(bottom=0)
    return png(fig)


def series_panels(series: pd.DataFrame, phases: pd.DataFrame,
                  panels: list[tuple[str, list[str]]], title: str,
                  t0: float | None = None) -> bytes:
    """Stacked panels sharing the time axis: [(ylabel, [columns])...]."""
    t0 = _t0(phases, series, t0=t0)
    panels = [(y, [c for c in cols if c in series]) for y, cols in panels]
    panels = [(y, cols) for y, cols in panels if cols]
    fig, axes = plt.subplots(max(len(panels), 1), 1, figsize=(9, 1.8 * max(len(panels), 1)),
                             sharex=True, squeeze=False)
    for ax, (ylabel, cols) in zip(axes[:, 0], panels):
        _bands(ax, phases, t0)
        for c in cols:
            ax.plot(series["time"] - t0, series[c], label=c, lw=1)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.legend(loc="upper right", fontsize=7)
    axes[0, 0].set_title(title, pad=14)
    axes[-1, 0].set_xlabel("seconds")
    return png(fig)


def latency_histograms(lat, phases: pd.DataFrame, command: str) -> bytes:
    """Log2 latency distribution of one command (``mongoprobe.model.latencies.Latencies``),
    one line per phase."""
    from mongoprobe.model import loglinear_buckets as loglinear

    fig, ax = plt.subplots(figsize=(9, 3))
    for p in phases_from(phases):
        h = lat.histogram(command, p.start, p.end)
        if not h:
            continue
        k = np.floor(np.log2([max(loglinear.midpoint(b), 1) for b in h])).astype(int)
        # every log2 band between the lowest and the highest, the empty ones at 0, so a
        # line never joins two bands across an empty one
        vals = np.arange(k.min(), k.max() + 1)
        counts = np.bincount(k - k.min(), weights=list(h.values()), minlength=len(vals))
        n = int(sum(h.values()))
        ax.plot(vals, counts / counts.sum(), marker="o", lw=1, label=f"{p.name} (n={n})")
    ax.set_xlabel("server latency (log2 buckets)")
    lo, hi = ax.get_xlim()
    ticks = range(math.ceil(lo), math.floor(hi) + 1)
    ax.set_xticks(list(ticks), [fmt_ns(2 ** t) for t in ticks], fontsize=7)
    ax.set_ylabel("share of requests")
    ax.set_title(f"{command}: latency distribution per phase")
    if ax.lines:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no requests inside the phases", transform=ax.transAxes,
                ha="center")
        ax.set_xticks([])
    return png(fig)


def fmt_ns(ns: float) -> str:
    """A latency in nanoseconds as a short label (4.1ms, 250us)."""
    for unit, div in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= div:
            return f"{ns / div:.3g}{unit}"
    return f"{ns:.3g}ns"


def tree_cpu(tree: pd.DataFrame, phases: pd.DataFrame, t0: float | None = None) -> bytes:
    """The server's and the load tool's CPU and run-queue time per second
    (``treestat.read``), and their sockets' queued bytes: the verdict's USE figures."""
    wide = tree.pivot_table(index="time", columns="role",
                            values=["cpu_s", "runq_s", "sendq_bytes"], aggfunc="sum")
    wide.columns = [f"{role} {what.split('_')[0]}" for what, role in wide.columns]
    for c in list(wide.columns):
        if c.endswith(("cpu", "runq")):
            wide[c] = wide[c] / tree.groupby("time")["seconds"].max()
    wide = wide.reset_index()
    return series_panels(wide, phases,
                         [("on CPU (cores)", ["server cpu", "tool cpu"]),
                          ("waiting for CPU (s/s)", ["server runq", "tool runq"]),
                          ("socket send queues (B)", ["server sendq", "tool sendq"])],
                         "server and load tool: CPU, run queue, socket queues", t0=t0)
