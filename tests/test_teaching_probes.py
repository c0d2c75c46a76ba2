"""The teaching tools (probes/mongo_latency_simple.bt, dtrace/mongo_latency_simple.d) run
for real against tests/wireserver.py and count exactly what the client sent.

One tool start per (tool, version), given SECONDS so that it stops by itself (the
argument is tested too): one server process serves the readwrite (read/write) and sendto
(recvfrom/sendto) patterns, which the tools time, and mongod's (recvmsg/sendmsg), which
they leave out (their header says so): its requests must not show. The readwrite server
also reads its log file back every third request: a read that is no request.

Every tool starts at once (their compiles overlap, and so do their SECONDS): the
bpftrace versions together on one server, driven once all have attached; DTrace on a
server of its own, driven once it has attached.
"""

from __future__ import annotations

import re
import signal
import subprocess
from collections import Counter
from dataclasses import dataclass, field

import pytest

import wireclient
from helpers.versions import version_rows
from helpers.wire import ROOT, UNAVAILABLE, Probe, all_modes_server, tool_unavailable
from mongoprobe.run import tracer as mp_probes

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(UNAVAILABLE is not None, reason=str(UNAVAILABLE))]

BPFTRACE_SIMPLE = ROOT / "probes" / "mongo_latency_simple.bt"
DTRACE_SIMPLE = ROOT / "dtrace" / "mongo_latency_simple.d"
# the tools' own stop, counted from their start of tracing: long enough for the other
# versions (started at the same time) to attach too before the drive
SECONDS = 8
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


@dataclass
class ToolRun:
    """A tool started on a server: its Probe, then its stdout and the counts expected."""
    probe: Probe
    stops_itself: bool
    out: str = ""
    expected: Counter[str] = field(default_factory=Counter)


@pytest.fixture(scope="module")
def tool_runs(tmp_path_factory) -> dict[str, ToolRun | BaseException]:
    """Each tool that can run here (key: the bpftrace version, or "dtrace"), started at
    once, driven, and ended: a bpftrace tool after SECONDS by itself (fails if it had
    to be stopped), DTrace stopped as Ctrl-C would. A tool's failure is its test's."""
    bpftraces = {version: binary for _, version, binary in
                 (r.values for r in version_rows("bpftrace", "mongo_latency_simple.bt"))
                 if version and tool_unavailable("bpftrace", binary) is None}
    dtrace = mp_probes.why_cannot_dtrace() is None
    runs: dict[str, ToolRun | BaseException] = {}
    workdir = tmp_path_factory.mktemp("teaching")
    (workdir / "bpftrace").mkdir()
    (workdir / "dtrace").mkdir()
    with all_modes_server(workdir / "bpftrace") as (bt_pid, bt_ports), \
            all_modes_server(workdir / "dtrace") as (d_pid, d_ports):
        def start(key: str, argv: list[str], pid: int, stop_signal: int) -> ToolRun:
            return ToolRun(Probe([a.replace("PID", str(pid)) for a in argv],
                                 lambda p: any(BANNER in line for line in p.lines),
                                 workdir / f"{key}.err", stop_signal=stop_signal),
                           stop_signal == signal.SIGINT)
        tools = {version: start(version, [binary, str(BPFTRACE_SIMPLE), "PID", str(SECONDS)],
                                bt_pid, signal.SIGINT) for version, binary in bpftraces.items()}
        if dtrace:
            tools["dtrace"] = start("dtrace", [str(mp_probes.dtrace_binary()), "-s",
                                               str(DTRACE_SIMPLE), "-p", "PID"],
                                    d_pid, signal.SIGTERM)
        try:
            for keys, ports in ((list(bpftraces), bt_ports),
                                (["dtrace"] if dtrace else [], d_ports)):
                attached = []
                for key in keys:
                    try:
                        tools[key].probe.wait_attached()
                        attached.append(key)
                    except BaseException as e:      # (pytest.fail's too)
                        runs[key] = e
                if attached:
                    expected = drive(ports)
                    for key in attached:
                        tools[key].expected = expected
                        if tools[key].stops_itself and tools[key].probe.proc.poll() is not None:
                            runs[key] = AssertionError(
                                f"stopped before the drive had ended: SECONDS ({SECONDS}) "
                                f"shorter than the other tools' starts took")
            for key, run in tools.items():
                if key in runs:
                    continue
                if run.stops_itself:
                    try:
                        run.probe.proc.wait(SECONDS + 30)   # it prints and exits by itself
                    except subprocess.TimeoutExpired:
                        runs[key] = AssertionError(f"did not stop by itself after {SECONDS} s: "
                                                   f"{run.probe.describe()}")
        finally:
            for key, run in tools.items():
                run.out = "".join(run.probe.stop())
                if key not in runs and run.probe.proc.returncode != 0:
                    runs[key] = AssertionError(run.probe.describe())
                runs.setdefault(key, run)
    return runs


def tool_run(runs: dict, key: str) -> ToolRun:
    run = runs[key]
    if isinstance(run, BaseException):
        raise run
    return run


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
def test_bpftrace_simple_counts_each_command(engine, version, binary, tool_runs):
    reason = tool_unavailable("bpftrace", binary)
    if reason:
        pytest.skip(reason)
    run = tool_run(tool_runs, version)
    assert hist_counts(run.out) == run.expected, run.out
    assert "Latency per command" in run.out


def test_dtrace_simple_counts_each_command(need_dtrace, tool_runs):
    # Stopped as by Ctrl-C, not by its SECONDS: DTrace fires tick-1s on one CPU, and on
    # this machine kind (a 2-CPU virtual machine) an idle second CPU takes no cpu-clock
    # timer interrupt, so the tick never comes until that CPU is busy (`dtrace -n
    # 'tick-1s { exit(0); }'` waits forever on an idle machine; perf record -C 1 gets
    # no samples either). mongoprobe's own -d stops DTrace by signal.
    run = tool_run(tool_runs, "dtrace")
    assert quantize_counts(run.out) == run.expected, run.out
