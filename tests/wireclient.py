"""Raw-socket client scenarios for tests/wireserver.py, each returning the exact counts a
wire-protocol probe must report for it.

Every scenario opens `connections` connections at once (one thread each) and every
connection uses the same requestIDs 1, 2, 3, ...: requestIDs overlap across connections,
so a probe that keys its state by requestID alone instead of by connection miscounts.
Messages are built with mongoprobe.wire.decode's encoders (bson.encode underneath); every reply
is checked (opcode, responseTo, moreToCome), so a count that differs from the expected
one is the probe's, not the server's.

Commands are named as the probes name them (probes/README.md, "Command names"): the first
key of the OP_MSG body or of an OP_QUERY `.$cmd` query, `[compressed]` for OP_COMPRESSED.
"""

from __future__ import annotations

import socket
import ssl
import struct
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import bson

from mongoprobe.wire.decode import (
    EXHAUST_ALLOWED,
    MORE_TO_COME,
    OP_COMPRESSED,
    OP_MSG,
    OP_REPLY,
    opcode_name,
)
from mongoprobe.wire.encode import encode_op_compressed, encode_op_msg, encode_op_query

HEADER = struct.Struct("<iiii")
TIMEOUT = 10.0  # seconds for any one socket operation
LARGE_INSERT_BYTES = 100_000  # spans many 4 KiB reads and several recvmsg/readv chunks
EXHAUST_REPLIES = 5


@dataclass
class Expected:
    """What a probe must count for a run: requests per command and per opcode, timed
    (first) replies per command, exhaust stream replies, fire-and-forget requests."""

    by_command: Counter[str] = field(default_factory=Counter)
    by_op: Counter[str] = field(default_factory=Counter)
    replies_by_command: Counter[str] = field(default_factory=Counter)
    stream_replies: int = 0
    no_reply: int = 0
    # replies with ok: 0 per command, and per (command, code): -1 when the reply has none
    errors_by_command: Counter[str] = field(default_factory=Counter)
    error_codes: Counter[tuple[str, int]] = field(default_factory=Counter)
    # the commands inside OP_COMPRESSED requests
    compressed_commands: Counter[str] = field(default_factory=Counter)
    # replies the server sent anyway to requests that asked for none (moreToCome)
    answered_no_reply: Counter[str] = field(default_factory=Counter)

    @property
    def requests(self) -> int:
        return sum(self.by_command.values())

    @property
    def replies(self) -> int:
        return sum(self.replies_by_command.values())

    def __add__(self, other: Expected) -> Expected:
        return Expected(self.by_command + other.by_command, self.by_op + other.by_op,
                        self.replies_by_command + other.replies_by_command,
                        self.stream_replies + other.stream_replies, self.no_reply + other.no_reply,
                        self.errors_by_command + other.errors_by_command,
                        self.error_codes + other.error_codes,
                        self.compressed_commands + other.compressed_commands,
                        self.answered_no_reply + other.answered_no_reply)  # fmt: skip


