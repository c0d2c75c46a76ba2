"""A comparison of runs (``analysis.run_compare``'s dict) as people read it: shell tables
under 80 columns, CSV, and one self-contained HTML file, differences first.

A cell is the group's value, then its change against the baseline in percent and a
mark: ``*`` significant after Holm's correction, ``~`` not (benchstat's sign), ``s``
significant but smaller than ``--min-change``, ``?`` untested (no samples: a figure
per phase only, or too few blocks).
"""

from __future__ import annotations

import csv
import html
import io
import math
from pathlib import Path

METRIC_WORDS = {"ops_avg": "ops/s", "ips_avg": "inserts/s", "qps_avg": "queries/s",
                "r_per_op": "r/o", "rkb_per_op": "rKB/o", "wkb_per_op": "wKB/o",
                "cs_per_op": "cs/o", "cpu_us_per_op": "cpuus/o", "db_mb": "dbSize MB",
                "rss_mb": "rss MB"}


def metric_label(metric: str) -> str:
    """``latency_us.find.p99`` -> ``find p99 us``; ``client_latency_us.READ.avg`` ->
    ``client READ avg`` (µs too)."""
    if metric.startswith("latency_us."):
        _, cmd, stat = metric.split(".")
        return f"{cmd} {stat} us"
    if metric.startswith("client_latency_us."):
        _, op, stat = metric.split(".")
        return f"client {op} {stat}"
    return METRIC_WORDS.get(metric, metric)


def mark(cell: dict, group: str) -> str:
    if group not in cell.get("p", {}):
        return "?"
    if (cell.get("small") or {}).get(group):
        return "s"
    return "*" if cell["significant"].get(group) else "~"


def _num(v) -> str:
    if v is None:
        return "-"
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e4:
        return f"{v / 1e3:.3g}k"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 1:
        return f"{v:.3g}"
    return f"{v:.2g}" if v else "0"


def _delta(d) -> str:
    """+21.9%, +244%, x140 (a change of 1,000% or more as a factor)."""
    if d is None:
        return ""
    if d >= 1000:
        return f"x{1 + d / 100:.0f}"
    return f"{d:+.0f}%" if abs(d) >= 100 else f"{d:+.1f}%"


def render(c: dict, width: int = 79) -> str:
    """The shell tables: per phase, a row per metric, a column per group (the baseline
    first), each other group's change and mark; the verdicts; the histograms."""
    groups = list(c["groups"])
    base = c["baseline"]
    out = [_wrap(f"baseline {base}; samples: {_samples_words(c)}; * significant after "
                 f"Holm's correction (alpha {c['alpha']}), ~ not, s smaller than "
                 f"--min-change, ? untested", width)]
    for name in groups:
        labels = c["labels"].get(name) or {}
        lab = " ".join(f"{k}={v}" for k, v in labels.items())
        out.append(f"  {name}: {len(c['groups'][name])} run(s) {lab}".rstrip())
    # columns: metric (18), the baseline's value (11), then per other group its value
    # (7), change (7) and mark (1)
    others = groups[1:]
    bw, gw = 11, 16
    for ph in c["phases"]:
        out += ["", f"phase {ph['name']}"]
        head = f"{'':18s} {base[:bw]:>{bw}s}"
        for g in others:
            head += f" {g[:gw]:>{gw}s}"
        out.append(head)
        for metric, cell in ph["metrics"].items():
            line = f"{metric_label(metric)[:18]:18s} {_num(cell['values'][base]):>{bw}s}"
            for g in others:
                d = _delta(cell["delta_pct"].get(g))
                line += f" {_num(cell['values'][g]):>7s}{d:>8s}{mark(cell, g)}"
            out.append(line)
        v = ph["limiter"]
        line = f"{'limited by':18s} {v[base][:bw]:>{bw}s}"
        for g in others:
            line += f" {v[g][:gw]:>{gw}s}"
        out.append(line)
        for g in others:
            if ph["limiter_changed"].get(g):
                out.append(_wrap(f"  CHANGED: {g} is limited by {v[g]} "
                                 f"({ph['limiter_share'][g] or 0:.2f}), {base} by {v[base]} "
                                 f"({ph['limiter_share'][base] or 0:.2f})", width))
        prof = ph.get("profile")
        if prof:
            b = prof.get(base, {}).get("samples_per_op")
            line = f"{'cpu samples per op':18s} {_num(b):>{bw}s}"
            for g in others:
                v = prof.get(g, {}).get("samples_per_op")
                d = _delta((v - b) / b * 100) if v is not None and b else ""
                line += f" {_num(v):>7s}{d:>8s}?"
            out.append(line)
        h = ph["histograms"]
        if h["by_command"]:
            out.append(f"  response time, requests per bucket"
                       f"{'' if h['exact'] else ' (from the histograms: within 1.6%)'}:")
            out.append("  " + f"{'run':14s}" + "".join(f"{b:>6s}" for b in h["buckets"]))
            names = run_names(c)
            for cmd, runs in h["by_command"].items():
                out.append(f"  {cmd}")
                for run, counts in runs.items():
                    out.append(f"  {names.get(run, _short(run, 14))[:14]:14s}"
                               + "".join(f"{_count(n):>6s}" for n in counts))
    if c["unmatched"]:
        out += ["", "phases without a match (not compared):"]
        out += [f"  {u['group']}: {_short(u['run'], 30)}: {u['phase']}" for u in c["unmatched"]]
    if c["warnings"]:
        out += ["", "warnings:"]
        out += [_wrap("  " + w, width) for w in c["warnings"]]
    return "\n".join(out) + "\n"


