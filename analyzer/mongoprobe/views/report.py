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
import math
import re
import sys
import time
from pathlib import Path

import pandas as pd

from mongoprobe.wire import error_codes as errorcodes
from mongoprobe.model.phase import phases_from
from mongoprobe.views import heatmap, plots
from mongoprobe.analysis import traffic_phases as traffic
from mongoprobe.analysis import phase_table as phases_mod

CSS = """
body { font-family: sans-serif; margin: 2em; max-width: 1100px; color: #222; }
table { border-collapse: collapse; font-size: 13px; margin: 0.5em 0 1.5em; }
td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
th { background: #f0f0f0; } td.l, th.l { text-align: left; }
h2 { border-bottom: 1px solid #ddd; margin-top: 2em; }
img { max-width: 100%; display: block; margin: 0.5em 0; }
.note { color: #a33; } .split { color: #666; font-size: 12px; } pre { background: #f7f7f7; padding: 0.5em; font-size: 12px; }
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


def _bound(v: float, stat: str, how: str | None):
    """A client figure; a histogram's percentile is a bucket bound: '≤ N'."""
    if how == "bucket bound" and stat in ("p50", "p95", "p99"):
        return f"≤ {v:.0f}"
    return float(v)


def _kv_table(rows: list[tuple[str, str]]) -> str:
    return ("<table>" + "".join(f'<tr><th class="l">{html.escape(k)}</th>'
                                f'<td class="l">{html.escape(str(v))}</td></tr>'
                                for k, v in rows) + "</table>")


def _run_section(run) -> str:
    m = run.manifest
    cmd = " ".join((m.get("command") or {}).get("argv") or [])
    tgt = m.get("target") or {}
    host = m.get("host") or {}
    tools = ", ".join(f"{k} {v}" for k, v in (m.get("tools") or {}).items() if v)
    return "<h2>Run</h2>" + _kv_table([
        ("command", cmd),
        ("target", f"{tgt.get('kind', '')} pid {tgt.get('pid')} {tgt.get('exe') or ''} "
                   f"{tgt.get('version') or ''}"),
        ("start", time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(m.get("start") or 0))
         + " UTC"),
        ("duration", f"{(m.get('end') or 0) - (m.get('start') or 0):.1f} s"),
        ("host", f"{host.get('hostname', '')}: {host.get('cpus', '?')} CPUs "
                 f"({host.get('cpu_model', '')}), {(host.get('mem_total_kb') or 0) / 2**20:.1f}"
                 f" GiB, {host.get('os', '')}"),
        ("kernel", (m.get("kernel") or {}).get("release")),
        ("tools", tools)])


def _lost_section(lost: dict) -> str:
    from mongoprobe.run.run_folder import lost_line
    text = lost_line(lost)
    bad = (lost.get("probe") is None or any(lost["probe"].values()) or lost["collectors"]
           or any(st.get("unreadable") or st["empty"] or st["lookup_failed"]
                  or (st["samples"] is not None and st["folded"] is not None
                      and st["samples"] > st["folded"])
                  for st in (lost.get("stacks") or {}).values()))
    cls = ' class="note"' if bad else ""
    return f"<p{cls}>" + "<br>".join(html.escape(x) for x in text.splitlines()) + "</p>"


