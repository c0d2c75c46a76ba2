"""Packet captures: the tshark bulk decode, pairing, the CLI, the join with the probes.

Sample tests read the real captures in samples/pcap/ (recorded by samples/pcap/record.py,
whose sidecar .json files hold the ground truths measured while recording) and need
tshark only. Their ``pcap --json`` outputs are compared with tests/expected/pcap/;
``MONGOPROBE_BLESS=1`` rewrites those.

Live tests capture real traffic with tshark (root) on loopback: pymongo against the
embedded FerretDB on its own (non-default) port, checked against the client's counts and
FerretDB's /debug/metrics; the capture and the latency probe on the same run, joined
request by request; OP_COMPRESSED traffic (FerretDB v1.24 does not negotiate
compression: its hello reply has no ``compression`` field, so pymongo's
``compressors="zlib"`` sends plain OP_MSG to it; a small compressing server of
samples/pcap/record.py exchanges zlib, snappy, zstd and noop OP_COMPRESSED instead).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from helpers.ferretdb import metrics_delta
from mongoprobe import cli as mongoprobe_cli, pcap
from mongoprobe.load import mixed_workload as mixedload
from mongoprobe.run import target
from mongoprobe.wire import decode as wire, encode as wire_encode
from mongoprobe.formats import wire_events
from mongoprobe.pcap import capture, tshark_fields

import golden

TOP = Path(__file__).resolve().parents[1]
SAMPLES = TOP / "samples" / "pcap"
WORKLOAD_COMMANDS = {"insert", "find", "update", "delete", "aggregate", "getMore", "count"}


def _load_recorder():
    spec = importlib.util.spec_from_file_location("pcap_record", SAMPLES / "record.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


record = _load_recorder()


@pytest.fixture(autouse=True)
def need_tshark() -> None:
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed (Debian: apt-get install tshark; "
                    "scripts/setup.sh does it)")


@pytest.fixture
def need_capture() -> None:
    why = capture.why_cannot_capture()
    if why:
        pytest.skip(why)


@pytest.fixture
def cli(capfd, monkeypatch):
    """``mongoprobe ARGS`` from the checkout's top, run by ``cli.main`` in this process
    (what ``python -m mongoprobe`` runs, without an interpreter start and pandas import
    a call): a CompletedProcess with the exit status and the output of fds 1 and 2."""
    monkeypatch.chdir(TOP)

    def run(*args: str) -> subprocess.CompletedProcess:
        capfd.readouterr()
        try:
            rc = mongoprobe_cli.main(list(args))
        except SystemExit as e:     # argparse's exits
            rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess(["mongoprobe", *args], rc, out, err)

    return run


def sidecar(name: str) -> dict:
    return json.loads((SAMPLES / f"{name}.json").read_text())


def sample(name: str) -> str:
    return str((SAMPLES / f"{name}.pcapng").relative_to(TOP))


def counts(d: dict) -> dict[str, int]:
    return {k: v["count"] for k, v in d.items()}


NO_LOSS = {"unmatched_replies": 0, "requests_without_reply": 0, "malformed": 0, "dropped": 0}


# --- the recorded samples ---------------------------------------------------------------------


def test_ferretdb_sample_counts_equal_client_and_metrics():
    truth = sidecar("ferretdb-mixedload")
    r = pcap.summarize(str(SAMPLES / "ferretdb-mixedload.pcapng"), truth["port"])
    s = r.summary
    assert s.lost == NO_LOSS
    # every request timed, one reply each
    assert counts(s.to_json()["by_command"]) == truth["ferretdb_metrics_delta"]
    assert s.requests_by_command == truth["ferretdb_metrics_delta"]
    for cmd, n in truth["client_counts"].items():
        assert s.requests_by_command[cmd] == n, cmd
    assert s.counts["requests"] == s.counts["replies"] == sum(truth["ferretdb_metrics_delta"].values())
    assert r.decode.problem is None and r.decode.fallback == 0


def test_message_table_columns_and_types():
    truth = sidecar("ferretdb-mixedload")
    m = pcap.messages(str(SAMPLES / "ferretdb-mixedload.pcapng"), truth["port"])
    assert list(m.columns) == tshark_fields.COLUMNS
    for c in ("frame", "msg_in_frame", "time_ns", "first_time_ns", "stream", "client_port",
              "length", "request_id", "response_to", "opcode"):
        assert m[c].dtype == np.int64, c
    assert m["flags"].dtype == "Int64" and m["time"].dtype == np.float64
    assert set(m["direction"]) == {"request", "reply"}
    req = m[m["direction"] == "request"]
    assert req["command"].notna().all() and (req["database"] == "admin").sum() > 0
    assert set(req.loc[req["command"] == "insert", "collection"]) == {"mixed0", "mixed1"}
    assert set(req.loc[req["command"] == "insert", "database"]) == {"mongoprobe"}
    rep = m[m["direction"] == "reply"]
    assert rep["command"].isna().all()
    assert (m["time"] - m["time_ns"] / 1e9).abs().max() < 1e-6
    assert (m["first_time_ns"] <= m["time_ns"]).all()
    # the requestIDs overlap across connections (mixedload numbers them 1, 2, ...)
    app = req[req["command"].isin(WORKLOAD_COMMANDS)]
    assert (app.groupby("request_id")["stream"].nunique() >= 2).any()


def test_wire_scenarios_sample():
    """Pipelined requests (several per frame: named by wire.py), a 100 KB insert spanning
    segments, moreToCome, OP_QUERY, zlib OP_COMPRESSED, exhaust streams."""
    truth = sidecar("wire-scenarios")
    path = str(SAMPLES / "wire-scenarios.pcapng")
    r = pcap.summarize(path, truth["port"])
    s = r.summary
    # the probes call the compressed find "[compressed]"; the capture decompresses it
    def renamed(d: dict) -> dict:
        out = {k: v for k, v in d.items() if k != "[compressed]"}
        out["find"] = out.get("find", 0) + d.get("[compressed]", 0)
        return out

    assert s.requests_by_command == renamed(truth["by_command"])
    assert counts(s.to_json()["by_command"]) == renamed(truth["replies_by_command"])
    assert s.counts["stream_replies"] == truth["stream_replies"]
    assert s.counts["no_reply"] == truth["no_reply"]
    assert s.lost == NO_LOSS
    assert counts(s.to_json()["by_op"]) == {"OP_MSG": 22, "OP_QUERY": 2, "OP_COMPRESSED": 2}

    m = pcap.messages(path, truth["port"])
    multi = m[m.duplicated("frame", keep=False) & (m["direction"] == "request")]
    assert len(multi) >= 5 and (multi["decoded_by"] == "wire.py").all()
    assert multi["command"].notna().all()
    big = m[m["length"] > 100_000]
    assert len(big) == 2 and (big["first_time_ns"] < big["time_ns"]).all()
    assert (big["command"] == "insert").all()
    comp = m[m["compressed"]]
    assert len(comp) == 4 and (comp["original_opcode"] == wire.OP_MSG).all()
    assert (comp["compressor"] == "zlib").all()
    assert set(comp.loc[comp["direction"] == "request", "command"]) == {"find"}
    first = m[(m["direction"] == "request") & m["exhaust_allowed"]]
    assert len(first) == 2
    p = pcap.pairs(m)
    assert p.loc[p["command"] == "exhaustTest", "more_to_come"].all()
    assert (p["latency_ns"] > 0).all()


def test_compressed_sample_every_compressor():
    truth = sidecar("compressed")
    m = pcap.messages(str(SAMPLES / "compressed.pcapng"), truth["port"])
    req = m[m["direction"] == "request"]
    for cmd, e in truth["expected"].items():
        rows = req[req["command"] == cmd]
        assert len(rows) == e["count"], cmd
        if e["compressor"] is None:
            assert not rows["compressed"].any()
            continue
        assert rows["compressed"].all() and (rows["compressor"] == e["compressor"]).all()
        assert (rows["opcode"] == wire.OP_COMPRESSED).all()
        assert (rows["original_opcode"] == wire.OP_MSG).all()
        # tshark 4.0 inflates zlib and snappy itself; zstd needs wire.py
        want = "wire.py" if e["compressor"] == "zstd" else "tshark"
        assert (rows["decoded_by"] == want).all(), (cmd, rows["decoded_by"].tolist())
        assert (rows["database"] == "test").all()
    s = pcap.summarize(str(SAMPLES / "compressed.pcapng"), truth["port"]).summary
    assert s.requests_by_command == {k: v["count"] for k, v in truth["expected"].items()}
    assert s.lost == NO_LOSS


GOLDEN = ["ferretdb-mixedload", "wire-scenarios", "compressed", "truncated", "midstream"]


@pytest.mark.parametrize("name", GOLDEN)
def test_cli_json_golden(name, cli):
    """``pcap --json`` on each sample, exactly as recorded in tests/expected/pcap/."""
    r = cli("pcap", sample(name), "--port", str(sidecar(name)["port"]), "--json")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    out = json.loads(r.stdout)
    assert {"by_command", "by_op", "lost"} <= set(out)
    assert set(out["lost"]) == {"unmatched_replies", "requests_without_reply", "malformed",
                                "dropped"}
    for g in out["by_command"].values():
        assert set(g) >= {"count", "avg_ns", "p50_ns", "p99_ns", "max_ns", "hist"}
        assert all(set(b) == {"lo_ns", "hi_ns", "count"} for b in g["hist"])
    golden.check_json(f"pcap/{name}.json", out)


def test_cli_json_keys_equal_latency_json(cli):
    """pcap --json has the top-level keys of latency --json (LatencySummary.to_json), plus
    its own "pcap" section."""
    from mongoprobe.model.latency_summary import LatencySummary

    r = cli("pcap", sample("ferretdb-mixedload"), "--port",
           str(sidecar("ferretdb-mixedload")["port"]), "--json")
    out = json.loads(r.stdout)
    assert set(out) - {"pcap"} == set(LatencySummary().to_json())


@pytest.mark.parametrize("by", ["command", "op", "stream"])
def test_cli_text(by, cli):
    r = cli("pcap", sample("ferretdb-mixedload"), "--by", by)
    assert r.returncode == 0, r.stderr
    port = sidecar("ferretdb-mixedload")["port"]
    # no --port: found from the connection openings, and said so on stderr
    assert r.stderr.startswith(f"server port {port} (destination of ")
    assert len(r.stderr.strip().splitlines()) == 1
    lines = r.stdout.splitlines()
    assert max(len(x) for x in lines) < 80
    assert any(x.startswith({"command": "command = insert", "op": "op = OP_MSG",
                             "stream": "stream 0 (client port "}[by]) for x in lines)
    assert lines[-1].startswith("lost: unmatched replies 0, requests without reply 0")


def test_truncated_capture_keeps_what_decoded(cli):
    truth = sidecar("truncated")
    r = cli("pcap", sample("truncated"), "--port", str(truth["port"]))
    assert r.returncode == 0          # something decoded: not an error exit
    assert "Traceback" not in r.stderr
    err = r.stderr.strip().splitlines()
    assert err == [f"mongoprobe: {sample('truncated')}: capture cut short in the middle "
                   f"of a packet after frame {truth['cut_in_packet'] - 1}; decoded 43 "
                   "messages before it"]
    assert "command = insert" in r.stdout


def test_capture_without_mongodb_traffic(cli):
    r = cli("pcap", sample("http-metrics"))
    assert r.returncode == 1 and r.stdout == ""
    assert "Traceback" not in r.stderr
    port = sidecar("http-metrics")["port"]
    assert r.stderr.strip().splitlines()[-1] == (
        f"mongoprobe: {sample('http-metrics')}: no MongoDB messages on TCP port {port}: its "
        "6 frames with payload do not decode as the MongoDB wire protocol")


def test_wrong_port_says_which_port(cli):
    port = sidecar("ferretdb-mixedload")["port"]
    r = cli("pcap", sample("ferretdb-mixedload"), "--port", "1234")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        f"mongoprobe: {sample('ferretdb-mixedload')}: no traffic on TCP port 1234; its "
        f"connections go to port {port}: try --port {port}"]


def test_not_a_capture(tmp_path, cli):
    bad = tmp_path / "notes.pcap"
    bad.write_text("not a capture\n")
    r = cli("pcap", str(bad))
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip() == f"mongoprobe: {bad}: not a pcap or pcapng capture " \
        "(unknown magic number)"


def test_capture_starting_inside_a_message_is_resynchronised():
    """tshark reads the tail of a 70 KB insert as a header with a huge length and would
    swallow the rest of that direction; wire.py's stream decoder recovers it."""
    truth = sidecar("midstream")
    path = str(SAMPLES / "midstream.pcapng")
    r = pcap.summarize(path, truth["port"])
    s = r.summary
    want = {}
    for c in truth["requests_after_cut"]:
        want[c] = want.get(c, 0) + 1
    assert s.requests_by_command == want
    assert counts(s.to_json()["by_command"]) == want
    # the reply to the insert cut by the capture's start has no request
    assert s.lost == {**NO_LOSS, "unmatched_replies": 1}
    assert r.decode.resynced == len(truth["requests_after_cut"])
    assert len(r.decode.warnings) == 1 and "not framed by tshark" in r.decode.warnings[0]
    m = pcap.messages(path, truth["port"])
    req = m[m["direction"] == "request"]
    assert req["command"].tolist() == truth["requests_after_cut"]
    assert (req["decoded_by"] == "wire.py").all()


