"""The latency probe on the real target: counts exact, latencies sane, per request.

Runs ``mongoprobe latency --json --events`` (the real CLI, the real probe) against a
real FerretDB while 8 pymongo connections with overlapping requestIDs drive a mixed
load, then checks the probe against two independent truths: the client's own
command monitoring and FerretDB's /debug/metrics.

Every CLI of the file starts once, all at once (their compiles overlap): bpftrace and
bcc on the session's FerretDB for the mixed load, bpftrace and bcc on a FerretDB of
the file's own for the failed-reply requests (FerretDB names no legacy OP_QUERY command
in its request counts: the two workloads stay apart).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest

from helpers.cli import at_once, start_cli, stop_cli
from helpers.ferretdb import (WORKLOAD_COMMANDS, check_failures, failed_responses, metrics_delta,
                              refused_workload, response_counts)
from mongoprobe.load import mixed_workload as mixedload
from mongoprobe.run import procnet, target, tracer as probes
from mongoprobe.formats import wire_events

pytestmark = [pytest.mark.root, pytest.mark.target]

ENGINES = ("bpftrace", "bcc")
WHY_NOT = {"bpftrace": probes.why_cannot_trace, "bcc": probes.why_cannot_bcc}


@dataclass
class Runs:
    """Each CLI's (stdout, stderr) once stopped, or what its start raised, by (test,
    engine); the events files; the workloads' truths."""
    outs: dict[tuple[str, str], tuple[str, str] | BaseException] = field(default_factory=dict)
    events: dict[tuple[str, str], Path] = field(default_factory=dict)
    load: object = None
    peers: dict = field(default_factory=dict)
    requests: tuple[dict, dict] = ({}, {})      # the mixed load's FerretDB, before/after
    responses: tuple[dict, dict] = ({}, {})     # the refused one's, before/after

    def result(self, test: str, engine: str) -> tuple[dict, pd.DataFrame]:
        got = self.outs[test, engine]
        if isinstance(got, BaseException):
            raise got
        events = wire_events.parse_events_json(self.events[test, engine].read_text().splitlines())
        return json.loads(got[0].strip().splitlines()[-1]), events


@pytest.fixture(scope="module")
def runs(ferretdb, refused_target, tmp_path_factory) -> Runs:
    folder = tmp_path_factory.mktemp("latency-runs")
    r = Runs()
    on = {"latency": ferretdb, "failed": refused_target}
    wanted = [(test, engine) for test in on for engine in ENGINES if WHY_NOT[engine]() is None]
    for test, engine in wanted:
        r.events[test, engine] = folder / f"{test}-{engine}.jsonl"
    r.requests = (target.request_counts(ferretdb.metrics_url), {})
    r.responses = (response_counts(refused_target.metrics_url), {})
    starts = at_once(lambda key: start_cli("latency", "-p", str(on[key[0]].pid), "--json",
                                           "--engine", key[1], "--events", str(r.events[key])),
                     {key: key for key in wanted})
    clis = {}
    try:
        for key, started in starts.items():
            if isinstance(started, BaseException):
                r.outs[key] = started       # pytest.fail's too: that CLI's tests fail
            else:
                clis[key] = started
        if any(test == "latency" for test, _ in clis):
            r.load = mixedload.run(ferretdb.uri, threads=8, rounds=2,
                                   while_open=lambda: r.peers.update(
                                       procnet.socket_peers(ferretdb.pid)))
        if any(test == "failed" for test, _ in clis):
            refused_workload(refused_target.uri)
        time.sleep(0.5)      # let the last replies (endSessions) reach the probes
    finally:
        # stop_cli's SIGINT to each at once: their ENDs and summaries overlap
        r.outs.update(at_once(stop_cli, clis))
    r.requests = (r.requests[0], target.request_counts(ferretdb.metrics_url))
    r.responses = (r.responses[0], response_counts(refused_target.metrics_url))
    return r


@pytest.mark.parametrize("engine", ENGINES)
def test_latency_matches_client_and_ferretdb(engine, runs, request):
    request.getfixturevalue("need_bcc" if engine == "bcc" else "need_bpftrace")
    result, events = runs.result("latency", engine)
    load, peers = runs.load, runs.peers

    # Nothing lost, nothing unmatched.
    assert result["lost"] == {"unmatched_replies": 0, "requests_without_reply": 0,
                              "malformed": 0, "dropped": 0}

    # Per-command counts: probe == FerretDB's metrics == the client's own count.
    probe_counts = {k: v["count"] for k, v in result["by_command"].items()}
    assert probe_counts == metrics_delta(*runs.requests)
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


@pytest.mark.parametrize("engine", ENGINES)
def test_failed_replies_match_ferretdb(engine, runs, request):
    """Commands FerretDB refuses (and endSessions, which it does not know), legacy
    OP_QUERY requests it refuses (LEGACY): the probe's failed replies per command and
    code == FerretDB's own failed responses, and the {$err} reply it counts "ok";
    successes (ping, the handshake, a legacy isMaster) count none."""
    request.getfixturevalue("need_bcc" if engine == "bcc" else "need_bpftrace")
    result, events = runs.result("failed", engine)
    truth = failed_responses(*runs.responses)
    assert truth[("buildinfo", "UnsupportedOpQueryCommand")] == 2
    truth["find", "5739101"] = 1      # the {$err} reply FerretDB counts "ok"
    check_failures(result, truth, events)