def build(run, diff: tuple[str, str] | None = None, phases: pd.DataFrame | None = None,
          top_commands: int = 3) -> str:
    """The report's HTML text; ``phases`` replaces the tool's own (``--phases``)."""
    # the throughput plot reads the events' per-second counts: in the same scan
    t = phases_mod.phase_table(run, phases, per_second=True)
    ph = t[["name", "start", "end"]]
    if diff is not None:
        unknown = [n for n in diff if n not in set(ph["name"])]
        if unknown:
            raise phases_mod.PhaseError(f"--diff: no phase {', '.join(map(repr, unknown))} "
                                        f"in this run; its phases: {', '.join(ph['name'])}")
    t0 = float(run.manifest.get("start") or ph["start"].min())
    table = phases_mod.optional_table
    lat = phases_mod.server_latency(run)
    vm, io = table(lambda: run.vmstat), table(lambda: run.iostat)
    cmds = [] if lat is None else [
        c for c in lat.totals.groupby("command")["count"].sum().sort_values(
            ascending=False, kind="stable").index if c not in traffic.ADMIN_COMMANDS
    ][:top_commands]
    prog = Progress(3 + 2 * len(cmds) + 2, "report")
    tool = phases_mod.tool_json(run, phases)
    parts = [f"<h1>mongoprobe run: {html.escape(Path(run.path).name)}</h1>",
             None,      # the verdict, once the sections its evidence links to are known
             _run_section(run), _lost_section(run.lost)]
    parts.append("<p>" + "<br>".join(html.escape(x) for x in
                                     phases_mod.tool_line(tool).splitlines()) + "</p>")
    prog.step("tables")

    thr = t[["name", "tool", "ops_avg", "ops_p95", "ips_avg", "ips_p95", "qps_avg", "qps_p95",
             "db_mb", "rss_mb"]].rename(columns={"name": "phase", "db_mb": "dbSize MB",
                                                  "rss_mb": "rssSize MB"})
    probe = run.lost["probe"] is not None
    op_rows = [{"phase": r.name, "operation": op, "counts": r.rate_units.get(op, "operations"),
                "rate/s": v, "p95/s": r.rates_p95.get(op, math.nan),
                "server command": srv[0] or "-", "server req/s": srv[1]}
               for r in t.itertuples() for op, v in r.rates.items()
               for srv in [phases_mod.server_rate(r.server_rates, op, probe)]]
    sysm = t[["name", "r_s", "rmb_s", "wmb_s", "r_per_op", "rkb_per_op", "wkb_per_op", "cs",
              "us", "sy", "cs_per_op", "cpu_per_op", "cpu_us_per_op"]].rename(
        columns={"name": "phase", "r_s": "r/s", "rmb_s": "rMB/s", "wmb_s": "wMB/s",
                 "r_per_op": "r/o", "rkb_per_op": "rKB/o", "wkb_per_op": "wKB/o",
                 "cs_per_op": "cs/o", "cpu_per_op": "(us+sy)/o", "cpu_us_per_op": "CPU µs/op"})
    lat_rows = [{"phase": r.name, "command": c, "count": d["count"], "avg µs": d["avg"],
                 "p50 µs": d["p50"], "p95 µs": d["p95"], "p99 µs": d["p99"], "max µs": d["max"]}
                for r in t.itertuples() for c, d in r.latency_us.items()]
    parts.append("<h2>Phases</h2>"
                 + _table(thr, {"rssSize MB": ".1f", "dbSize MB": ".1f", "ops_avg": ".1f",
                                "ops_p95": ".1f", "ips_avg": ".1f", "ips_p95": ".1f",
                                "qps_avg": ".1f", "qps_p95": ".1f"}, left={"phase", "tool"}))
    if op_rows:
        parts.append("<h3>Per operation: the tool's rate and the server's for its command</h3>"
                     + _table(pd.DataFrame(op_rows), {"rate/s": ".1f", "p95/s": ".1f",
                                                       "server req/s": ".1f"},
                              left={"phase", "operation", "counts", "server command"}))
    parts.append(_table(sysm, {"r/s": ".1f", "cs": ".0f", "CPU µs/op": ".0f",
                               "(us+sy)/o": ".4f"}, left={"phase"}))
    vs_rows = [{"phase": r.name, "operation": op, "command": d["command"], "stat": k,
                "client µs": _bound(d["client"][k], k, r.client_how.get(op)),
                "server µs": d["server"][k],
                # no count difference when the server's figures cover whole seconds
                "client − server µs": float(d["diff"].get(k, math.nan)),
                "client figure": r.client_how.get(op, "")}
               for r in t.itertuples() for op, d in r.client_vs_server.items()
               for k in phases_mod.STATS if d["client"].get(k) is not None]
    if vs_rows:
        parts.append("<h3>Client (the tool's own) vs server (the probe) latency</h3>"
                     "<p>The difference is what the server does not see: the network, the "
                     "client's queueing and its driver. Histogram figures (bucket bound) "
                     "are the upper bound of the bucket the percentile is in."
                     + (f" A negative difference: {html.escape(phases_mod.RANK_NOTE)}."
                        if phases_mod.negative_percentile_diff(t) else "")
                     + (f" A negative difference: {html.escape(phases_mod.COVER_NOTE)}."
                        if phases_mod.negative_diff_other_requests(t) else "") + "</p>"
                     + _table(pd.DataFrame(vs_rows), {"client µs": ".0f", "server µs": ".0f",
                                                      "client − server µs": ".0f"},
                              left={"phase", "operation", "command", "stat",
                                    "client figure"}))
    if lat_rows:
        parts.append("<h3>Server-side latency per command (probe)</h3>"
                     + _table(pd.DataFrame(lat_rows), {k: ".0f" for k in (
                         "avg µs", "p50 µs", "p95 µs", "p99 µs", "max µs")},
                              left={"phase", "command"}))
    fail_rows = [{"phase": r.name, "command": c, "failed": sum(codes.values()),
                  "codes": errorcodes.summary({int(k): n for k, n in codes.items()})}
                 for r in t.itertuples() for c, codes in sorted(r.failed_replies.items())]
    if fail_rows:
        parts.append("<h3>Failed replies (ok: 0) per command (probe)</h3>"
                     + _table(pd.DataFrame(fail_rows), {"failed": "d"},
                              left={"phase", "command", "codes"}))
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
    parts.append(_throughput_plot(run, ph, phases, t0))
    prog.step("throughput")

    if cmds:
        parts.append("<h2 id='latency'>Server-side latency</h2>")
        for c in cmds:
            parts.append(_img(heatmap.latency_over_time(lat.hist, ph, c, t0),
                              f"{c} latency heat map"))
            prog.step(f"{c} heat map")
            if any(lat.histogram(c, p.start, p.end) for p in phases_from(ph)):
                parts.append(_img(plots.latency_histograms(lat, ph, c),
                                  f"{c} latency histogram"))
            else:
                # a setup command (createIndexes before the first phase): no panel
                parts.append(f"<p>{html.escape(c)}: no requests inside the phases "
                             "(the heat map shows when it ran).</p>")
            prog.step(f"{c} histogram")

    parts.append(_use_section(run, t, ph, t0))
    parts.append("<h2 id='system'>System</h2>")
    if vm is not None:
        parts.append(_img(plots.series_panels(vm[vm["sample"] > 0], ph,
                                              [("CPU %", ["us", "sy", "wa"]),
                                               ("cs/s", ["cs"]), ("run queue", ["r", "b"])],
                                              "vmstat", t0=t0), "vmstat"))
    if io is not None:
        from mongoprobe.formats.iostat import iostat_totals
        tot = iostat_totals(io)
        tot = tot[tot["sample"] > 0] if "sample" in tot else tot
        parts.append(_img(plots.series_panels(tot, ph, [("IO/s", ["r/s", "w/s"]),
                                                        ("kB/s", ["rkB/s", "wkB/s"])],
                                              "iostat (all devices)", t0=t0), "iostat"))
    prog.step("system")

    svgs = _flamegraphs(run, ph, diff)
    if svgs:
        parts.append("<h2 id='flamegraphs'>Flame graphs</h2>")
        for title, svg in svgs:
            parts.append(f"<h3>{html.escape(title)}</h3>{svg_frame(svg, title)}")
    prog.step("flame graphs")
    prog.done()
    anchors = set(re.findall(r"<h2 id='([a-z]+)'", "".join(parts[2:])))
    parts[1] = _verdict_section(t.attrs.get("verdicts") or [], anchors)
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<title>mongoprobe {html.escape(Path(run.path).name)}</title>"
            f"<style>{CSS}</style></head><body>{''.join(parts)}</body></html>\n")


