"""pymongo's ``compressors=`` (snappy, zlib, zstd) against the pattern server.

tests/wireserver.py answers a driver's hello with the first codec the client offers, so
pymongo sends every command but the handshake as OP_COMPRESSED and the server answers
compressed. The server counts what it served (wireserver's ``--counts``: opcode and
the command inside; helpers.tls's pattern server says them after each codec); the
probes must count the same, exactly:

* in-kernel counts key the compressed requests ``[compressed]`` (their opcode row
  OP_COMPRESSED), every other request by its name;
* bcc with ``--events`` names the command inside each compressed request in its events
  (decompressed in user space from the request's first bytes);
* so do bpftrace's events (``mongo_latency.bt PID 0 1``, what ``record --events`` keeps:
  ``phases``/``report`` of a recorded run name them too), from the body's first 40
  bytes (bcc's 128): zstd, which decodes whole blocks only, names the short ones.

A tracer start is what costs: one `latency --events` start per engine, both attached
together to one server, traces every codec's workload in turn (the fixture
compressed_run); the kernel's counts are checked over all codecs, the events codec by
codec.

FerretDB v1.24 does not negotiate compression (no "compression" in its hello; OP_COMPRESSED
is an unhandled opcode there): checked here too, so these tests use the pattern server.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass

import pytest

import wireclient
from helpers.tls import CliTracer, Job, PatternsRun, traced_jobs
from helpers.wire import tool_unavailable

CODECS = ["snappy", "zlib", "zstd"]
pytestmark = pytest.mark.root


def workload(uri: str) -> None:
    """A few of each CRUD command and a ping through one pymongo client."""
    import pymongo

    client = pymongo.MongoClient(uri, directConnection=True, serverSelectionTimeoutMS=10000)
    coll = client.test.coll
    for i in range(3):
        coll.insert_one({"_id": i, "x": "y" * 200})
        coll.find_one({"_id": i})
    coll.update_one({"_id": 1}, {"$set": {"x": 2}})
    coll.delete_one({"_id": 2})
    coll.count_documents({})
    client.admin.command("ping")
    client.close()


def split(served: Counter) -> tuple[Counter, Counter, Counter]:
    """The server's counts as the probes see them: (in-kernel by command, by the command
    inside, the compressed ones' commands)."""
    kernel, named, inside = Counter(), Counter(), Counter()
    for key, n in served.items():
        opcode, command = key.split(" ", 1)
        kernel["[compressed]" if opcode == "OP_COMPRESSED" else command] += n
        named[command] += n
        if opcode == "OP_COMPRESSED":
            inside[command] += n
    return kernel, named, inside


ENGINES = ("bcc", "bpftrace")
GAP = 1.0   # seconds between two codecs' workloads: their events told apart by time


@dataclass
class Traced:
    """One engine's `latency --json --events` over every codec's workload."""
    result: dict                            # its JSON summary
    events: list[dict]                      # its events
    served: Counter                         # what the server served, all codecs
    by_codec: dict[str, tuple[Counter, list[dict]]]   # codec -> (served, its events)


