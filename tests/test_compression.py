"""pymongo's ``compressors=`` (snappy, zlib, zstd) against the pattern server.

tests/wireserver.py answers a driver's hello with the first codec the client offers, so
pymongo sends every command but the handshake as OP_COMPRESSED and the server answers
compressed. The server counts what it served (``--counts``: opcode and the command
inside); the probes must count the same, exactly:

* in-kernel counts key the compressed requests ``[compressed]`` (their opcode row
  OP_COMPRESSED), every other request by its name;
* bcc with ``--events`` names the command inside each compressed request in its events
  (decompressed in user space from the request's first bytes);
* so do bpftrace's events (``mongo_latency.bt PID 0 1``, what ``record --events`` keeps:
  ``phases``/``report`` of a recorded run name them too), from the body's first 40
  bytes (bcc's 128): zstd, which decodes whole blocks only, names the short ones.

FerretDB v1.24 does not negotiate compression (no "compression" in its hello; OP_COMPRESSED
is an unhandled opcode there): checked here too, so these tests use the pattern server.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from helpers.cli import start_cli, stop_cli
from helpers.wire import WIRESERVER, tool_unavailable

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


class Server:
    """tests/wireserver.py --mode MODE --counts FILE; ``served()`` once stopped."""

    def __init__(self, mode: str, workdir: Path) -> None:
        self.counts = workdir / "served.json"
        self.proc = subprocess.Popen([sys.executable, str(WIRESERVER), "--port", "0", "--mode",
                                      mode, "--counts", str(self.counts)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("READY "), (line, self.proc.stderr.read())
        self.pid, self.port = self.proc.pid, int(line.split()[1])

    def stop(self) -> Counter:
        self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=10)
        assert err == "", err
        return Counter(json.loads(self.counts.read_text()))


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


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("engine", ["bcc", "bpftrace"])
def test_compressors_counted_and_named(engine, codec, tmp_path):
    """latency --json --events: the kernel's counts and histograms key compressed
    requests "[compressed]"; the events name the command inside; all equal the
    server's own counts."""
    reason = tool_unavailable(engine)
    if reason:
        pytest.skip(reason)
    events_file = tmp_path / "events.jsonl"
    server = Server("mongod", tmp_path)
    try:
        cli = start_cli("latency", "-p", str(server.pid), "--json", "--engine", engine,
                        "--events", str(events_file))
        try:
            workload(f"mongodb://127.0.0.1:{server.port}/?compressors={codec}")
            time.sleep(0.5)
        finally:
            out, _ = stop_cli(cli)
    finally:
        served = server.stop()
    kernel, named, inside = split(served)
    assert sum(inside.values()) >= 10, served          # compression was negotiated
    result = json.loads(out.strip().splitlines()[-1])
    assert result["requests_by_command"] == dict(kernel)
    assert result["by_op"]["OP_COMPRESSED"]["count"] == sum(inside.values())
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    everything = Counter(e["command"] for e in events)
    # latency's per-command view is exact from the events: named as they are
    assert {k: v["count"] for k, v in result["by_command"].items()} == dict(everything)
    got = Counter(e["command"] for e in events if e["opcode"] == "OP_COMPRESSED")
    if codec == "zstd":
        # zstd decodes whole blocks only: a body longer than the prefix the probe keeps
        # stays "[compressed]" (probes/README.md); the short ones are named
        unnamed = got.pop("[compressed]", 0)
        assert 0 < unnamed < sum(inside.values()) and got and not got - inside
        assert sum(got.values()) + unnamed == sum(inside.values())
    else:
        assert got == inside
        assert everything == named
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