def run_names(c: dict) -> dict[str, str]:
    """{run path: how the tables name it}: its group, and its number in the group when
    the group has several."""
    return {p: g if len(paths) == 1 else f"{g}.{i}" for g, paths in c["groups"].items()
            for i, p in enumerate(paths, 1)}


def _samples_words(c: dict) -> str:
    if c["samples"] == "runs":
        return "the runs"
    return f"blocks of {c['block_s']:g} s of each run (within-run noise only)"


def _count(n: int) -> str:
    return f"{n / 1e3:.0f}k" if n >= 100_000 else str(n)


def _short(path: str, n: int) -> str:
    name = Path(path).name or path
    return name if len(name) <= n else "…" + name[-(n - 1):]


def _wrap(text: str, width: int) -> str:
    import textwrap
    return "\n".join(textwrap.wrap(text, width, subsequent_indent="    "))


def to_csv(c: dict) -> str:
    """One row per (phase, metric, group): value, delta_pct, p, significant, small."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["phase", "metric", "group", "value", "delta_pct", "p", "significant",
                "small", "baseline"])
    for ph in c["phases"]:
        for metric, cell in ph["metrics"].items():
            for g in c["groups"]:
                w.writerow([ph["name"], metric, g, _csv(cell["values"].get(g)),
                            _csv(cell["delta_pct"].get(g)), _csv(cell["p"].get(g)),
                            "" if g == c["baseline"] else
                            str(bool(cell["significant"].get(g))).lower(),
                            str(bool((cell.get("small") or {}).get(g))).lower()
                            if g != c["baseline"] else "", str(g == c["baseline"]).lower()])
        for g, res in ph["limiter"].items():
            w.writerow([ph["name"], "limiter", g, res, "", "", "", "",
                        str(g == c["baseline"]).lower()])
    return buf.getvalue()


def _csv(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return repr(v) if isinstance(v, float) else str(v)


# --- flame graphs ---------------------------------------------------------------------------

SCALE_WORDS = {"op": "per operation", "samples": "per sample (shares of the profile)",
               "none": "as sampled"}


def flamegraphs(c: dict, stacks: dict, how: str = "op") -> list[dict]:
    """Per matched phase, and per group other than the baseline, the two differential
    flame graphs of ``stacks`` (``compare_profiles.phase_stacks``): the group against
    the baseline (frames sized by the group's samples; red: more CPU per operation in
    the group, blue: less) and the reversed one (sized by the baseline's: what the
    group no longer spends, red). ``how`` scales the first side (``compare_profiles.
    scale``). [{"phase", "group", "reversed", "title", "svg"}]; a pair a side of which
    has no samples in the phase gets a "note" instead of an "svg"."""
    import tempfile

    from mongoprobe.analysis import compare_profiles
    from mongoprobe.views import flamegraph

    base = c["baseline"]
    out = []
    with tempfile.TemporaryDirectory(prefix="mongoprobe-cmp-") as tmp:
        for ph in c["phases"]:
            sides = stacks.get(ph["name"]) or {}
            for g in list(c["groups"])[1:]:
                for rev in (False, True):
                    first, second = (g, base) if rev else (base, g)
                    item = {"phase": ph["name"], "group": g, "reversed": rev,
                            "title": f"{ph['name']}: {second} against {first}, "
                                     f"{SCALE_WORDS[how]}"}
                    missing = [n for n in (first, second) if not (n in sides and
                                                                  sides[n].samples)]
                    if missing:
                        item["note"] = (f"no on-CPU samples of {' or '.join(missing)} in "
                                        f"phase {ph['name']}: no graph")
                        out.append(item)
                        continue
                    k = compare_profiles.scale(sides[first], sides[second], how)
                    sub = (f"red: more CPU {SCALE_WORDS[how]} in {second}, blue: less; "
                           f"frames sized by {second}'s samples"
                           + (f", {first}'s scaled x{k:.3g}" if k is not None else ""))
                    svg = Path(tmp) / f"{len(out)}.svg"
                    flamegraph.render_diff(sides[first].folded, sides[second].folded, svg,
                                           title=item["title"], subtitle=sub,
                                           normalize=False, scale=k)
                    item["svg"] = svg.read_text()
                    out.append(item)
    return out


def flamegraph_name(item: dict, base: str) -> str:
    """The file a graph is written to: PHASE.GROUP-vs-BASE[.reversed].svg (characters
    a file name cannot hold replaced)."""
    import re

    def safe(s: str) -> str:
        return re.sub(r"[^A-Za-z0-9._=@+-]", "_", s)

    return (f"{safe(item['phase'])}.{safe(item['group'])}-vs-{safe(base)}"
            f"{'.reversed' if item['reversed'] else ''}.svg")


# --- HTML ---------------------------------------------------------------------------------

CSS = """
body { font-family: sans-serif; margin: 2em; max-width: 1100px; color: #222; }
table { border-collapse: collapse; font-size: 13px; margin: 0.5em 0 1.5em; }
td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
th { background: #f0f0f0; } td.l, th.l { text-align: left; }
td.up { background: #dbe8ff; } td.down { background: #fff3c4; } td.ns { color: #888; }
.changed { color: #a33; font-weight: bold; } .note { color: #a33; }
h2 { border-bottom: 1px solid #ddd; margin-top: 2em; }
"""


def _cls(cell: dict, g: str) -> str:
    d = cell["delta_pct"].get(g)
    if not cell["significant"].get(g) or d is None:
        return "ns"
    return "up" if d > 0 else "down"


def html_report(c: dict, graphs: list[dict] | None = None) -> str:
    """The comparison as one HTML file: the significant differences and changed verdicts
    first, then every phase's table, its histograms and its differential flame graphs
    (``graphs``, from :func:`flamegraphs`)."""
    from mongoprobe.views.report import svg_frame

    groups = list(c["groups"])
    base = c["baseline"]
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>mongoprobe compare"
             f"</title><style>{CSS}</style></head><body>",
             f"<h1>Comparison against {e(base)}</h1>",
             f"<p>Samples: {e(_samples_words(c))}. A change is significant when Holm's "
             f"corrected p is under {c['alpha']} (blue: up, yellow: down; grey: not "
             "significant).</p>"]
    rows = "".join(f"<tr><td class='l'>{e(g)}</td><td class='l'>"
                   f"{e(', '.join(c['groups'][g]))}</td><td class='l'>"
                   f"{e(' '.join(f'{k}={v}' for k, v in (c['labels'].get(g) or {}).items()))}"
                   "</td></tr>" for g in groups)
    parts.append(f"<table><tr><th class='l'>group</th><th class='l'>runs</th>"
                 f"<th class='l'>labels</th></tr>{rows}</table>")
    diffs = [(ph["name"], m, g, cell) for ph in c["phases"] for m, cell in ph["metrics"].items()
             for g in groups[1:] if cell["significant"].get(g)]
    changed = [(ph["name"], g, ph["limiter"][base], ph["limiter"][g]) for ph in c["phases"]
               for g in groups[1:] if ph["limiter_changed"].get(g)]
    parts.append("<h2>Differences</h2>")
    if changed:
        parts.append("<ul>" + "".join(
            f"<li class='changed'>{e(p)}: {e(g)} limited by {e(new)}, {e(base)} by "
            f"{e(old)}</li>" for p, g, old, new in changed) + "</ul>")
    if diffs:
        body = "".join(
            f"<tr><td class='l'>{e(p)}</td><td class='l'>{e(metric_label(m))}</td>"
            f"<td class='l'>{e(g)}</td><td>{_num(cell['values'][base])}</td>"
            f"<td>{_num(cell['values'][g])}</td><td class='{_cls(cell, g)}'>"
            f"{_delta(cell['delta_pct'].get(g))}</td><td>{cell['p'][g]:.2g}</td></tr>"
            for p, m, g, cell in diffs)
        parts.append("<table><tr><th class='l'>phase</th><th class='l'>metric</th>"
                     f"<th class='l'>group</th><th>{e(base)}</th><th>value</th><th>change</th>"
                     f"<th>p (Holm)</th></tr>{body}</table>")
    elif not changed:
        parts.append("<p>No significant difference.</p>")
    if c["warnings"] or c["unmatched"]:
        parts.append("<ul>" + "".join(f"<li class='note'>{e(w)}</li>" for w in c["warnings"])
                     + "".join(f"<li class='note'>not matched: {e(u['group'])} "
                               f"{e(u['run'])}: {e(u['phase'])}</li>" for u in c["unmatched"])
                     + "</ul>")
    parts.append("<h2>Phases</h2>")
    for ph in c["phases"]:
        head = "".join(f"<th>{e(g)}</th>" + ("<th>change</th>" if g != base else "")
                       for g in groups)
        body = []
        for m, cell in ph["metrics"].items():
            tds = []
            for g in groups:
                tds.append(f"<td>{_num(cell['values'][g])}</td>")
                if g != base:
                    tds.append(f"<td class='{_cls(cell, g)}'>{_delta(cell['delta_pct'].get(g))}"
                               f" {mark(cell, g)}</td>")
            body.append(f"<tr><td class='l'>{e(metric_label(m))}</td>{''.join(tds)}</tr>")
        lim = "".join(f"<td class='{'changed' if ph['limiter_changed'].get(g) else ''}'>"
                      f"{e(ph['limiter'][g])}</td>" + ("<td></td>" if g != base else "")
                      for g in groups)
        body.append(f"<tr><td class='l'>limited by</td>{lim}</tr>")
        parts.append(f"<h3>{e(ph['name'])}</h3><table><tr><th class='l'>metric</th>{head}</tr>"
                     + "".join(body) + "</table>")
        h = ph["histograms"]
        for cmd, runs in h["by_command"].items():
            hb = "".join(f"<th>{e(b)}</th>" for b in h["buckets"])
            rb = "".join(f"<tr><td class='l'>{e(run_names(c).get(run, run))}</td>"
                         + "".join(f"<td>{n}</td>" for n in counts) + "</tr>"
                         for run, counts in runs.items())
            parts.append(f"<p>{e(cmd)}: requests per response-time bucket"
                         f"{'' if h['exact'] else ' (from the histograms)'}</p>"
                         f"<table><tr><th class='l'>run</th>{hb}</tr>{rb}</table>")
        prof = ph.get("profile")
        if prof:
            parts.append("<p>on-CPU samples per operation: " + ", ".join(
                f"{e(g)} {_num(d['samples_per_op'])} ({d['samples']} samples)"
                for g, d in prof.items()) + "</p>")
        for item in graphs or []:
            if item["phase"] != ph["name"]:
                continue
            if "svg" in item:
                parts.append(f"<h4>{e(item['title'])}"
                             f"{' (reversed)' if item['reversed'] else ''}</h4>"
                             + svg_frame(item["svg"], item["title"]))
            else:
                parts.append(f"<p class='note'>{e(item['note'])}</p>")
    parts.append("</body></html>")
    return "\n".join(parts)