class Conn:
    """One client connection; counts what it sends in `expected`."""

    def __init__(self, port: int, tls: ssl.SSLContext | None = None) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname="127.0.0.1")
        self.next_id = 0
        self.expected = Expected()

    def close(self) -> None:
        self.sock.close()

    def request_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def op_msg(self, body: dict, flags: int = 0, sequences: tuple = (),
               sequences_first: bool = False) -> tuple[int, bytes]:
        """An OP_MSG request (body gets "$db": "test"), counted as its first key; its kind-1
        sequences (identifier, documents) after the body or before it."""
        rid = self.request_id()
        command = next(iter(body))
        self.expected.by_command[command] += 1
        self.expected.by_op["OP_MSG"] += 1
        if flags & MORE_TO_COME:
            self.expected.no_reply += 1
        else:
            self.expected.replies_by_command[command] += 1
        return rid, encode_op_msg(rid, 0, {**body, "$db": "test"}, flags=flags,
                                  sequences=sequences, sequences_first=sequences_first)

    def op_query(self, namespace: str, query: dict) -> tuple[int, bytes]:
        rid = self.request_id()
        command = next(iter(query)) if namespace.endswith(".$cmd") else "find"
        if command == "$query":            # a wrapped command: the probes unwrap it
            command = next(iter(query["$query"]))
        self.expected.by_command[command] += 1
        self.expected.by_op["OP_QUERY"] += 1
        self.expected.replies_by_command[command] += 1
        return rid, encode_op_query(rid, 0, namespace, query)

    def legacy_fail(self, namespace: str, code: int, query_failure: bool = True) -> None:
        """An OP_QUERY the server fails (wireserver's failTest): on "db.$cmd" answered
        {ok: 0, errmsg, code}; else (a legacy query) {$err, code}, with the QueryFailure
        flag or (FerretDB's way) without it and with ok: 0. Counted as a failure of its
        command ("find" for a query) with its code."""
        rid, data = self.op_query(namespace, {"failTest": code, "queryFailure": query_failure})
        self.sock.sendall(data)
        length, _, rto, op = HEADER.unpack(self.recv_exact(16))
        body = self.recv_exact(length - 16)
        if (rto, op) != (rid, OP_REPLY):
            raise AssertionError(f"failTest reply {opcode_name(op)} to {rto}")
        flags = struct.unpack_from("<i", body)[0]
        doc = bson.decode(body[20:])
        first = "ok" if namespace.endswith(".$cmd") else "$err"
        if next(iter(doc)) != first or doc.get("code", 0) != code or \
                bool(flags & 2) != (first == "$err" and query_failure):
            raise AssertionError(f"legacy failTest {code}: flags {flags} reply {doc}")
        command = "failTest" if namespace.endswith(".$cmd") else "find"
        self.expected.errors_by_command[command] += 1
        self.expected.error_codes[command, code or -1] += 1

    def op_compressed_msg(self, body: dict, compressor: str = "zlib") -> tuple[int, bytes]:
        """An OP_COMPRESSED wrapping an OP_MSG: the probes' histograms see "[compressed]";
        its events (bcc) the command inside."""
        rid = self.request_id()
        self.expected.by_command["[compressed]"] += 1
        self.expected.by_op["OP_COMPRESSED"] += 1
        self.expected.replies_by_command["[compressed]"] += 1
        self.expected.compressed_commands[next(iter(body))] += 1
        return rid, encode_op_compressed(encode_op_msg(rid, 0, {**body, "$db": "test"}),
                                         compressor)

    def recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"server closed the connection ({len(buf)} of {n} bytes)")
            buf += chunk
        return bytes(buf)

    def reply(self, response_to: int, opcode: int = OP_MSG) -> tuple[int, bool]:
        """Read one reply, check it answers `response_to` with `opcode`; (its requestID, moreToCome)."""
        header = self.recv_exact(16)
        length, rid, rto, op = HEADER.unpack(header)
        body = self.recv_exact(length - 16)
        if (rto, op) != (response_to, opcode):
            raise AssertionError(f"reply {opcode_name(op)} to {rto}, expected {opcode_name(opcode)} to {response_to}")
        more = op == OP_MSG and bool(struct.unpack_from("<I", body)[0] & MORE_TO_COME)
        return rid, more

    def call(self, message: tuple[int, bytes], opcode: int = OP_MSG) -> None:
        rid, data = message
        self.sock.sendall(data)
        self.reply(rid, opcode)

    def fail(self, code: int, ok_type: str = "double", errmsg_bytes: int = 20) -> None:
        """A command the server fails (wireserver's failTest): its reply checked to be
        {ok: 0, ..., code}, counted as an error of "failTest" with its code."""
        rid, data = self.op_msg({"failTest": code, "okType": ok_type,
                                 "errmsgBytes": errmsg_bytes})
        self.sock.sendall(data)
        header = self.recv_exact(16)
        length, _, rto, op = HEADER.unpack(header)
        body = self.recv_exact(length - 16)
        if (rto, op) != (rid, OP_MSG):
            raise AssertionError(f"failTest reply {opcode_name(op)} to {rto}")
        doc = bson.decode(body[5 : 5 + struct.unpack_from("<i", body, 5)[0]])  # the body section
        if next(iter(doc)) != "ok" or doc["ok"] or doc.get("code", 0) != code:
            raise AssertionError(f"failTest {code}: reply {doc}")
        self.expected.errors_by_command["failTest"] += 1
        self.expected.error_codes["failTest", code or -1] += 1


