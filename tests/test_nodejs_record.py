"""The MongoDB Node.js driver under `mongoprobe record` against the embedded FerretDB:
tests/nodeclient/load.js (inserts, finds, aggregations, a delete), as an application
runs it. It prints no phases, so they are found in the server's traffic; closing, the
driver sends endSessions with moreToCome, which FerretDB answers anyway.

Needs root, a tracer, the FerretDB that setup builds, node and the driver that setup
installs (each test skips with the reason where one is missing). The offline half, on
a recording of the same client, is tests/test_no_reply_runs.py."""

from __future__ import annotations

import json
import shlex

import pytest

from helpers import nodeclient
from helpers.cli import mp
import mongoprobe


@pytest.fixture(scope="module")
def run(tmp_path_factory, tracing_and_target):
    why = nodeclient.unavailable()
    if why:
        pytest.skip(why)
    path = tmp_path_factory.mktemp("nodejs") / "RUN"
    cmd = f'node {shlex.quote(str(nodeclient.SCRIPT))} "$MONGOPROBE_URI" 2'
    r = mp("record", "--target", "embedded", "-o", str(path), "--probes", "latency",
           "--", "sh", "-c", cmd, env=nodeclient.env(), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "answered though sent with moreToCome: 1 (endSessions 1)" in r.stderr
    return path


def test_every_command_counted_as_ferretdb_counts_it(run):
    rec = mongoprobe.load_run(run)
    truth, seen = dict(rec.metrics_delta), rec.latency_counts
    # the driver's handshake: FerretDB counts its legacy-named command as "unknown"
    assert truth.pop("unknown") == seen.pop("ismaster")
    assert seen == truth
    assert truth["endSessions"] == 1 and truth["insert"] > 10


def test_phases_name_the_answer_and_lose_nothing(run):
    r = mp("phases", str(run), "--json", "--phases", "all=0..1000")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["lost"]["probe"]["unmatched_replies"] == 0
    assert j["lost"]["answered_no_reply"] == {"endSessions": 1}
    (p,) = j["phases"]
    assert p["latency_us"]["endSessions"]["no_reply"] == 1
    assert p["latency_us"]["endSessions"]["p50"] is None
    r = mp("phases", str(run))
    assert r.returncode == 0, r.stderr
    names = [p["name"] for p in json.loads(mp("phases", str(run), "--json").stdout)["phases"]]
    assert names[0] == "insert"


def test_report_completes(run, tmp_path):
    out = tmp_path / "report.html"
    r = mp("report", str(run), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "answered though sent with moreToCome" in out.read_text()
