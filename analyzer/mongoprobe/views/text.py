"""Text views for the shell (80 columns): the tables and histograms the commands print.

Each takes what a parser or an analysis returned (DataFrames, result objects) and
returns the text; the commands (``mongoprobe.cli``) print it. Latency histograms are
``latency.LatencySummary.render``; DTrace-style histograms ``histogram.render_quantize``.
"""

from __future__ import annotations

from mongoprobe.model import log2_histogram as histogram
from mongoprobe.run import procnet


# --- profilers: flush, syscount, threads -----------------------------------------------------


def _short(frame: str, width: int = 72) -> str:
    """Keep a frame on one line of the 80-column table: cut the middle, keep the end."""
    return frame if len(frame) <= width else frame[: 20] + "..." + frame[-(width - 23):]


def render_flush(res, pid: int | None = None, top_stacks: int = 3) -> str:
    """Text report of a :class:`formats.flush_output.FlushResult`."""
    out = []
    if res.calls.empty:
        out.append("no flush calls (msync, fsync, fdatasync, sync_file_range, syncfs)")
    for r in res.calls.itertuples(index=False):
        h = res.hist.get(r.syscall, histogram.empty())
        mx = int(h[h["count"] > 0]["hi"].max()) if histogram.total(h) else 0
        extra = f"   bytes {r.bytes:,}" if r.syscall in ("msync", "sync_file_range") else ""
        out.append(f"syscall = {r.syscall}   count {r.count}   avg {r.avg_ns / 1000:,.0f} us"
                   f"   max < {mx / 1000:,.0f} us   errors {r.errors}{extra}")
        if histogram.total(h):
            out.append(histogram.render_quantize(h, unit="ns").rstrip("\n"))
        out.append("")
    if not res.threads.empty:
        out.append(f"{'TID':>8} {'COMM':<16} {'SYSCALL':<16} {'CALLS':>8}")
        for r in res.threads.itertuples(index=False):
            out.append(f"{r.tid:>8} {r.comm[:16]:<16} {r.syscall:<16} {r.count:>8}")
        out.append("")
    if not res.fds.empty:
        out.append(f"{'SYSCALL':<16} {'FD':>5} {'CALLS':>8}  FILE")
        for r in res.fds.itertuples(index=False):
            path = procnet.fd_path(pid, int(r.fd)) if pid else ""
            out.append(f"{r.syscall:<16} {r.fd:>5} {r.count:>8}  {path}")
        out.append("")
    if not res.msync.empty:
        out.append(f"{'MSYNC ADDR':>18} {'LEN':>14} {'FLAGS':>6} {'CALLS':>8}")
        for r in res.msync.itertuples(index=False):
            out.append(f"{r.addr:>#18x} {r.len:>14,} {r.flags:>6} {r.count:>8}")
        out.append("")
    for name, g in res.stacks.groupby("syscall", sort=False):
        for r in g.head(top_stacks).itertuples(index=False):
            out.append(f"{name}: {r.count} calls from")
            out.extend(f"    {_short(f)}" for f in (r.frames or ("[no user stack]",)))
        if len(g) > top_stacks:
            rest = int(g["count"].iloc[top_stacks:].sum())
            out.append(f"{name}: {len(g) - top_stacks} more stacks ({rest} calls; "
                       "--json has all)")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def render_syscount(df, top: int = 0) -> str:
    rows = df if not top else df.head(top)
    out = [f"{'SYSCALL':<22} {'COUNT':>10} {'TIME(us)':>14} {'AVG(us)':>10} {'ERRORS':>8}"]
    for r in rows.itertuples(index=False):
        out.append(f"{r.syscall[:22]:<22} {r.count:>10} {r.time_ns / 1000:>14,.0f} "
                   f"{r.avg_ns / 1000:>10,.1f} {r.errors:>8}")
    if top and len(df) > top:
        out.append(f"({len(df) - top} more syscalls, {int(df['count'].iloc[top:].sum())} calls)")
    return "\n".join(out) + "\n"


def render_threads(rows: list[dict], when: str, dt_s: float, pid: int, top: int) -> str:
    out = [f"{when}  PID {pid}  interval {dt_s:.2f} s  threads {len(rows)}",
           f"{'TID':>8} {'NAME':<16} {'USR':>5} {'SYS':>5} {'CPU':>5} {'LAT':>5} {'SLP':>5}"
           f" {'VCX':>7} {'ICX':>7}"]
    for r in rows[: top or None]:
        usr = "-" if r["usr_pct"] is None else f"{r['usr_pct']:.1f}"
        sys_ = "-" if r["sys_pct"] is None else f"{r['sys_pct']:.1f}"
        out.append(f"{r['tid']:>8} {r['name'][:16]:<16} {usr:>5} {sys_:>5} "
                   f"{r['oncpu_pct']:>5.1f} {r['lat_pct']:>5.1f} {r['slp_pct']:>5.1f} "
                   f"{r['vcx']:>7} {r['icx']:>7}")
    if top and len(rows) > top:
        out.append(f"({len(rows) - top} more threads)")
    return "\n".join(out) + "\n"


# --- stacks: categories, top ---------------------------------------------------------------


def render_categories(t) -> str:
    """``categories.category_table`` for the shell: phase, category, samples, share."""
    out = [f"{'PHASE':<12} {'CATEGORY':<16} {'SAMPLES':>9} {'SHARE':>7}"]
    for r in t.itertuples(index=False):
        out.append(f"{r.phase[:12]:<12} {r.category[:16]:<16} {r.samples:>9} "
                   f"{100 * r.share:>6.1f}%")
    return "\n".join(out) + "\n"


def render_top(t) -> str:
    """``categories.top_functions`` for the shell: self and total share per function."""
    out = [f"{'SELF%':>6} {'TOTAL%':>6}  FUNCTION"]
    for r in t.itertuples(index=False):
        name = r.function if len(r.function) <= 64 else "..." + r.function[-61:]
        out.append(f"{r.self_pct:>6.2f} {r.total_pct:>6.2f}  {name}")
    return "\n".join(out) + "\n"


# --- parsed foreign formats ------------------------------------------------------------------


def frame_table(df) -> str:
    """The frame for a terminal: epoch-second columns as UTC date-times, 79 columns wide."""
    import pandas as pd

    out = df.copy()
    for c in ("time", "start", "end"):
        if c in out.columns and out[c].dtype.kind == "f" and out[c].notna().any():
            t = pd.to_datetime(out[c], unit="s", utc=True).dt.round("ms")
            out[c] = t.dt.strftime("%Y-%m-%d %H:%M:%S.%f").str[:-3].where(t.notna(), "")
    return out.to_string(index=False, line_width=79)


def quantize_printed(df) -> str:
    """Histograms of a quantize-format input, each rendered again as DTrace would."""
    from mongoprobe.formats.quantize import to_histograms

    out = []
    for (fmt, name, key), h in to_histograms(df).items():
        out.append(f"{fmt} {' '.join(p for p in (name, key) if p)}".rstrip())
        out.append(histogram.render_quantize(h, title="", unit=None))
    return "\n".join(out)
