"""One corpus of wire scenarios against every decoder.

The corpus is ``tests/wireclient.py``'s SCENARIOS: requests on concurrent connections
with overlapping requestIDs, pipelining, a ~100 KB insert, moreToCome, OP_QUERY (plain
and ``$query``-wrapped), OP_COMPRESSED with each codec, an exhaust stream and failed
commands, each counted as it is sent (command names, opcodes, which requests get a reply,
how many stream replies follow). The kernel decoders -- the bpftrace, bcc and D probes --
replay it through the pattern server in ``test_probe_patterns.py``. Here the Python
decoders take the same corpus:

* ``wire.py`` on the bytes each connection sent and received (a tap on the client's
  sockets), through ``wire_stream``'s framing;
* the pcap pairer on those messages in the order they crossed;
* a live capture of the same exchange decoded by the tshark path (needs root and tshark).

The probes name an OP_COMPRESSED request ``[compressed]`` in their histograms; these
decoders decompress it and name the command inside (``Expected.compressed_commands``).
Failed replies (``ok: 0``) are read by the probes only: no Python decoder checks them.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pandas as pd
import pytest

import wireclient
from mongoprobe import pcap
from mongoprobe.wire import decode as wire
from mongoprobe.pcap import capture, tshark_fields
from mongoprobe.wire.stream import StreamDecoder
from helpers.wire import wireserver

CONNECTIONS = 4


class Tap:
    """A client socket that keeps what crossed it, in order: (ns, direction, bytes)."""

    def __init__(self, sock) -> None:
        self.sock = sock
        self.log: list[tuple[int, str, bytes]] = []

    def sendall(self, data: bytes) -> None:
        self.log.append((time.monotonic_ns(), "request", bytes(data)))
        self.sock.sendall(data)

    def recv(self, n: int) -> bytes:
        data = self.sock.recv(n)
        self.log.append((time.monotonic_ns(), "reply", data))
        return data

    def setsockopt(self, *args) -> None:
        self.sock.setsockopt(*args)

    def getsockname(self):
        return self.sock.getsockname()

    def close(self) -> None:
        self.sock.close()


def _names(by_command: Counter, compressed: Counter) -> Counter:
    """The probes' counts with ``[compressed]`` replaced by the commands inside."""
    out = Counter({k: v for k, v in by_command.items() if k != "[compressed]"})
    out.update(compressed)
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """(Expected, taps): every scenario on CONNECTIONS connections, every socket tapped."""
    taps: list[Tap] = []
    lock = threading.Lock()
    real = wireclient.socket.create_connection

    def tapped(*args, **kw):
        tap = Tap(real(*args, **kw))
        with lock:
            taps.append(tap)
        return tap

    with wireserver("readwrite", tmp_path_factory.mktemp("corpus")) as (_pid, port):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(wireclient.socket, "create_connection", tapped)
            expected = wireclient.run(port, connections=CONNECTIONS)
    return expected, taps


def _message_table(taps: list[Tap]) -> tuple[pd.DataFrame, list[StreamDecoder]]:
    """Every message wire.py decodes from the taps as tshark_fields.messages would give
    it: one row per message, "frames" numbered in the order the bytes crossed."""
    rows, decoders, seq = [], [], 0
    events = sorted((ns, stream, direction, data) for stream, tap in enumerate(taps)
                    for ns, direction, data in tap.log)
    per = {}
    for stream in range(len(taps)):
        per[stream] = {"request": StreamDecoder(), "reply": StreamDecoder()}
        decoders += per[stream].values()
    for ns, stream, direction, data in events:
        seq += 1
        for i, m in enumerate(per[stream][direction].feed(data)):
            rows.append({
                "frame": seq, "msg_in_frame": i, "time": ns / 1e9, "time_ns": ns,
                "first_time_ns": ns, "stream": stream, "client_port": 40000 + stream,
                "direction": direction, "length": m.length, "request_id": m.request_id,
                "response_to": m.response_to, "opcode": m.opcode, "flags": m.flags,
                "more_to_come": m.more_to_come, "exhaust_allowed": m.exhaust_allowed,
                "command": m.command if direction == "request" else None,
                "database": m.database, "collection": m.collection,
                "compressed": m.compressed, "original_opcode": m.original_opcode,
                "compressor": m.compressor, "decoded_by": "wire.py", "note": None})
    return pd.DataFrame(rows, columns=tshark_fields.COLUMNS), decoders


def test_wire_py_names_every_request(corpus) -> None:
    expected, taps = corpus
    assert len(taps) == CONNECTIONS * len(wireclient.SCENARIOS)
    msgs, decoders = _message_table(taps)
    assert all(d.skipped_bytes == 0 and not d.errors for d in decoders)
    req = msgs[msgs["direction"] == "request"]
    assert Counter(req["command"]) == _names(expected.by_command,
                                             expected.compressed_commands)
    ops = [("OP_COMPRESSED" if c else wire.opcode_name(int(o)))
           for o, c in zip(req["opcode"], req["compressed"])]
    assert Counter(ops) == expected.by_op
    assert int(req["more_to_come"].sum()) == expected.no_reply
    # the compressed requests: every codec, the command inside named
    comp = req[req["compressed"]]
    assert set(comp["compressor"]) == {"zlib", "snappy", "zstd"}
    assert Counter(comp["command"]) == expected.compressed_commands


def test_pcap_pairer_pairs_every_reply(corpus) -> None:
    expected, taps = corpus
    msgs, _ = _message_table(taps)
    pairer = pcap.Pairer()
    p = pcap.pairs(msgs, pairer)
    assert pairer.counts == {"requests": expected.requests, "replies": expected.replies,
                             "stream_replies": expected.stream_replies,
                             "no_reply": expected.no_reply,
                             "answered_no_reply": expected.answered_no_reply.total()}
    assert pairer.answered_no_reply == expected.answered_no_reply
    assert pairer.unmatched_replies == 0 and len(pairer.finish()) == 0
    assert Counter(p["command"]) == _names(expected.replies_by_command,
                                           expected.compressed_commands)
    assert (p["latency_ns"] > 0).all()
    # requestIDs overlap across connections: the pairs stay within their stream
    assert p.groupby("request_id")["stream"].nunique().max() > CONNECTIONS


@pytest.mark.root
def test_tshark_path_on_a_live_capture_of_the_corpus(tmp_path) -> None:
    why = capture.why_cannot_capture()
    if why:
        pytest.skip(why)
    out = tmp_path / "corpus.pcapng"
    with wireserver("readwrite", tmp_path) as (_pid, port):
        with capture.Capture(out, port) as cap:
            expected = wireclient.run(port, connections=CONNECTIONS)
    assert cap.result.dropped == 0
    r = pcap.summarize(str(out), port)
    s = r.summary
    assert s.lost == dict.fromkeys(s.lost, 0), r.decode
    assert s.requests_by_command == _names(expected.by_command, expected.compressed_commands)
    assert {k: v["count"] for k, v in s.to_json()["by_command"].items()} == \
        _names(expected.replies_by_command, expected.compressed_commands)
    assert s.counts == {"requests": expected.requests, "replies": expected.replies,
                        "stream_replies": expected.stream_replies,
                        "no_reply": expected.no_reply,
                        "answered_no_reply": expected.answered_no_reply.total()}