def test_explore_returns_pyshark_packets():
    truth = sidecar("ferretdb-mixedload")
    pkts = pcap.explore(str(SAMPLES / "ferretdb-mixedload.pcapng"), truth["port"], 3)
    assert len(pkts) == 3
    assert all(hasattr(p, "mongo") for p in pkts)
    assert pkts[0].mongo.opcode == "2013"
    assert pkts[0].mongo.get_field("element_name") == "ismaster"


def test_pairer_across_blocks_equals_one_block():
    """Pairing block by block (as summarize streams) gives the pairs of one whole table."""
    truth = sidecar("ferretdb-mixedload")
    m = pcap.messages(str(SAMPLES / "ferretdb-mixedload.pcapng"), truth["port"])
    whole = pcap.pairs(m)
    pr = pcap.Pairer()
    parts = [pr.feed(m.iloc[i:i + 7]) for i in range(0, len(m), 7)]
    split = pd.concat(parts, ignore_index=True)
    key = ["stream", "request_id", "request_frame"]
    pd.testing.assert_frame_equal(whole.sort_values(key).reset_index(drop=True),
                                  split.sort_values(key).reset_index(drop=True))
    assert len(pr.finish()) == 0 and pr.unmatched_replies == 0


# --- live captures ---------------------------------------------------------------------------


