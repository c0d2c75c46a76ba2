"""A small MongoDB-wire-protocol server that reproduces real servers' syscall patterns.

The probes (probes/README.md) decode requests and replies from the buffers of the
send/recv syscalls, so what they see depends on how a server reads and writes. This
server answers every request with `{"ok": 1}` and lets the test pick the syscalls:

  mongod     recvmsg of the 16-byte header, then recvmsg of the body (looping until it
             is complete); sendmsg with one iovec holding the whole reply (mongod).
  readwrite  read() into a 4096-byte buffer, the server framing messages itself (several
             messages per read, messages spanning reads); write() replies (FerretDB).
  vector     readv() into one 16-byte header buffer, then readv() of the body; writev()
             with one iovec per reply.
  split      reads as readwrite; every reply in two write() calls (its first 10 bytes,
             then the rest), replies longer than 40 bytes in three (10, 10, the rest).
  sendto     recv_into() (the recvfrom syscall) into a 4096-byte buffer; send() replies
             (the sendto syscall).
  partial    reads as sendto; every OP_MSG reply padded past 64 KiB (a kind-1 section
             after the body) and sent with send(MSG_DONTWAIT) into a 4 KiB send buffer:
             sends that go out in part, or not at all (EAGAIN), then the rest again
             (a non-blocking server answering a large result: Netty, Go).
  partial-split  as partial, every OP_MSG reply in two such sends: its first 20 bytes
             (short of the 40 a probe reads to know whether it failed), then the rest;
             the first often finds the buffer still full (EAGAIN) and goes again.

--tls CERT KEY serves TLS (Python's ssl module: OpenSSL, libssl) with the same
patterns on the plaintext: mongod and vector read the 16-byte header, then the body
(SSL_read_ex of exactly what is missing), readwrite/split/sendto read 4096-byte chunks;
replies go out in one SSL_write_ex (split: in its pieces). The syscalls underneath are
OpenSSL's (read/write of whole records); the log traffic stays plain read/write.

--tls-bio memory (with --tls) serves TLS the way mongod does (asio's ssl::stream):
OpenSSL on memory BIOs, the socket I/O done apart from SSL_read/SSL_write. It is
asyncio's TLS transport (asyncio.start_server(ssl=...): ssl.SSLObject on ssl.MemoryBIO),
one thread for all connections: the event loop recv_into()s the ciphertext (recvfrom),
then SSL_read_ex reads up to 256 KiB of plaintext from the memory BIO whatever the
mode; each reply (split: each piece) is one SSL_write_ex into the memory BIO, whose
ciphertext the loop then send()s (sendto). No socket syscall happens inside
SSL_read_ex/SSL_write_ex. The replies are the same (Connection.replies).

Replies: OP_MSG `{"ok": 1}` with a per-connection requestID counter (1, 2, ...) and
responseTo the request's requestID. A command `{"failTest": CODE, "okType": T,
"errmsgBytes": N}` fails as mongod and FerretDB fail a command: `{"ok": 0, "errmsg":
N bytes, "code": CODE, "codeName": ...}`, ok being a double, int, long or bool (T), no
errmsg when N < 0, no code (nor codeName) when CODE is 0; the same query in an OP_QUERY
on "db.$cmd" gets that document in an OP_REPLY (mongod's legacy command reply). An OP_QUERY
{"failTest": CODE} on any other namespace (a legacy query) fails as mongod fails it:
OP_REPLY with the QueryFailure flag and `{"$err": ..., "code": CODE}`; with
`"queryFailure": false` as FerretDB does: no flag, `{"$err", "code", "ok": 0}`.
An OP_MSG with moreToCome gets no reply, but for an `endSessions`, which is answered
`{"ok": 1}` anyway, as FerretDB v1.24 answers the one the Node.js driver sends with
moreToCome when it closes (a reply to a request that asked for none). An OP_MSG
with exhaustAllowed whose body is `{"exhaustTest": N, ...}` gets N replies, all but the
last with moreToCome, each answering the previous reply's requestID (the first answers
the request). OP_QUERY gets OP_REPLY; OP_COMPRESSED (zlib) gets a zlib OP_COMPRESSED
reply (snappy and zstd alike, answered with the same codec). Every third request of a connection also writes a log line with write() and
reads the log back with read(): non-protocol traffic of the same pid, which the probes
must ignore.

USAGE: python tests/wireserver.py --port 0 --mode MODE [--log FILE] [--tls CERT KEY
       [--tls-bio socket|memory]]
Prints `READY <port>` on stdout once listening, then nothing but errors (on stderr).
Serves each connection in a thread (--tls-bio memory: an asyncio task); exits on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import select
import signal
import socket
import ssl
import struct
import sys
import threading
from collections import Counter

import bson

from mongoprobe.wire.decode import (
    MORE_TO_COME,
    OP_COMPRESSED,
    OP_MSG,
    OP_QUERY,
    decode_message,
)
from mongoprobe.wire.decode import COMPRESSORS, _decompress
from mongoprobe.wire.encode import encode_op_compressed, encode_op_msg, encode_op_reply

MODES = ("mongod", "readwrite", "vector", "split", "sendto", "partial", "partial-split")
PARTIAL = ("partial", "partial-split")  # non-blocking sends into a small send buffer
BUFFER_SIZE = 4096  # FerretDB's buffered reader
HEADER = struct.Struct("<iiii")  # messageLength, requestID, responseTo, opCode
LOG_EVERY = 3  # requests per connection between two log writes
PAD_BYTES = 64 * 1024  # partial: padding of each OP_MSG reply
SEND_BUFFER = 4096  # partial: SO_SNDBUF (the kernel doubles it)
QUERY_FAILURE = 2  # OP_REPLY responseFlags: the query failed ($err)
# commands answered as a driver (pymongo) needs them, not {"ok": 1}
DRIVER_REPLIES = ("hello", "isMaster", "ismaster", "find", "aggregate", "insert", "update",
                  "delete", "count")
SERVED: Counter[str] = Counter()  # requests served: "OPCODE command" -> n (--counts)
SERVED_LOCK = threading.Lock()


class Connection:
    """One client connection: reads whole messages and writes replies with MODE's syscalls."""

    def __init__(self, sock: socket.socket, mode: str, log: Log) -> None:
        self.sock = sock  # (MemoryBioConnection: asyncio's TransportSocket)
        self.fd = sock.fileno()
        self.tls = isinstance(sock, ssl.SSLSocket)  # plaintext through SSL_read/write_ex
        self.mode = mode
        self.log = log
        self.buffered = bytearray()  # readwrite/split/sendto: bytes read but not framed yet
        self.next_request_id = 0
        self.opcode: str | None = None  # "OP_COMPRESSED" while serving one's inner message
        self.current_opcode: str | None = None

    # --- receiving ------------------------------------------------------------------
    def _read_chunk(self) -> bytes:
        """One buffered read of at most BUFFER_SIZE bytes (b"" at EOF)."""
        if self.tls:
            return self.sock.recv(BUFFER_SIZE)  # SSL_read_ex
        if self.mode in ("sendto", *PARTIAL):
            buf = bytearray(BUFFER_SIZE)
            n = self.sock.recv_into(buf)  # recvfrom(2)
            return bytes(buf[:n])
        return os.read(self.fd, BUFFER_SIZE)  # read(2)

    def _read_exact(self, n: int) -> bytes | None:
        """Exactly n bytes with one receive per chunk the kernel hands back (mongod, vector)."""
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            if self.tls:
                got_now = self.sock.recv_into(view[got:], n - got)  # SSL_read_ex
            elif self.mode == "mongod":
                got_now = self.sock.recvmsg_into([view[got:]])[0]  # recvmsg(2), one iovec
            else:
                got_now = os.readv(self.fd, [view[got:]])  # readv(2), one iovec
            if got_now == 0:
                return None
            got += got_now
        return bytes(buf)

    def read_message(self) -> bytes | None:
        """The next whole message, or None at EOF."""
        if self.mode in ("mongod", "vector"):
            header = self._read_exact(16)
            if header is None:
                return None
            length = HEADER.unpack(header)[0]
            if length < 16:
                raise ValueError(f"messageLength {length}")
            body = self._read_exact(length - 16) if length > 16 else b""
            return None if body is None else header + body
        while True:
            if len(self.buffered) >= 4:
                length = struct.unpack_from("<i", self.buffered)[0]
                if length < 16:
                    raise ValueError(f"messageLength {length}")
                if len(self.buffered) >= length:
                    message = bytes(self.buffered[:length])
                    del self.buffered[:length]
                    return message
            chunk = self._read_chunk()
            if not chunk:
                return None
            self.buffered += chunk

    # --- sending --------------------------------------------------------------------
    def _write_all(self, data: bytes) -> None:
        """All of data with MODE's send syscall; one call unless the kernel sends less."""
        view = memoryview(data)
        while view:
            if self.tls:
                n = self.sock.send(view)  # SSL_write_ex
            elif self.mode == "mongod":
                n = self.sock.sendmsg([view])  # sendmsg(2), one iovec
            elif self.mode == "vector":
                n = os.writev(self.fd, [view])  # writev(2), one iovec
            elif self.mode == "sendto":
                n = self.sock.send(view)  # sendto(2)
            elif self.mode in PARTIAL:
                try:
                    n = self.sock.send(view, socket.MSG_DONTWAIT)  # sendto(2), maybe short
                except BlockingIOError:  # EAGAIN: nothing went out; wait, send it again
                    select.select([], [self.sock], [], 10)
                    n = 0
            else:
                n = os.write(self.fd, view)  # write(2)
            view = view[n:]

    def send(self, reply: bytes) -> None:
        if self.mode in PARTIAL and HEADER.unpack_from(reply)[3] == OP_MSG:
            reply = padded(reply)
        if self.mode in ("split", "partial-split"):
            cuts = ([20] if self.mode == "partial-split" else
                    [10, 20] if len(reply) > 40 else [10])
            for start, end in zip([0, *cuts], [*cuts, len(reply)]):
                self._write_all(reply[start:end])
        else:
            self._write_all(reply)

    def served(self, command: str) -> None:
        """Count a request as the wire carried it: (opcode, command inside)."""
        opcode = self.opcode or self.current_opcode
        with SERVED_LOCK:
            SERVED[f"{opcode} {command}"] += 1

    def driver_reply(self, body: dict) -> dict:
        """What a driver (pymongo) needs: a hello that offers the first codec of the
        client's "compression" list this server speaks; a cursor for find and
        aggregate; n for writes and count."""
        command = next(iter(body))
        if command in ("hello", "isMaster", "ismaster"):
            offered = [c for c in body.get("compression", []) if c in COMPRESSORS.values()]
            return {"isWritablePrimary" if command == "hello" else "ismaster": True,
                    "helloOk": True, "maxBsonObjectSize": 16 * 1024 * 1024,
                    "maxMessageSizeBytes": 48_000_000, "maxWriteBatchSize": 100_000,
                    "localTime": datetime.datetime.now(datetime.timezone.utc),
                    "logicalSessionTimeoutMinutes": 30, "connectionId": self.fd,
                    "minWireVersion": 0, "maxWireVersion": 21, "readOnly": False,
                    **({"compression": offered[:1]} if offered else {}), "ok": 1.0}
        if command in ("find", "aggregate"):
            return {"cursor": {"firstBatch": [], "id": bson.Int64(0),
                               "ns": f"{body.get('$db', 'test')}.{body[command]}"}, "ok": 1.0}
        return {"n": 1, "ok": 1.0}

    def reply_id(self) -> int:
        self.next_request_id += 1
        return self.next_request_id

    # --- serving --------------------------------------------------------------------
    def serve(self) -> None:
        served = 0
        while (message := self.read_message()) is not None:
            for reply in self.replies(message):
                self.send(reply)
            served += 1
            if served % LOG_EVERY == 0:
                self.log.touch(f"connection fd {self.fd}: {served} requests\n")

    def replies(self, message: bytes) -> list[bytes]:
        _, request_id, _, opcode = HEADER.unpack_from(message)
        self.current_opcode = {OP_MSG: "OP_MSG", OP_QUERY: "OP_QUERY"}.get(opcode)
        if opcode == OP_MSG:
            return self._op_msg_replies(request_id, message)
        if opcode == OP_QUERY:
            return [self._op_reply(request_id, message[16:])]
        if opcode == OP_COMPRESSED:
            original_opcode, size, compressor = struct.unpack_from("<iiB", message, 16)
            codec = COMPRESSORS.get(compressor)
            inner = _decompress(codec, message[25:], size) if codec else None
            if inner is None or len(inner) != size:
                raise ValueError(f"compressorId {compressor}: cannot decompress {size} bytes")
            plain = HEADER.pack(16 + size, request_id, 0, original_opcode) + inner
            self.opcode = "OP_COMPRESSED"
            try:
                return [encode_op_compressed(reply, codec) for reply in self.replies(plain)]
            finally:
                self.opcode = None
        raise ValueError(f"unsupported opcode {opcode}")

    def _op_reply(self, request_id: int, payload: bytes) -> bytes:
        """OP_REPLY to an OP_QUERY: {ok: 1}, a driver's hello, or a failure (the module
        docstring)."""
        end = payload.index(b"\0", 4)
        namespace = payload[4:end].decode()
        query = bson.decode(payload[end + 9 : end + 9 + struct.unpack_from("<i", payload, end + 9)[0]])
        command = next(iter(query), "") if namespace.endswith(".$cmd") else "find"
        self.served(command)
        if command in DRIVER_REPLIES and "client" in query:
            return encode_op_reply(self.reply_id(), request_id, [self.driver_reply(query)])
        if "failTest" not in query:
            return encode_op_reply(self.reply_id(), request_id, [{"ok": 1}])
        if namespace.endswith(".$cmd"):
            return encode_op_reply(self.reply_id(), request_id, [failure(query)])
        # a legacy query that failed: mongod sets QueryFailure, {$err, code}; FerretDB
        # sends {$err, code, ok: 0} without the flag
        err = {"$err": "e" * query.get("errmsgBytes", 20), "code": int(query["failTest"])}
        if query.get("queryFailure", True):
            return encode_op_reply(self.reply_id(), request_id, [err], flags=QUERY_FAILURE)
        return encode_op_reply(self.reply_id(), request_id, [{**err, "ok": 0.0}])

    def _op_msg_replies(self, request_id: int, message: bytes) -> list[bytes]:
        # the analyzer's decoder: the body wherever it is among the sections
        msg = decode_message(message)
        body = msg.body()
        if msg.more_to_come:
            if next(iter(body), "") == "endSessions":
                return [encode_op_msg(self.reply_id(), request_id, {"ok": 1})]
            return []
        self.served(next(iter(body), ""))
        if "failTest" in body:
            return [encode_op_msg(self.reply_id(), request_id, failure(body))]
        if next(iter(body), "") in DRIVER_REPLIES:
            return [encode_op_msg(self.reply_id(), request_id, self.driver_reply(body))]
        count = body.get("exhaustTest") if msg.exhaust_allowed else None
        if not isinstance(count, int) or count < 1:
            return [encode_op_msg(self.reply_id(), request_id, {"ok": 1})]
        replies, response_to = [], request_id
        for i in range(count):
            rid = self.reply_id()
            more = MORE_TO_COME if i < count - 1 else 0
            replies.append(encode_op_msg(rid, response_to, {"ok": 1}, flags=more))
            response_to = rid
        return replies


