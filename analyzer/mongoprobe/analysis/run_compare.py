"""Runs side by side (``mongoprobe compare``): each phase of each configuration against
the baseline's, with a real difference told from noise.

A **group** is one configuration: a name and its runs (repeated runs of it). Its
value of a metric in a phase is the median over its runs of each run's phase figure
(``phase_table``: every metric has its one definition there).

**Phases** are matched by name across every run (the load tool's names: ``4i.1q``,
YCSB's ``load``, ``workloada``), in the baseline's order; the phases whose names are
not shared, where every run has as many of them, by their order, with a warning (YCSB's
``workloada`` in one run against ``workloadb`` in the other). A phase left without a
match is listed in ``unmatched``, never dropped silently.

**Samples**, for the test of each cell (:mod:`mongoprobe.analysis.significance`):

* when every group has two runs or more, the runs are the samples: the per-run
  figures, Mann-Whitney U as benchstat does, with its warning below 4 a side;
* else the blocks of each run are (``block_s`` seconds of the phase each, figured
  as a phase of their own): the difference is then against *within-run noise only*,
  which the output says, and a side whose blocks drift (|Spearman's rho| with time
  of ``DRIFT`` or more) or depend on each other (lag-1 autocorrelation of ``SERIAL``
  or more) is warned of, as its blocks are then not independent samples. Requests are
  never the samples: they are not independent either.

Every test of the table is corrected together (Holm); a cell is significant when its
corrected p is under ``ALPHA``. ``min_change`` (percent) marks a significant change
smaller than it as ``small``.

:func:`compare` returns the comparison as the JSON of ``compare --json`` (README.md
documents its keys); ``views.comparison`` renders it.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from mongoprobe.analysis import compare_profiles, phase_table as phases, significance
from mongoprobe.analysis.traffic_phases import ADMIN_COMMANDS
from mongoprobe.model import phase

ALPHA = 0.05
DRIFT = 0.6
SERIAL = 0.5
MIN_SAMPLES = 4         # below this a side, benchstat's warning: too few to tell
# phase figures compared (``phases --json`` keys), in the table's order
THROUGHPUT = ("ops_avg", "ips_avg", "qps_avg")
COST = ("r_per_op", "rkb_per_op", "wkb_per_op", "cs_per_op", "cpu_us_per_op")
SIZE = ("db_mb", "rss_mb")
LATENCY_STATS = ("p50", "p99", "max")
CLIENT_STATS = ("avg", "p99")
# the insert benchmark's response-time buckets (upper bounds, µs; the last is "gt")
IB_BUCKETS_US = (256, 1_000, 4_000, 16_000, 64_000, 256_000, 1_000_000, 4_000_000,
                 16_000_000)
IB_LABELS = ("256us", "1ms", "4ms", "16ms", "64ms", "256ms", "1s", "4s", "16s", "gt")
IB_EDGES_NS = tuple(b * 1e3 for b in IB_BUCKETS_US)


@dataclass
class Group:
    """One configuration: its name and the runs recorded with it."""
    name: str
    runs: list = field(default_factory=list)      # mongoprobe.load_run(...) Runs
    paths: list[str] = field(default_factory=list)


def label_value(group: Group, key: str) -> str | None:
    """The value of label (or manifest fact) ``key`` its runs share; None when they
    have none or disagree."""
    vals = {fact(r, key) for r in group.runs}
    return vals.pop() if len(vals) == 1 else None


def fact(run, key: str) -> str | None:
    """A run's label ``key`` (record --label), else one of its manifest's facts: the
    target, its version, the latency engine, the host, the load command."""
    m = run.manifest
    labels = m.get("labels") or {}
    if key in labels:
        return str(labels[key])
    target = m.get("target") or {}
    facts = {"target": target.get("kind"), "version": target.get("version"),
             "engine": (m.get("latency_engine") or {}).get("engine"),
             "host": (m.get("host") or {}).get("hostname"),
             "command": " ".join((m.get("command") or {}).get("argv") or [])}
    v = facts.get(key)
    return None if v is None else str(v)


def by_label(runs: list, paths: list[str], key: str) -> list[Group]:
    """Runs grouped by their value of ``key``, in numeric order where every value is a
    number, else in the order first seen (ValueError when a run has none)."""
    out: dict[str, Group] = {}
    for r, p in zip(runs, paths):
        v = fact(r, key)
        if v is None:
            raise ValueError(f"{p}: no label {key!r} (record --label {key}=VALUE)")
        g = out.setdefault(v, Group(f"{key}={v}"))
        g.runs.append(r)
        g.paths.append(p)
    keys = list(out)
    try:
        keys.sort(key=float)
    except ValueError:
        pass
    return [out[k] for k in keys]


# --- phases and their figures ----------------------------------------------------------


def match_phases(groups: list[Group], tables: dict[int, pd.DataFrame]
                 ) -> tuple[list[str], dict[int, dict[str, str]], list[dict], list[str]]:
    """(matched names in the baseline's order, {run id: {matched name: its own name}},
    unmatched [{"group", "run", "phase"}], warnings)."""
    runs = [(g, r, p) for g in groups for r, p in zip(g.runs, g.paths)]
    names = {id(r): list(tables[id(r)]["name"]) for _, r, _ in runs}
    base = names[id(groups[0].runs[0])]
    common = {n for n in base if all(n in v for v in names.values())}
    mapping = {id(r): {n: n for n in base if n in common} for _, r, _ in runs}
    warnings: list[str] = []
    # the phases left, where every run has as many: by their order (YCSB's load, then
    # workloada in one run and workloadb in the other)
    rest = {id(r): [n for n in names[id(r)] if n not in common] for _, r, _ in runs}
    k = len(rest[id(groups[0].runs[0])])
    if k and all(len(v) == k for v in rest.values()):
        for _, r, _ in runs:
            mapping[id(r)].update(zip(rest[id(groups[0].runs[0])], rest[id(r)]))
        warnings.append(("the runs share no phase name" if not common else
                         "phases without a name in common") + ": matched by their order ("
                        + "; ".join(f"{p}: {', '.join(rest[id(r)])}" for _, r, p in runs)
                        + ")")
    matched = [n for n in base if n in mapping[id(groups[0].runs[0])]]
    unmatched = [{"group": g.name, "run": p, "phase": n} for g, r, p in runs
                 for n in names[id(r)] if n not in mapping[id(r)].values()]
    return matched, mapping, unmatched, warnings


def work_answered(rows: list) -> list[str]:
    """The work commands (not ``ADMIN_COMMANDS``) the phase rows saw answered, sorted."""
    return sorted({c for r in rows for c, d in (r.latency_us or {}).items()
                   if c not in ADMIN_COMMANDS and d.get("count")})


def metric_names(rows: list) -> list[str]:
    """The metrics of one matched phase: its figures, then the latency of each work
    command and the client latency of each operation the rows hold."""
    out = [*THROUGHPUT, *COST, *SIZE]
    out += [f"latency_us.{c}.{s}" for c in work_answered(rows) for s in LATENCY_STATS]
    ops = sorted({op for r in rows for op in (r.client_latency_us or {})})
    out += [f"client_latency_us.{op}.{s}" for op in ops for s in CLIENT_STATS]
    return out


def value(row, metric: str) -> float:
    """A phase row's figure (NaN where it has none)."""
    if "." in metric:
        table, name, stat = metric.split(".")
        v = ((getattr(row, table) or {}).get(name) or {}).get(stat)
    else:
        v = getattr(row, metric)
    return math.nan if v is None else float(v)