def test_capture_ferretdb_counts(need_capture, ferretdb, tmp_path):
    """pymongo against FerretDB on its own port: the capture's counts per command equal
    the workload's and FerretDB's metrics deltas; every request has its reply."""
    assert ferretdb.port != tshark_fields.SERVER_PORT_DEFAULT
    out = tmp_path / "run.pcapng"
    before = target.request_counts(ferretdb.metrics_url)
    with capture.Capture(out, ferretdb.port) as cap:
        load = mixedload.run(ferretdb.uri, threads=4, rounds=2)
    after = target.request_counts(ferretdb.metrics_url)
    assert cap.flushed is True and cap.result.dropped == 0
    r = pcap.summarize(str(out), ferretdb.port)
    s = r.summary
    assert s.lost == NO_LOSS, r.decode
    assert s.requests_by_command == metrics_delta(before, after)
    assert counts(s.to_json()["by_command"]) == metrics_delta(before, after)
    for cmd in WORKLOAD_COMMANDS | {"endSessions", "drop"}:
        assert s.requests_by_command[cmd] == load.counts[cmd], cmd
    # client-visible latency is at least pymongo's view minus its own overhead: every
    # pair is positive and none exceeds the whole run
    p = pcap.pairs(pcap.messages(str(out), ferretdb.port))
    assert (p["latency_ns"] > 0).all() and p["latency_ns"].max() < 120e9


