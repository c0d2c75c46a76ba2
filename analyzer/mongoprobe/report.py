"""One self-contained HTML report of a recorded run.

Everything is inside the file: PNG plots as data: URIs, flame graphs as inline SVG,
so the report can be mailed or attached to a ticket. Sections: the run (command,
target, tools, what went wrong), the per-phase tables, throughput over time with
phase bands, server-side latency heat maps and per-phase distributions for the
busiest commands, vmstat/iostat panels, and per-phase flame graphs with the
difference between two phases when the run has a profile.
"""

from __future__ import annotations

import base64
import html
import json
import math
import sys
import time
from pathlib import Path

import pandas as pd

from . import phases as phases_mod
from . import plots

CSS = """
body { font-family: sans-serif; margin: 2em; max-width: 1100px; color: #222; }
table { border-collapse: collapse; font-size: 13px; margin: 0.5em 0 1.5em; }
td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
th { background: #f0f0f0; } td.l, th.l { text-align: left; }
h2 { border-bottom: 1px solid #ddd; margin-top: 2em; }
img { max-width: 100%; display: block; margin: 0.5em 0; }
.note { color: #a33; } pre { background: #f7f7f7; padding: 0.5em; font-size: 12px; }
"""


class Progress:
    """A one-line progress indicator on a terminal (silent when stderr is not one)."""

    def __init__(self, total: int, what: str):
        self.total, self.what, self.n = total, what, 0
        self.tty = sys.stderr.isatty()

    def step(self, label: str) -> None:
        self.n += 1
        if self.tty:
            print(f"\r{self.what}: {self.n}/{self.total} {label[:40]:40s}", end="",
                  file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.tty:
            print(file=sys.stderr)


def _img(png: bytes, alt: str) -> str:
    return (f'<img alt="{html.escape(alt)}" '
            f'src="data:image/png;base64,{base64.b64encode(png).decode()}">')


def _table(df: pd.DataFrame, fmt: dict[str, str], left: set[str] = frozenset({"phase"})) -> str:
    head = "".join(f'<th class="{"l" if c in left else ""}">{html.escape(c)}</th>' for c in df)
    rows = []
    for rec in df.itertuples(index=False):
        cells = []
        for c, v in zip(df.columns, rec):
            if isinstance(v, float):
                s = "-" if math.isnan(v) else format(v, fmt.get(c, ".2f"))
            else:
                s = html.escape(str(v))
            cells.append(f'<td class="{"l" if c in left else ""}">{s}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def build(run, diff: tuple[str, str] | None = None, top_commands: int = 3) -> str:
    """The report's HTML text."""
    m = run.manifest
    t = phases_mod.phase_table(run)
    ph = t[["name", "start", "end"]]
    table = phases_mod.optional_table
    events, intervals = table(lambda: run.events), table(lambda: run.load_intervals)
    vm, io = table(lambda: run.vmstat), table(lambda: run.iostat)
    cmds = [] if events is None else list(events["command"].value_counts().index[:top_commands])
    prog = Progress(3 + 2 * len(cmds) + 2, "report")
    parts = [f"<h1>mongoprobe run: {html.escape(Path(run.path).name)}</h1>"]

    cmd = " ".join((m.get("command") or {}).get("argv") or [])
    tgt = m.get("target") or {}
    tools = ", ".join(f"{k} {v}" for k, v in (m.get("tools") or {}).items() if v)
    parts.append(
        "<h2>Run</h2><table>"
        + "".join(f'<tr><th class="l">{k}</th><td class="l">{html.escape(str(v))}</td></tr>'
                  for k, v in (("command", cmd),
                               ("target", f"{tgt.get('kind', '')} pid {tgt.get('pid')} "
                                          f"{tgt.get('exe') or ''} {tgt.get('version') or ''}"),
                               ("start", time.strftime("%Y-%m-%d %H:%M:%S",
                                                       time.gmtime(m.get("start") or 0)) + " UTC"),
                               ("duration", f"{(m.get('end') or 0) - (m.get('start') or 0):.1f} s"),
                               ("host", json.dumps(m.get("host"))),
                               ("kernel", (m.get("kernel") or {}).get("release")),
                               ("tools", tools)))
        + "</table>")
    trouble = [f"{n}: {c.get('status')} {c.get('error') or c.get('note') or ''}"
               for n, c in (m.get("collectors") or {}).items()
               if c.get("status") in ("died", "failed", "skipped")]
    if trouble:
        parts.append('<p class="note">' + "<br>".join(html.escape(x) for x in trouble) + "</p>")
    prog.step("tables")

    thr = t[["name", "ips_avg", "ips_p95", "qps_avg", "qps_p95", "db_mb", "rss_mb"]].rename(
        columns={"name": "phase"})
    sysm = t[["name", "r_s", "rmb_s", "wmb_s", "r_per_op", "rkb_per_op", "wkb_per_op", "cs",
              "us", "sy", "cs_per_op", "cpu_per_op", "cpu_us_per_op"]].rename(
        columns={"name": "phase", "r_s": "r/s", "rmb_s": "rMB/s", "wmb_s": "wMB/s",
                 "r_per_op": "r/o", "rkb_per_op": "rKB/o", "wkb_per_op": "wKB/o",
                 "cs_per_op": "cs/o", "cpu_per_op": "(us+sy)/o", "cpu_us_per_op": "CPU µs/op"})
    lat_rows = [{"phase": r.name, "command": c, "count": d["count"], "p50 µs": d["p50"],
                 "p95 µs": d["p95"], "p99 µs": d["p99"], "max µs": d["max"]}
                for r in t.itertuples() for c, d in r.latency_us.items()]
    parts.append("<h2>Phases</h2>"
                 + _table(thr, {"rss_mb": ".1f", "db_mb": ".1f"}, left={"phase"})
                 + _table(sysm, {"r/s": ".1f", "cs": ".0f", "CPU µs/op": ".0f",
                                 "(us+sy)/o": ".4f"}, left={"phase"}))
    cli_rows = [{"phase": r.name, "operation": k, "count": d["count"],
                 "p95 ≤ ms": d["p95_le_ms"], "max ms": d["max_ms"]}
                for r in t.itertuples() for k, d in r.client_ms.items()]
    if cli_rows:
        parts.append("<h3>Client-side latency (the load's own histograms)</h3>"
                     + _table(pd.DataFrame(cli_rows), {"p95 ≤ ms": "g", "max ms": ".1f"},
                              left={"phase", "operation"}))
    if lat_rows:
        parts.append("<h3>Server-side latency per command (probe)</h3>"
                     + _table(pd.DataFrame(lat_rows), {"p50 µs": ".0f", "p95 µs": ".0f",
                                                       "p99 µs": ".0f", "max µs": ".0f"},
                              left={"phase", "command"}))
    net = [{"phase": r.name, **r.network_us} for r in t.itertuples() if r.network_us]
    if net:
        parts.append("<h3>Network-side vs server-side latency (capture joined with probe, µs)"
                     "</h3><p>transport = network - server: the wire, the kernel and "
                     "queueing before the server read the request.</p>"
                     + _table(pd.DataFrame(net), {"matched": "d"}, left={"phase"}))
    cats = [{"phase": r.name, **{k: v * 100 for k, v in r.categories.items()}}
            for r in t.itertuples() if r.categories]
    if cats:
        parts.append("<h3>On-CPU samples by category (%)</h3>"
                     + _table(pd.DataFrame(cats).fillna(0.0), {}, left={"phase"}))

    parts.append("<h2>Throughput</h2>")
    if intervals is not None:
        parts.append(_img(plots.rates_over_time(intervals, ph, ["ips", "qps"]),
                          "throughput over time"))
    else:
        parts.append("<p>The load tool's output has no interval rates.</p>")
    prog.step("throughput")

    if cmds:
        parts.append("<h2>Server-side latency</h2>")
        for c in cmds:
            parts.append(_img(plots.latency_heatmap(events, ph, c), f"{c} latency heat map"))
            prog.step(f"{c} heat map")
            parts.append(_img(plots.latency_histograms(events, ph, c), f"{c} latency histogram"))
            prog.step(f"{c} histogram")

    parts.append("<h2>System</h2>")
    if vm is not None:
        parts.append(_img(plots.series_panels(vm[vm["sample"] > 0], ph,
                                              [("CPU %", ["us", "sy", "wa"]),
                                               ("cs/s", ["cs"]), ("run queue", ["r", "b"])],
                                              "vmstat"), "vmstat"))
    if io is not None:
        from .formats.iostat import iostat_totals
        tot = iostat_totals(io)
        tot = tot[tot["sample"] > 0] if "sample" in tot else tot
        parts.append(_img(plots.series_panels(tot, ph, [("IO/s", ["r/s", "w/s"]),
                                                        ("kB/s", ["rkB/s", "wkB/s"])],
                                              "iostat (all devices)"), "iostat"))
    prog.step("system")

    svgs = _flamegraphs(run, t, diff)
    if svgs:
        parts.append("<h2>Flame graphs</h2>")
        for title, svg in svgs:
            # inline in HTML: drop the XML prolog and DOCTYPE a standalone SVG carries
            svg = svg[svg.find("<svg"):] if "<svg" in svg else svg
            parts.append(f"<h3>{html.escape(title)}</h3><div>{svg}</div>")
    prog.step("flame graphs")
    prog.done()
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<title>mongoprobe {html.escape(Path(run.path).name)}</title>"
            f"<style>{CSS}</style></head><body>{''.join(parts)}</body></html>\n")


def _flamegraphs(run, t: pd.DataFrame, diff) -> list[tuple[str, str]]:
    """Per-phase (and diff) SVGs, when the run has stacks and the renderer is there."""
    try:
        from . import stacks
        return stacks.run_flamegraphs(run, t[["name", "start", "end"]], diff)
    except Exception:  # noqa: BLE001 - no profile in this run, or no renderer
        return []


def write(run, out: Path, diff: tuple[str, str] | None = None) -> Path:
    out = Path(out)
    out.write_text(build(run, diff))
    return out