VERDICT_CSS = {"none": "#5a5", "load-tool": "#c80", "network": "#c80"}


def _verdict_section(vs, anchors: set[str]) -> str:
    """What limits each phase, first: the limiter, its share and evidence (each line
    linked to the section that shows it), the others ranked, what is missing."""
    if not vs:
        return ""
    rows = []
    for v in vs:
        lim = v.limiter
        name = lim.resource if v.decided else "undecided"
        colour = VERDICT_CSS.get(lim.resource, "#b33") if v.decided else "#888"
        from mongoprobe.analysis.limiter import link_for, request_line
        links = [link_for(e, lim.resource) for e in lim.evidence]
        ev = "<br>".join(f"<a href='#{a}'>{html.escape(e)}</a>" if a in anchors
                         else html.escape(e) for e, a in zip(lim.evidence, links))
        if request_line(v.time):
            ev += f"<br><span class='split'>{html.escape(request_line(v.time))}</span>"
        if v.missing and v.decided:
            ev += "<br><span class='note'>missing: " + html.escape("; ".join(v.missing)) \
                + "</span>"
        rest = ", ".join(f"{x.resource} {x.share:.2f}" for x in v.limits
                         if x is not lim and x.share >= 0.005)
        rows.append(f"<tr><td class='l'><b>{html.escape(v.phase)}</b></td>"
                    f"<td class='l' style='color:{colour};white-space:nowrap'>"
                    f"<b>{html.escape(name)}</b></td>"
                    f"<td>{lim.share:.2f}</td><td class='l'>{ev}</td>"
                    f"<td class='l'>{html.escape(rest)}</td></tr>")
    return ("<h2 id='verdict'>What limits each phase</h2>"
            "<p>The share of the benchmark's thread time each resource holds: the server's "
            "threads on or waiting for a CPU, off-CPU in disk, lock or downstream waits, and "
            "the load tool's threads outside the server (its CPU, else the network when "
            "sockets' queues hold bytes). The limiter is the saturated resource with the "
            "largest share; <i>none</i> when nothing is saturated.</p>"
            "<table><tr><th class='l'>phase</th><th class='l'>limited by</th><th>share</th>"
            "<th class='l'>evidence</th><th class='l'>then</th></tr>"
            + "".join(rows) + "</table>")