def blocks(table: pd.DataFrame, names: list[str], block_s: float) -> pd.DataFrame:
    """Phases ``NAME#k`` of ``block_s`` seconds each, inside each named phase, from
    half a block after its start: a tool's interval ends just after each whole second
    of its phase, so each block holds one end (a remainder shorter than a block is
    left out)."""
    rows = []
    for r in table.itertuples():
        if r.name not in names or not r.end > r.start:
            continue
        first = r.start + block_s / 2
        n = int((r.end - first) // block_s)
        rows += [phase.Phase(f"{r.name}#{k}", first + k * block_s,
                             first + (k + 1) * block_s) for k in range(n)]
    return phase.frame(rows)


def prepare_blocks(run, block_s: float) -> None:
    """The server's figures of every phase of the run and of each of its blocks, and
    the phases' response-time histograms (``ib_histograms``), computed together before
    the phase table asks for the phases' and ``block_rows`` for the blocks': with every
    request's event, in the same two scans of them (an hour at 50k requests/s is read
    twice, not five times)."""
    lat = phases.server_latency(run)
    if lat is None:
        return
    own = run.tool_output.phases
    ended = [p for p in phase.phases_from(own) if p.end > p.start]
    spans = ended + phase.phases_from(blocks(own, list(own["name"]), block_s))
    lat.prepare([p.span for p in spans], phases.second_edges(spans),
                binned=[(p.start, p.end, IB_EDGES_NS) for p in ended])


def block_rows(run, table: pd.DataFrame, names: list[str], block_s: float
               ) -> dict[str, list]:
    """{phase: its blocks' rows}: each block figured as a phase (``phase_table.compute``)."""
    b = blocks(table, names, block_s)
    if not len(b):
        return {}
    t = phases.compute(phases.inputs(run, b))
    out: dict[str, list] = {}
    for r in t.itertuples():
        out.setdefault(r.name.rpartition("#")[0], []).append(r)
    return out


# --- the latency histograms -----------------------------------------------------------


def ib_histograms(lat, commands: list[str], start: float, end: float
                  ) -> tuple[dict[str, list[int]], bool]:
    """({command: counts per IB bucket of its requests answered in [start, end)}, exact):
    from the events when the run kept every request (one read of the window for every
    command), else from the log-linear buckets (each counted where its middle falls:
    within 1.6%)."""
    edges = np.array(IB_EDGES_NS)
    if lat.exact:
        by_code = lat.source.binned(start, end, edges)
        return {c: (by_code[k].tolist() if (k := lat.source.code_of(c)) is not None
                    else [0] * len(IB_LABELS)) for c in commands}, True
    from mongoprobe.model import loglinear_buckets as loglinear

    out = {}
    for c in commands:
        out[c] = [0] * len(IB_LABELS)
        for b, n in lat.histogram(c, start, end).items():
            out[c][int(np.searchsorted(edges, loglinear.midpoint(b), side="left"))] += n
    return out, False


# --- the comparison ---------------------------------------------------------------------


def _median(xs: list[float]) -> float:
    a = np.array([x for x in xs if not math.isnan(x)], dtype=float)
    return float(np.median(a)) if len(a) else math.nan


def compare(groups: list[Group], baseline: str | None = None, block_s: float = 1.0,
            min_change: float | None = None) -> dict:
    """The comparison of ``groups`` (the first is the baseline unless ``baseline``
    names another) as ``compare --json``'s dict."""
    return compare_with_stacks(groups, baseline, block_s, min_change)[0]


def compare_with_stacks(groups: list[Group], baseline: str | None = None,
                        block_s: float = 1.0, min_change: float | None = None
                        ) -> tuple[dict, dict]:
    """(:func:`compare`'s dict, the on-CPU stacks of its matched phases:
    ``compare_profiles.phase_stacks``, {} when no run has a profile), for the
    differential flame graphs."""
    if len(groups) < 2:
        raise ValueError("compare needs two groups or more (runs, or NAME=RUN[,RUN...])")
    names = [g.name for g in groups]
    if len(set(names)) < len(names):
        raise ValueError(f"group names repeat: {', '.join(names)}")
    if baseline is not None:
        if baseline not in names:
            raise ValueError(f"--baseline {baseline}: no such group ({', '.join(names)})")
        groups = sorted(groups, key=lambda g: g.name != baseline)
    base = groups[0]
    by_runs = all(len(g.runs) >= 2 for g in groups)
    if not by_runs:
        for g in groups:
            for r in g.runs:
                prepare_blocks(r, block_s)
    tables = {id(r): phases.phase_table(r) for g in groups for r in g.runs}
    matched, mapping, unmatched, warnings = match_phases(groups, tables)
    if by_runs:
        samples_how = "runs"
        small = [g.name for g in groups if len(g.runs) < MIN_SAMPLES]
        if small:
            warnings.append(
                f"{', '.join(small)}: fewer than {MIN_SAMPLES} runs (at least "
                f"{significance.min_p(*sorted(len(g.runs) for g in groups)[:2]):.2g} "
                "for any p): a difference may not be told from noise")
    else:
        samples_how = "blocks"
        warnings.append(f"within-run noise only: one run on a side, so its blocks of "
                        f"{block_s:g} s are the samples (repeat the runs for the noise "
                        "between runs)")
    rows_of = {}        # (run id, matched name) -> its phase row
    verdicts = {}
    for g in groups:
        for r in g.runs:
            t = tables[id(r)]
            own = {row.name: (row, v) for row, v in zip(t.itertuples(), t.attrs["verdicts"])}
            for m in matched:
                rows_of[id(r), m], verdicts[id(r), m] = own[mapping[id(r)][m]]
    blocks_of: dict = {}
    if not by_runs:
        for g in groups:
            for r in g.runs:
                own = block_rows(r, tables[id(r)], list(mapping[id(r)].values()), block_s)
                for m in matched:
                    blocks_of[id(r), m] = own.get(mapping[id(r)][m], [])

    tests = []          # (phase index, metric, group name, p)
    floors = []         # the smallest p each test could give, its sample sizes
    dependent: dict[tuple[str, str, str], list[str]] = {}   # (phase, group, why) -> metrics
    out_phases = []
    for pi, m in enumerate(matched):
        all_rows = [rows_of[id(r), m] for g in groups for r in g.runs]
        metrics = {}
        for metric in metric_names(all_rows):
            vals = {g.name: _median([value(rows_of[id(r), m], metric) for r in g.runs])
                    for g in groups}
            if math.isnan(vals[base.name]) and all(math.isnan(v) for v in vals.values()):
                continue
            cell = {"values": {k: _num(v) for k, v in vals.items()}, "delta_pct": {},
                    "significant": {}, "p": {}}
            b = vals[base.name]
            for g in groups[1:]:
                v = vals[g.name]
                cell["delta_pct"][g.name] = (_num((v - b) / b * 100) if b and not
                                             math.isnan(b) and not math.isnan(v) else None)
                pa = _samples(base, m, metric, by_runs, rows_of, blocks_of)
                pb = _samples(g, m, metric, by_runs, rows_of, blocks_of)
                if len(pa) and len(pb):
                    tests.append((pi, metric, g.name, significance.mann_whitney(pa, pb)))
                    floors.append(significance.min_p(len(pa), len(pb)))
                    if not by_runs:
                        for side, x in ((base.name, pa), (g.name, pb)):
                            why = _not_independent(x)
                            if why:
                                dependent.setdefault((m, side, why), []).append(metric)
            metrics[metric] = cell
        limiter = {}
        for g in groups:
            # (a verdict the evidence could not decide is not a resource)
            res = Counter(verdicts[id(r), m].limiter.resource if verdicts[id(r), m].decided
                          else "undecided" for r in g.runs)
            limiter[g.name] = res.most_common(1)[0][0]
        changed = {g.name: limiter[g.name] != limiter[base.name] for g in groups[1:]}
        share = {g.name: _num(_median([verdicts[id(r), m].limiter.share for r in g.runs]))
                 for g in groups}
        cmds = work_answered(all_rows)
        hists: dict[str, dict] = {cmd: {} for cmd in cmds}
        exact = True
        for g in groups:
            for r, p in zip(g.runs, g.paths):
                row = rows_of[id(r), m]
                lat = phases.server_latency(r)
                if lat is None or not cmds:
                    continue
                counts, ex = ib_histograms(lat, cmds, row.start, row.end)
                exact = exact and ex
                for cmd in cmds:
                    hists[cmd][p] = counts[cmd]
        own = [(r, p, rows_of[id(r), m]) for g in groups for r, p in zip(g.runs, g.paths)]
        out_phases.append({"name": m, "own_names": {p: mapping[id(r)][m] for r, p, _ in own},
                           "spans": {p: [row.start, row.end] for _, p, row in own},
                           # (the tool's operations, or the server's work requests)
                           "operations": {p: _num(row.ops_avg * row.seconds)
                                          for _, p, row in own},
                           "metrics": metrics, "limiter": limiter, "limiter_share": share,
                           "limiter_changed": changed,
                           "histograms": {"buckets": list(IB_LABELS), "exact": exact,
                                          "by_command": hists}})
    for (m, side, why), ms in dependent.items():
        ms = list(dict.fromkeys(ms))
        warnings.append(f"{m}: {side}'s blocks {why} in {', '.join(ms[:4])}"
                        + (f" and {len(ms) - 4} more" if len(ms) > 4 else "")
                        + ": they are not independent samples, so a difference there may "
                          "be the drift's")
    if not by_runs:
        for m in matched:
            few = [f"{g.name} {n}" for g in groups
                   for n in [sum(len(blocks_of.get((id(r), m), [])) for r in g.runs)]
                   if n < MIN_SAMPLES]
            if few:
                warnings.append(f"{m}: fewer than {MIN_SAMPLES} blocks of {block_s:g} s "
                                f"({', '.join(few)}): too few to tell a difference")
    if tests and min(floors) * len(tests) >= ALPHA:
        # Holm's first step multiplies the smallest p by the number of tests: with few
        # runs a side, none can pass whatever the runs show (benchstat corrects nothing)
        need = next((n for n in range(2, 100)
                     if significance.min_p(n, n) * len(tests) < ALPHA), None)
        warnings.append(
            f"no difference can be significant after Holm's correction over {len(tests)} "
            f"tests: the smallest p these {samples_how} can give is {min(floors):.2g} "
            f"({min(floors) * len(tests):.2g} corrected)"
            + (f"; {need} {samples_how} a side can reach {ALPHA}" if need else ""))
    adjusted = significance.holm([t[3] for t in tests])
    for (pi, metric, gname, p), q in zip(tests, adjusted):
        cell = out_phases[pi]["metrics"][metric]
        cell["p"][gname] = _num(q)
        sig = q < ALPHA
        cell["significant"][gname] = bool(sig)
        d = cell["delta_pct"].get(gname)
        if sig and min_change is not None and d is not None and abs(d) < min_change:
            cell.setdefault("small", {})[gname] = True
    for ph in out_phases:
        for cell in ph["metrics"].values():
            for g in groups[1:]:
                cell["significant"].setdefault(g.name, False)
    out = {"baseline": base.name,
           "groups": {g.name: list(g.paths) for g in groups},
           "samples": samples_how, "block_s": block_s if not by_runs else None,
           "alpha": ALPHA, "min_change": min_change,
           "labels": {g.name: _labels(g) for g in groups},
           "phases": out_phases, "unmatched": unmatched,
           "warnings": list(dict.fromkeys(warnings))}
    # the on-CPU profiles: samples per operation beside the figures (the flame graphs
    # of views.comparison draw the stacks)
    stacks = compare_profiles.phase_stacks(groups, out)
    profiles = compare_profiles.summary(stacks)
    for ph in out_phases:
        if profiles.get(ph["name"]):
            ph["profile"] = profiles[ph["name"]]
    without = compare_profiles.without_profile(groups) if stacks else []
    if without:
        out["warnings"].append("no on-CPU profile in " + ", ".join(without)
                               + ": its group's flame graphs are drawn from the other "
                                 "runs, or not at all")
    return out, stacks


def _labels(g: Group) -> dict[str, str]:
    """The labels every run of the group shares."""
    shared = None
    for r in g.runs:
        lab = {k: str(v) for k, v in (r.manifest.get("labels") or {}).items()}
        shared = lab if shared is None else {k: v for k, v in shared.items()
                                             if lab.get(k) == v}
    return shared or {}


def _samples(g: Group, m: str, metric: str, by_runs: bool, rows_of: dict,
             blocks_of: dict) -> np.ndarray:
    if by_runs:
        xs = [value(rows_of[id(r), m], metric) for r in g.runs]
    else:
        # a block's throughput (and so its cost per operation) is a sample only from
        # the source its phase's comes from: a block that holds no interval of the
        # tool's would count the server's requests instead
        per_op = metric in THROUGHPUT or metric in COST
        xs = [value(b, metric) for r in g.runs for b in blocks_of.get((id(r), m), [])
              if not per_op or b.ops_source == rows_of[id(r), m].ops_source]
    a = np.array(xs, dtype=float)
    return a[~np.isnan(a)]


def _not_independent(x: np.ndarray) -> str | None:
    """Why a side's blocks are not independent samples ("drift", "are autocorrelated"),
    None when they look independent (or are too few, under 6, to say)."""
    if len(x) < 6:
        return None
    rho, ac = significance.trend(x), significance.lag1(x)
    if not math.isnan(rho) and abs(rho) >= DRIFT:
        return f"drift (|rho| >= {DRIFT} with time)"
    if not math.isnan(ac) and ac >= SERIAL:
        return f"are autocorrelated (lag-1 >= {SERIAL})"
    return None


def _num(v: float) -> float | None:
    return None if v is None or (isinstance(v, float) and (math.isnan(v) or
                                                           math.isinf(v))) else float(v)
