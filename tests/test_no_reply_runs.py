"""A recorded run of a Node.js client (samples/load/run-nodejs): a command whose only
request asked for no reply (the driver's closing endSessions, sent with moreToCome),
which the server answered anyway; phases found in its traffic; and damaged copies of
the run, which each give one clear line.

Offline: the sample is a real recording (samples/load/README.md says how it was made)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import zstandard

from helpers.cli import mp
from helpers.run_copies import drop_events, edit_manifest
import mongoprobe

RUN = Path(__file__).resolve().parents[1] / "samples" / "load" / "run-nodejs"
WHOLE = ["--phases", "all=0..1000"]      # one phase over the whole recording


def _without_events(tmp_path: Path) -> Path:
    shutil.copytree(RUN, tmp_path / "run")
    return drop_events(tmp_path / "run")


@pytest.fixture(params=["events", "histograms"])
def run(request, tmp_path) -> Path:
    return RUN if request.param == "events" else _without_events(tmp_path)


def test_a_command_without_an_answered_request_is_a_row_without_latency(run):
    r = mp("phases", str(run), "--json", *WHOLE)
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    (p,) = j["phases"]
    es = p["latency_us"]["endSessions"]
    assert es == {"count": 0, "no_reply": 1, "avg": None, "p50": None, "p95": None,
                  "p99": None, "max": None}
    # the answered commands keep their shape: no no_reply key where there is none
    assert set(p["latency_us"]["insert"]) == {"count", "avg", "p50", "p95", "p99", "max"}
    text = mp("phases", str(run), *WHOLE).stdout
    row = next(line for line in text.splitlines() if line.startswith("all") and
               " endSessions " in line)
    assert row.split()[2:] == ["0", "-", "-", "-", "-"]
    assert "not timed: endSessions 1)" in text
    assert max(len(line) for line in text.splitlines()) < 80


def test_the_servers_answer_is_named_not_lost(run):
    j = json.loads(mp("phases", str(run), "--json").stdout)
    assert j["lost"]["probe"] == {"unmatched_replies": 0, "requests_without_reply": 0,
                                  "malformed": 0, "dropped": 0}
    assert j["lost"]["answered_no_reply"] == {"endSessions": 1}
    text = mp("phases", str(run)).stdout
    assert ("answered though sent with moreToCome: 1 (endSessions 1): the server's "
            "replies,\n    not a loss") in text
    rec = mongoprobe.load_run(run)
    assert rec.latencies.counts["answered_no_reply"] == 1
    assert rec.latencies.counts["no_reply"] == 1


def test_every_command_counted_as_ferretdb_counts_it():
    rec = mongoprobe.load_run(RUN)
    truth, seen = dict(rec.metrics_delta), rec.latency_counts
    # FerretDB counts the driver's legacy-named handshake as "unknown"
    assert truth.pop("unknown") == seen.pop("ismaster")
    assert seen == truth


def test_traffic_phases_are_named_for_their_requests(run):
    """The client's steps: inserts (2 s), finds (2 s), aggregations (1 s), a delete."""
    rec = mongoprobe.load_run(run)
    assert rec.tool_output.tool == "traffic"
    names = rec.phases["name"].tolist()
    assert names[:2] == ["insert", "find"]
    assert names[2].startswith("aggregate")
    steps = json.loads(next(line for line in (RUN / "load.out").read_text().splitlines()
                            if '"steps"' in line).split("\t", 2)[2])["steps"]
    got = rec.phases.set_index("name")
    for step, name in zip(steps, names):
        # each boundary within a second of the client's own
        assert abs(got.loc[name, "start"] - step["start"]) < 1.0, name


def test_the_report_renders_the_row(run, tmp_path):
    out = tmp_path / "report.html"
    r = mp("report", str(run), "-o", str(out), *WHOLE)
    assert r.returncode == 0, r.stderr
    assert "endSessions" in out.read_text()


# --- damaged run folders: one clear line each ----------------------------------------


def _copy(tmp_path: Path) -> Path:
    run = tmp_path / "damaged"
    shutil.copytree(RUN, run)
    return run


def test_an_events_file_without_a_column_is_one_line(tmp_path):
    run = _copy(tmp_path)
    p = run / "latency.events.parquet"
    pq.write_table(pq.read_table(p).drop(["latency_ns"]), p)
    for cmd in (["phases", str(run)], ["report", str(run), "-o", str(tmp_path / "r.html")]):
        r = mp(*cmd)
        assert r.returncode == 1 and r.stdout == ""
        assert r.stderr.strip().splitlines() == [
            f"mongoprobe: {p}: not a wire events table (no latency_ns column) "
            "(ValueError; MONGOPROBE_DEBUG=1 shows where)"]


def test_a_cut_slice_file_is_read_up_to_its_cut_and_said(tmp_path):
    run = _copy(tmp_path)
    p = run / "latency.bcc.jsonl.zst"
    text = zstandard.ZstdDecompressor().decompressobj().decompress(p.read_bytes()).decode()
    lines = text.splitlines(keepends=True)
    assert json.loads(lines[-1])["end"]
    # the end line gone and the last slice cut mid-line, as a killed probe leaves it
    p.write_bytes(zstandard.ZstdCompressor().compress(
        "".join(lines[:-2]).encode() + lines[-2].encode()[:40]))
    r = mp("phases", str(run))
    assert r.returncode == 0, r.stderr
    assert ("cut: latency.bcc.jsonl.zst: no end line after its last slice (the file is "
            "cut):\n    its counters are the last slice's") in r.stdout


def test_a_manifest_without_end_is_said(tmp_path):
    run = edit_manifest(_copy(tmp_path), end=None)
    r = mp("phases", str(run), "--json")
    assert r.returncode == 0, r.stderr
    (why,) = json.loads(r.stdout)["lost"]["cut"]
    assert why.startswith("manifest.json: no end (record did not finish")
    assert "cut: manifest.json: no end" in mp("phases", str(run)).stdout
