"""The teaching tools (probes/mongo_latency_simple.bt, dtrace/mongo_latency_simple.d) run
for real against tests/wireserver.py and count exactly what the client sent.

One tool start per (tool, version), given SECONDS so that it stops by itself (the
argument is tested too): one server process serves the readwrite (read/write) and sendto
(recvfrom/sendto) patterns, which the tools time, and mongod's (recvmsg/sendmsg), which
they leave out (their header says so): its requests must not show. The readwrite server
also reads its log file back every third request: a read that is no request.
"""

from __future__ import annotations

import re
import signal
from collections import Counter
from pathlib import Path

import pytest

import wireclient
from helpers.versions import version_rows
from helpers.wire import ROOT, UNAVAILABLE, Probe, all_modes_server, tool_unavailable
from mongoprobe.run import tracer as mp_probes

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(UNAVAILABLE is not None, reason=str(UNAVAILABLE))]

BPFTRACE_SIMPLE = ROOT / "probes" / "mongo_latency_simple.bt"
DTRACE_SIMPLE = ROOT / "dtrace" / "mongo_latency_simple.d"
SECONDS = 5           # the tools' own stop, counted from their start of tracing
BANNER = "Tracing MongoDB requests"
# per connection, interleaved: command -> requests (each answered before the next)
REQUESTS = {"find": 7, "ping": 5, "insert": 3}
TIMED_MODES = ("readwrite", "sendto")
BODIES = {"find": lambda i: {"find": "coll"}, "ping": lambda i: {"ping": 1},
          "insert": lambda i: {"insert": "coll", "documents": [{"_id": i}]}}


def drive(ports: dict[str, int]) -> Counter[str]:
    """REQUESTS on one connection per timed mode, and on a mongod-mode connection (not
    timed by these tools); returns what the tools must count."""
    expected: Counter[str] = Counter()
    for mode in (*TIMED_MODES, "mongod"):
        c = wireclient.Conn(ports[mode])
        try:
            for i in range(max(REQUESTS.values())):
                for command, n in REQUESTS.items():
                    if i < n:
                        body = BODIES[command](i)
                        c.call(c.op_msg(body))
        finally:
            c.close()
        if mode in TIMED_MODES:
            expected += c.expected.replies_by_command
    return expected


def run_tool(argv: list[str], workdir: Path, stop_signal: int,
             stops_itself: bool = True) -> tuple[str, Counter[str]]:
    """Start the tool on the server, drive it, and wait for the tool to stop after
    SECONDS (``stops_itself``), or stop it with ``stop_signal`` as Ctrl-C would: its
    stdout and the counts expected. Fails if it failed, or had to be stopped when it
    should have stopped itself."""
    with all_modes_server(workdir) as (pid, ports):
        probe = Probe([a.replace("PID", str(pid)) for a in argv],
                      lambda p: any(BANNER in line for line in p.lines), workdir / "tool.err",
                      stop_signal=stop_signal)
        probe.wait_attached()
        try:
            expected = drive(ports)
            if stops_itself:
                probe.proc.wait(SECONDS + 30)   # it prints and exits by itself
        except Exception:
            probe.stop()
            raise
        lines = probe.stop()
    assert probe.proc.returncode == 0, probe.describe()
    return "".join(lines), expected


def hist_counts(text: str) -> Counter[str]:
    """bpftrace's hist() printout: "@usecs[find]:" then "[8, 16)   3 |@@@  |" rows."""
    counts: Counter[str] = Counter()
    key = None
    for line in text.splitlines():
        if m := re.match(r"@usecs\[(.+)\]:\s*$", line):
            key = m[1]
        elif m := re.match(r"\[[^\]]*[\])]\s+(\d+) \|", line):
            counts[key] += int(m[1])
    return counts


def quantize_counts(text: str) -> Counter[str]:
    """D's printa() of quantize(): "  find" then "  16 |@@@@   11" rows."""
    counts: Counter[str] = Counter()
    key = None
    for line in text.split("microseconds:", 1)[1].splitlines():
        if m := re.match(r"\s+-?\d+ \|[@ ]*\s(\d+)\s*$", line):
            counts[key] += int(m[1])
        elif line.strip() and "Distribution" not in line:
            key = line.strip()
    return counts


@pytest.mark.parametrize("engine,version,binary",
                         version_rows("bpftrace", "mongo_latency_simple.bt"))
def test_bpftrace_simple_counts_each_command(engine, version, binary, tmp_path):
    reason = tool_unavailable("bpftrace", binary)
    if reason:
        pytest.skip(reason)
    out, expected = run_tool([binary, str(BPFTRACE_SIMPLE), "PID", str(SECONDS)], tmp_path,
                             signal.SIGINT)
    assert hist_counts(out) == expected, out
    assert "Latency per command" in out


def test_dtrace_simple_counts_each_command(need_dtrace, tmp_path):
    # Stopped as by Ctrl-C, not by its SECONDS: DTrace fires tick-1s on one CPU, and on
    # this machine kind (a 2-CPU virtual machine) an idle second CPU takes no cpu-clock
    # timer interrupt, so the tick never comes until that CPU is busy (`dtrace -n
    # 'tick-1s { exit(0); }'` waits forever on an idle machine; perf record -C 1 gets
    # no samples either). mongoprobe's own -d stops DTrace by signal.
    out, expected = run_tool([str(mp_probes.dtrace_binary()), "-s", str(DTRACE_SIMPLE), "-p", "PID"],
                             tmp_path, signal.SIGTERM, stops_itself=False)
    assert quantize_counts(out) == expected, out
