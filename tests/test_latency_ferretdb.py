"""The latency probe on the real target: counts exact, latencies sane, per request.

Runs ``mongoprobe latency --json --events`` (the real CLI, the real probe) against a
real FerretDB while 8 pymongo connections with overlapping requestIDs drive a mixed
load, then checks the probe against two independent truths: the client's own
command monitoring and FerretDB's /debug/metrics.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from mongoprobe import mixedload, procnet, target
from mongoprobe.formats import wire_events

pytestmark = [pytest.mark.root, pytest.mark.target]

WORKLOAD_COMMANDS = {"insert", "find", "update", "delete", "aggregate", "getMore", "count"}


def start_cli(*args: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "mongoprobe", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    for line in proc.stderr:   # the CLI says "Tracing ..." once the probe is attached
        if line.startswith("Tracing MongoDB"):
            return proc
        if time.monotonic() > deadline or proc.poll() is not None:
            break
    proc.kill()
    pytest.fail(f"probe did not attach: {proc.stderr.read()}")


def stop_cli(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    return out


def metrics_delta(before: dict, after: dict) -> dict[str, int]:
    d = {}
    for (op, cmd), n in after.items():
        k = n - before.get((op, cmd), 0)
        if k:
            d[cmd] = d.get(cmd, 0) + k
    return d


@pytest.mark.parametrize("engine", ["bpftrace", "bcc"])
def test_latency_matches_client_and_ferretdb(engine, ferretdb, tmp_path, request):
    request.getfixturevalue("need_bcc" if engine == "bcc" else "need_bpftrace")
    events_file = tmp_path / "events.jsonl"
    before = target.request_counts(ferretdb.metrics_url)
    cli = start_cli("latency", "-p", str(ferretdb.pid), "--json", "--engine", engine,
                    "--events", str(events_file))
    peers: dict = {}
    try:
        load = mixedload.run(ferretdb.uri, threads=8, rounds=2,
                             while_open=lambda: peers.update(procnet.socket_peers(ferretdb.pid)))
        time.sleep(0.5)      # let the last replies (endSessions) reach the probe
    finally:
        out = stop_cli(cli)
    after = target.request_counts(ferretdb.metrics_url)
    result = json.loads(out.strip().splitlines()[-1])
    events = wire_events.parse_events_json(events_file.read_text().splitlines())

    # Nothing lost, nothing unmatched.
    assert result["lost"] == {"unmatched_replies": 0, "requests_without_reply": 0,
                              "malformed": 0, "dropped": 0}

    # Per-command counts: probe == FerretDB's metrics == the client's own count.
    probe_counts = {k: v["count"] for k, v in result["by_command"].items()}
    assert probe_counts == metrics_delta(before, after)
    for cmd in WORKLOAD_COMMANDS:
        assert probe_counts[cmd] == load.counts[cmd], cmd
    assert result["requests_by_command"] == probe_counts
    assert len(events) == sum(probe_counts.values())

    # Every latency is positive.
    assert (events["latency_ns"] > 0).all()

    # The 8 connections really shared requestIDs.
    app = events[events["command"].isin(WORKLOAD_COMMANDS)]
    fds_per_id = app.groupby("request_id")["fd"].nunique()
    assert (fds_per_id >= 8).any()

    # Server-side latency <= client-observed latency, request by request.
    port_of_fd = {fd: remote[1] for fd, (local, remote) in peers.items()}
    app = app.assign(local_port=app["fd"].map(port_of_fd))
    client = load.client[load.client["command"].isin(WORKLOAD_COMMANDS)]
    joined = app.merge(client, on=["local_port", "request_id", "command"], how="inner")
    assert len(joined) == len(client) == len(app)
    too_slow = joined[joined["latency_ns"] > joined["duration_us"] * 1000]
    assert too_slow.empty, too_slow[["command", "request_id", "latency_ns", "duration_us"]]


# commands FerretDB v1.24 refuses, and with which code (its replies: {ok: 0.0, errmsg,
# code, codeName})
REFUSED = [({"nosuchcmd": 1}, 59), ({"dropIndexes": "nocoll", "index": "x_1"}, 26),
           ({"collMod": "nocoll"}, 238), ({"find": 1}, 73)]


# legacy OP_QUERY requests FerretDB refuses: (namespace, query, code). On "db.$cmd" it
# answers OP_REPLY {ok: 0, errmsg, code: 352, codeName}; a query on a collection gets
# {$err, code: 5739101, ok: 0}, which FerretDB itself counts as "ok".
LEGACY = [("admin.$cmd", {"buildinfo": 1}, 352), ("admin.$cmd", {"buildinfo": 1}, 352),
          ("test.coll", {}, 5739101)]


def refused_workload(uri: str) -> None:
    """Three rounds of REFUSED's commands (each refused with its code) and a ping, the
    client's endSessions (CommandNotFound), then LEGACY's requests (send_legacy)."""
    import pymongo
    from pymongo.errors import OperationFailure

    client = pymongo.MongoClient(uri)
    for _ in range(3):
        for cmd, code in REFUSED:
            with pytest.raises(OperationFailure) as exc:
                client.test.command(cmd)
            assert exc.value.code == code
        client.admin.command("ping")
    client.close()       # endSessions: CommandNotFound
    send_legacy(uri)
    time.sleep(0.5)


def send_legacy(uri: str) -> None:
    """LEGACY's requests, and a legacy isMaster that succeeds, on one raw connection."""
    import socket
    import struct

    import bson

    from mongoprobe.wire_encode import encode_op_query

    host, port = uri.split("//")[1].split("/")[0].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        for rid, (ns, query, code) in enumerate([*LEGACY, ("admin.$cmd", {"isMaster": 1}, 0)], 1):
            sock.sendall(encode_op_query(rid, 0, ns, query))
            length, _, rto, op = struct.unpack("<iiii", sock.recv(16, socket.MSG_WAITALL))
            doc = bson.decode(sock.recv(length - 16, socket.MSG_WAITALL)[20:])
            assert (rto, op, doc.get("code", 0)) == (rid, 1, code), doc


