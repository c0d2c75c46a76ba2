"""The embedded FerretDB as a truth to check probes against: its /debug/metrics
request and response counts, and the commands it refuses (with which codes)."""

from __future__ import annotations

import time

import pytest

WORKLOAD_COMMANDS = {"insert", "find", "update", "delete", "aggregate", "getMore", "count"}


def metrics_delta(before: dict, after: dict) -> dict[str, int]:
    """Requests per command between two target.request_counts() readings."""
    d = {}
    for (op, cmd), n in after.items():
        k = n - before.get((op, cmd), 0)
        if k:
            d[cmd] = d.get(cmd, 0) + k
    return d


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

    from mongoprobe.wire.encode import encode_op_query

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


def check_failures(result: dict, truth: dict, events: pd.DataFrame | None) -> None:
    """A probe's failed replies (latency --json, and its events) == truth, for
    test_failed_replies_match_ferretdb's requests."""
    from mongoprobe.wire import error_codes as errorcodes

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