# --- scenarios: what one connection does -----------------------------------------------


def plain(c: Conn) -> None:
    """Request/reply: find, a small insert, an insert whose documents come in a kind-1
    sequence before its body (the probes skip it to read the command), ping, and an
    insert of ~100 KB."""
    c.call(c.op_msg({"find": "coll", "filter": {"x": 1}}))
    c.call(c.op_msg({"insert": "coll", "documents": [{"_id": 1, "x": "small"}]}))
    c.call(c.op_msg({"insert": "coll"}, sequences=(("documents", [{"_id": 5, "x": "seq"}]),),
                    sequences_first=True))
    c.call(c.op_msg({"ping": 1}))
    c.call(c.op_msg({"insert": "coll", "documents": [{"_id": 2, "x": "y" * LARGE_INSERT_BYTES}]}))


def pipelined(c: Conn) -> None:
    """Three requests in one sendall, then their replies; then two more the same way."""
    for bodies in ([{"find": "coll"}, {"ping": 1}, {"insert": "coll", "documents": [{"_id": 3}]}],
                   [{"ping": 1}, {"find": "coll", "limit": 1}]):  # fmt: skip
        messages = [c.op_msg(body) for body in bodies]
        c.sock.sendall(b"".join(data for _, data in messages))
        for rid, _ in messages:
            c.reply(rid)


def fire_and_forget(c: Conn) -> None:
    """An insert with moreToCome (no reply), then a ping whose reply must answer the ping."""
    c.sock.sendall(c.op_msg({"insert": "coll", "documents": [{"_id": 4}]}, flags=MORE_TO_COME)[1])
    c.call(c.op_msg({"ping": 1}))


def answered_no_reply(c: Conn) -> None:
    """An endSessions with moreToCome, as the Node.js driver ends its sessions, which the
    server answers anyway (as FerretDB does): the reply is read and checked, then a find
    whose reply must answer the find."""
    rid, data = c.op_msg({"endSessions": [{"id": bytes(16)}]}, flags=MORE_TO_COME)
    c.sock.sendall(data)
    c.reply(rid)
    c.expected.answered_no_reply["endSessions"] += 1
    c.call(c.op_msg({"find": "coll", "filter": {}}))


def op_query(c: Conn) -> None:
    """Legacy OP_QUERY on admin.$cmd, answered with OP_REPLY (drivers' old handshake),
    plain and wrapped in $query with a read preference (as mongos-era drivers sent)."""
    c.call(c.op_query("admin.$cmd", {"isMaster": 1}), OP_REPLY)
    c.call(c.op_query("admin.$cmd", {"$query": {"ping": 1},
                                     "$readPreference": {"mode": "primary"}}), OP_REPLY)


def compressed(c: Conn) -> None:
    """OP_COMPRESSED requests wrapping OP_MSGs, one per codec (zlib, snappy, zstd),
    answered compressed."""
    c.call(c.op_compressed_msg({"find": "coll", "filter": {}}), OP_COMPRESSED)
    c.call(c.op_compressed_msg({"insert": "coll", "documents": [{"x": 1}]}, "snappy"),
           OP_COMPRESSED)
    c.call(c.op_compressed_msg({"createIndexes": "coll", "indexes": []}, "zstd"),
           OP_COMPRESSED)