def failed_responses(before: dict, after: dict) -> dict[tuple[str, str], int]:
    """FerretDB's own count of failed replies: (command, codeName) -> replies. (It
    labels an OP_QUERY's command "unknown": send_legacy's are buildinfo.)"""
    d = {}
    for key, n in after.items():
        k = n - before.get(key, 0)
        if k and key[1] != "ok":
            key = ("buildinfo", key[1]) if key[0] == "unknown" else key
            d[key] = d.get(key, 0) + k
    return d


def response_counts(metrics_url: str) -> dict[tuple[str, str], int]:
    import urllib.request

    from mongoprobe.formats.prometheus import parse_prometheus

    with urllib.request.urlopen(metrics_url, timeout=5) as r:
        df = parse_prometheus(r.read().decode())
    rows = df[df["name"] == "ferretdb_client_responses_total"]
    out: dict = {}
    for labels, v in zip(rows["labels"], rows["value"]):
        key = (labels.get("command", ""), labels.get("result", ""))
        out[key] = out.get(key, 0) + int(v)
    return out


@pytest.mark.parametrize("engine", ["bpftrace", "bcc"])
def test_failed_replies_match_ferretdb(engine, ferretdb, tmp_path, request):
    """Commands FerretDB refuses (and endSessions, which it does not know), legacy
    OP_QUERY requests it refuses (LEGACY): the probe's failed replies per command and
    code == FerretDB's own failed responses, and the {$err} reply it counts "ok";
    successes (ping, the handshake, a legacy isMaster) count none."""
    request.getfixturevalue("need_bcc" if engine == "bcc" else "need_bpftrace")
    events_file = tmp_path / "events.jsonl"
    before = response_counts(ferretdb.metrics_url)
    cli = start_cli("latency", "-p", str(ferretdb.pid), "--json", "--engine", engine,
                    "--events", str(events_file))
    try:
        refused_workload(ferretdb.uri)
    finally:
        out = stop_cli(cli)
    truth = failed_responses(before, response_counts(ferretdb.metrics_url))
    assert truth[("buildinfo", "UnsupportedOpQueryCommand")] == 2
    truth["find", "5739101"] = 1      # the {$err} reply FerretDB counts "ok"
    check_failures(json.loads(out.strip().splitlines()[-1]), truth,
                   wire_events.parse_events_json(events_file.read_text().splitlines()))


def check_failures(result: dict, truth: dict, events: pd.DataFrame | None) -> None:
    """A probe's failed replies (latency --json, and its events) == truth, for
    test_failed_replies_match_ferretdb's requests."""
    from mongoprobe import errorcodes

    probe = {(cmd, errorcodes.name(int(c)) or c): n for cmd, v in result["by_command"].items()
             for c, n in v.get("error_codes", {}).items()}
    assert probe == truth
    assert {cmd: v["errors"] for cmd, v in result["by_command"].items() if v["errors"]} == \
        {cmd: 3 for cmd in ("nosuchcmd", "dropIndexes", "collMod")} | \
        {"endSessions": 1, "buildinfo": 2, "find": 4}
    assert result["by_op"]["OP_QUERY"]["error_codes"] == {"352": 2, "5739101": 1}
    if events is not None:
        failed = events[events["error_code"] != 0]
        assert sorted(failed.groupby(["command", "error_code"]).size().items()) == sorted(
            {("nosuchcmd", 59): 3, ("dropIndexes", 26): 3, ("collMod", 238): 3,
             ("find", 73): 3, ("endSessions", 59): 1, ("buildinfo", 352): 2,
             ("find", 5739101): 1}.items())
