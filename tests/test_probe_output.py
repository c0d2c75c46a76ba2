"""Parsers of the probes' own output, on real recorded runs (samples/probes/).

mongo_latency-ferretdb.json: ``bpftrace -f json mongo_latency.bt PID 2`` on FerretDB
v1.24.0 under ``python -m mongoprobe.mixedload --threads 2 --rounds 1``.
mongo_snoop-ferretdb.txt: ``mongo_snoop.bt PID`` (text) on the same load.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mongoprobe import histogram, latency
from mongoprobe.formats import quantize, wire_events
from mongoprobe.formats.bpftrace_json import parse_bpftrace_json
from mongoprobe.formats.errors import FormatError

SAMPLES = Path(__file__).resolve().parents[1] / "samples" / "probes"


def test_snoop_events_agree_with_the_maps_printed_at_exit():
    text = (SAMPLES / "mongo_snoop-ferretdb.txt").read_text()
    events = wire_events.parse_snoop([ln for ln in text.splitlines() if not ln.startswith("@")])
    maps = quantize.parse_scalars(text)
    by_cmd = maps[maps["name"] == "requests_by_command"].set_index("key")["value"].to_dict()
    assert events["command"].value_counts().to_dict() == {k: int(v) for k, v in by_cmd.items()}
    assert (events["latency_ns"] > 0).all()
    # two connections used the same requestIDs: the probe kept them apart
    assert (events.groupby("request_id")["fd"].nunique() >= 2).all()
    first = events.iloc[0]
    assert (first["command"], first["request_id"], first["latency_ns"]) == ("ismaster", 1, 159470)


def test_snoop_damaged_line_names_the_line():
    with pytest.raises(FormatError, match=r"<snoop>:2: expected a mongo_snoop.bt event line"):
        wire_events.parse_snoop(["TIME(s) PID", "7.355129 18389 garbage"])


def test_latency_json_sample_summary():
    with open(SAMPLES / "mongo_latency-ferretdb.json") as f:
        out = parse_bpftrace_json(f)
    assert out.clock is not None
    s = latency.from_bpftrace(out)
    # interval histograms summed over the run equal the cumulative request counts
    assert {k: g.count for k, g in s.by_command.items()} == s.requests_by_command
    assert s.counts["requests"] == s.counts["replies"] == sum(s.requests_by_command.values())
    assert s.lost == dict.fromkeys(latency.LOST_KEYS, 0)
    assert sum(g.count for g in s.by_op.values()) == s.counts["replies"]
    j = s.to_json()
    for g in j["by_command"].values():
        assert g["count"] == sum(b["count"] for b in g["hist"])
        assert 0 < g["p50_ns"] <= g["p99_ns"] <= g["max_ns"]
    back = latency.from_json(json.loads(json.dumps(j)))
    assert {k: g.count for k, g in back.by_command.items()} == s.requests_by_command
    text = s.render(by="command", unit="us")
    assert "------------- Distribution -------------" in text
    assert text.rstrip().endswith("dropped events 0")


def test_events_exact_percentiles():
    text = (SAMPLES / "mongo_snoop-ferretdb.txt").read_text()
    events = wire_events.parse_snoop([ln for ln in text.splitlines() if not ln.startswith("@")])
    s = latency.from_events(events)
    ins = s.to_json()["by_command"]["insert"]
    v = events.loc[events["command"] == "insert", "latency_ns"]
    assert ins["exact"] and ins["max_ns"] == v.max() and ins["count"] == len(v)
    assert histogram.total(s.by_command["insert"].hist) == len(v)


def test_bpftrace_json_damaged_line():
    with pytest.raises(FormatError, match=r"x:2: expected a bpftrace JSON record"):
        parse_bpftrace_json(['{"type": "time", "data": "1"}', "{not json"], "x")