def _use_section(run, t: pd.DataFrame, ph: pd.DataFrame, t0: float) -> str:
    """The verdict's figures: the server's and the tool's CPU per second, and the
    server's off-CPU time by reason per phase."""
    from mongoprobe.run.treestat import read
    out = []
    p = run.file("treestat")
    if p is not None:
        out.append("<h2 id='cpu'>Server and load tool: CPU and queues</h2>"
                   + _img(plots.tree_cpu(read(p), ph, t0), "server and load tool CPU"))
    vs = t.attrs.get("verdicts") or []
    rows = [{"phase": v.phase, **{k: x for k, x in sorted(v.figures.off.items())}}
            for v in vs if v.figures is not None and v.figures.off is not None]
    if rows:
        tops = {(v.phase, k): f"{n} ({s:.0%})" for v in vs if v.figures is not None
                for k, (n, s) in v.figures.off_top.items()}
        out.append("<h2 id='offcpu'>Server threads off-CPU, by reason (thread-s/s)</h2>"
                   "<p>From offcpu.bt's stacks: disk (fsync, I/O waits), lock (SQLite's busy "
                   "handler, futex locks), downstream (another process's socket), preempted "
                   "(run-queue wait, counted with the CPU), idle (waiting for work).</p>"
                   + _table(pd.DataFrame(rows).fillna(0.0), {}, left={"phase"}))
        if tops:
            out.append("<p>Where: " + "; ".join(
                html.escape(f"{ph_} {k}: {w}") for (ph_, k), w in tops.items()) + "</p>")
    return "".join(out)


def _throughput_plot(run, ph: pd.DataFrame, phases, t0: float) -> str:
    """The tool's per-interval rates per operation (solid) and the server's for the
    same command (dashed); the server's per-command rates when the tool has none."""
    iv = phases_mod.interval_table(run, phases)
    if not len(iv):
        return "<p>Neither the load tool's output nor a latency probe gives rates.</p>"
    if (iv["op"] == "").all():
        wide = iv.pivot_table(index="time", columns="command", values="server_rate",
                              aggfunc="sum").fillna(0.0).reset_index()
        cols = [c for c in wide.columns if c != "time" and c not in traffic.ADMIN_COMMANDS]
        return _img(plots.rates_over_time(wide, ph, cols, title="server requests/s "
                                          "(the tool prints no rates)", t0=t0),
                    "server requests over time")
    wide = iv.pivot_table(index="time", columns="op", values="rate", aggfunc="sum"
                          ).reset_index()
    srv = iv[iv["command"] != ""].pivot_table(index="time", columns="command",
                                               values="server_rate", aggfunc="first")
    srv.columns = [f"server {c}" for c in srv.columns]
    wide = wide.merge(srv.reset_index(), on="time", how="left")
    ops = [c for c in wide.columns if c != "time" and not c.startswith("server ")]
    dashed = [c for c in wide.columns if c.startswith("server ")]
    return _img(plots.rates_over_time(wide, ph, ops, dashed=dashed, t0=t0,
                                      title="throughput: the tool's operations/s (solid), "
                                            "the server's requests/s (dashed)"),
                "throughput over time")


def svg_frame(svg: str, title: str) -> str:
    """A flame graph as its own SVG document in an iframe, full width and interactive:
    inline in HTML its script drops the width and the graph is drawn 300 px wide, and
    the scripts of several graphs would share the page's document."""
    m = re.search(r'<svg[^>]*\bheight="(\d+)', svg)
    height = int(m.group(1)) + 8 if m else 800
    data = base64.b64encode(svg.encode()).decode()
    return (f'<iframe title="{html.escape(title)}" class="flame" style="width:100%;'
            f'height:{height}px;border:0" src="data:image/svg+xml;base64,{data}"></iframe>')


def _flamegraphs(run, ph: pd.DataFrame, diff) -> list[tuple[str, str]]:
    """Per-phase (and diff) SVGs when the run has an on-CPU profile."""
    if run.file("profile") is None:
        return []
    from mongoprobe.analysis import run_profile
    return run_profile.run_flamegraphs(run, ph, diff)


def write(run, out: Path, diff: tuple[str, str] | None = None,
          phases: pd.DataFrame | None = None) -> Path:
    out = Path(out)
    out.write_text(build(run, diff, phases))
    return out
