"""Phases found in the server's own traffic, for load tools the analyzer cannot read.

When no adapter recognises a load tool's output (``mongoprobe.loadtools``) and it
prints no phase markers, the phases come from what the latency probe saw: the
per-second command mix of the server's requests. Each request occupies the server
from its receive to its reply (``time - latency_ns``, ``time``), so a slow query keeps
its second active although it completes in another.

    1. Seconds are active when a work request is in flight in them (handshakes and
       monitoring -- ``ADMIN_COMMANDS`` -- are not work). An idle gap of at least
       ``gap_s`` seconds separates phases.
    2. Each active second has a mix: the commands in flight for at least ``share`` of
       the second, or completing at least ``share`` of its requests. The second in
       which one phase hands over to the next holds both mixes (``handover_second``):
       it makes no run of its own. Runs of seconds with one mix are candidate phases;
       a run shorter than ``min_s`` seconds of commands the run before it had (a
       straggler) joins that run, or the run after it when it is the first (a tool's
       setup); one of commands of its own is a phase, however short (one second of
       aggregations between inserts and a delete).
    3. Each boundary between two runs is then placed on a request: the first receive
       of a command the new phase brings, else the last reply of a command the old
       phase had; across a gap, a phase ends at its last reply and the next starts at
       its first receive. Runs with fewer than ``min_requests`` work requests, which
       kept the server busy less than ``MIN_BUSY_S``, are not phases (a tool's setup:
       drop, createIndexes).
    4. A phase is named by the requests inside it (``phase_name``): the commands that
       made ``share`` of them or of their server time, the most requests first
       (``insert+find``, ``find``); a repeated name is numbered.

From the probe's per-second histograms alone (the default recording), the same rules
run on each interval's completed requests and busy time (their summed latency: the
seconds of server time they took), a second being active too with the commands of
requests in flight all through it (its interval's longest latency says so), on the probe's own one-second grid (its intervals
need not start on an epoch second). A boundary inside a hand-over interval is placed
by the time each side's requests took at its own rate: the commands only the old
phase had, at their rate in the interval before, fill the start of it; those only the
new phase brings, at their rate in the interval after, fill its end (a find phase at
12/s handing over to inserts at 1,200/s: 12 finds and 86 inserts put the boundary at
0.92 of the interval, not at the 0.12 their counts would). A phase after or before a
gap starts (ends) the share of its first (last) interval that its requests fill at
the next (previous) interval's rate.

``infer(latencies)`` -> DataFrame(name, start, end) in wall seconds, from
``mongoprobe.model.latencies.Latencies``: per request when it holds every request's event,
else per second; per second too, from the events' exact per-second counts, when they
are more than ``event_store.IN_MEMORY_MAX`` (per request needs them all in memory);
empty when there is no work traffic. ``per_second(latencies)`` -> the
(second, command, requests) counts used, ``second`` being the epoch second. Checked on
the built-in load with its markers taken out, with events and without: every boundary
within a second of its marker (``tests/test_traffic.py``).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from mongoprobe.model import phase
from mongoprobe.model.latencies import interval_second
from mongoprobe.model.phase import Phase

# Handshake, authentication, monitoring and session bookkeeping: every client sends
# them whatever the workload, so they neither make a phase nor count as its work.
ADMIN_COMMANDS = frozenset({
    "hello", "isMaster", "ismaster", "ping", "buildInfo", "buildinfo", "endSessions",
    "saslStart", "saslContinue", "authenticate", "getnonce", "logout", "getParameter",
    "getCmdLineOpts", "getLog", "serverStatus", "hostInfo", "whatsmyuri", "dbStats",
    "collStats", "listDatabases", "connectionStatus", "getFreeMonitoringStatus",
    "atlasVersion", "[compressed]",
})


# Few requests make a phase when they kept the server busy this long (seconds of server
# time: three slow aggregations in a second), else they are a tool's setup.
MIN_BUSY_S = 0.5


def work(events: pd.DataFrame) -> pd.DataFrame:
    """The events of work requests: start (receive) and end (reply) times, command."""
    ev = events[~events["command"].isin(ADMIN_COMMANDS) & events["time"].notna()]
    end = ev["time"].to_numpy(dtype=float)
    start = end - ev["latency_ns"].to_numpy(dtype=float) / 1e9
    return pd.DataFrame({"start": start, "end": end, "command": ev["command"].to_numpy()}
                        ).sort_values("end", kind="stable").reset_index(drop=True)


def per_second(lat) -> pd.DataFrame:
    """Work requests completed per epoch second and command (``second``, ``command``,
    ``requests``, and ``busy_s``: the server time they took, seconds; from the
    histograms, ``max_s`` too: the longest of them). From the histograms, an
    interval's second is the one holding its middle (``grid``)."""
    if lat.exact:
        ps = lat.source.per_second()
        return ps[~ps["command"].isin(ADMIN_COMMANDS)].reset_index(drop=True)
    t = lat.totals[~lat.totals["command"].isin(ADMIN_COMMANDS) & (lat.totals["count"] > 0)]
    g = t.assign(second=interval_second(t)).groupby(["second", "command"], sort=True)
    return pd.DataFrame({"requests": g["count"].sum().astype("int64"),
                         "busy_s": g["sum_ns"].sum() / 1e9,
                         "max_s": g["max_ns"].max() / 1e9}).reset_index()


