"""The one clock conversion: CLOCK_MONOTONIC (bpftrace's ``nsecs``, bcc's
``bpf_ktime_get_ns()``, the probes' slices and events) to the wall clock
(CLOCK_REALTIME, epoch seconds, what phases and load tools use).

    wall_ns = monotonic_ns + offset_ns        offset_ns = CLOCK_REALTIME - CLOCK_MONOTONIC

The offset is measured by reading the wall clock between two monotonic readings: the
pair read closest together of a few (a reading preempted between its calls is off by
the preemption) gives the offset, its gap the uncertainty.

Standard library only: the bcc tools load this file under the system python3
(``probes/packagefiles.py``). The conversions take ints, floats or numpy arrays.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class Clock:
    """CLOCK_REALTIME - CLOCK_MONOTONIC (``offset_ns``), with the reading it came from
    when measured here (``realtime_ns``, ``monotonic_ns``, ``uncertainty_ns``)."""

    offset_ns: int
    realtime_ns: int | None = None
    monotonic_ns: int | None = None
    uncertainty_ns: int | None = None

    @classmethod
    def measure(cls, readings: int = 5) -> "Clock":
        """The offset now, from the tightest of ``readings`` monotonic-wall-monotonic
        triples (the wall reading taken at the middle of its monotonic pair)."""
        best = None
        for _ in range(max(1, readings)):
            m1 = time.monotonic_ns()
            r = time.time_ns()
            m2 = time.monotonic_ns()
            if best is None or m2 - m1 < best[0]:
                best = (m2 - m1, r, (m1 + m2) // 2)
        gap, r, m = best
        return cls(offset_ns=r - m, realtime_ns=r, monotonic_ns=m, uncertainty_ns=gap)

    @classmethod
    def of(cls, clock: "Clock | int | dict") -> "Clock":
        """A Clock from a Clock, an offset in ns, or a manifest's clock record
        (``as_dict``'s keys)."""
        if isinstance(clock, Clock):
            return clock
        if isinstance(clock, dict):
            return cls(**{k: (None if clock.get(k) is None else int(clock[k]))
                          for k in ("offset_ns", "realtime_ns", "monotonic_ns",
                                    "uncertainty_ns")})
        return cls(offset_ns=int(clock))

    def as_dict(self) -> dict:
        """The record a run's manifest keeps (``clock.start``, ``clock.end``)."""
        return asdict(self)

    def wall_ns(self, monotonic_ns):
        """CLOCK_MONOTONIC ns -> wall-clock ns since the epoch."""
        return monotonic_ns + self.offset_ns

    def wall_s(self, monotonic_ns):
        """CLOCK_MONOTONIC ns -> wall-clock epoch seconds."""
        return (monotonic_ns + self.offset_ns) / NS_PER_S