@pytest.fixture(scope="module")
def compressed_run(tmp_path_factory) -> dict[str, Traced | str]:
    """ONE `mongoprobe latency --json --engine ENGINE --events` start per engine, both
    attached together to one mongod-pattern server (tests/wireserver.py's mongod mode),
    then each codec's workload in turn, GAP seconds apart: what the server served during
    each (its counts read after each), and the events of each (by their time, between
    the gaps). {engine: Traced, or why it cannot run here}."""
    workdir = tmp_path_factory.mktemp("compression")
    skipped = {engine: tool_unavailable(engine) for engine in ENGINES}
    if all(skipped.values()):
        pytest.skip("; ".join(sorted(set(skipped.values()))))
    windows: dict[str, tuple[float, float]] = {}
    snapshots: list[Counter] = []

    def start(pid: int, tracers: dict) -> None:
        for engine in ENGINES:
            if not skipped[engine]:
                tracers[engine] = CliTracer(workdir, engine, "latency", "-p", str(pid),
                                            "--json", "--engine", engine, "--events",
                                            str(workdir / f"{engine}.events.jsonl"))

    def drive(server) -> PatternsRun:
        port = server.ports["mongod", "plain"]
        snapshots.append(server.snapshot())
        for codec in CODECS:
            t0 = time.time()
            workload(f"mongodb://127.0.0.1:{port}/?compressors={codec}")
            time.sleep(0.5)
            snapshots.append(server.snapshot())
            windows[codec] = (t0, time.time())
            time.sleep(GAP)
        return PatternsRun({}, wireclient.Expected())

    run = traced_jobs(workdir, None, {"run": Job(start, (("mongod", "plain"),),
                                                 drive=drive)})["run"]
    if isinstance(run, BaseException):
        raise run
    served = {codec: snapshots[i + 1] - snapshots[i] for i, codec in enumerate(CODECS)}
    # a codec's events: from the middle of the gap before its workload to the middle
    # of the one after
    bounds = {codec: (windows[codec][0] - GAP / 2, windows[codec][1] + GAP / 2)
              for codec in CODECS}
    out: dict[str, Traced | str] = {}
    for engine in ENGINES:
        if skipped[engine]:
            out[engine] = skipped[engine]
            continue
        events = [json.loads(line) for line in
                  (workdir / f"{engine}.events.jsonl").read_text().splitlines()]
        out[engine] = Traced(json.loads(run.outputs[engine][-1]), events, snapshots[-1],
                             {codec: (served[codec], [e for e in events
                                                      if lo <= e["time"] < hi])
                              for codec, (lo, hi) in bounds.items()})
    return out


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("engine", ["bcc", "bpftrace"])
def test_compressors_counted_and_named(engine, codec, compressed_run):
    """latency --json --events: the kernel's counts and histograms key compressed
    requests "[compressed]"; the events name the command inside; all equal the
    server's own counts. (One start per engine traces every codec's workload in turn:
    the kernel's counts are checked over all of them, the events codec by codec.)"""
    traced = compressed_run[engine]
    if isinstance(traced, str):
        pytest.skip(traced)
    served, codec_events = traced.by_codec[codec]
    kernel, named, inside = split(served)
    assert sum(inside.values()) >= 10, served          # compression was negotiated
    all_kernel, _, all_inside = split(traced.served)
    result = traced.result
    assert result["requests_by_command"] == dict(all_kernel)
    assert result["by_op"]["OP_COMPRESSED"]["count"] == sum(all_inside.values())
    # every event falls in one codec's window
    assert sum(len(evs) for _, evs in traced.by_codec.values()) == len(traced.events)
    everything = Counter(e["command"] for e in traced.events)
    # latency's per-command view is exact from the events: named as they are
    assert {k: v["count"] for k, v in result["by_command"].items()} == dict(everything)
    got = Counter(e["command"] for e in codec_events if e["opcode"] == "OP_COMPRESSED")
    if codec == "zstd":
        # zstd decodes whole blocks only: a body longer than the prefix the probe keeps
        # stays "[compressed]" (probes/README.md); the short ones are named
        unnamed = got.pop("[compressed]", 0)
        assert 0 < unnamed < sum(inside.values()) and got and not got - inside
        assert sum(got.values()) + unnamed == sum(inside.values())
    else:
        assert got == inside
        assert Counter(e["command"] for e in codec_events) == named
    assert result["lost"] == dict.fromkeys(result["lost"], 0)


def test_ferretdb_does_not_negotiate_compression(ferretdb):
    """FerretDB v1.24's hello names no compressor when a client offers all three, so
    pymongo's compressors= sends plain OP_MSG: its own metrics count no OP_COMPRESSED."""
    import pymongo

    from mongoprobe.run import target

    before = target.request_counts(ferretdb.metrics_url)
    client = pymongo.MongoClient(ferretdb.uri, compressors="snappy,zlib,zstd")
    reply = client.admin.command({"hello": 1, "compression": ["snappy", "zlib", "zstd"]})
    client.test.coll.find_one({})
    client.close()
    after = target.request_counts(ferretdb.metrics_url)
    assert "compression" not in reply
    grown = {k for k, n in after.items() if n > before.get(k, 0)}
    assert ("OP_MSG", "find") in grown
    assert not any(op == "OP_COMPRESSED" for op, _ in grown)