def grid(totals: pd.DataFrame) -> float:
    """Where the probe's intervals start relative to the epoch second ``per_second``
    labels them with, in [-0.5, 0.5): a probe started at x.42 s ticks at every y.42."""
    if not len(totals):
        return 0.0
    first = totals.iloc[:1]
    return float(first["time"].iloc[0] - interval_second(first).iloc[0])


def _occupancy(w: pd.DataFrame, s0: int, n: int) -> pd.DataFrame:
    """Seconds in flight per (second index, command): each request's [start, end]
    spread over the seconds it overlaps."""
    occ: dict[tuple[int, str], float] = {}
    for st, en, cmd in zip(w["start"], w["end"], w["command"]):
        a, b = int(math.floor(st)) - s0, int(math.floor(en)) - s0
        for k in range(max(a, 0), min(b, n - 1) + 1):
            lo, hi = max(st, s0 + k), min(en, s0 + k + 1)
            if hi > lo:
                occ[(k, cmd)] = occ.get((k, cmd), 0.0) + hi - lo
    return pd.Series(occ, dtype="float64")


def _in_flight_through(longest: pd.DataFrame) -> list[set]:
    """Per second of ``longest`` (the longest request completed, seconds, by second
    and command), the commands with a request in flight all through it: one that
    completed in a later second j took at least j + 1 - k s. A server that stalls
    answers nothing for seconds, yet they are not idle (rule 1)."""
    n = len(longest)
    out: list[set] = [set() for _ in range(n)]
    for c in longest.columns:
        col = longest[c].to_numpy(dtype=float)
        for j in np.flatnonzero(col >= 2.0):
            for k in range(max(0, math.ceil(j + 1 - col[j])), j):
                out[k].add(c)
    return out


def phase_name(requests: pd.Series, busy: pd.Series, share: float) -> str:
    """A phase's name, from the requests inside it (not the mixes of its seconds): the
    commands that made at least ``share`` of its work requests or took ``share`` of
    their server time (``busy``, seconds; a few slow queries beside many inserts), the
    most requests first (``insert+find``)."""
    counts = requests[requests > 0].sort_values(ascending=False, kind="stable")
    n, b = float(counts.sum()), float(busy.sum())
    return "+".join(str(c) for c, k in counts.items()
                    if k >= share * n or (b > 0 and busy.get(c, 0.0) >= share * b))


def _table(rows: list) -> pd.DataFrame:
    """The phases' table of (name, start, end) rows, repeated names numbered."""
    from mongoprobe.loadtools import number_repeats

    names = number_repeats([r[0] for r in rows])
    return phase.frame(Phase(n, float(a), float(b)) for n, (_, a, b) in zip(names, rows))


def infer(lat, gap_s: float = 2.0, share: float = 0.1, min_s: int = 2,
          min_requests: int = 10) -> pd.DataFrame:
    """The phases of the module docstring, from a ``Latencies``: per request when it has
    every request's event, else per second."""
    from mongoprobe.model.event_store import IN_MEMORY_MAX

    if not lat.exact or len(lat.source) > IN_MEMORY_MAX:
        return _infer_seconds(per_second(lat), gap_s, share, min_s, min_requests,
                              0.0 if lat.exact else grid(lat.totals))
    w = work(lat.events)
    if not len(w):
        return _table([])
    s0 = int(math.floor(w["start"].min()))
    n = int(math.floor(w["end"].max())) - s0 + 1
    occ = _occupancy(w, s0, n)
    done = w.assign(k=np.floor(w["end"]).astype("int64") - s0).groupby(["k", "command"]).size()
    mixes: list[frozenset] = []
    for k in range(n):
        o = occ.xs(k, level=0) if k in occ.index.get_level_values(0) else pd.Series(dtype=float)
        d = done.xs(k, level=0) if k in done.index.get_level_values(0) else pd.Series(dtype=int)
        total = float(d.sum())
        mix = {c for c, v in o.items() if v >= share} | {
            c for c, v in d.items() if total and v >= share * total}
        mixes.append(frozenset(mix))
    return _place(w, s0, _runs(mixes, gap_s, min_s), share, min_requests)


