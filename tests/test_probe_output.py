"""Parsers of the probes' own output, on real recorded runs (samples/probes/).

All three on FerretDB v1.24.0 under ``python -m mongoprobe.load.mixed_workload --threads 4``:

* mongo_latency-ferretdb.json: ``bpftrace -f json mongo_latency.bt PID 0 1`` (per-second
  histograms, and every request's event), ``--rounds 3``; -v1.json the same from the
  probe's earlier output format (``stats()``, ``max()``, a ``@requests`` counter);
* mongolatency-ferretdb.slices.jsonl: ``mongolatency.py -p PID --slices``, ``--rounds 12``;
* mongo_snoop-ferretdb.txt: ``mongo_snoop.bt PID`` (text), ``--rounds 3``.

Two more show bpftrace losing its async actions (their tests say how the runs were made):
mongo_latency-exit-leftovers.json and mongo_latency-cut-at-sigint.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mongoprobe.model import log2_histogram as histogram, loglinear_buckets as loglinear
from mongoprobe.model import latency_summary as latency
from mongoprobe.formats import quantize, wire_events
from mongoprobe.formats.bpftrace_latency import read_bpftrace_latency, unpack
from mongoprobe.formats.errors import FormatError
from mongoprobe.formats.wire_slices import LOST_KEYS, name_of_words, read_bcc_slices
from mongoprobe.model.latencies import Latencies

SAMPLES = Path(__file__).resolve().parents[1] / "samples" / "probes"


# (-packed: today's probe, FLAGS 1 and EVENTS_EVERY 1, histograms packed with their sums,
# a pymongo find/update load on FerretDB, one command failing)
BPFTRACE_SAMPLES = ["mongo_latency-ferretdb.json", "mongo_latency-ferretdb-v1.json",
                    "mongo_latency-ferretdb-packed.json"]


FAILED_IN_SAMPLE = {"mongo_latency-ferretdb-packed.json": ("nosuchcommand", 1)}


def _bpftrace_sample(name="mongo_latency-ferretdb.json"):
    with open(SAMPLES / name) as f:
        return read_bpftrace_latency(f, name)


def test_snoop_events_agree_with_the_counters_printed_at_exit():
    text = (SAMPLES / "mongo_snoop-ferretdb.txt").read_text()
    events = wire_events.parse_snoop([ln for ln in text.splitlines() if not ln.startswith("@")])
    maps = quantize.parse_scalars(text)
    requests = int(maps.loc[maps["name"] == "requests", "value"].iloc[0])
    assert len(events) == requests > 0
    assert (events["latency_ns"] > 0).all()
    # the connections all used requestIDs 1, 2, 3...: the probe kept them apart
    assert (events.groupby("request_id")["fd"].nunique() >= 2).any()
    assert events.iloc[0]["command"] == "ismaster"


def test_bpftrace_second_cut_at_sigint_is_counted_once():
    """A real run (bpftrace 0.17, tests/wireclient.py's scenarios on every
    tests/wireserver.py mode, 4 connections: 3,584 timed replies, 196 + 56 failed) whose
    bpftrace was held 2 s, then interrupted: it dropped the async actions it had not run.
    Second 34708's print was cut after its histogram's clear, before those of its
    no-reply and failed-reply maps, so END's print of second 34711 (the same map set)
    showed them again, with 34708's mark keys beside 34711's: their counts come off once
    (without: 224 failed failTest replies instead of 196). The three ticks after it were
    lost: their seconds come from END's prints and the exit's."""
    slices, _, counts, lost, _ = _bpftrace_sample("mongo_latency-cut-at-sigint.json")
    assert counts == {"requests": 3612, "replies": 3584, "stream_replies": 112, "no_reply": 28,
                      "answered_no_reply": 0}
    assert lost == dict.fromkeys(lost, 0)
    by, errors = {}, {}
    for s in slices:
        for (command, _op), a in s.rows.items():
            by[command] = by.get(command, 0) + a.count + a.noreply
            errors[command] = errors.get(command, 0) + a.errors
    assert {k: v for k, v in by.items() if not k.startswith("probeCommand")} == {
        "[compressed]": 84, "exhaustTest": 28, "failTest": 196, "find": 168, "insert": 112,
        "isMaster": 56, "ping": 168}
    assert {v for k, v in by.items() if k.startswith("probeCommand")} == {28}
    assert {k: v for k, v in errors.items() if v} == {"failTest": 196, "find": 56}


def test_bpftrace_second_left_in_its_maps_at_exit_is_read():
    """A real run (a C client and server pair over a socketpair, 400,000 find requests,
    EVENTS_EVERY 1, the event maps cut from the sample) where bpftrace lost the
    interval's async print()/clear() of second 29085: its maps were printed at exit,
    after @end. They are that second's, and every reply is counted."""
    slices, _, counts, lost, _ = _bpftrace_sample("mongo_latency-exit-leftovers.json")
    secs = [s.start_ns // 1_000_000_000 for s in slices]
    assert 29085 in secs and len(secs) == len(set(secs))
    late = next(s for s in slices if s.start_ns // 1_000_000_000 == 29085)
    assert sum(a.count for a in late.rows.values()) == 12228
    assert counts["requests"] == counts["replies"] == 400_000
    assert lost["requests_without_reply"] == lost["unmatched_replies"] == 0


def _packed(lats) -> int:
    """A bucket's value as mongo_latency.bt adds it up and bpftrace prints it: the sum
    of (latency << 20) + 1 in a 64-bit integer, signed."""
    v = sum((int(x) << 20) + 1 for x in lats) % (1 << 64)
    return v - (1 << 64) if v >= 1 << 63 else v


@pytest.mark.parametrize("lats", [
    [7],                                    # exact buckets, below 32 ns
    [163_840, 164_000, 167_935],            # one bucket, the sum well under 2^44
    [60_000_000_000] * 300,                 # 5 hours in all: the sum past 2^44 ns
    [2_000_000_000 + i for i in range(9_000)],   # 5 hours over thousands of requests
    [1_000] * ((1 << 20) - 1),              # the most a bucket counts in a second
])
def test_packed_bucket_unpacks_to_its_count_and_exact_sum(lats):
    """mongo_latency.bt counts a bucket's requests and adds up their latencies in one
    per-CPU sum (count in the low 20 bits, the sum modulo 2^44 above): the reader
    gets both back exactly from it and the bucket's bounds, signed or not."""
    b = int(loglinear.index(np.array(lats[:1]))[0])
    assert {int(x) for x in loglinear.index(np.array(lats))} == {b}
    assert unpack(b, _packed(lats)) == (len(lats), sum(lats))


def test_packed_histograms_read_as_counts_sums_and_maxima():
    """@p (packed buckets) and @q (max per CPU) of a second, per command and per
    connection (@pc, @qc): the reader's rows."""
    find = "1684957542,0,0,2013"
    lats = {0: [150_000, 151_000], 1: [150_500, 2_000_000]}
    p = {}
    for cpu_lats in lats.values():
        for x in cpu_lats:
            key = f"{find},{int(loglinear.index(np.array([x]))[0])}"
            p.setdefault(key, []).append(x)
    lines = ['{"type": "printf", "data": "@slice 100\\n"}',
             json.dumps({"type": "map", "data": {"@p1": {k: _packed(v) for k, v in p.items()}}}),
             json.dumps({"type": "map", "data": {"@q1": {f"{c},{find}": max(v)
                                                          for c, v in lats.items()}}}),
             json.dumps({"type": "map", "data": {"@pc1": {
                 f"7,{k.rpartition(',')[2]}": _packed(v) for k, v in p.items()}}}),
             json.dumps({"type": "map", "data": {"@qc1": {"0,7": 151_000, "1,7": 2_000_000}}}),
             '{"type": "printf", "data": "@end\\n"}']
    slices, *_ = read_bpftrace_latency(lines, "packed")
    (row,) = slices[0].rows.values()
    conn = slices[0].conn_rows[7]
    for a in (row, conn):
        assert (a.count, a.sum_ns, a.max_ns) == (4, 2_451_500, 2_000_000)
        assert sum(a.hist.values()) == 4


def test_snoop_damaged_line_names_the_line():
    with pytest.raises(FormatError, match=r"<snoop>:2: expected a mongo_snoop.bt event line"):
        wire_events.parse_snoop(["TIME(s) PID", "7.355129 18389 garbage"])


@pytest.mark.parametrize("name", BPFTRACE_SAMPLES)
def test_bpftrace_slices_add_up_to_the_counters_and_events(name):
    slices, events, counts, lost, clock = _bpftrace_sample(name)
    assert clock is not None and len(slices) >= 2
    assert lost == dict.fromkeys(LOST_KEYS, 0)
    lat = Latencies.from_slices(slices, 0, counts=counts, lost=lost)
    assert int(lat.totals["count"].sum()) == counts["replies"] == counts["requests"] == len(events)
    # every request's event falls in the histogram bucket the kernel counted it in
    # (loglinear.index is the kernel's rule), in the second the kernel said
    ev = events.assign(bucket=loglinear.index(events["latency_ns"].to_numpy()),
                       slice=events["mono_ns"] // 1_000_000_000)
    from_events = ev.groupby(["slice", "command", "bucket"]).size().to_dict()
    h = lat.hist.assign(slice=lat.hist["time"].astype("int64"))
    assert h.set_index(["slice", "command", "bucket"])["count"].to_dict() == from_events
    # sums and maxima are the events' exactly
    tot = lat.totals.groupby("command").agg({"sum_ns": "sum", "max_ns": "max"})
    by = events.groupby("command")["latency_ns"]
    assert tot["sum_ns"].to_dict() == by.sum().to_dict()
    assert tot["max_ns"].to_dict() == by.max().to_dict()


def test_bpftrace_per_connection_rows_are_the_events_exactly():
    """FLAGS bit 1 (per connection): each connection's count, sum and max, from the packed
    @pc and the per-CPU @qc, are its events' exactly."""
    slices, events, counts, lost, _ = _bpftrace_sample("mongo_latency-ferretdb-packed.json")
    got: dict[int, list[int]] = {}
    for s in slices:
        for fd, a in s.conn_rows.items():
            r = got.setdefault(fd, [0, 0, 0])
            r[0] += a.count
            r[1] += a.sum_ns
            r[2] = max(r[2], a.max_ns)
    by = events.groupby("fd")["latency_ns"]
    want = {int(fd): [int(n), int(t), int(m)] for fd, n, t, m in
            zip(by.size().index, by.size(), by.sum(), by.max())}
    assert got == want and len(got) >= 5


@pytest.mark.parametrize("name", BPFTRACE_SAMPLES)
def test_bpftrace_summary_renders_and_round_trips(name):
    sample = name
    slices, events, counts, lost, _ = _bpftrace_sample(name)
    s = latency.from_latencies(Latencies.from_slices(slices, 0, counts=counts, lost=lost))
    assert {k: g.count for k, g in s.by_command.items()} == s.requests_by_command
    j = s.to_json()
    for name, g in j["by_command"].items():
        assert g["count"] == sum(b["count"] for b in g["hist"])
        assert 0 < g["p50_ns"] <= g["p99_ns"] <= g["max_ns"]
        exact = np.sort(events.loc[events["command"] == name, "latency_ns"].to_numpy())
        # within the log-linear buckets' bound of the exact nearest-rank value
        p99 = exact[max(int(np.ceil(0.99 * len(exact))), 1) - 1]
        assert abs(g["p99_ns"] - p99) <= loglinear.MAX_ERROR * p99, name
    # FerretDB refuses endSessions, and the -packed load's made-up command
    # (CommandNotFound): each is a failed reply
    bad, n = FAILED_IN_SAMPLE.get(sample, ("endSessions", 4))
    assert {k: (g.errors, g.codes) for k, g in s.by_command.items() if g.errors} == \
        {bad: (n, {59: n})}
    ends = events[events["command"] == bad]
    assert len(ends) == n and (ends["error_code"] == 59).all()
    assert (events.loc[events["command"] != bad, "error_code"] == 0).all()
    text = s.render(by="command", unit="us")
    assert f"failed (ok: 0): {n}   59 CommandNotFound: {n}" in text
    assert "------------- Distribution -------------" in text
    assert text.rstrip().endswith("dropped events 0")


def test_bcc_slices_sample():
    with open(SAMPLES / "mongolatency-ferretdb.slices.jsonl") as f:
        slices, final = read_bcc_slices(f)
    assert final is not None and final["lost"] == dict.fromkeys(LOST_KEYS, 0)
    lat = Latencies.from_slices(slices, 0, counts=final["counts"], lost=final["lost"])
    assert int(lat.totals["count"].sum()) == final["counts"]["replies"] > 1000
    assert int(lat.hist["count"].sum()) == final["counts"]["replies"]
    s = latency.from_latencies(lat, "bcc")
    assert set(s.by_command) >= {"insert", "find", "aggregate", "getMore"}
    assert sum(g.count for g in s.by_op.values()) == final["counts"]["replies"]
    assert histogram.total(s.by_command["find"].hist) == s.by_command["find"].count
    assert {k: (g.errors, g.codes) for k, g in s.by_command.items() if g.errors} == \
        {"endSessions": (4, {59: 4})}


def test_command_words():
    assert name_of_words(1684957542, 0, 0) == "find"
    assert name_of_words(0x736572706d6f635b, 0x5d646573, 0) == "[compressed]"


def test_damaged_output_names_the_line():
    with pytest.raises(FormatError, match=r"x:2: expected a bpftrace JSON record"):
        read_bpftrace_latency(['{"type": "printf", "data": "@slice 1\\n"}', "{not json"], "x")
    with pytest.raises(FormatError, match=r"x:1: expected an event of 11 values"):
        read_bpftrace_latency(['{"type": "map", "data": {"@e0": {"1,2": [3, 4]}}}'], "x")


@pytest.mark.parametrize("codec", ["noop", "snappy", "zlib", "zstd"])
def test_bcc_tool_names_compressed_requests_from_their_first_bytes(codec):
    """mongolatency.py decompresses the command name of an OP_COMPRESSED request from
    the first 128 bytes the kernel sends (snappy with its own decoder): OP_MSG bodies,
    OP_QUERY commands (wrapped in $query too); zstd only when the body fits in them."""
    import importlib.util

    from mongoprobe.wire.encode import encode_op_compressed, encode_op_msg, encode_op_query

    spec = importlib.util.spec_from_file_location("mongolatency", SAMPLES.parents[1] / "probes"
                                                  / "mongolatency.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    cases = [
        (encode_op_msg(1, 0, {"find": "c", "filter": {}, "$db": "t"}), b"find"),
        (encode_op_msg(1, 0, {"createIndexes": "c", "indexes": [{"key": {"x": 1},
                                                                "name": "x_1"}], "$db": "t"}),
         b"createIndexes"),
        (encode_op_msg(1, 0, {"insert": "c", "documents": [{"x": "y" * 2000}], "$db": "t"}),
         b"insert"),
        (encode_op_query(1, 0, "admin.$cmd", {"isMaster": 1}), b"isMaster"),
        (encode_op_query(1, 0, "admin.$cmd", {"$query": {"ping": 1}}), b"ping"),
        (encode_op_query(1, 0, "t.c", {"x": 1}), b"find"),
    ]
    for inner, name in cases:
        msg = encode_op_compressed(inner, codec)
        got = tool.compressed_command(msg[:128], min(len(msg), 128))
        if codec == "zstd" and len(msg) > 128:
            assert got in (name, None)
        else:
            assert got == name, (codec, name)


def test_bpftrace_exit_print_of_a_second_already_read_is_not_counted_twice():
    """bpftrace can run a clear() after its exit print of the maps: the last second END
    printed then comes again after @end (seen in a full-suite run). With no second
    missing among those printed, those maps are not read again. The real sample, with
    its last printed second's maps repeated after @end as bpftrace prints them."""
    lines = (SAMPLES / "mongo_latency-ferretdb.json").read_text().splitlines(keepends=True)
    end = max(i for i, ln in enumerate(lines) if '"@end' in ln)
    starts = [i for i, ln in enumerate(lines[:end]) if '"@slice ' in ln] + [end]
    # the last second with requests: its per-second maps
    again = next(g for g in ([ln for ln in lines[a + 1:b] if ln.split('"')[7][:2] in
                              ("@h", "@s", "@n", "@x", "@e", "@z")
                              and ln.split('"')[7][-1:].isdigit()]
                             for a, b in reversed(list(zip(starts, starts[1:])))) if g)
    once = read_bpftrace_latency(lines, "once")
    twice = read_bpftrace_latency(lines[:end + 1] + again + lines[end + 1:], "twice")
    assert twice[2] == once[2] and twice[3] == once[3]
    assert len(twice[1]) == len(once[1]) and len(twice[0]) == len(once[0])


def test_recorded_events_name_compressed_commands(tmp_path):
    """A real mongo_latency.bt PID 0 1 output (tests/wireserver.py --mode mongod, pymongo
    with compressors=snappy, tests/test_compression.py's workload): record's move of the
    events to Parquet names each OP_COMPRESSED request from the body bytes printed with
    it (@z), as the server counted them."""
    from collections import Counter

    import pandas as pd

    from mongoprobe.run.collectors import events_to_parquet

    sample = SAMPLES / "mongo_latency-wireserver-snappy.json"
    (tmp_path / "latency.bt.json").write_text(sample.read_text())
    out = events_to_parquet(tmp_path, 0, 1)
    ev = pd.read_parquet(out)
    got = Counter(ev.loc[ev["opcode"] == "OP_COMPRESSED", "command"])
    assert got == Counter({"insert": 3, "find": 3, "update": 1, "delete": 1,
                           "aggregate": 1, "ping": 1, "endSessions": 1})
    kept = (tmp_path / "latency.bt.json").read_text()
    assert not any(f'"@{m}{i}"' in kept for m in "ez" for i in range(3))


def test_bcc_reader_takes_a_cache_slot_only_when_no_writer_can_touch_it():
    """mongolatency.py's take_cache on lat_cache (mongo_wire.h: per-CPU slots in 4 sets,
    a second's set by its number mod 4): a slot is taken and zeroed once every CPU's
    copy in it holds a second that is over and its set is neither the current second's
    nor the next one's; otherwise left whole for a later read (nothing counted twice,
    nothing zeroed under a writer); at the end (final) everything is taken."""
    import ctypes as ct
    import importlib.util
    from types import SimpleNamespace as NS

    spec = importlib.util.spec_from_file_location("mongolatency", SAMPLES.parents[1] / "probes"
                                                  / "mongolatency.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    ways, sets = tool.CACHE_WAYS, tool.CACHE_SETS

    def copy(sl, name=b"find", lat=1000):
        hist = (ct.c_uint32 * tool.NB)()
        if sl:
            hist[300] = 1
        return NS(k=NS(slice=sl, name=NS(c=name), op=2013, fd=0),
                  v=NS(count=1 if sl else 0, sum_ns=lat if sl else 0, max_ns=lat if sl else 0,
                       noreply=0, errors=0, hist=hist))

    free = copy(0)

    class Cache:
        def __init__(self, slots):
            self.slots = slots          # index -> [CPU 0's copy, CPU 1's]
            self.zeroed = []

        def items(self):
            return [(ct.c_int(i), per_cpu) for i, per_cpu in sorted(self.slots.items())]

        def Leaf(self):
            return "zero"

        def __setitem__(self, key, value):
            assert value == "zero"
            self.zeroed.append(key.value)
            self.slots[key.value] = [free, free]

    cur = 1000                           # the current second; its set: 1000 % 4 == 0
    now = cur * tool.SLICE_NS + 500_000_000
    slot = {s: ((s % sets) * ways) + 3 for s in range(cur - 3, cur + 1)}
    t = Cache({
        slot[cur - 1]: [copy(cur - 1), copy(cur - 1, b"insert")],   # over: taken
        slot[cur - 2]: [free, copy(cur - 2)],                       # over: taken
        slot[cur]: [copy(cur), free],                               # being written
        # the next second's set (cur + 1 ≡ cur - 3), holding a second the reader
        # missed: left until that set is safe again
        slot[cur - 3]: [copy(cur - 3), free],
    })
    out = {}
    tool.take_cache(t, now, False, out)
    assert sorted(t.zeroed) == sorted([slot[cur - 1], slot[cur - 2]])
    assert sorted(out) == [cur - 2, cur - 1]
    assert {k: a.count for k, a in out[cur - 1].items()} == {
        ("cmd", ("find", "OP_MSG")): 1, ("cmd", ("insert", "OP_MSG")): 1}
    # a slot whose copies hold a second 4 s old (a reader that fell behind) and the last
    # one, not over yet (50 ms of grace): neither is taken until both are
    mixed = Cache({slot[cur - 1]: [copy(cur - 5), copy(cur - 1)]})
    tool.take_cache(mixed, cur * tool.SLICE_NS + 10_000_000, False, {})
    assert mixed.zeroed == []
    tool.take_cache(mixed, cur * tool.SLICE_NS + 60_000_000, False, out := {})
    assert mixed.zeroed == [slot[cur - 1]] and sorted(out) == [cur - 5, cur - 1]
    out = {}
    tool.take_cache(t, now, True, out)       # the rest, once each
    assert sorted(out) == [cur - 3, cur]
    assert sum(a.hist.get(300, 0) for sl in out.values() for a in sl.values()) == 2


def test_bcc_tool_scans_the_targets_fds_for_io_uring_at_most_every_10_s(monkeypatch):
    """io_uring_fds reads every fd link of the target (~30 ms at 5,000 connections): a
    scan serves IO_URING_RESCAN_S seconds of slice lines; the end scans afresh."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("mongolatency", SAMPLES.parents[1] / "probes"
                                                  / "mongolatency.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    scans, clock = [], [1000.0]
    monkeypatch.setattr(tool, "io_uring_scan", lambda pid: scans.append(pid) or len(scans))
    monkeypatch.setattr(tool.time, "monotonic", lambda: clock[0])
    assert [tool.io_uring_fds(7) for _ in range(3)] == [1, 1, 1]
    clock[0] += tool.IO_URING_RESCAN_S
    assert tool.io_uring_fds(7) == 2
    assert tool.io_uring_fds(7, fresh=True) == 3
    assert tool.io_uring_fds(8) == 4 and scans == [7, 7, 7, 8]