def _start_latency_cli(pid: int, events: Path) -> subprocess.Popen:
    """The latency CLI, started: _wait_attached waits for its banner (a capture can
    start meanwhile)."""
    return subprocess.Popen([sys.executable, "-m", "mongoprobe", "latency", "-p", str(pid),
                             "--json", "--engine", "bpftrace", "--events", str(events)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_attached(proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    for line in proc.stderr:       # "Tracing MongoDB requests of PID ..." once attached
        if line.startswith("Tracing MongoDB"):
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return
        if time.monotonic() > deadline or proc.poll() is not None:
            break
    proc.kill()
    pytest.fail(f"latency probe did not attach: {proc.stderr.read()}")


def test_join_with_probe_network_covers_server(need_capture, need_bpftrace, ferretdb, tmp_path):
    """The latency probe and a capture on the same run: every probe event finds its
    capture pair and back, and per request the network-side latency is at least the
    server-side one (the difference is transport and queueing)."""
    events_file, out = tmp_path / "events.jsonl", tmp_path / "run.pcapng"
    cli = _start_latency_cli(ferretdb.pid, events_file)
    try:
        # tshark starts while the probe compiles; the probe detaches while the capture
        # flushes
        with capture.Capture(out, ferretdb.port):
            _wait_attached(cli)
            mixedload.run(ferretdb.uri, threads=4, rounds=2)
            time.sleep(0.5)            # the last replies (endSessions) reach both
            cli.send_signal(signal.SIGINT)
    except BaseException:
        cli.send_signal(signal.SIGINT)
        raise
    finally:
        stdout, _ = cli.communicate(timeout=180)
    assert cli.returncode == 0
    events = wire_events.parse_events_json(events_file.read_text().splitlines())
    pairs = pcap.pairs(pcap.messages(str(out), ferretdb.port))
    assert len(events) > 100 and len(events) == len(pairs)
    j = pcap.join_with_probe(pairs, events)
    assert j["matched"].all(), j[~j["matched"]][["request_id", "command", "fd", "time"]]
    assert j.attrs["pcap_unmatched"] == 0
    # one capture stream per (pid, fd) at a time: the join is consistent
    assert j.groupby(["pid", "fd"])["stream"].nunique().max() >= 1
    # The probe times a reply at its send syscall's entry, before the capture stamps it
    # at the loopback tap inside that send, so the network side should cover the server
    # side; a few requests are allowed to show it shorter, by less than half the server's
    # time. (One run in many has failed this: a getMore, network 146 us against server
    # 630 us; the cause is not found.)
    bad = j[j["network_ns"] < j["server_ns"]]
    cols = ["command", "request_id", "network_ns", "server_ns"]
    assert len(bad) <= max(2, 0.01 * len(j)), bad[cols]
    assert (bad["server_ns"] - bad["network_ns"] < bad["server_ns"] // 2).all(), bad[cols]
    assert j["transport_ns"].median() > 0
    assert abs(j["clock_offset_s"].iloc[0]) < 0.01
    # the probe's summary and the capture's agree on counts per command
    result = json.loads(stdout.strip().splitlines()[-1])
    s = pcap.summary_from_pairs(pairs)
    assert counts(result["by_command"]) == counts(s.to_json()["by_command"])


def test_compressed_live(need_capture, tmp_path):
    """zlib, snappy, zstd and noop OP_COMPRESSED over a real loopback connection."""
    listener, port = record.start_compressed_server()
    out = tmp_path / "comp.pcapng"
    try:
        with capture.Capture(out, port):
            expected = record.compressed_client(port, connections=3)
    finally:
        listener.close()
    m = pcap.messages(str(out), port)
    req = m[m["direction"] == "request"]
    got = {c: {"count": int(len(g)), "compressor": g["compressor"].iloc[0]}
           for c, g in req.groupby("command")}
    assert got == expected
    s = pcap.summarize(str(out), port).summary
    assert s.lost == NO_LOSS and s.counts["replies"] == 15
    assert counts(s.to_json()["by_op"]) == {"OP_COMPRESSED": 12, "OP_MSG": 3}


def test_a_reply_to_a_no_reply_request_is_answered_not_unmatched(need_capture, tmp_path):
    """An endSessions sent with moreToCome, answered anyway (wireserver answers it as
    FerretDB does), beside moreToCome inserts it does not answer: the capture counts the
    answer per command as answered_no_reply, and nothing as unmatched."""
    import wireclient

    srv = subprocess.Popen([sys.executable, str(TOP / "tests" / "wireserver.py"), "--port",
                            "0", "--mode", "readwrite"], stdout=subprocess.PIPE, text=True)
    out = tmp_path / "answered.pcapng"
    try:
        port = int(srv.stdout.readline().split()[1])
        with capture.Capture(out, port):
            exp = wireclient.run(port, ["answered_no_reply", "fire_and_forget"], connections=3)
    finally:
        srv.terminate()
        srv.wait()
    s = pcap.summarize(str(out), port).summary
    assert s.lost == NO_LOSS
    assert s.counts["no_reply"] == exp.no_reply == 6
    assert s.counts["answered_no_reply"] == 3
    assert s.answered_no_reply == dict(exp.answered_no_reply) == {"endSessions": 3}
    assert s.to_json()["answered_no_reply_by_command"] == {"endSessions": 3}
    assert "answered though sent with moreToCome: 3 (endSessions 3)" in s.loss_lines()


def test_capture_cli_and_ring_buffer(need_capture, tmp_path):
    """``mongoprobe capture`` (-d, then a ring buffer of 2 files of 1 MB)."""
    listener, port = record.start_compressed_server()
    # the ring buffer's own server: it fills while the CLI waits out its -d
    ring_listener, ring_port = record.start_compressed_server()
    try:
        out = tmp_path / "cli.pcapng"
        proc = subprocess.Popen([sys.executable, "-m", "mongoprobe", "capture", "-o", str(out),
                                 "--port", str(port), "-d", "4"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            line = proc.stderr.readline()
            assert line.startswith(f"Capturing TCP port {port} on lo into {out}"), line
            record.compressed_client(port, connections=2)

            ring = tmp_path / "ring.pcapng"
            cap = capture.Capture(ring, ring_port, ring_mb=1, ring_files=2).start()
            try:
                big = {"insert": "coll", "documents": [{"pad": "x" * 200_000}]}
                import socket
                with socket.create_connection(("127.0.0.1", ring_port)) as s:
                    for i in range(1, 21):      # 20 x 200 KB: 4 MB through a 2 x 1 MB ring
                        s.sendall(wire_encode.encode_op_msg(i, 0, {**big, "$db": "test"}))
                        assert record._read_message(s) is not None
            finally:
                res = cap.stop()
        finally:
            stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr
        assert stdout.strip() == str(out)
        assert s_count(out, port) == 10

        assert 1 <= len(res.files) <= 2 and all(os.path.getsize(f) > 0 for f in res.files)
        # each ring file starts inside a 200 KB message: resynchronised, not lost
        tables = [pcap.messages(f, ring_port) for f in res.files]
        req = pd.concat(tables)
        req = req[req["direction"] == "request"]
        assert len(req) >= 3 and set(req["command"]) == {"insert"}
    finally:
        listener.close()
        ring_listener.close()


def s_count(path: Path, port: int) -> int:
    return pcap.summarize(str(path), port).summary.counts["requests"]


def test_ring_buffer_files_read_as_one(need_capture, tmp_path):
    """A ring buffer (tshark -b filesize:1 MB, every file kept) of 200 KB requests:
    read together, its files pair every request with its reply and need no
    resynchronisation (the files are one stream), exactly as the files concatenated by
    mergecap -a; read one by one, the messages cut by file boundaries are not."""
    listener, port = record.start_compressed_server()
    try:
        ring = tmp_path / "ring.pcapng"
        cap = capture.Capture(ring, port, ring_mb=1).start()
        try:
            big = {"insert": "coll", "documents": [{"pad": "x" * 200_000}]}
            import socket
            with socket.create_connection(("127.0.0.1", port)) as s:
                for i in range(1, 26):
                    s.sendall(wire_encode.encode_op_msg(i, 0, {**big, "$db": "test"}))
                    assert record._read_message(s) is not None
        finally:
            res = cap.stop()
    finally:
        listener.close()
    files = res.files
    assert len(files) >= 3, files
    r = pcap.summarize(files, port, workers=2)     # (split: a small capture is not)
    assert r.decode.workers == 2
    assert r.summary.requests_by_command == {"insert": 25}
    assert r.summary.counts["replies"] == 25 and r.summary.lost == NO_LOSS
    assert r.decode.warnings == [] and r.decode.resynced == 0
    merged = tmp_path / "merged.pcapng"
    subprocess.run(["mergecap", "-a", "-w", str(merged), *files], check=True,
                   capture_output=True)
    together = pcap.messages(files, port)
    pd.testing.assert_frame_equal(together, pcap.messages(str(merged), port))
    # read one by one (each file cut in a message is read three times by tshark:
    # summarize's resync), until one warns: the check below then holds whatever the rest
    alone = []
    for f in files:
        alone.append(pcap.summarize(f, port))
        if alone[-1].decode.warnings:
            break
    assert sum(a.summary.counts["replies"] for a in alone) < 25 or \
        any(a.decode.warnings for a in alone)


def test_capture_on_any_interface(need_capture, tmp_path):
    """tshark on the "any" interface writes Linux cooked frames, which the split parses
    as well as Ethernet: the same counts, and one tshark agrees."""
    from mongoprobe.pcap import pcapfile
    listener, port = record.start_compressed_server()
    out = tmp_path / "any.pcapng"
    try:
        cap = capture.Capture(out, port, iface="any").start()
        try:
            expected = record.compressed_client(port, connections=3)
            time.sleep(1.0)            # no end marker off loopback: let the block flush
        finally:
            cap.stop()
    finally:
        listener.close()
    assert pcapfile.link_types(str(out)) & {pcapfile.SLL, pcapfile.SLL2}
    r = pcap.summarize(str(out), port, workers=2)  # (split: a small capture is not)
    assert r.decode.workers == 2 and r.summary.lost == NO_LOSS
    assert r.summary.counts["replies"] == 15
    assert sum(v["count"] for v in expected.values()) == r.summary.counts["requests"]
    pd.testing.assert_frame_equal(pcap.messages(str(out), port),
                                  tshark_fields.messages(str(out), port, workers=1))
