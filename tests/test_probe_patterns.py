"""The wire-protocol latency probes against every syscall pattern a server may use, on
every tracer version at hand.

tests/wireserver.py reproduces mongod's pattern (recvmsg of the header, then of the body;
sendmsg), FerretDB's (buffered read/write) and others (readv/writev, replies split across
writes, recvfrom/sendto); tests/wireclient.py drives it with raw-socket scenarios whose
counts are known exactly (requestIDs overlapping across connections, a ~100 KB insert,
pipelining, moreToCome, OP_QUERY, OP_COMPRESSED, an exhaust stream). Each probe must report
exactly those counts: no tolerance, nothing lost or malformed.

A tool start costs seconds (a bcc start compiles its C, bpftrace preallocates its maps), so
every (engine, version) is traced ONCE, all of them at the same time: one server process
serves every wireserver mode on a port of its own, every tool attaches to it, the client
runs every scenario on each port in turn, once, and the expected counts are summed. The tests below check one aspect each of that run, so a failure says
which aspect and which (engine, version). The engines: each bpftrace and each bcc python
at hand (the system ones and the $MONGOPROBE_TOOLS/bin wrappers scripts/tracer-roots.sh
builds: a missing one is skipped), and the D engine (dtrace/mongo_time.d, run by Oracle
DTrace for Linux as scripts/setup.sh builds it). A version's known failure is a strict
xfail (helpers/versions.py: KNOWN).

The bcc run has --events on: its -j report must still be exact, and the events of its
OP_COMPRESSED requests name the command inside.

Needs root, a mounted tracefs, and bpftrace, bcc or dtrace (each tool's tests skip with
the reason).
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

import wireclient
from helpers.cli import at_once
from helpers.versions import version_rows
from helpers.wire import (BCC_TOOL, BPFTRACE_TOOL, CONNECTIONS, DTRACE_TOOL, UNAVAILABLE, Observed, Probe,
                          all_modes_server, bcc_report, from_bcc, from_bpftrace, from_dtrace,
                          tool_unavailable)
from wireserver import MODES    # the server patterns, each run under every engine
from mongoprobe.run import tracer as mp_probes

pytestmark = [pytest.mark.root, pytest.mark.skipif(UNAVAILABLE is not None, reason=str(UNAVAILABLE))]

# (engine, version, binary): every bpftrace and bcc at hand, and DTrace (one version)
ENGINES = [*version_rows("bpftrace", "mongo_latency.bt"), *version_rows("bcc", "mongolatency.py"),
           pytest.param("dtrace", None, None, id="dtrace")]
BCC_VERSIONS = version_rows("bcc", "mongolatency.py")


# --- one run per (engine, version) ---------------------------------------------------------


@dataclass
class Run:
    expected: wireclient.Expected   # summed over the modes
    observed: Observed
    report: dict | None = None      # bcc: the -j report as printed
    events: list[dict] | None = None  # bcc: the --events records


def start_probe(engine: str, binary: str, pid: int, workdir: Path) -> Probe:
    if engine == "bpftrace":
        # the package's settings (Probe sets BPFTRACE_ENV), as mongoprobe runs it
        return Probe([binary, "-f", "json", *mp_probes.BPFTRACE_WIRE_OPTS, str(BPFTRACE_TOOL), str(pid)],
                     lambda p: any('"Tracing MongoDB' in line for line in p.lines), workdir / "probe.err",
                     env=mp_probes.bpftrace_keys(1024))  # fmt: skip
    if engine == "dtrace":
        return Probe([str(mp_probes.dtrace_binary()), "-s", str(DTRACE_TOOL), "-p", str(pid)],
                     lambda p: any("Tracing MongoDB" in line for line in p.lines),
                     workdir / "probe.err", stop_signal=signal.SIGTERM)  # fmt: skip
    # with --events the main loop polls the ring buffer: the banner on stderr says attached
    return Probe([binary, str(BCC_TOOL), "-p", str(pid), "-j", "--events", str(workdir / "events.jsonl")],
                 lambda p: "Tracing MongoDB" in p.stderr.read_text(), workdir / "probe.err")  # fmt: skip


def trace_all(rows: list[tuple[str, str | None, str | None]], tmp: Path) -> dict:
    """Trace the all-modes server with every (ENGINE, VERSION, BINARY) of ``rows`` at
    once (their compiles overlap; each sees every syscall) while the client runs every
    scenario on every mode's port, once: {(engine, version): Run, or the skip or failure
    of that tool alone}."""
    out: dict[tuple[str, str | None], Run | BaseException] = {}
    probes: dict[tuple[str, str | None], tuple[str, Path, Probe]] = {}
    (tmp / "server").mkdir()
    with all_modes_server(tmp / "server") as (pid, ports):
        try:
            for engine, version, binary in rows:
                reason = tool_unavailable(engine, binary)
                if reason:
                    out[engine, version] = pytest.skip.Exception(reason)   # raised by its tests
                    continue
                workdir = tmp / f"{engine}-{version}"
                workdir.mkdir()
                probes[engine, version] = engine, workdir, start_probe(engine, binary, pid, workdir)
            for key, (_, _, probe) in probes.items():
                try:
                    probe.wait_attached()       # (it stops the probe when it fails)
                except pytest.fail.Exception as e:
                    out[key] = e
            expected = wireclient.Expected()
            for mode in MODES:
                expected = expected + wireclient.run(ports[mode], connections=CONNECTIONS)
            time.sleep(0.3)  # a send's exit tracepoint may run after the client has the bytes
        finally:
            # every probe stopped at once (a DTrace END, a bcc detach, take seconds each)
            lines = {}
            for key, got in at_once(lambda p: p[2].stop(), probes).items():
                if isinstance(got, BaseException):
                    out.setdefault(key, got)    # that (engine, version)'s tests fail
                else:
                    lines[key] = got
    for key, (engine, workdir, probe) in probes.items():
        if key in out:
            continue
        try:
            if probe.proc.returncode != 0:
                pytest.fail(f"probe failed: {probe.describe()}")
            if engine == "dtrace":
                out[key] = Run(expected, from_dtrace(lines[key], probe.stderr))
            elif engine == "bpftrace":
                out[key] = Run(expected, from_bpftrace(lines[key]))
            else:
                events = [json.loads(line) for line in
                          (workdir / "events.jsonl").read_text().splitlines()]
                out[key] = Run(expected, from_bcc(lines[key]), bcc_report(lines[key]), events)
        except (Exception, pytest.fail.Exception) as e:
            out[key] = e
    return out


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str | None, str | None], Run]:
    """trace_all() of every (engine, version) row, once, on the first test's call; each
    aspect test reads its own row's run (a row's skip or failure repeats in its tests)."""
    runs: dict[tuple[str, str | None], Run | BaseException] = {}

    def get(engine: str, version: str | None, binary: str | None) -> Run:
        if not runs:
            rows = [tuple(p.values) for p in ENGINES
                    if not any(m.name == "skip" for m in p.marks)]
            runs.update(trace_all(rows, tmp_path_factory.mktemp("patterns")))
        run = runs[engine, version]
        if isinstance(run, BaseException):
            raise run
        return run

    return get


# --- the aspects -------------------------------------------------------------------------

ASPECT = pytest.mark.parametrize(("engine", "version", "binary"), ENGINES)


@ASPECT
def test_requests_by_command(traced, engine: str, version: str, binary: str) -> None:
    run = traced(engine, version, binary)
    assert run.observed.requests_by_command == dict(run.expected.by_command)


@ASPECT
def test_requests_by_op(traced, engine: str, version: str, binary: str) -> None:
    run = traced(engine, version, binary)
    assert run.observed.requests_by_op == dict(run.expected.by_op)
    assert run.observed.counts["requests"] == run.expected.requests


@ASPECT
def test_replies(traced, engine: str, version: str, binary: str) -> None:
    """One timed reply per request that expects one, the exhaust stream's other replies as
    stream replies, moreToCome requests as no-reply."""
    run = traced(engine, version, binary)
    e = run.expected
    observed = {**run.observed.counts, "timed_by_command": run.observed.timed_by_command,
                "stats_count_by_command": run.observed.stats_count_by_command}  # fmt: skip
    expected = {"requests": e.requests, "replies": e.replies, "stream_replies": e.stream_replies,
                "no_reply": e.no_reply, "answered_no_reply": e.answered_no_reply.total(),
                "timed_by_command": dict(e.replies_by_command),
                "stats_count_by_command": dict(e.replies_by_command)}  # fmt: skip
    assert observed == expected


@ASPECT
def test_failed_replies(traced, engine: str, version: str, binary: str) -> None:
    """Replies with ok: 0 (as a double, int, long or bool; with and without errmsg and code)
    counted per command and code; successful replies (ping's ok: 1 first too) are not."""
    run = traced(engine, version, binary)
    e = run.expected
    assert (run.observed.errors_by_command, run.observed.error_codes) == \
        (dict(e.errors_by_command), dict(e.error_codes))


@ASPECT
def test_answered_no_reply(traced, engine: str, version: str, binary: str) -> None:
    """A reply the server sent anyway to a request that asked for none (an endSessions
    with moreToCome, as the Node.js driver sends it) is counted per command on its own,
    not as an unmatched reply (test_losses)."""
    run = traced(engine, version, binary)
    assert run.expected.answered_no_reply.total() > 0
    assert run.observed.answered_no_reply == dict(run.expected.answered_no_reply)


@ASPECT
def test_losses(traced, engine: str, version: str, binary: str) -> None:
    """Nothing unmatched, malformed, dropped or still pending."""
    lost = traced(engine, version, binary).observed.lost
    assert lost == dict.fromkeys(lost, 0)


@ASPECT
def test_latency_positive(traced, engine: str, version: str, binary: str) -> None:
    """Every histogram bucket lies above 0 ns: a reply is never timed before its request."""
    lows = traced(engine, version, binary).observed.bucket_lows
    assert {key: low for key, low in lows.items() if not all(b > 0 for b in low)} == {}


@pytest.mark.parametrize(("engine", "version", "binary"), BCC_VERSIONS)
def test_compressed_commands_named_in_events(traced, engine: str, version: str, binary: str) -> None:
    """bcc with --events: each OP_COMPRESSED request's event names the command inside
    (zlib, snappy, zstd, decompressed in user space from the request's first bytes), over
    every mode; the in-kernel histograms keep "[compressed]". (mongo_latency.bt keeps 40
    bytes of a compressed body, too few for wireclient's zstd request:
    tests/test_compression.py tests it with pymongo's.)"""
    run = traced(engine, version, binary)
    e = run.expected
    assert e.by_command["[compressed]"] == e.compressed_commands.total() > 0
    assert run.report["requests_by_command"] == dict(e.by_command)
    got = Counter(ev["command"] for ev in run.events if ev["opcode"] == "OP_COMPRESSED")
    assert got == e.compressed_commands
