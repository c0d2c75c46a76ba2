"""TLS plaintext decoded by the bcc probes (probes/mongo_tls.h) and bpftrace's
mongo_latency_tls.bt (OpenSSL only), counted exactly:

- FerretDB serving TLS (Go crypto/tls: uprobes at (*Conn).Read/Write's entry and RET
  instructions), driven by pymongo over TLS: per-command counts == FerretDB's own
  metrics == the client's count, failed replies == FerretDB's failed responses;
- tests/wireserver.py --tls (Python's ssl: OpenSSL's libssl.so.3, SSL_read_ex and
  SSL_write_ex) in mongod's pattern (the 16-byte header, then the body), buffered
  4 KiB reads, and replies split across writes, driven by tests/wireclient.py's
  scenarios over TLS: every count exact, nothing lost (bcc and bpftrace alike);
- the same with --tls-bio memory (asyncio's TLS transport: OpenSSL on memory BIOs,
  no socket syscall inside SSL_read/SSL_write, as mongod's asio): the plaintext keyed
  by SSL *, every connection tied to its socket; pymongo over it, the snoop lines
  (mongosnoop, mongoprobe snoop --engine bpftrace) per command == the requests the
  server served; 300 short connections through maps sized for 16: the SSL *-keyed
  state is freed at SSL_free (bcc and bpftrace alike).

Also: where tlshooks.find puts the Go return probes (each offset is a RET byte).

A tracer start is what costs (bcc compiles its C): the wireserver patterns are served
by one process (a port each, helpers.tls) and traced by ONE start of each tool,
started together, over ONE traffic pass (the fixture tls_run); the tests check one
aspect each of it, the counts summed over the patterns and still exact.

Needs root, bcc (python3-bpfcc, kernel headers) or bpftrace, openssl, and the FerretDB
build.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
import struct
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import wireclient
from mongoprobe.load import mixed_workload as mixedload
from mongoprobe.run import target
from mongoprobe.run import tracer as mp_probes
from mongoprobe.formats import wire_events
from helpers.ferretdb import (REFUSED, WORKLOAD_COMMANDS, failed_responses, metrics_delta,
                              response_counts)
from helpers.tls import CliTracer, Job, PatternsRun, assert_exact_counts, stop_all_or_raise, traced_jobs
from helpers.wire import (BCC_TOOL, SYSTEM_PYTHON, Probe, from_bcc, from_bpftrace,
                          sleeping_in_main_loop, tool_unavailable)

pytestmark = [pytest.mark.root, pytest.mark.target]

ROOT = Path(__file__).resolve().parents[1]
BPFTRACE_TLS_TOOL = ROOT / "probes" / "mongo_latency_tls.bt"
MW_TLS_FD = 0x80000000
MW_TLS_SSL = 0x40000000  # a memory-BIO connection whose socket is not known


@pytest.fixture(scope="module")
def ferretdb_run(tls_target, tmp_path_factory) -> SimpleNamespace:
    """`mongoprobe latency --engine bcc --tls on --events` and `mongoprobe snoop
    --engine bcc --tls on --json` on the TLS FerretDB, started together (their compiles
    overlap), over one load: pymongo over TLS, 8 threads of mixed load, then commands
    FerretDB refuses, then 5 pings from a client of their own; FerretDB's metrics read
    around it."""
    import pymongo
    from pymongo.errors import OperationFailure

    reason = mp_probes.why_cannot_bcc()
    if reason:
        pytest.skip(reason)
    info = tls_target
    workdir = tmp_path_factory.mktemp("ferretdb")
    events_file = workdir / "events.jsonl"
    before = target.request_counts(info.metrics_url)
    before_resp = response_counts(info.metrics_url)
    tracers = {}
    try:
        tracers["latency"] = CliTracer(workdir, "latency", "latency", "-p", str(info.pid),
                                       "--json", "--engine", "bcc", "--tls", "on",
                                       "--events", str(events_file))
        tracers["snoop"] = CliTracer(workdir, "snoop", "snoop", "-p", str(info.pid), "--json",
                                     "--engine", "bcc", "--tls", "on")
        for tracer in tracers.values():
            tracer.wait_attached()
        load = mixedload.run(info.uri, threads=8, rounds=2)
        client = pymongo.MongoClient(info.uri)
        for cmd, code in REFUSED:
            with pytest.raises(OperationFailure) as exc:
                client.test.command(cmd)
            assert exc.value.code == code
        client.close()
        client = pymongo.MongoClient(info.uri)
        for _ in range(5):
            client.admin.command("ping")
        client.close()
        time.sleep(0.5)      # let the last replies reach the probe
    except BaseException as exc:
        stop_all_or_raise(tracers, exc)
    outputs = stop_all_or_raise(tracers)
    return SimpleNamespace(
        latency=json.loads(outputs["latency"][-1]),
        snoop=[json.loads(ln) for ln in outputs["snoop"] if ln.startswith("{")],
        events=wire_events.parse_events_json(events_file.read_text().splitlines()),
        load=load, requests=metrics_delta(before, target.request_counts(info.metrics_url)),
        failed=failed_responses(before_resp, response_counts(info.metrics_url)))


def test_ferretdb_tls_counts_match_metrics(ferretdb_run, need_bcc):
    """pymongo over TLS (8 threads, mixed load, then commands FerretDB refuses): the
    plaintext decoded from Go's crypto/tls gives FerretDB's own counts exactly. (With
    test_snoop_tls_lines's pings: ferretdb_run.)"""
    result, load = ferretdb_run.latency, ferretdb_run.load
    assert result["lost"] == {"unmatched_replies": 0, "requests_without_reply": 0,
                              "malformed": 0, "dropped": 0}
    probe_counts = {k: v["count"] for k, v in result["by_command"].items()}
    assert probe_counts == ferretdb_run.requests
    refused = [next(iter(cmd)) for cmd, _ in REFUSED]
    for cmd in WORKLOAD_COMMANDS:
        assert probe_counts[cmd] == load.counts[cmd] + refused.count(cmd), cmd
    from mongoprobe.wire import error_codes as errorcodes
    errors = {(cmd, errorcodes.name(int(c)) or c): n for cmd, v in result["by_command"].items()
              for c, n in v.get("error_codes", {}).items()}
    assert errors == ferretdb_run.failed
    # every connection decoded: none left as "looks like TLS"
    assert result["untraced"]["tls_connections"] == 0
    assert result["untraced"]["tls_calls_without_socket"] == 0
    assert result["tls"]["connections"] >= 9     # 8 load threads' pool + the last client
    assert result["tls"]["hooked"] and "Go crypto/tls" in result["tls"]["hooked"][0]
    events = ferretdb_run.events
    assert len(events) == sum(probe_counts.values())
    assert (events["latency_ns"] > 0).all()
    assert (events["fd"] < MW_TLS_FD).all()       # the socket's own fd, not the state key


def _openssl_probe(engine: str, pid: int, tmp_path: Path, *extra: str) -> Probe:
    """The engine's latency probe on pid with its OpenSSL hooked: bcc's mongolatency.py
    --tls on; bpftrace's mongo_latency_tls.bt on the library mongoprobe chooses
    (wire_probe.bpftrace_tls_hook, as `mongoprobe latency --tls on` runs it). extra:
    more of bcc's options."""
    if engine == "bcc":
        return Probe([SYSTEM_PYTHON, str(BCC_TOOL), "-p", str(pid), "-j", "--tls", "on", *extra],
                     lambda p: sleeping_in_main_loop(p.proc.pid), tmp_path / "probe.err")
    from mongoprobe.run import wire_probe
    hook, notes = wire_probe.bpftrace_tls_hook(pid, "on")
    assert notes == [f"mongo_latency_tls.bt: TLS plaintext from {hook.describe()}"]
    return Probe([mp_probes.bpftrace_binary(), "-f", "json", *mp_probes.BPFTRACE_WIRE_OPTS,
                  str(BPFTRACE_TLS_TOOL), str(pid), "0", "0",
                  hook.path],
                 lambda p: any('"Tracing MongoDB' in line for line in p.lines),
                 tmp_path / "probe.err")


def _openssl_tls_counts(engine: str, lines: list[str], probe_err: Path):
    """(what the probe said it hooked, TLS connections decoded, TLS connections
    left undecoded, calls without a socket, (of the decoded: on memory BIOs, tied to
    their socket))."""
    if engine == "bcc":
        r = json.loads(lines[-1])
        tls = r["tls"]
        return (probe_err.read_text(), tls["connections"],
                r["untraced"]["tls_connections"], r["untraced"]["tls_calls_without_socket"],
                (tls["memory_bio"], tls["memory_bio_tied"]))
    from mongoprobe.formats.bpftrace_latency import BpftraceLatency
    reader = BpftraceLatency("mongo_latency_tls.bt")
    for line in lines:
        reader.feed(line)
    reader.close()
    said = "".join(json.loads(ln)["data"] for ln in lines
                   if '"printf"' in ln and '"@' not in ln)
    u, tls = reader.untraced, reader.tls
    return (said, tls["connections"], u["tls_connections"], u["tls_calls_without_socket"],
            (tls["memory_bio"], tls["memory_bio_tied"]))


SHORT = 300     # short connections of the state-freed checks, one after another


@pytest.fixture(scope="module")
def tls_run(tmp_path_factory) -> SharedRun:
    """Two pattern servers, every tracer started together (helpers.tls.traced_jobs):

    run    ONE traffic pass on every pattern (helpers.tls.PATTERNS, a port each):
           wireclient's scenarios on each port in turn, then SHORT short connections
           on the mongod memory-BIO port; traced by ONE start of each: bcc's
           mongolatency.py --tls on --max-connections 16 ("bcc"), bpftrace's
           mongo_latency_tls.bt ("bpftrace"; both as _openssl_probe runs them), and
           `mongoprobe latency --engine bpftrace --tls on --max-connections 16
           --events` ("cli-bpftrace": every bpftrace map 64 keys);
    snoop  pymongo's load on the mongod memory-BIO pattern (_pymongo_memory_bio_load),
           traced by mongosnoop.py -j --tls on ("snoop-bcc") and `mongoprobe snoop
           --engine bpftrace --json --tls on` ("snoop-bpftrace"); what the server
           served meanwhile.

    A tracer that cannot run here is left out, its tests skipped with the reason."""
    workdir = tmp_path_factory.mktemp("tls-run")
    skipped = {"bcc": tool_unavailable("bcc"),
               "bpftrace": mp_probes.why_cannot_trace() or tool_unavailable("bpftrace")}
    skipped["cli-bpftrace"] = skipped["bpftrace"]
    if all(skipped.values()):
        pytest.skip("; ".join(sorted(set(skipped.values()))))
    try:
        cert_key = target._self_signed(workdir / "tls")
    except target.TargetError as e:
        pytest.skip(str(e))
    events = workdir / "run" / "events.jsonl"

    def start(pid: int, tracers: dict) -> None:
        if not skipped["bcc"]:
            tracers["bcc"] = _openssl_probe("bcc", pid, _mkdir(workdir / "bcc"),
                                            "--max-connections", "16")
        if not skipped["bpftrace"]:
            tracers["bpftrace"] = _openssl_probe("bpftrace", pid, _mkdir(workdir / "bpftrace"))
            tracers["cli-bpftrace"] = CliTracer(
                workdir / "run", "cli-bpftrace", "latency", "-p", str(pid), "--json",
                "--engine", "bpftrace", "--tls", "on", "--max-connections", "16",
                "--events", str(events))

    def start_snoop(pid: int, tracers: dict) -> None:
        if not skipped["bcc"]:
            tracers["snoop-bcc"] = Probe(
                [SYSTEM_PYTHON, str(ROOT / "probes" / "mongosnoop.py"), "-p", str(pid), "-j",
                 "--tls", "on"], lambda p: "Tracing MongoDB" in p.stderr.read_text(),
                _mkdir(workdir / "snoop-bcc") / "probe.err")
        if not skipped["bpftrace"]:
            tracers["snoop-bpftrace"] = CliTracer(
                workdir / "snoop", "snoop-bpftrace", "snoop", "-p", str(pid), "--json",
                "--engine", "bpftrace", "--tls", "on")

    def pymongo_load(server) -> PatternsRun:
        before = server.snapshot()
        _pymongo_memory_bio_load(server.ports[MEMORY], cert_key[0])
        return PatternsRun({}, wireclient.Expected(), served=server.snapshot() - before)

    runs = traced_jobs(workdir, cert_key, {
        "run": Job(start, short=(MEMORY, SHORT)),
        "snoop": Job(start_snoop, (MEMORY,), drive=pymongo_load)})
    shared = SharedRun(runs["run"], runs["snoop"], skipped)
    if isinstance(shared.run, PatternsRun):
        for engine in ("bcc", "bpftrace"):
            if not skipped[engine]:
                shared.tls[engine] = _openssl_tls_counts(engine, shared.run.outputs[engine],
                                                         workdir / engine / "probe.err")
        if not skipped["cli-bpftrace"]:
            cli = shared.run.tracers["cli-bpftrace"]
            shared.cli = (cli.said, json.loads(shared.run.outputs["cli-bpftrace"][-1]),
                          cli.stderr, wire_events.parse_events_json(
                              events.read_text().splitlines()))
    return shared


def _mkdir(path: Path) -> Path:
    path.mkdir(exist_ok=True)
    return path


MEMORY = ("mongod", "memory")


@dataclass
class SharedRun:
    run: PatternsRun | BaseException            # tls_run's "run", or what failed
    snoop: PatternsRun | BaseException          # tls_run's "snoop", or what failed
    skipped: dict[str, str | None]     # tracer -> why it could not run here
    tls: dict[str, tuple] = field(default_factory=dict)   # engine -> _openssl_tls_counts
    cli: tuple | None = None    # cli-bpftrace: (said, JSON summary, stderr, events)

    def of(self, tracer: str, job: str = "run") -> PatternsRun:
        """The job's run, for a test of TRACER (skipped where it could not run)."""
        if self.skipped[tracer]:
            pytest.skip(self.skipped[tracer])
        run = getattr(self, job)
        if isinstance(run, BaseException):
            raise run
        return run


# (engine, mode, BIO): helpers.tls.PATTERNS under each engine
@pytest.mark.parametrize("engine,mode,bio", [
    *((engine, mode, "socket") for engine in ("bcc", "bpftrace")
      for mode in ("mongod", "readwrite", "split")),
    *((engine, mode, "memory") for engine in ("bcc", "bpftrace")
      for mode in ("mongod", "split"))])
def test_openssl_wireserver_exact(engine, mode, bio, tls_run):
    """wireclient's scenarios (pipelining, a 100 KB insert, moreToCome, OP_QUERY,
    OP_COMPRESSED, exhaust, failed commands) over TLS on 4 connections at once: the
    plaintext from OpenSSL's SSL_read_ex/SSL_write_ex counted as the syscall path counts
    plain traffic, by bcc (mongo_tls.h) and by bpftrace (mongo_latency_tls.bt); on
    memory BIOs (no socket syscall inside them) keyed by SSL *, each connection tied to
    its socket (both engines).

    One probe start per engine traces every pattern (a port each of one server) and the
    state-freed checks' short connections (tls_run): the counts are exact over them
    summed (a miscount in this pattern fails every pattern's test of the engine)."""
    run = tls_run.of(engine)
    lines = run.outputs[engine]
    assert (mode, bio) in run.by_pattern and run.by_pattern[mode, bio].requests > 0
    e = run.expected
    said, decoded, undecoded, nofd, bio_tied = tls_run.tls[engine]
    assert "OpenSSL SSL_read/SSL_write/SSL_read_ex/SSL_write_ex" in said
    assert "; SSL_free)" in said
    o = from_bcc(lines) if engine == "bcc" else from_bpftrace(lines)
    assert (o.requests_by_command, o.requests_by_op, o.counts, o.timed_by_command) == (
        dict(e.by_command), dict(e.by_op),
        {"requests": e.requests, "replies": e.replies, "stream_replies": e.stream_replies,
         "no_reply": e.no_reply, "answered_no_reply": e.answered_no_reply.total()},
        dict(e.replies_by_command))
    assert o.lost == dict.fromkeys(o.lost, 0)
    assert (decoded, undecoded, nofd) == (run.connections, 0, 0)
    assert bio_tied == (run.on_memory_bio(), run.on_memory_bio())
    assert all(b > 0 for lows in o.bucket_lows.values() for b in lows)
    # split too: both engines gather a reply's first 40 bytes across writes before
    # matching it
    assert (o.errors_by_command, o.error_codes) == (dict(e.errors_by_command),
                                                    dict(e.error_codes))


def _load_segments(path: Path) -> list[tuple[int, int, int]]:
    """(vaddr, offset, filesz) of the ELF file's PT_LOAD segments."""
    data = path.read_bytes()[:4096]
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    out = []
    with open(path, "rb") as f:
        f.seek(phoff)
        ph = f.read(phentsize * phnum)
    for i in range(phnum):
        typ, _flags, off, vaddr, _pa, filesz = struct.unpack_from("<IIQQQQ", ph, i * phentsize)
        if typ == 1:
            out.append((vaddr, off, filesz))
    return out


def test_go_return_offsets_are_ret_instructions():
    """tlshooks puts Go's return probes at RET instructions (0xc3) of (*Conn).Read and
    Write, read back from the binary's bytes."""
    sys.path.insert(0, str(ROOT / "probes"))
    import tlshooks

    exe = target.ferretdb_binary()
    if not exe.exists():
        pytest.skip(f"{exe} not built: run scripts/setup.sh")
    syms = tlshooks.elf_symbols(str(exe), (tlshooks.GO_READ, tlshooks.GO_WRITE))
    segs = _load_segments(exe)
    with open(exe, "rb") as f:
        for fn in (tlshooks.GO_READ, tlshooks.GO_WRITE):
            value, size = syms[fn]
            offs = tlshooks.ret_offsets(str(exe), fn, value)
            assert offs and all(0 < o < size for o in offs)
            base = next(off + value - va for va, off, sz in segs if va <= value < va + sz)
            for o in offs:
                f.seek(base + o)
                assert f.read(1) == b"\xc3", (fn, o)


def test_snoop_tls_lines(ferretdb_run, need_bcc):
    """mongoprobe snoop --engine bcc over TLS: one JSON line per request, named. (Over
    5 pings and test_ferretdb_tls_counts_match_metrics's load: ferretdb_run.)"""
    lines = ferretdb_run.snoop
    got: dict[str, int] = {}
    for ln in lines:
        got[ln["command"]] = got.get(ln["command"], 0) + 1
    assert got == ferretdb_run.requests
    assert got["ping"] == 5
    assert all(0 < ln["fd"] < MW_TLS_FD and ln["latency_ns"] > 0 for ln in lines)


def _served(counts: Counter) -> dict[str, int]:
    """The server's counts: requests served per command (OP_COMPRESSED by the one
    inside)."""
    out: dict[str, int] = {}
    for key, n in counts.items():
        command = key.split(" ", 1)[1]
        out[command] = out.get(command, 0) + n
    return out


def _pymongo_memory_bio_load(port: int, cert: Path) -> None:
    """20 pings, inserts and find_ones from pymongo over TLS, then its close."""
    import pymongo

    client = pymongo.MongoClient(f"mongodb://127.0.0.1:{port}/?directConnection=true",
                                 tls=True, tlsCAFile=str(cert))
    for i in range(20):
        client.admin.command("ping")
        client.test.coll.insert_one({"i": i})
        client.test.coll.find_one({"i": i})
    client.close()      # its monitor too: nothing more reaches the server
    time.sleep(0.5)


@pytest.mark.parametrize("engine", ["bcc", "bpftrace"])
def test_snoop_pymongo_memory_bio(engine, tls_run):
    """pymongo over TLS to the memory-BIO server (asyncio's transport), mongosnoop -j
    (bcc) or mongoprobe snoop --engine bpftrace --json (mongo_latency_tls.bt's events):
    one line per request the server served, per command, each with its socket's fd.
    (Both tracers attached together to the same load: tls_run's "snoop".)"""
    run = tls_run.of(engine, "snoop")
    tracer = run.tracers[f"snoop-{engine}"]
    printed = run.outputs[f"snoop-{engine}"]
    if engine == "bpftrace":
        footer = "".join(tracer.err[len(tracer.said):])     # after its banner
    else:
        footer = tracer.stderr.read_text()
    lines = [json.loads(ln) for ln in printed if ln.startswith("{")]
    got: dict[str, int] = {}
    for ln in lines:
        got[ln["command"]] = got.get(ln["command"], 0) + 1
    served = _served(run.served)
    assert got == served
    assert (served["ping"], served["insert"], served["find"]) == (20, 20, 20)
    assert all(0 < ln["fd"] < MW_TLS_SSL and ln["latency_ns"] > 0 for ln in lines)
    assert "on memory BIOs" in footer and "not traced" not in footer


def test_memory_bio_state_freed(tls_run):
    """300 short TLS connections, one after another, to the memory-BIO server, through
    maps sized for 16 connections (--max-connections 16): each SSL *-keyed state is
    freed at SSL_free, so none is refused for a full map, every request counts, and
    each connection has a key of its own (without SSL_free the allocator hands a new
    SSL the address of a freed one, which kept its key and state: 5 keys for 300
    connections, checked by leaving SSL_free unhooked).

    They come after every pattern's scenarios under the same bcc start (tls_run): the
    counts are the scenarios' and theirs."""
    run = tls_run.of("bcc")
    assert run.short == SHORT
    r = json.loads(run.outputs["bcc"][-1])
    assert_exact_counts(r, run)
    assert r["full"] == dict.fromkeys(r["full"], 0)
    assert (r["tls"]["connections"], r["tls"]["memory_bio"]) == (run.connections,
                                                                 run.on_memory_bio())
    assert r["untraced"]["tls_calls_without_socket"] == 0


def test_cli_bpftrace_memory_bio_state_freed(tls_run, need_bpftrace):
    """The same 300 short connections under mongoprobe latency --engine bpftrace --tls
    on --events --max-connections 16 (every bpftrace map 64 keys): mongo_latency_tls.bt
    frees each SSL *-keyed state at SSL_free (its @c, @s, @bio and @tlsfd entries), so
    no map fills and every request counts; each connection is decoded on memory BIOs
    and tied to its socket, and every event carries its socket's fd.

    They come after every pattern's scenarios, under the same start (tls_run's
    "cli-bpftrace", test_cli_bpftrace_openssl's): the counts are the scenarios' and
    theirs."""
    run = tls_run.of("cli-bpftrace")
    _, r, err, ev = tls_run.cli
    e, n = run.expected, SHORT
    assert r["by_command"]["ping"]["count"] == \
        sum(p.replies_by_command["ping"] for p in run.by_pattern.values()) + n
    assert r["counts"] == {"requests": e.requests, "replies": e.replies,
                           "stream_replies": e.stream_replies, "no_reply": e.no_reply,
                           "answered_no_reply": e.answered_no_reply.total()}
    assert r["lost"] == dict.fromkeys(r["lost"], 0)
    assert " full: " not in err, err
    on_bio = run.on_memory_bio()
    assert {k: r["tls"][k] for k in ("connections", "memory_bio", "memory_bio_tied")} == (
        {"connections": run.connections, "memory_bio": on_bio, "memory_bio_tied": on_bio})
    assert r["untraced"]["tls_calls_without_socket"] == 0
    assert r["untraced"]["tls_connections"] == 0
    assert len(ev) == e.replies and ((ev["fd"] > 0) & (ev["fd"] < MW_TLS_SSL)).all()


def test_cli_bpftrace_openssl(tls_run, need_bpftrace):
    """mongoprobe latency --engine bpftrace --tls on --events: says which library it
    hooked, runs mongo_latency_tls.bt (whose write return, with events, once took the
    verifier over its million instructions), and gives the client's counts, one event
    per timed request, and the TLS counters (over every pattern's scenarios and the
    short connections: tls_run)."""
    run = tls_run.of("cli-bpftrace")
    said, result, _, events = tls_run.cli
    e = run.expected
    assert any(ln.startswith("mongo_latency_tls.bt: TLS plaintext from OpenSSL "
                             "SSL_read/SSL_write/SSL_read_ex/SSL_write_ex in ") for ln in said)
    # the events name the commands inside OP_COMPRESSED requests, when the 40 bytes
    # bpftrace keeps of their body decompress that far (zlib and snappy here; not
    # wireclient's zstd createIndexes: "[compressed]" then)
    got = Counter({k: v["count"] for k, v in result["by_command"].items()})
    plain = e.replies_by_command - Counter({"[compressed]": e.replies_by_command["[compressed]"]})
    assert got - e.compressed_commands - Counter({"[compressed]": got["[compressed]"]}) == plain
    assert got.total() == e.replies_by_command.total()
    assert result["lost"] == {"unmatched_replies": 0, "requests_without_reply": 0,
                              "malformed": 0, "dropped": 0}
    assert result["tls"]["connections"] == run.connections
    assert "OpenSSL" in result["tls"]["hooked"][0]
    assert result["untraced"]["tls_connections"] == 0
    assert len(events) == sum(e.replies_by_command.values())
    assert (events["fd"] < MW_TLS_FD).all()       # the socket's own fd, not the state key


def test_cli_bpftrace_tls_on_refuses_go(tls_target, need_bpftrace):
    """FerretDB's TLS is Go's crypto/tls, which the bpftrace tool does not decode:
    --engine bpftrace --tls on fails with the reason and the engine that decodes it."""
    r = subprocess.run([sys.executable, "-m", "mongoprobe", "latency", "-p",
                        str(tls_target.pid), "--engine", "bpftrace", "--tls", "on", "-d", "1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "Go crypto/tls" in r.stderr and "--engine bcc" in r.stderr, r.stderr
