"""The one clock conversion (mongoprobe.model.clock): CLOCK_MONOTONIC -> wall clock, the
offset measured from the tightest of a few readings, the same rule for the analyzer's
slices and events and for the bcc tools (which load the module under the system python3)."""

import json
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mongoprobe.formats import wire_events
from mongoprobe.formats.wire_slices import EVENT_COLUMNS, Slice, events_frame
from mongoprobe.model.clock import Clock
from mongoprobe.model.latencies import Latencies

PROBES = Path(__file__).resolve().parent.parent / "probes"


def test_measure_reads_the_wall_between_two_monotonic_readings() -> None:
    before = time.monotonic_ns()
    c = Clock.measure()
    after = time.monotonic_ns()
    # the reading kept is one of the pairs taken inside the call
    assert before <= c.monotonic_ns <= after
    assert 0 <= c.uncertainty_ns <= after - before
    assert c.offset_ns == c.realtime_ns - c.monotonic_ns
    assert c.wall_ns(c.monotonic_ns) == c.realtime_ns
    # and it is the offset the two clocks have now (a slewing NTP moves it by µs)
    now = time.time_ns() - time.monotonic_ns()
    assert abs(c.offset_ns - now) < 50_000_000


def test_conversions_on_ints_floats_and_arrays() -> None:
    c = Clock(offset_ns=1_700_000_000_123_456_789)
    assert c.wall_ns(1_000) == 1_700_000_000_123_457_789
    assert c.wall_s(0) == pytest.approx(1_700_000_000.123456789)
    assert c.wall_s(1e9) == pytest.approx(1_700_000_001.123456789)
    mono = np.array([0, 500_000_000, 2_000_000_000], dtype=np.int64)
    assert np.allclose(c.wall_s(mono), [1_700_000_000.1234568, 1_700_000_000.6234568,
                                        1_700_000_002.1234568], rtol=0, atol=1e-6)
    s = c.wall_s(pd.Series(mono))
    assert isinstance(s, pd.Series) and s.iloc[1] == pytest.approx(1_700_000_000.6234568)


def test_of_a_clock_an_offset_or_a_manifest_record() -> None:
    c = Clock.measure()
    assert Clock.of(c) is c
    assert Clock.of(c.as_dict()) == c
    assert Clock.of(json.loads(json.dumps(c.as_dict()))) == c      # as a manifest keeps it
    assert set(c.as_dict()) == {"realtime_ns", "monotonic_ns", "offset_ns", "uncertainty_ns"}
    assert Clock.of(42) == Clock(offset_ns=42)
    assert Clock.of({"offset_ns": "42"}).offset_ns == 42


def test_slices_and_events_land_on_the_same_wall_second() -> None:
    c = Clock(offset_ns=1_700_000_000_000_000_000 - 5_000_000_000)     # mono 5 s = wall 1.7e9
    lat = Latencies.from_slices([Slice(start_ns=5_000_000_000, length_ns=1_000_000_000)], c)
    assert lat.counters["time"].tolist() == [1_700_000_001.0]      # the slice's end
    row = dict.fromkeys(EVENT_COLUMNS, 0) | {"mono_ns": 5_250_000_000, "opcode": "OP_MSG",
                                             "command": "find", "stream": False}
    ev = wire_events.from_mono(events_frame([tuple(row.values())]), c, pid=1)
    assert ev["time"].tolist() == [pytest.approx(1_700_000_000.25, abs=1e-6)]


def test_the_bcc_tools_load_the_same_module_under_the_system_python() -> None:
    py = Path("/usr/bin/python3")
    if not py.exists():
        pytest.skip("no system python3 (the one the bcc tools run under)")
    code = ("import sys, time; sys.path.insert(0, sys.argv[1]);"
            "from packagefiles import package_module;"
            "m = package_module('model.clock'); c = m.Clock.measure();"
            "print(m.__file__, c.offset_ns, time.time_ns() - time.monotonic_ns())")
    out = subprocess.run([str(py), "-S", "-c", code, str(PROBES)], capture_output=True,
                         text=True, timeout=60, check=True).stdout.split()
    import mongoprobe.model.clock as mine
    assert Path(out[0]).resolve() == Path(mine.__file__).resolve()
    assert abs(int(out[1]) - int(out[2])) < 50_000_000
    assert abs(int(out[1]) - Clock.measure().offset_ns) < 50_000_000