def padded(reply: bytes) -> bytes:
    """An OP_MSG reply with a kind-1 section of PAD_BYTES after its body: the same
    reply to the probes (they read the header and the body's first bytes), longer than
    the send buffer."""
    doc = bson.encode({"pad": "x" * PAD_BYTES})
    section = b"\x01" + struct.pack("<i", 4 + 4 + len(doc)) + b"pad\0" + doc
    length = HEADER.unpack_from(reply)[0] + len(section)
    return struct.pack("<i", length) + reply[4:] + section


OK_ZERO = {"double": 0.0, "int": 0, "long": bson.Int64(0), "bool": False}


def failure(body: dict) -> dict:
    """The reply to a failTest command (the module docstring)."""
    reply: dict = {"ok": OK_ZERO[body.get("okType", "double")]}
    if body.get("errmsgBytes", 20) >= 0:
        reply["errmsg"] = "e" * body.get("errmsgBytes", 20)
    if body["failTest"]:
        reply["code"] = int(body["failTest"])
        reply["codeName"] = "TestFailure"
    return reply


class MemoryBioConnection(Connection):
    """A connection of asyncio's TLS transport (--tls-bio memory): the same replies,
    read from and written to its streams; SSL_read_ex/SSL_write_ex run on memory BIOs
    and the event loop does the socket I/O."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 mode: str, log: Log) -> None:
        super().__init__(writer.get_extra_info("socket"), mode, log)
        self.reader, self.writer = reader, writer

    async def read_message_async(self) -> bytes | None:
        """The next whole message, or None at EOF (the plaintext was read by asyncio in
        chunks of up to 256 KiB, whatever the mode)."""
        try:
            header = await self.reader.readexactly(16)
            length = HEADER.unpack(header)[0]
            if length < 16:
                raise ValueError(f"messageLength {length}")
            return header + await self.reader.readexactly(length - 16)
        except asyncio.IncompleteReadError:
            return None

    def _write_all(self, data: bytes) -> None:
        self.writer.write(data)  # one SSL_write_ex, then the loop's send() of the records

    async def serve_async(self) -> None:
        served = 0
        while (message := await self.read_message_async()) is not None:
            for reply in self.replies(message):
                self.send(reply)
            await self.writer.drain()
            served += 1
            if served % LOG_EVERY == 0:
                self.log.touch(f"connection fd {self.fd}: {served} requests\n")


async def serve_memory_bio(listener: socket.socket, mode: str, log: Log,
                           tls: ssl.SSLContext) -> None:
    """--tls-bio memory: asyncio's TLS server on the listening socket."""
    async def handle_async(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        fd = writer.get_extra_info("socket").fileno()
        try:
            await MemoryBioConnection(reader, writer, mode, log).serve_async()
        except Exception as exc:  # report and drop this connection; the server goes on
            print(f"wireserver: connection fd {fd}: {exc!r}", file=sys.stderr, flush=True)
        finally:
            writer.close()

    server = await asyncio.start_server(handle_async, sock=listener, ssl=tls)
    async with server:
        await server.serve_forever()


class Log:
    """A log file written with write(2) and read back with read(2): non-protocol I/O."""

    def __init__(self, path: str) -> None:
        self.wfd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.rfd = os.open(path, os.O_RDONLY)
        self.lock = threading.Lock()

    def touch(self, line: str) -> None:
        with self.lock:
            os.write(self.wfd, f"log: {line}".encode())
            os.lseek(self.rfd, 0, os.SEEK_SET)
            os.read(self.rfd, BUFFER_SIZE)


def handle(sock: socket.socket, mode: str, log: Log, tls: ssl.SSLContext | None) -> None:
    with sock:
        try:
            if tls is not None:
                sock = tls.wrap_socket(sock, server_side=True)  # the handshake
            if mode in PARTIAL:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
            Connection(sock, mode, log).serve()
        except Exception as exc:  # report and drop this connection; the server goes on
            print(f"wireserver: connection fd {sock.fileno()}: {exc!r}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: any free one)")
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--log", default=os.devnull, help="the non-protocol log file (default: %(default)s)")
    parser.add_argument("--counts", help="at exit, write the requests served as JSON: "
                        '{"OPCODE command": n}, OP_COMPRESSED ones by the command inside')
    parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"), help="serve TLS with this certificate")
    parser.add_argument("--tls-bio", choices=("socket", "memory"), default="socket",
                        help="socket (default): a thread per connection on ssl.SSLSocket (OpenSSL "
                        "does the socket I/O); memory: asyncio's TLS transport (OpenSSL on "
                        "memory BIOs, as mongod's asio)")
    args = parser.parse_args(argv)
    if args.tls_bio == "memory" and not args.tls:
        parser.error("--tls-bio memory needs --tls CERT KEY")
    tls = None
    if args.tls:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(*args.tls)

    def stop(*_) -> None:
        if args.counts:
            with SERVED_LOCK, open(args.counts, "w") as fh:
                json.dump(dict(SERVED), fh)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    log = Log(args.log)
    listener = socket.create_server(("127.0.0.1", args.port))
    print(f"READY {listener.getsockname()[1]}", flush=True)
    if args.tls_bio == "memory":
        asyncio.run(serve_memory_bio(listener, args.mode, log, tls))
        return
    while True:
        sock, _ = listener.accept()
        threading.Thread(target=handle, args=(sock, args.mode, log, tls), daemon=True).start()


if __name__ == "__main__":
    main()