def handover_second(before: frozenset, mix: frozenset, after: frozenset) -> bool:
    """A second whose mix is made of its neighbours' and holds a command of each that
    the other lacks: the one in which a phase hands over to the next. It belongs to
    both, so it makes no run of its own: the boundary is placed inside it (rule 3),
    and a phase as short as one second between two others keeps its own mix. (The
    second after a hand-over second is not one: ``_runs``.)"""
    return (bool(before) and bool(after) and mix <= before | after
            and bool(mix & before - after) and bool(mix & after - before))


def _runs(mixes: list[frozenset], gap_s: float, min_s: int) -> list[list]:
    """[first second, last second, mix, preceded by a gap] of runs of one mix."""
    runs: list[list] = []
    idle = math.inf
    handed = False          # the active second before was a hand-over second
    # each active second's neighbours: the nearest active seconds before and after it,
    # across fewer than gap_s idle ones (an idle second inside a phase: slow queries
    # that complete in the next)
    near: list[frozenset] = [frozenset()] * len(mixes)
    last, gap = frozenset(), math.inf
    for k, mix in enumerate(mixes):
        if mix:
            near[k] = last if gap < gap_s else frozenset()
            last, gap = mix, 0
        else:
            gap += 1
    after = [frozenset()] * len(mixes)
    nxt, gap = frozenset(), math.inf
    for k in range(len(mixes) - 1, -1, -1):
        if mixes[k]:
            after[k] = nxt if gap < gap_s else frozenset()
            nxt, gap = mixes[k], 0
        else:
            gap += 1
    for k, mix in enumerate(mixes):
        if not mix:
            idle += 1
            continue
        if not handed and handover_second(near[k], mix, after[k]):
            idle, handed = 0, True
            continue
        handed = False
        if runs and idle < gap_s and mix == runs[-1][2]:
            runs[-1][1] = k
        else:
            runs.append([k, k, mix, idle >= gap_s])
        idle = 0
    merged: list[list] = []
    for r in runs:
        # a short run of the commands the run before had (its tail, a straggler) joins
        # it; a short run of commands of its own is a short phase
        short = r[1] - r[0] + 1 < min_s and bool(merged) and r[2] <= merged[-1][2]
        if merged and not r[3] and (short or r[2] == merged[-1][2]):
            merged[-1][1] = r[1]
        else:
            merged.append(r)
    # a short run with nothing before it (a tool's setup just before its first phase)
    # joins the run after it, when no gap lies between them
    out: list[list] = []
    for i, r in enumerate(merged):
        nxt = merged[i + 1] if i + 1 < len(merged) else None
        if r[1] - r[0] + 1 < min_s and nxt is not None and not nxt[3] and (
                not out or r[3]):
            nxt[0], nxt[3] = r[0], r[3]
            continue
        out.append(r)
    return out


def _place(w: pd.DataFrame, s0: int, runs: list[list], share: float,
           min_requests: int) -> pd.DataFrame:
    """Exact bounds on requests, names; runs too small to be phases are dropped."""
    cuts = [math.nan]   # NaN: the phase starts (ends) on its own first (last) request
    for prev, nxt in zip(runs, runs[1:]):
        lo, hi = s0 + prev[0], s0 + nxt[1] + 1
        near = w[(w["end"] >= lo) & (w["end"] < hi)]
        if nxt[3]:
            cuts.append(math.nan)   # a gap: both sides end on their own requests
            continue
        new = nxt[2] - prev[2]
        old = prev[2] - nxt[2]
        around = s0 + nxt[0]
        if new:
            first = near[near["command"].isin(new) & (near["end"] >= around - 1)]
            cut = float(first["start"].min()) if len(first) else float(around)
        elif old:
            last = near[near["command"].isin(old) & (near["end"] < around + 1)]
            # just after the last reply, so it stays in the phase it ended (half-open)
            cut = (float(np.nextafter(last["end"].max(), np.inf)) if len(last)
                   else float(around))
        else:
            cut = float(around)
        cuts.append(cut)
    cuts.append(math.nan)
    rows = []
    for i, r in enumerate(runs):
        lo = cuts[i] if not math.isnan(cuts[i]) else s0 + r[0]
        hi = cuts[i + 1] if not math.isnan(cuts[i + 1]) else s0 + r[1] + 1
        mine = w[(w["end"] > lo if i else w["end"] >= lo) & (w["end"] <= hi)]
        if len(mine) < min_requests and (mine["end"] - mine["start"]).sum() < MIN_BUSY_S:
            continue
        start = float(mine["start"].min()) if math.isnan(cuts[i]) else lo
        # phases are half-open, [start, end): one that ends on its own last reply ends
        # just after it, so that reply is inside
        end = (float(np.nextafter(mine["end"].max(), np.inf)) if math.isnan(cuts[i + 1])
               else hi)
        took = (mine["end"] - mine["start"]).groupby(mine["command"]).sum()
        rows.append([phase_name(mine["command"].value_counts(sort=False), took, share),
                     start, end])
    return _table(rows)


