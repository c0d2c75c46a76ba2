"""TLS plaintext in the D engine: dtrace/mongo_time_tls.d and mongo_snoop_tls.d (OpenSSL's
SSL_read/SSL_write(_ex) through the pid provider), counted exactly, under Oracle DTrace
for Linux as scripts/setup.sh builds it:

- tests/wireserver.py --tls (Python's ssl: libssl.so.3, SSL_read_ex/SSL_write_ex) in
  mongod's pattern (the 16-byte header, then the body), buffered 4 KiB reads, and replies
  split across writes, driven by tests/wireclient.py's scenarios over TLS on 4
  connections: every count equal to the client's, nothing lost; the same server with
  --tls off: every connection counted as TLS, none of its requests seen;
- the same with --tls-bio memory (asyncio's TLS transport: OpenSSL on memory BIOs, no
  socket syscall inside SSL_read/SSL_write, as mongod's asio): the plaintext keyed by
  SSL *, every connection tied to its socket, counts exact; 300 short connections
  through a dynamic-variable space sized for 16: the state is freed at SSL_free;
- mongoprobe latency|snoop --engine dtrace --tls on|auto: the _tls script is chosen,
  what it hooked is said, the JSON carries "tls" and "untraced" as bcc's does;
- FerretDB serving TLS (Go crypto/tls, which D cannot name): --tls on is refused with
  the reason, --tls auto counts its TLS connections as not decoded.

A D start compiles thousands of lines: the OpenSSL tests' D tracers start together,
each on a pattern server of its own (DTrace grabs its process), one start per script
and options (the fixture d_runs); the tests check one aspect each, the counts summed
over what a start traced and still exact.

The bcc twins are in test_tls_decode.py. Needs root and the DTrace build (each test
skips with probes.why_cannot_dtrace()'s reason), openssl, and for the FerretDB tests its
build.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import wireclient
from mongoprobe.run import dtrace_runner as dtrace_engine, tracer as probes, target
from mongoprobe.load import mixed_workload as mixedload
from helpers.cli import start_cli, stop_cli
from helpers.tls import CONNECTIONS, CliTracer, Job, PatternsRun, assert_exact_counts, traced_jobs
from helpers.wire import Probe, from_dtrace

ROOT = Path(__file__).resolve().parents[1]
DTRACE = ROOT / "dtrace"
TLS_FD = 0x40000000     # dtrace/mongo_wire.d.in: a TLS connection's plaintext state key


SHORT = 300     # short connections of the state-freed check, one after another
MEMORY = ("mongod", "memory")


def _d_probe(workdir: Path, pid: int, tls: bool, free: bool, chosen: list) -> Probe:
    """mongo_time_tls.d (tls) or mongo_time.d on pid (free
    False: the script runs as for an OpenSSL without SSL_free); its TlsChoice appended
    to chosen."""
    choice = dtrace_engine.tls_script("mongo_time.d", pid, "on" if tls else "off")
    assert choice.script == ("mongo_time_tls.d" if tls else "mongo_time.d")
    if not free:
        choice.args = (choice.args[0], "0")
    chosen.append(choice)
    opts = [a for o in dtrace_engine.wire_options(choice.script, 1000) for a in ("-x", o)]
    return Probe([str(probes.dtrace_binary()), *opts, "-s", str(DTRACE / choice.script),
                  "-p", str(pid), *choice.args],
                 lambda p: any("Tracing MongoDB" in line for line in p.lines),
                 workdir / "probe.err", stop_signal=signal.SIGTERM)


@pytest.fixture(scope="module")
def d_runs(tmp_path_factory) -> dict:
    """Every D tracer of this file's OpenSSL tests started together, each on a TLS
    pattern server of its own (DTrace grabs its process: one D tracer per server), then
    each server's traffic in turn (helpers.tls.traced_jobs):

    exact      mongo_time_tls.d; wireclient's scenarios on every pattern (PATTERNS);
    nofree     mongo_time_tls.d without SSL_free; the scenarios on mongod memory-BIO;
    off        mongo_time.d; the scenarios on readwrite socket-BIO;
    latency    mongoprobe latency --engine dtrace --tls on --max-connections 16 --by
               conn (the latency per connection, which only --by conn keeps); the
               scenarios on mongod socket-BIO and memory-BIO, then SHORT short
               connections on the memory-BIO port;
    snoop-auto mongoprobe snoop --engine dtrace --json; the scenarios on mongod socket-BIO;
    snoop-on   the same with --tls on; the scenarios on mongod memory-BIO.

    {job: (its PatternsRun or what failed, the TlsChoice of a direct D run)}."""
    reason = probes.why_cannot_dtrace()
    if reason:
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp("d-runs")
    try:
        cert_key = target._self_signed(workdir / "tls")
    except target.TargetError as e:
        pytest.skip(str(e))
    chosen: dict[str, list] = {"exact": [], "nofree": [], "off": []}

    def direct(job: str, tls: bool = True, free: bool = True):
        def start(pid: int, tracers: dict) -> None:
            tracers["d"] = _d_probe(workdir / job, pid, tls, free, chosen[job])
        return start

    def cli(job: str, *args: str):
        def start(pid: int, tracers: dict) -> None:
            tracers[job] = CliTracer(workdir / job, job, *args[:1], "-p", str(pid), "--json",
                                     "--engine", "dtrace", *args[1:])
        return start

    jobs = {
        "exact": Job(direct("exact")),
        "nofree": Job(direct("nofree", free=False), (MEMORY,)),
        "off": Job(direct("off", tls=False), (("readwrite", "socket"),)),
        "latency": Job(cli("latency", "latency", "--tls", "on", "--max-connections", "16",
                           "--by", "conn"),
                       (("mongod", "socket"), MEMORY), short=(MEMORY, SHORT)),
        "snoop-auto": Job(cli("snoop-auto", "snoop", "--max-connections", "1000"),
                          (("mongod", "socket"),)),
        "snoop-on": Job(cli("snoop-on", "snoop", "--tls", "on", "--max-connections", "1000"),
                        (MEMORY,)),
    }
    runs = traced_jobs(workdir, cert_key, jobs)
    return {job: (run, (chosen.get(job) or [None])[0]) for job, run in runs.items()}


def _d_run(d_runs: dict, job: str) -> tuple[PatternsRun, dtrace_engine.TlsChoice | None]:
    run, choice = d_runs[job]
    if isinstance(run, BaseException):
        raise run
    return run, choice


def _direct(d_runs: dict, job: str):
    """A direct D run's (expected, stdout lines, stderr path, TlsChoice), as
    the tests of one D start use them."""
    run, choice = _d_run(d_runs, job)
    return run.expected, run.outputs["d"], run.tracers["d"].stderr, choice


# (mode, BIO): on memory BIOs asyncio reads the plaintext in chunks of up to 256 KiB
# whatever the mode, so readwrite would repeat mongod; split still splits the writes
@pytest.mark.parametrize("mode,bio", [("mongod", "socket"), ("readwrite", "socket"),
                                      ("split", "socket"), ("mongod", "memory"),
                                      ("split", "memory")])
def test_openssl_wireserver_exact(mode, bio, d_runs, need_dtrace):
    """wireclient's scenarios (pipelining, a 100 KB insert, moreToCome, OP_QUERY,
    OP_COMPRESSED, exhaust, failed commands) over TLS on 4 connections at once: the
    plaintext of SSL_read_ex/SSL_write_ex counted by mongo_time_tls.d as mongo_time.d
    counts plain traffic; on memory BIOs (no socket syscall inside them) keyed by SSL *,
    each connection tied to its socket, its per-connection rows under that fd.

    One D start traces every pattern (a port each of one server: d_runs' "exact"): the
    counts are exact over the patterns summed (a miscount in this pattern fails every
    pattern's test)."""
    run, _ = _d_run(d_runs, "exact")
    assert run.by_pattern[mode, bio].requests > 0
    e, lines, stderr, choice = _direct(d_runs, "exact")
    assert choice.args == ("libssl.so.3", "1")
    assert "OpenSSL SSL_read/SSL_write/SSL_read_ex/SSL_write_ex in " in choice.hooked
    assert choice.hooked.endswith("; SSL_free)")
    o = from_dtrace(lines, stderr)
    assert (o.requests_by_command, o.requests_by_op, o.counts, o.timed_by_command,
            o.stats_count_by_command) == (
        dict(e.by_command), dict(e.by_op),
        {"requests": e.requests, "replies": e.replies, "stream_replies": e.stream_replies,
         "no_reply": e.no_reply, "answered_no_reply": e.answered_no_reply.total()},
        dict(e.replies_by_command), dict(e.replies_by_command))
    assert o.lost == dict.fromkeys(o.lost, 0), stderr.read_text()
    untraced, tls = dtrace_engine.tls_report("".join(lines), choice.hooked)
    n, on_bio = run.connections, run.on_memory_bio()
    assert (tls["connections"], tls["memory_bio"], tls["memory_bio_tied"]) == (n, on_bio, on_bio)
    assert tls["calls"] > 0
    assert untraced == {"tls_connections": 0, "tls_hooked": 1, "tls_calls_without_socket": 0}
    ties = dtrace_engine.tls_ties(lines)
    assert len(ties) == on_bio and len(set(ties)) == on_bio
    # every connection's row under its socket's fd (sockets are reused by later scenarios)
    d_run = dtrace_engine.DtraceRun(lines, [], 0)
    s = dtrace_engine.latency_summary(d_run, None, choice.hooked)
    assert all(0 < int(k.split(",")[1]) < TLS_FD for k in s.by_conn), list(s.by_conn)
    assert sum(g.count for g in s.by_conn.values()) == e.replies
    assert all(b > 0 for lows in o.bucket_lows.values() for b in lows)
    # split too: the D scripts gather a reply's first 40 bytes across writes (T2)
    assert (o.errors_by_command, o.error_codes) == (dict(e.errors_by_command),
                                                    dict(e.error_codes))


def test_memory_bio_without_ssl_free_is_counted(d_runs, need_dtrace):
    """mongo_time_tls.d told the library has no SSL_free ($2 0) on the memory-BIO server:
    nothing is keyed by SSL * (its state could never be freed), every call with plaintext
    counts as without a socket, every connection as TLS not decoded, nothing is lost."""
    e, lines, stderr, choice = _direct(d_runs, "nofree")
    assert choice.args == ("libssl.so.3", "0")
    o = from_dtrace(lines, stderr)
    assert o.counts == {"requests": 0, "replies": 0, "stream_replies": 0, "no_reply": 0,
                        "answered_no_reply": 0}
    assert o.lost == dict.fromkeys(o.lost, 0), stderr.read_text()
    untraced, tls = dtrace_engine.tls_report("".join(lines), choice.hooked)
    assert (tls["connections"], tls["memory_bio"], tls["memory_bio_tied"]) == (0, 0, 0)
    assert untraced["tls_connections"] == CONNECTIONS * len(wireclient.SCENARIOS)
    assert untraced["tls_calls_without_socket"] == tls["calls"] > 0
    assert dtrace_engine.tls_ties(lines) == {}
    assert e.requests > 0


def test_tls_off_counts_tls_connections(d_runs, need_dtrace):
    """mongo_time.d (no TLS hooks) on the same TLS traffic: no request is seen, nothing
    counts as malformed, and every connection is counted once as TLS."""
    e, lines, stderr, choice = _direct(d_runs, "off")
    assert choice.hooked is None and choice.args == ()
    o = from_dtrace(lines, stderr)
    assert o.counts == {"requests": 0, "replies": 0, "stream_replies": 0, "no_reply": 0,
                        "answered_no_reply": 0}
    assert o.lost == dict.fromkeys(o.lost, 0)
    untraced, tls = dtrace_engine.tls_report("".join(lines), choice.hooked)
    assert tls is None
    assert untraced == {"tls_connections": CONNECTIONS * len(wireclient.SCENARIOS),
                        "tls_hooked": 0, "tls_calls_without_socket": 0}
    assert e.requests > 0


def _latency_cli(d_runs: dict) -> tuple[dict, PatternsRun]:
    """mongoprobe latency --engine dtrace --tls on --json over wireclient's scenarios on
    TLS (d_runs' "latency": on mongod socket-BIO and memory-BIO, then the short
    connections): its summary, checked against the client's counts (nothing lost, no
    TLS connection undecoded), and the run."""
    run, _ = _d_run(d_runs, "latency")
    e = run.expected
    result = json.loads(run.outputs["latency"][-1])
    assert {k: v["count"] for k, v in result["by_command"].items()} == \
        dict(e.replies_by_command)
    assert result["requests_by_command"] == dict(e.by_command)
    assert result["lost"] == {"unmatched_replies": 0, "requests_without_reply": 0,
                              "malformed": 0, "dropped": 0}
    assert result["untraced"] == {"tls_connections": 0, "tls_hooked": 1,
                                  "tls_calls_without_socket": 0}
    return result, run


def _snoop_cli(d_runs: dict, job: str) -> tuple[str, PatternsRun]:
    """mongoprobe snoop --engine dtrace --json (d_runs' JOB) over the scenarios: a line
    per reply the client got, each under the socket's fd; returns its stderr and run."""
    run, _ = _d_run(d_runs, job)
    rows = [json.loads(ln) for ln in run.outputs[job] if ln.startswith("{")]
    got: dict[str, int] = {}
    for r in rows:
        got[r["command"]] = got.get(r["command"], 0) + 1
    assert got == dict(run.expected.replies_by_command)
    assert all(0 < r["fd"] < TLS_FD and r["latency_ns"] > 0 for r in rows)
    return run.tracers[job].stderr, run


def test_cli_latency_and_snoop_over_openssl(d_runs, need_dtrace):
    """mongoprobe latency --engine dtrace --tls on (mongo_time_tls.d) and snoop --tls
    auto (mongo_snoop_tls.d): the client's counts, the socket's own fd, the TLS keys.
    (latency: on the mongod socket-BIO and memory-BIO ports and the short connections,
    d_runs' "latency"; snoop on the mongod socket-BIO port, "snoop-auto".)"""
    result, run = _latency_cli(d_runs)
    assert result["tls"]["connections"] == run.connections
    assert "libssl.so.3 (pid provider" in result["tls"]["hooked"][0]
    assert all(0 < int(k.split(",")[1]) < TLS_FD for k in result["by_conn"])

    err, snooped = _snoop_cli(d_runs, "snoop-auto")
    assert "--tls" not in snooped.tracers["snoop-auto"].args
    # (the lines before "Tracing", "mongo_snoop_tls: TLS plaintext ...")
    assert f"tls: {snooped.connections} connections decoded" in err


def test_cli_latency_and_snoop_memory_bio(d_runs, need_dtrace):
    """mongoprobe latency|snoop --engine dtrace --tls on against the memory-BIO server
    (asyncio: no socket syscall inside SSL_read/SSL_write): the client's counts, every
    connection keyed by SSL * and tied, rows and lines under the socket's fd (a
    connection's first reply comes before its tie: snoop holds its line until then).
    (latency: d_runs' "latency", also on a socket-BIO port; snoop on the mongod
    memory-BIO port, "snoop-on".)"""
    result, run = _latency_cli(d_runs)
    n, on_bio = run.connections, run.on_memory_bio()
    assert {k: result["tls"][k] for k in ("connections", "memory_bio", "memory_bio_tied")} \
        == {"connections": n, "memory_bio": on_bio, "memory_bio_tied": on_bio}
    assert "; SSL_free)" in result["tls"]["hooked"][0]
    assert all(0 < int(k.split(",")[1]) < TLS_FD for k in result["by_conn"])
    assert sum(v["count"] for v in result["by_conn"].values()) == run.expected.replies

    err, snooped = _snoop_cli(d_runs, "snoop-on")
    n = snooped.connections
    assert snooped.on_memory_bio() == n
    assert f"tls: {n} connections decoded" in err
    assert f"; {n} on memory BIOs, {n} of them tied to their socket" in err


def test_memory_bio_state_freed(d_runs, need_dtrace):
    """300 short TLS connections, one after another, to the memory-BIO server: each
    connection keyed by an SSL * of its own, its state freed at SSL_free (without it, the
    allocator hands a new SSL the address of a freed one, which would keep the old key:
    fewer keys than connections), every request counted, nothing dropped. (Through
    --max-connections 16, after the scenarios on the mongod socket-BIO and memory-BIO
    ports, under the same start: d_runs' "latency".)"""
    run, _ = _d_run(d_runs, "latency")
    assert run.short == SHORT
    cli = run.tracers["latency"]
    assert cli.args[cli.args.index("--max-connections") + 1] == "16"
    r = json.loads(run.outputs["latency"][-1])
    assert_exact_counts(r, run)
    on_bio = run.on_memory_bio()
    assert {k: r["tls"][k] for k in ("connections", "memory_bio", "memory_bio_tied")} == \
        {"connections": run.connections, "memory_bio": on_bio, "memory_bio_tied": on_bio}
    assert r["untraced"]["tls_calls_without_socket"] == 0
    assert all(0 < int(k.split(",")[1]) < TLS_FD for k in r["by_conn"])


def test_go_tls_is_refused_or_counted(tls_target, need_dtrace):
    """FerretDB over TLS (Go crypto/tls): --engine dtrace --tls on fails with the reason;
    --tls auto runs mongo_time.d, says Go is not decoded, and counts the TLS connections
    (none of their requests is seen)."""
    import pymongo

    info = tls_target
    r = subprocess.run([sys.executable, "-m", "mongoprobe", "latency", "-p", str(info.pid),
                        "--engine", "dtrace", "--tls", "on", "-d", "1"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    assert "--tls on: PID" in r.stderr and "Go crypto/tls, which D cannot name" in r.stderr

    choice = dtrace_engine.tls_script("mongo_time.d", info.pid, "auto")
    assert (choice.script, choice.args, choice.hooked) == ("mongo_time.d", (), None)
    assert any("TLS Go crypto/tls in " in n and "is not decoded by DTrace" in n
               for n in choice.notes), choice.notes
    cli = start_cli("latency", "-p", str(info.pid), "--json", "--engine", "dtrace",
                    "--max-connections", "1000")
    try:
        mixedload.run(info.uri, threads=2, rounds=1)
        client = pymongo.MongoClient(info.uri)
        client.admin.command("ping")
        client.close()
        time.sleep(0.5)
    finally:
        out, err = stop_cli(cli, timeout=180)
    result = json.loads(out.strip().splitlines()[-1])
    assert result["counts"]["requests"] == 0
    assert result["lost"]["malformed"] == 0
    assert result["untraced"]["tls_hooked"] == 0
    assert result["untraced"]["tls_connections"] >= 3   # 2 load threads' pools + ping
    assert "tls" not in result
    assert "look like TLS" in err
