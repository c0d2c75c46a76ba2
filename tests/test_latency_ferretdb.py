"""The latency probe on the real target: counts exact, latencies sane, per request.

Runs ``mongoprobe latency --json --events`` (the real CLI, the real probe) against a
real FerretDB while 8 pymongo connections with overlapping requestIDs drive a mixed
load, then checks the probe against two independent truths: the client's own
command monitoring and FerretDB's /debug/metrics.
"""

from __future__ import annotations

import json
import time

import pytest

from helpers.cli import start_cli, stop_cli
from helpers.ferretdb import (WORKLOAD_COMMANDS, check_failures, failed_responses, metrics_delta,
                              refused_workload, response_counts)
from mongoprobe.load import mixed_workload as mixedload
from mongoprobe.run import procnet, target
from mongoprobe.formats import wire_events

pytestmark = [pytest.mark.root, pytest.mark.target]


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
        out, _ = stop_cli(cli)
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
        out, _ = stop_cli(cli)
    truth = failed_responses(before, response_counts(ferretdb.metrics_url))
    assert truth[("buildinfo", "UnsupportedOpQueryCommand")] == 2
    truth["find", "5739101"] = 1      # the {$err} reply FerretDB counts "ok"
    check_failures(json.loads(out.strip().splitlines()[-1]), truth,
                   wire_events.parse_events_json(events_file.read_text().splitlines()))
