"""``probes/threads.bt`` output -> per-thread microstate snapshots and intervals.

What it parses: what ``threads.bt PID`` prints every second, as bpftrace's JSON lines
(``bpftrace -f json probes/threads.bt PID``, what ``mongoprobe threads`` runs) or its
text (what ``mongoprobe record`` keeps as ``threads.bt.txt``): a ``# tick
monotonic_ns=N`` line, then the maps of THREAD_MAPS per thread id, then ``# tick end``
(the probe's header describes the maps). Real example:
``samples/profile/ferretdb-threads.bt.txt``. Outputs of the threads.bt of before
bpftrace 0.23 support also print ``@on_since``/``@rq_since`` (time stamps of
threads caught mid-state, added up to the tick); the current one never prints
them (printing a map other CPUs delete from failed), they are read when present.

``threads_snapshots(lines)`` yields the snapshots as they complete;
``threads_interval(a, b)`` turns two of them into per-thread rows (the ``prstat -mL``
columns: on-CPU, run-queue latency, sleep, voluntary and involuntary switches).
"""

from __future__ import annotations

import re

from . import bpftrace_json

_TICK = re.compile(r"# tick monotonic_ns=(\d+)( final)?")
_TEXT_MAP = re.compile(r"^@(oncpu_ns|runq_ns|vcx|icx|on_since|rq_since)\[(\d+)\]: (\d+)$")
THREAD_MAPS = ("oncpu_ns", "runq_ns", "vcx", "icx", "on_since", "rq_since")


def threads_snapshots(lines):
    """threads.bt output (bpftrace text or ``-f json`` lines) -> snapshots, as they come.

    Yields ``(tick_ns, maps, final)`` with ``maps[name] = {tid: int}`` for each name
    in THREAD_MAPS, once the snapshot is complete (its ``# tick end`` line, the next
    tick, or the end of input). The first one (printed from BEGIN) has empty maps;
    ``final`` marks the one printed at the end (a partial interval).
    """
    cur: tuple[int, dict, bool] | None = None

    def new(t: int, final: bool) -> tuple[int, dict, bool]:
        return t, {m: {} for m in THREAD_MAPS}, final

    def a_map(name: str, value, rec) -> None:
        if cur is not None:
            cur[1][name[1:]].update({int(k): int(v) for k, v in value.items()})

    def printf(t: str, rec):
        return [t]

    def a_line(line: str, rec):     # the text output's lines
        m = _TEXT_MAP.match(line)
        if m and cur is not None:
            cur[1][m[1]][int(m[2])] = int(m[3])
            return None
        return [line]

    handlers = {"printf": printf, "text": a_line, **{f"@{m}": a_map for m in THREAD_MAPS}}
    for text in bpftrace_json.read(lines, "threads.bt", handlers):
        if text.startswith("# tick end"):
            if cur is not None:
                yield cur
                cur = None
            continue
        t = _TICK.match(text)
        if t:
            if cur is not None:
                yield cur
            cur = new(int(t[1]), bool(t[2]))
    if cur is not None:
        yield cur


def _with_carry(total: dict, since: dict, t: int, tid: int) -> int:
    v = total.get(tid, 0)
    s = since.get(tid)
    if s and s < t:
        v += t - s
    return v


def threads_interval(a, b, alive: set[int] | None = None) -> list[dict]:
    """Per-thread microstates between snapshots ``a`` and ``b`` (``(tick_ns, maps)``).

    Rows: tid, oncpu_ns, lat_ns, vcx, icx and the percentages oncpu_pct, lat_pct,
    slp_pct (= 100 - oncpu - lat) of the interval. Time caught mid-state at a tick
    (``on_since``/``rq_since``) is added up to that tick. ``alive``: threads that
    exist now (from /proc); threads neither alive nor active are left out, and a
    thread that is gone gets no carry.
    """
    ta, ma, tb, mb = a[0], a[1], b[0], b[1]
    dt = max(tb - ta, 1)
    tids = set()
    for m in (mb,):
        for name in ("oncpu_ns", "runq_ns", "vcx", "icx", "on_since", "rq_since"):
            tids |= set(m[name])
    tids |= alive or set()
    rows = []
    for tid in sorted(tids):
        gone = alive is not None and tid not in alive
        since_b_on = {} if gone else mb["on_since"]
        since_b_rq = {} if gone else mb["rq_since"]
        on = (_with_carry(mb["oncpu_ns"], since_b_on, tb, tid)
              - _with_carry(ma["oncpu_ns"], ma["on_since"], ta, tid))
        lat = (_with_carry(mb["runq_ns"], since_b_rq, tb, tid)
               - _with_carry(ma["runq_ns"], ma["rq_since"], ta, tid))
        on, lat = min(max(on, 0), dt), min(max(lat, 0), dt)
        lat = min(lat, dt - on)
        vcx = mb["vcx"].get(tid, 0) - ma["vcx"].get(tid, 0)
        icx = mb["icx"].get(tid, 0) - ma["icx"].get(tid, 0)
        if gone and not (on or lat or vcx or icx):
            continue
        rows.append({"tid": tid, "oncpu_ns": on, "lat_ns": lat, "vcx": max(vcx, 0),
                     "icx": max(icx, 0), "oncpu_pct": round(100 * on / dt, 1),
                     "lat_pct": round(100 * lat / dt, 1),
                     "slp_pct": round(100 * (dt - on - lat) / dt, 1)})
    return rows
