"""Per-thread microstates of a live process (``mongoprobe threads``, ``prstat -mL``):
threads.bt's snapshots (``formats/threads_output.py``) cut into intervals, with each
thread's name and user/system CPU from /proc.
"""

from __future__ import annotations

import os
from typing import Iterable, Iterator

from mongoprobe.formats.threads_output import threads_interval


class ProcTasks:
    """Names and user/system ticks of a process's threads from /proc."""

    def __init__(self, pid: int):
        self.pid = pid
        self.names: dict[int, str] = {}
        self.hz = os.sysconf("SC_CLK_TCK")

    def read(self) -> dict[int, tuple[int, int]]:
        ticks = {}
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{self.pid}/task")]
        except OSError:
            return ticks
        for tid in tids:
            try:
                with open(f"/proc/{self.pid}/task/{tid}/stat") as fh:
                    stat = fh.read()
            except OSError:
                continue
            comm = stat[stat.index("(") + 1: stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2:].split()
            self.names[tid] = comm
            ticks[tid] = (int(fields[11]), int(fields[12]))   # utime, stime
        return ticks


def intervals(snapshots: Iterable, procs: ProcTasks, every: int,
              duration: float | None = None) -> Iterator[tuple[float, list[dict]]]:
    """``(seconds, rows)`` for each ``every`` snapshots (seconds) of ``snapshots``, until
    ``duration`` is covered: one row per thread (``threads_interval``'s columns, plus
    ``name``, ``usr_pct`` and ``sys_pct`` from /proc, None for a thread that came or
    went), busiest first. The piece after the last full interval (the final snapshot,
    less than half an interval later) is left out."""
    last = None          # (snapshot, /proc ticks) at the start of the current interval
    n = 0
    done = 0
    for snap in snapshots:
        ticks = procs.read()
        if last is None:
            last, n = (snap, ticks), 0
            continue
        n += 1
        final = snap[2]
        dt = (snap[0] - last[0][0]) / 1e9
        if n < every and not final:
            continue
        if final and dt < 0.5 * every:
            break        # the piece after the last full interval
        if duration and done * every >= duration:
            break
        rows = threads_interval(last[0], snap, set(ticks) if ticks else None)
        for r in rows:
            r["name"] = procs.names.get(r["tid"], "?")
            a, b = last[1].get(r["tid"]), ticks.get(r["tid"])
            if a and b:
                r["usr_pct"] = round(100 * (b[0] - a[0]) / procs.hz / dt, 1)
                r["sys_pct"] = round(100 * (b[1] - a[1]) / procs.hz / dt, 1)
            else:
                r["usr_pct"] = r["sys_pct"] = None
        rows.sort(key=lambda r: (-r["oncpu_pct"], -r["lat_pct"], r["tid"]))
        yield dt, rows
        done += 1
        last, n = (snap, ticks), 0