def _inside(table: pd.DataFrame, run: list, edges: list[int]) -> pd.Series:
    """Per command, ``table``'s sum over the run's own seconds and, of its hand-over
    seconds (``edges``), over the columns of the run's own commands."""
    own = [c for c in table.columns if c in run[2]]
    return (table.iloc[run[0]:run[1] + 1].sum()
            + table.iloc[edges][own].sum().reindex(table.columns, fill_value=0))


def _infer_seconds(ps: pd.DataFrame, gap_s: float, share: float, min_s: int,
                   min_requests: int, grid_s: float = 0.0) -> pd.DataFrame:
    """``infer`` on per-second counts and busy time (no events); second k of ``ps``
    covers [k + grid_s, k + 1 + grid_s)."""
    if not len(ps):
        return _table([])
    s0 = int(ps["second"].min())
    n = int(ps["second"].max()) - s0 + 1
    req = ps.pivot_table(index="second", columns="command", values="requests",
                         aggfunc="sum", fill_value=0).reindex(range(s0, s0 + n), fill_value=0)
    busy = ps.pivot_table(index="second", columns="command", values="busy_s",
                          aggfunc="sum", fill_value=0.0).reindex(range(s0, s0 + n),
                                                                 fill_value=0.0)
    through = (_in_flight_through(ps.pivot_table(
        index="second", columns="command", values="max_s", aggfunc="max",
        fill_value=0.0).reindex(range(s0, s0 + n), fill_value=0.0))
        if "max_s" in ps.columns else [set()] * n)
    mixes = []
    for k in range(n):
        r, b = req.iloc[k], busy.iloc[k]
        total = float(r.sum())
        mixes.append(frozenset(c for c in req.columns
                               if b[c] >= share or (total and r[c] >= share * total))
                     | through[k])
    runs = _runs(mixes, gap_s, min_s)
    total_by_sec = req.sum(axis=1).to_numpy(dtype=float)

    def filled(k: int, toward: int) -> float:
        """The share of second k its requests fill at the rate of second ``toward``."""
        if not 0 <= toward < n or total_by_sec[toward] <= 0:
            return 1.0
        return min(total_by_sec[k] / total_by_sec[toward], 1.0)

    def of(k: int, cmds) -> float:
        return float(req.iloc[k][[c for c in cmds if c in req.columns]].sum()) if cmds else 0.0

    def handover(prev: list, nxt: list) -> float:
        """Where the old phase ends: in the second before the new run's first, or in
        that first second when the old phase's own commands still complete there (or
        the new phase only adds commands, so that its first second looks like it)."""
        first = nxt[0]
        old, new = prev[2] - nxt[2], nxt[2] - prev[2]
        h = first if (of(first, old) > 0 or not old) and first + 1 <= nxt[1] else first - 1
        # the time each side's own commands took at that side's rate next door
        rate_old = of(h - 1, old) if h - 1 >= prev[0] else 0.0
        rate_new = of(h + 1, new) if h + 1 <= nxt[1] else 0.0
        t_old = of(h, old) / rate_old if rate_old else None
        t_new = of(h, new) / rate_new if rate_new else None
        if t_old is not None and t_new is not None and t_old + t_new > 0:
            at = t_old / (t_old + t_new)
        elif t_old is not None:
            at = min(t_old, 1.0)
        elif t_new is not None:
            at = 1.0 - min(t_new, 1.0)
        else:
            n_all = float(req.iloc[h].sum())     # no rate to go by: the share of requests
            at = of(h, old) / n_all if n_all else 1.0
        return h + at

    rows = []
    for i, r in enumerate(runs):
        first, last = r[0], r[1]
        if i == 0 or r[3]:
            start = s0 + first + 1 - filled(first, first + 1)
        else:
            start = s0 + handover(runs[i - 1], r)
        nxt = runs[i + 1] if i + 1 < len(runs) else None
        if nxt is None or nxt[3]:
            end = s0 + last + filled(last, last - 1)
        else:
            end = None          # where the next one starts
        rows.append([r, start + grid_s, None if end is None else end + grid_s])
    out = []
    for i, (r, start, end) in enumerate(rows):
        if end is None:
            end = rows[i + 1][1]
        # its own seconds, and of the hand-over seconds on its edges the requests of
        # its own commands (a second's requests cannot be told apart by time)
        lo, hi = max(int(math.floor(start - grid_s - s0)), 0), int(math.ceil(end - grid_s - s0))
        edges = [k for k in range(lo, hi) if not r[0] <= k <= r[1]]
        mine, took = _inside(req, r, edges), _inside(busy, r, edges)
        if int(mine.sum()) < min_requests and float(took.sum()) < MIN_BUSY_S:
            continue
        out.append([phase_name(mine, took, share), start, end])
    return _table(out)
