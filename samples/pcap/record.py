#!/usr/bin/env python3
"""record.py - record the real captures in samples/pcap/ (root, tshark, FerretDB built).

USAGE: .venv/bin/python samples/pcap/record.py [NAME...]     (default: all)

  ferretdb-mixedload  FerretDB (embedded target, a free port) driven by mongoprobe's
                      mixed pymongo workload (2 threads, 1 round, overlapping requestIDs),
                      captured with mongoprobe.pcap.capture.Capture; the sidecar .json holds
                      the ground truths taken at the same time: the client's own counts
                      (command monitoring) and FerretDB's /debug/metrics deltas.
  wire-scenarios      tests/wireserver.py (readwrite mode) driven by tests/wireclient.py,
                      2 connections: pipelined requests (several per segment), an insert
                      of 100 KB (spans segments), moreToCome, OP_QUERY, zlib OP_COMPRESSED,
                      exhaust streams; the .json holds wireclient's expected counts.
  compressed          the small compressing server below: OP_MSG requests wrapped in
                      OP_COMPRESSED with zlib, snappy, zstd and noop, answered with the
                      same compressor (tshark 4.0 has no zstd: those go to wire.py).
  truncated           ferretdb-mixedload.pcapng cut in the middle of its middle packet.
  http-metrics        a capture of HTTP on loopback (FerretDB's /debug/metrics): no MongoDB.
  midstream           one connection with 70 KB inserts, the capture kept from the second
                      segment of the first insert on (editcap -r): it starts inside a
                      message, as a ring-buffer file can.

Each .pcapng is what tshark wrote; nothing is edited except the truncation.
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOP = HERE.parents[1]
sys.path.insert(0, str(TOP / "analyzer"))

from mongoprobe.wire import decode as wire, encode as wire_encode  # noqa: E402

HEADER = struct.Struct("<iiii")

# (command body, compressor or None) sent by compressed_client, in order, per connection.
COMPRESSED_REQUESTS = [
    ({"find": "coll", "filter": {"x": 1}}, "zlib"),
    ({"insert": "coll", "documents": [{"_id": 1, "s": "snappy"}]}, "snappy"),
    ({"ping": 1}, "zstd"),
    ({"count": "coll"}, "noop"),
    ({"hello": 1}, None),
]


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _read_message(sock: socket.socket) -> bytes | None:
    head = _recv_exact(sock, 16)
    if head is None:
        return None
    body = _recv_exact(sock, HEADER.unpack(head)[0] - 16)
    return None if body is None else head + body


def serve_compressed(listener: socket.socket) -> None:
    """Answer every request with {"ok": 1}, compressed as the request was. Runs until
    the listener is closed."""
    def handle(conn: socket.socket) -> None:
        with conn:
            rid = 0
            while (data := _read_message(conn)) is not None:
                msg = wire.decode_message(data)
                rid += 1
                reply = wire_encode.encode_op_msg(rid, msg.request_id, {"ok": 1})
                if msg.compressed:
                    reply = wire_encode.encode_op_compressed(reply, msg.compressor)
                conn.sendall(reply)

    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def compressed_client(port: int, connections: int = 2) -> dict:
    """Send COMPRESSED_REQUESTS on each connection; return the expected counts."""
    expected: dict[str, dict] = {}
    for _ in range(connections):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for i, (body, compressor) in enumerate(COMPRESSED_REQUESTS, 1):
                data = wire_encode.encode_op_msg(i, 0, {**body, "$db": "test"})
                if compressor:
                    data = wire_encode.encode_op_compressed(data, compressor)
                s.sendall(data)
                reply = wire.decode_message(_read_message(s))
                assert reply.response_to == i and reply.compressor == compressor
                name = next(iter(body))
                e = expected.setdefault(name, {"count": 0, "compressor": compressor})
                e["count"] += 1
    return expected


def start_compressed_server() -> tuple[socket.socket, int]:
    listener = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=serve_compressed, args=(listener,), daemon=True).start()
    return listener, listener.getsockname()[1]


# --- the recordings ------------------------------------------------------------------------


def _write_json(name: str, data: dict) -> None:
    (HERE / f"{name}.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def _tools() -> dict:
    ver = subprocess.run(["tshark", "--version"], capture_output=True, text=True).stdout
    return {"tshark": ver.splitlines()[0], "recorded": time.strftime("%Y-%m-%d")}


def record_ferretdb() -> None:
    import tempfile

    from mongoprobe.load import mixed_workload as mixedload
    from mongoprobe.run import target
    from mongoprobe.pcap.capture import Capture

    with tempfile.TemporaryDirectory() as tmp:
        info = target.start(Path(tmp), port=target.free_port())
        try:
            before = target.request_counts(info.metrics_url)
            with Capture(HERE / "ferretdb-mixedload.pcapng", info.port) as cap:
                load = mixedload.run(info.uri, threads=2, rounds=1, overlap_ids=True)
            after = target.request_counts(info.metrics_url)
        finally:
            target.stop(Path(tmp))
    metrics: dict[str, int] = {}
    for (op, cmd), n in after.items():
        if n - before.get((op, cmd), 0):
            metrics[cmd] = metrics.get(cmd, 0) + n - before.get((op, cmd), 0)
    _write_json("ferretdb-mixedload", {
        "port": info.port, "ferretdb": target.FERRETDB_VERSION, "packets": cap.result.packets,
        "client_counts": load.counts, "ferretdb_metrics_delta": metrics, **_tools()})


def record_wire() -> None:
    sys.path.insert(0, str(TOP / "tests"))
    import wireclient

    from mongoprobe.pcap.capture import Capture

    srv = subprocess.Popen([sys.executable, str(TOP / "tests" / "wireserver.py"), "--port", "0",
                            "--mode", "readwrite"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(srv.stdout.readline().split()[1])
        with Capture(HERE / "wire-scenarios.pcapng", port):
            exp = wireclient.run(port, connections=2)
    finally:
        srv.terminate()
        srv.wait()
    _write_json("wire-scenarios", {
        "port": port, "by_command": dict(exp.by_command), "by_op": dict(exp.by_op),
        "replies_by_command": dict(exp.replies_by_command),
        "stream_replies": exp.stream_replies, "no_reply": exp.no_reply, **_tools()})


def record_compressed() -> None:
    from mongoprobe.pcap.capture import Capture

    listener, port = start_compressed_server()
    try:
        with Capture(HERE / "compressed.pcapng", port):
            expected = compressed_client(port)
    finally:
        listener.close()
    _write_json("compressed", {"port": port, "expected": expected, **_tools()})


def record_truncated() -> None:
    data = (HERE / "ferretdb-mixedload.pcapng").read_bytes()
    blocks, off = [], 0
    while off < len(data):           # pcapng blocks: type, total length, ...
        btype, blen = struct.unpack_from("<II", data, off)
        blocks.append((off, btype, blen))
        off += blen
    packets = [b for b in blocks if b[1] == 6]      # Enhanced Packet Blocks
    off, _, blen = packets[len(packets) // 2]
    (HERE / "truncated.pcapng").write_bytes(data[: off + blen // 2])
    src = json.loads((HERE / "ferretdb-mixedload.json").read_text())
    _write_json("truncated", {"port": src["port"], "cut_at_byte": off + blen // 2,
                              "cut_in_packet": len(packets) // 2 + 1, **_tools()})


def record_http() -> None:
    import tempfile

    from mongoprobe.run import target
    from mongoprobe.pcap.capture import Capture

    with tempfile.TemporaryDirectory() as tmp:
        info = target.start(Path(tmp), port=target.free_port())
        try:
            with Capture(HERE / "http-metrics.pcapng", info.debug_port):
                for _ in range(2):
                    with urllib.request.urlopen(info.metrics_url, timeout=5) as r:
                        r.read(2000)
        finally:
            target.stop(Path(tmp))
    _write_json("http-metrics", {"port": info.debug_port, **_tools()})


def record_midstream() -> None:
    """One connection: pings, finds and two 70 KB inserts (each spans segments); the file
    is the real capture from the second segment of the first insert on (editcap), so it
    starts inside a message, as a ring-buffer file or a capture begun mid-run can."""
    import tempfile

    from mongoprobe.pcap.capture import Capture

    listener, port = start_compressed_server()
    big = {"insert": "coll", "documents": [{"pad": "y" * 70_000}]}
    sequence = [{"ping": 1}, big, {"ping": 1}, big, {"ping": 1}, {"find": "coll"}, {"ping": 1}]
    with tempfile.TemporaryDirectory() as tmp:
        full = Path(tmp) / "full.pcapng"
        try:
            with Capture(full, port):
                with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                    for i, body in enumerate(sequence, 1):
                        s.sendall(wire_encode.encode_op_msg(i, 0, {**body, "$db": "test"}))
                        assert _read_message(s) is not None
        finally:
            listener.close()
        segs = subprocess.run(
            ["tshark", "-r", str(full), "-n", "-d", f"tcp.port=={port},mongo", "-Y",
             "mongo.message_length > 60000", "-T", "fields", "-e", "tcp.segment",
             "-E", "occurrence=a"], capture_output=True, text=True).stdout.split()
        first_big = [int(x) for x in segs[0].split(",")]
        cut = first_big[1]
        subprocess.run(["editcap", "-r", str(full), str(HERE / "midstream.pcapng"),
                        f"{cut}-1000000"], check=True)
    after = [next(iter(b)) for b in sequence[2:]]     # requests complete after the cut
    _write_json("midstream", {"port": port, "cut_before_frame": cut,
                              "requests_after_cut": after, **_tools()})


RECORDINGS = {"ferretdb-mixedload": record_ferretdb, "wire-scenarios": record_wire,
              "compressed": record_compressed, "truncated": record_truncated,
              "http-metrics": record_http, "midstream": record_midstream}

if __name__ == "__main__":
    for name in sys.argv[1:] or list(RECORDINGS):
        RECORDINGS[name]()
        for f in HERE.glob(f"{name}.*"):
            f.chmod(0o644)          # tshark writes 0600
        print(f"recorded {name}")
