"""bpftrace's machine output (``bpftrace -f json``) -> snapshots of its maps.

bpftrace writes one JSON object per line: ``{"type": T, "data": D}`` with T one of
``attached_probes``, ``printf``, ``time``, ``map``, ``hist``, ``stats``,
``lost_events``... A ``time`` record (printed by the tools at each interval) starts
a new snapshot; the maps printed at exit form the last one.

``parse_bpftrace_json(lines)`` returns a :class:`BpftraceOutput`:

    snapshots   list[Snapshot]   maps printed together (one per interval, then exit)
    printf      list[str]        printf lines, in order
    lost        int              events bpftrace reported lost (perf buffer)
    clock       (int, int)|None  ``# clock monotonic_ns=N elapsed_ns=M`` from BEGIN

A :class:`Snapshot` maps a map name (``@requests_by_command``) to its value: an
int for scalars, ``{key: int}`` for count/sum/max maps, ``{key: [{"min","max",
"count"}]}`` for hist maps and ``{key: {"count","average","total"}}`` for stats.
Multi-key maps have their keys joined with ``", "`` as bpftrace prints them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Iterable

from .errors import FormatError

_CLOCK = re.compile(r"# clock monotonic_ns=(\d+) elapsed_ns=(\d+)")


@dataclass
class Snapshot:
    time: str | None = None
    maps: dict[str, object] = field(default_factory=dict)

    def scalar(self, name: str) -> int:
        v = self.maps.get(name, 0)
        return int(v) if not isinstance(v, dict) else 0

    def keyed(self, name: str) -> dict:
        v = self.maps.get(name, {})
        return v if isinstance(v, dict) else {}


@dataclass
class BpftraceOutput:
    snapshots: list[Snapshot] = field(default_factory=list)
    printf: list[str] = field(default_factory=list)
    lost: int = 0
    clock: tuple[int, int] | None = None

    @property
    def final(self) -> Snapshot:
        return self.snapshots[-1] if self.snapshots else Snapshot()

    def add_line(self, line: str, source: str = "<bpftrace>", n: int = 0) -> Snapshot | None:
        """Take one output line; return the snapshot it completed, if it started a new one."""
        line = line.strip()
        if not line:
            return None
        try:
            rec = json.loads(line)
            kind, data = rec["type"], rec["data"]
        except (ValueError, KeyError, TypeError):
            raise FormatError(source, n, 'a bpftrace JSON record {"type": ..., "data": ...}', line)
        done = None
        if kind == "printf":
            self.printf.append(data)
            m = _CLOCK.match(data)
            if m:
                self.clock = (int(m[1]), int(m[2]))
        elif kind == "time":
            done = self.snapshots[-1] if self.snapshots else None
            self.snapshots.append(Snapshot(time=str(data).strip()))
        elif kind in ("map", "hist", "stats", "lhist"):
            if not self.snapshots:
                self.snapshots.append(Snapshot())
            self.snapshots[-1].maps.update(data)
        elif kind == "lost_events":
            self.lost += int(data.get("events", 0)) if isinstance(data, dict) else int(data)
        # attached_probes and unknown record types carry nothing we use
        return done


def wall_time(clock: tuple[int, int], elapsed_s, offset_ns: int):
    """Seconds since the probe started (bpftrace's elapsed) -> wall-clock seconds.

    ``clock`` is the probe's ``# clock monotonic_ns=M elapsed_ns=E`` pair (bpftrace's
    nsecs is CLOCK_MONOTONIC); ``offset_ns`` is CLOCK_REALTIME - CLOCK_MONOTONIC.
    Works on scalars and Series."""
    mono0, elapsed0 = clock
    return (mono0 - elapsed0 + elapsed_s * 1e9 + offset_ns) / 1e9


def is_bpftrace_json(text: str) -> bool:
    head = text.lstrip()[:200]
    return head.startswith('{"type": ') or head.startswith('{"type":')


def parse_bpftrace_json(lines: Iterable[str], source: str = "<bpftrace>") -> BpftraceOutput:
    out = BpftraceOutput()
    for n, line in enumerate(lines, 1):
        out.add_line(line, source, n)
    return out