def failures(c: Conn) -> None:
    """Commands that fail as mongod fails them ({ok: 0, errmsg, code, codeName}), ok as
    each BSON number type; a long errmsg; one with no errmsg, one with no code; between
    them, successes (ping's reply also starts with ok, 1)."""
    c.fail(59)
    c.call(c.op_msg({"ping": 1}))
    c.fail(26, "int")
    c.fail(11000, "long", errmsg_bytes=600)
    c.fail(13, "bool", errmsg_bytes=-1)
    c.call(c.op_msg({"find": "coll"}))
    c.fail(0)


def legacy_failures(c: Conn) -> None:
    """Legacy OP_QUERY requests that fail, answered OP_REPLY: a command on admin.$cmd
    ({ok: 0, errmsg, code} as mongod's legacy command reply), legacy queries answered
    {$err, code} with QueryFailure (mongod) and without the flag, ok: 0 (FerretDB); a
    successful legacy command between them."""
    c.legacy_fail("admin.$cmd", 59)
    c.call(c.op_query("admin.$cmd", {"isMaster": 1}), OP_REPLY)
    c.legacy_fail("test.coll", 5739101)
    c.legacy_fail("test.coll", 5739101, query_failure=False)
    c.legacy_fail("admin.$cmd", 0)


def exhaust(c: Conn) -> None:
    """An exhaust request answered by EXHAUST_REPLIES replies: one timed, the rest a stream."""
    rid, data = c.op_msg({"exhaustTest": EXHAUST_REPLIES}, flags=EXHAUST_ALLOWED)
    c.sock.sendall(data)
    response_to = rid
    for i in range(EXHAUST_REPLIES):
        response_to, more = c.reply(response_to)
        if more != (i < EXHAUST_REPLIES - 1):
            raise AssertionError(f"exhaust reply {i + 1} of {EXHAUST_REPLIES}: moreToCome={more}")
    c.expected.stream_replies += EXHAUST_REPLIES - 1


MANY_COMMANDS = 100


def many_commands(c: Conn) -> None:
    """MANY_COMMANDS distinct command names, one request each, within a second or two:
    more aggregates per second than bcc's per-CPU slots (lat_cache: 2 x 16 per second on
    2 CPUs), so some go to its hash map; counts must stay exact either way."""
    for i in range(MANY_COMMANDS):
        c.call(c.op_msg({f"probeCommand{i:03d}": 1}))


SCENARIOS: dict[str, Callable[[Conn], None]] = {
    "plain": plain, "pipelined": pipelined, "fire_and_forget": fire_and_forget,
    "answered_no_reply": answered_no_reply,
    "op_query": op_query, "compressed": compressed, "exhaust": exhaust,
    "failures": failures, "legacy_failures": legacy_failures, "many_commands": many_commands,
}  # fmt: skip


def short_connections(port: int, n: int, tls: ssl.SSLContext | None = None) -> None:
    """n connections, one after another, each a ping and its reply (over TLS with a `tls`
    client context): what frees a probe's per-connection state is tested with them."""
    for _ in range(n):
        c = Conn(port, tls)
        try:
            c.call(c.op_msg({"ping": 1}))
        finally:
            c.close()


def run(port: int, scenarios: list[str] | None = None, connections: int = 4,
        tls: ssl.SSLContext | None = None) -> Expected:
    """Run the scenarios (all by default, in order) on `connections` concurrent connections,
    each a fresh connection per scenario (over TLS with a `tls` client context); return
    what a probe must count. Raises if any reply is wrong or missing."""
    steps = [SCENARIOS[name] for name in (scenarios or SCENARIOS)]
    barrier = threading.Barrier(connections)
    results: list[Expected] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker() -> None:
        try:
            barrier.wait(TIMEOUT)
            for step in steps:
                c = Conn(port, tls)
                try:
                    step(c)
                finally:
                    c.close()
                with lock:
                    results.append(c.expected)
        except BaseException as exc:  # re-raised in the caller
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return sum(results, Expected())


if __name__ == "__main__":  # manual use: python tests/wireclient.py PORT [SCENARIO...]
    import sys

    print(run(int(sys.argv[1]), sys.argv[2:] or None))
