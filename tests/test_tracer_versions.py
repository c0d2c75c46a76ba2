"""mongo_snoop.bt on every bpftrace version at hand: one line per timed reply, each
parsed by the analyzer's reader.

For each bpftrace (the system one and each $MONGOPROBE_TOOLS/bin/bpftrace-SUITE wrapper)
the tool is started once on one server process that serves every tests/wireserver.py
mode on a port of its own (helpers/wire.py: all_modes_server). A suite whose wrapper is
missing is skipped (scripts/tracer-roots.sh builds it). The latency tools' exact counts
on every version: tests/test_probe_patterns.py.

Needs root and a mounted tracefs.
"""

from __future__ import annotations

import time

import pytest

import wireclient
from helpers.versions import version_rows
from helpers.wire import ROOT, UNAVAILABLE, Probe, all_modes_server
from mongoprobe.run import tracer as mp_probes
from mongoprobe.formats.wire_events import parse_snoop

CONNECTIONS = 4

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(UNAVAILABLE is not None, reason=str(UNAVAILABLE))]


@pytest.fixture
def server(tmp_path):
    """The all-modes server: (pid, {mode: port})."""
    with all_modes_server(tmp_path) as running:
        yield running


@pytest.mark.parametrize(("engine", "version", "binary"), version_rows("bpftrace", "mongo_snoop.bt"))
def test_bpftrace_snoop_lines(engine, version, binary, server, tmp_path) -> None:
    """mongo_snoop.bt: one line per timed reply, every line read by the analyzer."""
    pid, ports = server
    probe = Probe([binary, *mp_probes.BPFTRACE_WIRE_OPTS, str(ROOT / "probes" / "mongo_snoop.bt"), str(pid)],
                  lambda p: any(line.startswith("TIME(s)") for line in p.lines),
                  tmp_path / "probe.err")
    try:
        probe.wait_attached()
        # mongod reads one message per receive (the snoop tool decodes 2 at most)
        expected = wireclient.run(ports["mongod"], connections=CONNECTIONS)
        time.sleep(0.3)
    finally:
        lines = probe.stop()
    assert probe.proc.returncode == 0, f"probe failed: {probe.describe()}"
    events = parse_snoop(lines)
    assert len(events) == expected.replies
    assert events.groupby("command").size().to_dict() == dict(expected.replies_by_command)
